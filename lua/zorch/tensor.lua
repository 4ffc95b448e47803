-- zorch tensor methods written in Lua: PyTorch's in-place ops (x:add_(y),
-- x:mul_(0.9), x:clamp_(0, 1), x:exp_(), ...), random fills (x:uniform_(),
-- x:normal_()), dtype shorthands, the Lua-level functions as methods, and
-- zorch.deepcopy. Loaded after the other modules, so that every op they and
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
local function float_opts(name, x)
  if not zorch.is_tensor(x) then error(("%s: argument 1 must be a tensor, got %s"):format(name, type(x)), 3) end
  local dt = x:dtype()
  if dt ~= "float32" and dt ~= "float64" and dt ~= "bfloat16" and dt ~= "float16" then
    error(("%s: needs a floating point tensor, got %s"):format(name, dt), 3)
  end
  return {dtype = dt == "float64" and "float64" or "float32", device = x:device()}
end
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
for name, dt in pairs{int = "int32", bool = "bool", half = "float16", bfloat16 = "bfloat16", byte = "uint8"} do
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

-- nn.init: PyTorch's initialisers, in place on a tensor (data writes, as under
-- no_grad), returning it. Arguments are positional in PyTorch's order, or one
-- options table after the tensor: kaiming_uniform_(w, {mode = "fan_out"}).
local init = {}
zorch.nn.init = init

