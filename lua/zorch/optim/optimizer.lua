-- zorch.optim.optimizer: the base of every optimizer (parameter groups, options
-- checked against each class's defaults, step over the fused C kernels,
-- state dicts, printing) and what the algorithm files share, returned as this
-- module's table.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
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

-- The options of every group, in order (for checkpoints); and setting them back.
function Optimizer:group_options()
  local gs = {}
  for gi, g in ipairs(self.param_groups) do gs[gi] = group_options(g) end
  return gs
end

-- What the algorithm files share.
return {
  any = any, betas = betas, bool = bool, class = class, new = new, nonneg = nonneg, options = options,
  weight_decay = weight_decay, zeros_like = zeros_like, Optimizer = Optimizer,
}
