-- DeepSpeed's optimizer and scheduler semantics in Engine configurations:
-- "Adam" decouples weight decay unless adam_w_mode is false, bias_correction,
-- Lamb, and the learning-rate schedules step by step against
-- tests/golden/gen_dsoptim.py.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local function config(text) return tap.temp_file(text, ".json") end

-- trains a fixed model for 3 optimizer steps with the optimizer section given;
-- returns the flattened parameters
local function train(opt_json)
  zorch.manual_seed(7)
  local model = zorch.nn.Linear(3, 2)
  local data = zorch.data.TensorDataset(zorch.randn(48, 3), zorch.randn(48, 2))
  local loader = zorch.data.DataLoader(data, {batch_size = 16})
  local e = zorch.Engine(config(([[{"train_batch_size": 16, %s}]]):format(opt_json)))
  local _, ld, opt = e:prepare(model, loader)
  for x, y in ld:iter() do
    local l = zorch.mse_loss(model(x), y)
    opt:zero_grad(); e:backward(l); opt:step()
  end
  local out = {}
  for _, p in ipairs(model:parameters()) do
    for _, v in ipairs(p:reshape({p:numel()}):totable()) do out[#out + 1] = v end
  end
  return out, getmetatable(e.inner).__name
end
local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

local adam, cls = train([["optimizer": {"type": "Adam", "params": {"lr": 0.05, "weight_decay": 0.01}}]])
local adamw = train([["optimizer": {"type": "AdamW", "params": {"lr": 0.05, "weight_decay": 0.01}}]])
tap.ok(cls == "optim.AdamW" and same(adam, adamw),
       "\"Adam\" with weight_decay 0.01 trains exactly as \"AdamW\" with weight_decay 0.01 (adam_w_mode)")
local l2 = train([["optimizer": {"type": "Adam", "params": {"lr": 0.05, "weight_decay": 0.01, "adam_w_mode": false}}]])
tap.ok(not same(adam, l2), "adam_w_mode false is L2 (coupled) Adam, which trains differently")
local l2b, cls2 = train([["optimizer": {"type": "Adam", "params": {"lr": 0.05, "weight_decay": 0.01, "adam_w_mode": false, "torch_adam": true}}]])
tap.ok(cls2 == "optim.Adam" and same(l2, l2b), "torch_adam is accepted and changes nothing")
local w0 = train([["optimizer": {"type": "AdamW", "params": {"lr": 0.05}}]])
local w00 = train([["optimizer": {"type": "AdamW", "params": {"lr": 0.05, "weight_decay": 0}}]])
tap.ok(same(w0, w00) and not same(w0, adamw), "AdamW without weight_decay decays by 0, as DeepSpeed's FusedAdam")

-- bias_correction false: p -= lr * m / (sqrt(v) + eps), checked by hand for two steps
do
  local p = zorch.tensor({1.0, -2.0}, {dtype = "f64"})
  local o = zorch.optim.Adam({p}, {lr = 0.1, bias_correction = false})
  local g = {{0.5, -1.0}, {0.25, 2.0}}
  local m, v, want = {0, 0}, {0, 0}, {1.0, -2.0}
  for s = 1, 2 do
    p.grad = zorch.tensor(g[s], {dtype = "f64"})
    o:step()
    for i = 1, 2 do
      m[i] = 0.9 * m[i] + 0.1 * g[s][i]
      v[i] = 0.999 * v[i] + 0.001 * g[s][i] ^ 2
      want[i] = want[i] - 0.1 * m[i] / (math.sqrt(v[i]) + 1e-8)
    end
  end
  local got = p:totable()
  tap.ok(math.abs(got[1] - want[1]) < 1e-12 and math.abs(got[2] - want[2]) < 1e-12,
         "bias_correction = false steps by lr * m / (sqrt(v) + eps)")
  local a = train([["optimizer": {"type": "Adam", "params": {"lr": 0.05, "bias_correction": false}}]])
  tap.ok(not same(a, train([["optimizer": {"type": "Adam", "params": {"lr": 0.05}}]])),
         "bias_correction false reaches the kernel from a config")
end

-- scheduler trajectories: the lr at construction and after each of 40 steps,
-- against DeepSpeed's formulas in tests/golden/gen_dsoptim.py
do
  local Z = debug.getregistry()["zorch.private"]
  local cases = 0
  for line in io.lines("golden/dsoptim_lr.txt") do
    local spec, base, vals, moms = line:match("^([^\t]+)\t([^\t]+)\t([^\t]+)\t?(.*)$")
    local want, wmom = {}, {}
    for v in vals:gmatch("%S+") do want[#want + 1] = tonumber(v) end
    for v in moms:gmatch("%S+") do wmom[#wmom + 1] = tonumber(v) end
    local ok, cfg = Z._read_ds_config_text('{"scheduler": ' .. spec .. '}')
    local got, worst = {}, 0
    if ok then
      local opt = {lr = tonumber(base), defaults = {betas = {0.9, 0.999}}}
      local sched = Z._make_scheduler(cfg.scheduler, opt)
      local mom = {opt.defaults.betas[1]}
      got[1] = opt.lr
      for k = 1, #want - 1 do sched.step(); got[k + 1] = opt.lr; mom[k + 1] = opt.defaults.betas[1] end
      for i = 1, #want do worst = math.max(worst, math.abs(got[i] - want[i])) end
      for i = 1, #mom do
        -- beta1 as DeepSpeed's, or untouched when the case has no momentum column
        worst = math.max(worst, math.abs(mom[i] - (wmom[i] or 0.9)))
      end
      if opt.defaults.betas[2] ~= 0.999 then worst = math.huge end
    end
    cases = cases + 1
    tap.ok(ok and worst <= 1e-15 and got[#want] == got[#want], ("%s: 40 steps as DeepSpeed's (worst %g)"):format(
      spec, worst))
  end
  tap.ok(cases >= 13, "all scheduler cases ran")
end

-- 1-bit optimizers are read (test_onebit.lua trains them); a bad
-- scheduler type lists every supported one
do
  local Z = debug.getregistry()["zorch.private"]
  for _, name in ipairs({"OneBitAdam", "ZeroOneAdam", "OneBitLamb"}) do
    local ok, cfg = Z._read_ds_config_text(('{"optimizer": {"type": "%s", "params": {"lr": 0.001}}}'):format(name))
    tap.ok(ok and cfg.optimizer.type == name and cfg.optimizer.params.lr == 0.001, ("%s is read"):format(name))
  end
  local ok, err = Z._read_ds_config_text('{"scheduler": {"type": "CyclicLR"}}')
  local all = not ok
  for _, t in ipairs({"WarmupLR", "WarmupDecayLR", "WarmupCosineLR"}) do
    all = all and err:find(t, 1, true) ~= nil
  end
  tap.ok(all, "an unknown scheduler type lists the supported ones: " .. tostring(err))
end

-- Lamb: three steps against the formula in float64, per tensor, and from a config
do
  local p = zorch.tensor({1.0, -2.0, 0.5}, {dtype = "f64"})
  local o = zorch.optim.Lamb({p}, {lr = 0.1, weight_decay = 0.01, max_coeff = 10.0, min_coeff = 0.01})
  local g = {{0.5, -1.0, 0.2}, {0.25, 2.0, -0.3}, {-0.1, 0.4, 0.9}}
  local m, v, want = {0, 0, 0}, {0, 0, 0}, {1.0, -2.0, 0.5}
  for s = 1, 3 do
    p.grad = zorch.tensor(g[s], {dtype = "f64"})
    o:step()
    local u, pn, un = {}, 0, 0
    for i = 1, 3 do
      m[i] = 0.9 * m[i] + 0.1 * g[s][i]
      v[i] = 0.999 * v[i] + 0.001 * g[s][i] ^ 2
      u[i] = (m[i] / (1 - 0.9 ^ s)) / (math.sqrt(v[i] / (1 - 0.999 ^ s)) + 1e-8) + 0.01 * want[i]
      pn, un = pn + want[i] ^ 2, un + u[i] ^ 2
    end
    local r = math.min(math.max(math.sqrt(pn) / math.sqrt(un), 0.01), 10.0)
    for i = 1, 3 do want[i] = want[i] - 0.1 * r * u[i] end
  end
  local got, worst = p:totable(), 0
  for i = 1, 3 do worst = math.max(worst, math.abs(got[i] - want[i]) / math.abs(want[i])) end
  tap.ok(worst <= 1e-6, ("Lamb steps as its formula (worst relative %g)"):format(worst))
  local z = zorch.zeros({2}, {dtype = "f64"})
  local oz = zorch.optim.Lamb({z}, {lr = 0.1})
  z.grad = zorch.tensor({1.0, -1.0}, {dtype = "f64"})
  oz:step()
  local zt = z:totable()
  tap.ok(math.abs(zt[1] + 0.1) < 1e-6 and math.abs(zt[2] - 0.1) < 1e-6, "Lamb's trust ratio is 1 for a zero parameter")
  local _, cls = train([["optimizer": {"type": "Lamb", "params": {"lr": 0.05, "weight_decay": 0.01}}]])
  tap.ok(cls == "optim.Lamb", "\"type\": \"Lamb\" makes a Lamb optimizer")
end

tap.done()
