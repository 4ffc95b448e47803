-- zorch.nn.pool: max, average, adaptive and power-average pooling in 1 and 2
-- dims, modules and functions.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, as_fn, check_int1, check_opts = M.Module, M.as_fn, M.check_int1, M.check_opts
local check_size, is_bool, lead_shape, need_number = M.check_size, M.is_bool, M.lead_shape, M.need_number
local need_room, need_tensor, pos_int, py_bool = M.need_room, M.need_tensor, M.pos_int, M.py_bool
local py_num, read_opts, shape_str, size_str = M.py_num, M.read_opts, M.shape_str, M.size_str
local tuple_str, via_2d = M.tuple_str, M.via_2d

nn.MaxPool2d = Module:extend "nn.MaxPool2d"
-- opts: stride (default: the kernel), padding, dilation, ceil_mode.
-- The options of a max or average pooling module of any rank, each size
-- checked by `check` (check_size here, lua/layers.lua's for 1-d); called in
-- tail position from init, so that errors point at the caller's line.
local function max_pool_init(self, fn, kernel_size, opts, check)
  opts = check_opts(fn, opts, {"stride", "padding", "dilation", "ceil_mode"})
  check(fn, "kernel_size", kernel_size, 1)
  self.kernel_size, self.stride = kernel_size, opts.stride or kernel_size
  self.padding, self.dilation, self.ceil_mode = opts.padding or 0, opts.dilation or 1, opts.ceil_mode == true
  check(fn, "stride", self.stride, 1)
  check(fn, "padding", self.padding, 0)
  check(fn, "dilation", self.dilation, 1)
end
local function avg_pool_init(self, fn, kernel_size, opts, check)
  opts = check_opts(fn, opts, {"stride", "padding", "ceil_mode", "count_include_pad"})
  check(fn, "kernel_size", kernel_size, 1)
  self.kernel_size, self.stride, self.padding = kernel_size, opts.stride or kernel_size, opts.padding or 0
  self.ceil_mode, self.count_include_pad = opts.ceil_mode == true, opts.count_include_pad ~= false
  check(fn, "stride", self.stride, 1)
  check(fn, "padding", self.padding, 0)
end

function nn.MaxPool2d:init(kernel_size, opts)
  return max_pool_init(self, "nn.MaxPool2d", kernel_size, opts, check_size)
end
function nn.MaxPool2d:forward(x)
  return zorch.max_pool2d(x, self.kernel_size, {stride = self.stride, padding = self.padding,
    dilation = self.dilation, ceil_mode = self.ceil_mode})
end
nn.MaxPool2d.__tostring = function(s)
  return ("nn.MaxPool2d(kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s)"):format(
    size_str(s.kernel_size), size_str(s.stride), size_str(s.padding), size_str(s.dilation), py_bool(s.ceil_mode))
end

nn.AvgPool2d = Module:extend "nn.AvgPool2d"
-- opts: stride (default: the kernel), padding, ceil_mode, count_include_pad (default true).
function nn.AvgPool2d:init(kernel_size, opts)
  return avg_pool_init(self, "nn.AvgPool2d", kernel_size, opts, check_size)
end
function nn.AvgPool2d:forward(x)
  return zorch.avg_pool2d(x, self.kernel_size, {stride = self.stride, padding = self.padding,
    ceil_mode = self.ceil_mode, count_include_pad = self.count_include_pad})
end
nn.AvgPool2d.__tostring = function(s)
  return ("nn.AvgPool2d(kernel_size=%s, stride=%s, padding=%s)"):format(size_str(s.kernel_size),
    size_str(s.stride), size_str(s.padding))
end

nn.AdaptiveAvgPool2d = Module:extend "nn.AdaptiveAvgPool2d"
function nn.AdaptiveAvgPool2d:init(output_size)
  check_size("nn.AdaptiveAvgPool2d", "output_size", output_size, 1)
  self.output_size = output_size
end
function nn.AdaptiveAvgPool2d:forward(x) return zorch.adaptive_avg_pool2d(x, self.output_size) end
nn.AdaptiveAvgPool2d.__tostring = function(s)
  return ("nn.AdaptiveAvgPool2d(output_size=%s)"):format(size_str(s.output_size))
end

-- MaxPool1d(k, {stride = k, padding = 0, dilation = 1, ceil_mode = false})
nn.MaxPool1d = Module:extend "nn.MaxPool1d"
function nn.MaxPool1d:init(kernel_size, opts)
  return max_pool_init(self, "nn.MaxPool1d", kernel_size, opts, check_int1)
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
  return avg_pool_init(self, "nn.AvgPool1d", kernel_size, opts, check_int1)
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
  local y = via_2d("max_pool1d", x, function(x2)
    return zorch.max_pool2d(x2, {1, k}, {stride = {1, o.stride or k}, padding = {0, o.padding},
      dilation = {1, o.dilation}, ceil_mode = o.ceil_mode})
  end)
  return y
end
-- avg_pool1d(x, k, {stride = k, padding = 0, ceil_mode = false, count_include_pad = true})
function zorch.avg_pool1d(x, k, opts)
  pos_int("avg_pool1d", "kernel_size", k, 2)
  local o = read_opts("avg_pool1d", opts, AVG1D, 3)
  local y = via_2d("avg_pool1d", x, function(x2)
    return zorch.avg_pool2d(x2, {1, k}, {stride = {1, o.stride or k}, padding = {0, o.padding},
      ceil_mode = o.ceil_mode, count_include_pad = o.count_include_pad})
  end)
  return y
end
-- adaptive_avg_pool1d(x, n)
function zorch.adaptive_avg_pool1d(x, n)
  pos_int("adaptive_avg_pool1d", "output_size", n, 2)
  local y = via_2d("adaptive_avg_pool1d", x, function(x2) return zorch.adaptive_avg_pool2d(x2, {1, n}) end)
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
