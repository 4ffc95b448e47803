-- Normalisations and 1-d layers beyond those of lua/nn.lua: group norm, RMS
-- norm, instance norm, Conv1d, 1-d pooling, ParameterList, Unflatten and the
-- channel dropouts, with PyTorch's names, defaults and state-dict names.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local lib = zorch._nn_lib
local Module, check_dim, check_int = lib.Module, lib.check_dim, lib.check_int
local is_module, py_bool, shape_str, uniform = lib.is_module, lib.py_bool, lib.shape_str, lib.uniform
local read_opts, num_ge0, num_gt0, is_bool = lib.read_opts, lib.num_ge0, lib.num_gt0, lib.is_bool
local spec_with, need_tensor = lib.spec_with, lib.need_tensor

-- The items of a list the caller gave, joined for a message (any values).
local function list_str(t)
  local out = {}
  for i, v in ipairs(t) do out[i] = math.type(v) and tostring(v) or type(v) end
  return table.concat(out, ", ")
end

-- group_norm(x, num_groups, weight?, bias?, eps = 1e-5): x (N, C, ...) normalised
-- over each group of C / num_groups channels and the rest of the dims (biased
-- variance), then weight and bias (C,) per channel.
local function channel_shape(x, c)
  local s = {1, c}
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  return s
end
local function affine(y, x, weight, bias)
  local c = x.shape[2]
  if weight then y = y * weight:reshape(channel_shape(x, c)) end
  if bias then y = y + bias:reshape(channel_shape(x, c)) end
  return y
end
-- Each named tensor, where given, must be a vector of the c channels (the
-- error is at level 3: the caller of the function that checks).
local function check_per_channel(fn, x, c, named)
  for _, e in ipairs(named) do
    local t = e[2]
    if t ~= nil and (not zorch.is_tensor(t) or t:dim() ~= 1 or t.shape[1] ~= c) then
      error(("%s: %s must be a tensor of shape (%d) for input %s, got %s"):format(fn, e[1], c, shape_str(x),
        zorch.is_tensor(t) and shape_str(t) or type(t)), 3)
    end
  end
