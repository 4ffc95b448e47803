-- zorch.attention against the same attention composed of matmul, masked_fill and
-- softmax (values and gradients), its memory at a long sequence, zorch.multinomial's
-- statistics and reproducibility, and the ops a GPT-2 needs at (B, T, V) shapes.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

-- the peak resident memory of the process so far, in kB
local function peak_kb()
  local f = io.open("/proc/self/status")
  if not f then return 0 end
  local s = f:read("a")
  f:close()
  return tonumber(s:match("VmHWM:%s*(%d+)")) or 0
end

local sanitized = os.getenv("ZORCH_TEST_SANITIZED") ~= nil

-- ---- memory: T = 2000 keeps no (T, T) scores --------------------------------------------
do
  local B, H, T, D = 1, 4, 2000, 16
  local q = zorch.randn(B, H, T, D, {requires_grad = true})
  local k = zorch.randn(B, H, T, D, {requires_grad = true})
  local v = zorch.randn(B, H, T, D, {requires_grad = true})
  local before = peak_kb()
  local out = zorch.attention(q, k, v, {causal = true})
  out:sum():backward()
  local grew = peak_kb() - before
  local scores_kb = B * H * T * T * 4 // 1024 -- one float32 score matrix
  tap.ok(out:size()[3] == T and q.grad ~= nil and k.grad ~= nil and v.grad ~= nil,
         "attention forward and backward at T = 2000")
  if sanitized then
    tap.ok(true, "# SKIP resident memory is not meaningful under a sanitizer")
  else
    tap.ok(grew < scores_kb // 4, ("peak memory grew %d kB, under a quarter of one (T, T) score " ..
           "matrix (%d kB)"):format(grew, scores_kb))
  end
end

-- ---- the composed version ---------------------------------------------------------------
local function composed(q, k, v, causal, scale)
  local nd = q:dim()
  local tq, tk, d = q:size()[nd - 1], k:size()[nd - 1], q:size()[nd]
  local s = zorch.matmul(q, k:transpose(-2, -1)) * (scale or 1 / math.sqrt(d))
  if causal then -- query i sees keys j <= i + tk - tq
    local i = zorch.arange(tq):view(tq, 1)
    local j = zorch.arange(tk):view(1, tk)
    s = zorch.masked_fill(s, zorch.gt(j, i + (tk - tq)), -math.huge)
  end
  return zorch.matmul(zorch.softmax(s, -1), v)
end

-- values and the gradients of sum(out * w) for both versions
local function both(shape_q, shape_kv, causal, scale, dtype)
  local function leaf(shape) return zorch.randn(shape, {dtype = dtype, requires_grad = true}) end
  local q, k, v = leaf(shape_q), leaf(shape_kv), leaf(shape_kv)
  local w = zorch.randn(shape_q, {dtype = dtype})
  local res = {}
  for n, f in pairs{fused = function() return zorch.attention(q, k, v, {causal = causal, scale = scale}) end,
                    composed = function() return composed(q, k, v, causal, scale) end} do
    q.grad, k.grad, v.grad = nil, nil, nil
    local o = f();
    (o * w):sum():backward()
    res[n] = {o, q.grad, k.grad, v.grad}
  end
  return res.fused, res.composed
end

local cases = {
  {{2, 3, 5, 8}, {2, 3, 5, 8}, true},
  {{2, 3, 5, 8}, {2, 3, 5, 8}, false},
  {{1, 2, 3, 7}, {1, 2, 9, 7}, true},        -- Tq < Tk: a query block over a key/value cache
  {{1, 2, 1, 16}, {1, 2, 12, 16}, true},     -- one query sees every key
  {{2, 100, 5}, {2, 130, 5}, false, 0.25},   -- (BH, T, D), blocks that do not divide T
  {{1, 4, 129, 64}, {1, 4, 129, 64}, true},
  {{1, 1, 300, 33}, {1, 1, 300, 33}, true, 0.1},
}
for _, dt in ipairs{"float64", "float32"} do
  local tol = dt == "float64" and 1e-9 or 2e-4
  for _, c in ipairs(cases) do
    local a, b = both(c[1], c[2], c[3], c[4], dt)
    local what = ("%s q %s kv %s causal %s"):format(dt, table.concat(c[1], "x"), table.concat(c[2], "x"),
                                                     tostring(c[3]))
    tap.close(a[1], b[1], tol, what .. ": output matches the composed attention")
    tap.close(a[2], b[2], tol * 10, what .. ": dq matches")
    tap.close(a[3], b[3], tol * 10, what .. ": dk matches")
    tap.close(a[4], b[4], tol * 10, what .. ": dv matches")
  end