local function args(name, t, opts, list, ...)
  if not zorch.is_tensor(t) then error(("nn.init.%s: argument 1 must be a tensor, got %s"):format(name, type(t)), 3) end
  local vals = table.pack(...)
  if type(opts) == "table" then
    zorch._check_options("nn.init." .. name, opts, list, 4)
    for i, k in ipairs(list) do vals[i] = opts[k] end
  else
    table.insert(vals, 1, opts)
  end
  return table.unpack(vals, 1, #list)
end
function init.calculate_gain(nonlinearity, param)
  local n = nonlinearity
  if n == "linear" or n == "sigmoid" or (type(n) == "string" and (n:match("^conv%d?d$") or n:match("^conv_transpose%dd$"))) then
    return 1
  elseif n == "tanh" then return 5 / 3
  elseif n == "relu" then return math.sqrt(2)
  elseif n == "leaky_relu" then
    local s = param == nil and 0.01 or param
    if type(s) ~= "number" then error("nn.init.calculate_gain: negative_slope must be a number, got " .. type(s), 2) end
    return math.sqrt(2 / (1 + s * s))
  elseif n == "selu" then return 3 / 4
  end
  error(("nn.init.calculate_gain: unsupported nonlinearity %s"):format(tostring(n)), 2)
end

-- fan_in, fan_out as PyTorch computes them: dims 2 and 1 times the rest.
local function fans(name, t)
  local nd = t:dim()
  if nd < 2 then
    error(("nn.init.%s: fan in and fan out need a tensor of at least 2 dims, got shape %s"):format(name, tostring(t.shape)), 4)
  end
  local receptive = 1
  for d = 3, nd do receptive = receptive * t:size(d) end
  return t:size(2) * receptive, t:size(1) * receptive
end

function init.uniform_(t, a, b)
  a, b = args("uniform_", t, a, {"a", "b"}, b)
  return t:uniform_(a, b)
end
function init.normal_(t, mean, std)
  mean, std = args("normal_", t, mean, {"mean", "std"}, std)
  return t:normal_(mean, std)
end
function init.constant_(t, val)
  if not zorch.is_tensor(t) then error("nn.init.constant_: argument 1 must be a tensor, got " .. type(t), 2) end
  if type(val) ~= "number" and type(val) ~= "boolean" then
    error("nn.init.constant_: val must be a number, got " .. type(val), 2)
  end
  return zorch.no_grad(function() return t:fill_(val) end)
end
function init.ones_(t) return init.constant_(t, 1) end
function init.zeros_(t) return init.constant_(t, 0) end
function init.eye_(t)
  if not zorch.is_tensor(t) or t:dim() ~= 2 then
    error("nn.init.eye_: needs a 2-d tensor, got " .. (zorch.is_tensor(t) and tostring(t.shape) or type(t)), 2)
  end
  local e = zorch.eye(t:size(1), t:size(2), {dtype = t:dtype(), device = t:device()})
  return zorch.no_grad(function() return assign("eye_", t, e) end)
end

local function xavier_std(name, t, gain)
  local fi, fo = fans(name, t)
  gain = gain == nil and 1 or gain
  if type(gain) ~= "number" then error(("nn.init.%s: gain must be a number, got %s"):format(name, type(gain)), 3) end
  return gain * math.sqrt(2 / (fi + fo))
end
function init.xavier_uniform_(t, gain)
  gain = args("xavier_uniform_", t, gain, {"gain"})
  local a = math.sqrt(3) * xavier_std("xavier_uniform_", t, gain)
  return t:uniform_(-a, a)
end
function init.xavier_normal_(t, gain)
  gain = args("xavier_normal_", t, gain, {"gain"})
  return t:normal_(0, xavier_std("xavier_normal_", t, gain))
end

local function kaiming_std(name, t, a, mode, nonlinearity)
  mode, nonlinearity = mode or "fan_in", nonlinearity or "leaky_relu"
  if mode ~= "fan_in" and mode ~= "fan_out" then
    error(("nn.init.%s: mode must be \"fan_in\" or \"fan_out\", got %s"):format(name, tostring(mode)), 3)
  end
  local fi, fo = fans(name, t)
  local ok, gain = pcall(init.calculate_gain, nonlinearity, a or 0)
  if not ok then error(("nn.init.%s: %s"):format(name, tostring(gain):gsub("^.-nn%.init%.calculate_gain: ", "")), 3) end
  return gain / math.sqrt(mode == "fan_in" and fi or fo)
end
local KAIMING = {"a", "mode", "nonlinearity"}
function init.kaiming_uniform_(t, a, mode, nonlinearity)
  a, mode, nonlinearity = args("kaiming_uniform_", t, a, KAIMING, mode, nonlinearity)
  local bound = math.sqrt(3) * kaiming_std("kaiming_uniform_", t, a, mode, nonlinearity)
  return t:uniform_(-bound, bound)
end
function init.kaiming_normal_(t, a, mode, nonlinearity)
  a, mode, nonlinearity = args("kaiming_normal_", t, a, KAIMING, mode, nonlinearity)
  return t:normal_(0, kaiming_std("kaiming_normal_", t, a, mode, nonlinearity))
end

-- Normal(mean, std) values redrawn until they fall in [a, b].
function init.trunc_normal_(t, mean, std, a, b)
  mean, std, a, b = args("trunc_normal_", t, mean, {"mean", "std", "a", "b"}, std, a, b)
  mean, std, a, b = mean or 0, std or 1, a or -2, b or 2
  for _, kv in ipairs({{"mean", mean}, {"std", std}, {"a", a}, {"b", b}}) do
    if type(kv[2]) ~= "number" then
      error(("nn.init.trunc_normal_: %s must be a number, got %s"):format(kv[1], type(kv[2])), 2)
    end
  end
  if not (a < b) then error(("nn.init.trunc_normal_: a (%g) must be below b (%g)"):format(a, b), 2) end
  if std <= 0 then error(("nn.init.trunc_normal_: std must be > 0, got %g"):format(std), 2) end
  local o = float_opts("trunc_normal_", t)
  return zorch.no_grad(function()
    local v = zorch.randn(t.shape, o) * std + mean
    for _ = 1, 1000 do
      local out = (v - (a + b) / 2):abs():gt((b - a) / 2)
      if out:sum():item() == 0 then break end
      v = zorch.where(out, zorch.randn(t.shape, o) * std + mean, v)
    end
    return assign("trunc_normal_", t, v:clamp(a, b))
  end)
end

-- An orthogonal matrix (rows or columns orthonormal, whichever are fewer)
-- from the Gram-Schmidt process, twice over, on normal draws: Q of a QR with
-- R's diagonal positive, as PyTorch's sign-corrected QR.
function init.orthogonal_(t, gain)
  gain = args("orthogonal_", t, gain, {"gain"})
  gain = gain == nil and 1 or gain
  if t:dim() < 2 then error("nn.init.orthogonal_: needs a tensor of at least 2 dims, got shape " .. tostring(t.shape), 2) end
  local o = float_opts("orthogonal_", t)
  local rows = t:size(1)
  local cols = t:numel() // math.max(rows, 1)
  return zorch.no_grad(function()
    local a = zorch.randn({rows, cols}, {dtype = "float64"})
    local transposed = rows < cols
    if transposed then a = a:t():contiguous() end
    local n, k = a:size(1), a:size(2)
    local q = zorch.zeros({n, k}, {dtype = "float64"})
    for j = 1, k do
      local v = a:select(2, j)
      for _ = 1, 2 do
        if j > 1 then
          local qj = q:narrow(2, 1, j - 1)
          v = v - qj:matmul(qj:t():matmul(v))
        end
      end
      q:select(2, j):copy_(v / (v * v):sum():sqrt())
    end
    if transposed then q = q:t() end
    return assign("orthogonal_", t, (q * gain):reshape(t.shape):to(o.dtype))
  end)
end
