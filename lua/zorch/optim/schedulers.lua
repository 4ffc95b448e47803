-- zorch.optim.schedulers: optim.lr_scheduler, PyTorch's learning-rate schedulers
-- and DeepSpeed's (WarmupLR, WarmupDecayLR, WarmupCosineLR, OneCycle, LRRangeTest).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local bool, nonneg, options = B.bool, B.nonneg, B.options

-- Schedulers set the lr from the step count; call sched:step() after opt:step().
-- Each parameter group's lr follows the schedule from its own initial lr
-- (base_lrs; base_lr is the first group's), as PyTorch's do.
optim.lr_scheduler = {}
local Sched = {}
Sched.__index = Sched

local function base_lrs(opt)
  local b = {}
  for i, g in ipairs(opt.param_groups or {}) do b[i] = g.lr end
  if #b == 0 then b[1] = opt.lr end
  return b
end
local function new_sched(opt, fields, cls)
  fields.optimizer, fields.last_step, fields.base_lrs = opt, 0, base_lrs(opt)
  fields.base_lr = fields.base_lrs[1]
  return setmetatable(fields, cls or Sched)
end

-- every group's lr at step n
function Sched:set(n)
  local gs = self.optimizer.param_groups
  if not gs then self.optimizer.lr = self:lr_at(n, self.base_lr); return end
  for i, g in ipairs(gs) do g.lr = self:lr_at(n, self.base_lrs[i] or self.base_lr) end
end
function Sched:step()
  self.last_step = self.last_step + 1
  self:set(self.last_step)
  return self.optimizer.lr
end
function Sched:get_lr() return self.optimizer.lr end
function Sched:state_dict()
  local b = {}
  for i, x in ipairs(self.base_lrs) do b[i] = x end
  return {last_step = self.last_step, base_lr = self.base_lr, base_lrs = b}
end
function Sched:load_state_dict(s)
  local function bad(what, v)
    error(("lr_scheduler:load_state_dict: %s must be %s, got %s"):format(what, v, tostring(what == "state" and s or s[what])), 3)
  end
  if type(s) ~= "table" then bad("state", "a table") end
  if math.type(s.last_step) ~= "integer" or s.last_step < 0 then bad("last_step", "an integer >= 0") end
  if type(s.base_lr) ~= "number" or s.base_lr ~= s.base_lr then bad("base_lr", "a number") end
  local lrs = {s.base_lr}
  if s.base_lrs ~= nil then
    if type(s.base_lrs) ~= "table" then bad("base_lrs", "a list of numbers") end
    lrs = {}
    for i, x in ipairs(s.base_lrs) do
      if type(x) ~= "number" or x ~= x then bad("base_lrs", "a list of numbers") end
      lrs[i] = x
    end
  end
  self.last_step, self.base_lr, self.base_lrs = s.last_step, s.base_lr, lrs
  self:set(self.last_step)
end

-- lr = base * gamma ^ floor(step / step_size)
function optim.lr_scheduler.StepLR(opt, step_size, gamma)
  if math.type(step_size) ~= "integer" or step_size < 1 then error("StepLR: step_size must be a positive integer", 2) end
  local s = new_sched(opt, {step_size = step_size, gamma = gamma or 0.1})
  function s:lr_at(n, base) return (base or self.base_lr) * self.gamma ^ (n // self.step_size) end
  return s
end

-- Linear warm-up over `warmup` steps, then cosine decay to min_lr at `total`.
function optim.lr_scheduler.CosineWarmup(opt, warmup, total, min_lr)
  if math.type(warmup) ~= "integer" or warmup < 0 or math.type(total) ~= "integer" or total <= warmup then
    error("CosineWarmup: need integers 0 <= warmup < total", 2)
  end
  local s = new_sched(opt, {warmup = warmup, total = total, min_lr = min_lr or 0})
  function s:lr_at(n, base)
    base = base or self.base_lr
    if n < self.warmup then return base * (n + 1) / self.warmup end
    local t = math.min(1, (n - self.warmup) / (self.total - self.warmup))
    return self.min_lr + (base - self.min_lr) * 0.5 * (1 + math.cos(math.pi * t))
  end
  if warmup > 0 then s:set(0) end
  return s
end

-- Each sets opt.lr at construction (step 0), as PyTorch's do; state_dict() and
-- load_state_dict() carry the step count (and ReduceLROnPlateau's counters).

-- Options as options() reads them; the names in `required` must be given.
local function sched_options(fn, opt, given, defaults, checks, required)
  if type(opt) ~= "table" or opt.lr == nil then
    error(fn .. ": expected an optimizer (optim.SGD, optim.Adam, ...) as argument 1", 3)
  end
  for _, k in ipairs(required or {}) do
    if type(given) ~= "table" or given[k] == nil then error(("%s: option '%s' is required"):format(fn, k), 3) end
  end
  return options(fn, given, defaults, checks)
end
local num = function(v) return type(v) == "number" end
local posint = function(v) return math.type(v) == "integer" and v > 0 end
local nonnegint = function(v) return math.type(v) == "integer" and v >= 0 end
local optional = function(check) return function(v) return v == false or check(v) end end
zorch._checks_want[num], zorch._checks_want[posint], zorch._checks_want[nonnegint] =
  "a number", "an integer > 0", "an integer >= 0"

-- lr = base * gamma ^ (how many milestones are <= step); a milestone listed
-- twice counts twice.
function optim.lr_scheduler.MultiStepLR(opt, opts)
  local o = sched_options("MultiStepLR", opt, opts, {milestones = {}, gamma = 0.1},
                          {gamma = num, milestones = function(v)
                            if type(v) ~= "table" then return false end
                            for _, m in ipairs(v) do if not nonnegint(m) then return false end end
                            return true
                          end})
  local ms = {}
  for i, m in ipairs(o.milestones) do ms[i] = m end
  table.sort(ms)
  local s = new_sched(opt, {milestones = ms, gamma = o.gamma})
  function s:lr_at(n, base)
    local lr = base or self.base_lr
    for _, m in ipairs(self.milestones) do
      if m > n then break end
      lr = lr * self.gamma
    end
    return lr
  end
  s:set(0)
  return s
end

-- lr = eta_min + (base - eta_min) * (1 + cos(pi * step / T_max)) / 2, PyTorch's
-- closed form (past T_max the cosine goes on, as PyTorch's does)
function optim.lr_scheduler.CosineAnnealingLR(opt, opts)
  local o = sched_options("CosineAnnealingLR", opt, opts, {T_max = false, eta_min = 0},
                          {T_max = posint, eta_min = num}, {"T_max"})
  local s = new_sched(opt, {T_max = o.T_max, eta_min = o.eta_min})
  function s:lr_at(n, base)
    base = base or self.base_lr
    return self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * n / self.T_max)) / 2
  end
  s:set(0)
  return s
end

-- lr = base * (start_factor + (end_factor - start_factor) * min(step, total_iters) / total_iters)
function optim.lr_scheduler.LinearLR(opt, opts)
  local o = sched_options("LinearLR", opt, opts, {start_factor = 1 / 3, end_factor = 1.0, total_iters = 5},
                          {start_factor = num, end_factor = num, total_iters = posint})
  if not (o.start_factor > 0 and o.start_factor <= 1 and o.end_factor >= 0 and o.end_factor <= 1) then
    error("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]", 2)
  end
  local s = new_sched(opt, {start_factor = o.start_factor, end_factor = o.end_factor, total_iters = o.total_iters})
  function s:lr_at(n, base)
    local t = math.min(n, self.total_iters) / self.total_iters
    return (base or self.base_lr) * (self.start_factor + (self.end_factor - self.start_factor) * t)
  end
  s:set(0)
  return s
end

-- lr = base * lr_lambda(step)
function optim.lr_scheduler.LambdaLR(opt, opts)
  local o = sched_options("LambdaLR", opt, opts, {lr_lambda = false},
                          {lr_lambda = function(v) return type(v) == "function" end}, {"lr_lambda"})
  local s = new_sched(opt, {lr_lambda = o.lr_lambda})
  function s:lr_at(n, base)
    local f = self.lr_lambda(n)
    if type(f) ~= "number" then
      error(("LambdaLR: lr_lambda(%d) returned a %s, not a number"):format(n, type(f)), 3)
    end
    return (base or self.base_lr) * f
  end
  s:set(0)
  return s
end

-- The 1cycle policy, with PyTorch's phases and formulas: from max_lr /
-- div_factor up to max_lr over pct_start of the steps, then down to
-- max_lr / div_factor / final_div_factor (three_phase: back to the start, then
-- down). With cycle_momentum (default) the optimizer's momentum (SGD) or
-- beta1 (Adam, AdamW) moves the other way, between max_momentum and base_momentum.
local OneCycle = setmetatable({}, {__index = Sched})
OneCycle.__index = OneCycle

local function anneal_cos(a, b, pct) return b + (a - b) / 2.0 * (math.cos(math.pi * pct) + 1) end
local function anneal_linear(a, b, pct) return (b - a) * pct + a end

function optim.lr_scheduler.OneCycleLR(opt, opts)
  local fn = "OneCycleLR"
  local o = sched_options(fn, opt, opts,
    {max_lr = false, total_steps = false, epochs = false, steps_per_epoch = false, pct_start = 0.3,
     anneal_strategy = "cos", div_factor = 25.0, final_div_factor = 1e4, three_phase = false,
     cycle_momentum = true, base_momentum = 0.85, max_momentum = 0.95},
    {max_lr = function(v) return type(v) == "number" and v > 0 end,
     total_steps = optional(posint), epochs = optional(posint), steps_per_epoch = optional(posint),
     pct_start = function(v) return type(v) == "number" and v >= 0 and v <= 1 end,
     anneal_strategy = function(v) return v == "cos" or v == "linear" end,
     div_factor = function(v) return type(v) == "number" and v > 0 end,
     final_div_factor = function(v) return type(v) == "number" and v > 0 end,
     three_phase = bool, cycle_momentum = bool, base_momentum = num, max_momentum = num}, {"max_lr"})
  local total = o.total_steps
  if not total then
    if not (o.epochs and o.steps_per_epoch) then
      error("OneCycleLR: give total_steps, or epochs and steps_per_epoch", 2)
    end
    if o.epochs > math.maxinteger // o.steps_per_epoch then -- the product would wrap
      error(("OneCycleLR: epochs (%d) times steps_per_epoch (%d) overflows 64 bits"):format(o.epochs,
        o.steps_per_epoch), 2)
    end
    total = o.epochs * o.steps_per_epoch
  end
  local initial = o.max_lr / o.div_factor
  local lrs = {initial = initial, max = o.max_lr, min = initial / o.final_div_factor}
  local mom = {max = o.max_momentum, base = o.base_momentum}
  local phases
  if o.three_phase then
    phases = {{end_step = o.pct_start * total - 1, lr = {"initial", "max"}, mom = {"max", "base"}},
              {end_step = 2 * o.pct_start * total - 2, lr = {"max", "initial"}, mom = {"base", "max"}},
              {end_step = total - 1, lr = {"initial", "min"}, mom = {"max", "max"}}}
  else
    phases = {{end_step = o.pct_start * total - 1, lr = {"initial", "max"}, mom = {"max", "base"}},
              {end_step = total - 1, lr = {"max", "min"}, mom = {"base", "max"}}}
  end
  local d = opt.defaults
  local beta1 = type(d) == "table" and type(d.betas) == "table"
  if o.cycle_momentum then
    if type(d) ~= "table" or (d.momentum == nil and not beta1) then
      error("OneCycleLR: cycle_momentum needs an optimizer with momentum or betas (or cycle_momentum = false)", 2)
    end
  end
  local s = setmetatable({optimizer = opt, last_step = 0, total_steps = total, phases = phases, lrs = lrs,
                          moms = mom, anneal = o.anneal_strategy == "cos" and anneal_cos or anneal_linear,
                          cycle_momentum = o.cycle_momentum, beta1 = beta1}, OneCycle)
  s:apply(0)
  return s
end

-- (lr, momentum) at step n
function OneCycle:at(n)
  if n > self.total_steps then
    error(("OneCycleLR: tried to step %d times; the schedule has total_steps = %d"):format(n, self.total_steps), 3)
  end
  local start = 0.0
  for i, ph in ipairs(self.phases) do
    if n <= ph.end_step or i == #self.phases then
      local pct = (n - start) / (ph.end_step - start)
      return self.anneal(self.lrs[ph.lr[1]], self.lrs[ph.lr[2]], pct),
             self.anneal(self.moms[ph.mom[1]], self.moms[ph.mom[2]], pct)
    end
    start = ph.end_step
  end
end

function OneCycle:apply(n)
  local lr, m = self:at(n)
  self.optimizer.lr = lr -- (every group's)
  if self.cycle_momentum then
    local d = self.optimizer.defaults
    local gs = {d} -- the defaults (for groups added later) and every group
    for _, g in ipairs(self.optimizer.param_groups or {}) do gs[#gs + 1] = g end
    for _, g in ipairs(gs) do
      if self.beta1 then g.betas = {m, g.betas[2]} else g.momentum = m end
    end
  end
  return lr
end

function OneCycle:lr_at(n) return (self:at(n)) end
function OneCycle:step()
  local lr = self:apply(self.last_step + 1)
  self.last_step = self.last_step + 1
  return lr
end
function OneCycle:state_dict() return {last_step = self.last_step} end
function OneCycle:load_state_dict(sd)
  if type(sd) ~= "table" or math.type(sd.last_step) ~= "integer" then
    error("OneCycleLR:load_state_dict: expected {last_step = n}", 2)
  end
  self.last_step = sd.last_step
  self:apply(self.last_step)
end

-- Divides the lr by 1/factor once the metric passed to step(metric) has not
-- improved (by threshold, relative or absolute) for more than `patience`
-- steps; then waits `cooldown` steps; never below min_lr, and not for a change
-- smaller than eps.
local Plateau = {}
Plateau.__index = Plateau

function optim.lr_scheduler.ReduceLROnPlateau(opt, opts)
  local o = sched_options("ReduceLROnPlateau", opt, opts,
    {mode = "min", factor = 0.1, patience = 10, threshold = 1e-4, threshold_mode = "rel", cooldown = 0,
     min_lr = 0, eps = 1e-8},
    {mode = function(v) return v == "min" or v == "max" end,
     factor = function(v) return type(v) == "number" and v < 1 and v >= 0 end,
     patience = nonnegint, threshold = nonneg, cooldown = nonnegint, min_lr = nonneg, eps = nonneg,
     threshold_mode = function(v) return v == "rel" or v == "abs" end})
  local s = setmetatable({optimizer = opt, last_step = 0, best = o.mode == "min" and math.huge or -math.huge,
                          num_bad_epochs = 0, cooldown_counter = 0}, Plateau)
  for k, v in pairs(o) do s[k] = v end
  return s
end

function Plateau:is_better(a, best)
  if self.mode == "min" then
    if self.threshold_mode == "rel" then return a < best * (1.0 - self.threshold) end
    return a < best - self.threshold
  end
  if self.threshold_mode == "rel" then return a > best * (self.threshold + 1.0) end
  return a > best + self.threshold
end

-- metric: a number or a one-element tensor
function Plateau:step(metric)
  if zorch.is_tensor(metric) then
    if metric:numel() ~= 1 then
      error(("ReduceLROnPlateau:step: the metric must be a number or a one-element tensor, got shape (%s)"):format(
        table.concat(metric.shape, ", ")), 2)
    end
    metric = metric:item()
  end
  if type(metric) ~= "number" then
    error(("ReduceLROnPlateau:step: expected the metric (a number), got %s"):format(type(metric)), 2)
  end
  self.last_step = self.last_step + 1
  if self:is_better(metric, self.best) then
    self.best, self.num_bad_epochs = metric, 0
  else
    self.num_bad_epochs = self.num_bad_epochs + 1
  end
  if self.cooldown_counter > 0 then
    self.cooldown_counter = self.cooldown_counter - 1
    self.num_bad_epochs = 0
  end
  if self.num_bad_epochs > self.patience then
    local gs = self.optimizer.param_groups or {self.optimizer}
    for _, g in ipairs(gs) do -- each group's lr on its own, as PyTorch's
      local old = g.lr
      local new = math.max(old * self.factor, self.min_lr)
      if old - new > self.eps then g.lr = new end
    end
    self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
  end
  return self.optimizer.lr
end
function Plateau:get_lr() return self.optimizer.lr end
local plateau_state = {"last_step", "best", "num_bad_epochs", "cooldown_counter"}
function Plateau:state_dict()
  local sd = {}
  for _, k in ipairs(plateau_state) do sd[k] = self[k] end
  return sd
end
function Plateau:load_state_dict(sd)
  if type(sd) ~= "table" then error("ReduceLROnPlateau:load_state_dict: expected a table", 2) end
  for _, k in ipairs(plateau_state) do
    if type(sd[k]) ~= "number" then
      error(("ReduceLROnPlateau:load_state_dict: '%s' missing or not a number"):format(k), 2)
    end
    self[k] = sd[k]
  end
end

-- PyTorch's closed forms where it has them; each sets the lr at construction
-- (step 0) and carries its step count through state_dict()/load_state_dict().
local S = optim.lr_scheduler
local function new_closed(fn, opt, fields, lr_at, base)
  local s = new_sched(opt, fields)
  if base then s.base_lrs, s.base_lr = {table.unpack(base.base_lrs)}, base.base_lr end -- (a combination's)
  s.lr_at = lr_at
  s._name = fn
  s:set(0)
  return s
end

-- lr = base * gamma ^ step
function S.ExponentialLR(opt, opts)
  local o = sched_options("ExponentialLR", opt, opts, {gamma = false}, {gamma = num}, {"gamma"})
  return new_closed("ExponentialLR", opt, {gamma = o.gamma}, function(self, n, base)
    return (base or self.base_lr) * self.gamma ^ n
  end)
end

-- lr = base * factor for the first total_iters steps, then base
function S.ConstantLR(opt, opts)
  local o = sched_options("ConstantLR", opt, opts, {factor = 1 / 3, total_iters = 5},
                          {factor = function(v) return type(v) == "number" and v >= 0 and v <= 1 end,
                           total_iters = nonnegint})
  return new_closed("ConstantLR", opt, {factor = o.factor, total_iters = o.total_iters}, function(self, n, base)
    return (base or self.base_lr) * (n < self.total_iters and self.factor or 1)
  end)
end

-- lr = base * (1 - min(step, total_iters) / total_iters) ^ power
function S.PolynomialLR(opt, opts)
  local o = sched_options("PolynomialLR", opt, opts, {total_iters = 5, power = 1.0},
                          {total_iters = posint, power = num})
  return new_closed("PolynomialLR", opt, {total_iters = o.total_iters, power = o.power}, function(self, n, base)
    return (base or self.base_lr) * (1 - math.min(n, self.total_iters) / self.total_iters) ^ self.power
  end)
end

-- lr = previous lr * lr_lambda(step) at each step (after step 0); loading a
-- state recomputes base * the product of lr_lambda(1..step).
function S.MultiplicativeLR(opt, opts)
  local o = sched_options("MultiplicativeLR", opt, opts, {lr_lambda = false},
                          {lr_lambda = function(v) return type(v) == "function" end}, {"lr_lambda"})
  local s = new_sched(opt, {lr_lambda = o.lr_lambda})
  local function factor(self, k)
    local f = self.lr_lambda(k)
    if type(f) ~= "number" then
      error(("MultiplicativeLR: lr_lambda(%d) returned a %s, not a number"):format(k, type(f)), 4)
    end
    return f
  end
  function s:lr_at(n, base)
    local lr = base or self.base_lr
    for k = 1, n do lr = lr * factor(self, k) end
    return lr
  end
  function s:step()
    self.last_step = self.last_step + 1
    local f = factor(self, self.last_step)
    for _, g in ipairs(self.optimizer.param_groups or {self.optimizer}) do g.lr = g.lr * f end
    return self.optimizer.lr
  end
  return s
end

-- Cosine annealing from base to eta_min over T_i steps, restarting at base
-- after each period; the periods are T_0, T_0 T_mult, T_0 T_mult^2, ...
function S.CosineAnnealingWarmRestarts(opt, opts)
  local o = sched_options("CosineAnnealingWarmRestarts", opt, opts, {T_0 = false, T_mult = 1, eta_min = 0},
                          {T_0 = posint, T_mult = posint, eta_min = num}, {"T_0"})
  return new_closed("CosineAnnealingWarmRestarts", opt, {T_0 = o.T_0, T_mult = o.T_mult, eta_min = o.eta_min},
    function(self, n, base)
      -- len in floats: integer powers of T_mult would wrap and never pass cur
      local cur, len = n, self.T_0 + 0.0
      if self.T_mult == 1 then cur = n % len
      else while cur >= len do cur, len = cur - len, len * self.T_mult end end
      return self.eta_min + ((base or self.base_lr) - self.eta_min) * (1 + math.cos(math.pi * cur / len)) / 2
    end)
end

-- Checks schedulers given to SequentialLR and ChainedScheduler: a list of
-- closed-form schedulers (not ReduceLROnPlateau, OneCycleLR or CyclicLR), all of
-- one optimizer. They all start from the first one's base lrs, as PyTorch's
-- initial_lr makes them.
local function sub_schedulers(fn, opt, list)
  if type(list) ~= "table" or #list == 0 then
    error(("%s: schedulers must be a non-empty list of schedulers"):format(fn), 3)
  end
  for i, s in ipairs(list) do
    if type(s) ~= "table" or getmetatable(s) ~= Sched or type(s.lr_at) ~= "function" or s._own_base then
      error(("%s: scheduler %d is not a closed-form scheduler (ReduceLROnPlateau, OneCycleLR and CyclicLR cannot be combined)"):format(
        fn, i), 3)
    end
    if opt and s.optimizer ~= opt then error(("%s: scheduler %d steps another optimizer"):format(fn, i), 3) end
  end
  local first = list[1]
  for _, s in ipairs(list) do
    local b = {}
    for i, x in ipairs(first.base_lrs) do b[i] = x end
    s.base_lrs, s.base_lr = b, first.base_lr
  end
  return first.optimizer
end

-- schedulers[1] until milestones[1], then schedulers[2] from its own step 0, ...
function S.SequentialLR(opt, opts)
  local fn = "SequentialLR"
  local o = sched_options(fn, opt, opts, {schedulers = false, milestones = false},
    {schedulers = function(v) return type(v) == "table" end,
     milestones = function(v)
       if type(v) ~= "table" then return false end
       for i, m in ipairs(v) do if not posint(m) or (i > 1 and m <= v[i - 1]) then return false end end
       return true
     end}, {"schedulers", "milestones"})
  sub_schedulers(fn, opt, o.schedulers)
  if #o.milestones ~= #o.schedulers - 1 then
    error(("%s: expected %d milestones (one fewer than the schedulers), got %d"):format(fn, #o.schedulers - 1,
      #o.milestones), 2)
  end
  local scheds, ms = {}, {}
  for i, s in ipairs(o.schedulers) do scheds[i] = s end
  for i, m in ipairs(o.milestones) do ms[i] = m end
  return new_closed(fn, opt, {schedulers = scheds, milestones = ms}, function(self, n, base)
    local k, start = 1, 0
    while self.milestones[k] and n >= self.milestones[k] do start, k = self.milestones[k], k + 1 end
    return self.schedulers[k]:lr_at(n - start, base)
  end, scheds[1])
end

-- Every scheduler's factor at each step, multiplied: lr = base * prod lr_at_i(step) / base
-- (PyTorch's chaining of their multiplicative forms)
function S.ChainedScheduler(list, opt)
  local o = sub_schedulers("ChainedScheduler", opt, list)
  local scheds = {}
  for i, s in ipairs(list) do scheds[i] = s end
  return new_closed("ChainedScheduler", o, {schedulers = scheds}, function(self, n, base)
    base = base or self.base_lr
    local lr = base
    for _, s in ipairs(self.schedulers) do lr = lr * s:lr_at(n, 1.0) end
    return lr
  end, scheds[1])
end

-- Cyclical lr between base_lr and max_lr (numbers, or one per group): up over
-- step_size_up steps, down over step_size_down (default the same); mode
-- "triangular", "triangular2" (the height halves each cycle) or "exp_range"
-- (times gamma^step). With cycle_momentum (default) the momentum (SGD) or
-- beta1 (Adam) goes the other way, from max_momentum to base_momentum.
function S.CyclicLR(opt, opts)
  local fn = "CyclicLR"
  local per_group = function(v) if type(v) == "number" then return v > 0 end
    if type(v) ~= "table" or #v == 0 then return false end
    for _, x in ipairs(v) do if type(x) ~= "number" or x < 0 then return false end end
    return true
  end
  zorch._checks_want[per_group] = "a number or a list of numbers (one per group)"
  local o = sched_options(fn, opt, opts,
    {base_lr = false, max_lr = false, step_size_up = 2000, step_size_down = false, mode = "triangular", gamma = 1.0,
     cycle_momentum = true, base_momentum = 0.8, max_momentum = 0.9},
    {base_lr = per_group, max_lr = per_group, step_size_up = posint, step_size_down = optional(posint),
     mode = function(v) return v == "triangular" or v == "triangular2" or v == "exp_range" end,
     gamma = num, cycle_momentum = bool, base_momentum = num, max_momentum = num}, {"base_lr", "max_lr"})
  local groups = opt.param_groups or {opt}
  local function list(v, what)
    if type(v) == "number" then
      local l = {}
      for i = 1, #groups do l[i] = v end
      return l
    end
    if #v ~= #groups then error(("%s: %s has %d values for %d parameter groups"):format(fn, what, #v, #groups), 3) end
    return v
  end
  local base, max = list(o.base_lr, "base_lr"), list(o.max_lr, "max_lr")
  local d = opt.defaults
  local beta1 = type(d) == "table" and type(d.betas) == "table"
  if o.cycle_momentum and (type(d) ~= "table" or (d.momentum == nil and not beta1)) then
    error("CyclicLR: cycle_momentum needs an optimizer with momentum or betas (or cycle_momentum = false)", 2)
  end
  local up = o.step_size_up
  local total = up + (o.step_size_down or up)
  local s = new_sched(opt, {max_lrs = max, total_size = total, step_ratio = up / total, mode = o.mode,
                            gamma = o.gamma, cycle_momentum = o.cycle_momentum, beta1 = beta1,
                            base_momentum = o.base_momentum, max_momentum = o.max_momentum})
  s.base_lrs, s.base_lr = {table.unpack(base)}, base[1]
  s._own_base = true -- (its lr does not scale from a base: not for SequentialLR or ChainedScheduler)
  -- the fraction of the height at step n
  function s:height(n)
    local cycle = math.floor(1 + n / self.total_size)
    local x = 1 + n / self.total_size - cycle
    local f = x <= self.step_ratio and x / self.step_ratio or (x - 1) / (self.step_ratio - 1)
    if self.mode == "triangular2" then f = f / 2 ^ (cycle - 1)
    elseif self.mode == "exp_range" then f = f * self.gamma ^ n end
    return f
  end
  function s:lr_at(n, b, i)
    b = b or self.base_lr
    local m = self.max_lrs[i or 1]
    return b + (m - b) * self:height(n)
  end
  function s:set(n)
    local h = self:height(n)
    for i, g in ipairs(self.optimizer.param_groups or {self.optimizer}) do
      local b = self.base_lrs[i] or self.base_lr
      g.lr = b + (self.max_lrs[i] - b) * h
      if self.cycle_momentum then
        local m = self.max_momentum - (self.max_momentum - self.base_momentum) * h
        if self.beta1 then g.betas = {m, g.betas[2]} else g.momentum = m end
      end
    end
  end
  s:set(0)
  return s
end

-- DeepSpeed's learning-rate schedules (their documented formulas), stepping the
-- optimizer's lr after every optimizer step. Warm-up is "log" unless
-- warmup_type is "linear".
local function warm(p, step)
  local n = math.max(2, p.warmup_num_steps or 1000) -- DeepSpeed: max(2, warmup_num_steps)
  if step >= n then return 1 end
  if (p.warmup_type or "log") == "linear" then return step / n end
  return math.log(step + 1) / math.log(n)
end

local function deepspeed(kind, opt, p)
  local base = opt.lr
  local s = {optimizer = opt, last_step = 0}
  -- each parameter group's lr; WarmupCosineLR scales each group's own initial lr
  local groups = opt.param_groups
  local bases = {}
  for i, g in ipairs(groups or {}) do bases[i] = g.lr end
  if kind == "WarmupLR" then
    local lo, hi = p.warmup_min_lr or 0, p.warmup_max_lr or 0.001
    function s.lr_at(n) return n < 0 and lo or lo + (hi - lo) * warm(p, n) end
  elseif kind == "WarmupDecayLR" then
    local lo, hi, total = p.warmup_min_lr or 0, p.warmup_max_lr or 0.001, p.total_num_steps
    if math.type(total) ~= "integer" then error("Engine: scheduler WarmupDecayLR needs params.total_num_steps", 0) end
    local n = math.max(2, p.warmup_num_steps or 1000)
    function s.lr_at(k)
      if k < 0 then return lo end
      if k < n then return lo + (hi - lo) * warm(p, k) end
      return lo + (hi - lo) * math.max(0, (total - k) / math.max(1, total - n))
    end
  elseif kind == "LRRangeTest" then
    -- DeepSpeed's LRRangeTest: lr = min_lr * (1 + step_rate * interval), interval =
    -- (iteration + 1) / step_size, floored when lr_range_test_staircase
    local lo, size, rate = p.lr_range_test_min_lr or 0.001, p.lr_range_test_step_size or 2000,
                           p.lr_range_test_step_rate or 1.0
    function s.lr_at(k)
      local interval = (k + 1) / size
      if p.lr_range_test_staircase then interval = math.floor(interval) end
      return lo * (1 + rate * interval)
    end
  elseif kind == "OneCycle" then
    -- DeepSpeed's OneCycle: a triangle from cycle_min_lr up to cycle_max_lr over
    -- cycle_first_step_size steps and back over cycle_second_step_size, then the lr
    -- decays as min_lr / (1 + decay_lr_rate * k / decay_step_size); momentum runs
    -- the other way (max down to min and back), then grows by (1 + decay_mom_rate *
    -- k / decay_step_size). The stair counts are accepted and, as in DeepSpeed, unused.
    local first = p.cycle_first_step_size or 2000
    local total = first + (p.cycle_second_step_size or first)
    local ratio = first / total
    local lo, hi, lrate = p.cycle_min_lr, p.cycle_max_lr, p.decay_lr_rate or 0
    local mlo, mhi, mrate = p.cycle_min_mom or 0.8, p.cycle_max_mom or 0.9, p.decay_mom_rate or 0
    local dsize = p.decay_step_size or 0
    local function scale(k) -- _get_scale_factor
      local it = k + 1
      local x = 1 + it / total - math.floor(1 + it / total)
      if x <= ratio then return x / ratio end
      return (x - 1) / (ratio - 1)
    end
    function s.lr_at(k)
      if k < total then return lo + (hi - lo) * scale(k) end
      if dsize == 0 or lrate == 0 then return lo end
      return lo / (1 + lrate * (k - total + 1) / dsize)
    end
    function s.mom_at(k)
      if k < 0 then return mlo end -- set at construction
      if k < total then return mhi - (mhi - mlo) * scale(k) end
      if dsize == 0 or mrate == 0 then return mhi end
      return mhi * (1 + mrate * (k - total + 1) / dsize)
    end
    if p.cycle_momentum ~= false then
      -- Adam's betas[1] (its second beta is kept), or SGD's momentum
      local d = opt.defaults
      local all = {d} -- the defaults and every group
      for _, g in ipairs(groups or {}) do all[#all + 1] = g end
      if d and type(d.betas) == "table" then
        function s.set_mom(m) for _, g in ipairs(all) do g.betas = {m, g.betas[2]} end end
      elseif d and d.momentum ~= nil then
        function s.set_mom(m) for _, g in ipairs(all) do g.momentum = m end end
      end
    end
  else -- WarmupCosineLR: ratios of the optimizer's lr
    local total = p.total_num_steps
    if math.type(total) ~= "integer" then error("Engine: scheduler WarmupCosineLR needs params.total_num_steps", 0) end
    local n, wmin, cmin = math.max(2, p.warmup_num_steps or 1000), p.warmup_min_ratio or 0, p.cos_min_ratio or 0.0001
    function s.lr_at(k, b)
      b = b or base
      if k < 0 then return 0 end
      if k < n then return b * (wmin + (1 - wmin) * warm(p, k)) end
      -- DeepSpeed's get_lr_ratio (0.19.8): the progress (k - n + 1) / max(1, total - n)
      -- clamped at 1, so past total_num_steps the lr stays at cos_min_ratio
      local t = math.min(1, (k - n + 1) / math.max(1, total - n))
      return b * math.max(0, cmin + (1 - cmin) * (1 + math.cos(math.pi * t)) / 2)
    end
    s.per_group = true
  end
  -- DeepSpeed's count: last_batch_iteration starts at -1 (lr_at(-1) at construction),
  -- so after k steps the lr is lr_at(k - 1).
  -- every group's lr at k: the same for all, or (per_group) from each group's own
  function s.set_lr(k)
    if s.per_group and groups then
      for i, g in ipairs(groups) do g.lr = s.lr_at(k, bases[i]) end
    else
      opt.lr = s.lr_at(k)
    end
  end
  function s.step()
    s.last_step = s.last_step + 1
    s.set_lr(s.last_step - 1)
    if s.set_mom then s.set_mom(s.mom_at(s.last_step - 1)) end
  end
  s.set_lr(-1)
  if s.set_mom then s.set_mom(s.mom_at(-1)) end
  return s
end

-- optim.lr_scheduler.WarmupLR(opt, params), ... : DeepSpeed's schedules, params
-- as in its config's "scheduler.params" (the Engine checks those it reads).
for _, kind in ipairs({"WarmupLR", "WarmupDecayLR", "WarmupCosineLR", "OneCycle", "LRRangeTest"}) do
  optim.lr_scheduler[kind] = function(opt, params)
    if params ~= nil and type(params) ~= "table" then
      error(("optim.lr_scheduler.%s: params must be a table, got %s"):format(kind, type(params)), 2)
    end
    return deepspeed(kind, opt, params or {})
  end
end
