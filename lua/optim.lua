-- zorch.optim: optimizers on the fused C kernels (one pass over each
-- parameter, PyTorch's formulas), and learning-rate schedulers.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = {}

local Optimizer = {}
Optimizer.__index = Optimizer

local function check_params(fn, params)
  if type(params) ~= "table" or #params == 0 then
    error(fn .. ": expected a non-empty list of parameters (model:parameters())", 3)
  end
  local first = {}
  for i, p in ipairs(params) do
    if not zorch.is_tensor(p) then error(("%s: parameter %d is a %s, not a tensor"):format(fn, i, type(p)), 3) end
    if first[p] then -- it would be updated twice per step
      error(("%s: parameter %d is parameter %d again (list each tensor once: model:parameters() does)"):format(
        fn, i, first[p]), 3)
    end
    first[p] = i
  end
end

-- Reads options against their defaults; unknown keys and bad values are errors.
local function options(fn, given, defaults, checks)
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  if given ~= nil and type(given) ~= "table" then error(fn .. ": options must be a table", 3) end
  for k, v in pairs(given or {}) do
    if defaults[k] == nil then
      local names = {}
      for n in pairs(defaults) do names[#names + 1] = n end
      table.sort(names)
      error(("%s: unknown option '%s' (allowed: %s)"):format(fn, tostring(k), table.concat(names, ", ")), 3)
    end
    o[k] = v
  end
  for k, ok in pairs(checks) do
    if not ok(o[k]) then
      error(("%s: invalid %s: expected %s, got %s"):format(fn, k, zorch._checks_want[ok] or "another value",
        zorch._readable(o[k])), 3)
    end
  end
  return o
end

local nonneg = function(v) return type(v) == "number" and v >= 0 end
local unit = function(v) return type(v) == "number" and v >= 0 and v < 1 end
local betas = function(v) return type(v) == "table" and unit(v[1]) and unit(v[2]) end
local bool = function(v) return type(v) == "boolean" end
-- what each check expects, for messages (the scheduler checks below add theirs)
zorch._checks_want = setmetatable({[nonneg] = "a number >= 0", [unit] = "a number in [0, 1)",
                                   [betas] = "two numbers in [0, 1)", [bool] = "true or false"}, {__mode = "k"})

function Optimizer:zero_grad()
  for _, p in ipairs(self.params) do p.grad = nil end
end

function Optimizer:state_dict()
  local st = {}
  for i, s in pairs(self.state) do
    local c = {}
    for k, v in pairs(s) do c[k] = zorch.is_tensor(v) and v:clone() or v end
    st[i] = c
  end
  local group = {}
  for k, v in pairs(self.defaults) do group[k] = v end
  group.lr = self.lr
  return {state = st, param_groups = {group}}
end

function Optimizer:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.state) ~= "table" then error("load_state_dict: expected {state=, param_groups=}", 2) end
  for i, s in pairs(sd.state) do
    local p = self.params[i]
    if not p then error(("load_state_dict: state for parameter %d, but the optimizer has %d"):format(i, #self.params), 2) end
    local c = {}
    for k, v in pairs(s) do
      if zorch.is_tensor(v) and table.concat(v.shape, ",") ~= table.concat(p.shape, ",") then
        error(("load_state_dict: state '%s' of parameter %d has the wrong shape"):format(k, i), 2)
      end
      c[k] = zorch.is_tensor(v) and v:clone() or v
    end
    self.state[i] = c
  end
  if sd.param_groups and sd.param_groups[1] and sd.param_groups[1].lr then self.lr = sd.param_groups[1].lr end
end

local function show(v)
  if type(v) == "table" then
    local parts = {}
    for i, x in ipairs(v) do parts[i] = show(x) end
    return "(" .. table.concat(parts, ", ") .. ")"
  end
  return math.type(v) == "float" and ("%g"):format(v) or tostring(v)
end

-- optim.Adam (2 parameters, 6 elements)
--   group 1: lr=0.001, amsgrad=false, betas=(0.9, 0.999), eps=1e-08, weight_decay=0
Optimizer.__tostring = function(self)
  local numel = 0
  for _, p in ipairs(self.params) do numel = numel + p:numel() end
  local keys = {}
  for k in pairs(self.defaults) do if k ~= "lr" then keys[#keys + 1] = k end end
  table.sort(keys)
  local hp = {"lr=" .. show(self.lr)}
  for _, k in ipairs(keys) do hp[#hp + 1] = k .. "=" .. show(self.defaults[k]) end
  return ("%s (%d parameter%s, %d elements)\n  group 1: %s"):format(getmetatable(self).__name, #self.params,
    #self.params == 1 and "" or "s", numel, table.concat(hp, ", "))
end

local function new(cls, params, o)
  return setmetatable({params = params, defaults = o, lr = o.lr, state = {}}, cls)
end

-- Adam and AdamW (decoupled weight decay). bias_correction = false (DeepSpeed's
-- option) steps by lr * m / (sqrt(v) + eps).
local function adam_class(name, decoupled, wd_default)
  local cls = setmetatable({}, {__index = Optimizer})
  cls.__index = cls
  cls.__name = name
  cls.__tostring = Optimizer.__tostring
  local mt = getmetatable(cls)
  mt.__call = function(_, params, opts)
    check_params(name, params)
    local o = options(name, opts, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = wd_default,
                                   amsgrad = false, bias_correction = true},
                      {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, amsgrad = bool,
                       bias_correction = bool})
    return new(cls, params, o)
  end
  function cls:step()
    local o = self.defaults
    local k = {lr = self.lr, beta1 = o.betas[1], beta2 = o.betas[2], eps = o.eps,
               weight_decay = o.weight_decay, decoupled = decoupled, amsgrad = o.amsgrad,
               no_bias_correction = not o.bias_correction}
    for i, p in ipairs(self.params) do
      local g = p.grad
      if g then
        local s = self.state[i]
        if not s then
          s = {step = 0, exp_avg = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()}),
               exp_avg_sq = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()})}
          if o.amsgrad then s.max_exp_avg_sq = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()}) end
          self.state[i] = s
        end
        s.step = s.step + 1
        zorch._adam_step(p, g, s.exp_avg, s.exp_avg_sq, s.max_exp_avg_sq, s.step, k)
      end
    end
  end
  return cls
