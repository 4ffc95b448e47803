-- More of torch.nn, composed from the tensor ops: the activations GLU,
-- Softmin, Threshold, the shrinks, PReLU, RReLU and Softmax2d; pixel and
-- channel shuffles and the padding modules; interpolate and Upsample;
-- adaptive max and power-average pooling and the functional forms of the 1-d
-- layers; the margin losses; Bilinear, LocalResponseNorm, AlphaDropout,
-- Unfold and Fold. PyTorch's names, defaults, state-dict names and printout;
-- dims count from 1 and class indices are 1-based.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
zorch._require "zorch.nn.loss"
zorch._require "zorch.nn.norm"
local lib = zorch._nn_lib
local Module, check_int, shape_str, uniform = lib.Module, lib.check_int, lib.shape_str, lib.uniform
local read_opts, is_bool, is_num, need_tensor = lib.read_opts, lib.is_bool, lib.is_num,
  lib.need_tensor
local reduce, REDUCTION, opt_tensor, softplus, py_bool = lib.reduce, lib.REDUCTION, lib.opt_tensor, lib.softplus,
  lib.py_bool

-- A number as Python's repr writes it: the shortest digits that read back,
-- a float with an integer value ending in ".0" (so modules print PyTorch's
-- `upper=0.3333333333333333`, `value=20.0`).
local function py_num(v)
  if math.type(v) ~= "float" then return tostring(v) end
  if v ~= v then return "nan" elseif v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  local p = 1
  while p < 17 and tonumber(("%." .. p .. "g"):format(v)) ~= v do p = p + 1 end
  local e = tonumber(("%." .. (p - 1) .. "e"):format(v):match("e(.*)$"))
  if e < -4 or e >= 16 then return ("%." .. p .. "g"):format(v) end
  local s = ("%." .. math.max(p - 1 - e, 0) .. "f"):format(v)
  return s:find("%.") and s or s .. ".0"
end
-- A size as PyTorch prints it: a number as is, a list as a tuple.
local function tuple_str(v)
  if type(v) ~= "table" then return py_num(v) end
  local t = {}
  for i, x in ipairs(v) do t[i] = py_num(x) end
  return "(" .. table.concat(t, ", ") .. (#t == 1 and ",)" or ")")
end

-- d (1-based, negative from the end) within x's dims, or an error naming fn
-- and the input's shape; returns the positive dim.
local function dim_in(fn, name, d, x, level)
  local n = x:dim()
  if math.type(d) ~= "integer" or d == 0 or d > n or d < -n then
    error(("%s: %s must be a non-zero integer within the %d dims of input %s (dims count from 1), got %s"):format(
      fn, name, n, shape_str(x), tostring(d)), level + 1)
  end
  return d < 0 and n + 1 + d or d
end
local function need_number(fn, name, v, level)
  if type(v) ~= "number" then error(("%s: %s must be a number, got %s"):format(fn, name, tostring(v)), level + 1) end
end
local INT_DTYPES = {int64 = true, int32 = true, int16 = true, int8 = true, uint8 = true}
local FLOAT_DTYPES = {float32 = true, float64 = true, bfloat16 = true, float16 = true}
local function need_float(fn, what, t, level)
  if not FLOAT_DTYPES[t:dtype()] then
    error(("%s: %s must be a float tensor, got dtype %s"):format(fn, what, t:dtype()), level + 1)
  end
end
-- runs f(...) and raises its error as fn's (the op's name replaced), at level
local function as_fn(fn, level, f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] then
    local msg = tostring(r[2]):gsub("^[^:]*:%d+: ", ""):gsub("^[%w_.]+: ", "")
    error(fn .. ": " .. msg, level + 1)
  end
  return table.unpack(r, 2, r.n)
end

-- The output of fn, shape `shape`, must fit in memory: an absurd size is the
-- allocation's error before any loop over it in Lua.
local function need_room(fn, shape, x, level)
  for _, v in ipairs(shape) do
    if math.type(v) ~= "integer" then
      error(("%s: the output size %s is too large for input %s"):format(fn, tostring(v), shape_str(x)), level + 1)
    end
  end
  as_fn(fn, level + 1, zorch.empty, shape, {dtype = x:dtype(), device = x:device()})
end

-- ---- activations ----------------------------------------------------------------------------

