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
  for i, p in ipairs(params) do
    if not zorch.is_tensor(p) then error(("%s: parameter %d is a %s, not a tensor"):format(fn, i, type(p)), 3) end
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
    if not ok(o[k]) then error(("%s: invalid %s: %s"):format(fn, k, tostring(o[k])), 3) end
  end
  return o
end

local nonneg = function(v) return type(v) == "number" and v >= 0 end
local unit = function(v) return type(v) == "number" and v >= 0 and v < 1 end
local betas = function(v) return type(v) == "table" and unit(v[1]) and unit(v[2]) end
local bool = function(v) return type(v) == "boolean" end

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

local function new(cls, params, o)
  return setmetatable({params = params, defaults = o, lr = o.lr, state = {}}, cls)
end

-- Adam and AdamW (decoupled weight decay).
local function adam_class(name, decoupled, wd_default)
  local cls = setmetatable({}, {__index = Optimizer})
  cls.__index = cls
  cls.__name = name
  local mt = getmetatable(cls)
  mt.__call = function(_, params, opts)
    check_params(name, params)
    local o = options(name, opts, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = wd_default,
                                   amsgrad = false},
                      {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, amsgrad = bool})
    return new(cls, params, o)
  end
  function cls:step()
    local o = self.defaults
    local k = {lr = self.lr, beta1 = o.betas[1], beta2 = o.betas[2], eps = o.eps,
               weight_decay = o.weight_decay, decoupled = decoupled, amsgrad = o.amsgrad}
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
        if o.momentum ~= 0 then s.momentum_buffer = zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()}) end
        self.state[i] = s
        first = true
      end
      zorch._sgd_step(p, g, s.momentum_buffer, first, k)
    end
  end
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

return optim
