-- The kernels at inputs that once gave a wrong value, a NaN or a wrong
-- gradient (found by tests/fuzz/kernels.py), against PyTorch's results
-- (golden/kernel_edges.safetensors, from golden/gen_kernel_edges.py): layer
-- norm of rows near 1e20 and 1e30, division's gradient where the divisor's
-- square leaves the dtype's range, relu's gradient at NaN, cross entropy
-- with label smoothing over an ignored sample holding -inf or NaN, and fused
-- attention over NaN and infinite scores.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok = tap.ok

local G = zorch.load("golden/kernel_edges.safetensors")

local function flat(t)
  local out = {}
  local function walk(v)
    if type(v) ~= "table" then out[#out + 1] = v return end
    for _, x in ipairs(v) do walk(x) end
  end
  walk(t:double():totable())
  return out
end

-- got within rtol of want, element by element, relative to the element
-- and to the tensor's largest finite value; NaN and infinities where want has them
local function near(got, want, rtol, desc)
  local a, b = flat(got), flat(want)
  local big = 0
  for _, y in ipairs(b) do if y == y and math.abs(y) ~= math.huge then big = math.max(big, math.abs(y)) end end
  local worst, bad = 0, #a ~= #b and "sizes differ" or nil
  for i = 1, #b do
    local x, y = a[i], b[i]
    if y ~= y or math.abs(y) == math.huge then
      if not (x ~= x and y ~= y or x == y) then bad = bad or ("element %d: %s, want %s"):format(i, x, y) end
    elseif x ~= x or math.abs(x) == math.huge then bad = bad or ("element %d: %s, want %s"):format(i, x, y)
    else
      local r = math.abs(x - y) / (rtol * (math.abs(y) + big) + 1e-300)
      if r > worst then worst = r end
    end
  end
  if worst > 1 then bad = bad or ("worst ratio %.3g"):format(worst) end
  if bad then print("#   " .. bad) end
  return ok(got.shape and #got.shape == #want.shape and not bad, desc)
end

-- Runs fn on the case's inputs (leaves requiring grad), backward with the
-- case's cotangent, and compares y and the inputs' gradients.
local function check(case, fn, names, rtol, desc)
  local ins = {}
  for i, n in ipairs(names) do ins[i] = G[case .. "." .. n]:clone():requires_grad_(true) end
  local y = fn(table.unpack(ins))
  y:backward(G[case .. ".c"]:to(y:dtype()))
  near(y, G[case .. ".y"], rtol, desc .. ": the value")
  for i, n in ipairs(names) do
    near(ins[i].grad, G[case .. ".g" .. n], rtol, ("%s: the gradient of %s"):format(desc, n))
  end
end

-- ---- layer norm: squares past float32's range ---------------------------------------------
-- (the variance is summed again in double; PyTorch's float32 gives 0 or NaN,
-- so the values are PyTorch's in float64)
local function ln(x, w, b) return zorch.layer_norm(x, 1, w, b, 1e-5) end
for _, cols in ipairs({16, 64, 1000}) do
  for _, mag in ipairs({"1e+20", "1e+30"}) do
    local case = ("ln_big_f32_%d_%s"):format(cols, mag)
    check(case, ln, {"x", "w", "b"}, 2e-5, ("layer_norm of %d float32 values near %s"):format(cols, mag))
  end
end
for _, cols in ipairs({100, 5000}) do
  check("ln_big_bf16_" .. cols, ln, {"x", "w", "b"}, 1.6e-2, ("layer_norm of %d bfloat16 values near 1e30"):format(cols))
end

-- ---- division's gradient for the divisor: (a / b) / b, not a / b^2 ------------------------
check("div_tiny", zorch.div, {"a", "b"}, 1e-6, "a / b with b = 1e-25 (b^2 is 0 in float32)")
check("div_f16", zorch.div, {"a", "b"}, 1e-3, "float16 a / b with b^2 past 65504 or subnormal")
check("div_bf16", zorch.div, {"a", "b"}, 8e-3, "bfloat16 a / b with b near 1e-20 (b^2 is 0)")

-- ---- relu passes the gradient at NaN, as PyTorch's threshold_backward ----------------------
for _, dt in ipairs({"float32", "bfloat16", "float16"}) do
  check("relu_nan_" .. dt, zorch.relu, {"x"}, 0, dt .. " relu at NaN, infinities and zeros")
end

-- ---- cross entropy, label smoothing: an ignored sample's -inf or NaN stays out ------------
for _, red in ipairs({"none", "mean", "sum"}) do
  for _, kind in ipairs({"inf", "nan"}) do
    local case = ("ce_ignored_%s_%s"):format(kind, red)
    local t = G[case .. ".t"]
    check(case, function(x) return zorch.cross_entropy(x, t, {reduction = red, ignore_index = 3, label_smoothing = 0.1}) end,
          {"x"}, 1e-5, ("cross_entropy (%s, label smoothing) with an ignored sample holding %s"):format(red, kind))
  end
end

-- ---- attention: a NaN or infinite score makes its row NaN (it gave 0) ---------------------
for _, case in ipairs({"attn_nan", "attn_inf"}) do
  check(case, function(q, k, v) return zorch.attention(q, k, v) end, {"query", "key", "value"}, 1e-5,
        case .. ": fused attention with NaN and infinite scores")
end

-- ---- the portable loops (ZORCH_NO_AVX512=1) on the same inputs ----------------------------
if os.getenv("ZORCH_NO_AVX512") ~= "1" then
  local out, good = tap.run("ZORCH_NO_AVX512=1 " .. tap.zorch() .. " lua/test_kernel_edges.lua")
  if not good then print("#   " .. out:gsub("\n", "\n#   ")) end
  ok(good and not out:find("not ok", 1, true), "every case again with the portable loops (ZORCH_NO_AVX512=1)")
end

tap.done()