-- glu(x, dim = -1): the first half of x along dim times the sigmoid of the second
function zorch.glu(x, dim)
  need_tensor("glu", "input", x)
  local d = dim_in("glu", "dim", dim == nil and -1 or dim, x, 2)
  local n = x.shape[d]
  if n % 2 ~= 0 then
    error(("glu: dim %d of input %s must have an even size, got %d"):format(d, shape_str(x), n), 2)
  end
  return x:narrow(d, 1, n // 2) * x:narrow(d, n // 2 + 1, n // 2):sigmoid()
end

-- softmin(x, dim): softmax of -x along dim
function zorch.softmin(x, dim)
  need_tensor("softmin", "input", x)
  return zorch.softmax(-x, dim_in("softmin", "dim", dim, x, 2))
end

-- threshold(x, threshold, value): x where x > threshold, else value
function zorch.threshold(x, th, value)
  need_tensor("threshold", "input", x)
  need_number("threshold", "threshold", th, 2)
  need_number("threshold", "value", value, 2)
  return zorch.where(x:gt(th), x, value)
end

-- hardshrink(x, lambd = 0.5): x where |x| > lambd, else 0
function zorch.hardshrink(x, lambd)
  need_tensor("hardshrink", "input", x)
  lambd = lambd == nil and 0.5 or lambd
  need_number("hardshrink", "lambd", lambd, 2)
  return zorch.where(x:abs():gt(lambd), x, 0)
end

-- softshrink(x, lambd = 0.5): x - lambd above lambd, x + lambd below -lambd, else 0
function zorch.softshrink(x, lambd)
  need_tensor("softshrink", "input", x)
  lambd = lambd == nil and 0.5 or lambd
  if type(lambd) ~= "number" or not (lambd >= 0) then
    error(("softshrink: lambd must be a number >= 0, got %s"):format(tostring(lambd)), 2)
  end
  return zorch.where(x:gt(lambd), x - lambd, zorch.where(x:lt(-lambd), x + lambd, 0))
end

-- prelu(x, weight): x where x > 0, else weight x; weight holds one slope or one
-- per channel (dim 2; a 1-d input has one channel)
function zorch.prelu(x, w)
  need_tensor("prelu", "input", x)
  need_tensor("prelu", "weight", w)
  local c = x:dim() >= 2 and x.shape[2] or 1
  if w:dim() > 1 or (w:numel() ~= 1 and w:numel() ~= c) then
    error(("prelu: weight %s must hold 1 slope or one per channel (%d) of input %s"):format(shape_str(w), c,
      shape_str(x)), 2)
  end
  if w:numel() ~= 1 then
    local s = {1, c}
    for _ = 3, x:dim() do s[#s + 1] = 1 end
    w = w:reshape(s)
  elseif x:dim() == 0 then
    w = w:reshape({})
  end
  return zorch.where(x:gt(0), x, x * w)
end

-- rrelu(x, lower = 1/8, upper = 1/3, training = false): negatives times a slope
-- drawn from U(lower, upper) for each element in training, (lower + upper) / 2 in eval
function zorch.rrelu(x, lower, upper, training)
  need_tensor("rrelu", "input", x)
  lower, upper = lower == nil and 1 / 8 or lower, upper == nil and 1 / 3 or upper
  need_number("rrelu", "lower", lower, 2)
  need_number("rrelu", "upper", upper, 2)
  if lower > upper then error(("rrelu: lower %s must not exceed upper %s"):format(py_num(lower), py_num(upper)), 2) end
  if training ~= nil and type(training) ~= "boolean" then
    error(("rrelu: training must be true or false, got %s"):format(tostring(training)), 2)
  end
  if not training then return zorch.leaky_relu(x, (lower + upper) / 2) end
  local slope = zorch.rand(x.shape, {dtype = x:dtype(), device = x:device()}) * (upper - lower) + lower
  return zorch.where(x:gt(0), x, x * slope) -- (x = 0 takes its slope as gradient, as PyTorch's)
end

nn.GLU = Module:extend "nn.GLU"
function nn.GLU:init(dim)
  dim = dim == nil and -1 or dim
  lib.check_dim("nn.GLU", "dim", dim)
  self.dim = dim
end
function nn.GLU:forward(x) return zorch.glu(x, self.dim) end
nn.GLU.__tostring = function(s) return ("nn.GLU(dim=%d)"):format(s.dim) end

nn.Softmin = Module:extend "nn.Softmin"
function nn.Softmin:init(dim)
  lib.check_dim("nn.Softmin", "dim", dim)
  self.dim = dim
end
function nn.Softmin:forward(x) return zorch.softmin(x, self.dim) end
nn.Softmin.__tostring = function(s) return ("nn.Softmin(dim=%d)"):format(s.dim) end

nn.Threshold = Module:extend "nn.Threshold"
function nn.Threshold:init(th, value)
  need_number("nn.Threshold", "threshold", th, 3)
  need_number("nn.Threshold", "value", value, 3)
  self.threshold, self.value = th, value
end
function nn.Threshold:forward(x) return zorch.threshold(x, self.threshold, self.value) end
nn.Threshold.__tostring = function(s)
  return ("nn.Threshold(threshold=%s, value=%s)"):format(py_num(s.threshold), py_num(s.value))
end

-- Hardshrink(lambd = 0.5), Softshrink(lambd = 0.5)
local function shrink_class(name, fn)
  local cls = Module:extend(name)
  function cls:init(lambd)
    lambd = lambd == nil and 0.5 or lambd
    if type(lambd) ~= "number" or (fn == zorch.softshrink and not (lambd >= 0)) then
      error(("%s: lambd must be a number%s, got %s"):format(name, fn == zorch.softshrink and " >= 0" or "",
        tostring(lambd)), 3)
    end
    self.lambd = lambd
  end
  function cls:forward(x) return fn(x, self.lambd) end
  cls.__tostring = function(s) return ("%s(%s)"):format(name, py_num(s.lambd)) end
  return cls
end
nn.Hardshrink = shrink_class("nn.Hardshrink", zorch.hardshrink)
nn.Softshrink = shrink_class("nn.Softshrink", zorch.softshrink)

-- PReLU(num_parameters = 1, init = 0.25): parameter `weight` (num_parameters,)
nn.PReLU = Module:extend "nn.PReLU"
function nn.PReLU:init(num_parameters, init)
  num_parameters = num_parameters == nil and 1 or num_parameters
  check_int("nn.PReLU", "num_parameters", num_parameters)
  init = init == nil and 0.25 or init
  need_number("nn.PReLU", "init", init, 3)
  self.num_parameters = num_parameters
  self.weight = nn.Parameter(zorch.full({num_parameters}, init))
end
function nn.PReLU:forward(x) return zorch.prelu(x, self.weight) end
nn.PReLU.__tostring = function(s) return ("nn.PReLU(num_parameters=%d)"):format(s.num_parameters) end

-- RReLU(lower = 1/8, upper = 1/3): random slopes in training, their mean in eval
nn.RReLU = Module:extend "nn.RReLU"
function nn.RReLU:init(lower, upper)
  lower, upper = lower == nil and 1 / 8 or lower, upper == nil and 1 / 3 or upper
  need_number("nn.RReLU", "lower", lower, 3)
  need_number("nn.RReLU", "upper", upper, 3)
  if lower > upper then error(("nn.RReLU: lower %s must not exceed upper %s"):format(py_num(lower), py_num(upper)), 3) end
  self.lower, self.upper = lower, upper
end
function nn.RReLU:forward(x) return zorch.rrelu(x, self.lower, self.upper, self.training) end
nn.RReLU.__tostring = function(s) return ("nn.RReLU(lower=%s, upper=%s)"):format(py_num(s.lower), py_num(s.upper)) end

-- Softmax2d(): softmax over the channels of (N, C, H, W) or (C, H, W)
nn.Softmax2d = Module:extend "nn.Softmax2d"
function nn.Softmax2d:forward(x)
  need_tensor("nn.Softmax2d", "input", x)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    error(("nn.Softmax2d: expected input (N, C, H, W) or (C, H, W), got %s"):format(shape_str(x)), 2)
  end
  return zorch.softmax(x, -3)
end

-- ---- pixel and channel shuffles, padding ------------------------------------------------------

-- The leading dims of x before its last k, multiplied (1 when there are none).
local function lead_of(x, k)
  local b = 1
  for i = 1, x:dim() - k do b = b * x.shape[i] end
  return b
end
local function lead_shape(x, k, tail)
  local s = {}
  for i = 1, x:dim() - k do s[i] = x.shape[i] end
  for _, v in ipairs(tail) do s[#s + 1] = v end
  return s
end
local function pos_int(fn, name, v, level)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), level + 1)
  end
end

-- pixel_shuffle(x, r): (*, C r^2, H, W) to (*, C, H r, W r)
function zorch.pixel_shuffle(x, r)
  need_tensor("pixel_shuffle", "input", x)
  pos_int("pixel_shuffle", "upscale_factor", r, 2)
  local n = x:dim()
  if n < 3 or r > (1 << 31) or x.shape[n - 2] % (r * r) ~= 0 then
    error(("pixel_shuffle: expected input (*, C * %s, H, W) (channels divisible by upscale_factor^2), got %s"):format(
      r <= (1 << 31) and tostring(r * r) or r .. "^2", shape_str(x)), 2)
  end
  local c, h, w = x.shape[n - 2] // (r * r), x.shape[n - 1], x.shape[n]
  local y = x:reshape({lead_of(x, 3), c, r, r, h, w}):permute(1, 2, 5, 3, 6, 4)
  return y:reshape(lead_shape(x, 3, {c, h * r, w * r}))
end

-- pixel_unshuffle(x, r): (*, C, H r, W r) to (*, C r^2, H, W)
function zorch.pixel_unshuffle(x, r)
  need_tensor("pixel_unshuffle", "input", x)
  pos_int("pixel_unshuffle", "downscale_factor", r, 2)
  local n = x:dim()
  if n < 3 or r > (1 << 31) or x.shape[n - 1] % r ~= 0 or x.shape[n] % r ~= 0 then
    error(("pixel_unshuffle: expected input (*, C, H * %d, W * %d), got %s"):format(r, r, shape_str(x)), 2)
  end
  local c, h, w = x.shape[n - 2], x.shape[n - 1] // r, x.shape[n] // r
  local y = x:reshape({lead_of(x, 3), c, h, r, w, r}):permute(1, 2, 4, 6, 3, 5)
  return y:reshape(lead_shape(x, 3, {c * r * r, h, w}))
end

-- channel_shuffle(x, groups): (N, C, *) with C read as (groups, C / groups), transposed
function zorch.channel_shuffle(x, g)
  need_tensor("channel_shuffle", "input", x)
  pos_int("channel_shuffle", "groups", g, 2)
  if x:dim() < 3 or x.shape[2] % g ~= 0 then
    error(("channel_shuffle: expected input (N, C, *) with %d groups dividing C, got %s"):format(g, shape_str(x)), 2)
  end
  local s = {x.shape[1], g, x.shape[2] // g}
  for i = 3, x:dim() do s[#s + 1] = x.shape[i] end
  return x:reshape(s):transpose(2, 3):reshape(x.shape)
end

local function scale_class(name, fn, field)
  local cls = Module:extend(name)
  function cls:init(v)
    pos_int(name, field, v, 3)
    self[field] = v
  end
  function cls:forward(x) return fn(x, self[field]) end
  cls.__tostring = function(s) return ("%s(%s=%d)"):format(name, field, s[field]) end
  return cls
end
nn.PixelShuffle = scale_class("nn.PixelShuffle", zorch.pixel_shuffle, "upscale_factor")
nn.PixelUnshuffle = scale_class("nn.PixelUnshuffle", zorch.pixel_unshuffle, "downscale_factor")
nn.ChannelShuffle = scale_class("nn.ChannelShuffle", zorch.channel_shuffle, "groups")

-- The padding modules over zorch.pad: padding is one integer for every side
-- or 2 k of them (left, right, top, bottom, front, back), PyTorch's order.
local function pad_class(name, mode, k, with_value)
  local cls = Module:extend(name)
  function cls:init(padding, value)
    local p = padding
    if math.type(p) == "integer" then
      p = {}
      for i = 1, 2 * k do p[i] = padding end
    end
    local good = type(p) == "table" and #p == 2 * k
    for i = 1, good and #p or 0 do good = good and math.type(p[i]) == "integer" end
    if not good then
      error(("%s: padding must be an integer or a list of %d integers, got %s"):format(name, 2 * k,
        type(padding) == "table" and tuple_str(padding) or tostring(padding)), 3)
    end
    self.padding = p
    if with_value then
      need_number(name, "value", value, 3)
      self.value = value
    end
  end
  function cls:forward(x)
    need_tensor(name, "input", x)
    if x:dim() ~= k + 1 and x:dim() ~= k + 2 then
      error(("%s: expected a %dD or %dD input, got %s"):format(name, k + 1, k + 2, shape_str(x)), 2)
    end
    return as_fn(name, 2, zorch.pad, x, self.padding, mode, self.value or 0)
  end
  cls.__tostring = function(s)
    if with_value then return ("%s(padding=%s, value=%s)"):format(name, tuple_str(s.padding), py_num(s.value)) end
    return ("%s(%s)"):format(name, tuple_str(s.padding))
  end
  return cls
end
for k = 1, 3 do
  nn["ZeroPad" .. k .. "d"] = pad_class("nn.ZeroPad" .. k .. "d", "constant", k)
  nn["ConstantPad" .. k .. "d"] = pad_class("nn.ConstantPad" .. k .. "d", "constant", k, true)
  nn["ReflectionPad" .. k .. "d"] = pad_class("nn.ReflectionPad" .. k .. "d", "reflect", k)
  nn["ReplicationPad" .. k .. "d"] = pad_class("nn.ReplicationPad" .. k .. "d", "replicate", k)
  nn["CircularPad" .. k .. "d"] = pad_class("nn.CircularPad" .. k .. "d", "circular", k)
end

-- ---- interpolation ----------------------------------------------------------------------------

-- x rounded to float32 (PyTorch computes the nearest modes' source indices in float32)
local function f32(v) return (string.unpack("f", string.pack("f", v))) end

-- The taps of one dim resized from n to m: a list of {indices (0-based), weights}
-- per tap, weights nil for nearest. `scale` is the scale_factor the caller
-- gave (nil with a size, or with recompute_scale_factor).
local CUBIC_A = -0.75
local function cubic_weights(t)
  local a = CUBIC_A
  local function near(u) return ((a + 2) * u - (a + 3)) * u * u + 1 end
  local function far(u) return ((a * u - 5 * a) * u + 8 * a) * u - 4 * a end
  return {far(t + 1), near(t), near(1 - t), far(2 - t)}
end
local function taps_of(mode, n, m, scale, align_corners)
  local idx, wts = {}, {}
  if mode == "nearest" or mode == "nearest-exact" then
    local s = f32(scale and 1 / scale or n / m)
    idx[1] = {}
    for j = 0, m - 1 do
      local src
      if mode == "nearest" then src = math.floor(f32(j * s)) else src = math.floor((j + 0.5) * s) end
      idx[1][j + 1] = math.min(src, n - 1)
    end
    return idx
  end
  local s
  if align_corners then s = m > 1 and (n - 1) / (m - 1) or 0
  else s = scale and 1 / scale or n / m end
  local ntaps = mode == "bicubic" and 4 or 2
  for k = 1, ntaps do idx[k], wts[k] = {}, {} end
  for j = 0, m - 1 do
    local src = align_corners and j * s or (j + 0.5) * s - 0.5
    if mode == "bicubic" then
      local i0 = math.floor(src)
      local w = cubic_weights(src - i0)
      for k = 1, 4 do
        idx[k][j + 1] = math.max(0, math.min(n - 1, i0 - 2 + k))
        wts[k][j + 1] = w[k]
      end
    else
      if src < 0 then src = 0 end
      local i0 = math.floor(src)
      local i1 = math.min(i0 + 1, n - 1)
      local l = src - i0
      idx[1][j + 1], wts[1][j + 1] = i0, 1 - l
      idx[2][j + 1], wts[2][j + 1] = i1, l
    end
  end
  return idx, wts
end
-- x resized along dim d by the taps: sum over taps of x[idx] * weight
local function apply_taps(x, d, idx, wts)
  local y
  for k = 1, #idx do
    local ix = {}
    for j, v in ipairs(idx[k]) do ix[j] = v + 1 end
    local t = zorch.index_select(x, d, zorch.tensor(ix, {dtype = "int64", device = x:device()}))
    if wts then
      local ws = {}
      for i = 1, x:dim() do ws[i] = i == d and #ix or 1 end
      t = t * zorch.tensor(wts[k], {dtype = x:dtype(), device = x:device()}):reshape(ws)
    end
    y = y and y + t or t
  end
  return y
end

local MODES = {nearest = 0, ["nearest-exact"] = 0, linear = 1, bilinear = 2, bicubic = 2, trilinear = 3, area = 0}
local INTERP = {
  size = {nil, function(v) return v == nil or math.type(v) == "integer" or type(v) == "table" end,
          "an integer or a list of them"},
  scale_factor = {nil, function(v) return v == nil or type(v) == "number" or type(v) == "table" end,
                  "a number or a list of them"},
  mode = {"nearest", function(v) return MODES[v] ~= nil end,
          "'nearest', 'nearest-exact', 'linear', 'bilinear', 'bicubic', 'trilinear' or 'area'"},
  align_corners = {nil, function(v) return v == nil or is_bool(v) end, "true, false or nil"},
  recompute_scale_factor = {nil, function(v) return v == nil or is_bool(v) end, "true, false or nil"},
  antialias = {false, function(v) return v == false end, "false (antialiasing is not supported)"},
}
-- a size or scale per spatial dim: one value repeated, or a list of k
local function per_dim(fn, name, v, k, check, level)
  local t = type(v) == "table" and v or {}
  if type(v) ~= "table" then for i = 1, k do t[i] = v end end
  local good = #t == k
  for i = 1, k do good = good and check(t[i]) end
  if not good then
    error(("%s: %s must be %s or a list of %d, for an input with %d spatial dims, got %s"):format(fn, name,
      name == "size" and "a positive integer" or "a positive number", k, k,
      type(v) == "table" and tuple_str(v) or tostring(v)), level + 1)
  end
  return t
end

-- interpolate(x, {size | scale_factor, mode = "nearest", align_corners,
-- recompute_scale_factor}): x (N, C, d1, ...) with 1 to 3 spatial dims resized
function zorch.interpolate(x, opts)
  local fn = "interpolate"
  local o = read_opts(fn, opts, INTERP, 3)
  need_tensor(fn, "input", x)
  local k = x:dim() - 2
  if k < 1 or k > 3 then
    error(("%s: expected input (N, C, d1, ...) with 1 to 3 spatial dims, got %s"):format(fn, shape_str(x)), 2)
  end
  local want = MODES[o.mode]
  if want ~= 0 and want ~= k then
    error(("%s: mode '%s' takes an input with %d spatial dims (%dD), got %s"):format(fn, o.mode, want, want + 2,
      shape_str(x)), 2)
  end
  if o.align_corners ~= nil and want == 0 then
    error(("%s: align_corners can only be set with the modes linear, bilinear, bicubic and trilinear, not '%s'"):format(
      fn, o.mode), 2)
  end
  if (o.size == nil) == (o.scale_factor == nil) then
    error(("%s: give either size or scale_factor (one of them), for input %s"):format(fn, shape_str(x)), 2)
  end
  local sizes, scales = {}, nil
  if o.size ~= nil then
    sizes = per_dim(fn, "size", o.size, k, function(v) return math.type(v) == "integer" and v >= 1 end, 2)
  else
    local sf = per_dim(fn, "scale_factor", o.scale_factor, k, function(v) return type(v) == "number" and v > 0 end, 2)
    for i = 1, k do
      sizes[i] = math.floor(x.shape[i + 2] * sf[i])
      if math.type(sizes[i]) ~= "integer" then
        error(("%s: scale_factor %s gives a dim too large for input %s"):format(fn, py_num(sf[i]), shape_str(x)), 2)
      end
      if sizes[i] < 1 then
        error(("%s: scale_factor %s gives an empty dim %d for input %s"):format(fn, py_num(sf[i]), i + 2,
          shape_str(x)), 2)
      end
    end
    if not o.recompute_scale_factor then scales = sf end
  end
  need_room(fn, lead_shape(x, k, sizes), x, 2)
  for i = 3, x:dim() do
    if x.shape[i] == 0 then error(("%s: expected non-empty spatial dims, got input %s"):format(fn, shape_str(x)), 2) end
  end
  if o.mode == "area" then
    local pool = ({zorch.adaptive_avg_pool1d, zorch.adaptive_avg_pool2d})[k]
    if not pool then error(("%s: mode 'area' takes 1 or 2 spatial dims, got %s"):format(fn, shape_str(x)), 2) end
    return pool(x, k == 1 and sizes[1] or sizes)
  end
  local mode = o.mode
  if want ~= 0 and not FLOAT_DTYPES[x:dtype()] then
    error(("%s: mode '%s' takes a float input, got dtype %s"):format(fn, o.mode, x:dtype()), 2)
  end
  if mode == "bilinear" or mode == "trilinear" then mode = "linear" end
  local y = x
  for i = 1, k do
    local n, m = x.shape[i + 2], sizes[i]
    if n ~= m or scales then
      local idx, wts = taps_of(mode, n, m, scales and scales[i], o.align_corners)
      y = apply_taps(y, i + 2, idx, wts)
    end
  end
  return rawequal(y, x) and x:clone() or y -- (a new tensor, as PyTorch's, even at the same size)
end

-- Upsample{size | scale_factor, mode = "nearest", align_corners, recompute_scale_factor}
local UPSAMPLE = {size = INTERP.size, scale_factor = INTERP.scale_factor, mode = INTERP.mode,
                  align_corners = INTERP.align_corners, recompute_scale_factor = INTERP.recompute_scale_factor}
local function upsample_class(name, fixed)
  local cls = Module:extend(name)
  function cls:init(opts)
    local spec = UPSAMPLE
    if fixed then spec = {size = UPSAMPLE.size, scale_factor = UPSAMPLE.scale_factor} end
    local o = read_opts(name, opts, spec, 4)
    if (o.size == nil) == (o.scale_factor == nil) then
      error(("%s: give either size or scale_factor (one of them)"):format(name), 3)
    end
    for key, v in pairs(fixed or {}) do o[key] = v end
    for key, v in pairs(o) do rawset(self, key, v) end
    rawset(self, "_opts", o)
  end
  function cls:forward(x) return as_fn(name, 2, zorch.interpolate, x, self._opts) end
  cls.__tostring = function(s)
    local t = {}
    if s.size ~= nil then t[#t + 1] = "size=" .. tuple_str(s.size) end
    if s.scale_factor ~= nil then
      local sf = s.scale_factor
      if type(sf) == "table" then
        local f = {}
        for i, v in ipairs(sf) do f[i] = v + 0.0 end
        sf = f
      else sf = sf + 0.0 end
      t[#t + 1] = "scale_factor=" .. tuple_str(sf)
    end
    t[#t + 1] = ("mode='%s'"):format(s.mode)
    return ("%s(%s)"):format(name, table.concat(t, ", "))
  end
  return cls
end
nn.Upsample = upsample_class("nn.Upsample")
nn.UpsamplingNearest2d = upsample_class("nn.UpsamplingNearest2d", {mode = "nearest"})
nn.UpsamplingBilinear2d = upsample_class("nn.UpsamplingBilinear2d", {mode = "bilinear", align_corners = true})

-- ---- pooling, the 1-d functions, instance norm and channel dropout ---------------------------

-- Max over the adaptive windows of dim d (n to m): window i spans
-- floor(i n / m) .. ceil((i + 1) n / m) - 1; values and 0-based indices along d.
local function adaptive_max_dim(x, d, m)
  local n = x.shape[d]
  local vals, idxs = {}, {}
  for i = 0, m - 1 do
    local s, e = i * n // m, -(-(i + 1) * n // m)
    local v, ix = zorch.max(x:narrow(d, s + 1, e - s), d, true)
    vals[#vals + 1], idxs[#idxs + 1] = v, ix + (s - 1)
  end
  return zorch.cat(vals, d), zorch.cat(idxs, d)
end
local function check_pool_input(fn, x, k, want)
  need_tensor(fn, "input", x)
  if x:dim() ~= k + 1 and x:dim() ~= k + 2 then
    error(("%s: expected input %s, got %s"):format(fn, want, shape_str(x)), 3)
  end
  for i = x:dim() - k + 1, x:dim() do
    if x.shape[i] == 0 then error(("%s: expected non-empty spatial dims, got input %s"):format(fn, shape_str(x)), 3) end
  end
end
local function check_ret(fn, v)
  if v ~= nil and type(v) ~= "boolean" then
    error(("%s: return_indices must be true or false, got %s"):format(fn, tostring(v)), 3)
  end
end

-- adaptive_max_pool1d(x, n, return_indices = false): x (N, C, L) or (C, L);
-- with return_indices also the 1-based position of each maximum along L
function zorch.adaptive_max_pool1d(x, n, return_indices)
  local fn = "adaptive_max_pool1d"
  check_pool_input(fn, x, 1, "(N, C, L) or (C, L)")
  pos_int(fn, "output_size", n, 2)
  check_ret(fn, return_indices)
  need_room(fn, lead_shape(x, 1, {n}), x, 2)
  local y, idx = adaptive_max_dim(x, x:dim(), n)
  if return_indices then return y, idx + 1 end
  return y
end

-- adaptive_max_pool2d(x, n | {oh, ow}, return_indices = false): x (N, C, H, W)
-- or (C, H, W); the max over rows, then over columns; with return_indices also
-- the 1-based position of each maximum in its flattened image (h - 1) W + w.
function zorch.adaptive_max_pool2d(x, size, return_indices)
  local fn = "adaptive_max_pool2d"
  check_pool_input(fn, x, 2, "(N, C, H, W) or (C, H, W)")
  local sz = math.type(size) == "integer" and {size, size} or size
  if type(sz) ~= "table" or #sz ~= 2 or math.type(sz[1]) ~= "integer" or math.type(sz[2]) ~= "integer"
      or sz[1] < 1 or sz[2] < 1 then
    error(("%s: output_size must be a positive integer or a pair {oh, ow} of them, got %s"):format(fn,
      type(size) == "table" and tuple_str(size) or tostring(size)), 2)
  end
  check_ret(fn, return_indices)
  need_room(fn, lead_shape(x, 2, sz), x, 2)
  local n = x:dim()
  local rows, r = adaptive_max_dim(x, n - 1, sz[1])
  local y, c = adaptive_max_dim(rows, n, sz[2])
  if not return_indices then return y end
  return y, zorch.gather(r, n, c + 1) * x.shape[n] + c + 1
end

-- lp_pool1d(x, p, k, {stride = k, ceil_mode = false}) and lp_pool2d: the p-norm
-- of each window, (sum x^p)^(1/p), as PyTorch's (an average pool of x^p times
-- the window's size; a partial window with ceil_mode is scaled up likewise)
local LP = {stride = {nil, function(v) return v == nil or math.type(v) == "integer" or type(v) == "table" end,
                      "an integer or a pair of them"}, ceil_mode = {false, is_bool, "true or false"}}
local function lp_pool(fn, k, x, p, size, opts)
  local o = read_opts(fn, opts, LP, 4)
  need_tensor(fn, "input", x)
  if type(p) ~= "number" or p == 0 then error(("%s: norm_type must be a non-zero number, got %s"):format(fn,
    tostring(p)), 3) end
  local ks = math.type(size) == "integer" and {size, size} or size
  if k == 1 then ks = {size, 1} end
  if type(ks) ~= "table" or #ks ~= 2 or math.type(ks[1]) ~= "integer" or math.type(ks[2]) ~= "integer" then
    error(("%s: kernel_size must be %s, got %s"):format(fn, k == 1 and "an integer" or
      "an integer or a pair {kh, kw} of them", type(size) == "table" and tuple_str(size) or tostring(size)), 3)
  end
  local pool = k == 1 and zorch.avg_pool1d or zorch.avg_pool2d
  local out = as_fn(fn, 3, pool, x ^ p, size, {stride = o.stride, ceil_mode = o.ceil_mode})
  return (zorch.sign(out) * zorch.relu(out:abs()) * (ks[1] * ks[2])) ^ (1 / p)
end
function zorch.lp_pool1d(x, p, k, opts) return (lp_pool("lp_pool1d", 1, x, p, k, opts)) end
function zorch.lp_pool2d(x, p, k, opts) return (lp_pool("lp_pool2d", 2, x, p, k, opts)) end

local POOL1D = {stride = {nil, function(v) return v == nil or (math.type(v) == "integer" and v >= 1) end,
                          "a positive integer"},
                padding = {0, function(v) return math.type(v) == "integer" and v >= 0 end, "a non-negative integer"},
                dilation = {1, function(v) return math.type(v) == "integer" and v >= 1 end, "a positive integer"},
                ceil_mode = {false, is_bool, "true or false"}, count_include_pad = {true, is_bool, "true or false"}}
local MAX1D = {stride = POOL1D.stride, padding = POOL1D.padding, dilation = POOL1D.dilation, ceil_mode = POOL1D.ceil_mode}
local AVG1D = {stride = POOL1D.stride, padding = POOL1D.padding, ceil_mode = POOL1D.ceil_mode,
               count_include_pad = POOL1D.count_include_pad}
-- max_pool1d(x, k, {stride = k, padding = 0, dilation = 1, ceil_mode = false}): x (N, C, L) or (C, L)
function zorch.max_pool1d(x, k, opts)
  pos_int("max_pool1d", "kernel_size", k, 2)
  local o = read_opts("max_pool1d", opts, MAX1D, 3)
  local y = lib.via_2d("max_pool1d", x, function(x2)
    return zorch.max_pool2d(x2, {1, k}, {stride = {1, o.stride or k}, padding = {0, o.padding},
      dilation = {1, o.dilation}, ceil_mode = o.ceil_mode})
  end)
  return y
end
-- avg_pool1d(x, k, {stride = k, padding = 0, ceil_mode = false, count_include_pad = true})
function zorch.avg_pool1d(x, k, opts)
  pos_int("avg_pool1d", "kernel_size", k, 2)
  local o = read_opts("avg_pool1d", opts, AVG1D, 3)
  local y = lib.via_2d("avg_pool1d", x, function(x2)
    return zorch.avg_pool2d(x2, {1, k}, {stride = {1, o.stride or k}, padding = {0, o.padding},
      ceil_mode = o.ceil_mode, count_include_pad = o.count_include_pad})
  end)
  return y
end
-- adaptive_avg_pool1d(x, n)
function zorch.adaptive_avg_pool1d(x, n)
  pos_int("adaptive_avg_pool1d", "output_size", n, 2)
  local y = lib.via_2d("adaptive_avg_pool1d", x, function(x2) return zorch.adaptive_avg_pool2d(x2, {1, n}) end)
  return y
end

-- AdaptiveMaxPool1d(n, return_indices = false), AdaptiveMaxPool2d(n | {oh, ow}, return_indices)
local function adaptive_max_class(name, fn)
  local cls = Module:extend(name)
  function cls:init(output_size, return_indices)
    if return_indices ~= nil and type(return_indices) ~= "boolean" then
      error(("%s: return_indices must be true or false, got %s"):format(name, tostring(return_indices)), 3)
    end
    local good = math.type(output_size) == "integer" and output_size >= 1
    if fn == zorch.adaptive_max_pool2d and type(output_size) == "table" then
      good = #output_size == 2 and math.type(output_size[1]) == "integer" and math.type(output_size[2]) == "integer"
        and output_size[1] >= 1 and output_size[2] >= 1
    end
    if not good then error(("%s: output_size must be a positive integer%s, got %s"):format(name,
      fn == zorch.adaptive_max_pool2d and " or a pair {oh, ow} of them" or "",
      type(output_size) == "table" and tuple_str(output_size) or tostring(output_size)), 3) end
    self.output_size, self.return_indices = output_size, return_indices == true
  end
  function cls:forward(x) return as_fn(name, 2, fn, x, self.output_size, self.return_indices) end
  cls.__tostring = function(s) return ("%s(output_size=%s)"):format(name, tuple_str(s.output_size)) end
  return cls
end
nn.AdaptiveMaxPool1d = adaptive_max_class("nn.AdaptiveMaxPool1d", zorch.adaptive_max_pool1d)
nn.AdaptiveMaxPool2d = adaptive_max_class("nn.AdaptiveMaxPool2d", zorch.adaptive_max_pool2d)

-- LPPool1d(norm_type, k, {stride, ceil_mode}), LPPool2d(norm_type, k | {kh, kw}, {stride, ceil_mode})
local function lp_class(name, fn)
  local cls = Module:extend(name)
  function cls:init(p, k, opts)
    local o = read_opts(name, opts, LP, 4)
    need_number(name, "norm_type", p, 3)
    local good = math.type(k) == "integer" and k >= 1
    if fn == zorch.lp_pool2d and type(k) == "table" then
      good = #k == 2 and math.type(k[1]) == "integer" and math.type(k[2]) == "integer" and k[1] >= 1 and k[2] >= 1
    end
    if not good then error(("%s: kernel_size must be a positive integer%s, got %s"):format(name,
      fn == zorch.lp_pool2d and " or a pair {kh, kw} of them" or "", type(k) == "table" and tuple_str(k) or tostring(k)), 3) end
    self.norm_type, self.kernel_size, self.stride, self.ceil_mode = p, k, o.stride, o.ceil_mode
  end
  function cls:forward(x)
    return as_fn(name, 2, fn, x, self.norm_type, self.kernel_size, {stride = self.stride, ceil_mode = self.ceil_mode})
  end
  cls.__tostring = function(s)
    return ("%s(norm_type=%s, kernel_size=%s, stride=%s, ceil_mode=%s)"):format(name, py_num(s.norm_type),
      tuple_str(s.kernel_size), s.stride == nil and "None" or tuple_str(s.stride), py_bool(s.ceil_mode))
  end
  return cls
end
nn.LPPool1d = lp_class("nn.LPPool1d", zorch.lp_pool1d)
nn.LPPool2d = lp_class("nn.LPPool2d", zorch.lp_pool2d)

-- instance_norm(x, running_mean?, running_var?, weight?, bias?, use_input_stats =
-- true, momentum = 0.1, eps = 1e-5): x (N, C, ...) normalised per sample and
-- channel; with use_input_stats and running stats, these move towards the
-- batch's mean of each sample's mean and unbiased variance; without
-- use_input_stats the running stats normalise.
function zorch.instance_norm(x, rm, rv, weight, bias, use_input_stats, momentum, eps)
  local fn = "instance_norm"
  need_tensor(fn, "input", x)
  if x:dim() < 3 then error(("%s: expected input (N, C, ...) with spatial dims, got %s"):format(fn, shape_str(x)), 2) end
  local c = x.shape[2]
  lib.check_per_channel(fn, x, c, {{"running_mean", rm}, {"running_var", rv}, {"weight", weight}, {"bias", bias}})
  if (rm == nil) ~= (rv == nil) then error(("%s: give both running_mean and running_var, or neither"):format(fn), 2) end
  if use_input_stats == nil then use_input_stats = true end
  momentum, eps = momentum == nil and 0.1 or momentum, eps == nil and 1e-5 or eps
  if type(use_input_stats) ~= "boolean" then
    error(("%s: use_input_stats must be true or false, got %s"):format(fn, tostring(use_input_stats)), 2)
  end
  need_number(fn, "momentum", momentum, 2)
  if type(eps) ~= "number" or not (eps >= 0) then error(("%s: eps must be a number >= 0, got %s"):format(fn, tostring(eps)), 2) end
  local s = {1, c}
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  local y
  if not use_input_stats then
    if not rm then error(("%s: use_input_stats = false needs running_mean and running_var"):format(fn), 2) end
    y = (x - rm:reshape(s)) / (rv:reshape(s) + eps):sqrt()
    if weight then y = y * weight:reshape(s) end
    if bias then y = y + bias:reshape(s) end
    return y
  end
  local spatial = 1
  for i = 3, x:dim() do spatial = spatial * x.shape[i] end
  if spatial == 1 then
    error(("%s: expected more than 1 spatial element when normalising by the input, got input %s"):format(fn,
      shape_str(x)), 2)
  end
  y = zorch.group_norm(x, c, weight, bias, eps)
  if rm then
    zorch.no_grad(function()
      local flatx = x:detach():reshape({x.shape[1], c, -1})
      rm:copy_(rm * (1 - momentum) + flatx:mean(3):mean(1) * momentum)
      rv:copy_(rv * (1 - momentum) + flatx:var(3, false, 1):mean(1) * momentum)
    end)
  end
  return y
end

-- dropout1d(x, p = 0.5, training = true), dropout2d, dropout3d: whole channels
-- zeroed with probability p, the rest scaled by 1 / (1 - p); x (N, C, ...) or
-- one sample (C, ...) with one spatial dim fewer (dropout2d reads a 3-D input
-- as (N, C, L), as PyTorch does).
local function channel_dropout(fn, x, p, training, k)
  need_tensor(fn, "input", x)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(("%s: p must be a number in [0, 1], got %s"):format(fn, tostring(p)), 3)
  end
  if training ~= nil and type(training) ~= "boolean" then
    error(("%s: training must be true or false, got %s"):format(fn, tostring(training)), 3)
  end
  if x:dim() ~= k + 1 and x:dim() ~= k + 2 then
    error(("%s: expected a %dD or %dD input, got %s"):format(fn, k + 1, k + 2, shape_str(x)), 3)
  end
  if training == false or p == 0 then return x end
  local batched = x:dim() == k + 2 or k == 2
  local shape = {}
  for i = 1, x:dim() do shape[i] = (i <= (batched and 2 or 1)) and x.shape[i] or 1 end
  if p == 1 then return x * zorch.zeros(shape, {dtype = x:dtype(), device = x:device()}) end
  local keep = zorch.rand(shape, {device = x:device()}):ge(p):to(x:dtype())
  return x * (keep * (1 / (1 - p)))
end
function zorch.dropout1d(x, p, training) return (channel_dropout("dropout1d", x, p, training, 1)) end
function zorch.dropout2d(x, p, training) return (channel_dropout("dropout2d", x, p, training, 2)) end
function zorch.dropout3d(x, p, training) return (channel_dropout("dropout3d", x, p, training, 3)) end

-- A dropout module over fn(x, p, training): Name(p = 0.5)
local function dropout_module(name, fn)
  local cls = Module:extend(name)
  function cls:init(p)
    if p == nil then p = 0.5 end
    if type(p) ~= "number" or not (p >= 0 and p <= 1) then
      error(("%s: p must be a number in [0, 1], got %s"):format(name, tostring(p)), 3)
    end
    self.p = p
  end
  function cls:forward(x) return as_fn(name, 2, fn, x, self.p, self.training) end
  cls.__tostring = function(s) return ("%s(p=%s)"):format(name, py_num(s.p)) end
  return cls
end

-- Dropout3d(p = 0.5): (N, C, D, H, W) or (C, D, H, W)
nn.Dropout3d = dropout_module("nn.Dropout3d", zorch.dropout3d)

-- ---- margin losses ----------------------------------------------------------------------------

local function same_shape(fn, x, y)
  need_tensor(fn, "input", x)
  need_tensor(fn, "target", y)
  if shape_str(x) ~= shape_str(y) then
    error(("%s: input %s and target %s must have the same shape"):format(fn, shape_str(x), shape_str(y)), 3)
  end
end

-- soft_margin_loss(x, y, {reduction}): log(1 + exp(-y x)), y in {1, -1}
local SOFT_MARGIN = {reduction = REDUCTION}
function zorch.soft_margin_loss(x, y, opts)
  local o = read_opts("soft_margin_loss", opts, SOFT_MARGIN, 3)
  same_shape("soft_margin_loss", x, y)
  return reduce(softplus(-y * x), o.reduction)
end

-- multilabel_soft_margin_loss(x, y, {weight, reduction}): over the last dim
-- (the C classes), the mean of -(y log sigmoid(x) + (1 - y) log sigmoid(-x)),
-- each class's term times weight (C,) when given
local MULTILABEL_SOFT = {weight = {nil, opt_tensor, "a tensor"}, reduction = REDUCTION}
function zorch.multilabel_soft_margin_loss(x, y, opts)
  local fn = "multilabel_soft_margin_loss"
  local o = read_opts(fn, opts, MULTILABEL_SOFT, 3)
  same_shape(fn, x, y)
  if x:dim() == 0 then error(("%s: expected input (N, C) or (C,), got %s"):format(fn, shape_str(x)), 2) end
  local loss = y * softplus(-x) + (1 - y) * softplus(x)
  if o.weight then
    local c = x.shape[x:dim()]
    if o.weight:dim() > 1 or (o.weight:numel() ~= c and o.weight:numel() ~= 1) then
      error(("%s: weight %s must hold one weight per class (%d) of input %s"):format(fn, shape_str(o.weight), c,
        shape_str(x)), 2)
    end
    loss = loss * o.weight
  end
  return reduce(loss:mean(-1), o.reduction)
end

-- Class targets for fn: an integer tensor of 1-based classes in 1..c.
local function check_classes(fn, t, c, lo, level)
  if not INT_DTYPES[t:dtype()] then
    error(("%s: target must hold integer classes (1-based), got dtype %s"):format(fn, t:dtype()), level + 1)
  end
  if t:numel() == 0 then return end
  local mn, mx = t:min():item(), t:max():item()
  if mn < lo or mx > c then
    error(("%s: target %d is out of range 1..%d (targets are 1-based, as Lua counts; add 1 to 0-based labels)"):format(
      fn, (mn < lo) and mn or mx, c), level + 1)
  end
end

-- multi_margin_loss(x, y, {p = 1, margin = 1, weight, reduction}): x (N, C) or
-- (C,), y the 1-based classes (N,) (or () for one sample); per sample
-- sum over i ~= y of max(0, margin - x[y] + x[i])^p / C, times weight[y]
local MULTI_MARGIN = {p = {1, function(v) return v == 1 or v == 2 end, "1 or 2"}, margin = {1.0, is_num, "a number"},
                      weight = {nil, opt_tensor, "a tensor"}, reduction = REDUCTION}
function zorch.multi_margin_loss(x, y, opts)
  local fn = "multi_margin_loss"
  local o = read_opts(fn, opts, MULTI_MARGIN, 3)
  need_tensor(fn, "input", x)
  need_tensor(fn, "target", y)
  local one = x:dim() == 1
  if not (x:dim() == 2 or one) or (x:dim() == 2 and shape_str(y) ~= ("(%d)"):format(x.shape[1]))
      or (one and y:numel() ~= 1) or y:dim() > 1 or x:numel() == 0 then
    error(("%s: expected input (N, C) with target (N), or input (C) with one target, got input %s and target %s"):format(
      fn, shape_str(x), shape_str(y)), 2)
  end
  local c = x.shape[x:dim()]
  need_float(fn, "input", x, 2)
  check_classes(fn, y, c, 1, 2)
  if o.weight and (o.weight:dim() ~= 1 or o.weight.shape[1] ~= c) then
    error(("%s: weight must be a tensor of shape (%d) for input %s, got %s"):format(fn, c, shape_str(x),
      shape_str(o.weight)), 2)
  end
  local x2 = one and x:reshape({1, c}) or x
  local yi = y:reshape({-1, 1}):to("int64")
  local z = zorch.relu(x2 - zorch.gather(x2, 2, yi) + o.margin)
  if o.p == 2 then z = z * z end
  if o.weight then z = z * zorch.index_select(o.weight, 1, yi:reshape({-1})):reshape({-1, 1}) end
  -- the target's own term (always margin) is left out
  local other = 1 - zorch.one_hot(yi:reshape({-1}), c):to(x:dtype())
  local per = (z * other):sum(2) / c
  return reduce(per:reshape(y.shape), o.reduction)
end

-- multilabel_margin_loss(x, y, {reduction}): x (N, C) or (C,), y of its shape
-- listing each sample's 1-based target classes, the list ending at the first
-- entry below 1 (PyTorch's -1 padding plus 1 is 0); per sample sum over the
-- targets j and the non-targets i of max(0, 1 - (x[j] - x[i])) / C.
local MULTILABEL_MARGIN = {reduction = REDUCTION}
function zorch.multilabel_margin_loss(x, y, opts)
  local fn = "multilabel_margin_loss"
  local o = read_opts(fn, opts, MULTILABEL_MARGIN, 3)
  same_shape(fn, x, y)
  if (x:dim() ~= 1 and x:dim() ~= 2) or x:numel() == 0 then
    error(("%s: expected input (N, C) or (C), got %s"):format(fn, shape_str(x)), 2)
  end
  local c = x.shape[x:dim()]
  need_float(fn, "input", x, 2)
  if not INT_DTYPES[y:dtype()] then
    error(("%s: target must hold integer classes (1-based), got dtype %s"):format(fn, y:dtype()), 2)
  end
  local rows = y:reshape({-1, c}):totable()
  -- pairs[n][j][i]: how often target j faces non-target i in sample n
  local pairs_ = {}
  for n, row in ipairs(rows) do
    local count, is_t = {}, {}
    for _, j in ipairs(row) do
      if j < 1 then break end
      if j > c then error(("%s: target %d is out of range 1..%d (targets are 1-based, 0 ends a list)"):format(fn,
        j, c), 2) end
      count[j], is_t[j] = (count[j] or 0) + 1, true
    end
    local m = {}
    for j = 1, c do
      local r = {}
      for i = 1, c do r[i] = (count[j] and not is_t[i]) and count[j] or 0 end
      m[j] = r
    end
    pairs_[n] = m
  end
  local x2 = x:reshape({-1, c})
  local mask = zorch.tensor(pairs_, {dtype = x:dtype(), device = x:device()})
  local per = (zorch.relu(1 - x2:unsqueeze(3) + x2:unsqueeze(2)) * mask):sum(3):sum(2) / c
  if x:dim() == 1 then per = per:reshape({}) end
  return reduce(per, o.reduction)
end

-- the loss modules: Name(opts) with the function's options (lua/losses.lua's factory)
nn.SoftMarginLoss = lib.fn_module("nn.SoftMarginLoss", zorch.soft_margin_loss, SOFT_MARGIN, 2)
nn.MultiLabelSoftMarginLoss = lib.fn_module("nn.MultiLabelSoftMarginLoss", zorch.multilabel_soft_margin_loss,
  MULTILABEL_SOFT, 2)
nn.MultiMarginLoss = lib.fn_module("nn.MultiMarginLoss", zorch.multi_margin_loss, MULTI_MARGIN, 2)
nn.MultiLabelMarginLoss = lib.fn_module("nn.MultiLabelMarginLoss", zorch.multilabel_margin_loss, MULTILABEL_MARGIN, 2)

-- ---- Bilinear, LocalResponseNorm, AlphaDropout, Unfold and Fold ---------------------------

-- bilinear(x1, x2, weight, bias?): y[..., o] = x1 W[o] x2 + b[o] for x1 (*, in1),
-- x2 (*, in2) of the same leading dims and weight (out, in1, in2)
function zorch.bilinear(x1, x2, w, b)
  local fn = "bilinear"
  need_tensor(fn, "input1", x1)
  need_tensor(fn, "input2", x2)
  need_tensor(fn, "weight", w)
  if w:dim() ~= 3 then error(("%s: weight must be (out, in1, in2), got %s"):format(fn, shape_str(w)), 2) end
  local out, in1, in2 = w.shape[1], w.shape[2], w.shape[3]
  local lead_ok = x1:dim() >= 1 and x1:dim() == x2:dim()
  for i = 1, x1:dim() - 1 do lead_ok = lead_ok and x1.shape[i] == x2.shape[i] end
  if not lead_ok or x1.shape[x1:dim()] ~= in1 or x2.shape[x2:dim()] ~= in2 then
    error(("%s: expected input1 (*, %d) and input2 (*, %d) with the same leading dims for weight %s, got %s and %s"):format(
      fn, in1, in2, shape_str(w), shape_str(x1), shape_str(x2)), 2)
  end
  if b ~= nil and (not zorch.is_tensor(b) or b:dim() ~= 1 or b.shape[1] ~= out) then
    error(("%s: bias must be a tensor of shape (%d) for weight %s, got %s"):format(fn, out, shape_str(w),
      zorch.is_tensor(b) and shape_str(b) or type(b)), 2)
  end
  -- x1 W as one matmul over (in1, out in2), then the dot with x2 per output
  local t = zorch.matmul(x1:reshape({-1, in1}), w:permute(2, 1, 3):reshape({in1, out * in2})):reshape({-1, out, in2})
  local y = (t * x2:reshape({-1, 1, in2})):sum(3)
  if b then y = y + b end
  return y:reshape(lead_shape(x1, 1, {out}))
end

-- Bilinear(in1, in2, out, {bias = true}): weight (out, in1, in2) and bias (out),
-- U(-1/sqrt(in1), 1/sqrt(in1)) as PyTorch's
nn.Bilinear = Module:extend "nn.Bilinear"
function nn.Bilinear:init(in1, in2, out, opts)
  local fn = "nn.Bilinear"
  local o = read_opts(fn, opts, {bias = {true, is_bool, "true or false"}}, 4)
  check_int(fn, "in1_features", in1)
  check_int(fn, "in2_features", in2)
  check_int(fn, "out_features", out)
  self.in1_features, self.in2_features, self.out_features = in1, in2, out
  local bound = 1 / math.sqrt(in1)
  self.weight = uniform({out, in1, in2}, bound)
  if o.bias then self.bias = uniform({out}, bound) end
end
function nn.Bilinear:forward(x1, x2)
  return as_fn("nn.Bilinear", 2, zorch.bilinear, x1, x2, self.weight, rawget(self, "bias"))
end
nn.Bilinear.__tostring = function(s)
  return ("nn.Bilinear(in1_features=%d, in2_features=%d, out_features=%d, bias=%s)"):format(s.in1_features,
    s.in2_features, s.out_features, py_bool(rawget(s, "bias")))
end

-- local_response_norm(x, size, alpha = 1e-4, beta = 0.75, k = 1): x (N, C, ...)
-- divided by (k + alpha * mean of x^2 over a window of `size` channels)^beta,
-- the window from c - size // 2 to c + (size - 1) // 2, zeros beyond the ends
function zorch.local_response_norm(x, size, alpha, beta, k)
  local fn = "local_response_norm"
  need_tensor(fn, "input", x)
  pos_int(fn, "size", size, 2)
  alpha, beta, k = alpha == nil and 1e-4 or alpha, beta == nil and 0.75 or beta, k == nil and 1.0 or k
  need_number(fn, "alpha", alpha, 2)
  need_number(fn, "beta", beta, 2)
  need_number(fn, "k", k, 2)
  if x:dim() < 3 then error(("%s: expected input (N, C, ...) with 3 or more dims, got %s"):format(fn, shape_str(x)), 2) end
  if x:numel() == 0 then return x * 1 end
  local sq = x * x
  local c = x.shape[2]
  -- shifts of c or more channels meet only the zeros past the ends: left out
  local front, back = math.min(size // 2, c - 1), math.min((size - 1) // 2, c - 1)
  local function zeros_c(n)
    local s = {}
    for i = 1, x:dim() do s[i] = i == 2 and n or x.shape[i] end
    return zorch.zeros(s, {dtype = x:dtype(), device = x:device()})
  end
  local parts = {}
  if front > 0 then parts[#parts + 1] = zeros_c(front) end
  parts[#parts + 1] = sq
  if back > 0 then parts[#parts + 1] = zeros_c(back) end
  local padded = #parts > 1 and zorch.cat(parts, 2) or sq
  local sum = padded:narrow(2, 1, c)
  for i = 2, front + back + 1 do sum = sum + padded:narrow(2, i, c) end
  return x / (sum / size * alpha + k) ^ beta
end

-- LocalResponseNorm(size, alpha = 1e-4, beta = 0.75, k = 1)
nn.LocalResponseNorm = Module:extend "nn.LocalResponseNorm"
function nn.LocalResponseNorm:init(size, alpha, beta, k)
  local fn = "nn.LocalResponseNorm"
  pos_int(fn, "size", size, 3)
  alpha, beta, k = alpha == nil and 1e-4 or alpha, beta == nil and 0.75 or beta, k == nil and 1.0 or k
  need_number(fn, "alpha", alpha, 3)
  need_number(fn, "beta", beta, 3)
  need_number(fn, "k", k, 3)
  self.size, self.alpha, self.beta, self.k = size, alpha, beta, k
end
function nn.LocalResponseNorm:forward(x)
  return as_fn("nn.LocalResponseNorm", 2, zorch.local_response_norm, x, self.size, self.alpha, self.beta, self.k)
end
nn.LocalResponseNorm.__tostring = function(s)
  return ("nn.LocalResponseNorm(%d, alpha=%s, beta=%s, k=%s)"):format(s.size, py_num(s.alpha), py_num(s.beta),
    py_num(s.k))
end

-- alpha_dropout(x, p = 0.5, training = false): SELU's dropout; in training each
-- element is dropped with probability p to SELU's negative saturation, and
-- the result scaled and shifted so that a zero-mean unit-variance input keeps
-- its mean and variance: kept a x + a alpha p, dropped a alpha (p - 1), with
-- alpha = 1.7580993408473766 and a = ((1 - p) (1 + p alpha^2))^-1/2
local SELU_SAT = 1.7580993408473766
function zorch.alpha_dropout(x, p, training)
  local fn = "alpha_dropout"
  need_tensor(fn, "input", x)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(("%s: p must be a number in [0, 1], got %s"):format(fn, tostring(p)), 2)
  end
  if training ~= nil and type(training) ~= "boolean" then
    error(("%s: training must be true or false, got %s"):format(fn, tostring(training)), 2)
  end
  if not training or p == 0 then return x end
  if p == 1 then return x * 0 end
  local a = 1 / math.sqrt((SELU_SAT * SELU_SAT * p + 1) * (1 - p))
  local keep = zorch.rand(x.shape, {device = x:device()}):ge(p):to(x:dtype())
  return x * (keep * a) + (keep - 1) * (SELU_SAT * a) + SELU_SAT * a * p
end

-- AlphaDropout(p = 0.5)
nn.AlphaDropout = dropout_module("nn.AlphaDropout", zorch.alpha_dropout)

-- unfold and fold: sizes are a number or a pair {h, w}
local FOLD = {
  dilation = {1, nil, "a positive integer below 2^31 or a pair of them", 1},
  padding = {0, nil, "a non-negative integer below 2^31 or a pair of them", 0},
  stride = {1, nil, "a positive integer below 2^31 or a pair of them", 1},
}
-- (sizes below 2^31, so that the block arithmetic cannot overflow)
local function pair_ok(lo)
  local function one(v) return math.type(v) == "integer" and v >= lo and v < (1 << 31) end
  return function(v)
    if type(v) ~= "table" then return one(v) end
    return #v == 2 and one(v[1]) and one(v[2])
  end
end
local FOLD_SPEC = {}
for k, s in pairs(FOLD) do FOLD_SPEC[k] = {s[1], pair_ok(s[4]), s[3]} end
local function two(v) return type(v) == "table" and v or {v, v} end
local function check_pair(fn, name, v, lo, level)
  if not pair_ok(lo)(v) then
    error(("%s: %s must be a %s integer below 2^31 or a pair {h, w} of them, got %s"):format(fn, name,
      lo > 0 and "positive" or "non-negative", type(v) == "table" and tuple_str(v) or tostring(v)), level + 1)
  end
end
-- The sliding blocks over (h, w) padded: their counts per dim, or an error.
local function blocks_of(fn, h, w, k, o, level)
  local d, p, s = two(o.dilation), two(o.padding), two(o.stride)
  local bh = (h + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
  local bw = (w + 2 * p[2] - d[2] * (k[2] - 1) - 1) // s[2] + 1
  if bh < 1 or bw < 1 then
    error(("%s: a spatial size (%d, %d) with kernel %s, dilation %s, padding %s and stride %s gives (%d, %d) sliding blocks; both must be at least 1"):format(
      fn, h, w, tuple_str(k), tuple_str(d), tuple_str(p), tuple_str(s), bh, bw), level + 1)
  end
  return bh, bw, d, p, s
end
-- 1-based positions of kernel tap t and block b in a padded dim: t d + b s + 1, taps outer
local function block_index(k, blocks, d, s, device)
  local ix = {}
  for t = 0, k - 1 do for b = 0, blocks - 1 do ix[#ix + 1] = t * d + b * s + 1 end end
  return zorch.tensor(ix, {dtype = "int64", device = device})
end

-- unfold(x, kernel_size, {dilation = 1, padding = 0, stride = 1}): the sliding
-- blocks of (N, C, H, W) (or (C, H, W)) as columns (N, C kh kw, L), the
-- channels outer and the kernel positions row by row inside
function zorch.unfold(x, kernel_size, opts)
  local fn = "unfold"
  local o = read_opts(fn, opts, FOLD_SPEC, 3)
  need_tensor(fn, "input", x)
  check_pair(fn, "kernel_size", kernel_size, 1, 2)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    error(("%s: expected input (N, C, H, W) or (C, H, W), got %s"):format(fn, shape_str(x)), 2)
  end
  local one = x:dim() == 3
  local x4 = one and x:unsqueeze(1) or x
  local n, c, h, w = x4.shape[1], x4.shape[2], x4.shape[3], x4.shape[4]
  local k = two(kernel_size)
  local bh, bw, d, p, s = blocks_of(fn, h, w, k, o, 2)
  if p[1] > 0 or p[2] > 0 then x4 = as_fn(fn, 2, zorch.pad, x4, {p[2], p[2], p[1], p[1]}) end
  local y = zorch.index_select(x4, 3, block_index(k[1], bh, d[1], s[1], x:device()))
  y = zorch.index_select(y, 4, block_index(k[2], bw, d[2], s[2], x:device()))
  y = y:reshape({n, c, k[1], bh, k[2], bw}):permute(1, 2, 3, 5, 4, 6):reshape({n, c * k[1] * k[2], bh * bw})
  return one and y:squeeze(1) or y
end

-- fold(x, output_size, kernel_size, {dilation, padding, stride}): unfold's
-- adjoint: columns (N, C kh kw, L) (or (C kh kw, L)) summed back into (N, C, H, W)
-- where the blocks overlap
function zorch.fold(x, output_size, kernel_size, opts)
  local fn = "fold"
  local o = read_opts(fn, opts, FOLD_SPEC, 3)
  need_tensor(fn, "input", x)
  check_pair(fn, "output_size", output_size, 1, 2)
  check_pair(fn, "kernel_size", kernel_size, 1, 2)
  if x:dim() ~= 2 and x:dim() ~= 3 then
    error(("%s: expected input (N, C * kh * kw, L) or (C * kh * kw, L), got %s"):format(fn, shape_str(x)), 2)
  end
  local one = x:dim() == 2
  local x3 = one and x:unsqueeze(1) or x
  local k, hw = two(kernel_size), two(output_size)
  local bh, bw, d, p, s = blocks_of(fn, hw[1], hw[2], k, o, 2)
  local n, ck, l = x3.shape[1], x3.shape[2], x3.shape[3]
  if ck % (k[1] * k[2]) ~= 0 or l ~= bh * bw then
    error(("%s: input %s must be (N, C * %d, %d) for kernel %s and output %s (%d x %d blocks)"):format(fn,
      shape_str(x), k[1] * k[2], bh * bw, tuple_str(kernel_size), tuple_str(output_size), bh, bw), 2)
  end
  local c = ck // (k[1] * k[2])
  local hp, wp = hw[1] + 2 * p[1], hw[2] + 2 * p[2]
  local y = x3:reshape({n, c, k[1], k[2], bh, bw}):permute(1, 2, 3, 5, 4, 6):reshape({n, c, k[1] * bh, k[2] * bw})
  local opt = {dtype = x:dtype(), device = x:device()}
  local iw = block_index(k[2], bw, d[2], s[2], x:device()):reshape({1, 1, 1, k[2] * bw}):expand({n, c, k[1] * bh, k[2] * bw})
  y = zorch.scatter_add(zorch.zeros({n, c, k[1] * bh, wp}, opt), 4, iw:contiguous(), y)
  local ih = block_index(k[1], bh, d[1], s[1], x:device()):reshape({1, 1, k[1] * bh, 1}):expand({n, c, k[1] * bh, wp})
  y = zorch.scatter_add(zorch.zeros({n, c, hp, wp}, opt), 3, ih:contiguous(), y)
  if p[1] > 0 or p[2] > 0 then y = y:narrow(3, p[1] + 1, hw[1]):narrow(4, p[2] + 1, hw[2]) end
  return one and y:squeeze(1) or y
end

-- Unfold(kernel_size, {dilation, padding, stride}), Fold(output_size, kernel_size, {...})
nn.Unfold = Module:extend "nn.Unfold"
function nn.Unfold:init(kernel_size, opts)
  local o = read_opts("nn.Unfold", opts, FOLD_SPEC, 4)
  check_pair("nn.Unfold", "kernel_size", kernel_size, 1, 3)
  self.kernel_size, self._opts = kernel_size, o
end
function nn.Unfold:forward(x) return as_fn("nn.Unfold", 2, zorch.unfold, x, self.kernel_size, self._opts) end
nn.Unfold.__tostring = function(s)
  local o = s._opts
  return ("nn.Unfold(kernel_size=%s, dilation=%s, padding=%s, stride=%s)"):format(tuple_str(s.kernel_size),
    tuple_str(o.dilation), tuple_str(o.padding), tuple_str(o.stride))
end
nn.Fold = Module:extend "nn.Fold"
function nn.Fold:init(output_size, kernel_size, opts)
  local o = read_opts("nn.Fold", opts, FOLD_SPEC, 4)
  check_pair("nn.Fold", "output_size", output_size, 1, 3)
  check_pair("nn.Fold", "kernel_size", kernel_size, 1, 3)
  self.output_size, self.kernel_size, self._opts = output_size, kernel_size, o
end
function nn.Fold:forward(x)
  return as_fn("nn.Fold", 2, zorch.fold, x, self.output_size, self.kernel_size, self._opts)
end
nn.Fold.__tostring = function(s)
  local o = s._opts
  return ("nn.Fold(output_size=%s, kernel_size=%s, dilation=%s, padding=%s, stride=%s)"):format(
    tuple_str(s.output_size), tuple_str(s.kernel_size), tuple_str(o.dilation), tuple_str(o.padding), tuple_str(o.stride))
end
