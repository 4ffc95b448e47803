-- RMSprop and Adagrad, CosineAnnealingLR and LinearLR against PyTorch's
-- trajectories (lua/optim/schedules.txt, from lua/optim/gen_schedules.py).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local optim = zorch.optim
local ok, raises = tap.ok, tap.raises

-- ---- RMSprop, Adagrad, CosineAnnealingLR, LinearLR: PyTorch's (lua/optim/schedules.txt) -----------
do
  local want = {}
  for line in io.lines("lua/optim/schedules.txt") do
    local name, step, rest = line:match("^(%S+) (%S+) (.*)$")
    local v = {}
    for x in rest:gmatch("%S+") do v[#v + 1] = tonumber(x) end
    want[name] = want[name] or {}
    want[name][tonumber(step) or step] = v
  end
  local W = zorch.tensor({1, 3, 0.5}, {dtype = "float64"})
  local function run(name, make)
    local p = zorch.tensor({0.5, -1, 2}, {dtype = "float64", requires_grad = true})
    local opt, worst = make({p}), 0
    for step = 1, 5 do
      opt:zero_grad()
      local l = (p * p * W):sum() + p:sum()
      l:backward()
      opt:step()
      for i, v in ipairs(p:totable()) do worst = math.max(worst, math.abs(v - want[name][step][i]) / math.abs(want[name][step][i])) end
    end
    ok(worst < 1e-12, ("%s: PyTorch's parameters over 5 steps (worst relative error %.2g)"):format(name, worst))
  end
  run("rmsprop", function(ps) return optim.RMSprop(ps) end)
  run("rmsprop_mcw", function(ps) return optim.RMSprop(ps, {lr = 0.05, momentum = 0.9, centered = true,
                                                            weight_decay = 0.1, alpha = 0.9}) end)
  run("adagrad", function(ps) return optim.Adagrad(ps) end)
  run("adagrad_dw", function(ps) return optim.Adagrad(ps, {lr = 0.1, lr_decay = 0.05, weight_decay = 0.2,
                                                           initial_accumulator_value = 0.5}) end)
  local function lrs(name, make)
    local opt = optim.SGD({zorch.zeros(1, {requires_grad = true})}, {lr = 0.1})
    local sched, worst = make(opt), 0
    for i = 1, 10 do
      worst = math.max(worst, math.abs(opt.lr - want[name].lrs[i]))
      sched:step()
    end
    ok(worst < 1e-15, ("%s: PyTorch's lr over 10 steps (worst %.2g)"):format(name, worst))
  end
  lrs("cosine", function(o) return optim.lr_scheduler.CosineAnnealingLR(o, {T_max = 6, eta_min = 0.01}) end)
  lrs("linear", function(o) return optim.lr_scheduler.LinearLR(o, {start_factor = 0.25, end_factor = 1.0, total_iters = 4}) end)
  raises("CosineAnnealingLR without T_max", function() optim.lr_scheduler.CosineAnnealingLR(optim.SGD({zorch.zeros(1,
    {requires_grad = true})}, {lr = 0.1}), {}) end, "CosineAnnealingLR: option 'T_max' is required")
  raises("RMSprop with an unknown option", function() optim.RMSprop({zorch.zeros(1, {requires_grad = true})},
    {betas = 1}) end, "optim.RMSprop: unknown option 'betas'")
end
tap.done()
