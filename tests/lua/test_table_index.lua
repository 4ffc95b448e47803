-- Torch7's table indexing, x[{...}]: each entry (a number, {a, b}, {a} or {})
-- against the narrow and select it stands for, views sharing storage,
-- gradients through a read, assignment (copy and fill, broadcasting), the
-- refusals where autograd could not follow a write, and the errors.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises, close = tap.ok, tap.raises, tap.close

local x = zorch.arange(1, 25):view(2, 3, 4)
local function same(a, b, desc)
  ok(table.concat(a.shape, ",") == table.concat(b.shape, ","), desc .. ": shape " .. tostring(a.shape))
  close(a, b, 0, desc .. ": values")
end

same(x[{2}], x:select(1, 2), "a number selects")
same(x[{-1}], x:select(1, 2), "a negative number counts from the end")
same(x[{{}, 2}], x:select(2, 2), "{} keeps a dim whole")
same(x[{1, {2, 3}, {-2, -1}}], x:select(1, 1):narrow(1, 2, 2):narrow(2, 3, 2), "{a, b} keeps a..b, negatives from the end")
same(x[{{2}}], x:narrow(1, 2, 1), "{a} keeps a alone, and the dim")
same(x[{1, 2, 3}], x:select(1, 1):select(1, 2):select(1, 3), "a number per dim gives a 0-d tensor")
same(x[{}], x, "an empty table is the whole tensor")
ok(x[{{}, {3, 2}}]:numel() == 0, "{a, a - 1} is an empty range")

-- a view: a write through it shows in x
do
  local y = zorch.zeros(3, 4)
  local v = y[{{2, 3}, 2}]
  v:fill_(5)
  close(y:select(2, 2), zorch.tensor({0, 5, 5}), 0, "the result shares x's storage")
end

-- gradients through a read are narrow's and select's
do
  local w = zorch.randn(3, 4, {requires_grad = true})
  w[{{1, 2}, -1}]:sum():backward()
  local want = zorch.zeros(3, 4)
  want[1][4], want[2][4] = 1, 1
  close(w.grad, want, 0, "the gradient of a read reaches the entries read")
end

-- assignment: numbers fill, tensors are copied with broadcasting
do
  local y = zorch.zeros(3, 4)
  y[{{}, 2}] = 7
  y[{1, {3, 4}}] = zorch.tensor({1, 2})
  y[{{2, 3}, {3, 4}}] = zorch.tensor({{8, 9}})
  y[{3, 1}] = -1
  close(y, zorch.tensor({{0, 7, 1, 2}, {0, 7, 8, 9}, {-1, 7, 8, 9}}), 0, "fills and broadcast copies land in place")
  local i = zorch.zeros({2, 2}, {dtype = "int64"})
  i[{1, 1}] = math.maxinteger
  ok(i[1][1]:item() == math.maxinteger, "an integer fill of int64 is exact")
  raises("a value the dtype cannot hold", function() zorch.zeros({2}, {dtype = "uint8"})[{{1, 2}}] = 300 end,
         "fill_: value 300 cannot be converted to uint8")
  raises("a value that does not broadcast", function() y[{1, {1, 2}}] = zorch.ones(3) end, "copy_")
end

-- writes through the view are followed by autograd (a leaf's view refused, as PyTorch)
do
  local w = zorch.zeros(2, 2, {requires_grad = true})
  raises("assigning into a leaf that requires grad", function() w[{1, 1}] = 3 end,
         "fill_: a view of a leaf tensor that requires grad")
  local g = zorch.ones(2, {requires_grad = true})
  local z = zorch.zeros(2, 2)
  z[{{}, 2}] = g * 2
  ;(z * z):sum():backward()
  close(g.grad, zorch.full({2}, 8), 0, "a value that requires grad assigned into a column: its gradient reaches it")
  zorch.no_grad(function() w[{1, 1}] = 3 end)
  ok(w[1][1]:item() == 3 and w.is_leaf, "under no_grad the write is a data write")
end

-- errors name the entry, the dim and its size
raises("a number out of range", function() return x[{3}] end, "index: entry 1 (3) is out of range for dim 1 of size 2")
raises("0", function() return x[{1, 0}] end, "index: entry 2 (0) is out of range for dim 2 of size 3")
raises("a range past the end", function() return x[{{}, {1, 4}}] end,
       "index: entry 2 ({1, 4}) is not a range within dim 2 of size 3")
raises("a reversed range", function() return x[{{}, {3, 1}}] end, "index: entry 2 ({3, 1}) is not a range")
raises("more entries than dims", function() return x[{1, 1, 1, 1}] end, "index: 4 entries for a 3-d tensor")
raises("a step", function() return x[{{1, 2, 1}}] end, "steps are not supported")
raises("a fraction", function() return x[{1.5}] end, "index: entry 1 must be an integer")
raises("a string", function() return x[{"a"}] end, "index: entry 1 must be an integer")
raises("a tensor key", function() return x[zorch.tensor({1})] end, "index: a tensor as an index is not supported")
raises("a tensor key in assignment", function() x[zorch.tensor({true})] = 0 end, "index: a tensor as an index")
raises("a table index of a 0-d tensor", function() return zorch.tensor(3)[{1}] end, "index: 1 entries for a 0-d tensor")

tap.done()
