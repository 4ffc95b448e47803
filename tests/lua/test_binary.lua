-- Two-input elementwise ops (maximum, minimum, fmax, fmin, atan2, hypot,
-- logaddexp, copysign, fmod, remainder, floor_divide), the operators // and %,
-- the ops composed from them (lerp, addcmul, addcdiv, clamp_min, clamp_max,
-- clip, isclose, allclose, equal) and PyTorch's promotion for integer powers
-- and bools: values, dtypes and gradients against golden/binary.txt
-- (tests/golden/gen_binary.py), and the errors.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises = tap.ok, tap.raises

-- ---- the golden file ------------------------------------------------------------------------
local G = {}
-- Python's NaN has its sign bit clear; 0/0 may not (x86 sets it), and copysign reads it
local NAN = 0 / 0
if tostring(NAN):sub(1, 1) == "-" then NAN = -NAN end
local function number(x)
  if x == "nan" then return NAN end
  if x == "inf" then return math.huge end
  if x == "-inf" then return -math.huge end
  return assert(tonumber(x), x)
end
for line in io.lines("golden/binary.txt") do
  local words = {}
  for w in line:gmatch("%S+") do words[#words + 1] = w end
  if #words == 2 then
    G[words[1]] = words[2] == "1" -- allclose and equal: a boolean
  else
    local nd = tonumber(words[3])
    local shape, values = {}, {}
    for i = 1, nd do shape[i] = tonumber(words[3 + i]) end
    for i = 4 + nd, #words do values[#values + 1] = number(words[i]) end
    G[words[1]] = {dtype = words[2], shape = shape, values = values}
  end
end

-- The golden tensor `key` (a leaf requiring grad when asked).
local function golden(key, requires_grad)
  local g = assert(G[key], "no golden entry " .. key)
  local t = zorch.tensor(g.values, {dtype = g.dtype}):reshape(g.shape)
  if requires_grad then t:requires_grad_() end
  return t
end

local function flat(t, out)
  if type(t) ~= "table" then out[#out + 1] = t return out end
  for _, v in ipairs(t) do flat(v, out) end
  return out
end

-- got has the golden dtype, shape and values: integers and bools exactly,
-- floats to a relative tol (exactly, signed zeros too, when tol is 0); NaN
-- matches NaN.
local function same(got, key, tol, desc)
  local g = assert(G[key], "no golden entry " .. key)
  desc = desc or key
  if got:dtype() ~= g.dtype then
    return ok(false, ("%s: dtype %s, PyTorch's %s"):format(desc, got:dtype(), g.dtype))
  end
  local gs = got.shape
  local shape_ok = #gs == #g.shape
  for i = 1, #g.shape do shape_ok = shape_ok and gs[i] == g.shape[i] end
  if not shape_ok then
    return ok(false, ("%s: shape %s, PyTorch's (%s)"):format(desc, tostring(gs), table.concat(g.shape, ", ")))
  end
  local v = got:dtype() == "bool" and got:to("int64") or got
  local fa = flat(v:totable(), {})
  local bad
  for i, y in ipairs(g.values) do
    local x = fa[i]
    local good
    if x ~= x or y ~= y then good = x ~= x and y ~= y
    elseif (tol or 0) == 0 or x == y then good = x == y and (y ~= 0 or 1 / x == 1 / y or math.type(y) == "integer")
    else good = math.abs(x - y) <= tol * (math.abs(y) + 1) end
    if not good then bad = bad or ("element %d: %s, PyTorch's %s"):format(i, tostring(x), tostring(y)) end
  end
  if bad then print("#   " .. bad) end
  return ok(#fa == #g.values and not bad, desc)
end

local TOL = 1e-12 -- float64 math; libm's last bit may differ from PyTorch's

-- out = f(a, b[, w]) with PyTorch's gradients for the fixed gout
local function grad_case(key, f, nin)
  local names = {"a", "b", "w"}
  local ins = {}
  for i = 1, nin or 2 do ins[i] = golden(key .. "." .. names[i], true) end
  local out = f(table.unpack(ins))
  same(out, key .. ".out", TOL, key .. ": values")
  if not G[key .. ".gout"] then return end
  (out * golden(key .. ".gout")):sum():backward()
  for i, x in ipairs(ins) do
    same(x.grad or zorch.zeros_like(x), key .. ".g" .. names[i], TOL, key .. ": gradient of " .. names[i])
  end
end

local function value_case(key, f, nin)
  local names = {"a", "b", "w"}
  local ins = {}
  for i = 1, nin or 2 do ins[i] = golden(key .. "." .. names[i]) end
  same(f(table.unpack(ins)), key .. ".out", 0, key)
end

-- ---- float ops: values and gradients, broadcasting, NaN, ties, infinities ----------------------
for _, name in ipairs({"maximum", "minimum", "fmax", "fmin"}) do
  grad_case(name, zorch[name])
  grad_case(name .. "_nan", zorch[name])
end
for _, name in ipairs({"atan2", "hypot", "logaddexp", "copysign", "fmod", "remainder"}) do
  grad_case(name, zorch[name])
end
grad_case("atan2_edges", zorch.atan2)
grad_case("logaddexp_inf", zorch.logaddexp)
grad_case("copysign_zero", zorch.copysign)
for _, name in ipairs({"fmod", "remainder", "floor_divide"}) do
  value_case(name .. "_edges", zorch[name])
end
value_case("floor_divide", zorch.floor_divide)
value_case("floor_divide_f32", zorch.floor_divide)
grad_case("maximum", function(a, b) return a:maximum(b) end) -- the method form
do
  local a = zorch.tensor({1.5, -2}, {requires_grad = true})
  local q = zorch.floor_divide(a, 2)
  ok(not q.requires_grad, "floor_divide records no gradient (PyTorch's has none either)")
end

-- ---- integer dtypes --------------------------------------------------------------------------
for _, dt in ipairs({"int64", "int32"}) do
  for _, name in ipairs({"maximum", "minimum", "fmax", "fmin", "fmod", "remainder", "floor_divide"}) do
    value_case(name .. "_" .. dt, zorch[name])
  end
  for _, name in ipairs({"fmod", "remainder", "floor_divide"}) do
    value_case(name .. "_" .. dt .. "_min", zorch[name]) -- the most negative value over -1 wraps
  end
end
for _, name in ipairs({"maximum", "minimum", "fmod", "remainder", "floor_divide"}) do
  value_case(name .. "_uint8", zorch[name])
end

-- integer division by zero is an error, never a trap
for _, dt in ipairs({"int64", "int32", "uint8"}) do
  local a, z = zorch.tensor({7, 5}, {dtype = dt}), zorch.tensor({1, 0}, {dtype = dt})
  for _, name in ipairs({"floor_divide", "remainder", "fmod"}) do
    raises(("%s of %s by zero"):format(name, dt), function() return zorch[name](a, z) end,
      name .. ": integer division by zero", dt .. " (2,)")
  end
end
raises("// by a zero number", function() return zorch.tensor({7, -7}) // 0 end, "floor_divide: integer division by zero")
raises("% by a zero number", function() return zorch.tensor({7, -7}) % 0 end, "remainder: integer division by zero")
raises("a number // a tensor holding zero", function() return 7 // zorch.tensor({1, 0}) end,
  "floor_divide: integer division by zero")
ok(tostring(zorch.tensor({7.0}) // 0) == "tensor([inf])", "float // 0 is inf, as in PyTorch")

-- ---- // and % with numbers on either side ------------------------------------------------------
local function one(key, f) same(f(golden(key .. ".a")), key .. ".out", 0, key) end
one("idiv_int_2", function(t) return t // 2 end)
one("idiv_int_m2", function(t) return t // -2 end)
one("idiv_7_int", function(t) return 7 // t end)
one("idiv_int_2.5", function(t) return t // 2.5 end)
one("idiv_f_2", function(t) return t // 2 end)
one("idiv_m7_f", function(t) return -7 // t end)
one("mod_int_2", function(t) return t % 2 end)
one("mod_int_m2", function(t) return t % -2 end)
one("mod_7_int", function(t) return 7 % t end)
one("mod_7.5_int", function(t) return 7.5 % t end)
one("mod_f_2", function(t) return t % 2 end)
one("mod_f_m2", function(t) return t % -2 end)
one("mod_m7_f", function(t) return -7 % t end)
value_case("idiv_tt", function(a, b) return a // b end)
value_case("mod_tt", function(a, b) return a % b end)
do -- each element as Lua's own // and % on numbers
  local a, b = {7, -7, 7, -7, 0, 9}, {2, 2, -2, -2, 3, -4}
  local ta, tb = zorch.tensor(a), zorch.tensor(b)
  local q, r = (ta // tb):totable(), (ta % tb):totable()
  local good = true
  for i = 1, #a do good = good and q[i] == a[i] // b[i] and r[i] == a[i] % b[i] end
  ok(good, "int64 // and % agree with Lua's integer // and %")
end
raises("// of two numbers' metamethod refuses", function() return zorch.floor_divide(1, 2) end,
  "floor_divide: expected a tensor operand")
raises("% of a tensor and a string", function() return zorch.tensor({1}) % "x" end, "tensor")

-- ---- promotion: integer powers, bools ------------------------------------------------------
value_case("pow_int_int", function(a, b) return a ^ b end)
one("pow_int_2", function(t) return t ^ 2 end)
one("pow_int_40", function(t) return t ^ 40 end)
one("pow_2_int", function(t) return 2 ^ t end)
one("pow_int32_3", function(t) return t ^ 3 end)
one("pow_uint8_3", function(t) return t ^ 3 end)
one("pow_int_2.5", function(t) return t ^ 2.5 end)
ok(zorch.pow(zorch.tensor({3}), zorch.tensor({2})):dtype() == "int64", "pow of int64 tensors is int64")
raises("an integer tensor to a negative power", function() return zorch.tensor({2, 3}) ^ -1 end,
  "pow_scalar: integers to negative integer powers are not allowed", "int64 input (2,)", "exponent -1")
raises("an int32 tensor to a negative power", function() return zorch.tensor({2}, {dtype = "int32"}) ^ -2 end,
  "integers to negative integer powers are not allowed")
ok((zorch.tensor({2}) ^ -1.5):dtype() == "float32", "an integer tensor to a fractional negative power is float32")
value_case("bool_add", function(a, b) return a + b end)
value_case("bool_mul", function(a, b) return a * b end)
value_case("bool_maximum", zorch.maximum)
value_case("bool_minimum", zorch.minimum)
value_case("bool_div", function(a, b) return a / b end)
value_case("bool_add_int", function(a, b) return a + b end)
one("bool_add_1", function(t) return t + 1 end)
one("bool_mul_3", function(t) return t * 3 end)
one("bool_pow_2", function(t) return t ^ 2 end)
one("bool_clamp", function(t) return t:clamp(0, 1) end)
one("int_add_2.0", function(t) return t + 2.0 end)
one("int_mul_1.0", function(t) return t * 1.0 end)
one("int_pow_2.0", function(t) return t ^ 2.0 end)
one("2.0_sub_int", function(t) return 2.0 - t end)
one("bool_add_1.0", function(t) return t + 1.0 end)
local m = zorch.tensor({1, 0, 1}, {dtype = "bool"})
raises("-bool", function() return -m end, "neg: not supported for a bool tensor", "(3,)")
raises("bool - bool", function() return m - m end, "sub: subtraction with a bool tensor is not supported",
  "a bool (3,)")
raises("int - bool", function() return zorch.tensor({1, 2, 3}) - m end, "sub: subtraction with a bool tensor")
raises("bool - number", function() return m - 1 end, "sub: subtraction with a bool tensor")
raises("number - bool", function() return 1 - m end, "bool tensor")
raises("bool ^ bool", function() return m ^ m end, "pow: not supported for bool tensors")
raises("bool // bool", function() return m // m end, "floor_divide: not supported for bool tensors")
raises("bool % bool", function() return m % m end, "remainder: not supported for bool tensors")
raises("abs of bool", function() return m:abs() end, "abs: not supported for a bool tensor")

-- ---- the composed ops ----------------------------------------------------------------------
grad_case("lerp_0.25", function(a, b) return zorch.lerp(a, b, 0.25) end)
grad_case("lerp_0.75", function(a, b) return a:lerp(b, 0.75) end)
grad_case("lerp_1", function(a, b) return zorch.lerp(a, b, 1) end)
grad_case("lerp_w", zorch.lerp, 3)
grad_case("addcmul", function(t, a, b) return zorch.addcmul(t, a, b, -1.5) end, 3)
grad_case("addcdiv", function(t, a, b) return t:addcdiv(a, b, 0.5) end, 3)
grad_case("clamp_min", function(a) return zorch.clamp_min(a, 0.5) end, 1)
grad_case("clamp_max", function(a) return a:clamp_max(0.5) end, 1)
value_case("clamp_min_int", function(a) return zorch.clamp_min(a, 2) end, 1)
value_case("clamp_max_int", function(a) return a:clamp_max(2) end, 1)
do
  local x = zorch.tensor({-1.0, 0.25, 2.0})
  ok(zorch.equal(zorch.clip(x, 0, 1), zorch.clamp(x, 0, 1)) and zorch.equal(x:clip(0), x:clamp(0)),
    "clip is clamp")
  ok(tostring(zorch.clamp(zorch.tensor({-5, 9}), 0)) == "tensor([0, 9])", "an int64 clamp open above")
end
value_case("isclose", zorch.isclose)
value_case("isclose_nan", function(a, b) return zorch.isclose(a, b, 1e-5, 1e-8, true) end)
value_case("isclose_tol", function(a, b) return a:isclose(b, 0.2, 0) end)
value_case("isclose_atol", function(a, b) return zorch.isclose(a, b, 0, 0.2) end)
value_case("isclose_int", zorch.isclose)
local function f64(v) return zorch.tensor(v, {dtype = "float64"}) end
local nan = 0 / 0
ok(zorch.allclose(f64({1, 2}), f64({1, 2})) == G.allclose_exact, "allclose of equal tensors")
ok(zorch.allclose(f64({1, 2}), f64({1 + 1e-7, 2})) == G.allclose_near, "allclose within the tolerance")
ok(zorch.allclose(f64({1, 2}), f64({1 + 1e-3, 2})) == G.allclose_far, "allclose beyond the tolerance")
ok(zorch.allclose(f64({nan}), f64({nan})) == G.allclose_nan, "allclose of NaNs")
ok(f64({nan}):allclose(f64({nan}), 1e-5, 1e-8, true) == G.allclose_nan_eq, "allclose of NaNs with equal_nan")
ok(zorch.equal(zorch.tensor({1, 2}), f64({1, 2})) == G.equal_dtypes, "equal across dtypes")
ok(zorch.equal(zorch.tensor({1, 2}), zorch.tensor({{1, 2}})) == G.equal_shapes, "equal needs the same shape")
ok(zorch.equal(f64({nan}), f64({nan})) == G.equal_nan, "equal of NaNs")
ok(f64({1, 2}):equal(f64({1, 2.5})) == G.equal_values, "equal of other values")
ok(type(zorch.allclose(f64({1}), f64({1}))) == "boolean" and type(zorch.equal(f64({1}), f64({1}))) == "boolean",
  "allclose and equal give Lua booleans")

-- ---- errors name the function, the argument and the shapes -----------------------------------
local a3, a4 = zorch.randn(2, 3), zorch.randn(4)
for _, name in ipairs({"maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "logaddexp", "copysign", "fmod",
                       "remainder", "floor_divide"}) do
  raises(name .. " of shapes that do not broadcast", function() return zorch[name](a3, a4) end,
    name .. ":", "(2, 3)", "(4,)")
end
raises("// of shapes that do not broadcast", function() return a3 // a4 end, "floor_divide:", "(2, 3)", "(4,)")
raises("% of shapes that do not broadcast", function() return a3 % a4 end, "remainder:", "(2, 3)", "(4,)")
raises("lerp of shapes that do not broadcast", function() return zorch.lerp(a3, a4, 0.5) end, "lerp:", "(2, 3)", "(4,)")
raises("lerp of mixed dtypes", function() return zorch.lerp(a3, a3:to("float64"), 0.5) end,
  "lerp: end is float64, start is float32")
raises("lerp of integers", function() return zorch.lerp(zorch.tensor({1}), zorch.tensor({2}), 0.5) end,
  "lerp: start must be a float tensor")
raises("lerp with a weight of another shape", function() return zorch.lerp(a3, a3, zorch.randn(5)) end,
  "lerp:", "(5,)")
raises("addcmul of shapes that do not broadcast", function() return zorch.addcmul(a3, a3, a4) end,
  "addcmul:", "(2, 3)", "(4,)")
raises("addcdiv of integers", function()
  return zorch.addcdiv(zorch.tensor({1}), zorch.tensor({1}), zorch.tensor({2}))
end, "addcdiv: integer division is not supported")
raises("isclose of mixed dtypes", function() return zorch.isclose(a3, a3:to("float64")) end,
  "isclose: a is float32 and b is float64")
raises("isclose with a negative rtol", function() return zorch.isclose(a3, a3, -1) end,
  "isclose: rtol (-1) and atol (1e-08) must be at least 0")
raises("allclose of shapes that do not broadcast", function() return zorch.allclose(a3, a4) end,
  "allclose:", "(2, 3)", "(4,)")
raises("maximum of a tensor and a string", function() return zorch.maximum(a3, "x") end, "tensor")
raises("clamp_min without a bound", function() return zorch.clamp_min(a3) end, "number expected")

tap.done()
