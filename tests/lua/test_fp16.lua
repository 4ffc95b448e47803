-- fp16 with DeepSpeed's dynamic loss scaling: the scale's trajectory under
-- injected overflows follows DeepSpeed's rules step by step; stages 0-3 at 1,
-- 2 and 4 ranks give one process's parameters; checkpoints resume the scale; a
-- DeepSpeed JSON with "fp16": {"enabled": true} runs the reference job.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()

-- DeepSpeed's DynamicLossScaler.update_scale, written out from its rules:
-- an overflow uses up the hysteresis, then halves the scale (not below the
-- minimum); window good steps since the last overflow double it.
local function reference(cfg, overflows, n)
  local scale, hyst, iter, last = 2.0 ^ cfg.initial_scale_power, cfg.hysteresis, 0, -1
  local out = {}
  for i = 1, n do
    local over = overflows[i] == true
    if over then
      if cfg.hysteresis == 1 or hyst == 1 then scale = math.max(scale / 2, cfg.min_loss_scale)
      else hyst = hyst - 1 end
      last = iter
    else
      if cfg.consecutive_hysteresis then hyst = cfg.hysteresis end
      if (iter - last) % cfg.loss_scale_window == 0 then
        if not cfg.consecutive_hysteresis then hyst = cfg.hysteresis end
        scale = scale * 2
      end
    end
    iter = iter + 1
    out[i] = {scale = scale, skipped = over}
  end
  return out
end

local overflows = {}
for _, i in ipairs({3, 4, 5, 9, 10, 16, 17, 18, 19, 20, 21, 27}) do overflows[i] = true end

local function trajectory(extra)
  zorch.manual_seed(3)
  local cfg = {precision = "fp16", initial_scale_power = 4, loss_scale_window = 4, hysteresis = 2, min_loss_scale = 2}
  for k, v in pairs(extra or {}) do cfg[k] = v end
  local e = zorch.Engine(cfg)
  local model = zorch.nn.Linear(3, 2)
  local x, y = zorch.randn(8, 3), zorch.randn(8, 2)
  local _, _, opt = e:prepare(model, nil, zorch.optim.SGD(model:parameters(), {lr = 0.01}))
  e.overflow_steps = overflows
  local got = {}
  for i = 1, 30 do
    local before = e.steps
    opt:zero_grad()
    e:backward(zorch.mse_loss(model(x), y))
    opt:step()
    got[i] = {scale = e:loss_scale(), skipped = e.steps == before}
  end
  return got, cfg, model
end

for _, consecutive in ipairs({false, true}) do
  local got, cfg = trajectory({consecutive_hysteresis = consecutive})
  local want = reference(cfg, overflows, 30)
  local first
  for i = 1, 30 do
    if not first and (got[i].scale ~= want[i].scale or got[i].skipped ~= want[i].skipped) then first = i end
  end
  tap.ok(first == nil, ("consecutive_hysteresis %s: 30 steps' scale and skips follow DeepSpeed's rules%s"):format(
    tostring(consecutive), first and (" (step %d: scale %g skipped %s, want %g %s)"):format(first, got[first].scale,
      tostring(got[first].skipped), want[first].scale, tostring(want[first].skipped)) or ""))
end
local got = trajectory({loss_scale = 128})
local static = true
for i = 1, 30 do static = static and got[i].scale == 128 and got[i].skipped == (overflows[i] == true) end
tap.ok(static, "a static loss_scale never changes, and overflowing steps are still skipped")

-- stages 0-3 at 1, 2 and 4 ranks against one process at stage 0, overflows included
local common = "--steps 12 --accum 2 --clip 0.05 --seed 5 --samples 240 --bucket 64 --quiet --precision fp16"
local ref = tmp .. "/ref.safetensors"
local text, ok = run(("ZORCH_TEST_HOOKS=overflow=2,5 %s ../models/simple_net.lua %s --batch-size 24 --save %s"):format(
  bin, common, ref))
if not ok then print("# " .. text:gsub("\n", "\n# ")) end
tap.ok(ok, "one process, fp16, stage 0")
local want = ok and zorch.load(ref)
local function worst(a, b)
  local w = 0
  for k, v in pairs(b) do w = math.max(w, ((a[k] - v):abs() / (v:abs() + 1e-3)):max():item()) end
  return w
