-- nn.rope_tables and zorch.rope (lua/zorch/nn/attention.lua, include/zorch_ops.h):
-- the tables against transformers' LlamaRotaryEmbedding (lua/nn/rope.txt, from
-- lua/nn/gen_rope.py), the default and Llama 3's scaling; the cache; zorch.rope
-- against the composed ops, values and gradients; bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok = tap.ok
local function bad(fn, msg) return tap.raises(msg, fn, msg) end
local nn = zorch.nn

local G = require("golden")("lua/nn/rope.txt")
local want, fixed, leaf = G.want, G.fixed, G.leaf

-- worst error of t against the golden list: absolute, and relative where the
-- value is small (the slow frequencies Llama 3's factor divides)
local function errs(t, exp)
  local g = G.flat(t)
  if #g ~= #exp then return math.huge, math.huge end
  local ea, er = 0, 0
  for i = 1, #g do
    local d = math.abs(g[i] - exp[i])
    ea = math.max(ea, d)
    if math.abs(exp[i]) > 0 and math.abs(exp[i]) < 1e-2 then er = math.max(er, d / math.abs(exp[i])) end
  end
  return ea, er
end

local function check_tables(name, cos, sin, shape)
  local ca, cr = errs(cos, want[name].cos)
  local sa, sr = errs(sin, want[name].sin)
  ok(cos:dtype() == "float32" and table.concat(cos.shape, ",") == table.concat(shape, ",") and
     table.concat(sin.shape, ",") == table.concat(shape, ",") and ca < 2e-5 and sa < 2e-5 and cr < 1e-4 and sr < 1e-4,
    ("%s: transformers' tables (cos %.2g / %.2g, sin %.2g / %.2g)"):format(name, ca, cr, sa, sr))
end

local cos, sin = nn.rope_tables(7, 8)
check_tables("default", cos, sin, {7, 8})
local llama3 = {rope_type = "llama3", factor = 8.0, low_freq_factor = 1.0, high_freq_factor = 4.0,
  original_max_position_embeddings = 8192}
local pos = zorch.tensor({{0, 1, 2, 40}, {7, 9, 60, 100}})
local c3, s3 = nn.rope_tables(pos, 64, {theta = 500000, scaling = llama3})
check_tables("llama3", c3, s3, {2, 4, 64})
do -- without the scaling the slow frequencies differ: the case can tell
  local _, su = nn.rope_tables(pos, 64, {theta = 500000})
  local _, er = errs(su, want.llama3.sin)
  ok(er > 0.5, ("llama3: the unscaled tables differ (%.2g)"):format(er))
  local _, sd = nn.rope_tables(pos, 64, {theta = 500000, scaling = {rope_type = "default"}})
  ok(zorch.equal(sd, su), "rope_type default: no scaling")
end

-- the cache: one pair per (n, head_dim, theta, scaling, dtype)
do
  local a1, b1 = nn.rope_tables(7, 8)
  ok(rawequal(a1, cos) and rawequal(b1, sin), "rope_tables: a count's tables are cached")
  local a2 = nn.rope_tables(7, 8, {theta = 500000})
  local a3 = nn.rope_tables(7, 8, {scaling = llama3})
  local a4 = nn.rope_tables(7, 8, {dtype = "float64"})
  ok(not rawequal(a2, cos) and not rawequal(a3, cos) and not rawequal(a4, cos) and a4:dtype() == "float64" and
     zorch.allclose(a4:float(), cos), "rope_tables: theta, scaling and dtype key the cache")
  ok(not rawequal(nn.rope_tables(zorch.arange(7), 8), cos), "rope_tables: position tensors are not cached")
  ok(zorch.equal(nn.rope_tables(zorch.arange(7), 8), cos), "rope_tables: positions 0..n-1 give the count's tables")
end

-- zorch.rope against x * cos + rotate_half(x) * sin, shared and per-sequence tables
local function rotate_half(x)
  local h = x:size(4) // 2
  return zorch.cat({-x[{{}, {}, {}, {h + 1, 2 * h}}], x[{{}, {}, {}, {1, h}}]}, 4)
end
local function composed(x, c, s)
  if c:dim() == 3 then c, s = c:unsqueeze(2), s:unsqueeze(2) end
  return x * c + rotate_half(x) * s
end
for _, case in ipairs({{"shared", {2, 3, 5, 8}, {5, 8}}, {"per sequence", {2, 3, 5, 8}, {2, 5, 8}}}) do
  local name, xs, ts = case[1], case[2], case[3]
  local x1, c1, s1 = leaf(fixed(xs, 1)), leaf(fixed(ts, 2)), leaf(fixed(ts, 3))
  local x2, c2, s2 = leaf(fixed(xs, 1)), leaf(fixed(ts, 2)), leaf(fixed(ts, 3))
  local w = fixed(xs, 4)
  local y1, y2 = zorch.rope(x1, c1, s1), composed(x2, c2, s2)
  ;(y1 * w):sum():backward()
  ;(y2 * w):sum():backward()
  ok(zorch.allclose(y1, y2, 1e-12, 1e-12) and zorch.allclose(x1.grad, x2.grad, 1e-12, 1e-12) and
     zorch.allclose(c1.grad, c2.grad, 1e-12, 1e-12) and zorch.allclose(s1.grad, s2.grad, 1e-12, 1e-12),
    "rope (" .. name .. "): the composed ops' values and gradients")
end
do -- with Llama's tables the input gradient is the rotation with sin negated
  local c, s = nn.rope_tables(5, 8, {dtype = "float64"})
  local x, g = leaf(fixed({1, 2, 5, 8}, 5)), fixed({1, 2, 5, 8}, 6)
  zorch.rope(x, c, s):backward(g)
  ok(zorch.allclose(x.grad, zorch.rope(g, c, -s), 1e-12, 1e-12), "rope: gx = rope(g, cos, -sin) for Llama's tables")
end

bad(function() nn.rope_tables(4, 5) end, "nn.rope_tables: head_dim must be a positive even integer, got 5")
bad(function() nn.rope_tables(0, 4) end, "nn.rope_tables: positions must be a count >= 1")
bad(function() nn.rope_tables(zorch.ones(3), 4) end, "nn.rope_tables: positions must be a count or an int64 tensor")
bad(function() nn.rope_tables(4, 4, {theta = -1}) end, "nn.rope_tables: theta must be a positive number")
bad(function() nn.rope_inv_freq(3) end, "nn.rope_inv_freq: head_dim must be a positive even integer, got 3")
bad(function() nn.rope_inv_freq(4, {theta = 0}) end, "nn.rope_inv_freq: theta must be a positive number")
do
  local f = nn.rope_inv_freq(4, {theta = 100})
  ok(#f == 2 and f[1] == 1 and math.abs(f[2] - 0.1) < 1e-15, "rope_inv_freq: theta^(-2i/d)")
end
bad(function() nn.rope_tables(4, 4, {scaling = {rope_type = "yarn"}}) end,
  "nn.rope_tables: scaling.rope_type must be \"llama3\" or \"default\", got yarn")
bad(function() nn.rope_tables(4, 4, {scaling = {rope_type = "llama3", factor = 8}}) end,
  "nn.rope_tables: scaling.low_freq_factor must be a positive number, got nil")
bad(function()
  nn.rope_tables(4, 4, {scaling = {rope_type = "llama3", factor = 8, low_freq_factor = 4, high_freq_factor = 1,
    original_max_position_embeddings = 8192}})
end, "nn.rope_tables: scaling.high_freq_factor 1 must be above low_freq_factor 4")
bad(function() nn.rope_tables(4, 4, {scale = 2}) end, "nn.rope_tables: unknown option 'scale'")
tap.done()
