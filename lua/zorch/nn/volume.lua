-- zorch.nn.volume: Conv3d, MaxPool3d and AvgPool3d over (N, C, D, H, W).
-- Each is its 2-d op over (H, W) with the depth folded into the batch (or the
-- channels), and the depth windows gathered by index_select and combined, so
-- autograd gives every gradient through the 2-d kernels.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_int, check_opts, need_tensor = M.Module, M.check_int, M.check_opts, M.need_tensor
local py_bool, shape_str, uniform = M.py_bool, M.shape_str, M.uniform

local function triple_str(v) return ("(%d, %d, %d)"):format(v[1], v[2], v[3]) end
-- A size: a number or a triple {d, h, w} of integers >= lo; returned as a triple.
local function triple(fn, name, v, lo)
  local t = type(v) == "table" and v or {v, v, v}
  local good = #t == 3
  for i = 1, 3 do good = good and math.type(t[i]) == "integer" and t[i] >= lo end
  if not good then
    error(("%s: %s must be %s integer or a triple {d, h, w} of them, got %s"):format(fn, name,
      lo > 0 and "a positive" or "a non-negative", type(v) == "table" and "{" .. table.concat(v, ", ") .. "}" or tostring(v)), 4)
  end
  return {t[1], t[2], t[3]}
end

-- The 5-d input (a 4-d one is unbatched) and whether it was unbatched.
local function as_5d(fn, x)
  need_tensor(fn, "input", x)
  if x:dim() == 4 then return x:unsqueeze(1), true end
  if x:dim() ~= 5 then error(("%s: input must be (N, C, D, H, W) or (C, D, H, W), got %s"):format(fn, shape_str(x)), 3) end
  return x, false
end

-- The depth windows: for each kernel offset j, the 1-based depths
-- j * dil + od * stride + 1 (od = 0 .. out - 1) of the padded input.
local function windows(k, stride, dil, out)
  local idx = {}
  for j = 0, k - 1 do
    local t = {}
    for od = 0, out - 1 do t[od + 1] = j * dil + od * stride + 1 end
    idx[j + 1] = zorch.tensor(t):long()
  end
  return idx
end