end
optim.Adam = adam_class("optim.Adam", false, 0)
optim.AdamW = adam_class("optim.AdamW", true, 1e-2)

optim.SGD = setmetatable({__name = "optim.SGD"}, {__index = Optimizer})
optim.SGD.__index = optim.SGD
optim.SGD.__tostring = Optimizer.__tostring
getmetatable(optim.SGD).__call = function(_, params, opts)
  check_params("optim.SGD", params)
  local o = options("optim.SGD", opts, {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false},
                    {lr = nonneg, momentum = nonneg, dampening = nonneg, weight_decay = nonneg, nesterov = bool})
  if o.nesterov and (o.momentum <= 0 or o.dampening ~= 0) then
    error("optim.SGD: nesterov needs momentum > 0 and dampening 0", 2)
  end
  return new(optim.SGD, params, o)
end
function optim.SGD:step()
  local o = self.defaults
  local k = {lr = self.lr, momentum = o.momentum, dampening = o.dampening, weight_decay = o.weight_decay,
             nesterov = o.nesterov}
  for i, p in ipairs(self.params) do
    local g = p.grad
    if g then
      local s = self.state[i]
      local first = false
      if not s then
        s = {}
        self.state[i] = s
      end
      -- made at the first step with momentum (a scheduler may turn momentum on later)
      if o.momentum ~= 0 and not s.momentum_buffer then
        s.momentum_buffer = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()})
        first = true
      end
      zorch._sgd_step(p, g, s.momentum_buffer, first, k)
    end
  end
end

-- Lamb (layer-wise adaptive moments): Adam's moments give u = m_hat / (sqrt(v_hat)
-- + eps) + weight_decay * p per parameter tensor; p -= lr * ratio * u with ratio =
-- ||p|| / ||u|| clamped to [min_coeff, max_coeff], and 1 (then clamped) when either
-- norm is 0, as DeepSpeed's FusedLamb.
optim.Lamb = setmetatable({__name = "optim.Lamb"}, {__index = Optimizer})
optim.Lamb.__index = optim.Lamb
optim.Lamb.__tostring = Optimizer.__tostring
getmetatable(optim.Lamb).__call = function(_, params, opts)
  check_params("optim.Lamb", params)
  local o = options("optim.Lamb", opts, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
                    bias_correction = true, max_coeff = 10.0, min_coeff = 0.01},
                    {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, bias_correction = bool,
                     max_coeff = nonneg, min_coeff = nonneg})
  return new(optim.Lamb, params, o)
