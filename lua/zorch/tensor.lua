-- zorch tensor methods written in Lua: PyTorch's in-place ops (x:add_(y),
-- x:mul_(0.9), x:clamp_(0, 1), x:exp_(), ...), random fills (x:uniform_(),
-- x:normal_()), dtype shorthands, the Lua-level functions as methods, and
-- zorch.deepcopy (nn.init is in nn/initializers.lua). Loaded after the other modules, so that every op they and
-- the C layer define is there to wrap.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
zorch._require "zorch.nn"
local M = zorch._tensor_methods
local assign = zorch._assign

local function check_self(name, x)
  if not zorch.is_tensor(x) then error(("%s: argument 1 must be a tensor, got %s"):format(name, type(x)), 3) end
end

-- Raises a protected call's error at the caller's line, not this file's, with
-- a bad argument of the op an in-place op runs named after the in-place op
-- (Lua would name the local variable holding that op, 'f').
local function named_at_caller(name, ok, ...)
  if ok then return ... end
  local e = ...
  if type(e) == "string" then
    e = e:gsub("^zorch/tensor%.lua:%d+: ", ""):gsub("^(bad argument #%d+ to )'f'", "%1'" .. name .. "'")
  end
  error(e, 2) -- (called in tail position: level 2 is the caller of the method)
end

