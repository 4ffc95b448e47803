-- zorch.nn.activation: the activation modules (ReLU, GELU, the parametrised
-- ones, PReLU, RReLU, GLU, the shrinks, Softmax, LogSoftmax, Softmin,
-- Softmax2d) and the activation functions written in Lua.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_dim, check_int, dim_in = M.Module, M.check_dim, M.check_int, M.dim_in
local need_number, need_tensor, py_num, shape_str = M.need_number, M.need_tensor, M.py_num, M.shape_str

local function activation(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return fn(x) end
  return cls
end
nn.ReLU = activation("nn.ReLU", zorch.relu)
nn.Tanh = activation("nn.Tanh", zorch.tanh)
nn.Sigmoid = activation("nn.Sigmoid", zorch.sigmoid)
nn.SiLU = activation("nn.SiLU", zorch.silu)
nn.SELU = activation("nn.SELU", zorch.selu)
nn.ReLU6 = activation("nn.ReLU6", zorch.relu6)
nn.Hardsigmoid = activation("nn.Hardsigmoid", zorch.hardsigmoid)
nn.Hardswish = activation("nn.Hardswish", zorch.hardswish)
nn.Mish = activation("nn.Mish", zorch.mish)
nn.LogSigmoid = activation("nn.LogSigmoid", zorch.logsigmoid)
nn.Softsign = activation("nn.Softsign", zorch.softsign)
nn.Tanhshrink = activation("nn.Tanhshrink", zorch.tanhshrink)

-- An activation with numeric parameters: `names` in the constructor's order,
-- `defaults` PyTorch's; forward calls fn(x, the parameters...).
local function activation_p(name, fn, names, defaults)
  local cls = Module:extend(name)
  cls.init = function(self, ...)
    local args = table.pack(...)
    for i, k in ipairs(names) do
      local v = args[i]
      if v == nil then v = defaults[i] end
      if type(v) ~= "number" then
        error(("%s: %s must be a number, got %s"):format(name, k, type(v)), 3)
      end
      self[k] = v
    end
  end
  cls.forward = function(self, x)
    local p = {}
    for i, k in ipairs(names) do p[i] = self[k] end
    return fn(x, table.unpack(p, 1, #names))
  end
  cls.__tostring = function(self)
    local parts = {}
    for _, k in ipairs(names) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(self[k])) end
    return ("%s(%s)"):format(name, table.concat(parts, ", "))
  end
  return cls
end
nn.LeakyReLU = activation_p("nn.LeakyReLU", zorch.leaky_relu, {"negative_slope"}, {0.01})
nn.ELU = activation_p("nn.ELU", zorch.elu, {"alpha"}, {1.0})
nn.CELU = activation_p("nn.CELU", zorch.celu, {"alpha"}, {1.0})
nn.Softplus = activation_p("nn.Softplus", zorch.softplus, {"beta", "threshold"}, {1.0, 20.0})
nn.Hardtanh = activation_p("nn.Hardtanh", zorch.hardtanh, {"min_val", "max_val"}, {-1.0, 1.0})

nn.GELU = Module:extend "nn.GELU"
function nn.GELU:init(approximate) self.approximate = approximate end
function nn.GELU:forward(x) return zorch.gelu(x, self.approximate) end

local function softmax_module(name, fn)
  local cls = Module:extend(name)
  function cls:init(dim)
    check_dim(name, "dim", dim)
    self.dim = dim
  end
  function cls:forward(x) return fn(x, self.dim) end
  cls.__tostring = function(s) return ("%s(dim=%d)"):format(name, s.dim) end
  return cls
end
nn.Softmax = softmax_module("nn.Softmax", zorch.softmax)
nn.LogSoftmax = softmax_module("nn.LogSoftmax", zorch.log_softmax)

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
  check_dim("nn.GLU", "dim", dim)
  self.dim = dim
end
function nn.GLU:forward(x) return zorch.glu(x, self.dim) end
nn.GLU.__tostring = function(s) return ("nn.GLU(dim=%d)"):format(s.dim) end

nn.Softmin = Module:extend "nn.Softmin"
function nn.Softmin:init(dim)
  check_dim("nn.Softmin", "dim", dim)
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
