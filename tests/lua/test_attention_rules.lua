-- zorch.attention's rules (grouped key/value heads, a bool or additive mask,
-- segment ids, the sliding window) against the same attention composed of
-- matmul, a (B, H, Tq, Tk) mask and softmax, at lengths the 64-wide blocks do
-- not divide (so whole key blocks are skipped); in-place heads, rows that see
-- no key. (test_attention.lua checks the grouped backward on 1 and 4 threads.)
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

-- the keys each query sees, as a (B, 1, Tq, Tk) tensor of ones (and zeros):
-- causal and the window aligned to the bottom right, equal segment ids
local function keep_of(b, tq, tk, o)
  local i = zorch.arange(tq):view(tq, 1) + (tk - tq)
  local j = zorch.arange(tk):view(1, tk)
  local keep = zorch.ones(b, 1, tq, tk)
  local function both(m) keep = keep * m:float() end
  if o.causal then both(zorch.le(j, i)) end
  if o.window then both(zorch.gt(j, i - o.window)) end
  if o.segments then
    local qs = o.q_segments or o.segments:narrow(2, tk - tq + 1, tq)
    both(zorch.eq(qs:view(b, 1, tq, 1), o.segments:view(b, 1, 1, tk)))
  end
  if o.mask and o.mask:dtype() == "bool" then both(o.mask) end
  return keep
end

local function composed(q, k, v, o)
  local B, H, tq, D = q:size(1), q:size(2), q:size(3), q:size(4)
  local hkv, tk = k:size(2), k:size(3)
  if hkv < H then -- each key/value head repeated for its group
    local g = H // hkv
    k = k:unsqueeze(3):expand(B, hkv, g, tk, D):reshape(B, H, tk, D)
    v = v:unsqueeze(3):expand(B, hkv, g, tk, D):reshape(B, H, tk, D)
  end
  local s = zorch.matmul(q, k:transpose(3, 4)) * (1 / math.sqrt(D))
  if o.mask and o.mask:dtype() ~= "bool" then s = s + o.mask end
  s = zorch.masked_fill(s, zorch.eq(keep_of(B, tq, tk, o), 0), -math.huge)
  return zorch.matmul(zorch.softmax(s, -1), v)
end

-- output and gradients of sum(out * w), fused and composed
local function run(f, q, k, v, w)
  q.grad, k.grad, v.grad = nil, nil, nil
  local o = f();
  (o * w):sum():backward()
  return {o, q.grad, k.grad, v.grad}
end

local function ids(b, lens) -- a row of runs of ids per batch
  local rows = {}
  for r = 1, b do
    local row = {}
    for s, n in ipairs(lens[r]) do for _ = 1, n do row[#row + 1] = 10 * r + s end end
    rows[r] = row
  end
  return zorch.tensor(rows):long()
end

zorch.manual_seed(11)
local B, T = 2, 200
local seg = ids(B, {{37, 101, 62}, {130, 5, 65}})
local cases = {
  {"grouped heads, causal", {2, 4, T, 16}, {2, 2, T, 16}, {causal = true}},
  {"grouped heads, a window of 50", {2, 4, T, 16}, {2, 1, T, 16}, {causal = true, window = 50}},
  {"segments of 37, 101 and 62", {2, 4, T, 16}, {2, 2, T, 16}, {causal = true, segments = seg}},
  {"segments and a window of 30", {2, 2, T, 8}, {2, 2, T, 8}, {causal = true, segments = seg, window = 30}},
  {"segments without causal", {2, 2, T, 8}, {2, 1, T, 8}, {segments = seg}},
  {"70 queries over 200 keys, segments", {2, 4, 70, 16}, {2, 2, T, 16}, {causal = true, segments = seg}},
  {"a key padding mask (B, 1, 1, Tk)", {2, 2, 90, 8}, {2, 2, T, 8},
   {mask = zorch.cat({zorch.ones(1, 1, 1, 150), zorch.zeros(1, 1, 1, 50)}, 4):expand(2, 1, 1, T):gt(0)}},
  {"an additive mask (Tq, Tk), causal", {1, 2, 130, 8}, {1, 2, 130, 8},
   {causal = true, mask = zorch.randn(130, 130, {dtype = "float64"})}},
}
for _, c in ipairs(cases) do
  local function leaf(shape) return zorch.randn(shape, {dtype = "float64", requires_grad = true}) end
  local q, k, v = leaf(c[2]), leaf(c[3]), leaf(c[3])
  local w = zorch.randn(c[2], {dtype = "float64"})
  local a = run(function() return zorch.attention(q, k, v, c[4]) end, q, k, v, w)
  local b = run(function() return composed(q, k, v, c[4]) end, q, k, v, w)
  tap.close(a[1], b[1], 1e-9, c[1] .. ": the output is the composed attention's")
  tap.close(a[2], b[2], 1e-8, c[1] .. ": dq matches")
  tap.close(a[3], b[3], 1e-8, c[1] .. ": dk matches (summed over the group)")
  tap.close(a[4], b[4], 1e-8, c[1] .. ": dv matches")
end

-- a query whose segment has no key sees nothing: zeros, and no gradient from it
do
  local q = zorch.randn(1, 2, 3, 8):requires_grad_()
  local k, v = zorch.randn(1, 1, 6, 8):requires_grad_(), zorch.randn(1, 1, 6, 8):requires_grad_()
  local o = zorch.attention(q, k, v, {segments = zorch.tensor({{1, 1, 2, 2, 2, 3}}):long(),
                                      q_segments = zorch.tensor({{2, 9, 1}}):long()})
  o:sum():backward()
  tap.ok(o:select(3, 2):abs():max():item() == 0 and o:select(3, 1):abs():max():item() > 0,
         "a query of a segment without keys gets zeros, the others not")
  tap.ok(q.grad:select(3, 2):abs():max():item() == 0, "and no gradient reaches it")
end

-- grouped heads viewed in place, as a Llama's projections give them
-- (B, T, H * D):view(B, T, H, D):transpose(2, 3), equal copies of them bit for bit
do
  local H, Hkv, D = 4, 2, 8
  local function run_heads(copy)
    zorch.manual_seed(6)
    local xq = zorch.randn(B, T, H * D):requires_grad_()
    local xk, xv = zorch.randn(B, T, Hkv * D):requires_grad_(), zorch.randn(B, T, Hkv * D):requires_grad_()
    local function heads(x, n)
      local h = x:view(B, T, n, D):transpose(2, 3)
      return copy and h:contiguous() or h
    end
    local y = zorch.attention(heads(xq, H), heads(xk, Hkv), heads(xv, Hkv), {causal = true, segments = seg})
    y:sum():backward()
    return y, xq.grad, xk.grad
  end
  local y1, gq1, gk1 = run_heads(true)
  local y2, gq2, gk2 = run_heads(false)
  tap.close(y2, y1, 0, "grouped in-place heads give the output of copies")
  tap.close(gq2, gq1, 0, "and q's gradient")
  tap.close(gk2, gk1, 0, "and k's gradient, summed over the group")
end

tap.done()