end

-- the backward splits its work differently with fewer (key/value) heads than
-- threads; the sums run in the same order, so the gradients are the same bit
-- for bit (also for grouped heads, summed over their group, under segments and
-- a window)
do
  local T = 200
  local seg = zorch.cat({zorch.zeros(1, 37), zorch.ones(1, 101), zorch.full({1, 62}, 2)}, 2):long()
  local cases = {{"2 heads", 2, 2, {causal = true}},
                 {"4 heads over 2 key/value heads, segments, a window", 4, 2,
                  {causal = true, segments = seg, window = 80}}}
  for _, c in ipairs(cases) do
    local function grads(threads)
      zorch.set_num_threads(threads)
      zorch.manual_seed(4)
      local q = zorch.randn(1, c[2], T, 24):requires_grad_()
      local k, v = zorch.randn(1, c[3], T, 24):requires_grad_(), zorch.randn(1, c[3], T, 24):requires_grad_()
      zorch.attention(q, k, v, c[4]):sum():backward()
      return {q.grad, k.grad, v.grad}
    end
    local prev = zorch.get_num_threads()
    local one, many = grads(1), grads(4)
    zorch.set_num_threads(prev)
    for i, n in ipairs{"dq", "dk", "dv"} do
      tap.close(one[i], many[i], 0, ("%s is the same on 1 thread and on 4 (%s: the split backward)"):format(n, c[1]))
    end
  end
end

-- 16-bit inputs compute in float32 and come back in their dtype
do
  local q, k, v = zorch.randn(1, 2, 6, 8), zorch.randn(1, 2, 6, 8), zorch.randn(1, 2, 6, 8)
  local q16, k16, v16 = q:to("bfloat16"), k:to("bfloat16"), v:to("bfloat16")
  local o16 = zorch.attention(q16, k16, v16, {causal = true})
  tap.ok(o16:dtype() == "bfloat16", "bfloat16 inputs give a bfloat16 output")
  -- the same numbers in float32, rounded once at the end
  tap.close(o16:float(), zorch.attention(q16:float(), k16:float(), v16:float(), {causal = true}), 8e-3,
            "bfloat16 attention is float32's rounded")
end

-- the default scale is 1/sqrt(D); an explicit one is used as given
do
  local q, k, v = zorch.randn(1, 1, 4, 9), zorch.randn(1, 1, 4, 9), zorch.randn(1, 1, 4, 9)
  tap.close(zorch.attention(q, k, v), zorch.attention(q, k, v, {scale = 1 / 3}), 1e-6,
            "default scale is 1/sqrt(D)")
  tap.ok((zorch.attention(q, k, v, {scale = 1}) - zorch.attention(q, k, v)):abs():max():item() > 1e-4,
         "an explicit scale changes the result")
end