-- x:NAME_(...): the op's result written into x (dtype and shape kept, as
-- PyTorch's in-place ops; autograd records the write as copy_ does).
-- With a history to record, the op reads a clone of x: what it saves for its
-- backward is then not the tensor written (PyTorch saves the original too).
-- The same when only another operand requires grad (x:mul_(w) saves x for
-- w's gradient).
local function records(x, ...)
  if not zorch.is_grad_enabled() then return false end
  if x.requires_grad and not x.is_leaf then return true end
  for i = 1, select("#", ...) do
    local v = select(i, ...)
    if zorch.is_tensor(v) and v.requires_grad then return true end
  end
  return false
end
local function apply(iname, f, x, ...)
  local input = x
  if records(x, ...) then input = x:clone() end
  return assign(iname, x, f(input, ...))
end
local function inplace(name, f)
  local iname = name .. "_"
  M[iname] = function(x, ...)
    check_self(iname, x)
    return named_at_caller(iname, pcall(apply, iname, f, x, ...))
  end
end

-- add and sub take PyTorch's alpha: x + alpha * y.
local function scaled(y, alpha, name)
  if alpha == nil then return y end
  if type(y) ~= "number" and not zorch.is_tensor(y) then
    error(("%s: other must be a tensor or a number, got %s"):format(name, type(y)), 4)
  end
  if type(alpha) ~= "number" then
    error(("%s: alpha must be a number, got %s"):format(name, type(alpha)), 4)
  end
  return y * alpha
end
inplace("add", function(x, y, alpha) return x + scaled(y, alpha, "add_") end)
inplace("sub", function(x, y, alpha) return x - scaled(y, alpha, "sub_") end)

-- Every other elementwise op of the registry, and the ops composed beside it,
-- by name: x:exp_(), x:clamp_(lo, hi), x:masked_fill_(m, v), ...
local others = {"clamp_min", "clamp_max", "clip", "masked_fill", "lerp", "addcmul", "addcdiv", "scatter",
  "scatter_add", "nan_to_num", "tril", "triu"}
for _, op in ipairs(zorch._pointwise_ops()) do others[#others + 1] = op.name end
for _, name in ipairs(others) do
  if type(zorch[name]) == "function" and M[name .. "_"] == nil then inplace(name, zorch[name]) end
end

-- Random fills, data writes from zorch's generator (as nn.init's).
local function fill_from(name, x, r)
  return zorch.no_grad(function() return assign(name, x, r) end)
end
local float_opts = zorch._require("zorch.util").float_opts
local function number(name, what, v, default)
  if v == nil then return default end
  if type(v) ~= "number" then error(("%s: %s must be a number, got %s"):format(name, what, type(v)), 3) end
  return v
end
function M.uniform_(x, a, b)
  local o = float_opts("uniform_", x)
  a, b = number("uniform_", "from", a, 0), number("uniform_", "to", b, 1)
  return fill_from("uniform_", x, zorch.rand(x.shape, o) * (b - a) + a)
end
function M.normal_(x, mean, std)
  local o = float_opts("normal_", x)
  mean, std = number("normal_", "mean", mean, 0), number("normal_", "std", std, 1)
  if std < 0 then error(("normal_: std must be >= 0, got %g"):format(std), 2) end
  return fill_from("normal_", x, zorch.randn(x.shape, o) * std + mean)
end
function M.bernoulli_(x, p)
  local o = float_opts("bernoulli_", x)
  p = number("bernoulli_", "p", p, 0.5)
  if p < 0 or p > 1 then error(("bernoulli_: p must be in [0, 1], got %g"):format(p), 2) end
  return fill_from("bernoulli_", x, zorch.rand(x.shape, o):lt(p))
end

-- dtype shorthands beside float(), double() and long().
for name, dt in pairs{int = "int32", bool = "bool", half = "float16", bfloat16 = "bfloat16", byte = "uint8", char = "int8"} do
  if M[name] == nil then M[name] = function(x) check_self(name, x); return x:to(dt) end end
end

-- Functions written in Lua, as methods too (x:split(2), x:chunk(3)); a
-- method's first argument is the tensor.
for _, name in ipairs{"split", "chunk"} do
  if M[name] == nil and type(zorch[name]) == "function" then M[name] = zorch[name] end
end
-- x:where(cond, y) is where(cond, x, y), as PyTorch's method.
if M.where == nil then
  function M.where(x, cond, y) check_self("where", x); return zorch.where(cond, x, y) end
end

-- zorch.deepcopy(v): tables copied through (their metatables shared), tensors
-- cloned (a leaf's requires_grad and .grad kept), other values shared; a
-- value met twice is copied once, so ties and cycles stay as they are.
local function deepcopy(v, memo)
  if memo[v] ~= nil then return memo[v] end
  if zorch.is_tensor(v) then
    if v.requires_grad and not v.is_leaf then
      error("deepcopy: only leaf tensors can be copied (this one was made by " .. tostring(v.grad_fn) ..
        "); copy its detach()", 0)
    end
    local c = zorch.no_grad(function() return v:detach():clone() end)
    memo[v] = c
    if v.requires_grad then c:requires_grad_(true) end
    if v.grad then c.grad = deepcopy(v.grad, memo) end
    return c
  elseif type(v) == "table" then
    local c = {}
    memo[v] = c
    for k, x in next, v do rawset(c, deepcopy(k, memo), deepcopy(x, memo)) end
    return setmetatable(c, getmetatable(v))
  end
  return v
end
function zorch.deepcopy(...)
  if select("#", ...) == 0 then error("deepcopy: expected a value to copy", 2) end
  local ok, r = pcall(deepcopy, ..., {})
  if not ok then error(r, 2) end
  return r
end

-- zorch.argsort(x, {dim = -1, descending = false, stable = false}): sort's
-- 1-based indices alone. sort is always stable, so `stable` only is checked.
local argsort_keys = {dim = "number", descending = "boolean", stable = "boolean"}
function zorch.argsort(x, opts)
  check_self("argsort", x)
  opts = opts or {}
  if type(opts) ~= "table" then error(("argsort: argument 2 (options) must be a table, got %s"):format(type(opts)), 2) end
  for k, v in pairs(opts) do
    local want = argsort_keys[k]
    if not want then error(("argsort: unknown option '%s' (allowed: dim, descending, stable)"):format(tostring(k)), 2) end
    if type(v) ~= want then error(("argsort: option %s must be a %s, got %s"):format(k, want, type(v)), 2) end
  end
  local ok, _, idx = pcall(zorch.sort, x, opts.dim or -1, opts.descending or false)
  if not ok then error(_, 2) end
  return idx
end
if M.argsort == nil then M.argsort = zorch.argsort end
