-- zorch.nn.conv_transpose: ConvTranspose2d, the adjoint of conv2d, as a
-- conv2d of the zero-stuffed, padded input with the flipped, transposed weight
-- (so autograd gives every gradient through conv2d, pad and flip).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_int, check_opts, check_size = M.Module, M.check_int, M.check_opts, M.check_size
local need_tensor, pair_of, shape_str, size_str, uniform = M.need_tensor, M.pair_of, M.shape_str, M.size_str, M.uniform

local function sizes(fn, o)
  check_size(fn, "stride", o.stride or 1, 1)
  check_size(fn, "padding", o.padding or 0, 0)
  check_size(fn, "output_padding", o.output_padding or 0, 0)
  check_size(fn, "dilation", o.dilation or 1, 1)
  local groups = o.groups or 1
  check_int(fn, "groups", groups)
  local s, d, op = pair_of(o.stride or 1), pair_of(o.dilation or 1), pair_of(o.output_padding or 0)
  for i = 1, 2 do
    if op[i] >= math.max(s[i], d[i]) then
      error(("%s: output_padding %s must be smaller than stride %s or dilation %s"):format(fn,
        size_str(o.output_padding), size_str(o.stride or 1), size_str(o.dilation or 1)), 4)
    end
  end
  return s, pair_of(o.padding or 0), op, d, groups
end

-- conv_transpose2d(x (N, Cin, H, W) or (Cin, H, W), w (Cin, Cout / groups, kh, kw), b?,
-- {stride, padding, output_padding, dilation, groups}): PyTorch's F.conv_transpose2d.
function zorch.conv_transpose2d(x, w, b, opts)
  local fn = "conv_transpose2d"
  opts = check_opts(fn, opts, {"stride", "padding", "output_padding", "dilation", "groups"})
  local s, p, op, d, g = sizes(fn, opts)
  need_tensor(fn, "input", x)
  need_tensor(fn, "weight", w)
  if x:dim() ~= 3 and x:dim() ~= 4 then
    error(("%s: input must be (N, C, H, W) or (C, H, W), got %s"):format(fn, shape_str(x)), 2)
  end
  if w:dim() ~= 4 then error(("%s: weight must be (Cin, Cout / groups, kh, kw), got %s"):format(fn, shape_str(w)), 2) end
  local unbatched = x:dim() == 3
  if unbatched then x = x:unsqueeze(1) end
  local n, c, h, wd = table.unpack(x.shape)
  local cin, cog, kh, kw = table.unpack(w.shape)
  if c ~= cin then
    error(("%s: weight %s expects %d input channels, input %s has %d"):format(fn, shape_str(w), cin, shape_str(x), c), 2)
  end
  if cin % g ~= 0 then error(("%s: groups %d does not divide the %d input channels of weight %s"):format(fn, g, cin, shape_str(w)), 2) end
  if b ~= nil then
    need_tensor(fn, "bias", b)
    if b:dim() ~= 1 or b.shape[1] ~= cog * g then
      error(("%s: bias %s must be (%d,)"):format(fn, shape_str(b), cog * g), 2)
    end
  end
  local oh = (h - 1) * s[1] - 2 * p[1] + d[1] * (kh - 1) + op[1] + 1
  local ow = (wd - 1) * s[2] - 2 * p[2] + d[2] * (kw - 1) + op[2] + 1
  if oh < 1 or ow < 1 then
    error(("%s: the output would be empty (%d x %d): input %s, weight %s"):format(fn, oh, ow, shape_str(x), shape_str(w)), 2)
  end
  -- zeros between the pixels: (N, C, H, 1, W, 1) padded to (N, C, H, sh, W, sw)
  local xs = x
  if s[1] > 1 or s[2] > 1 then
    xs = zorch.pad(x:reshape(n, c, h, 1, wd, 1), {0, s[2] - 1, 0, 0, 0, s[1] - 1}):reshape(n, c, h * s[1], wd * s[2])
  end
  -- each side d (k - 1) - p (negative: a crop), less the stuffing after the last pixel
  local eh, ew = d[1] * (kh - 1) - p[1], d[2] * (kw - 1) - p[2]
  xs = zorch.pad(xs, {ew, ew + op[2] - (s[2] - 1), eh, eh + op[1] - (s[1] - 1)})
  local wt = w:reshape(g, cin // g, cog, kh, kw):transpose(2, 3):reshape(g * cog, cin // g, kh, kw):flip({3, 4})
  local y = zorch.conv2d(xs, wt, b, {dilation = d, groups = g})
  if unbatched then y = y:squeeze(1) end
  return y
end

nn.ConvTranspose2d = Module:extend "nn.ConvTranspose2d"
-- ConvTranspose2d(in, out, kernel, {stride, padding, output_padding, dilation, groups, bias = false}):
-- weight (in, out / groups, kh, kw) and bias (out), U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
-- fan_in = out / groups * kh * kw, as PyTorch's (its fan_in reads the weight's dim 1).
function nn.ConvTranspose2d:init(in_channels, out_channels, kernel_size, opts)
  local fn = "nn.ConvTranspose2d"
  opts = check_opts(fn, opts, {"stride", "padding", "output_padding", "dilation", "groups", "bias"})
  check_int(fn, "in_channels", in_channels)
  check_int(fn, "out_channels", out_channels)
  check_size(fn, "kernel_size", kernel_size, 1)
  local s, p, op, d, g = sizes(fn, opts)
  if in_channels % g ~= 0 or out_channels % g ~= 0 then
    error(("%s: groups %d must divide in_channels %d and out_channels %d"):format(fn, g, in_channels, out_channels), 2)
  end
  local k = pair_of(kernel_size)
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, g
  self.kernel_size, self.stride, self.padding, self.output_padding, self.dilation = {k[1], k[2]}, s, p, op, d
  local bound = 1 / math.sqrt(out_channels // g * k[1] * k[2])
  self.weight = uniform({in_channels, out_channels // g, k[1], k[2]}, bound)
  if opts.bias ~= false then self.bias = uniform({out_channels}, bound) end
end
function nn.ConvTranspose2d:forward(x)
  return zorch.conv_transpose2d(x, self.weight, rawget(self, "bias"), {stride = self.stride, padding = self.padding,
    output_padding = self.output_padding, dilation = self.dilation, groups = self.groups})
end
nn.ConvTranspose2d.__tostring = function(s)
  local t = {("nn.ConvTranspose2d(%d, %d, kernel_size=%s, stride=%s"):format(s.in_channels, s.out_channels,
    size_str(s.kernel_size), size_str(s.stride))}
  local function opt(name, v, dflt)
    if v[1] ~= dflt or v[2] ~= dflt then t[#t + 1] = (", %s=%s"):format(name, size_str(v)) end
  end
  opt("padding", s.padding, 0)
  opt("output_padding", s.output_padding, 0)
  opt("dilation", s.dilation, 1)
  if s.groups ~= 1 then t[#t + 1] = ", groups=" .. s.groups end
  if not rawget(s, "bias") then t[#t + 1] = ", bias=False" end
  return table.concat(t) .. ")"
end
