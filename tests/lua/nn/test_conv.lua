-- Convolution and pooling modules: parameters, initialisation, printing, state
-- dicts, shapes, the chunked GEMM path against single images, dtypes, and a
-- small CNN that learns. Values against PyTorch are in test_golden (C).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local ok, raises, close = tap.ok, tap.raises, tap.close
local function shape(t) return tostring(t.shape) end
local function values(t)
  local out = {}
  for i, v in ipairs(t:view(-1):totable()) do out[i] = ("%g"):format(v) end
  return table.concat(out, ",")
end

zorch.manual_seed(1)

-- ---- parameters and their initialisation ----------------------------------------------------
local c = nn.Conv2d(1, 32, 3)
ok(shape(c.weight) == "(32, 1, 3, 3)" and shape(c.bias) == "(32,)", "Conv2d: weight (out, in, kh, kw) and bias (out)")
local bound = 1 / 3 -- fan_in = 1 * 3 * 3
local wmax = c.weight:abs():max():item()
ok(wmax <= bound and wmax > 0.8 * bound and c.bias:abs():max():item() <= bound,
   ("Conv2d: weight and bias uniform in +-1/sqrt(fan_in) (max |w| %.4f, bound %.4f)"):format(wmax, bound))
local g = nn.Conv2d(4, 8, {3, 5}, {groups = 2, bias = false, stride = 2, dilation = {1, 2}})
ok(shape(g.weight) == "(8, 2, 3, 5)" and g.bias == nil, "Conv2d: groups shape the weight; bias = false leaves none")
local gb = 1 / math.sqrt(2 * 3 * 5)
ok(g.weight:abs():max():item() <= gb, "Conv2d: fan_in counts in_channels / groups")
ok(#c:parameters() == 2 and #g:parameters() == 1, "Conv2d: parameters() lists weight and bias")

-- ---- printing as PyTorch's repr -------------------------------------------------------------
ok(tostring(c) == "nn.Conv2d(1, 32, kernel_size=(3, 3), stride=(1, 1))", tostring(c))
ok(tostring(g) == "nn.Conv2d(4, 8, kernel_size=(3, 5), stride=(2, 2), dilation=(1, 2), groups=2, bias=False)",
   tostring(g))
ok(tostring(nn.Conv2d(3, 6, 5, {padding = 2})) == "nn.Conv2d(3, 6, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2))",
   "Conv2d prints its padding")
ok(tostring(nn.MaxPool2d(2)) == "nn.MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)",
   tostring(nn.MaxPool2d(2)))
ok(tostring(nn.MaxPool2d({3, 2}, {stride = 1, padding = 1, ceil_mode = true})) ==
   "nn.MaxPool2d(kernel_size=(3, 2), stride=1, padding=1, dilation=1, ceil_mode=True)", "MaxPool2d prints its options")
ok(tostring(nn.AvgPool2d(2)) == "nn.AvgPool2d(kernel_size=2, stride=2, padding=0)", tostring(nn.AvgPool2d(2)))
ok(tostring(nn.AdaptiveAvgPool2d({3, 4})) == "nn.AdaptiveAvgPool2d(output_size=(3, 4))" and
   tostring(nn.AdaptiveAvgPool2d(1)) == "nn.AdaptiveAvgPool2d(output_size=1)", "AdaptiveAvgPool2d prints its size")

-- ---- state dicts and shapes through a small CNN --------------------------------------------
local Net = nn.Module:extend "Net"
function Net:init()
  self.conv1 = nn.Conv2d(1, 4, 3, {padding = 1})
  self.pool = nn.MaxPool2d(2)
  self.conv2 = nn.Conv2d(4, 8, 3)
  self.gap = nn.AdaptiveAvgPool2d(1)
  self.fc = nn.Linear(8, 2)
end
function Net:forward(x)
  local h = self.pool(zorch.relu(self.conv1(x)))
  h = self.gap(zorch.relu(self.conv2(h)))
  return self.fc(h:view(h.shape[1], -1))
end
local net = Net()
local sd = net:state_dict()
ok(sd["conv1.weight"] and sd["conv1.bias"] and sd["conv2.weight"] and sd["fc.weight"] and shape(sd["conv2.weight"]) == "(8, 4, 3, 3)",
   "state dict names conv1.weight, conv1.bias, conv2.weight as PyTorch")
local seq = nn.Sequential(nn.Conv2d(1, 2, 3), nn.ReLU(), nn.MaxPool2d(2))
ok(seq:state_dict()["0.weight"] ~= nil and seq:state_dict()["0.bias"] ~= nil, "Sequential: 0.weight and 0.bias")

local x = zorch.randn(5, 1, 28, 28)
local y = nn.Conv2d(1, 32, 3, {padding = 1})(x)
ok(shape(y) == "(5, 32, 28, 28)", "padding 1 keeps 28x28: " .. shape(y))
ok(shape(nn.MaxPool2d(2)(y)) == "(5, 32, 14, 14)", "MaxPool2d(2) halves")
ok(shape(nn.Conv2d(1, 6, 5)(x)) == "(5, 6, 24, 24)", "a 5x5 kernel without padding: 24x24")
ok(shape(nn.AdaptiveAvgPool2d(1)(y)) == "(5, 32, 1, 1)", "AdaptiveAvgPool2d(1): (N, C, 1, 1)")
ok(shape(nn.AvgPool2d(3, {stride = 2, padding = 1})(y)) == "(5, 32, 14, 14)", "AvgPool2d(3, stride 2, padding 1)")
ok(shape(zorch.max_pool2d(y, 3, {stride = 2, ceil_mode = true})) == "(5, 32, 14, 14)", "ceil_mode rounds up")
ok(shape(zorch.max_pool2d(y, 3, {stride = 2})) == "(5, 32, 13, 13)", "floor by default")
ok(shape(net(x)) == "(5, 2)", "the CNN maps (5, 1, 28, 28) to (5, 2)")
local one = zorch.randn(1, 28, 28)
local c1 = nn.Conv2d(1, 3, 3)
ok(shape(c1(one)) == "(3, 26, 26)", "a (C, H, W) image gives (out, OH, OW)")
close(c1(one), c1(one:unsqueeze(1)):squeeze(1), 1e-6, "one image equals a batch of one")
ok(shape(nn.MaxPool2d(2)(one)) == "(1, 14, 14)" and shape(nn.AdaptiveAvgPool2d({2, 3})(one)) == "(1, 2, 3)",
   "pools take (C, H, W) too")

-- ---- many images equal image by image: one group takes the CPU's per-image
-- kernel in blocks of 8 images; two groups the chunked GEMM path, where 40
-- float64 images of 32 x 32 x 32 with a 3x3 kernel make a 94 MB column matrix:
-- two chunks
local function batch_vs_images(groups)
  local f64 = {dtype = "float64", requires_grad = true}
  local xb = zorch.randn(40, 32, 32, 32, f64)
  local w = zorch.randn(2, 32 // groups, 3, 3, f64)
  local b = zorch.randn(2, f64)
  local opts = {padding = 1, groups = groups}
  local out = zorch.conv2d(xb, w, b, opts)
  local r = zorch.randn(out.shape, {dtype = "float64"})
  local lsum = (out * r):sum()
  lsum:backward()
  local gw = zorch.zeros(w.shape, {dtype = "float64"})
  local worst_out, worst_gx = 0, 0
  for i = 1, 40 do
    local xi = xb:detach():narrow(1, i, 1):clone():requires_grad_()
    local wi = w:detach():clone():requires_grad_()
    local oi = zorch.conv2d(xi, wi, b:detach(), opts)
    local li = (oi * r:narrow(1, i, 1)):sum()
    li:backward()
    gw = gw + wi.grad
    worst_out = math.max(worst_out, (oi - out:detach():narrow(1, i, 1)):abs():max():item())
    worst_gx = math.max(worst_gx, (xi.grad - xb.grad:narrow(1, i, 1)):abs():max():item())
  end
  local what = groups == 1 and "blocks of images" or "chunked GEMM"
  ok(worst_out < 1e-9 and worst_gx < 1e-9, ("%s: forward and input gradient equal image by image (%.2g, %.2g)"):format(
     what, worst_out, worst_gx))
  close(w.grad, gw, 1e-9, what .. ": weight gradient equals the sum over images")
  close(b.grad, r:sum({1, 3, 4}), 1e-9, what .. ": bias gradient is the output gradient summed")
end
batch_vs_images(1)
batch_vs_images(2)

-- ---- dtypes ---------------------------------------------------------------------------------------
do
  local x32, w32 = zorch.randn(2, 3, 6, 6), zorch.randn(4, 3, 3, 3)
  local o64 = zorch.conv2d(x32:double(), w32:double(), nil, {stride = 2, padding = 1})
  ok(o64:dtype() == "float64", "float64 in, float64 out")
  close(zorch.conv2d(x32, w32, nil, {stride = 2, padding = 1}):double(), o64, 1e-4, "float32 and float64 agree")
  local xh, wh = x32:to("bfloat16"), w32:to("bfloat16")
  local oh = zorch.conv2d(xh, wh)
  ok(oh:dtype() == "bfloat16", "bfloat16 in, bfloat16 out (computed in float32)")
  close(oh:float(), zorch.conv2d(xh:float(), wh:float()), 1e-2, "bfloat16 result is the float32 one rounded")
  ok(zorch.max_pool2d(x32:to("float16"), 2):dtype() == "float16", "float16 max pooling")
end

-- ---- max pooling: the gradient goes to the maximum -----------------------------------------------
do
  local xm = zorch.tensor{{{1, 5, 2, 0}, {3, 4, 8, 1}, {0, 0, 1, 1}, {9, 2, 1, 7}}}:float():requires_grad_()
  local m = zorch.max_pool2d(xm, 2)
  ok(values(m) == "5,8,9,7", "max_pool2d picks each window's maximum")
  m:sum():backward()
  ok(values(xm.grad) == "0,1,0,0,0,0,1,0,0,0,0,0,1,0,0,1", "its gradient goes to the argmax")
  local a = zorch.avg_pool2d(xm:detach(), 2, {stride = 2, padding = 1, count_include_pad = false})
  local a_in = zorch.avg_pool2d(xm:detach(), 2, {stride = 2, padding = 1})
  ok(a:view(-1):totable()[1] == 1 and a_in:view(-1):totable()[1] == 0.25,
     "avg_pool2d: count_include_pad divides the corner by 4, else by 1")
end

-- ---- errors ----------------------------------------------------------------------------------------
raises("conv2d: channels per group", function() zorch.conv2d(zorch.ones(8, 1, 28, 28), zorch.ones(32, 3, 3, 3)) end,
       "conv2d", "weight (32, 3, 3, 3) expects 3 input channels per group, input (8, 1, 28, 28) has 1")
raises("conv2d: groups must divide the channels", function()
  zorch.conv2d(zorch.ones(1, 3, 5, 5), zorch.ones(4, 1, 3, 3), nil, {groups = 2}) end, "conv2d", "groups 2", "(1, 3, 5, 5)")
raises("conv2d: an empty output", function() zorch.conv2d(zorch.ones(1, 1, 2, 2), zorch.ones(1, 1, 3, 3)) end,
       "conv2d", "empty", "(1, 1, 2, 2)")
raises("conv2d: integer input", function() zorch.conv2d(zorch.ones(1, 1, 4, 4, {dtype = "int64"}), zorch.ones(1, 1, 3, 3)) end,
       "conv2d", "floating-point", "int64")
raises("conv2d: bias of the wrong size", function() zorch.conv2d(zorch.ones(1, 1, 4, 4), zorch.ones(2, 1, 3, 3), zorch.ones(3)) end,
       "conv2d", "bias (3,)", "(2, 1, 3, 3)")
raises("conv2d: a 2-d input", function() zorch.conv2d(zorch.ones(4, 4), zorch.ones(2, 1, 3, 3)) end, "conv2d", "(4, 4)")
raises("conv2d: a negative padding", function() zorch.conv2d(zorch.ones(1, 1, 4, 4), zorch.ones(2, 1, 3, 3), nil, {padding = -1}) end,
       "conv2d", "padding")
raises("conv2d: stride 0", function() zorch.conv2d(zorch.ones(1, 1, 4, 4), zorch.ones(2, 1, 3, 3), nil, {stride = {1, 0}}) end,
       "conv2d", "stride")
raises("max_pool2d: padding over half the kernel", function() zorch.max_pool2d(zorch.ones(1, 1, 4, 4), 2, {padding = 2}) end,
       "max_pool2d", "padding")
raises("max_pool2d: a kernel larger than the input", function() zorch.max_pool2d(zorch.ones(1, 1, 4, 4), 5) end,
       "max_pool2d", "(1, 1, 4, 4)")
raises("avg_pool2d: unknown option", function() zorch.avg_pool2d(zorch.ones(1, 1, 4, 4), 2, {dilation = 2}) end,
       "avg_pool2d", "unknown option 'dilation'")
raises("adaptive_avg_pool2d: output size 0", function() zorch.adaptive_avg_pool2d(zorch.ones(1, 1, 4, 4), 0) end,
       "adaptive_avg_pool2d", "output_size")
raises("nn.Conv2d: groups must divide", function() nn.Conv2d(3, 4, 3, {groups = 2}) end, "nn.Conv2d", "groups")
raises("nn.Conv2d: a bad kernel size", function() nn.Conv2d(3, 4, "3") end, "nn.Conv2d", "kernel_size")
raises("nn.MaxPool2d: unknown option", function() nn.MaxPool2d(2, {count_include_pad = true}) end, "nn.MaxPool2d", "unknown option")

-- ---- a small CNN learns ----------------------------------------------------------------------------
do
  zorch.manual_seed(7)
  -- class 2 when the left half is brighter than the right, else 1
  local X = zorch.randn(32, 1, 8, 8)
  local left = X:narrow(4, 1, 4):sum({2, 3, 4})
  local right = X:narrow(4, 5, 4):sum({2, 3, 4})
  local Y = zorch.gt(left, right):long() + 1
  local m = nn.Sequential(nn.Conv2d(1, 4, 3, {padding = 1}), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 8, 3, {padding = 1}), nn.ReLU(), nn.AvgPool2d(2),
                          nn.Flatten(), nn.Linear(32, 2))
  local opt = optim.Adam(m:parameters(), {lr = 0.01})
  local first, last
  for step = 1, 60 do
    local loss = zorch.cross_entropy(m(X), Y)
    opt:zero_grad()
    loss:backward()
    opt:step()
    first = first or loss:item()
    last = loss:item()
  end
  ok(last < 0.5 * first, ("a small CNN's loss falls from %.4f to %.4f in 60 steps"):format(first, last))
end

-- ---- max pooling 2x2 stride 2 (a kernel of its own) against a reference in Lua -------------------
-- Small integer values make ties (the first maximum wins) and a few NaNs win
-- their windows; odd sizes leave the last row and column out; ceil_mode keeps
-- them (partial windows: the general kernel), which must agree too.
do
  local function reference(x, ceil)
    local n, c, h, w = table.unpack(x.shape)
    local oh, ow = ceil and (h + 1) // 2 or h // 2, ceil and (w + 1) // 2 or w // 2
    local xs = x:view(-1):totable()
    local vals, grad = {}, {}
    for i = 1, #xs do grad[i] = 0 end
    for p = 0, n * c - 1 do
      for oy = 0, oh - 1 do
        for ox = 0, ow - 1 do
          local m, at
          for ky = 0, 1 do
            for kx = 0, 1 do
              local iy, ix = 2 * oy + ky, 2 * ox + kx
              if iy < h and ix < w then
                local i = p * h * w + iy * w + ix + 1
                local v = xs[i]
                if not at or (m == m and (v > m or v ~= v)) then m, at = v, i end
              end
            end
          end
          vals[#vals + 1] = m
          grad[at] = grad[at] + 1
        end
      end
    end
    return vals, grad
  end
  local function same(a, b)
    if #a ~= #b then return false end
    for i = 1, #a do
      if not (a[i] == b[i] or (a[i] ~= a[i] and b[i] ~= b[i])) then return false end
    end
    return true
  end
  -- rows of 32 outputs and more also take the AVX-512 path (16 outputs a step, then the tail)
  for _, case in ipairs({{2, 3, 6, 8, false}, {1, 2, 7, 9, false}, {1, 2, 7, 9, true}, {2, 2, 6, 70, false},
                         {1, 3, 5, 67, false}, {1, 1, 4, 64, false}}) do
    local n, c, h, w, ceil = table.unpack(case)
    for _, dt in ipairs({"float32", "float64"}) do
      local x = zorch.randint(0, 4, {n, c, h, w}):to(dt)
      local flat = x:view(-1)
      for _, i in ipairs({3, 10, 11, 40, 131, 132, 197, 230, 255}) do
        if i <= flat.shape[1] then flat[i] = 0 / 0 end
      end
      local want, want_grad = reference(x, ceil)
      local xg = x:clone():requires_grad_()
      local m = zorch.max_pool2d(xg, 2, {ceil_mode = ceil})
      m:sum():backward()
      ok(same(m:view(-1):totable(), want) and same(xg.grad:view(-1):totable(), want_grad),
         ("max_pool2d 2x2 on (%d, %d, %d, %d) %s%s: maxima (ties: the first; NaN wins) and gradient match"):format(
           n, c, h, w, dt, ceil and ", ceil_mode" or ""))
    end
  end
end

tap.done()
