-- The optimizers and schedulers of lua/zorch/optim/: trajectories and lrs against
-- PyTorch's (lua/optim/optimizers.txt, from lua/optim/gen_optimizers.py), state
-- dicts, the Engine stepping as the optimizer alone, bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local nn, optim = zorch.nn, zorch.optim

local G = require("golden")("lua/optim/optimizers.txt")
local want, fixed, worst = G.want, G.fixed, G.worst

-- ---- optimizers ---------------------------------------------------------------------------------
do
  local W = zorch.tensor({1, 3, 0.5}, {dtype = "float64"})
  local function loss(p) return (p * p * W):sum() + p:sum() end
  -- five steps as PyTorch's; the state dict after two loaded into a new
  -- optimizer continues the same trajectory
  local function run(name, make)
    local p = zorch.tensor({0.5, -1, 2}, {dtype = "float64", requires_grad = true})
    local opt, e = make({p}), 0
    local q, sd
    for step = 1, 5 do
      opt:zero_grad()
      loss(p):backward()
      opt:step()
      e = math.max(e, worst(p, want[name][step]))
      if step == 2 then sd, q = opt:state_dict(), p:detach():clone():requires_grad_(true) end
    end
    ok(e < 1e-12, ("%s: PyTorch's parameters over 5 steps (worst relative error %.2g)"):format(name, e))
    local opt2 = make({q})
    opt2:load_state_dict(sd)
    for _ = 3, 5 do opt2:zero_grad(); loss(q):backward(); opt2:step() end
    ok(worst(q, want[name][5]) < 1e-12, name .. ": the state dict after 2 steps, loaded, continues PyTorch's trajectory")
    return sd
  end
  local sd = run("adamax", function(ps) return optim.Adamax(ps) end)
  ok(sd.state[1].step == 2 and zorch.is_tensor(sd.state[1].exp_avg) and zorch.is_tensor(sd.state[1].exp_inf),
     "Adamax: state names step, exp_avg, exp_inf (PyTorch's)")
  run("adamax_wd", function(ps) return optim.Adamax(ps, {lr = 0.05, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.1}) end)
  sd = run("nadam", function(ps) return optim.NAdam(ps) end)
  ok(sd.state[1].step == 2 and type(sd.state[1].mu_product) == "number" and zorch.is_tensor(sd.state[1].exp_avg_sq),
     "NAdam: state names step, mu_product, exp_avg, exp_avg_sq (PyTorch's)")
  run("nadam_wd", function(ps) return optim.NAdam(ps, {lr = 0.05, weight_decay = 0.1, momentum_decay = 0.01}) end)
  run("nadam_dwd", function(ps) return optim.NAdam(ps, {lr = 0.05, weight_decay = 0.1, decoupled_weight_decay = true}) end)
  run("radam", function(ps) return optim.RAdam(ps, {lr = 0.1}) end)
  run("radam_wd", function(ps) return optim.RAdam(ps, {lr = 0.1, weight_decay = 0.1, betas = {0.5, 0.6}}) end)
  run("radam_dwd", function(ps)
    return optim.RAdam(ps, {lr = 0.1, weight_decay = 0.1, betas = {0.5, 0.6}, decoupled_weight_decay = true}) end)
  sd = run("adadelta", function(ps) return optim.Adadelta(ps) end)
  ok(zorch.is_tensor(sd.state[1].square_avg) and zorch.is_tensor(sd.state[1].acc_delta),
     "Adadelta: state names square_avg, acc_delta (PyTorch's)")
  run("adadelta_wd", function(ps) return optim.Adadelta(ps, {lr = 0.5, rho = 0.8, eps = 1e-4, weight_decay = 0.1}) end)
  ok(sd.param_groups[1].lr == 1.0 and sd.param_groups[1].rho == 0.9 and sd.param_groups[1].eps == 1e-6,
     "Adadelta: PyTorch's defaults lr 1, rho 0.9, eps 1e-6")
  local d = optim.NAdam({zorch.zeros(1, {requires_grad = true})}).param_groups[1]
  ok(d.lr == 2e-3 and d.momentum_decay == 4e-3 and d.decoupled_weight_decay == false, "NAdam: PyTorch's defaults")

  local p1 = {zorch.zeros(1, {requires_grad = true})}
  raises("NAdam: an unknown option", function() optim.NAdam(p1, {momentum = 0.9}) end, "optim.NAdam: unknown option 'momentum'")
  raises("RAdam: bad betas", function() optim.RAdam(p1, {betas = {1.5, 0.9}}) end, "optim.RAdam: invalid betas")
  raises("Adamax: a negative lr", function() optim.Adamax(p1, {lr = -1}) end, "optim.Adamax: invalid lr")
  raises("Adadelta: rho above 1", function() optim.Adadelta(p1, {rho = 2}) end, "optim.Adadelta: invalid rho",
    "a number in [0, 1]")
  raises("NAdam: decoupled_weight_decay not a boolean", function() optim.NAdam(p1, {decoupled_weight_decay = 1}) end,
    "optim.NAdam: invalid decoupled_weight_decay")

  -- the Engine steps them as the optimizer alone
  local X = fixed({8, 4}, 40):float()
  local function net()
    zorch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
  end
  for _, make in ipairs({function(ps) return optim.Adamax(ps, {lr = 0.01}) end,
                         function(ps) return optim.NAdam(ps, {lr = 0.01, weight_decay = 0.1}) end,
                         function(ps) return optim.RAdam(ps, {lr = 0.01, decoupled_weight_decay = true, weight_decay = 0.1}) end,
                         function(ps) return optim.Adadelta(ps) end}) do
    local m1, m2 = net(), net()
    local o1 = make(m1:parameters())
    for _ = 1, 8 do o1:zero_grad(); m1(X):pow(2):mean():backward(); o1:step() end
    local e = zorch.Engine{zero_stage = 2}
    local mb, _, ob = e:prepare(m2, nil, make(m2:parameters()))
    for _ = 1, 8 do ob:zero_grad(); e:backward(mb(X):pow(2):mean()); ob:step() end
    tap.close(m2[1].weight, m1[1].weight, 1e-5, getmetatable(o1).__name .. ": the Engine at stage 2 steps as the optimizer alone")
  end
