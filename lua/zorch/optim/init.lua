-- zorch.optim: optimizers on the fused C kernels (one pass over each
-- parameter, PyTorch's formulas), and learning-rate schedulers.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = {}
local readable = zorch._require("zorch.util").readable

local Optimizer = {}
Optimizer.__index = Optimizer

local function check_params(fn, params, where, level)
  if type(params) ~= "table" or #params == 0 then
    error(("%s: expected a non-empty list of parameters%s"):format(fn,
      where and (" in " .. where) or " (model:parameters()) or of parameter groups"), level)
  end
  for i, p in ipairs(params) do
    if not zorch.is_tensor(p) then
      error(("%s: parameter %d%s is a %s, not a tensor"):format(fn, i, where and (" of " .. where) or "", type(p)), level)
    end
  end
end

-- Reads options against their defaults; unknown keys and bad values are errors.
-- where: "group 2" in messages about a parameter group.
local function options(fn, given, defaults, checks, level, where)
  level = level or 3
  local at = where and (" (" .. where .. ")") or ""
  local o = {}
  for k, v in pairs(defaults) do o[k] = v end
  if given ~= nil and type(given) ~= "table" then error(fn .. ": options must be a table" .. at, level) end
  for k, v in pairs(given or {}) do
    if defaults[k] == nil then
      local names = {}
      for n in pairs(defaults) do names[#names + 1] = n end
      table.sort(names)
      error(("%s: unknown option '%s'%s (allowed: %s)"):format(fn, tostring(k), at, table.concat(names, ", ")), level)
    end
    o[k] = v
  end
  for k, ok in pairs(checks) do
    if not ok(o[k]) then
      error(("%s: invalid %s%s: expected %s, got %s"):format(fn, k, at, zorch._checks_want[ok] or "another value",
        readable(o[k])), level)
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

local function copy_option(v)
  if type(v) ~= "table" then return v end
  local c = {}
  for i, x in ipairs(v) do c[i] = x end
  return c
end

-- A group's options without its parameters (for state dicts and checkpoints).
local function group_options(g)
  local o = {}
  for k, v in pairs(g) do if k ~= "params" then o[k] = copy_option(v) end end
  return o
end

-- params: a list of tensors (one group with the options `given`), or a list of
-- groups {params = {...}, <option> = ...} whose options override `given`, as
-- torch.optim. Every group holds its full options; `check` (optional) checks
-- one group's options. Errors name the function and the group.
local function new(cls, fn, params, given, defaults, checks, check)
  local level = 4 -- the caller of cls(...)
  local d = options(fn, given, defaults, checks, level)
  local groups = {}
  local grouped = type(params) == "table" and params[1] ~= nil and type(params[1]) == "table"
                  and not zorch.is_tensor(params[1])
  if grouped then
    for gi, spec in ipairs(params) do
      local where = "group " .. gi
      if type(spec) ~= "table" or zorch.is_tensor(spec) then
        error(("%s: %s must be a table {params = {...}, ...}, got %s"):format(fn, where, type(spec)), level)
      end
      local ps = spec.params
      if zorch.is_tensor(ps) then ps = {ps} end
      if type(ps) ~= "table" or #ps == 0 then
        error(("%s: %s has no parameters (give it params = a non-empty list of tensors)"):format(fn, where), level)
      end
      check_params(fn, ps, where, level)
      local over = {}
      for k, v in pairs(spec) do if k ~= "params" then over[k] = v end end
      local g = options(fn, over, d, checks, level, where)
      if check then check(g, where, level) end
      local list = {}
      for i, p in ipairs(ps) do list[i] = p end
      g.params = list
      groups[gi] = g
    end
  else
    check_params(fn, params, nil, level)
    local g = {}
    for k, v in pairs(d) do g[k] = copy_option(v) end
    local list = {}
    for i, p in ipairs(params) do list[i] = p end
    g.params = list
    if check then check(g, nil, level) end
    groups[1] = g
  end
  -- every tensor once: it would be updated twice a step
  local flat, index, where = {}, {}, {}
  for gi, g in ipairs(groups) do
    for pi, p in ipairs(g.params) do
      if index[p] then
        local w = where[index[p]]
        if grouped then
          error(("%s: parameter %d of group %d is already parameter %d of group %d (list each tensor once)"):format(
            fn, pi, gi, w[2], w[1]), level)
        end
        error(("%s: parameter %d is parameter %d again (list each tensor once: model:parameters() does)"):format(
          fn, pi, w[2]), level)
      end
      flat[#flat + 1] = p
      index[p] = #flat
      where[#flat] = {gi, pi}
    end
  end
  local o = {params = flat, index = index, defaults = d, param_groups = groups, state = {}}
  return setmetatable(o, cls)
end

-- Instances: opt.lr reads the first group's lr; setting it sets every group's.
local function instance_methods(cls)
  cls.__index = function(t, k)
    if k == "lr" then
      local gs = rawget(t, "param_groups")
      return gs and gs[1] and gs[1].lr
    end
    return cls[k]
  end
  cls.__newindex = function(t, k, v)
    local gs = rawget(t, "param_groups")
    if k == "lr" and gs then
      for _, g in ipairs(gs) do g.lr = v end
    else
      rawset(t, k, v)
    end
  end
end

function Optimizer:zero_grad()
  for _, p in ipairs(self.params) do p.grad = nil end
end

-- Each parameter with a gradient: its state made or advanced once (begin),
-- then the update with its group's options (apply).
function Optimizer:step()
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do
      local g = p.grad
      if g then
        local dt = p:dtype()
        if dt ~= "float32" and dt ~= "float64" then
          error(("%s: parameter %d is %s: the optimizers step float32 or float64 parameters; train in 16 bits " ..
                 "through zorch.Engine{precision = \"bf16\"} (float32 master weights, 16-bit compute)"):format(
                 getmetatable(self).__name, self.index[p], dt), 2)
        end
        local i = self.index[p]
        local s = self.state[i]
        if not s then s = {}; self.state[i] = s end
        local first = self:_begin(s, p, {group}, i)
        self:_apply(p, g, s, group, first, i)
      end
    end
  end
end

-- Steps one flat tensor p (gradient g, state self.state[1]) whose runs belong
-- to different groups: runs = {{first (from 1), count, group}, ...}; elements
-- in no run stay as they are. The Engine steps its shard so. A run's
-- `behind` counts the optimizer's steps its parameters missed (frozen then):
-- a step counter (Adam's) is that much smaller for them, as PyTorch counts
-- each parameter's steps in its own state; `fresh` says they never took one
-- (SGD's momentum then starts from the gradient, as at a first step).
function Optimizer:_step_runs(p, g, runs)
  local s = self.state[1]
  if not s then s = {}; self.state[1] = s end
  local groups = {}
  for i, r in ipairs(runs) do groups[i] = r[3] end
  local first = self:_begin(s, p, groups, 1)
  if self:_store(1) then return self:_apply_runs(p, g, s, runs) end
  for _, r in ipairs(runs) do
    local a, n, behind, fresh = r[1], r[2], math.type(s.step) and r.behind or 0, r.fresh == true
    if a == 1 and n == p:numel() and behind == 0 and not fresh then
      self:_apply(p, g, s, r[3], first)
    else
      local sv = {}
      for k, v in pairs(s) do sv[k] = zorch.is_tensor(v) and v:narrow(1, a, n) or v end
      if behind > 0 then
        sv.step = s.step - behind
        if self._own_steps then self:_own_steps(sv, r[3]) end -- (state that follows the count)
      end
      self:_apply(p:narrow(1, a, n), g:narrow(1, a, n), sv, r[3], first or fresh)
    end
  end
end

-- State stores: an optimizer may keep a parameter's state tensors outside its
-- state table, in a store it asks for them at each step (zorch.offload keeps
-- Adam's moments in a file). The state table then holds only the step count;
-- every update of that parameter goes through the store (the class's
-- _begin/_apply check for it), and full_state reads the tensors back.
function Optimizer:_store(i)
  local st = rawget(self, "_stores")
  return st and st[i]
end
function Optimizer:_set_store(i)
  error(("%s keeps its state in memory: no state store"):format(getmetatable(self).__name), 2)
end

-- Parameter i's state as a run without a store holds it (state dicts and
-- checkpoints): the stored tensors read back.
function Optimizer:full_state(i)
  local s, store = self.state[i], self:_store(i)
  if not s or not store or not s.step or zorch.is_tensor(s.exp_avg) then return s end
  local n = self.params[i]:numel()
  local c = {}
  for k, v in pairs(s) do c[k] = v end
  c.exp_avg, c.exp_avg_sq = zorch.zeros({n}), zorch.zeros({n})
  store:get(c.exp_avg, c.exp_avg_sq)
  return c
end

local function zeros_like(p) return zorch.zeros(p.shape, {dtype = p:dtype(), device = p:device()}) end
local function any(groups, f)
  for _, g in ipairs(groups) do if f(g) then return true end end
  return false
end

-- PyTorch's layout: param_groups list each group's options and its parameters
-- as indices (from 1) into the state.
function Optimizer:_groups_state()
  local gs = {}
  for gi, g in ipairs(self.param_groups) do
    local o = group_options(g)
    o.params = {}
    for pi, p in ipairs(g.params) do o.params[pi] = self.index[p] end
    gs[gi] = o
  end
  return gs
end

function Optimizer:state_dict()
  local st = {}
  for i in pairs(self.state) do
    local s = self:full_state(i)
    local c = {}
    for k, v in pairs(s) do c[k] = zorch.is_tensor(v) and v:clone() or v end
    st[i] = c
  end
  return {state = st, param_groups = self:_groups_state()}
end

-- Sets each group's options from saved param_groups (the same number of
-- groups and of parameters in each).
function Optimizer:_load_groups(saved, fn, level)
  if saved == nil then return end
  if type(saved) ~= "table" or #saved ~= #self.param_groups then
    error(("%s: the state has %s parameter groups, the optimizer %d"):format(fn,
      type(saved) == "table" and tostring(#saved) or "no list of", #self.param_groups), level)
  end
  for gi, sg in ipairs(saved) do
    local g = self.param_groups[gi]
    if type(sg) ~= "table" then error(("%s: parameter group %d is not a table"):format(fn, gi), level) end
    if type(sg.params) == "table" and #sg.params ~= #g.params then
      error(("%s: parameter group %d has %d parameters in the state, %d in the optimizer"):format(
        fn, gi, #sg.params, #g.params), level)
    end
    for k, v in pairs(sg) do
      if k ~= "params" then
        if self.defaults[k] == nil then
          error(("%s: parameter group %d has an unknown option '%s'"):format(fn, gi, tostring(k)), level)
        end
        if type(v) ~= type(self.defaults[k]) then
          error(("%s: parameter group %d: option '%s' is a %s, expected a %s"):format(fn, gi, k, type(v),
            type(self.defaults[k])), level)
        end
      end
    end
  end
  for gi, sg in ipairs(saved) do
    local g = self.param_groups[gi]
    for k, v in pairs(sg) do if k ~= "params" then g[k] = copy_option(v) end end
  end
end

function Optimizer:load_state_dict(sd)
  if type(sd) ~= "table" or type(sd.state) ~= "table" then error("load_state_dict: expected {state=, param_groups=}", 2) end
  for i, s in pairs(sd.state) do
    local p = math.type(i) == "integer" and self.params[i]
    if not p then
      error(("load_state_dict: state for parameter %s, but the optimizer has %d"):format(tostring(i), #self.params), 2)
    end
    if type(s) ~= "table" then error(("load_state_dict: the state of parameter %d is a %s, not a table"):format(i, type(s)), 2) end
    local step = s.step
    if step ~= nil and not (math.tointeger(step) and step >= 0) then
      error(("load_state_dict: state 'step' of parameter %d must be an integer >= 0, got %s"):format(i, tostring(step)), 2)
    end
    for k, v in pairs(s) do
      if zorch.is_tensor(v) and table.concat(v.shape, ",") ~= table.concat(p.shape, ",") then
        error(("load_state_dict: state '%s' of parameter %d has the wrong shape"):format(k, i), 2)
      end
    end
  end
  self:_load_groups(sd.param_groups, "load_state_dict", 3)
  for i, s in pairs(sd.state) do
    local c = {}
    for k, v in pairs(s) do c[k] = zorch.is_tensor(v) and v:clone() or v end
    if c.step then c.step = math.tointeger(c.step) end
    self.state[i] = c
  end
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
  local lines = {("%s (%d parameter%s, %d elements)"):format(getmetatable(self).__name, #self.params,
    #self.params == 1 and "" or "s", numel)}
  local many = #self.param_groups > 1
  for gi, g in ipairs(self.param_groups) do
    local keys = {}
    for k in pairs(g) do if k ~= "lr" and k ~= "params" then keys[#keys + 1] = k end end
    table.sort(keys)
    local hp = {"lr=" .. show(g.lr)}
    for _, k in ipairs(keys) do hp[#hp + 1] = k .. "=" .. show(g[k]) end
    lines[#lines + 1] = ("  group %d%s: %s"):format(gi, many and (" (%d parameter%s)"):format(#g.params,
      #g.params == 1 and "" or "s") or "", table.concat(hp, ", "))
  end
  return table.concat(lines, "\n")
end

local function class(name)
  local cls = setmetatable({__name = name, __tostring = Optimizer.__tostring}, {__index = Optimizer})
  instance_methods(cls)
  return cls
end

-- Adam and AdamW (decoupled weight decay). bias_correction = false (DeepSpeed's
-- option) steps by lr * m / (sqrt(v) + eps).
local function adam_class(name, decoupled, wd_default)
  local cls = class(name)
  getmetatable(cls).__call = function(_, params, opts)
    return new(cls, name, params, opts, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = wd_default,
                                         amsgrad = false, bias_correction = true},
               {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, amsgrad = bool,
                bias_correction = bool})
  end
  local function kopts(o)
    return {lr = o.lr, beta1 = o.betas[1], beta2 = o.betas[2], eps = o.eps,
            weight_decay = o.weight_decay, decoupled = decoupled, amsgrad = o.amsgrad,
            no_bias_correction = not o.bias_correction}
  end
  function cls:_begin(s, p, groups, i)
    local store = self:_store(i)
    if store then -- the moments are the store's
      if any(groups, function(g) return g.amsgrad end) then
        error(("%s: amsgrad needs its state in memory, not in a state store"):format(name), 3)
      end
      if zorch.is_tensor(s.exp_avg) then -- set from a state dict or checkpoint: into the store
        store:put(s.exp_avg, s.exp_avg_sq)
        s.exp_avg, s.exp_avg_sq = nil, nil
      elseif not s.step then
        store:zero()
      end
      s.step = (s.step or 0) + 1
      return
    end
    if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
    if not s.max_exp_avg_sq and any(groups, function(g) return g.amsgrad end) then s.max_exp_avg_sq = zeros_like(p) end
    s.step = s.step + 1
  end
  function cls:_apply(p, g, s, o, _, i)
    local store = self:_store(i)
    if store then return store:adam(p, g, s.step, {{0, p:numel(), kopts(o)}}) end
    zorch._adam_step(p, g, s.exp_avg, s.exp_avg_sq, o.amsgrad and s.max_exp_avg_sq or nil, s.step, kopts(o))
  end
  -- the runs of a flat parameter with a store: one pass over the store
  function cls:_apply_runs(p, g, s, runs)
    local rs = {}
    for k, r in ipairs(runs) do
      rs[k] = {r[1] - 1, r[2], kopts(r[3]), (r.behind or 0) > 0 and s.step - r.behind or nil}
    end
    self:_store(1):adam(p, g, s.step, rs)
  end
  -- store: zorch.offload's (adam, get, put, zero) for parameter i
  function cls:_set_store(i, store)
    local p = self.params[i]
    if not p then error(("%s: no parameter %d for a state store"):format(name, i), 2) end
    local st = rawget(self, "_stores") or {}
    rawset(self, "_stores", st)
    st[i] = store
  end
  return cls
end
optim.Adam = adam_class("optim.Adam", false, 0)
optim.AdamW = adam_class("optim.AdamW", true, 1e-2)

optim.SGD = class("optim.SGD")
getmetatable(optim.SGD).__call = function(_, params, opts)
  return new(optim.SGD, "optim.SGD", params, opts,
             {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false},
             {lr = nonneg, momentum = nonneg, dampening = nonneg, weight_decay = nonneg, nesterov = bool},
             function(o, where, level)
               if o.nesterov and (o.momentum <= 0 or o.dampening ~= 0) then
                 error(("optim.SGD: nesterov needs momentum > 0 and dampening 0%s"):format(
                   where and (" (" .. where .. ")") or ""), level)
               end
             end)
end
-- the momentum buffer is made at the first step with momentum (a scheduler may
-- turn momentum on later); `first` tells the kernel to start it from the gradient
function optim.SGD:_begin(s, p, groups)
  if not s.momentum_buffer and any(groups, function(g) return g.momentum ~= 0 end) then
    s.momentum_buffer = zeros_like(p)
    return true
  end
  return false
end
function optim.SGD:_apply(p, g, s, o, first)
  local k = {lr = o.lr, momentum = o.momentum, dampening = o.dampening, weight_decay = o.weight_decay,
             nesterov = o.nesterov}
  zorch._sgd_step(p, g, s.momentum_buffer, first, k)
end

-- RMSprop, PyTorch's formulas: g += weight_decay * p; v = alpha * v + (1 - alpha) g^2;
-- centered: the denominator sqrt(v - mean(g)^2) + eps, else sqrt(v) + eps; with
-- momentum a buffer of g / denominator, else p -= lr * g / denominator. Composed
-- from the tensor ops (no kernel of its own), in place under no_grad.
optim.RMSprop = class("optim.RMSprop")
getmetatable(optim.RMSprop).__call = function(_, params, opts)
  return new(optim.RMSprop, "optim.RMSprop", params, opts,
             {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false},
             {lr = nonneg, alpha = nonneg, eps = nonneg, weight_decay = nonneg, momentum = nonneg, centered = bool})
end
function optim.RMSprop:_begin(s, p, groups)
  if not s.step then s.step, s.square_avg = 0, zeros_like(p) end
  if not s.grad_avg and any(groups, function(g) return g.centered end) then s.grad_avg = zeros_like(p) end
  if not s.momentum_buffer and any(groups, function(g) return g.momentum > 0 end) then
    s.momentum_buffer = zeros_like(p)
  end
  s.step = s.step + 1
end
function optim.RMSprop:_apply(p, g, s, o)
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    s.square_avg:copy_(s.square_avg * o.alpha + g * g * (1 - o.alpha))
    local avg
    if o.centered then
      s.grad_avg:copy_(s.grad_avg * o.alpha + g * (1 - o.alpha))
      avg = (s.square_avg - s.grad_avg * s.grad_avg):sqrt() + o.eps
    else
      avg = s.square_avg:sqrt() + o.eps
    end
    if o.momentum > 0 then
      s.momentum_buffer:copy_(s.momentum_buffer * o.momentum + g / avg)
      p:copy_(p - s.momentum_buffer * o.lr)
    else
      p:copy_(p - (g / avg) * o.lr)
    end
  end)
end

-- Adagrad, PyTorch's formulas: g += weight_decay * p; sum += g^2;
-- p -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(sum) + eps).
optim.Adagrad = class("optim.Adagrad")
getmetatable(optim.Adagrad).__call = function(_, params, opts)
  return new(optim.Adagrad, "optim.Adagrad", params, opts,
             {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10},
             {lr = nonneg, lr_decay = nonneg, weight_decay = nonneg, initial_accumulator_value = nonneg, eps = nonneg})
end
function optim.Adagrad:_begin(s, p, groups)
  if not s.step then
    s.step = 0
    s.sum = zorch.full_like(p, groups[1].initial_accumulator_value)
  end
  s.step = s.step + 1
end
function optim.Adagrad:_apply(p, g, s, o)
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    local clr = o.lr / (1 + (s.step - 1) * o.lr_decay)
    s.sum:copy_(s.sum + g * g)
    p:copy_(p - (g / (s.sum:sqrt() + o.eps)) * clr)
  end)
end

-- Lamb (layer-wise adaptive moments): Adam's moments give u = m_hat / (sqrt(v_hat)
-- + eps) + weight_decay * p per parameter tensor; p -= lr * ratio * u with ratio =
-- ||p|| / ||u|| clamped to [min_coeff, max_coeff], and 1 (then clamped) when either
-- norm is 0, as DeepSpeed's FusedLamb.
optim.Lamb = class("optim.Lamb")
getmetatable(optim.Lamb).__call = function(_, params, opts)
  return new(optim.Lamb, "optim.Lamb", params, opts,
             {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
              bias_correction = true, max_coeff = 10.0, min_coeff = 0.01},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, bias_correction = bool,
              max_coeff = nonneg, min_coeff = nonneg})
end
function optim.Lamb:_begin(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.Lamb:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  zorch.no_grad(function()
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
    p:copy_(p - u * (o.lr * ratio))
  end)
end

-- The Engine steps a flat shard: Lamb's trust ratio is still per parameter
-- tensor. runs = {{first, count, group, tensor}, ...}, one per piece of a
-- parameter in this shard; reduce(sums) adds a float64 tensor over the ranks
-- holding the other pieces (the squared norms of each tensor's weights and
-- update, two entries a tensor), so every piece of a tensor takes one ratio.
optim.Lamb._per_tensor = true
function optim.Lamb:_step_tensors(p, g, runs, ntensors, reduce)
  local s = self.state[1]
  if not s then s = {}; self.state[1] = s end
  self:_begin(s, p)
  local sums, us = {}, {}
  for i = 1, 2 * ntensors do sums[i] = 0 end
  zorch.no_grad(function()
    for k, r in ipairs(runs) do
      local a, n, o, t = r[1], r[2], r[3], r[4]
      local pv, gv = p:narrow(1, a, n), g:narrow(1, a, n)
      local m, v = s.exp_avg:narrow(1, a, n), s.exp_avg_sq:narrow(1, a, n)
      local b1, b2 = o.betas[1], o.betas[2]
      m:copy_(m * b1 + gv * (1 - b1))
      v:copy_(v * b2 + gv * gv * (1 - b2))
      local c1, c2, step = 1, 1, s.step - (r.behind or 0) -- (the tensor's own steps: see _step_runs)
      if o.bias_correction then c1, c2 = 1 - b1 ^ step, 1 - b2 ^ step end
      local u = (m * (1 / c1)) / ((v * (1 / c2)):sqrt() + o.eps)
      if o.weight_decay ~= 0 then u = u + pv * o.weight_decay end
      us[k] = u
      sums[2 * t - 1] = sums[2 * t - 1] + (pv * pv):sum():item()
      sums[2 * t] = sums[2 * t] + (u * u):sum():item()
    end
    local all = zorch.tensor(sums, {dtype = "float64"})
    reduce(all)
    sums = all:totable()
    for k, r in ipairs(runs) do
      local a, n, o, t = r[1], r[2], r[3], r[4]
      local pn, un = math.sqrt(sums[2 * t - 1]), math.sqrt(sums[2 * t])
      local ratio = (pn ~= 0 and un ~= 0) and pn / un or 1
      ratio = math.min(math.max(ratio, o.min_coeff), o.max_coeff)
      local pv = p:narrow(1, a, n)
      pv:copy_(pv - us[k] * (o.lr * ratio))
    end
  end)
end

-- ---- Adamax, NAdam, RAdam, Adadelta -------------------------------------------------------------
-- PyTorch's formulas and state names, composed from the tensor ops in place
-- under no_grad as RMSprop is (so the Engine steps them on its flat shards too).

-- Adamax: g += weight_decay p; m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps);
-- p -= lr / (1 - b1^step) * m / u. State: step, exp_avg, exp_inf.
optim.Adamax = class("optim.Adamax")
getmetatable(optim.Adamax).__call = function(_, params, opts)
  return new(optim.Adamax, "optim.Adamax", params, opts,
             {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg})
end
function optim.Adamax:_begin(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_inf = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.Adamax:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    local a, b = s.exp_inf * b2, g:abs() + o.eps
    s.exp_inf:copy_(zorch.where(a:gt(b), a, b))
    p:copy_(p - s.exp_avg / s.exp_inf * (o.lr / (1 - b1 ^ s.step)))
  end)
end

-- The L2 or decoupled weight decay of NAdam and RAdam: the gradient with
-- weight_decay p added, or p scaled by 1 - lr weight_decay first.
local function weight_decay(p, g, o)
  if o.weight_decay == 0 then return g end
  if o.decoupled_weight_decay then
    p:copy_(p * (1 - o.lr * o.weight_decay))
    return g
  end
  return g + p * o.weight_decay
end

-- NAdam: mu_t = b1 (1 - 0.5 * 0.96^(step momentum_decay)); mu_product the
-- product of the mu_t so far; with Adam's moments m and v,
-- p -= lr (1 - mu_t) / (1 - mu_product) g / d + lr mu_{t+1} / (1 - mu_product mu_{t+1}) m / d,
-- d = sqrt(v / (1 - b2^step)) + eps. State: step, mu_product (a number), exp_avg, exp_avg_sq.
optim.NAdam = class("optim.NAdam")
getmetatable(optim.NAdam).__call = function(_, params, opts)
  return new(optim.NAdam, "optim.NAdam", params, opts,
             {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3,
              decoupled_weight_decay = false},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, momentum_decay = nonneg,
              decoupled_weight_decay = bool})
end
local function nadam_mu(o, step) return o.betas[1] * (1 - 0.5 * 0.96 ^ (step * o.momentum_decay)) end
-- mu_product advances here, once a step (a flat shard's runs share it: the first group's options)
function optim.NAdam:_begin(s, p, groups)
  if not s.step then s.step, s.mu_product, s.exp_avg, s.exp_avg_sq = 0, 1.0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
  s.mu_product = s.mu_product * nadam_mu(groups[1], s.step)
end
-- A run whose parameters missed steps while frozen (Optimizer:_step_runs):
-- the product over their own steps, with the run's options.
function optim.NAdam:_own_steps(s, o)
  local prod = 1.0
  for k = 1, s.step do prod = prod * nadam_mu(o, k) end
  s.mu_product = prod
end
function optim.NAdam:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  local mu, mu_next = nadam_mu(o, s.step), nadam_mu(o, s.step + 1)
  zorch.no_grad(function()
    g = weight_decay(p, g, o)
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
    local denom = (s.exp_avg_sq * (1 / (1 - b2 ^ s.step))):sqrt() + o.eps
    p:copy_(p - g / denom * (o.lr * (1 - mu) / (1 - s.mu_product))
              - s.exp_avg / denom * (o.lr * mu_next / (1 - s.mu_product * mu_next)))
  end)
end

-- RAdam: Adam's moments; with rho_inf = 2 / (1 - b2) - 1 and rho_t = rho_inf -
-- 2 step b2^step / (1 - b2^step), p -= lr m_hat r sqrt(1 - b2^step) / (sqrt(v) + eps)
-- where rho_t > 5 (r the rectification term), else p -= lr m_hat.
-- State: step, exp_avg, exp_avg_sq.
optim.RAdam = class("optim.RAdam")
getmetatable(optim.RAdam).__call = function(_, params, opts)
  return new(optim.RAdam, "optim.RAdam", params, opts,
             {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, decoupled_weight_decay = false},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, decoupled_weight_decay = bool})
end
function optim.RAdam:_begin(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.RAdam:_apply(p, g, s, o)
  local b1, b2, t = o.betas[1], o.betas[2], s.step
  zorch.no_grad(function()
    g = weight_decay(p, g, o)
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
    local c1, c2 = 1 - b1 ^ t, 1 - b2 ^ t
    local m_hat = s.exp_avg * (1 / c1)
    local rho_inf = 2 / (1 - b2) - 1
    local rho_t = rho_inf - 2 * t * b2 ^ t / c2
    if rho_t > 5 then
      local rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      p:copy_(p - m_hat * o.lr * (c2 ^ 0.5 / (s.exp_avg_sq:sqrt() + o.eps)) * rect)
    else
      p:copy_(p - m_hat * o.lr)
    end
  end)
end

-- Adadelta: g += weight_decay p; v = rho v + (1 - rho) g^2; delta = sqrt(u + eps)
-- / sqrt(v + eps) g; u = rho u + (1 - rho) delta^2; p -= lr delta.
-- State: step, square_avg, acc_delta.
local unit_closed = function(v) return type(v) == "number" and v >= 0 and v <= 1 end
zorch._checks_want[unit_closed] = "a number in [0, 1]"
optim.Adadelta = class("optim.Adadelta")
getmetatable(optim.Adadelta).__call = function(_, params, opts)
  return new(optim.Adadelta, "optim.Adadelta", params, opts,
             {lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0},
             {lr = nonneg, rho = unit_closed, eps = nonneg, weight_decay = nonneg})
end
function optim.Adadelta:_begin(s, p)
  if not s.step then s.step, s.square_avg, s.acc_delta = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.Adadelta:_apply(p, g, s, o)
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    s.square_avg:copy_(s.square_avg * o.rho + g * g * (1 - o.rho))
    local delta = (s.acc_delta + o.eps):sqrt() / (s.square_avg + o.eps):sqrt() * g
    s.acc_delta:copy_(s.acc_delta * o.rho + delta * delta * (1 - o.rho))
    p:copy_(p - delta * o.lr)
  end)
end

-- The options of every group, in order (for checkpoints); and setting them back.
function Optimizer:group_options()
  local gs = {}
  for gi, g in ipairs(self.param_groups) do gs[gi] = group_options(g) end
  return gs
end

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

-- ---- ExponentialLR, ConstantLR, PolynomialLR, MultiplicativeLR, CosineAnnealingWarmRestarts,
-- ---- SequentialLR, ChainedScheduler, CyclicLR ----------------------------------------------------
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

zorch.optim = optim
for _, part in ipairs(zorch._parts "zorch.optim") do zorch._require(part) end -- the folder's files

return optim
