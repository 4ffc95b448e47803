-- zorch.nn.fold: zorch.unfold and zorch.fold (im2col and back) and their modules.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, as_fn, need_tensor, read_opts = M.Module, M.as_fn, M.need_tensor, M.read_opts
local shape_str, tuple_str = M.shape_str, M.tuple_str

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