-- ---- multinomial --------------------------------------------------------------------------
do
  local p = zorch.tensor{1.0, 2.0, 3.0, 4.0} -- not normalised: probabilities 0.1 .. 0.4
  local n = 20000
  local s = zorch.multinomial(p, n, {replacement = true, generator = zorch.Generator(3)})
  tap.ok(s:dtype() == "int64" and s:size()[1] == n, "multinomial gives n int64 indices")
  local counts = {0, 0, 0, 0}
  for _, i in ipairs(s:totable()) do counts[i] = counts[i] + 1 end
  local worst = 0
  for i = 1, 4 do
    local pi = i / 10
    local z = math.abs(counts[i] - n * pi) / math.sqrt(n * pi * (1 - pi))
    worst = math.max(worst, z)
  end
  tap.ok(worst < 5, ("frequencies with replacement within 5 sigma (worst %.2f; counts %s)"):format(
    worst, table.concat(counts, " ")))

  -- rows sample independently; a zero weight is never drawn
  local rows = zorch.tensor{{0.0, 1.0, 0.0}, {5.0, 0.0, 5.0}}
  local r = zorch.multinomial(rows, 1000, {replacement = true}):totable()
  local ok_rows = true
  for _, i in ipairs(r[1]) do ok_rows = ok_rows and i == 2 end
  for _, i in ipairs(r[2]) do ok_rows = ok_rows and i ~= 2 end
  tap.ok(ok_rows, "each row draws from its own weights, never a zero one")

  -- n = 1 without replacement is a categorical draw: first-pick frequencies
  local firsts = {0, 0, 0, 0}
  local g = zorch.Generator(9)
  local big = zorch.tensor({1.0, 2.0, 3.0, 4.0}):view(1, 4):expand(n, 4):contiguous()
  for _, row in ipairs(zorch.multinomial(big, 1, {generator = g}):totable()) do
    firsts[row[1]] = firsts[row[1]] + 1
  end
  worst = 0
  for i = 1, 4 do
    local pi = i / 10
    worst = math.max(worst, math.abs(firsts[i] - n * pi) / math.sqrt(n * pi * (1 - pi)))
  end
  tap.ok(worst < 5, ("first draws without replacement within 5 sigma (worst %.2f)"):format(worst))

  -- without replacement: distinct indices, all of them when n = N
  local perm = zorch.multinomial(zorch.tensor{0.5, 0.1, 0.2, 0.2}, 4):totable()
  table.sort(perm)
  tap.ok(table.concat(perm, ",") == "1,2,3,4", "n = N without replacement draws every index once")
  -- the second draw of P(3 then ...) follows the weights left: P(second = 1 | first = 2)
  -- for weights {1, 1, 2}: after 3 (p 0.5), 1 and 2 are equally likely
  local seconds = {0, 0, 0}
  local wts = zorch.tensor({1.0, 1.0, 2.0}):view(1, 3):expand(n, 3):contiguous()
  local pairs_ = zorch.multinomial(wts, 2, {generator = zorch.Generator(21)}):totable()
  local after3 = 0
  for _, pr in ipairs(pairs_) do
    if pr[1] == 3 then after3 = after3 + 1; seconds[pr[2]] = seconds[pr[2]] + 1 end
  end
  local z = math.abs(seconds[1] - after3 / 2) / math.sqrt(after3 / 4)
  tap.ok(seconds[3] == 0 and z < 5, ("second draws follow the weights left (z %.2f)"):format(z))

  -- the same seed gives the same draws; the stream moves on otherwise
  local a = zorch.multinomial(p, 50, {replacement = true, generator = zorch.Generator(77)})
  local b = zorch.multinomial(p, 50, {replacement = true, generator = zorch.Generator(77)})
  tap.close(a, b, 0, "the same generator seed gives the same draws")
  local g2 = zorch.Generator(77)
  zorch.multinomial(p, 50, {replacement = true, generator = g2})
  local c2 = zorch.multinomial(p, 50, {replacement = true, generator = g2})
  tap.ok((a - c2):abs():sum():item() > 0, "a generator's next draws differ from its first")
  g2:manual_seed(77)
  tap.close(zorch.multinomial(p, 50, {replacement = true, generator = g2}), a, 0,
            "manual_seed restarts a generator")
  zorch.manual_seed(5)
  local d1 = zorch.multinomial(p, 30, {replacement = true})
  zorch.manual_seed(5)
  tap.close(zorch.multinomial(p, 30, {replacement = true}), d1, 0, "manual_seed makes the default stream repeat")

  tap.raises("negative weight", function() zorch.multinomial(zorch.tensor{1.0, -1.0}, 1) end,
             "multinomial", "row 1", "position 2")
  tap.raises("NaN weight", function() zorch.multinomial(zorch.tensor{1.0, 0 / 0}, 1) end, "multinomial", "finite")
  tap.raises("infinite weight", function() zorch.multinomial(zorch.tensor{1.0, math.huge}, 1) end,
             "multinomial", "finite")
  tap.raises("all-zero row", function() zorch.multinomial(zorch.tensor{{1.0, 1.0}, {0.0, 0.0}}, 1) end,
             "multinomial", "row 2", "no positive weight")
  tap.raises("n > N without replacement", function() zorch.multinomial(p, 5) end,
             "multinomial", "5 samples without replacement from 4 categories")
  tap.raises("more samples than positive weights", function()
    zorch.multinomial(zorch.tensor{1.0, 0.0, 1.0}, 3) end, "multinomial", "2 positive weights")
  tap.raises("3-d probs", function() zorch.multinomial(zorch.ones(2, 2, 2), 1) end,
             "multinomial", "(2, 2, 2)")
  tap.raises("bad generator", function() zorch.multinomial(p, 1, {generator = 3}) end,
             "multinomial", "generator")
end