-- conv3d(x, w (out, C / groups, kd, kh, kw), b?, {stride, padding, dilation, groups})
function zorch.conv3d(x, w, b, opts)
  local fn = "conv3d"
  opts = check_opts(fn, opts, {"stride", "padding", "dilation", "groups"})
  local s, p = triple(fn, "stride", opts.stride or 1, 1), triple(fn, "padding", opts.padding or 0, 0)
  local d, g = triple(fn, "dilation", opts.dilation or 1, 1), opts.groups or 1
  if math.type(g) ~= "integer" or g < 1 then error(("%s: groups must be a positive integer, got %s"):format(fn, tostring(g)), 2) end
  local x5, unbatched = as_5d(fn, x)
  need_tensor(fn, "weight", w)
  if w:dim() ~= 5 then error(("%s: weight must be (out, C / groups, kd, kh, kw), got %s"):format(fn, shape_str(w)), 2) end
  local n, c, depth, h, wd = table.unpack(x5.shape)
  local o, cg, kd = w.shape[1], w.shape[2], w.shape[3]
  if c % g ~= 0 then error(("%s: groups %d does not divide the %d channels of input %s"):format(fn, g, c, shape_str(x)), 2) end
  if cg * g ~= c then
    error(("%s: weight %s expects %d input channels per group, input %s has %d"):format(fn, shape_str(w), cg, shape_str(x), c // g), 2)
  end
  local od = (depth + 2 * p[1] - d[1] * (kd - 1) - 1) // s[1] + 1
  if od < 1 then error(("%s: the output would be empty: input %s, weight %s"):format(fn, shape_str(x), shape_str(w)), 2) end
  local xp = p[1] > 0 and zorch.pad(x5, {0, 0, 0, 0, p[1], p[1]}) or x5
  local y
  for j, idx in ipairs(windows(kd, s[1], d[1], od)) do
    local xs = xp:index_select(3, idx):permute(1, 3, 2, 4, 5):reshape(n * od, c, h, wd)
    local ok, yj = pcall(zorch.conv2d, xs, w:select(3, j), j == 1 and b or nil,
      {stride = {s[2], s[3]}, padding = {p[2], p[3]}, dilation = {d[2], d[3]}, groups = g})
    if not ok then error((tostring(yj):gsub("^conv2d", fn)), 2) end
    y = y and y + yj or yj
  end
  y = y:reshape(n, od, o, y.shape[3], y.shape[4]):permute(1, 3, 2, 4, 5):contiguous()
  return unbatched and y:squeeze(1) or y
end

-- The depth pooling's output size and right padding (ceil_mode as PyTorch's:
-- the last window must start inside the input or its left padding).
local function depth_out(fn, depth, k, s, p, dil, ceil)
  if p > (dil * (k - 1) + 1) // 2 and p > k // 2 then
    error(("%s: padding %d must be at most half the kernel %d"):format(fn, p, k), 4)
  end
  local span = depth + 2 * p - dil * (k - 1) - 1
  local out = (ceil and -((-span) // s) or span // s) + 1
  if ceil and (out - 1) * s >= depth + p then out = out - 1 end
  if out < 1 then error(("%s: the output would be empty: depth %d is smaller than the kernel %d"):format(fn, depth, k), 4) end
  return out, math.max(0, (out - 1) * s + dil * (k - 1) + 1 - depth - 2 * p)
end

local function pool_opts(fn, kernel, opts, keys)
  opts = check_opts(fn, opts, keys)
  local k = triple(fn, "kernel_size", kernel, 1)
  return k, triple(fn, "stride", opts.stride or kernel, 1), triple(fn, "padding", opts.padding or 0, 0),
    triple(fn, "dilation", opts.dilation or 1, 1), opts
end

-- max_pool3d(x, k, {stride = k, padding = 0, dilation = 1, ceil_mode = false})
function zorch.max_pool3d(x, kernel, opts)
  local fn = "max_pool3d"
  local k, s, p, d, o = pool_opts(fn, kernel, opts, {"stride", "padding", "dilation", "ceil_mode"})
  local x5, unbatched = as_5d(fn, x)
  local n, c, depth, h, w = table.unpack(x5.shape)
  local od, extra = depth_out(fn, depth, k[1], s[1], p[1], d[1], o.ceil_mode == true)
  local ok, y = pcall(zorch.max_pool2d, x5:reshape(n * c, depth, h, w), {k[2], k[3]},
    {stride = {s[2], s[3]}, padding = {p[2], p[3]}, dilation = {d[2], d[3]}, ceil_mode = o.ceil_mode == true})
  if not ok then error((tostring(y):gsub("^max_pool2d", fn)), 2) end
  y = zorch.pad(y, {0, 0, 0, 0, p[1], p[1] + extra}, "constant", -math.huge)
  local parts = {}
  for j, idx in ipairs(windows(k[1], s[1], d[1], od)) do parts[j] = y:index_select(2, idx) end
  y = zorch.max(zorch.stack(parts, 1), 1)
  y = y:reshape(n, c, od, y.shape[3], y.shape[4])
  return unbatched and y:squeeze(1) or y
end

-- avg_pool3d(x, k, {stride = k, padding = 0, ceil_mode = false, count_include_pad = true});
-- the divisor is a product over the dims, so the depth divides by its own count.
function zorch.avg_pool3d(x, kernel, opts)
  local fn = "avg_pool3d"
  local k, s, p, _, o = pool_opts(fn, kernel, opts, {"stride", "padding", "ceil_mode", "count_include_pad"})
  local x5, unbatched = as_5d(fn, x)
  local n, c, depth, h, w = table.unpack(x5.shape)
  local ceil, incl = o.ceil_mode == true, o.count_include_pad ~= false
  local od, extra = depth_out(fn, depth, k[1], s[1], p[1], 1, ceil)
  local ok, y = pcall(zorch.avg_pool2d, x5:reshape(n * c, depth, h, w), {k[2], k[3]},
    {stride = {s[2], s[3]}, padding = {p[2], p[3]}, ceil_mode = ceil, count_include_pad = incl})
  if not ok then error((tostring(y):gsub("^avg_pool2d", fn)), 2) end
  y = zorch.pad(y, {0, 0, 0, 0, p[1], p[1] + extra})
  local sum
  for _, idx in ipairs(windows(k[1], s[1], 1, od)) do
    local part = y:index_select(2, idx)
    sum = sum and sum + part or part
  end
  local div = {}
  for i = 0, od - 1 do
    local lo, hi = i * s[1] - p[1], math.min(i * s[1] - p[1] + k[1], depth + p[1])
    if not incl then lo, hi = math.max(lo, 0), math.min(hi, depth) end
    div[i + 1] = hi - lo
  end
  y = sum / zorch.tensor(div):to(sum:dtype()):view(1, od, 1, 1)
  y = y:reshape(n, c, od, y.shape[3], y.shape[4])
  return unbatched and y:squeeze(1) or y
end

nn.Conv3d = Module:extend "nn.Conv3d"
-- Conv3d(in, out, kernel, {stride, padding, dilation, groups, bias = true}): weight
-- (out, in / groups, kd, kh, kw) and bias (out), U(+-1/sqrt(in / groups * kd * kh * kw)), as PyTorch's.
function nn.Conv3d:init(in_channels, out_channels, kernel_size, opts)
  local fn = "nn.Conv3d"
  opts = check_opts(fn, opts, {"stride", "padding", "dilation", "groups", "bias"})
  check_int(fn, "in_channels", in_channels)
  check_int(fn, "out_channels", out_channels)
  local k = triple(fn, "kernel_size", kernel_size, 1)
  self.stride, self.padding = triple(fn, "stride", opts.stride or 1, 1), triple(fn, "padding", opts.padding or 0, 0)
  self.dilation, self.groups = triple(fn, "dilation", opts.dilation or 1, 1), opts.groups or 1
  check_int(fn, "groups", self.groups)
  if in_channels % self.groups ~= 0 or out_channels % self.groups ~= 0 then
    error(("%s: groups %d must divide in_channels %d and out_channels %d"):format(fn, self.groups, in_channels,
      out_channels), 2)
  end
  self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, k
  local bound = 1 / math.sqrt(in_channels // self.groups * k[1] * k[2] * k[3])
  self.weight = uniform({out_channels, in_channels // self.groups, k[1], k[2], k[3]}, bound)
  if opts.bias ~= false then self.bias = uniform({out_channels}, bound) end
end
function nn.Conv3d:forward(x)
  return zorch.conv3d(x, self.weight, rawget(self, "bias"), {stride = self.stride, padding = self.padding,
    dilation = self.dilation, groups = self.groups})
end
nn.Conv3d.__tostring = function(s)
  local t = {("nn.Conv3d(%d, %d, kernel_size=%s, stride=%s"):format(s.in_channels, s.out_channels,
    triple_str(s.kernel_size), triple_str(s.stride))}
  if s.padding[1] + s.padding[2] + s.padding[3] ~= 0 then t[#t + 1] = ", padding=" .. triple_str(s.padding) end
  if s.dilation[1] * s.dilation[2] * s.dilation[3] ~= 1 then t[#t + 1] = ", dilation=" .. triple_str(s.dilation) end
  if s.groups ~= 1 then t[#t + 1] = ", groups=" .. s.groups end
  if not rawget(s, "bias") then t[#t + 1] = ", bias=False" end
  return table.concat(t) .. ")"
end

local function pool_class(name, fn, keys)
  local cls = Module:extend(name)
  function cls:init(kernel_size, opts)
    pool_opts(name, kernel_size, opts, keys) -- checked here, so the error names the module
    self.kernel_size, self.opts = kernel_size, opts or {}
  end
  function cls:forward(x) return fn(x, self.kernel_size, self.opts) end
  cls.__tostring = function(s)
    local function v(x) return type(x) == "table" and triple_str(x) or tostring(x) end
    local t = {("%s(kernel_size=%s, stride=%s, padding=%s"):format(name, v(s.kernel_size),
      v(s.opts.stride or s.kernel_size), v(s.opts.padding or 0))}
    if keys[3] == "dilation" then t[#t + 1] = ", dilation=" .. v(s.opts.dilation or 1) end
    t[#t + 1] = ", ceil_mode=" .. py_bool(s.opts.ceil_mode == true)
    return table.concat(t) .. ")"
  end
  return cls
end
-- MaxPool3d(k, {stride, padding, dilation, ceil_mode}), AvgPool3d(k, {stride, padding, ceil_mode, count_include_pad})
nn.MaxPool3d = pool_class("nn.MaxPool3d", zorch.max_pool3d, {"stride", "padding", "dilation", "ceil_mode"})
nn.AvgPool3d = pool_class("nn.AvgPool3d", zorch.avg_pool3d, {"stride", "padding", "ceil_mode", "count_include_pad"})
