-- ConvTranspose2d, Conv3d and the 3-d pools (lua/zorch/nn/conv_transpose.lua,
-- volume.lua): values and gradients against PyTorch's (lua/nn/volume.txt, from
-- lua/nn/gen_volume.py), the adjoint identity, state dicts, bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local nn = zorch.nn

local G = require("golden")("lua/nn/volume.txt")
local want, sd_order, fixed, leaf, worst, check = G.want, G.sd_order, G.fixed, G.leaf, G.worst, G.check

local xt = leaf(fixed({2, 4, 5, 6}, 40))
local wt, bt = leaf(fixed({4, 3, 3, 2}, 41) * 0.5), leaf(fixed({6}, 42))
check("conv_transpose2d", function(u, ww, bb)
  return zorch.conv_transpose2d(u, ww, bb, {stride = {2, 3}, padding = {1, 2}, output_padding = {1, 0},
    dilation = {2, 1}, groups = 2})
end, {xt, wt, bt})
check("conv_transpose2d_plain", function(u, ww) return zorch.conv_transpose2d(u, ww) end,
  {leaf(fixed({1, 2, 3, 4}, 43)), leaf(fixed({2, 3, 2, 2}, 44))})
check("conv_transpose2d_crop", function(u, ww) return zorch.conv_transpose2d(u, ww, nil, {stride = 2, padding = 3}) end,
  {leaf(fixed({1, 2, 4, 4}, 45)), leaf(fixed({2, 1, 3, 3}, 46))})

local xv = leaf(fixed({2, 4, 5, 6, 7}, 47))
check("conv3d", function(u, ww, bb)
  return zorch.conv3d(u, ww, bb, {stride = {2, 1, 2}, padding = {1, 1, 0}, dilation = {2, 1, 1}, groups = 2})
end, {xv, leaf(fixed({6, 2, 2, 3, 2}, 48) * 0.5), leaf(fixed({6}, 49))})
check("conv3d_plain", function(u, ww) return zorch.conv3d(u, ww) end, {leaf(fixed({1, 2, 3, 4, 4}, 50)), leaf(fixed({3, 2, 2, 2, 3}, 51))})
check("max_pool3d", function(u) return nn.MaxPool3d(2)(u) end, {xv})
check("max_pool3d_pad", function(u)
  return nn.MaxPool3d({3, 2, 3}, {stride = 2, padding = 1, dilation = {1, 2, 1}, ceil_mode = true})(u)
end, {xv})
check("avg_pool3d", function(u) return nn.AvgPool3d(3, {stride = 2, padding = 1})(u) end, {xv})
check("avg_pool3d_excl_ceil", function(u)
  return zorch.avg_pool3d(u, {2, 3, 2}, {stride = {2, 2, 1}, padding = {1, 1, 0}, ceil_mode = true, count_include_pad = false})
end, {xv})

-- conv_transpose2d is conv2d's adjoint: <conv2d(z, w), x> = <z, conv_transpose2d(x, w)>
do
  local o = {stride = {2, 1}, padding = {1, 0}, dilation = {1, 2}, groups = 2}
  local w = fixed({6, 2, 3, 2}, 52)
  local z = fixed({2, 4, 7, 6}, 53)
  local y = zorch.conv2d(z, w, nil, o)
  local x = fixed(y.shape, 54)
  local op = {stride = o.stride, padding = o.padding, dilation = o.dilation, groups = 2, output_padding = {0, 0}}
  local back = zorch.conv_transpose2d(x, w, nil, op)
  local lhs, rhs = (y * x):sum():item(), (z * back):sum():item()
  ok(table.concat(back.shape, ",") == "2,4,7,6" and math.abs(lhs - rhs) < 1e-9 * math.abs(lhs),
    ("conv_transpose2d: the adjoint of conv2d (%.12g vs %.12g)"):format(lhs, rhs))
end