-- ---- the ops a GPT-2 uses, at (B, T, V) -------------------------------------------------------
do
  local B, T, V, C = 2, 5, 11, 8
  local wte = zorch.randn(V, C, {requires_grad = true})
  local idx = zorch.randint(V, {B, T})
  local x = zorch.embedding(wte, idx)
  tap.ok(table.concat(x:size(), ",") == "2,5,8", "embedding (B, T) -> (B, T, C)")
  local h = zorch.layer_norm(x, {C}, zorch.ones(C), zorch.zeros(C))
  h = zorch.gelu(h, "tanh")
  local logits = zorch.matmul(h, wte:t())
  tap.ok(table.concat(logits:size(), ",") == "2,5,11", "tied head gives (B, T, V) logits")
  local targets = zorch.randint(V, {B, T})
  local loss = zorch.cross_entropy(logits:view(B * T, V), targets:view(B * T), {ignore_index = -1})
  loss:backward()
  tap.ok(loss:dim() == 0 and wte.grad ~= nil, "cross_entropy over (B*T, V) with int64 targets, backward")
  local last = logits:select(2, T) -- (B, V)
  local probs = zorch.softmax(last, -1)
  local am = zorch.argmax(last, -1)
  local tv, ti = zorch.topk(last, 3, -1)
  local picked = zorch.gather(last, 2, ti)
  tap.close(picked, tv, 0, "topk indices gather the topk values")
  tap.close(ti:narrow(2, 1, 1):view(B), am, 0, "argmax is topk's first index")
  local nxt = zorch.multinomial(probs, 1)
  tap.ok(table.concat(nxt:size(), ",") == "2,1" and nxt:dtype() == "int64", "multinomial on (B, V) softmax rows")
end

-- ---- heads viewed in place: q, k, v as strided views of a fused projection ------------
-- The CPU kernels read strided rows: the heads of a (B, T, 3C) projection,
-- narrowed and transposed, need no copies, and the result must be the same,
-- bit for bit, as from contiguous copies of them; the output is laid out as
-- (B, T, H, D), so transpose(2, 3) and reshape(B, T, C) are views.
-- (at 8 threads, more than B * H = 6 heads, the backward splits each head's
-- work in two passes and reads the heads in place; fewer, it copies a head at
-- a time into scratch)
local threads0 = zorch.get_num_threads()
for _, case in ipairs({{"float32", threads0}, {"float64", threads0}, {"float32", 8}}) do
  local dt = case[1]
  zorch.set_num_threads(case[2])
  local B, T, H, D = 2, 70, 3, 8
  local C = H * D
  local w = zorch.randn(B, T, C, {dtype = dt})
  local function run(copy, expand)
    zorch.manual_seed(5)
    local qkv = zorch.randn(B, T, 3 * C, {dtype = dt})
    qkv:requires_grad_(true)
    local function heads(i)
      local h = qkv:narrow(3, i * C + 1, C):view(B, T, H, D):transpose(2, 3)
      if expand then h = h:narrow(2, 1, 1):expand(B, H, T, D) end
      return copy and h:contiguous() or h
    end
    local y = zorch.attention(heads(0), heads(1), heads(2), {causal = true})
    local yt = y:transpose(2, 3)
    local viewed = yt:is_contiguous()
    zorch.sum(yt:reshape(B, T, C) * w):backward()
    return y, qkv.grad, viewed
  end
  local y1, g1 = run(true)
  local y2, g2, viewed = run(false)
  local name = ("%s, %d threads"):format(dt, case[2])
  tap.close(y2, y1, 0, name .. ": attention on in-place heads equals attention on copies")
  tap.close(g2, g1, 0, name .. ": the gradient of the fused projection is the same")
  tap.ok(viewed, name .. ": the output transposed back to (B, T, H, D) is contiguous")
  local y3, g3 = run(true, true)
  local y4, g4 = run(false, true)
  tap.close(y4, y3, 0, name .. ": broadcast heads (stride 0) read in place")
  tap.close(g4, g3, 0, name .. ": and their gradients summed over the broadcast heads")
  -- (BH, T, D) heads of a (T, BH, D) tensor, transposed
  local x = zorch.randn(T, B * H, 3 * D, {dtype = dt})
  local q, k, v = x:narrow(3, 1, D):transpose(1, 2), x:narrow(3, D + 1, D):transpose(1, 2),
                  x:narrow(3, 2 * D + 1, D):transpose(1, 2)
  tap.close(zorch.attention(q, k, v), zorch.attention(q:contiguous(), k:contiguous(), v:contiguous()),
            0, name .. ": 3-d strided heads")
  -- the last 5 queries over all T keys (a cache's shape), causal, in place
  local q5 = x:narrow(1, T - 4, 5):narrow(3, 1, D):transpose(1, 2)
  tap.close(zorch.attention(q5, k, v, {causal = true}),
            zorch.attention(q5:contiguous(), k:contiguous(), v:contiguous(), {causal = true}),
            0, name .. ": 5 strided queries over " .. T .. " keys, causal")
end
zorch.set_num_threads(threads0)

tap.done()
