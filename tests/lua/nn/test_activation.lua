-- The activations, shape layers, interpolation, pooling, losses and other
-- layers of lua/zorch/nn/activation.lua: outputs and the gradients of their inputs and
-- parameters against PyTorch's (lua/nn/activation.safetensors, from
-- lua/nn/gen_activation.py), state dicts, printout, random modes by their
-- statistics, and the errors for bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises, close = tap.ok, tap.raises, tap.close
local nn, F = zorch.nn, zorch.nn.functional

local G = zorch.load("lua/nn/activation.safetensors")
local TOL = 1e-10 -- float64 throughout

-- Runs fn on the inputs of golden case `name` (those with a gradient in the
-- file require grad) and checks the output and the gradients of sum(out * c);
-- returns fn's results.
local function golden(name, fn)
  if not G[name .. ".out"] then return ok(false, name .. ": golden case missing") end
  local ins, i = {}, 1
  while G[name .. ".in" .. i] do
    local t = G[name .. ".in" .. i]:clone()
    if G[name .. ".g" .. i] then t:requires_grad_() end
    ins[i], i = t, i + 1
  end
  local r = table.pack(fn(table.unpack(ins)))
  local y = r[1]
  close(y, G[name .. ".out"], TOL, name .. ": the output is PyTorch's")
  if y.requires_grad then
    ;(y * G[name .. ".c"]):sum():backward()
    for j = 1, #ins do
      local g = G[name .. ".g" .. j]
      if g then
        if ins[j].grad then close(ins[j].grad, g, TOL, ("%s: the gradient of input %d is PyTorch's"):format(name, j))
        else ok(false, ("%s: input %d got no gradient"):format(name, j)) end
      end
    end
  end
  return table.unpack(r, 1, r.n)
end
-- A module whose parameter `field` is the golden input t (so t gets its gradient).
local function with_param(m, field, t)
  m[field] = nn.Parameter(t)
  return m
end