end

-- ---- schedulers ---------------------------------------------------------------------------------
do
  local S = optim.lr_scheduler
  local function sgd() return optim.SGD({zorch.zeros(1, {requires_grad = true})}, {lr = 0.1, momentum = 0.5}) end
  -- the lr at steps 0..n-1 as PyTorch's; a state dict saved halfway and loaded
  -- into a fresh scheduler continues it
  local function lrs(name, make, n, moms)
    local exp = want[name].lrs
    n = n or #exp
    local opt = sgd()
    local sched, e, me = make(opt), 0, 0
    local half, sd = n // 2, nil
    for i = 1, n do
      e = math.max(e, math.abs(opt.lr - exp[i]))
      if moms then me = math.max(me, math.abs(opt.param_groups[1].momentum - want[name].moms[i])) end
      if i == half then sd = sched:state_dict() end
      sched:step()
    end
    ok(e < 1e-15 and me < 1e-15, ("%s: PyTorch's lr%s over %d steps (worst %.2g)"):format(name,
      moms and " and momentum" or "", n, math.max(e, me)))
    local opt2 = sgd()
    local s2 = make(opt2)
    s2:load_state_dict(sd)
    e = 0
    for i = half, n do
      e = math.max(e, math.abs(opt2.lr - exp[i]))
      s2:step()
    end
    ok(e < 1e-15, ("%s: the state dict at step %d, loaded, continues it (worst %.2g)"):format(name, half - 1, e))
  end
  lrs("exponential", function(o) return S.ExponentialLR(o, {gamma = 0.8}) end)
  lrs("constant", function(o) return S.ConstantLR(o, {factor = 0.25, total_iters = 3}) end)
  lrs("polynomial", function(o) return S.PolynomialLR(o, {total_iters = 6, power = 2.0}) end)
  lrs("multiplicative", function(o)
    return S.MultiplicativeLR(o, {lr_lambda = function(e) return e % 2 == 0 and 0.9 or 0.5 end}) end)
  lrs("warm_restarts", function(o) return S.CosineAnnealingWarmRestarts(o, {T_0 = 3, T_mult = 2, eta_min = 0.01}) end)
  lrs("sequential", function(o)
    return S.SequentialLR(o, {schedulers = {S.LinearLR(o, {start_factor = 0.2, total_iters = 3}),
                                            S.ExponentialLR(o, {gamma = 0.7})}, milestones = {4}}) end)
  lrs("chained", function(o)
    return S.ChainedScheduler({S.ConstantLR(o, {factor = 0.5, total_iters = 4}), S.ExponentialLR(o, {gamma = 0.9})}) end)
  lrs("cyclic", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 3, cycle_momentum = false}) end)
  lrs("cyclic2", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 2, step_size_down = 3,
                                                   mode = "triangular2", cycle_momentum = false}) end)
  lrs("cyclic_exp", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 3, mode = "exp_range",
                                                      gamma = 0.9, cycle_momentum = false}) end)
  lrs("cyclic_mom", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 2, step_size_down = 4,
                                                      mode = "triangular2"}) end, nil, true)
  do -- each group follows the schedule from its own lr
    local a, b = zorch.zeros(1, {requires_grad = true}), zorch.zeros(1, {requires_grad = true})
    local opt = optim.SGD({{params = {a}, lr = 0.1}, {params = {b}, lr = 1.0}})
    local sch = S.ExponentialLR(opt, {gamma = 0.8})
    for _ = 1, 3 do sch:step() end
    ok(math.abs(opt.param_groups[1].lr - want.exponential.lrs[4]) < 1e-15 and
       math.abs(opt.param_groups[2].lr - 10 * want.exponential.lrs[4]) < 1e-14, "ExponentialLR: each group from its own lr")
    local c = S.CyclicLR(opt, {base_lr = {0.01, 0.02}, max_lr = {0.1, 0.2}, step_size_up = 3, cycle_momentum = false})
    c:step()
    ok(math.abs(opt.param_groups[2].lr - 2 * want.cyclic.lrs[2]) < 1e-15, "CyclicLR: base_lr and max_lr per group")
  end
  local o = sgd()
  raises("ExponentialLR without gamma", function() S.ExponentialLR(o, {}) end, "ExponentialLR: option 'gamma' is required")
  raises("ConstantLR: factor above 1", function() S.ConstantLR(o, {factor = 2}) end, "ConstantLR: invalid factor")
  raises("PolynomialLR: an unknown option", function() S.PolynomialLR(o, {steps = 3}) end,
    "PolynomialLR: unknown option 'steps'")
  raises("CosineAnnealingWarmRestarts: T_0 0", function() S.CosineAnnealingWarmRestarts(o, {T_0 = 0}) end,
    "CosineAnnealingWarmRestarts: invalid T_0")
  raises("SequentialLR: milestones that do not fit", function()
    S.SequentialLR(o, {schedulers = {S.ExponentialLR(o, {gamma = 0.5})}, milestones = {3}}) end,
    "SequentialLR: expected 0 milestones")
  raises("SequentialLR: a plateau scheduler", function()
    S.SequentialLR(o, {schedulers = {S.ReduceLROnPlateau(o), S.ExponentialLR(o, {gamma = 0.5})}, milestones = {3}}) end,
    "SequentialLR: scheduler 1 is not a closed-form scheduler")
  raises("ChainedScheduler: a CyclicLR", function()
    S.ChainedScheduler({S.CyclicLR(o, {base_lr = 0.1, max_lr = 1}), S.ExponentialLR(o, {gamma = 0.5})}) end,
    "ChainedScheduler: scheduler 1 is not a closed-form scheduler")
  raises("ChainedScheduler: an empty list", function() S.ChainedScheduler({}) end, "ChainedScheduler: schedulers")
  raises("CyclicLR without max_lr", function() S.CyclicLR(o, {base_lr = 0.1}) end, "CyclicLR: option 'max_lr' is required")
  raises("CyclicLR: a bad mode", function() S.CyclicLR(o, {base_lr = 0.1, max_lr = 1, mode = "sine"}) end,
    "CyclicLR: invalid mode")
  raises("CyclicLR: momentum on an optimizer without it", function()
    S.CyclicLR(optim.Adagrad({zorch.zeros(1, {requires_grad = true})}), {base_lr = 0.1, max_lr = 1}) end,
    "CyclicLR: cycle_momentum needs")
end

tap.done()
