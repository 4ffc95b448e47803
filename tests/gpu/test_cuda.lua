-- The CUDA backend against the CPU: every op of the core on the same inputs
-- (and the same random streams), per dtype, forward and backward; the
-- reference model; the ZeRO engine at every stage on the GPU; the allocator.
-- Without a GPU it prints one skip line.
package.path = "../lua/?.lua;lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

if not zorch.cuda.available() then
  print("1..0 # SKIP no CUDA device (" .. (zorch.cuda.built() and "this machine has no GPU" or "a CPU-only build") .. ")")
  os.exit(0)
end

-- worst |gpu - cpu| / (1 + max |cpu|)
local function rel(cpu, gpu)
  if cpu:numel() == 0 then return (gpu:numel() == 0 and cpu:dim() == gpu:dim()) and 0 or math.huge end
  local c = cpu:to("float64")
  local d = (gpu:to("cpu"):to("float64") - c):abs():max():item()
  return d / (1 + c:abs():max():item())
end
local function same(cpu, gpu, tol, desc)
  local ok_dev = gpu:device():sub(1, 4) == "cuda"
  local r = rel(cpu, gpu)
  tap.ok(ok_dev and r <= tol, ("%s (relative difference %.3g, tolerance %.3g)"):format(desc, r, tol))
end

-- per dtype: elementwise (one rounding apart at most), and sums/GEMMs
local EW = {float32 = 2e-6, float64 = 1e-13, bfloat16 = 8e-3, float16 = 1e-3}
local MM = {float32 = 2e-5, float64 = 1e-12, bfloat16 = 2e-2, float16 = 4e-3}
-- the registry's ops run with these parameters (clamp needs p1 >= p0), and
-- within EW times this factor
local OP_PARAMS = {-0.5, 0.7}
local OP_TOL = {pow = 4}

