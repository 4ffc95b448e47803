-- zorch.nn.initializers: nn.init, PyTorch's weight initialisers.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local float_opts = zorch._require("zorch.util").float_opts
local assign = zorch._assign

-- nn.init: PyTorch's initialisers, in place on a tensor (data writes, as under
-- no_grad), returning it. Arguments are positional in PyTorch's order, or one
-- options table after the tensor: kaiming_uniform_(w, {mode = "fan_out"}).
local init = {}
zorch.nn.init = init -- (a file named init.lua would be the folder)

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