end
for _, n in ipairs({1, 2, 4}) do
  for stage = 0, 3 do
    local out = ("%s/n%d_s%d.safetensors"):format(tmp, n, stage)
    local t, good = run(("ZORCH_TEST_HOOKS=overflow=2,5 %s launch -n %d ../models/simple_net.lua %s --zero-stage %d --batch-size %d --save %s"):format(
      bin, n, common, stage, 24 // n, out))
    if not good then print("# " .. t:gsub("\n", "\n# ")) end
    local w = good and want and worst(zorch.load(out), want) or math.huge
    tap.ok(w <= (n == 1 and 0 or 1e-3), ("fp16 stage %d at %d rank%s equals one process (worst relative difference %.3g)"):format(
      stage, n, n == 1 and "" or "s", w))
  end
end

-- checkpoints resume the scale
do
  local _, _, model = trajectory()
  local e = zorch.Engine{precision = "fp16", initial_scale_power = 4, loss_scale_window = 4, hysteresis = 2, min_loss_scale = 2}
  zorch.manual_seed(3)
  local m = zorch.nn.Linear(3, 2)
  local x, y = zorch.randn(8, 3), zorch.randn(8, 2)
  local _, _, opt = e:prepare(m, nil, zorch.optim.SGD(m:parameters(), {lr = 0.01}))
  e.overflow_steps = {[2] = true, [3] = true, [4] = true}
  local stepped = {}
  for i = 1, 6 do opt:zero_grad(); e:backward(zorch.mse_loss(m(x), y)); stepped[i] = tostring(opt:step()) end
  tap.ok(table.concat(stepped, " ") == "true false false false true true" and e.steps == 3,
         "the prepared optimizer's step() is false for a skipped step, so true steps count engine.steps: " ..
         table.concat(stepped, " "))
  local saved = {scale = e.scaler.scale, hysteresis = e.scaler.hysteresis, attempts = e.scaler.attempts, steps = e.steps}
  e:save_checkpoint(tmp .. "/ck")
  local e2 = zorch.Engine{precision = "fp16", initial_scale_power = 4, loss_scale_window = 4, hysteresis = 2, min_loss_scale = 2}
  local m2 = zorch.nn.Linear(3, 2)
  e2:prepare(m2, nil, zorch.optim.SGD(m2:parameters(), {lr = 0.01}))
  e2:load_checkpoint(tmp .. "/ck")
  tap.ok(e2.scaler.scale == saved.scale and saved.scale ~= 16 and e2.scaler.hysteresis == saved.hysteresis
         and e2.scaler.attempts == saved.attempts and e2.steps == saved.steps,
         ("a checkpoint resumes the loss scale (%g, hysteresis %d, %d attempts, %d steps)"):format(
           e2.scaler.scale, e2.scaler.hysteresis, e2.scaler.attempts, e2.steps))
  local f = io.open(tmp .. "/ck/latest"); local tag = f and f:read("l"); if f then f:close() end
  local mf = io.open(("%s/ck/%s/manifest.json"):format(tmp, tag or "?"))
  local body = mf and mf:read("a") or ""
  if mf then mf:close() end
  tap.ok(body:find('"loss_scale"', 1, true) ~= nil, "the manifest holds the loss scale")
  local bad, n = body:gsub('"hysteresis":%s*%d+', '"hysteresis": 0')
  local okr, why = Z._read_manifest_text(bad)
  tap.ok(n == 1 and not okr and tostring(why):find("loss_scale", 1, true) ~= nil,
         "a bad loss_scale in a manifest is named: " .. tostring(why))
  _ = model
end

-- the reference job from a DeepSpeed JSON with fp16, two steps, with the step line
local cfgfile = tmp .. "/ds.json"
local f = assert(io.open(cfgfile, "w"))
f:write([[{"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1, "steps_per_print": 1,
  "fp16": {"enabled": true, "loss_scale_window": 100},
  "zero_optimization": {"stage": 2},
  "optimizer": {"type": "Adam", "params": {"lr": 0.001}}}]])
f:close()
local out, good = run(("%s launch -n 2 ../models/simple_net.lua --config %s --steps 2 --samples 64 --save %s/last.safetensors"):format(
  bin, cfgfile, tmp))
tap.ok(good and out:find("loss scale 65536", 1, true) ~= nil, "DeepSpeed JSON fp16 runs the reference job two steps, printing the loss scale")
if not good or not out:find("loss scale", 1, true) then print("# " .. out:gsub("\n", "\n# ")) end
tap.done()