zorch.manual_seed(3)
local A64, B64 = zorch.randn(67, 129, {dtype = "float64"}), zorch.randn(129, {dtype = "float64"})
for _, dt in ipairs({"float32", "float64", "bfloat16", "float16"}) do
  local a, b = A64:to(dt), B64:to(dt)
  local ga, gb = a:to("cuda"), b:to("cuda")
  same(a, ga, 0, dt .. ": copies to the GPU and back")
  local pos, gpos = a:abs() + 0.5, ga:abs() + 0.5
  local posb, gposb = b:abs() + 0.5, gb:abs() + 0.5
  local unit, gt1 = a:tanh() * 0.9, a:abs() + 1.5
  local gunit, ggt1 = unit:to("cuda"), gt1:to("cuda")
  -- every elementwise op of the registry, by name, b broadcast against a
  for _, op in ipairs(Z._pointwise_ops()) do
    local cpu_in = {op.positive[1] and pos or a, op.positive[2] and posb or b}
    local gpu_in = {op.positive[1] and gpos or ga, op.positive[2] and gposb or gb}
    if op.domain == "unit" then cpu_in[1], gpu_in[1] = unit, gunit end
    if op.domain == "gt1" then cpu_in[1], gpu_in[1] = gt1, ggt1 end
    local function run(inputs)
      local args = {op.name}
      for i = 1, op.nin do args[#args + 1] = inputs[i] end
      for i = 1, op.nparams do args[#args + 1] = OP_PARAMS[i] end
      return Z._pointwise(table.unpack(args))
    end
    same(run(cpu_in), run(gpu_in), (OP_TOL[op.name] or 1) * EW[dt], dt .. ": " .. op.name)
  end
  same(a:clamp(-0.5, 0.7), ga:clamp(-0.5, 0.7), 0, dt .. ": clamp")
  same(a * 3 - 1, ga * 3 - 1, EW[dt], dt .. ": scalar ops")
  same(a:gt(b):float(), ga:gt(gb):float(), 0, dt .. ": gt")
  same(a:lt(0):float(), ga:lt(0):float(), 0, dt .. ": lt")
  same(a:eq(a):float(), ga:eq(ga):float(), 0, dt .. ": eq")
  same(a:masked_fill(a:gt(1), 9), ga:masked_fill(ga:gt(1), 9), 0, dt .. ": masked_fill")
  same(zorch.where(a:gt(0), a, b), zorch.where(ga:gt(0), ga, gb), 0, dt .. ": where")
  same(a:sum(1), ga:sum(1), MM[dt], dt .. ": sum over a dim")
  same(a:sum(), ga:sum(), MM[dt], dt .. ": sum of everything")
  same(a:mean(2), ga:mean(2), MM[dt], dt .. ": mean")
  local v1, i1 = a:max(2)
  local v2, i2 = ga:max(2)
  same(v1, v2, 0, dt .. ": max values")
  same(i1:float(), i2:float(), 0, dt .. ": max indices")
  same(zorch.softmax(a, 2), zorch.softmax(ga, 2), EW[dt] * 4, dt .. ": softmax")
  same(zorch.log_softmax(a, 1), zorch.log_softmax(ga, 1), EW[dt] * 4, dt .. ": log_softmax")
  local w = A64:narrow(1, 1, 33):to(dt)
  local gw = w:to("cuda")
  same(zorch.matmul(a, w:t()), zorch.matmul(ga, gw:t()), MM[dt], dt .. ": matmul")
  same(zorch.matmul(a:t(), a), zorch.matmul(ga:t(), ga), MM[dt], dt .. ": matmul of transposed views")
  local a3, w3 = a:view(1, 67, 129):expand(3, 67, 129), w:t():contiguous()
  same(zorch.matmul(a3, w3), zorch.matmul(a3:to("cuda"), w3:to("cuda")), MM[dt], dt .. ": batched broadcast matmul")
  local bias = b:narrow(1, 1, 33)
  same(zorch.linear(a, w, bias), zorch.linear(ga, gw, bias:to("cuda")), MM[dt], dt .. ": linear (bias epilogue)")
  same(zorch.linear(a, w, bias, "relu"), zorch.linear(ga, gw, bias:to("cuda"), "relu"), MM[dt],
       dt .. ": linear with relu (fused epilogue)")
  same(zorch.linear(a, w), zorch.linear(ga, gw), MM[dt], dt .. ": linear without bias")
  same(a:t():contiguous(), ga:t():contiguous(), 0, dt .. ": strided copy")
  same(a:permute(2, 1):narrow(1, 3, 40):contiguous(), ga:permute(2, 1):narrow(1, 3, 40):contiguous(), 0,
       dt .. ": permuted, narrowed copy")
  same(zorch.cat({a, a * 2}, 2), zorch.cat({ga, ga * 2}, 2), EW[dt], dt .. ": cat")
  same(zorch.stack({b, b}, 1), zorch.stack({gb, gb}, 1), 0, dt .. ": stack")
  same(a:to("float64"), ga:to("float64"), 0, dt .. ": conversion to float64 on the GPU")
  same(a:to("bfloat16"), ga:to("bfloat16"), 0, dt .. ": conversion to bfloat16 on the GPU")
end

-- ops whose kernels compute in float32/float64 (16-bit goes through float32)
local a, ga = A64:float(), A64:float():to("cuda")
local t = zorch.tensor({1, 5, 3, 2})
same(zorch.index_select(a, 1, t), zorch.index_select(ga, 1, t:to("cuda")), 0, "index_select")
-- a bad index is found by the kernel and reported at the next wait, by name
local bad_ok, bad_err = pcall(function() return zorch.index_select(ga, 1, zorch.tensor({1, 99}):to("cuda")):sum():item() end)
tap.ok(not bad_ok and tostring(bad_err):find("index_select: index 99 is out of range 1..67", 1, true),
       "a bad index on the GPU is an error naming the op and the index: " .. tostring(bad_err))
local bt_ok, bt_err = pcall(function() return zorch.cross_entropy(ga:narrow(1, 1, 2), zorch.tensor({1, 500}):to("cuda")):item() end)
tap.ok(not bt_ok and tostring(bt_err):find("cross_entropy: target 500 is out of range", 1, true), "so is a bad target: " .. tostring(bt_err))
tap.ok(zorch.ones(3, {device = "cuda"}):sum():item() == 3, "and the device works on after them")
for _, dt in ipairs({"float32", "float64", "bfloat16"}) do
  zorch.manual_seed(9)
  local r1, u1 = zorch.randn(1000, {dtype = dt}), zorch.rand(1000, {dtype = dt})
  zorch.manual_seed(9)
  local r2, u2 = zorch.randn(1000, {dtype = dt, device = "cuda"}), zorch.rand(1000, {dtype = dt, device = "cuda"})
  same(r1, r2, EW[dt], dt .. ": the same normal stream on both devices")
  same(u1, u2, EW[dt], dt .. ": the same uniform stream on both devices")
end
local big = zorch.randn(3, 1 << 20)
same(big:sum(2), big:to("cuda"):sum(2), 1e-6, "long rows: the block reduction")
local bv, bi = big:max(2)
local gv, gi = big:to("cuda"):max(2)
same(bv, gv, 0, "long rows: block max values")
same(bi:float(), gi:float(), 0, "long rows: block max indices (the first of equals)")
local mid = zorch.randn(5, 5000)
same(mid:sum(2), mid:to("cuda"):sum(2), 1e-6, "rows of 5000: one block a row")
local ties = zorch.zeros(2, 70000)
local tv, ti = ties:to("cuda"):max(2)
same(ties:max(2):float() * 0 + 1, ti:float(), 0, "a row of equal values gives the first index")
local huge = zorch.randn(1 << 23)
same(huge:mean(), huge:to("cuda"):mean(), 1e-6, "the mean of 8M elements: many blocks for one row")

-- min, argmax, argmin, var, std, cumsum, sort, topk, gather, scatter, randint
-- and randperm: the same answers on the GPU, forward and backward
do
  local x = zorch.randn(37, 53, {dtype = "float64"})
  x[3]:narrow(1, 5, 10):fill_(0.25) -- ties: the first index, and a stable sort
  for _, dt in ipairs({"float32", "float64", "bfloat16", "float16"}) do
    local a = x:to(dt)
    local ga = a:to("cuda")
    local v1, i1 = a:min(2)
    local v2, i2 = ga:min(2)
    same(v1, v2, 0, dt .. ": min values")
    same(i1:float(), i2:float(), 0, dt .. ": min indices")
    same(a:argmax(1):float(), ga:argmax(1):float(), 0, dt .. ": argmax")
    same(a:argmin():float(), ga:argmin():float(), 0, dt .. ": argmin of everything")
    same(a:cumsum(2), ga:cumsum(2), MM[dt], dt .. ": cumsum")
    same(a:std(1), ga:std(1), MM[dt] * 4, dt .. ": std")
    local sv, si = a:sort(2)
    local gsv, gsi = ga:sort(2)
    same(sv, gsv, 0, dt .. ": sort values")
    same(si:float(), gsi:float(), 0, dt .. ": sort indices (stable)")
    local tv, ti = a:topk(5, 1, false)
    local gtv, gti = ga:topk(5, 1, false)
    same(tv, gtv, 0, dt .. ": topk values")
    same(ti:float(), gti:float(), 0, dt .. ": topk indices")
  end
  zorch.manual_seed(31)
  local idx = zorch.randint(1, 53, {20, 53})
  local gidx = idx:to("cuda")
  local a, ga = x:float(), x:float():to("cuda")
  same(zorch.gather(a, 2, idx), zorch.gather(ga, 2, gidx), 0, "gather")
  same(zorch.gather(a:long(), 2, idx):float(), zorch.gather(ga:long(), 2, gidx):float(), 0, "gather of int64")
  local src = zorch.randn(20, 53)
  same(zorch.scatter_add(a, 2, idx, src), zorch.scatter_add(ga, 2, gidx, src:to("cuda")), 1e-6,
       "scatter_add with repeated indices (in index order, no atomics)")
  same(zorch.scatter(a, 2, idx, src), zorch.scatter(ga, 2, gidx, src:to("cuda")), 0,
       "scatter with repeated indices (the last write wins on both)")
  same(a:long():cumsum(1):float(), ga:long():cumsum(1):float(), 0, "cumsum of int64")
  do -- the integer kernels of the two-input ops and of pow; bool's or and and
    zorch.manual_seed(33)
    local ia = zorch.randint(-50, 50, {40, 53})
    local ib = zorch.randint(1, 8, {53}) * (zorch.randint(0, 1, {53}) * 2 - 1) -- no zero
    for _, dt in ipairs({"int64", "int32", "uint8"}) do
      local x = dt == "uint8" and ia:abs():to(dt) or ia:to(dt)
      local y = dt == "uint8" and ib:abs():to(dt) or ib:to(dt)
      local gx, gy = x:to("cuda"), y:to("cuda")
      for _, name in ipairs({"maximum", "minimum", "fmax", "fmin", "fmod", "remainder", "floor_divide"}) do
        same(zorch[name](x, y):double(), zorch[name](gx, gy):double(), 0, dt .. ": " .. name)
      end
      same((x ^ 3):double(), (gx ^ 3):double(), 0, dt .. ": integer pow")
    end
    local m1, m2 = ia:gt(0), ib:gt(0)
    same((m1 + m2):double(), (m1:to("cuda") + m2:to("cuda")):double(), 0, "bool + bool (or)")
    same((m1 * m2):double(), (m1:to("cuda") * m2:to("cuda")):double(), 0, "bool * bool (and)")
    tap.raises("integer division by zero on the GPU", function()
      return ia:to("cuda") // zorch.zeros(53, {dtype = "int64"}):to("cuda")
    end, "floor_divide: integer division by zero")
  end
  for _, dt in ipairs({"int64", "float32"}) do
    zorch.manual_seed(8)
    local r1, p1 = zorch.randint(-5, 1000, {999}, {dtype = dt}), zorch.randperm(777)
    zorch.manual_seed(8)
    local r2, p2 = zorch.randint(-5, 1000, {999}, {dtype = dt, device = "cuda"}), zorch.randperm(777, {device = "cuda"})
    same(r1:double(), r2:double(), 0, dt .. ": randint draws the same stream on both devices")
    same(p1:double(), p2:double(), 0, "randperm gives the same permutation on both devices")
  end
  local function grads(device)
    zorch.manual_seed(32)
    local xs = x:float():to(device):requires_grad_()
    local src_d = src:detach():to(device):requires_grad_() -- (src itself stays a plain leaf)
    local i_d = idx:to(device)
    local w = zorch.randn(20, 53):to(device)
    local loss = (xs:sort(2) * xs):sum() + xs:topk(3, 1):sum() + (zorch.gather(xs, 2, i_d) * w):sum() +
                 (zorch.scatter(xs, 2, i_d, src_d) * xs):sum() + zorch.scatter_add(xs, 2, i_d, src_d):sin():sum() +
                 xs:cumsum(1):cos():sum() + xs:std(2):sum() + xs:min(1):sum()
    loss:backward()
    return {xs.grad, src_d.grad}
  end
  local gc, gg = grads("cpu"), grads("cuda")
  same(gc[1], gg[1], 1e-4, "autograd on the GPU: sort, topk, gather, scatter, cumsum, std, min")
  same(gc[2], gg[2], 1e-4, "autograd on the GPU: the scatter sources")
  local bad_ok, bad_err = pcall(function() return zorch.gather(ga, 2, zorch.tensor({{1, 99}}):to("cuda")):sum():item() end)
  tap.ok(not bad_ok and tostring(bad_err):find("gather: index 99 is out of range 1..53", 1, true),
         "a bad gather index on the GPU is an error naming the op and the index: " .. tostring(bad_err))
  tap.ok(zorch.ones(3, {device = "cuda"}):sum():item() == 3, "and the device works on after it")
end

-- autograd through GPU ops: every differentiable op of the registry, then a chain
for _, op in ipairs(Z._pointwise_ops()) do
  if op.differentiable then
    local function run(device)
      zorch.manual_seed(17)
      local inputs, args = {}, {op.name}
      for i = 1, op.nin do
        local x = zorch.randn(i == 1 and {6, 7} or {7}, {dtype = "float64"})
        if op.positive[i] then x = x:abs() + 0.5 end
        if i == 1 and op.domain == "unit" then x = x:tanh() * 0.9 end
        if i == 1 and op.domain == "gt1" then x = x:abs() + 1.5 end
        inputs[i] = x:to(device):requires_grad_()
        args[#args + 1] = inputs[i]
      end
      for i = 1, op.nparams do args[#args + 1] = OP_PARAMS[i] end
      local y = Z._pointwise(table.unpack(args))
      local w = zorch.randn(6, 7, {dtype = "float64"}):to(device)
      local loss = (y * w):sum()
      loss:backward()
      local gs = {}
      for i = 1, op.nin do gs[i] = inputs[i].grad end
      return gs
    end
    local c, g = run("cpu"), run("cuda")
    for i = 1, op.nin do
      same(c[i], g[i], 1e-12, ("float64: gradient of %s for input %d"):format(op.name, i))
    end
  end
end

-- autograd through GPU ops: the same gradients as on the CPU
local function grads(device)
  zorch.manual_seed(21)
  local x = zorch.randn(16, 24):to(device):requires_grad_()
  local w = zorch.randn(12, 24):to(device):requires_grad_()
  local b = zorch.randn(12):to(device):requires_grad_()
  local g = zorch.randn(24):to(device):requires_grad_()
  local h = zorch.linear(x, w, b, "relu")
  local y = zorch.layer_norm(zorch.matmul(h, w) * g, 1):tanh():sigmoid()
  local idx = zorch.tensor({2, 7, 3}):to(device)
  local loss = zorch.log_softmax(y, 2):sum() + zorch.cross_entropy(y:narrow(1, 1, 3), idx) +
               zorch.index_select(y, 1, idx):gelu():mean() + (x:abs() + 1):sqrt():sum()
  loss:backward()
  return {x.grad, w.grad, b.grad, g.grad}
end
local gc, gg = grads("cpu"), grads("cuda")
for i, name in ipairs({"x", "w", "b", "g"}) do same(gc[i], gg[i], 1e-4, "autograd on the GPU: gradient of " .. name) end

-- convolution and pooling: forward and the gradients of input, weight and bias
local function conv_net(device, dt)
  zorch.manual_seed(23)
  local x = zorch.randn(6, 4, 13, 11, {dtype = dt}):to(device):requires_grad_()
  local w1 = zorch.randn(6, 2, 3, 3, {dtype = dt}):to(device):requires_grad_()
  local b1 = zorch.randn(6, {dtype = dt}):to(device):requires_grad_()
  local w2 = zorch.randn(5, 6, 2, 3, {dtype = dt}):to(device):requires_grad_()
  local h = zorch.conv2d(x, w1, b1, {stride = {2, 1}, padding = 1, dilation = {1, 2}, groups = 2})
  local m = zorch.max_pool2d(h:relu(), 3, {stride = 2, padding = 1, ceil_mode = true})
  local c = zorch.conv2d(m, w2, nil, {padding = {1, 0}})
  local a = zorch.avg_pool2d(c, 2, {stride = 1, padding = 1, count_include_pad = false})
  local p = zorch.adaptive_avg_pool2d(a, {3, 2}) + zorch.avg_pool2d(a, {2, 1}, {ceil_mode = true}):sum()
  local r = zorch.randn(p.shape, {dtype = dt}):to(device)
  local loss = (p * r):sum()
  loss:backward()
  return {p:detach(), x.grad, w1.grad, b1.grad, w2.grad}
end
for _, dt in ipairs({"float32", "float64"}) do
  local cc, cg = conv_net("cpu", dt), conv_net("cuda", dt)
  for i, name in ipairs({"output", "input gradient", "conv weight gradient", "conv bias gradient",
                         "second conv weight gradient"}) do
    same(cc[i], cg[i], MM[dt] * 10, dt .. ": conv2d and pools: " .. name)
  end
end

-- long rows: layer norm and softmax one block a row, forward and backward
local function long_rows(device)
  zorch.manual_seed(22)
  local x = zorch.randn(33, 1000):to(device):requires_grad_()
  local lw = zorch.randn(1000):to(device):requires_grad_()
  local y = zorch.layer_norm(x, 1, lw)
  local loss = (zorch.log_softmax(y * 3, 2) * zorch.randn(33, 1000):to(device)):sum() + zorch.softmax(x, 2):max()
  loss:backward()
  return {y:detach(), x.grad, lw.grad}
end
local lc, lg = long_rows("cpu"), long_rows("cuda")
for i, name in ipairs({"layer_norm of rows of 1000", "its input gradient", "its weight gradient"}) do
  same(lc[i], lg[i], 1e-5, "long rows: " .. name)
end

-- each kernel's size thresholds from both sides (256-thread blocks, rows of
-- 256 and 1024, a block per row), odd sizes, a transposed view, empty tensors:
-- forward and backward against the CPU
do
  local function edge(device, n, transposed)
    zorch.manual_seed(44)
    local x = zorch.randn(5, n)
    if transposed then x = zorch.randn(n, 5):t() end
    x = x:to(device):requires_grad_()
    local w = zorch.randn(n):to(device):requires_grad_()
    local r = zorch.randn(5, n):to(device)
    local ln = zorch.layer_norm(x, 1, w)
    local rn = zorch.fused_rms_norm(x, w)
    local sm = zorch.log_softmax(x, 2)
    local mx = x:max(2)
    local loss = (ln * r):sum() + (rn * r):sum() + (sm * r):sum() + (x:sum(2) * mx):sum() + x:mean(1):sum()
    loss:backward()
    local v, i = x:detach():max(2)
    return {ln:detach(), rn:detach(), sm:detach(), x:detach():sum(2), v, i:double(), x.grad, w.grad,
            x:detach():cumsum(2)}
  end
  local names = {"layer_norm", "fused_rms_norm", "log_softmax", "sum", "max values", "max indices",
                 "input gradient", "weight gradient", "cumsum"}
  for _, n in ipairs({1, 255, 256, 257, 1023, 1024, 1025, 4099}) do
    for _, tr in ipairs({false, true}) do
      local c, g = edge("cpu", n, tr), edge("cuda", n, tr)
      for i, name in ipairs(names) do
        same(c[i], g[i], 1e-5, ("rows of %d%s: %s"):format(n, tr and " (a transposed view)" or "", name))
      end
    end
  end
  local e, ge = zorch.randn(0, 7), zorch.randn(0, 7):to("cuda")
  same(e:sum(2), ge:sum(2), 0, "empty: sum over a dim")
  same(e:sum(1), ge:sum(1), 0, "empty: sum over the empty dim (zeros)")
  same(zorch.softmax(e, 2), zorch.softmax(ge, 2), 0, "empty: softmax")
  same(zorch.layer_norm(e, 1), zorch.layer_norm(ge, 1), 0, "empty: layer_norm")
  same(zorch.matmul(e, zorch.randn(7, 3)), zorch.matmul(ge, zorch.randn(7, 3):to("cuda")), 0, "empty: matmul")
  same(e:exp() + 1, ge:exp() + 1, 0, "empty: elementwise")
  same(e:t():contiguous(), ge:t():contiguous(), 0, "empty: strided copy")
  local ei = zorch.tensor({}, {dtype = "int64"})
  same(zorch.index_select(zorch.randn(4, 3), 1, ei), zorch.index_select(zorch.randn(4, 3):to("cuda"), 1, ei:to("cuda")),
       0, "empty: index_select of no indices")
end

-- attention (causal and not, Tq < Tk, blocks that do not divide T) and multinomial
local function attn(device, dt, causal, tq, tk, d)
  zorch.manual_seed(31)
  local q = zorch.randn(2, 3, tq, d, {dtype = dt}):to(device):requires_grad_()
  local k = zorch.randn(2, 3, tk, d, {dtype = dt}):to(device):requires_grad_()
  local v = zorch.randn(2, 3, tk, d, {dtype = dt}):to(device):requires_grad_()
  local o = zorch.attention(q, k, v, {causal = causal})
  ;(o * zorch.randn(2, 3, tq, d, {dtype = dt}):to(device)):sum():backward()
  return {o:detach(), q.grad, k.grad, v.grad}
end
for _, c in ipairs({{"float32", true, 300, 300, 64}, {"float64", false, 7, 270, 33}, {"float32", true, 5, 9, 16},
                    {"bfloat16", true, 40, 40, 32}, {"float64", true, 256, 256, 8}, {"float32", false, 3, 255, 257},
                    {"float32", true, 2, 257, 1}, {"float32", false, 1, 1, 300}}) do
  local ac, ag = attn("cpu", table.unpack(c)), attn("cuda", table.unpack(c))
  for i, name in ipairs({"output", "dq", "dk", "dv"}) do
    same(ac[i], ag[i], MM[c[1]],
         ("attention %s causal %s q %d k %d d %d: %s"):format(c[1], tostring(c[2]), c[3], c[4], c[5], name))
  end
end
do
  local p = zorch.rand(3, 50)
  local s1 = zorch.multinomial(p, 20, {replacement = true, generator = zorch.Generator(8)})
  local s2 = zorch.multinomial(p:to("cuda"), 20, {replacement = true, generator = zorch.Generator(8)})
  same(s1:double(), s2:double(), 0, "multinomial draws the same indices on both devices")
end
-- batch norm: training (batch statistics, running stats updated) and eval, forward and backward
local function batch_norm_run(device, training, shape)
  zorch.manual_seed(23)
  local x = zorch.randn(shape):to(device):requires_grad_()
  local c = shape[2]
  local w, b = zorch.randn(c):to(device):requires_grad_(), zorch.randn(c):to(device):requires_grad_()
  local rm, rv = zorch.randn(c):to(device), (zorch.rand(c) + 0.5):to(device)
  local y = zorch.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)
  local loss = (y * zorch.randn(shape):to(device)):sum()
  loss:backward()
  return {y:detach(), x.grad, w.grad, b.grad, rm, rv}
end
for _, case in ipairs({{true, {8, 5, 7, 9}}, {false, {8, 5, 7, 9}}, {true, {300, 4}}, {true, {2, 3, 1000}}}) do
  local bc, bg = batch_norm_run("cpu", case[1], case[2]), batch_norm_run("cuda", case[1], case[2])
  local what = ("batch_norm %s %s: "):format(case[1] and "training" or "eval", table.concat(case[2], "x"))
  for i, name in ipairs({"output", "input gradient", "weight gradient", "bias gradient", "running_mean", "running_var"}) do
    same(bc[i], bg[i], 1e-4, what .. name)
  end
end

-- cuDNN (ops/cuda/cudnn.cu): one-group convolutions and training-mode batch
-- norm run through it when libcudnn.so.9 is there (zorch.cuda.info() says
-- which path runs); against the CPU, forward and every gradient, over the
-- geometries cuDNN's algorithms split on; the deterministic algorithms give the
-- same bits twice; and the own kernels (ZORCH_CUDNN=0, another process) agree.
do
  local info = zorch.cuda.info()
  local cudnn = info:find("cuDNN %d+%.%d+%.%d+ for conv2d and batch_norm") ~= nil
  print("# " .. info)
  tap.ok(cudnn or info:find("own conv2d", 1, true),
         "zorch.cuda.info() names the conv2d and batch_norm path: " .. (cudnn and "cuDNN" or "own kernels"))
  local function conv_case(device, dt, n, c, h, w, o, k, opts, bias)
    zorch.manual_seed(41)
    local x = zorch.randn(n, c, h, w, {dtype = dt}):to(device):requires_grad_()
    local wt = zorch.randn(o, c, k[1], k[2], {dtype = dt}):to(device):requires_grad_()
    local b = bias and zorch.randn(o, {dtype = dt}):to(device):requires_grad_() or nil
    local y = zorch.conv2d(x, wt, b, opts)
    local r = zorch.randn(y.shape, {dtype = dt}):to(device)
    ;(y * r):sum():backward()
    return {y:detach(), x.grad, wt.grad, b and b.grad or zorch.zeros(1):to(device)}
  end
  local cases = {
    {"3x3 pad 1, bias", 8, 16, 14, 14, 32, {3, 3}, {padding = 1}, true},
    {"1x1", 4, 64, 7, 7, 128, {1, 1}, {}, true},
    {"5x5 stride 2, no bias", 3, 3, 32, 29, 8, {5, 5}, {stride = 2, padding = 2}, false},
    {"3x2 dilation (2, 1), stride (1, 2)", 2, 5, 17, 19, 7, {3, 2}, {dilation = {2, 1}, stride = {1, 2}}, true},
    {"7x7 stride 2 pad 3 (a stem)", 2, 3, 64, 64, 16, {7, 7}, {stride = 2, padding = 3}, true},
  }
  for _, dt in ipairs({"float32", "float64"}) do
    for _, cs in ipairs(cases) do
      local cc = conv_case("cpu", dt, table.unpack(cs, 2))
      local cg = conv_case("cuda", dt, table.unpack(cs, 2))
      for i, name in ipairs({"output", "input gradient", "weight gradient", "bias gradient"}) do
        same(cc[i], cg[i], MM[dt] * 10, ("conv2d %s %s: %s"):format(dt, cs[1], name))
      end
    end
  end
  -- float32 without TF32 is full float32 (cuDNN's FMA math), as the GEMMs are:
  -- against float64 on the CPU from the same float32 inputs
  do
    zorch.manual_seed(42)
    local x, w = zorch.randn(8, 16, 14, 14), zorch.randn(32, 16, 3, 3)
    local r = zorch.randn(8, 32, 14, 14)
    local function run(device, dt)
      local xd = x:to(dt):to(device):requires_grad_()
      local wd = w:to(dt):to(device):requires_grad_()
      local y = zorch.conv2d(xd, wd, nil, {padding = 1})
      ;(y * r:to(dt):to(device)):sum():backward()
      return {y:detach(), xd.grad, wd.grad}
    end
    local exact, got = run("cpu", "float64"), run("cuda", "float32")
    for i, name in ipairs({"output", "input gradient", "weight gradient"}) do
      local e = rel(exact[i], got[i])
      tap.ok(e < 1e-5, ("conv2d float32 on cuda keeps float32 accuracy without TF32: %s (%.2g)"):format(name, e))
    end
  end
  -- deterministic by default: the same convolution twice gives the same bits
  local g1 = conv_case("cuda", "float32", table.unpack(cases[1], 2))
  local g2 = conv_case("cuda", "float32", table.unpack(cases[1], 2))
  for i, name in ipairs({"output", "input gradient", "weight gradient", "bias gradient"}) do
    tap.ok((g1[i] - g2[i]):abs():max():item() == 0, "conv2d on cuda repeats bit for bit: " .. name)
  end
  -- batch norm: affine training (cuDNN), without running stats, without affine
  -- and with the weight frozen (the own kernels), eval (own kernels)
  local function bn(device, shape, opts)
    zorch.manual_seed(43)
    local c = shape[2]
    local x = zorch.randn(shape):to(device):requires_grad_()
    local w = opts.affine and zorch.randn(c):to(device) or nil
    local b = opts.affine and zorch.randn(c):to(device) or nil
    if w and not opts.frozen then w:requires_grad_(); b:requires_grad_() end
    local rm = opts.running and zorch.randn(c):to(device) or nil
    local rv = opts.running and (zorch.rand(c) + 0.5):to(device) or nil
    local y = zorch.batch_norm(x, rm, rv, w, b, opts.training, 0.2, 1e-3)
    ;(y * zorch.randn(shape):to(device)):sum():backward()
    local z = zorch.zeros(1):to(device)
    return {y:detach(), x.grad, w and w.grad or z, b and b.grad or z, rm or z, rv or z}
  end
  for _, case in ipairs({
    {"affine training (N, C, H, W)", {16, 8, 9, 7}, {affine = true, running = true, training = true}},
    {"affine training (N, C)", {200, 6}, {affine = true, running = true, training = true}},
    {"affine training, no running stats", {4, 3, 50}, {affine = true, training = true}},
    {"training without affine", {8, 4, 5, 5}, {running = true, training = true}},
    {"training with the weight frozen", {8, 4, 5, 5}, {affine = true, frozen = true, running = true, training = true}},
    {"eval", {8, 4, 5, 5}, {affine = true, running = true, training = false}},
  }) do
    local bc, bg = bn("cpu", case[2], case[3]), bn("cuda", case[2], case[3])
    for i, name in ipairs({"output", "input gradient", "weight gradient", "bias gradient", "running_mean",
                           "running_var (unbiased)"}) do
      same(bc[i], bg[i], 1e-4, "batch_norm " .. case[1] .. ": " .. name)
    end
  end
  -- the own kernels, in a process with cuDNN switched off, give the CPU's values too
  local script = tap.temp_file([[
    local zorch = require "zorch"
    assert(zorch.cuda.available(), "no cuda device") -- (opens the module, so info() describes it)
    local info = zorch.cuda.info()
    assert(info:find("ZORCH_CUDNN=0", 1, true) or info:find("cuDNN not built", 1, true), info)
    zorch.manual_seed(5)
    local x, w = zorch.randn(4, 6, 11, 11), zorch.randn(9, 6, 3, 3)
    local d1 = (zorch.conv2d(x, w, nil, {padding = 1}) -
                zorch.conv2d(x:to("cuda"), w:to("cuda"), nil, {padding = 1}):to("cpu")):abs():max():item()
    local g, b = zorch.randn(6), zorch.randn(6)
    local d2 = (zorch.batch_norm(x, nil, nil, g, b, true, 0.1, 1e-5) - zorch.batch_norm(x:to("cuda"), nil, nil,
                g:to("cuda"), b:to("cuda"), true, 0.1, 1e-5):to("cpu")):abs():max():item()
    print(("diff %g %g"):format(d1, d2))
  ]], ".lua")
  local out = tap.run("ZORCH_CUDNN=0 " .. tap.zorch() .. " " .. script)
  local d1, d2 = out:match("diff (%S+) (%S+)")
  tap.ok(d1 and tonumber(d1) < 1e-3 and tonumber(d2) < 1e-4,
         "with ZORCH_CUDNN=0 the own conv2d and batch_norm kernels run and match the CPU: " .. out:gsub("\n", " "))
  os.remove(script)
end

-- TF32: off by default (full float32); on, float32 GEMMs round inputs to 10 bits
local m1, m2 = zorch.randn(512, 512), zorch.randn(512, 512)
local exact = zorch.matmul(m1:double(), m2:double())
local r_off = rel(exact, zorch.matmul(m1:to("cuda"), m2:to("cuda")))
zorch.cuda.allow_tf32(true)
local r_on = rel(exact, zorch.matmul(m1:to("cuda"), m2:to("cuda")))
zorch.cuda.allow_tf32(false)
tap.ok(not zorch.cuda.allow_tf32() and r_off < 1e-5 and r_on > r_off and r_on < 1e-2,
       ("TF32 is opt-in: float32 GEMM error %.2g off, %.2g on"):format(r_off, r_on))

-- the reference model trains the same on both devices
local function train(device)
  zorch.manual_seed(5)
  local model = zorch.nn.Sequential(zorch.nn.Linear(10, 20), zorch.nn.ReLU(), zorch.nn.Linear(20, 2)):to(device)
  local X, Y = zorch.randn(256, 10):to(device), zorch.randn(256, 2):to(device)
  local opt = zorch.optim.Adam(model:parameters(), {lr = 0.01})
  for s = 0, 7 do
    local x, y = X:narrow(1, s * 32 + 1, 32), Y:narrow(1, s * 32 + 1, 32)
    local loss = zorch.mse_loss(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
  end
  return model:state_dict()["2.weight"]
end
same(train("cpu"), train("cuda"), 1e-5, "SimpleNet, 8 Adam steps: the GPU matches the CPU")

-- SGD's kernel (momentum, dampening, Nesterov, weight decay, none), per float
-- dtype, on parameters of 1 and 1000 elements, three steps
for _, dt in ipairs({"float32", "float64"}) do
  for _, o in ipairs({{lr = 0.1}, {lr = 0.1, momentum = 0.9, nesterov = true, weight_decay = 0.01},
                      {lr = 0.05, momentum = 0.5, dampening = 0.3}}) do
    local function sgd(device)
      zorch.manual_seed(14)
      local ps = {zorch.randn(1000, {dtype = dt}):to(device):requires_grad_(),
                  zorch.randn(1, {dtype = dt}):to(device):requires_grad_()}
      local opt = zorch.optim.SGD(ps, o)
      local w = zorch.randn(1000, {dtype = dt}):to(device)
      for _ = 1, 3 do
        opt:zero_grad()
        local loss = (ps[1] * ps[1] * w):sum() + (ps[2] * ps[2]):sum()
        loss:backward()
        opt:step()
      end
      return ps
    end
    local c, g = sgd("cpu"), sgd("cuda")
    local what = ("%s: SGD momentum %s nesterov %s"):format(dt, tostring(o.momentum or 0), tostring(o.nesterov or false))
    same(c[1], g[1], MM[dt], what .. ": a parameter of 1000")
    same(c[2], g[2], MM[dt], what .. ": a parameter of 1")
  end
end

-- loaders hand batches over on the device, from CPU or GPU datasets
do
  local X, Y = zorch.randn(20, 3), zorch.randn(20, 1)
  local l1 = zorch.data.DataLoader(zorch.data.TensorDataset(X, Y), {batch_size = 8, device = "cuda"})
  local l2 = zorch.data.DataLoader(zorch.data.TensorDataset(X:to("cuda"), Y:to("cuda")), {batch_size = 8})
  local it1, it2 = l1:iter(), l2:iter()
  local x1, y1 = it1()
  local x2 = it2()
  tap.ok(x1:device() == "cuda:0" and y1:device() == "cuda:0" and x2:device() == "cuda:0" and rel(x1:to("cpu"), x2) == 0,
         "a loader with device = \"cuda\" and a dataset of GPU tensors give the same batches on the GPU")
end

-- the ZeRO engine on the GPU, every stage, against the CPU (one process)
local function engine_run(device, stage, precision)
  zorch.manual_seed(6)
  local model = zorch.nn.Sequential(zorch.nn.Linear(10, 32), zorch.nn.ReLU(), zorch.nn.Linear(32, 2))
  local X, Y = zorch.randn(128, 10), zorch.randn(128, 2)
  local e = zorch.Engine{zero_stage = stage, gradient_clipping = 0.5, device = device, precision = precision,
                         reduce_bucket_size = 100}
  local m, _, opt = e:prepare(model, nil, zorch.optim.Adam(model:parameters(), {lr = 0.01}))
  for s = 0, 7 do
    local x, y = X:narrow(1, s * 16 + 1, 16):to(e.device), Y:narrow(1, s * 16 + 1, 16):to(e.device)
    local loss = zorch.mse_loss(m(x), y)
    opt:zero_grad(); e:backward(loss); opt:step()
  end
  e:gather()
  local w = m:state_dict()["2.weight"]:clone() -- (a copy, kept after the release)
  e:release()
  return w
end
for stage = 0, 3 do
  same(engine_run("cpu", stage, "fp32"), engine_run("cuda", stage, "fp32"), 1e-5,
       ("ZeRO stage %d on the GPU matches the CPU"):format(stage))
end
same(engine_run("cpu", 2, "bf16"), engine_run("cuda", 2, "bf16"), 2e-2, "ZeRO stage 2 in bf16 on the GPU")

-- parameter groups on the GPU: each group's runs of the flat buffer stepped with its options
local function grouped_run(device, stage)
  zorch.manual_seed(6)
  local model = zorch.nn.Sequential(zorch.nn.Linear(10, 32), zorch.nn.ReLU(), zorch.nn.Linear(32, 2))
  local X, Y = zorch.randn(128, 10), zorch.randn(128, 2)
  local w, b = {}, {}
  for _, p in ipairs(model:parameters()) do table.insert(p:dim() >= 2 and w or b, p) end
  local e = zorch.Engine{zero_stage = stage, device = device, reduce_bucket_size = 100}
  local m, _, opt = e:prepare(model, nil, zorch.optim.AdamW({{params = w, weight_decay = 0.1},
                                                             {params = b, weight_decay = 0, lr = 0.03}}, {lr = 0.01}))
  for s = 0, 7 do
    local x, y = X:narrow(1, s * 16 + 1, 16):to(e.device), Y:narrow(1, s * 16 + 1, 16):to(e.device)
    opt:zero_grad(); e:backward(zorch.mse_loss(m(x), y)); opt:step()
  end
  e:gather()
  local sd = m:state_dict()
  local r = zorch.cat({sd["2.weight"]:reshape({-1}), sd["2.bias"], sd["0.bias"]}) -- (a copy, kept after the release)
  e:release()
  return r
end
for _, stage in ipairs({0, 3}) do
  same(grouped_run("cpu", stage), grouped_run("cuda", stage), 1e-5,
       ("parameter groups at ZeRO stage %d on the GPU match the CPU"):format(stage))
end

-- stage 3 on a GPU gives released memory back, and a released parameter is refused by name
do
  local model = zorch.nn.Sequential(zorch.nn.Linear(256, 1024), zorch.nn.ReLU(), zorch.nn.Linear(1024, 4))
  local e = zorch.Engine{zero_stage = 3, device = "cuda"}
  local m = e:prepare(model)
  local held = zorch.cuda.memory_stats().in_use
  e:gather()
  local gathered = zorch.cuda.memory_stats().in_use
  e:release()
  tap.ok(gathered > held and zorch.cuda.memory_stats().in_use == held,
         ("stage 3 gathers and gives back memory on the GPU (%d, %d, %d bytes)"):format(held, gathered,
         zorch.cuda.memory_stats().in_use))
  local p1 = m:parameters()[1]
  tap.raises("a released parameter is refused by name", function() return p1 + 1 end, "add", "released")
end

-- the collectives through NCCL (one rank), and the reference job on the GPU
local bin = tap.zorch()
local dir = tap.tmpdir()
local cpu_out, cpu_ok = tap.run(("%s ../models/simple_net.lua --steps 30 --quiet --save %s/cpu.safetensors --zero-stage 3")
  :format(bin, dir))
-- runs simple_net.lua on the GPU (cmd: how zorch is started) and compares its
-- saved model with the CPU run's
local function matches_cpu(desc, cmd, flags, name)
  local out, ok = tap.run(("%s ../models/simple_net.lua --steps 30 --quiet --device cuda %s --save %s/%s.safetensors")
    :format(cmd, flags, dir, name))
  local good = cpu_ok and ok
  if good then
    local c, g = zorch.load(dir .. "/cpu.safetensors"), zorch.load(dir .. "/" .. name .. ".safetensors")
    local worst = 0
    for k, v in pairs(c) do worst = math.max(worst, rel(v, g[k]:to("cuda"))) end
    good = worst < 1e-5
  end
  tap.ok(good, desc .. (good and "" or (": " .. cpu_out .. out)))
end
for _, stage in ipairs({1, 2, 3}) do
  matches_cpu(("simple_net.lua --device cuda at stage %d through NCCL matches the CPU run"):format(stage),
              "ZORCH_NCCL_SINGLE=1 " .. bin, "--zero-stage " .. stage, "gpu" .. stage)
end
-- several GPUs (one rank each) over NCCL, where the machine has them
if zorch.cuda.device_count() >= 2 and tap.has_mpi(bin) then
  local n = zorch.cuda.device_count() >= 4 and 4 or 2 -- global batch 64, as the CPU run
  for _, stage in ipairs({0, 2, 3}) do
    matches_cpu(("%d GPUs at stage %d over NCCL match one CPU process"):format(n, stage), bin .. " launch -n " .. n,
                ("--zero-stage %d --batch-size %d"):format(stage, 64 // n), "multi" .. stage)
  end
end
os.execute("rm -rf " .. dir)

-- the allocator: blocks reused (no cudaMalloc per op), out-of-memory as an error
local x = zorch.ones(1000, {device = "cuda"})
-- (the collector stopped in both loops: each keeps every block alive, so the
-- second needs exactly the blocks the first made and freed into the cache)
collectgarbage()
collectgarbage("stop")
for _ = 1, 200 do local _ = (x + 1) * 2 end -- warm
collectgarbage("restart")
collectgarbage()
local before = zorch.cuda.memory_stats()
collectgarbage("stop")
for _ = 1, 200 do local _ = (x + 1) * 2 end
collectgarbage("restart")
collectgarbage()
local after = zorch.cuda.memory_stats()
tap.ok(after.mallocs == before.mallocs and after.in_use <= before.in_use,
       ("200 steps of ops reuse cached blocks (%d cudaMalloc calls before, %d after)"):format(before.mallocs, after.mallocs))
local ok_big, berr = pcall(zorch.zeros, 1 << 40, {device = "cuda"})
tap.ok(not ok_big and tostring(berr):find("out of memory", 1, true) and tostring(berr):find("held", 1, true),
       "a GPU out-of-memory is a Lua error saying what was asked and what is held: " .. tostring(berr))
tap.ok(zorch.ones(4, {device = "cuda"}):sum():item() == 4, "and the device works after it")
zorch.cuda.empty_cache()
tap.ok(zorch.cuda.memory_stats().cached == 0, "empty_cache gives the cached blocks back")
zorch.cuda.synchronize()
local mixed, merr = pcall(function() return zorch.ones(4, {device = "cuda"}) + zorch.ones(4) end)
tap.ok(not mixed and tostring(merr):find("different devices", 1, true), "mixing devices is an error naming them")

-- models/gpt2.lua on the GPU: the first 10 losses of the PyTorch parity run
-- (tests/golden/gen_gpt2.py), and bf16 within 5% of them; the embedding's
-- backward (index_add) in 16-bit floats equals the CPU's bit for bit
do
  for _, dt in ipairs({"bfloat16", "float16"}) do
    local w = zorch.randn(50, 8)
    local idx = zorch.randint(1, 50, {300})
    local g = zorch.randn(300, 8):to(dt)
    local function grad(dev)
      local p = w:to(dt):to(dev):requires_grad_(true)
      zorch.sum(zorch.embedding(p, idx:to(dev)) * g:to(dev)):backward()
      return p.grad:to("cpu"):float()
    end
    tap.ok((grad("cuda") - grad("cpu")):abs():max():item() == 0,
      ("embedding backward in %s: the GPU's sums equal the CPU's bit for bit"):format(dt))
  end
  local want = {}
  for line in io.lines("golden/gpt2_losses.txt") do
    local s, l = line:match("^(%d+) (%S+)$")
    want[tonumber(s)] = tonumber(l)
  end
  local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
  for _, prec in ipairs({"fp32", "bf16"}) do
    local p = io.popen(("%s ../models/gpt2.lua --device cuda --precision %s --init golden/gpt2_init.safetensors " ..
      "--heads 4 --steps 10 --lr 3e-3 --min-lr 3e-4 --warmup 3 --beta2 0.99 --weight-decay 1 --clip 1 " ..
      "--no-shuffle --batch-size 4 --val-batches 1 --sample 40 2>&1"):format(bin, prec))
    local out = p:read("a")
    p:close()
    local worst = 0
    for s = 1, 10 do
      local l = tonumber(out:match(("step %d/10 | loss (%%S+)"):format(s)))
      worst = math.max(worst, l and math.abs(l - want[s]) / want[s] or math.huge)
    end
    local tol = prec == "fp32" and 1e-4 or 5e-2
    tap.ok(worst <= tol and out:find("---- end ----", 1, true),
      ("gpt2 on the GPU, %s: PyTorch's 10 losses (worst relative difference %.2g), then 40 sampled tokens"):format(prec, worst))
    if worst > tol then print("# " .. out:gsub("\n", "\n# ")) end
  end
end

-- activation checkpointing on the GPU: engine:checkpoint with cpu_checkpointing
-- (the saved input waits on the host) gives the plain gradients, dropout's mask replayed
do
  local e = zorch.Engine{device = "cuda", cpu_checkpointing = true}
  zorch.manual_seed(12)
  local m = zorch.nn.Sequential(zorch.nn.Linear(8, 8), zorch.nn.ReLU(), zorch.nn.Dropout(0.3)):to("cuda")
  local x = zorch.randn({4, 8}, {device = "cuda"}):requires_grad_()
  zorch.manual_seed(13)
  e:checkpoint(m, x):pow(2):sum():backward()
  local gx, gw = x.grad, m["0"].weight.grad
  x.grad, m["0"].weight.grad = nil, nil
  zorch.manual_seed(13)
  m(x):pow(2):sum():backward()
  tap.ok((gx - x.grad):abs():max():item() == 0 and (gw - m["0"].weight.grad):abs():max():item() == 0,
         "engine:checkpoint on cuda with cpu_checkpointing gives the plain gradients")
end

-- the declared ops (include/zorch_ops.h): each DEVICE case on CUDA against the
-- CPU, forward and the gradients of a and b
local function dims(s) return assert(load("return {" .. s:sub(2, -2) .. "}"))() end
for _, c in ipairs(Z._op_cases()) do
  if c.kind == "device" then
    zorch.manual_seed(21)
    local a, b = zorch.randn(dims(c.a)), zorch.randn(dims(c.b))
    local ga, gb = a:to("cuda"):requires_grad_(), b:to("cuda"):requires_grad_()
    a:requires_grad_()
    b:requires_grad_()
    local run = assert(load("local a, b = ...; return " .. c.code, "=" .. c.op, "t", {zorch = zorch}))
    -- the same seed for both runs: a case's code may draw (a random mask)
    zorch.manual_seed(22)
    local y = run(a, b)
    zorch.manual_seed(22)
    local gy = run(ga, gb)
    same(y, gy, c.rtol, c.code .. ": cuda matches the cpu")
    if y.requires_grad then -- (qlinear has no gradient)
      local w = zorch.randn(y.shape)
      local l, gl = (y * w):sum(), (gy * w:to("cuda")):sum()
      l:backward()
      gl:backward()
      same(a.grad, ga.grad, c.rtol, c.code .. ": the gradient of a on cuda matches the cpu")
      if b.grad then same(b.grad, gb.grad, c.rtol, c.code .. ": the gradient of b on cuda matches the cpu") end
    end
  end
end
tap.done()