end
lib.check_per_channel = check_per_channel -- (lua/layers2.lua's instance_norm)
local function check_affine(fn, x, c, weight, bias) -- (a tail call: the same levels)
  return check_per_channel(fn, x, c, {{"weight", weight}, {"bias", bias}})
end
function zorch.group_norm(x, num_groups, weight, bias, eps)
  local fn = "group_norm"
  need_tensor(fn, "input", x)
  if x:dim() < 2 then error(("%s: expected input (N, C, ...), got %s"):format(fn, shape_str(x)), 2) end
  local c = x.shape[2]
  if math.type(num_groups) ~= "integer" or num_groups < 1 or c % num_groups ~= 0 then
    error(("%s: num_groups must be a positive integer dividing the %d channels of input %s, got %s"):format(fn, c,
      shape_str(x), tostring(num_groups)), 2)
  end
  eps = eps or 1e-5
  if type(eps) ~= "number" or not (eps >= 0) then error(("%s: eps must be a number >= 0, got %s"):format(fn, tostring(eps)), 2) end
  check_affine(fn, x, c, weight, bias)
  if x:numel() == 0 then return affine(x * 1, x, weight, bias) end
  local y = zorch.layer_norm(x:reshape({x.shape[1], num_groups, -1}), 1, nil, nil, eps):reshape(x.shape)
  return affine(y, x, weight, bias)
end

-- The machine epsilon of a float dtype (rms_norm's default eps, as PyTorch's).
local EPS_OF = {float32 = 2.0 ^ -23, float64 = 2.0 ^ -52, bfloat16 = 2.0 ^ -7, float16 = 2.0 ^ -10}
-- rms_norm(x, normalized_shape, weight?, eps?): x / sqrt(mean(x^2) + eps) over
-- the last #normalized_shape dims, times weight; eps nil: the dtype's machine epsilon.
function zorch.rms_norm(x, shape, weight, eps)
  local fn = "rms_norm"
  need_tensor(fn, "input", x)
  if math.type(shape) == "integer" then shape = {shape} end
  local k = type(shape) == "table" and #shape or 0
  local fits = k >= 1 and k <= x:dim()
  for i = 1, k do fits = fits and shape[i] == x.shape[x:dim() - k + i] end
  if not fits then
    error(("%s: normalized_shape %s must be the last dims of input %s"):format(fn,
      type(shape) == "table" and "(" .. list_str(shape) .. ")" or tostring(shape), shape_str(x)), 2)
  end
  if weight ~= nil and (not zorch.is_tensor(weight) or table.concat(weight.shape, ",") ~= table.concat(shape, ",")) then
    error(("%s: weight must be a tensor of shape (%s), got %s"):format(fn, table.concat(shape, ", "),
      zorch.is_tensor(weight) and shape_str(weight) or type(weight)), 2)
  end
  if eps == nil then eps = EPS_OF[x:dtype()] or 2.0 ^ -23 end
  if type(eps) ~= "number" or not (eps >= 0) then error(("%s: eps must be a number >= 0, got %s"):format(fn, tostring(eps)), 2) end
  local dims = {}
  for i = x:dim() - k + 1, x:dim() do dims[#dims + 1] = i end
  local y = x / ((x * x):mean(dims, true) + eps):sqrt()
  if weight then y = y * weight end
  return y
end

-- GroupNorm(num_groups, num_channels, {eps = 1e-5, affine = true}): weight ones, bias zeros (C,)
nn.GroupNorm = Module:extend "nn.GroupNorm"
function nn.GroupNorm:init(num_groups, num_channels, opts)
  local fn = "nn.GroupNorm"
  check_int(fn, "num_groups", num_groups)
  check_int(fn, "num_channels", num_channels)
  local o = read_opts(fn, opts, {eps = {1e-5, num_ge0, "a number >= 0"}, affine = {true, is_bool, "true or false"}}, 4)
  if num_channels % num_groups ~= 0 then
    error(("%s: num_groups %d must divide num_channels %d"):format(fn, num_groups, num_channels), 3)
  end
  rawset(self, "num_groups", num_groups)
  rawset(self, "num_channels", num_channels)
  rawset(self, "eps", o.eps)
  rawset(self, "affine", o.affine)
  if o.affine then
    self.weight = nn.Parameter(zorch.ones(num_channels))
    self.bias = nn.Parameter(zorch.zeros(num_channels))
  end
end
function nn.GroupNorm:forward(x)
  return zorch.group_norm(x, self.num_groups, rawget(self, "weight"), rawget(self, "bias"), self.eps)
end
nn.GroupNorm.__tostring = function(s)
  return ("nn.GroupNorm(%d, %d, eps=%g, affine=%s)"):format(s.num_groups, s.num_channels, s.eps, py_bool(s.affine))
end

-- RMSNorm(normalized_shape, {eps = nil (the dtype's epsilon), elementwise_affine = true}): weight ones
nn.RMSNorm = Module:extend "nn.RMSNorm"
function nn.RMSNorm:init(shape, opts)
  local fn = "nn.RMSNorm"
  if math.type(shape) == "integer" then shape = {shape} end
  local good = type(shape) == "table" and #shape > 0
  for _, s in ipairs(type(shape) == "table" and shape or {}) do good = good and math.type(s) == "integer" and s > 0 end
  if not good then error(("%s: normalized_shape must be a positive integer or a list of them, got %s"):format(fn,
    tostring(shape)), 3) end
  local o = read_opts(fn, opts, {eps = {nil, function(v) return v == nil or num_ge0(v) end, "a number >= 0 or nil"},
                                 elementwise_affine = {true, is_bool, "true or false"}}, 4)
  rawset(self, "normalized_shape", shape)
  rawset(self, "eps", o.eps)
  rawset(self, "elementwise_affine", o.elementwise_affine)
  if o.elementwise_affine then self.weight = nn.Parameter(zorch.ones(shape)) end
end
function nn.RMSNorm:forward(x)
  return zorch.rms_norm(x, self.normalized_shape, rawget(self, "weight"), self.eps)
end

-- InstanceNorm1d/2d(num_features, {eps = 1e-5, momentum = 0.1, affine = false,
-- track_running_stats = false}): each sample's channel normalised over its
-- length (1d, (N, C, L) or (C, L)) or image (2d, (N, C, H, W) or (C, H, W)).
-- With running stats, training also updates running_mean and running_var (the
-- unbiased variance) with the mean over the samples, and eval uses them.
local function instance_norm_class(name, spatial)
  local cls = Module:extend(name)
  function cls:init(num_features, opts)
    check_int(name, "num_features", num_features)
    local o = read_opts(name, opts, {eps = {1e-5, num_gt0, "a number > 0"},
      momentum = {0.1, function(v) return v == false or (type(v) == "number" and v >= 0 and v <= 1) end,
                  "a number in [0, 1] or false (a cumulative average)"},
      affine = {false, is_bool, "true or false"}, track_running_stats = {false, is_bool, "true or false"}}, 4)
    rawset(self, "num_features", num_features)
    for k, v in pairs(o) do rawset(self, k, v) end
    lib.norm_state(self, num_features)
  end
  function cls:forward(x)
    if not zorch.is_tensor(x) then error(("%s: expected a tensor, got %s"):format(name, type(x)), 2) end
    local d = x:dim()
    if d ~= spatial + 1 and d ~= spatial + 2 then
      error(("%s: expected %dD or %dD input, got shape %s"):format(name, spatial + 1, spatial + 2, shape_str(x)), 2)
    end
    local unbatched = d == spatial + 1
    if unbatched then x = x:unsqueeze(1) end
    local c = x.shape[2]
    if c ~= self.num_features and (self.affine or self.track_running_stats) then
      error(("%s: expected %d channels, got input %s"):format(name, self.num_features, shape_str(x)), 2)
    end
    local rm = rawget(self, "running_mean")
    local y
    if rm and not self.training then
      local s = channel_shape(x, c)
      y = (x - rm:reshape(s)) / (self.running_var:reshape(s) + self.eps):sqrt()
      y = affine(y, x, rawget(self, "weight"), rawget(self, "bias"))
    else
      y = zorch.group_norm(x, c, rawget(self, "weight"), rawget(self, "bias"), self.eps)
      if rm then
        zorch.no_grad(function()
          local flatx = x:detach():reshape({x.shape[1], c, -1})
          local nbt = self.num_batches_tracked
          nbt:copy_(nbt + 1)
          local m = self.momentum or 1 / nbt:item()
          local mean = flatx:mean(3):mean(1)
          local var = flatx:var(3, false, 1):mean(1)
          rm:copy_(rm * (1 - m) + mean * m)
          self.running_var:copy_(self.running_var * (1 - m) + var * m)
        end)
      end
    end
    if unbatched then y = y:squeeze(1) end
    return y
  end
  cls.__tostring = function(m)
    return ("%s(%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s)"):format(name, m.num_features, m.eps,
      m.momentum and ("%g"):format(m.momentum) or "None", py_bool(m.affine), py_bool(m.track_running_stats))
  end
  return cls
end
nn.InstanceNorm1d = instance_norm_class("nn.InstanceNorm1d", 1)
nn.InstanceNorm2d = instance_norm_class("nn.InstanceNorm2d", 2)

-- 1-d convolution and pooling over the 2-d ops with a unit height: input
-- (N, C, L) or (C, L); sizes are integers.
local function check_int1(fn, name, v, lo)
  if math.type(v) ~= "integer" or v < lo then
    error(("%s: %s must be %s integer, got %s"):format(fn, name, lo > 0 and "a positive" or "a non-negative",
      tostring(v)), 4)
  end
end
local function as_2d(fn, x)
  need_tensor(fn, "input", x)
  if x:dim() ~= 2 and x:dim() ~= 3 then
    error(("%s: expected input (N, C, L) or (C, L), got %s"):format(fn, shape_str(x)), 3)
  end
  return x:unsqueeze(-2)
end
-- The 2-d op's message about the input with a unit height, in 1-d terms:
-- (N, C, 1, L) as (N, C, L), a window (1, k) as k.
local function message_1d(fn, msg)
  msg = msg:gsub("^[^:]*:%d+: ", ""):gsub("^[%w_.]+2d", fn)
  msg = msg:gsub("%((%d+), (%d+), 1, (%d+)%)", "(%1, %2, %3)"):gsub("%((%d+), 1, (%d+)%)", "(%1, %2)")
  return (msg:gsub("%(1, (%d+)%)", "%1"):gsub("%(1 x (%d+)%)", "(%1)"))
end
-- runs f on the input with a unit height, naming fn in its errors (callers
-- call it without a tail call, so that the error points at their caller)
local function via_2d(fn, x, f)
  local x2 = as_2d(fn, x)
  local ok, y = pcall(f, x2)
  if not ok then error(message_1d(fn, tostring(y)), 3) end
  return y:squeeze(-2)
end
lib.via_2d = via_2d -- (lua/layers2.lua's 1-d functions)
local CONV1D = {stride = {1, function(v) return math.type(v) == "integer" and v >= 1 end, "a positive integer"},
                padding = {0, function(v) return math.type(v) == "integer" and v >= 0 end, "a non-negative integer"},
                dilation = {1, function(v) return math.type(v) == "integer" and v >= 1 end, "a positive integer"},
                groups = {1, function(v) return math.type(v) == "integer" and v >= 1 end, "a positive integer"}}
-- conv1d(x, w (out, C / groups, k), b_or_nil, {stride, padding, dilation, groups})
function zorch.conv1d(x, w, b, opts)
  local o = read_opts("conv1d", opts, CONV1D, 3)
  need_tensor("conv1d", "weight", w)
  if w:dim() ~= 3 then error(("conv1d: weight must be (out, C / groups, k), got %s"):format(shape_str(w)), 2) end
  local y = via_2d("conv1d", x, function(x2)
    return zorch.conv2d(x2, w:unsqueeze(3), b, {stride = {1, o.stride}, padding = {0, o.padding},
      dilation = {1, o.dilation}, groups = o.groups})
  end)
  return y
end

nn.Conv1d = Module:extend "nn.Conv1d"
-- Conv1d(in, out, kernel, {stride, padding, dilation, groups, bias = true}):
-- weight (out, in / groups, k) and bias (out), U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
-- fan_in = in / groups * k, as PyTorch's.
function nn.Conv1d:init(in_channels, out_channels, kernel_size, opts)
  local fn = "nn.Conv1d"
  local o = read_opts(fn, opts, spec_with(CONV1D, {bias = {true, is_bool, "true or false"}}), 4)
  check_int(fn, "in_channels", in_channels)
  check_int(fn, "out_channels", out_channels)
  check_int(fn, "kernel_size", kernel_size)
  if in_channels % o.groups ~= 0 or out_channels % o.groups ~= 0 then
    error(("%s: groups %d must divide in_channels %d and out_channels %d"):format(fn, o.groups, in_channels,
      out_channels), 3)
  end
  self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel_size
  self.stride, self.padding, self.dilation, self.groups = o.stride, o.padding, o.dilation, o.groups
  local bound = 1 / math.sqrt(in_channels // o.groups * kernel_size)
  self.weight = uniform({out_channels, in_channels // o.groups, kernel_size}, bound)
  if o.bias then self.bias = uniform({out_channels}, bound) end
end
function nn.Conv1d:forward(x)
  local y = zorch.conv1d(x, self.weight, rawget(self, "bias"), {stride = self.stride, padding = self.padding,
    dilation = self.dilation, groups = self.groups})
  return y
end
nn.Conv1d.__tostring = function(s)
  local t = {("nn.Conv1d(%d, %d, kernel_size=(%d,), stride=(%d,)"):format(s.in_channels, s.out_channels,
    s.kernel_size, s.stride)}
  if s.padding ~= 0 then t[#t + 1] = (", padding=(%d,)"):format(s.padding) end
  if s.dilation ~= 1 then t[#t + 1] = (", dilation=(%d,)"):format(s.dilation) end
  if s.groups ~= 1 then t[#t + 1] = ", groups=" .. s.groups end
  if not rawget(s, "bias") then t[#t + 1] = ", bias=False" end
  return table.concat(t) .. ")"
end

-- MaxPool1d(k, {stride = k, padding = 0, dilation = 1, ceil_mode = false})
nn.MaxPool1d = Module:extend "nn.MaxPool1d"
function nn.MaxPool1d:init(kernel_size, opts)
  return lib.max_pool_init(self, "nn.MaxPool1d", kernel_size, opts, check_int1)
end
function nn.MaxPool1d:forward(x)
  local y = via_2d("nn.MaxPool1d", x, function(x2)
    return zorch.max_pool2d(x2, {1, self.kernel_size}, {stride = {1, self.stride}, padding = {0, self.padding},
      dilation = {1, self.dilation}, ceil_mode = self.ceil_mode})
  end)
  return y
end

-- AvgPool1d(k, {stride = k, padding = 0, ceil_mode = false, count_include_pad = true})
nn.AvgPool1d = Module:extend "nn.AvgPool1d"
function nn.AvgPool1d:init(kernel_size, opts)
  return lib.avg_pool_init(self, "nn.AvgPool1d", kernel_size, opts, check_int1)
end
function nn.AvgPool1d:forward(x)
  local y = via_2d("nn.AvgPool1d", x, function(x2)
    return zorch.avg_pool2d(x2, {1, self.kernel_size}, {stride = {1, self.stride}, padding = {0, self.padding},
      ceil_mode = self.ceil_mode, count_include_pad = self.count_include_pad})
  end)
  return y
end

-- AdaptiveAvgPool1d(n): output i averages inputs floor(i L / n) .. ceil((i + 1) L / n) - 1
nn.AdaptiveAvgPool1d = Module:extend "nn.AdaptiveAvgPool1d"
function nn.AdaptiveAvgPool1d:init(output_size)
  check_int1("nn.AdaptiveAvgPool1d", "output_size", output_size, 1)
  self.output_size = output_size
end
function nn.AdaptiveAvgPool1d:forward(x)
  local y = via_2d("nn.AdaptiveAvgPool1d", x, function(x2)
    return zorch.adaptive_avg_pool2d(x2, {1, self.output_size})
  end)
  return y
end

-- ParameterList{t1, t2, ...}: parameters named "0", "1", ... (PyTorch's names),
-- read from 1 (list[1] is "0", list[-1] the last) with #list, ipairs and
-- list:append(t); each tensor becomes a parameter. It has no forward.
nn.ParameterList = Module:extend "nn.ParameterList"
local ParameterList = nn.ParameterList
function ParameterList:init(ts)
  rawset(self, "n", 0)
  if ts == nil then return end
  if type(ts) ~= "table" or zorch.is_tensor(ts) or is_module(ts) then
    error("nn.ParameterList: expected a list of tensors ({t1, t2, ...}) or nothing", 3)
  end
  for i, t in ipairs(ts) do
    if not zorch.is_tensor(t) then error(("nn.ParameterList: item %d is a %s, not a tensor"):format(i, type(t)), 3) end
    self:append(t)
  end
end
function ParameterList:append(t)
  if not zorch.is_tensor(t) then error(("nn.ParameterList:append: expected a tensor, got %s"):format(type(t)), 2) end
  if not t.is_leaf then t = t:detach() end
  self[tostring(self.n)] = nn.Parameter(t)
  rawset(self, "n", self.n + 1)
  return self
end
ParameterList.__index = lib.list_index(ParameterList)
ParameterList.__len = function(self) return rawget(self, "n") end
function ParameterList:forward()
  error("nn.ParameterList: a parameter list has no forward; use its tensors in the owner's forward", 2)
end
ParameterList.__tostring = function(s) return ("nn.ParameterList(%d parameters)"):format(s.n) end

-- Unflatten(dim, sizes): dim becomes the dims `sizes` (one of them may be -1)
nn.Unflatten = Module:extend "nn.Unflatten"
function nn.Unflatten:init(dim, sizes)
  check_dim("nn.Unflatten", "dim", dim)
  local good = type(sizes) == "table" and #sizes > 0
  local free = 0
  for _, s in ipairs(type(sizes) == "table" and sizes or {}) do
    good = good and math.type(s) == "integer" and (s >= 0 or s == -1)
    if s == -1 then free = free + 1 end
  end
  if not good or free > 1 then
    error(("nn.Unflatten: sizes must be a list of integers >= 0 (one of them may be -1), got %s"):format(
      type(sizes) == "table" and "{" .. list_str(sizes) .. "}" or tostring(sizes)), 3)
  end
  self.dim, self.sizes = dim, sizes
end
function nn.Unflatten:forward(x)
  if not zorch.is_tensor(x) then error(("nn.Unflatten: expected a tensor, got %s"):format(type(x)), 2) end
  local n = x:dim()
  local d = self.dim < 0 and n + 1 + self.dim or self.dim
  if d < 1 or d > n then error(("nn.Unflatten: dim %d out of range for input %s"):format(self.dim, shape_str(x)), 2) end
  local known, len = 1, x.shape[d]
  for _, s in ipairs(self.sizes) do if s ~= -1 then known = known * s end end
  local sizes = {}
  for i, s in ipairs(self.sizes) do sizes[i] = s == -1 and (known > 0 and len // known or 0) or s end
  local prod = 1
  for _, s in ipairs(sizes) do prod = prod * s end
  if prod ~= len then
    error(("nn.Unflatten: sizes {%s} do not multiply to %d, the size of dim %d of input %s"):format(
      table.concat(self.sizes, ", "), len, self.dim, shape_str(x)), 2)
  end
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = x.shape[i] end
  for _, s in ipairs(sizes) do shape[#shape + 1] = s end
  for i = d + 1, n do shape[#shape + 1] = x.shape[i] end
  return x:reshape(shape)
end

-- Dropout1d(p = 0.5), Dropout2d(p): in training each channel of each sample is
-- zeroed whole with probability p, the rest scaled by 1 / (1 - p); identity
-- in eval. Dropout1d takes (N, C, L) or (C, L), Dropout2d (N, C, H, W) or
-- (C, H, W); a 3-d input to Dropout2d is (N, C, L), as PyTorch reads it.
local function channel_dropout(name, dims)
  local cls = Module:extend(name)
  function cls:init(p)
    if p == nil then p = 0.5 end
    if type(p) ~= "number" or not (p >= 0 and p <= 1) then
      error(("%s: p must be a number in [0, 1], got %s"):format(name, tostring(p)), 3)
    end
    self.p = p
  end
  function cls:forward(x)
    if not zorch.is_tensor(x) then error(("%s: expected a tensor, got %s"):format(name, type(x)), 2) end
    if not dims[x:dim()] then error(("%s: expected %s input, got %s"):format(name, dims.want, shape_str(x)), 2) end
    if not self.training or self.p == 0 then return x end
    local batched = x:dim() ~= dims.unbatched
    local shape = {}
    for i = 1, x:dim() do shape[i] = (i <= (batched and 2 or 1)) and x.shape[i] or 1 end
    if self.p == 1 then return x * zorch.zeros(shape, {dtype = x:dtype(), device = x:device()}) end
    local keep = zorch.rand(shape, {device = x:device()}):ge(self.p):to(x:dtype())
    return x * (keep * (1 / (1 - self.p)))
  end
  cls.__tostring = function(s) return ("%s(p=%g)"):format(name, s.p) end
  return cls
end
nn.Dropout1d = channel_dropout("nn.Dropout1d", {[2] = true, [3] = true, unbatched = 2, want = "(N, C, L) or (C, L)"})
nn.Dropout2d = channel_dropout("nn.Dropout2d", {[3] = true, [4] = true, unbatched = 0,
                                                want = "(N, C, H, W), (C, H, W) or (N, C, L)"})