-- modules: PyTorch's state-dict names and shapes, repr, unbatched inputs
local function sd_matches(name, m)
  local sd, good, load = m:state_dict(), true, {}
  for _, k in ipairs(sd_order[name]) do
    good = good and sd[k] ~= nil and table.concat(sd[k].shape, " ") == table.concat(want[name][k], " ")
    load[k] = zorch.zeros(want[name][k]) + 0.5
  end
  local n = 0
  for _ in pairs(sd) do n = n + 1 end
  ok(good and n == #sd_order[name] and pcall(m.load_state_dict, m, load), name .. ": PyTorch's state-dict names and shapes load")
  return m
end
local ct = sd_matches("sd_conv_transpose2d", nn.ConvTranspose2d(4, 6, {3, 2}, {groups = 2}))
ok(tostring(ct) == "nn.ConvTranspose2d(4, 6, kernel_size=(3, 2), stride=(1, 1), groups=2)", tostring(ct))
ok(table.concat(ct(zorch.ones(4, 5, 5)).shape, ",") == "6,7,6", "nn.ConvTranspose2d: an unbatched input (C, H, W)")
local c3 = sd_matches("sd_conv3d", nn.Conv3d(4, 6, {2, 3, 2}, {groups = 2, bias = false}))
ok(tostring(c3) == "nn.Conv3d(4, 6, kernel_size=(2, 3, 2), stride=(1, 1, 1), groups=2, bias=False)", tostring(c3))
ok(table.concat(c3(zorch.ones(4, 3, 4, 4)).shape, ",") == "6,2,2,3", "nn.Conv3d: an unbatched input (C, D, H, W)")
do
  zorch.manual_seed(4)
  local m = nn.ConvTranspose2d(3, 8, 2)
  local bound = 1 / math.sqrt(8 * 2 * 2)
  ok(m.weight:abs():max():item() <= bound and m.weight:abs():max():item() > bound / 2,
    "nn.ConvTranspose2d: weights within PyTorch's bound 1/sqrt(out / groups * kh * kw)")
end
ok(tostring(nn.AvgPool3d({1, 2, 2})) == "nn.AvgPool3d(kernel_size=(1, 2, 2), stride=(1, 2, 2), padding=0, ceil_mode=False)",
  tostring(nn.AvgPool3d({1, 2, 2})))

-- bad arguments: the function, the argument and the shapes
raises("conv_transpose2d: channels", function() zorch.conv_transpose2d(zorch.ones(1, 3, 4, 4), zorch.ones(2, 1, 3, 3)) end,
  "conv_transpose2d: weight (2, 1, 3, 3) expects 2 input channels, input (1, 3, 4, 4) has 3")
raises("conv_transpose2d: output_padding", function()
  zorch.conv_transpose2d(zorch.ones(1, 2, 4, 4), zorch.ones(2, 1, 3, 3), nil, {output_padding = 1})
end, "conv_transpose2d: output_padding 1 must be smaller than stride 1 or dilation 1")
raises("conv_transpose2d: empty", function()
  zorch.conv_transpose2d(zorch.ones(1, 2, 1, 1), zorch.ones(2, 1, 1, 1), nil, {padding = 1})
end, "conv_transpose2d: the output would be empty (-1 x -1): input (1, 2, 1, 1), weight (2, 1, 1, 1)")
raises("conv_transpose2d: a 2-d weight", function() zorch.conv_transpose2d(zorch.ones(1, 2, 4, 4), zorch.ones(2, 1)) end,
  "conv_transpose2d: weight must be (Cin, Cout / groups, kh, kw), got (2, 1)")
raises("conv_transpose2d: bias", function()
  zorch.conv_transpose2d(zorch.ones(1, 2, 4, 4), zorch.ones(2, 3, 1, 1), zorch.ones(2))
end, "conv_transpose2d: bias (2) must be (3,)")
raises("nn.ConvTranspose2d: groups", function() nn.ConvTranspose2d(3, 4, 2, {groups = 2}) end,
  "nn.ConvTranspose2d: groups 2 must divide in_channels 3 and out_channels 4")
raises("conv3d: a 4-d weight", function() zorch.conv3d(zorch.ones(1, 2, 3, 3, 3), zorch.ones(2, 2, 3, 3)) end,
  "conv3d: weight must be (out, C / groups, kd, kh, kw), got (2, 2, 3, 3)")
raises("conv3d: channels", function() zorch.conv3d(zorch.ones(1, 2, 3, 3, 3), zorch.ones(2, 3, 1, 1, 1)) end,
  "conv3d: weight (2, 3, 1, 1, 1) expects 3 input channels per group, input (1, 2, 3, 3, 3) has 2")
raises("conv3d: empty depth", function() zorch.conv3d(zorch.ones(1, 2, 2, 3, 3), zorch.ones(2, 2, 3, 1, 1)) end,
  "conv3d: the output would be empty: input (1, 2, 2, 3, 3), weight (2, 2, 3, 1, 1)")
raises("conv3d: empty plane", function() zorch.conv3d(zorch.ones(1, 2, 3, 2, 2), zorch.ones(2, 2, 1, 3, 3)) end,
  "conv3d: the output would be empty")
raises("conv3d: a 3-d input", function() zorch.conv3d(zorch.ones(2, 3, 3), zorch.ones(2, 2, 1, 1, 1)) end,
  "conv3d: input must be (N, C, D, H, W) or (C, D, H, W), got (2, 3, 3)")
raises("nn.Conv3d: kernel size", function() nn.Conv3d(2, 2, {2, 2}) end,
  "nn.Conv3d: kernel_size must be a positive integer or a triple {d, h, w} of them, got {2, 2}")
raises("max_pool3d: depth padding", function() zorch.max_pool3d(zorch.ones(1, 1, 4, 4, 4), 2, {padding = {2, 0, 0}}) end,
  "max_pool3d: padding 2 must be at most half the kernel 2")
raises("max_pool3d: plane kernel", function() zorch.max_pool3d(zorch.ones(1, 1, 4, 2, 2), {1, 3, 3}) end,
  "max_pool3d: the output would be empty")
raises("avg_pool3d: depth kernel", function() zorch.avg_pool3d(zorch.ones(1, 1, 2, 4, 4), 3) end,
  "avg_pool3d: the output would be empty: depth 2 is smaller than the kernel 3")
raises("nn.MaxPool3d: an unknown option", function() nn.MaxPool3d(2, {strides = 1}) end, "nn.MaxPool3d", "strides")

tap.done()