end
function optim.Lamb:step()
  local o = self.defaults
  local b1, b2 = o.betas[1], o.betas[2]
  zorch.no_grad(function()
    for i, p in ipairs(self.params) do
      local g = p.grad
      if g then
        local s = self.state[i]
        if not s then
          s = {step = 0, exp_avg = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()}),
               exp_avg_sq = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()})}
          self.state[i] = s
        end
        s.step = s.step + 1
        s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
        s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
        local c1, c2 = 1, 1
        if o.bias_correction then c1, c2 = 1 - b1 ^ s.step, 1 - b2 ^ s.step end
        local u = (s.exp_avg * (1 / c1)) / ((s.exp_avg_sq * (1 / c2)):sqrt() + o.eps)
        if o.weight_decay ~= 0 then u = u + p * o.weight_decay end
        local pn, un = math.sqrt((p * p):sum():item()), math.sqrt((u * u):sum():item())
        local ratio = 1
        if pn ~= 0 and un ~= 0 then ratio = pn / un end
        ratio = math.min(math.max(ratio, o.min_coeff), o.max_coeff)
        p:copy_(p - u * (self.lr * ratio))
      end
    end
  end)
end

-- Schedulers set opt.lr from the step count; call sched:step() after opt:step().
optim.lr_scheduler = {}
local Sched = {}
Sched.__index = Sched
function Sched:step()
  self.last_step = self.last_step + 1
  self.optimizer.lr = self:lr_at(self.last_step)
  return self.optimizer.lr
end
function Sched:get_lr() return self.optimizer.lr end
function Sched:state_dict() return {last_step = self.last_step, base_lr = self.base_lr} end
function Sched:load_state_dict(s)
  self.last_step, self.base_lr = s.last_step, s.base_lr
  self.optimizer.lr = self:lr_at(self.last_step)
end

-- lr = base * gamma ^ floor(step / step_size)
function optim.lr_scheduler.StepLR(opt, step_size, gamma)
  if math.type(step_size) ~= "integer" or step_size < 1 then error("StepLR: step_size must be a positive integer", 2) end
  local s = setmetatable({optimizer = opt, base_lr = opt.lr, last_step = 0, step_size = step_size,
                          gamma = gamma or 0.1}, Sched)
  function s:lr_at(n) return self.base_lr * self.gamma ^ (n // self.step_size) end
  return s
end

-- Linear warm-up over `warmup` steps, then cosine decay to min_lr at `total`.
function optim.lr_scheduler.CosineWarmup(opt, warmup, total, min_lr)
  if math.type(warmup) ~= "integer" or warmup < 0 or math.type(total) ~= "integer" or total <= warmup then
    error("CosineWarmup: need integers 0 <= warmup < total", 2)
  end
  local s = setmetatable({optimizer = opt, base_lr = opt.lr, last_step = 0, warmup = warmup, total = total,
                          min_lr = min_lr or 0}, Sched)
  function s:lr_at(n)
    if n < self.warmup then return self.base_lr * (n + 1) / self.warmup end
    local t = math.min(1, (n - self.warmup) / (self.total - self.warmup))
    return self.min_lr + (self.base_lr - self.min_lr) * 0.5 * (1 + math.cos(math.pi * t))
  end
  if warmup > 0 then opt.lr = s:lr_at(0) end
  return s
end

-- ---- MultiStepLR, LambdaLR, OneCycleLR, ReduceLROnPlateau ------------------------------------
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
  local s = setmetatable({optimizer = opt, base_lr = opt.lr, last_step = 0, milestones = ms, gamma = o.gamma}, Sched)
  function s:lr_at(n)
    local lr = self.base_lr
    for _, m in ipairs(self.milestones) do
      if m > n then break end
      lr = lr * self.gamma
    end
    return lr
  end
  opt.lr = s:lr_at(0)
  return s
end

-- lr = base * lr_lambda(step)
function optim.lr_scheduler.LambdaLR(opt, opts)
  local o = sched_options("LambdaLR", opt, opts, {lr_lambda = false},
                          {lr_lambda = function(v) return type(v) == "function" end}, {"lr_lambda"})
  local s = setmetatable({optimizer = opt, base_lr = opt.lr, last_step = 0, lr_lambda = o.lr_lambda}, Sched)
  function s:lr_at(n)
    local f = self.lr_lambda(n)
    if type(f) ~= "number" then
      error(("LambdaLR: lr_lambda(%d) returned a %s, not a number"):format(n, type(f)), 3)
    end
    return self.base_lr * f
  end
  opt.lr = s:lr_at(0)
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
  self.optimizer.lr = lr
  if self.cycle_momentum then
    local d = self.optimizer.defaults
    if self.beta1 then d.betas = {m, d.betas[2]} else d.momentum = m end
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
    local old = self.optimizer.lr
    local new = math.max(old * self.factor, self.min_lr)
    if old - new > self.eps then self.optimizer.lr = new end
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

return optim
