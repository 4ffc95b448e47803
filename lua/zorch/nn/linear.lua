-- zorch.nn.linear: Identity, Linear and Bilinear.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, as_fn, check_int, is_bool = M.Module, M.as_fn, M.check_int, M.is_bool
local lead_shape, need_tensor, py_bool, read_opts = M.lead_shape, M.need_tensor, M.py_bool, M.read_opts
local shape_str, uniform = M.shape_str, M.uniform
local check_options = zorch._require("zorch.util").check_options

nn.Linear = Module:extend "nn.Linear"
-- opts: bias = false; activation = "relu" fuses a ReLU into the layer (one GEMM
-- with a bias and relu epilogue on the GPU), "gelu" or "gelu_tanh" a GELU (one
-- autograd node with the GEMM). A boolean third argument is the bias, as
-- PyTorch's positional bias: nn.Linear(2, 2, false).
function nn.Linear:init(in_features, out_features, opts)
  check_int("nn.Linear", "in_features", in_features)
  check_int("nn.Linear", "out_features", out_features)
  if type(opts) == "boolean" then opts = {bias = opts} end
  if opts ~= nil and type(opts) ~= "table" then
    error("nn.Linear: the third argument must be the bias (a boolean) or an options table, got " .. type(opts), 3)
  end
  if opts and opts.bias ~= nil and type(opts.bias) ~= "boolean" then
    error("nn.Linear: bias must be true or false (Lua's lowercase booleans), got " .. tostring(opts.bias), 3)
  end
  check_options("nn.Linear", opts, {"bias", "activation"}, 4)
  local act = opts and opts.activation
  if act ~= nil and act ~= "relu" and act ~= "gelu" and act ~= "gelu_tanh" then
    error(("nn.Linear: activation must be \"relu\", \"gelu\", \"gelu_tanh\" or nil, got %s"):format(tostring(act)), 3)
  end
  local bound = 1 / math.sqrt(in_features)
  self.in_features, self.out_features = in_features, out_features
  rawset(self, "activation", act)
  self.weight = uniform({out_features, in_features}, bound)
  if not (opts and opts.bias == false) then self.bias = uniform({out_features}, bound) end
end
function nn.Linear:forward(x)
  return zorch.linear(x, self.weight, rawget(self, "bias"), rawget(self, "activation"))
end
nn.Linear.__tostring = function(s)
  return ("nn.Linear(in_features=%d, out_features=%d%s)"):format(s.in_features, s.out_features,
    rawget(s, "activation") and (", activation=" .. s.activation) or "")
end

-- Identity(...): returns its input; the constructor's arguments are ignored (as PyTorch's).
nn.Identity = Module:extend "nn.Identity"
function nn.Identity:init() end
function nn.Identity:forward(x) return x end

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
