-- Integers past 2^53 and shapes past 64 bits: int64 tensors made from Lua
-- integers keep all 64 bits (arange, tensor, full, fill_, t[i] = v); integer
-- ops wrap around in two's complement as PyTorch's do; shapes whose element
-- count or strides overflow are refused with the shape named.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises = tap.ok, tap.raises

local big = (1 << 62) + 1 -- not a double: it would round to 2^62
local function low(t, base) -- t - base, as a Lua number (exact when small)
  return (t - zorch.full({t:numel()}, base, {dtype = "int64"}):view(t.shape)):sum():item()
end
ok(low(zorch.full({2}, big, {dtype = "int64"}), 1 << 62) == 2, "full keeps all 64 bits")
ok(low(zorch.tensor({big, big}), 1 << 62) == 2, "tensor{} of integers keeps all 64 bits")
ok(low(zorch.tensor(big):view({1}), 1 << 62) == 1, "tensor(n) keeps all 64 bits")
local t = zorch.zeros(3, {dtype = "int64"})
t:fill_(big)
ok(low(t, 1 << 62) == 3, "fill_ keeps all 64 bits")
t = zorch.zeros(3, {dtype = "int64"})
t[2] = big
ok(t[1]:item() == 0 and (t[2] - zorch.tensor(1 << 62)):item() == 1, "t[i] = v keeps all 64 bits")
local r = zorch.arange(big, big + 3)
ok(r:dtype() == "int64" and r:numel() == 3 and low(r, 1 << 62) == 1 + 2 + 3, "arange keeps all 64 bits")
r = zorch.arange(math.maxinteger - 2, math.maxinteger)
ok(r:numel() == 2, "arange up to math.maxinteger counts without overflow")
r = zorch.arange(math.mininteger, math.maxinteger, 1 << 62)
ok(r:numel() == 4, "arange over the whole int64 range counts without overflow")
ok(zorch.tensor({1, 2.5}):dtype() == "float32", "integers mixed with floats still make float32")
ok(zorch.tensor({1, 2.5}, {dtype = "float64"})[2]:item() == 2.5, "a mixed table keeps its floats")

-- integer ops wrap around like PyTorch's (no undefined behaviour)
local maxi = zorch.tensor({math.maxinteger})
ok((maxi + 1):sum():item() == math.mininteger + 0.0, "int64 add wraps")
ok(((maxi * 2) - zorch.tensor({-2})):sum():item() == 0, "int64 mul and sub wrap")
local mini = zorch.tensor({math.mininteger})
ok(low(-mini, math.mininteger) == 0, "int64 neg of the minimum wraps to itself")
ok(low(mini:abs(), math.mininteger) == 0, "int64 abs of the minimum wraps to itself")
ok(low(zorch.tensor({math.maxinteger, 1}):sum():view({1}), math.mininteger) == 0, "int64 sum wraps")
local i32 = zorch.tensor({2147483647}, {dtype = "int32"})
ok((i32 + zorch.tensor({1}, {dtype = "int32"})):item() == -2147483648, "int32 add wraps")
ok((i32 * zorch.tensor({2}, {dtype = "int32"})):item() == -2, "int32 mul wraps")
ok((-zorch.tensor({-2147483648}, {dtype = "int32"})):item() == -2147483648, "int32 neg wraps")
ok((zorch.tensor({-2147483648}, {dtype = "int32"})):abs():item() == -2147483648, "int32 abs wraps")
ok((i32 + 1):item() == -2147483648, "int32 add of a scalar wraps")

-- shapes whose sizes overflow
raises("expand past 64-bit element counts is refused", function() return zorch.ones(1, 4):expand(1 << 62, 4) end,
       "(4611686018427387904, 4)", "too large")
ok(zorch.ones(1, 4):expand(1 << 40, 4):numel() == (1 << 42), "a large expand keeps its true numel")
raises("zeros(0, 2^40, 2^40) is refused: its strides overflow", function() return zorch.zeros(0, 1 << 40, 1 << 40) end,
       "(0, 1099511627776, 1099511627776)", "too large")
ok(zorch.zeros(1 << 30, 1 << 20, 0):numel() == 0, "a zero-size tensor with large dims whose strides fit is made")
raises("view with a -1 and an overflowing product is refused",
       function() return zorch.zeros(0):view(-1, 1 << 40, 1 << 40, 1 << 40) end, "more elements than fit in 64 bits")
-- values leave exact: item, totable and indexing read int64 as integers, not through a double
local edge = zorch.tensor({math.maxinteger, math.mininteger, (1 << 53) + 1})
ok(edge:dtype() == "int64" and edge[1]:item() == math.maxinteger and edge[2]:item() == math.mininteger and
   edge[3]:item() == (1 << 53) + 1, "item() of int64 past 2^53 is exact")
local tt = edge:totable()
ok(tt[1] == math.maxinteger and tt[2] == math.mininteger and tt[3] == (1 << 53) + 1 and math.type(tt[1]) == "integer",
   "totable() of int64 is exact and integer")
ok(zorch.tensor({{1, 2}, {3, 4}}, {dtype = "int32"}):totable()[2][1] == 3, "int32 totable")
raises("reshape to an overflowing zero-size shape is refused",
       function() return zorch.zeros(0):reshape(0, 1 << 40, 1 << 40) end, "too large")
tap.done()
