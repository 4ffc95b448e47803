-- zorch.nn.resample: zorch.interpolate and the Upsample modules.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local FLOAT_DTYPES, Module, as_fn, is_bool = M.FLOAT_DTYPES, M.Module, M.as_fn, M.is_bool
local lead_shape, need_room, need_tensor, py_num = M.lead_shape, M.need_room, M.need_tensor, M.py_num
local read_opts, shape_str, tuple_str = M.read_opts, M.shape_str, M.tuple_str

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
