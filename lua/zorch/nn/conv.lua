-- zorch.nn.conv: Conv1d and Conv2d (zorch.conv1d over the 2-d kernel).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_int, check_opts, check_size = M.Module, M.check_int, M.check_opts, M.check_size
local is_bool, need_tensor, pair_of, read_opts = M.is_bool, M.need_tensor, M.pair_of, M.read_opts
local shape_str, size_str, spec_with, uniform = M.shape_str, M.size_str, M.spec_with, M.uniform
local via_2d = M.via_2d

nn.Conv2d = Module:extend "nn.Conv2d"
-- opts: stride, padding, dilation (numbers or pairs), groups, bias = false.
-- weight (out, in / groups, kh, kw) and bias (out) are U(-1/sqrt(fan_in),
-- 1/sqrt(fan_in)), fan_in = in / groups * kh * kw, as PyTorch initialises them.
function nn.Conv2d:init(in_channels, out_channels, kernel_size, opts)
  local fn = "nn.Conv2d"
  opts = check_opts(fn, opts, {"stride", "padding", "dilation", "groups", "bias"})
  check_int(fn, "in_channels", in_channels)
  check_int(fn, "out_channels", out_channels)
  check_size(fn, "kernel_size", kernel_size, 1)
  local stride, padding, dilation = opts.stride or 1, opts.padding or 0, opts.dilation or 1
  check_size(fn, "stride", stride, 1)
  check_size(fn, "padding", padding, 0)
  check_size(fn, "dilation", dilation, 1)
  local groups = opts.groups or 1
  check_int(fn, "groups", groups)
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    error(("%s: groups %d must divide in_channels %d and out_channels %d"):format(fn, groups,
      in_channels, out_channels), 3)
  end
  local k = pair_of(kernel_size)
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size, self.stride, self.padding, self.dilation = {k[1], k[2]}, pair_of(stride), pair_of(padding), pair_of(dilation)
  local bound = 1 / math.sqrt(in_channels // groups * k[1] * k[2])
  self.weight = uniform({out_channels, in_channels // groups, k[1], k[2]}, bound)
  if opts.bias ~= false then self.bias = uniform({out_channels}, bound) end
end
function nn.Conv2d:forward(x)
  return zorch.conv2d(x, self.weight, rawget(self, "bias"), {stride = self.stride,
    padding = self.padding, dilation = self.dilation, groups = self.groups})
end
nn.Conv2d.__tostring = function(s)
  local t = {("nn.Conv2d(%d, %d, kernel_size=%s, stride=%s"):format(s.in_channels, s.out_channels,
    size_str(s.kernel_size), size_str(s.stride))}
  if s.padding[1] ~= 0 or s.padding[2] ~= 0 then t[#t + 1] = ", padding=" .. size_str(s.padding) end
  if s.dilation[1] ~= 1 or s.dilation[2] ~= 1 then t[#t + 1] = ", dilation=" .. size_str(s.dilation) end
  if s.groups ~= 1 then t[#t + 1] = ", groups=" .. s.groups end
  if not rawget(s, "bias") then t[#t + 1] = ", bias=False" end
  return table.concat(t) .. ")"
end

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