-- ---- activations ----------------------------------------------------------------------------
golden("glu", function(x) return nn.GLU()(x) end)
golden("glu_dim1", function(x) return F.glu(x, 2) end)
golden("softmin", function(x) return nn.Softmin(2)(x) end)
golden("threshold", function(x) return nn.Threshold(0.1, 20.0)(x) end)
golden("hardshrink", function(x) return nn.Hardshrink()(x) end)
golden("hardshrink_l", function(x) return zorch.hardshrink(x, 1.1) end)
golden("softshrink", function(x) return nn.Softshrink()(x) end)
golden("softshrink_l", function(x) return zorch.softshrink(x, 0.8) end)
golden("prelu", function(x, w) return with_param(nn.PReLU(3), "weight", w)(x) end)
golden("prelu_one", function(x, w) return zorch.prelu(x, w) end)
golden("prelu_1d", function(x, w) return with_param(nn.PReLU(), "weight", w)(x) end)
golden("rrelu_eval", function(x) return nn.RReLU(0.1, 0.3):eval()(x) end)
golden("softmax2d", function(x) return nn.Softmax2d()(x) end)
golden("softmax2d_3d", function(x) return nn.Softmax2d()(x) end)
do
  local m = nn.PReLU(4, 0.1)
  local names = {}
  for k, t in pairs(m:state_dict()) do names[#names + 1] = k .. tostring(t.shape[1]) end
  ok(#names == 1 and names[1] == "weight4" and m.weight:sum():item() - 0.4 < 1e-6,
     "nn.PReLU(4, 0.1): one parameter `weight` (4,) filled with init")
  ok(tostring(nn.PReLU(3)) == "nn.PReLU(num_parameters=3)" and tostring(nn.GLU()) == "nn.GLU(dim=-1)"
     and tostring(nn.Softmin(2)) == "nn.Softmin(dim=2)"
     and tostring(nn.Threshold(0.1, 20.0)) == "nn.Threshold(threshold=0.1, value=20.0)"
     and tostring(nn.Hardshrink()) == "nn.Hardshrink(0.5)" and tostring(nn.Softshrink(0.3)) == "nn.Softshrink(0.3)"
     and tostring(nn.RReLU()) == "nn.RReLU(lower=0.125, upper=0.3333333333333333)"
     and tostring(nn.Softmax2d()) == "nn.Softmax2d()", "the activations print as PyTorch's")
end
-- rrelu in training: negatives scaled by slopes in [lower, upper], uniform (mean near the middle)
do
  zorch.manual_seed(3)
  local x = zorch.full({20000}, -1.0, {dtype = "float64"}):requires_grad_()
  local m = nn.RReLU(0.1, 0.3)
  local y = m(x)
  local s = -y
  ok(s:min():item() >= 0.1 and s:max():item() <= 0.3, "rrelu in training: each slope within [lower, upper]")
  ok(math.abs(s:mean():item() - 0.2) < 0.003 and math.abs(s:var():item() - 0.04 / 12) < 3e-4,
     ("rrelu in training: slopes uniform (mean %.4f, var %.5f)"):format(s:mean():item(), s:var():item()))
  y:sum():backward()
  close(x.grad, s:detach(), 0, "rrelu in training: the gradient of a negative is its slope")
  local p = zorch.tensor({0.5, 2.0}, {dtype = "float64"})
  close(m(p), p, 0, "rrelu in training: positives pass unchanged")
end
raises("glu: an odd dim is an error", function() zorch.glu(zorch.ones(2, 3)) end,
  "glu: dim 2 of input (2, 3) must have an even size, got 3")
raises("glu: a dim out of range", function() zorch.glu(zorch.ones(2, 4), 3) end, "glu: dim", "(2, 4)")
raises("softmin: dim is needed", function() zorch.softmin(zorch.ones(2, 4)) end, "softmin: dim")
raises("softshrink: a negative lambd", function() nn.Softshrink(-1) end, "nn.Softshrink: lambd must be a number >= 0")
raises("prelu: a weight per channel must fit", function() zorch.prelu(zorch.ones(2, 3), zorch.ones(4)) end,
  "prelu: weight (4) must hold 1 slope or one per channel (3) of input (2, 3)")
raises("nn.PReLU: num_parameters must be positive", function() nn.PReLU(0) end, "nn.PReLU: num_parameters")
raises("nn.RReLU: lower above upper", function() nn.RReLU(0.5, 0.1) end, "nn.RReLU: lower 0.5 must not exceed upper 0.1")
raises("nn.Softmax2d: a 2-D input", function() nn.Softmax2d()(zorch.ones(2, 3)) end,
  "nn.Softmax2d: expected input (N, C, H, W) or (C, H, W), got (2, 3)")
raises("threshold: value must be a number", function() zorch.threshold(zorch.ones(2), 0.1) end,
  "threshold: value must be a number")

-- ---- shape layers ---------------------------------------------------------------------------
golden("pixel_shuffle", function(x) return nn.PixelShuffle(2)(x) end)
golden("pixel_shuffle_3d", function(x) return zorch.pixel_shuffle(x, 3) end)
golden("pixel_unshuffle", function(x) return nn.PixelUnshuffle(2)(x) end)
golden("channel_shuffle", function(x) return nn.ChannelShuffle(3)(x) end)
golden("zero_pad1d", function(x) return nn.ZeroPad1d({1, 2})(x) end)
golden("zero_pad2d", function(x) return nn.ZeroPad2d({1, 0, 2, 1})(x) end)
golden("zero_pad3d", function(x) return nn.ZeroPad3d(1)(x) end)
golden("constant_pad1d", function(x) return nn.ConstantPad1d(2, 3.5)(x) end)
golden("constant_pad2d", function(x) return nn.ConstantPad2d({1, 1, 0, 2}, -1.0)(x) end)
golden("constant_pad3d", function(x) return nn.ConstantPad3d({0, 1, 1, 0, 1, 1}, 2.0)(x) end)
golden("reflection_pad1d", function(x) return nn.ReflectionPad1d({2, 1})(x) end)
golden("reflection_pad2d", function(x) return nn.ReflectionPad2d(2)(x) end)
golden("replication_pad1d", function(x) return nn.ReplicationPad1d({3, 1})(x) end)
golden("replication_pad2d", function(x) return nn.ReplicationPad2d({1, 2, 2, 0})(x) end)
golden("replication_pad3d", function(x) return nn.ReplicationPad3d(1)(x) end)
golden("circular_pad1d", function(x) return nn.CircularPad1d({1, 2})(x) end)
golden("circular_pad2d", function(x) return nn.CircularPad2d(1)(x) end)
golden("reflection_pad3d", function(x) return nn.ReflectionPad3d({1, 0, 2, 1, 1, 1})(x) end)
golden("circular_pad3d", function(x) return nn.CircularPad3d(1)(x) end)
ok(tostring(nn.PixelShuffle(2)) == "nn.PixelShuffle(upscale_factor=2)"
   and tostring(nn.PixelUnshuffle(2)) == "nn.PixelUnshuffle(downscale_factor=2)"
   and tostring(nn.ChannelShuffle(3)) == "nn.ChannelShuffle(groups=3)"
   and tostring(nn.ZeroPad2d({1, 2, 3, 4})) == "nn.ZeroPad2d((1, 2, 3, 4))"
   and tostring(nn.ReflectionPad1d(2)) == "nn.ReflectionPad1d((2, 2))"
   and tostring(nn.ConstantPad1d(2, 3.5)) == "nn.ConstantPad1d(padding=(2, 2), value=3.5)"
   and tostring(nn.ConstantPad3d(1, 2.0)) == "nn.ConstantPad3d(padding=(1, 1, 1, 1, 1, 1), value=2.0)",
   "the shape layers print as PyTorch's")
raises("pixel_shuffle: channels not divisible", function() zorch.pixel_shuffle(zorch.ones(1, 6, 2, 2), 2) end,
  "pixel_shuffle: expected input (*, C * 4, H, W)", "got (1, 6, 2, 2)")
raises("pixel_unshuffle: sizes not divisible", function() nn.PixelUnshuffle(2)(zorch.ones(1, 1, 3, 4)) end,
  "pixel_unshuffle: expected input (*, C, H * 2, W * 2), got (1, 1, 3, 4)")
raises("channel_shuffle: groups not dividing", function() zorch.channel_shuffle(zorch.ones(1, 5, 2), 2) end,
  "channel_shuffle: expected input (N, C, *) with 2 groups dividing C, got (1, 5, 2)")
raises("nn.PixelShuffle: a bad factor", function() nn.PixelShuffle(0) end, "nn.PixelShuffle: upscale_factor")
raises("nn.ReflectionPad2d: a padding list of the wrong length", function() nn.ReflectionPad2d({1, 2}) end,
  "nn.ReflectionPad2d: padding must be an integer or a list of 4 integers, got (1, 2)")
raises("nn.ReflectionPad1d: padding as large as the dim", function() nn.ReflectionPad1d(4)(zorch.ones(1, 2, 4)) end,
  "nn.ReflectionPad1d:", "(1, 2, 4)")
raises("nn.ReplicationPad2d: a 2-D input", function() nn.ReplicationPad2d(1)(zorch.ones(3, 3)) end,
  "nn.ReplicationPad2d: expected a 3D or 4D input, got (3, 3)")
raises("nn.ConstantPad1d: value is needed", function() nn.ConstantPad1d(1) end, "nn.ConstantPad1d: value must be a number")

-- ---- interpolation --------------------------------------------------------------------------
local interp = {
  nearest_1d_size = {size = 8}, nearest_1d_scale = {scale_factor = 1.7}, nearest_1d_down = {size = 3},
  nearest_2d_scale = {scale_factor = 2}, nearest_2d_size = {size = {3, 7}},
  nearest_exact_1d = {size = 8, mode = "nearest-exact"},
  nearest_exact_2d = {scale_factor = {1.5, 0.6}, mode = "nearest-exact"},
  linear_size = {size = 8, mode = "linear"}, linear_size_ac = {size = 8, mode = "linear", align_corners = true},
  linear_scale = {scale_factor = 1.7, mode = "linear"}, linear_down = {size = 3, mode = "linear"},
  bilinear_size = {size = {6, 7}, mode = "bilinear"},
  bilinear_size_ac = {size = {6, 7}, mode = "bilinear", align_corners = true},
  bilinear_scale = {scale_factor = {1.5, 2.3}, mode = "bilinear"},
  bilinear_scale_recompute = {scale_factor = 1.7, mode = "bilinear", recompute_scale_factor = true},
  bicubic_size = {size = {7, 6}, mode = "bicubic"},
  bicubic_size_ac = {size = {7, 6}, mode = "bicubic", align_corners = true},
  bicubic_down = {size = {3, 2}, mode = "bicubic"},
}
local interp_names = {}
for name in pairs(interp) do interp_names[#interp_names + 1] = name end
table.sort(interp_names)
for _, name in ipairs(interp_names) do golden(name, function(x) return F.interpolate(x, interp[name]) end) end
golden("trilinear_size", function(x) return F.interpolate(x, {size = {4, 3, 5}, mode = "trilinear"}) end)
golden("trilinear_scale_ac", function(x)
  return nn.Upsample{scale_factor = 1.5, mode = "trilinear", align_corners = true}(x) end)
golden("nearest_3d_scale", function(x) return F.interpolate(x, {scale_factor = {2, 0.5, 1.5}}) end)
golden("area_1d", function(x) return F.interpolate(x, {size = 3, mode = "area"}) end)
golden("area_2d", function(x) return F.interpolate(x, {size = {2, 3}, mode = "area"}) end)
golden("upsample_nearest2d", function(x) return nn.UpsamplingNearest2d{scale_factor = 2}(x) end)
golden("upsample_bilinear2d", function(x) return nn.UpsamplingBilinear2d{size = {5, 8}}(x) end)
golden("upsample_module", function(x) return nn.Upsample{scale_factor = 1.5, mode = "bilinear"}(x) end)
ok(tostring(nn.Upsample{scale_factor = 2}) == "nn.Upsample(scale_factor=2.0, mode='nearest')"
   and tostring(nn.Upsample{size = {3, 4}, mode = "bilinear"}) == "nn.Upsample(size=(3, 4), mode='bilinear')"
   and tostring(nn.UpsamplingBilinear2d{size = {5, 8}}) == "nn.UpsamplingBilinear2d(size=(5, 8), mode='bilinear')",
   "the upsampling modules print as PyTorch's")
do
  local x = zorch.randn(1, 2, 3, 4)
  local same = zorch.interpolate(x, {size = {3, 4}, mode = "bilinear"})
  close(same, x, 0, "interpolate to the same size gives the input's values")
  ok(not rawequal(same, x), "interpolate to the same size gives a new tensor")
  close(zorch.interpolate(x, {size = {1, 2}, mode = "area"}), zorch.adaptive_avg_pool2d(x, {1, 2}), 0,
        "mode 'area' is adaptive_avg_pool2d")
end
raises("interpolate: both size and scale_factor", function()
  zorch.interpolate(zorch.ones(1, 1, 4), {size = 2, scale_factor = 2}) end,
  "interpolate: give either size or scale_factor (one of them), for input (1, 1, 4)")
raises("interpolate: bilinear on a 3-D input", function()
  zorch.interpolate(zorch.ones(1, 1, 4), {size = 2, mode = "bilinear"}) end,
  "interpolate: mode 'bilinear' takes an input with 2 spatial dims (4D), got (1, 1, 4)")
raises("interpolate: align_corners with nearest", function()
  zorch.interpolate(zorch.ones(1, 1, 4), {size = 2, align_corners = true}) end,
  "interpolate: align_corners can only be set")
raises("interpolate: a size list of the wrong length", function()
  zorch.interpolate(zorch.ones(1, 1, 4, 4), {size = {2, 2, 2}}) end,
  "interpolate: size must be a positive integer or a list of 2", "got (2, 2, 2)")
raises("interpolate: an unknown mode", function() zorch.interpolate(zorch.ones(1, 1, 4), {size = 2, mode = "cubic"}) end,
  "interpolate: mode must be")
raises("interpolate: an unknown option", function() zorch.interpolate(zorch.ones(1, 1, 4), {sizes = 2}) end,
  "interpolate: unknown option 'sizes'")
raises("interpolate: a 2-D input", function() zorch.interpolate(zorch.ones(4, 4), {size = 2}) end,
  "interpolate: expected input (N, C, d1, ...) with 1 to 3 spatial dims, got (4, 4)")
raises("nn.Upsample: errors name the module", function() nn.Upsample{size = 2, mode = "bilinear"}(zorch.ones(1, 1, 4)) end,
  "nn.Upsample: mode 'bilinear' takes an input with 2 spatial dims")
raises("nn.UpsamplingNearest2d: no mode option", function() nn.UpsamplingNearest2d{size = 2, mode = "linear"} end,
  "nn.UpsamplingNearest2d: unknown option 'mode'")

-- ---- pooling, the 1-d functions, instance norm, channel dropout -----------------------------
do
  local function idx_of(name) return G[name .. ".idx"] + 1 end -- PyTorch's 0-based positions
  local _, i1 = golden("adaptive_max_pool1d", function(x) return nn.AdaptiveMaxPool1d(3, true)(x) end)
  close(i1, idx_of("adaptive_max_pool1d"), 0, "adaptive_max_pool1d: PyTorch's indices, 1-based")
  golden("adaptive_max_pool1d_up", function(x) return zorch.adaptive_max_pool1d(x, 6) end)
  local _, i2 = golden("adaptive_max_pool2d", function(x) return zorch.adaptive_max_pool2d(x, {2, 3}, true) end)
  close(i2, idx_of("adaptive_max_pool2d"), 0, "adaptive_max_pool2d: PyTorch's indices, 1-based")
  local _, i3 = golden("adaptive_max_pool2d_3d", function(x) return nn.AdaptiveMaxPool2d(3, true)(x) end)
  close(i3, idx_of("adaptive_max_pool2d_3d"), 0, "adaptive_max_pool2d on (C, H, W): PyTorch's indices")
  ok(i3:dtype() == "int64", "adaptive_max_pool2d: the indices are int64")
end
golden("lp_pool1d", function(x) return nn.LPPool1d(2.0, 3, {stride = 2})(x) end)
golden("lp_pool1d_p3", function(x) return zorch.lp_pool1d(x, 3.0, 2, {ceil_mode = true}) end)
golden("lp_pool2d", function(x) return nn.LPPool2d(2.0, {2, 3}, {stride = {1, 2}})(x) end)
golden("lp_pool2d_p1", function(x) return zorch.lp_pool2d(x, 1.0, 2) end)
golden("max_pool1d", function(x) return F.max_pool1d(x, 3, {stride = 2, padding = 1}) end)
golden("avg_pool1d", function(x) return F.avg_pool1d(x, 3, {stride = 2, padding = 1, count_include_pad = false}) end)
golden("instance_norm", function(x, w, b) return F.instance_norm(x, nil, nil, w, b) end)
golden("instance_norm_2d", function(x) return zorch.instance_norm(x, nil, nil, nil, nil, true, 0.1, 1e-3) end)
do
  local x = zorch.randn(3, 4, 6, {dtype = "float64"})
  close(zorch.adaptive_avg_pool1d(x, 2), nn.AdaptiveAvgPool1d(2)(x), 0, "adaptive_avg_pool1d is nn.AdaptiveAvgPool1d's")
  local m = nn.InstanceNorm1d(4, {track_running_stats = true, momentum = 0.3}):to("float64")
  local rm, rv = zorch.zeros(4, {dtype = "float64"}), zorch.ones(4, {dtype = "float64"})
  local y = zorch.instance_norm(x, rm, rv, nil, nil, true, 0.3)
  close(y, m(x), 1e-12, "instance_norm in training is nn.InstanceNorm1d's")
  close(rm, m.running_mean, 1e-12, "instance_norm: running_mean moves as nn.InstanceNorm1d's")
  close(rv, m.running_var, 1e-12, "instance_norm: running_var moves as nn.InstanceNorm1d's")
  m:eval()
  close(zorch.instance_norm(x, rm, rv, nil, nil, false), m(x), 1e-12,
        "instance_norm with use_input_stats = false normalises with the running stats")
end
ok(tostring(nn.AdaptiveMaxPool2d({2, 3})) == "nn.AdaptiveMaxPool2d(output_size=(2, 3))"
   and tostring(nn.AdaptiveMaxPool1d(3)) == "nn.AdaptiveMaxPool1d(output_size=3)"
   and tostring(nn.LPPool1d(2, 3)) == "nn.LPPool1d(norm_type=2, kernel_size=3, stride=None, ceil_mode=False)"
   and tostring(nn.LPPool2d(2, {2, 3}, {stride = {1, 2}}))
       == "nn.LPPool2d(norm_type=2, kernel_size=(2, 3), stride=(1, 2), ceil_mode=False)"
   and tostring(nn.Dropout3d()) == "nn.Dropout3d(p=0.5)", "the pooling modules print as PyTorch's")
-- channel dropout: whole channels zeroed, the rest scaled, identity in eval
do
  zorch.manual_seed(5)
  for k, f in ipairs({zorch.dropout1d, zorch.dropout2d, zorch.dropout3d}) do
    local shape = {8, 64}
    for _ = 1, k do shape[#shape + 1] = 3 end
    local x = zorch.ones(shape, {dtype = "float64"})
    local y = f(x, 0.25)
    local per = y:reshape({8, 64, -1})
    local whole = (per:amax(3) - per:amin(3)):abs():max():item() == 0
    local kept = per:select(3, 1):gt(0):to("float64"):mean():item()
    ok(whole and math.abs(kept - 0.75) < 0.08 and math.abs(per:max():item() - 1 / 0.75) < 1e-12,
       ("dropout%dd: whole channels dropped (%.3f kept), the rest scaled by 1 / (1 - p)"):format(k, kept))
    close(f(x, 0.25, false), x, 0, ("dropout%dd: identity when not training"):format(k))
  end
  local m = nn.Dropout3d(0.5)
  local x = zorch.ones(2, 8, 2, 2, 2)
  ok(m(x):eq(0):any():item() and m:eval()(x):eq(1):all():item(), "nn.Dropout3d drops in training, not in eval")
end
raises("adaptive_max_pool2d: a bad output_size", function() zorch.adaptive_max_pool2d(zorch.ones(1, 4, 4), {2}) end,
  "adaptive_max_pool2d: output_size must be a positive integer or a pair {oh, ow} of them, got (2,)")
raises("adaptive_max_pool1d: a 4-D input", function() zorch.adaptive_max_pool1d(zorch.ones(1, 1, 4, 4), 2) end,
  "adaptive_max_pool1d: expected input (N, C, L) or (C, L), got (1, 1, 4, 4)")
raises("nn.AdaptiveMaxPool2d: errors name the module", function() nn.AdaptiveMaxPool2d(2)(zorch.ones(4, 4)) end,
  "nn.AdaptiveMaxPool2d: expected input (N, C, H, W) or (C, H, W), got (4, 4)")
raises("lp_pool2d: a window larger than the input", function() zorch.lp_pool2d(zorch.ones(1, 1, 2, 2), 2, 3) end,
  "lp_pool2d:")
raises("nn.LPPool1d: an unknown option", function() nn.LPPool1d(2, 3, {padding = 1}) end,
  "nn.LPPool1d: unknown option 'padding'")
raises("max_pool1d: a bad kernel_size", function() zorch.max_pool1d(zorch.ones(1, 1, 4), 0) end,
  "max_pool1d: kernel_size must be a positive integer, got 0")
raises("avg_pool1d: a 4-D input", function() zorch.avg_pool1d(zorch.ones(1, 1, 1, 4), 2) end,
  "avg_pool1d: expected input (N, C, L) or (C, L), got (1, 1, 1, 4)")
raises("instance_norm: one spatial element", function() zorch.instance_norm(zorch.ones(2, 3, 1)) end,
  "instance_norm: expected more than 1 spatial element", "(2, 3, 1)")
raises("instance_norm: a weight of the wrong size", function()
  zorch.instance_norm(zorch.ones(2, 3, 4), nil, nil, zorch.ones(4)) end,
  "instance_norm: weight must be a tensor of shape (3) for input (2, 3, 4), got (4)")
raises("dropout2d: p out of range", function() zorch.dropout2d(zorch.ones(1, 2, 2, 2), 1.5) end,
  "dropout2d: p must be a number in [0, 1], got 1.5")
raises("dropout3d: a 3-D input", function() zorch.dropout3d(zorch.ones(2, 2, 2)) end,
  "dropout3d: expected a 4D or 5D input, got (2, 2, 2)")

-- ---- margin losses --------------------------------------------------------------------------
do
  local ys, y01, wc = G["target.soft_margin"], G["target.multilabel_soft_margin"], G["weight.classes"]
  local ym, yml = G["target.multi_margin"] + 1, G["target.multilabel_margin"] + 1 -- 1-based, -1 padding as 0
  for _, r in ipairs({"mean", "sum", "none"}) do
    golden("soft_margin_" .. r, function(x) return nn.SoftMarginLoss{reduction = r}(x, ys) end)
    golden("multilabel_soft_margin_" .. r, function(x)
      return zorch.multilabel_soft_margin_loss(x, y01, {reduction = r}) end)
    golden("multi_margin_" .. r, function(x) return nn.MultiMarginLoss{reduction = r}(x, ym) end)
    golden("multilabel_margin_" .. r, function(x) return nn.MultiLabelMarginLoss{reduction = r}(x, yml) end)
  end
  golden("multilabel_soft_margin_weight", function(x) return nn.MultiLabelSoftMarginLoss{weight = wc}(x, y01) end)
  golden("multi_margin_p2", function(x) return F.multi_margin_loss(x, ym, {p = 2, margin = 0.7, weight = wc}) end)
  golden("multi_margin_1d", function(x) return zorch.multi_margin_loss(x, zorch.tensor(4, {dtype = "int64"})) end)
  golden("multilabel_margin_1d", function(x)
    return zorch.multilabel_margin_loss(x, zorch.tensor({5, 2, 0, 1, 1}, {dtype = "int64"})) end)
  local x = G["multilabel_margin_1d.in1"]
  close(zorch.multilabel_margin_loss(x, zorch.tensor({5, 2, -3, 1, 1}, {dtype = "int64"})),
        zorch.multilabel_margin_loss(x, zorch.tensor({5, 2, 0, 0, 0}, {dtype = "int64"})), 0,
        "multilabel_margin_loss: any entry below 1 ends the list")
  ok(tostring(nn.MultiMarginLoss()) == "nn.MultiMarginLoss()" and tostring(nn.SoftMarginLoss()) == "nn.SoftMarginLoss()",
     "the losses print as PyTorch's")
  local x3 = zorch.randn(3, 5)
  raises("multi_margin_loss: a 0-based target", function()
    zorch.multi_margin_loss(x3, zorch.tensor({0, 1, 2}, {dtype = "int64"})) end,
    "multi_margin_loss: target 0 is out of range 1..5 (targets are 1-based")
  raises("multi_margin_loss: float targets", function() zorch.multi_margin_loss(x3, zorch.ones(3)) end,
    "multi_margin_loss: target must hold integer classes (1-based), got dtype float32")
  raises("multi_margin_loss: p must be 1 or 2", function()
    zorch.multi_margin_loss(x3, zorch.tensor({1, 1, 1}, {dtype = "int64"}), {p = 3}) end,
    "multi_margin_loss: p must be 1 or 2, got 3")
  raises("multi_margin_loss: targets for another batch", function()
    zorch.multi_margin_loss(x3, zorch.tensor({1, 1}, {dtype = "int64"})) end,
    "multi_margin_loss: expected input (N, C) with target (N)", "input (3, 5) and target (2)")
  raises("nn.MultiMarginLoss: a weight of the wrong size", function()
    nn.MultiMarginLoss{weight = zorch.ones(4)}(x3, zorch.tensor({1, 2, 3}, {dtype = "int64"})) end,
    "multi_margin_loss: weight must be a tensor of shape (5) for input (3, 5), got (4)")
  raises("multilabel_margin_loss: a class above C", function()
    zorch.multilabel_margin_loss(x3, zorch.tensor({{6, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {1, 0, 0, 0, 0}}, {dtype = "int64"})) end,
    "multilabel_margin_loss: target 6 is out of range 1..5")
  raises("multilabel_margin_loss: shapes differ", function()
    zorch.multilabel_margin_loss(x3, zorch.ones({3, 4}, {dtype = "int64"})) end,
    "multilabel_margin_loss: input (3, 5) and target (3, 4) must have the same shape")
  raises("soft_margin_loss: shapes differ", function() zorch.soft_margin_loss(x3, zorch.ones(5)) end,
    "soft_margin_loss: input (3, 5) and target (5) must have the same shape")
  raises("nn.SoftMarginLoss: an unknown option", function() nn.SoftMarginLoss{margin = 1} end,
    "nn.SoftMarginLoss: unknown option 'margin'")
end

-- ---- Bilinear, LocalResponseNorm, AlphaDropout, Unfold, Fold ----------------------------------
golden("bilinear", function(a, b, w, bias)
  local m = nn.Bilinear(3, 5, 4)
  m.weight, m.bias = nn.Parameter(w), nn.Parameter(bias)
  return m(a, b)
end)
golden("bilinear_nobias_3d", function(a, b, w) return F.bilinear(a, b, w) end)
do
  zorch.manual_seed(7)
  local sd = nn.Bilinear(3, 5, 4):state_dict()
  local names = {}
  for k, t in pairs(sd) do names[#names + 1] = k .. "(" .. table.concat(t.shape, ", ") .. ")" end
  table.sort(names)
  local w = sd.weight
  local bound = 1 / math.sqrt(3)
  ok(table.concat(names, " ") == "bias(4) weight(4, 3, 5)" and w:abs():max():item() <= bound
     and w:abs():max():item() > 0.8 * bound, "nn.Bilinear: weight (out, in1, in2) and bias (out), U(-1/sqrt(in1), 1/sqrt(in1))")
  ok(nn.Bilinear(3, 5, 4, {bias = false}).bias == nil, "nn.Bilinear{bias = false} has no bias")
  ok(tostring(nn.Bilinear(3, 5, 4)) == "nn.Bilinear(in1_features=3, in2_features=5, out_features=4, bias=True)"
     and tostring(nn.Bilinear(3, 5, 4, {bias = false}))
         == "nn.Bilinear(in1_features=3, in2_features=5, out_features=4, bias=False)", "nn.Bilinear prints as PyTorch's")
  local y = nn.Bilinear(3, 5, 4)(zorch.randn(3), zorch.randn(5))
  ok(table.concat(y.shape, ",") == "4", "nn.Bilinear on unbatched inputs gives (out)")
end
raises("bilinear: inputs that do not fit the weight", function()
  zorch.bilinear(zorch.ones(2, 3), zorch.ones(2, 4), zorch.ones(4, 3, 5)) end,
  "bilinear: expected input1 (*, 3) and input2 (*, 5) with the same leading dims for weight (4, 3, 5), got (2, 3) and (2, 4)")
raises("nn.Bilinear: errors name the module", function() nn.Bilinear(3, 5, 4)(zorch.ones(2, 3), zorch.ones(3, 5)) end,
  "nn.Bilinear: expected input1 (*, 3)")
raises("nn.Bilinear: a bad size", function() nn.Bilinear(3, 0, 4) end, "nn.Bilinear: in2_features must be a positive integer")

golden("local_response_norm", function(x) return nn.LocalResponseNorm(3)(x) end)
golden("local_response_norm_4d", function(x) return zorch.local_response_norm(x, 2, 0.1, 0.6, 2.0) end)
golden("local_response_norm_5d", function(x) return nn.LocalResponseNorm(4, 0.05)(x) end)
golden("local_response_norm_wide", function(x) return zorch.local_response_norm(x, 9, nil, nil, 0.5) end)
ok(tostring(nn.LocalResponseNorm(3)) == "nn.LocalResponseNorm(3, alpha=0.0001, beta=0.75, k=1.0)",
   "nn.LocalResponseNorm prints as PyTorch's")
raises("local_response_norm: a 2-D input", function() zorch.local_response_norm(zorch.ones(2, 3), 2) end,
  "local_response_norm: expected input (N, C, ...) with 3 or more dims, got (2, 3)")

-- alpha dropout: kept elements a x + b, dropped ones SELU's saturation scaled;
-- a standard normal input keeps mean 0 and variance 1
do
  zorch.manual_seed(11)
  local p = 0.2
  local x = zorch.randn(200000, {dtype = "float64"}):requires_grad_()
  local y = zorch.alpha_dropout(x, p, true)
  local a = 1 / math.sqrt((1.7580993408473766 ^ 2 * p + 1) * (1 - p))
  local b = 1.7580993408473766 * a * p
  local dropped_v = -1.7580993408473766 * a + b
  local dropped = (y - dropped_v):abs():lt(1e-12)
  local frac = dropped:to("float64"):mean():item()
  local kept_err = zorch.where(dropped, 0, (y - (x * a + b)):abs()):max():item()
  ok(math.abs(frac - p) < 0.005 and kept_err < 1e-12,
     ("alpha_dropout: %.4f dropped to SELU's saturation, the rest a x + b"):format(frac))
  ok(math.abs(y:mean():item()) < 0.01 and math.abs(y:var():item() - 1) < 0.01,
     ("alpha_dropout keeps mean 0 and variance 1 (%.4f, %.4f)"):format(y:mean():item(), y:var():item()))
  y:sum():backward()
  close(x.grad, zorch.where(dropped, 0, zorch.full({200000}, a, {dtype = "float64"})), 1e-12, "alpha_dropout: gradient a where kept, 0 where dropped")
  local m = nn.AlphaDropout(0.2)
  local z = zorch.randn(10)
  close(m:eval()(z), z, 0, "nn.AlphaDropout: identity in eval")
  close(zorch.alpha_dropout(z, 0.5), z, 0, "alpha_dropout: identity unless training")
  close(zorch.alpha_dropout(z, 1, true), zorch.zeros(10), 0, "alpha_dropout: p = 1 gives zeros")
  ok(tostring(m) == "nn.AlphaDropout(p=0.2)", "nn.AlphaDropout prints its p")
  raises("nn.AlphaDropout: p out of range", function() nn.AlphaDropout(2) end,
    "nn.AlphaDropout: p must be a number in [0, 1], got 2")
end

golden("unfold", function(x) return nn.Unfold({2, 3}, {dilation = {1, 2}, padding = 1, stride = {2, 1}})(x) end)
golden("unfold_3d", function(x) return zorch.unfold(x, 2) end)
golden("fold", function(x) return nn.Fold({4, 5}, {2, 2}, {stride = {2, 1}, padding = {1, 0}})(x) end)
golden("fold_dilation", function(x) return zorch.fold(x, {5, 5}, 2, {dilation = 2}) end)
do
  local x = zorch.randn(2, 3, 6, 6, {dtype = "float64"})
  local cols = zorch.unfold(x, 2, {stride = 2})
  close(zorch.fold(cols, 6, 2, {stride = 2}), x, 0, "fold undoes unfold where the blocks do not overlap")
end
ok(tostring(nn.Unfold({2, 3}, {dilation = {1, 2}, padding = 1, stride = {2, 1}}))
     == "nn.Unfold(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))"
   and tostring(nn.Fold({4, 5}, 2)) == "nn.Fold(output_size=(4, 5), kernel_size=2, dilation=1, padding=0, stride=1)",
   "nn.Unfold and nn.Fold print as PyTorch's")
raises("unfold: a kernel larger than the input", function() zorch.unfold(zorch.ones(1, 1, 2, 2), 3) end,
  "unfold: a spatial size (2, 2) with kernel (3, 3)", "gives (0, 0) sliding blocks")
raises("unfold: a 2-D input", function() zorch.unfold(zorch.ones(2, 2), 1) end,
  "unfold: expected input (N, C, H, W) or (C, H, W), got (2, 2)")
raises("fold: blocks that do not fit", function() zorch.fold(zorch.ones(1, 8, 5), {3, 3}, 2) end,
  "fold: input (1, 8, 5) must be (N, C * 4, 4) for kernel 2 and output (3, 3) (2 x 2 blocks)")
raises("nn.Fold: a bad stride", function() nn.Fold(4, 2, {stride = 0}) end, "nn.Fold: stride must be")

-- absurd sizes are errors, not hangs or crashes
raises("interpolate: a scale_factor too large", function() zorch.interpolate(zorch.ones(1, 1, 4), {scale_factor = 1e300}) end,
  "interpolate: scale_factor 1e+300 gives a dim too large for input (1, 1, 4)")
raises("interpolate: a size beyond memory", function() zorch.interpolate(zorch.ones(1, 1, 4), {size = 1 << 50}) end,
  "interpolate: out of memory")
raises("interpolate: linear modes take float inputs", function()
  zorch.interpolate(zorch.ones({1, 1, 4, 4}, {dtype = "int64"}), {size = 8, mode = "bilinear"}) end,
  "interpolate: mode 'bilinear' takes a float input, got dtype int64")
raises("adaptive_max_pool1d: an output beyond memory", function() zorch.adaptive_max_pool1d(zorch.ones(1, 1, 4), 1 << 40) end,
  "adaptive_max_pool1d: out of memory")
raises("unfold: a kernel of 2^63 - 1", function() zorch.unfold(zorch.ones(1, 1, 4, 4), {math.maxinteger, 1}) end,
  "unfold: kernel_size must be a positive integer below 2^31 or a pair {h, w} of them")
raises("pixel_shuffle: a factor of 2^63 - 1", function() zorch.pixel_shuffle(zorch.ones(1, 4, 2, 2), math.maxinteger) end,
  "pixel_shuffle: expected input (*, C * 9223372036854775807^2, H, W)")
raises("multi_margin_loss: an integer input", function()
  zorch.multi_margin_loss(zorch.ones({2, 3}, {dtype = "int64"}), zorch.tensor({1, 2}, {dtype = "int64"})) end,
  "multi_margin_loss: input must be a float tensor, got dtype int64")
do
  local x = zorch.randn(1, 3, 2)
  close(zorch.local_response_norm(x, math.maxinteger), x / 1, 1e-6,
        "local_response_norm: a window of 2^63 - 1 channels runs (and divides the squares by it)")
end

tap.done()
