-- Map-style datasets, as in PyTorch: a dataset written in Lua (a length and
-- get(i), or ds[i]) is batched by the DataLoader, in order and shuffled, with
-- drop_last; samples that are tensors, tuples, numbers and named fields.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local data = zorch.data
local ok, raises = tap.ok, tap.raises

-- a dataset class: sample i is (a 3-vector of i, the integer label i % 2)
local Squares = {}
Squares.__index = Squares
Squares.__len = function(d) return d.n end
function Squares.new(n) return setmetatable({n = n}, Squares) end
function Squares:get(i) return zorch.full({3}, i), i % 2 end

local function rows(x) -- the first column of each row of a batch
  local out = {}
  for r = 1, x:size(1) do out[r] = math.tointeger(x[r][1]:item()) end
  return table.concat(out, ",")
end

local loader = data.DataLoader(Squares.new(10), {batch_size = 4})
local got, labels = {}, {}
for x, y in loader:iter() do
  got[#got + 1] = rows(x)
  labels[#labels + 1] = table.concat(y:totable(), ",")
  assert(x:dim() == 2 and x:size(2) == 3 and y:dtype() == "int64")
end
ok(#loader == 3 and table.concat(got, "|") == "1,2,3,4|5,6,7,8|9,10", "batches in order, the last one short")
ok(table.concat(labels, "|") == "1,0,1,0|1,0,1,0|1,0", "the labels, integers batched into an int64 tensor")

loader = data.DataLoader(Squares.new(10), {batch_size = 4, drop_last = true})
got = {}
for x in loader:iter() do got[#got + 1] = rows(x) end
ok(#loader == 2 and table.concat(got, "|") == "1,2,3,4|5,6,7,8", "drop_last drops the short batch")

-- shuffled: every sample once per epoch, in the order the loader's order() gives,
-- the same as a TensorDataset of the same rows (the fast path) in the same seed
loader = data.DataLoader(Squares.new(10), {batch_size = 3, shuffle = true, seed = 7})
local tloader = data.DataLoader(data.TensorDataset(zorch.arange(1, 11):float():view(10, 1):expand(10, 3):contiguous(),
                                                   zorch.tensor{1, 0, 1, 0, 1, 0, 1, 0, 1, 0}),
                                {batch_size = 3, shuffle = true, seed = 7})
local seen, a, b = {}, {}, {}
for x, y in loader:iter() do
  a[#a + 1] = rows(x)
  for r = 1, x:size(1) do seen[math.tointeger(x[r][1]:item())] = (seen[math.tointeger(x[r][1]:item())] or 0) + 1 end
  assert(y:size(1) == x:size(1))
end
for x in tloader:iter() do b[#b + 1] = rows(x) end
local once = true
for i = 1, 10 do once = once and seen[i] == 1 end
ok(once and table.concat(a, "|") ~= "1,2,3|4,5,6|7,8,9|10", "shuffled: every sample once, not in order")
ok(table.concat(a, "|") == table.concat(b, "|"), "the same order as a TensorDataset with the same seed")
local second = {}
for x in loader:iter() do second[#second + 1] = rows(x) end
ok(table.concat(second, "|") ~= table.concat(a, "|"), "the next epoch is shuffled differently")

-- a plain Lua list of samples (ds[i], #ds); a sample as a sequence {x, y}
local list = {}
for i = 1, 5 do list[i] = {zorch.tensor({i, -i}, {dtype = "float32"}), i * 0.5} end
loader = data.DataLoader(list, {batch_size = 2})
got = {}
for x, y in loader:iter() do
  got[#got + 1] = ("%s:%s:%s"):format(table.concat(x.shape, "x"), y:dtype(), table.concat(y:totable(), ","))
end
ok(table.concat(got, "|") == "2x2:float32:0.5,1.0|2x2:float32:1.5,2.0|1x2:float32:2.5",
   "a list of {tensor, number} samples: tensors stacked, floats into a float32 tensor")

-- len()/size() methods and __index on integer keys, samples of named fields
local Fields = setmetatable({}, {__index = function(_, i)
  if math.type(i) == "integer" then return {x = zorch.ones(2, 2) * i, id = i, name = "s" .. i, keep = i > 2} end
end})
function Fields.len() return 4 end
loader = data.DataLoader(Fields, {batch_size = 3})
local batches = {}
for batch in loader:iter() do batches[#batches + 1] = batch end
ok(#batches == 2 and table.concat(batches[1].x.shape, "x") == "3x2x2" and batches[1].x[3][1][1]:item() == 3 and
   table.concat(batches[1].id:totable(), ",") == "1,2,3" and batches[1].keep:dtype() == "bool" and
   batches[1].name[2] == "s2" and batches[2].id:totable()[1] == 4,
   "named fields: a table per batch (tensors stacked, numbers and booleans tensors, strings listed)")
local Sized = {size = function() return 3 end, get = function(_, i) return zorch.full({1}, i) end}
got = {}
for x in data.DataLoader(Sized, {batch_size = 2}):iter() do got[#got + 1] = table.concat(x.shape, "x") end
ok(table.concat(got, "|") == "2x1|1x1", "a size() method and get(i); one tensor per sample")

-- with ranks: each rank takes its slice of every global batch, as with TensorDataset
loader = data.DataLoader(Squares.new(8), {batch_size = 2})
loader.world_size, loader.rank = 2, 1
got = {}
for x in loader:iter() do got[#got + 1] = rows(x) end
ok(table.concat(got, "|") == "3,4|7,8", "rank 1 of 2 takes the second half of each global batch")

-- refused, with messages that say what a dataset is
raises("a table with neither length nor samples", function() data.DataLoader({}, {batch_size = 2}) end,
       "expected a dataset", "get(i)")
raises("a tensor is not a dataset", function() data.DataLoader(zorch.ones(3)) end, "got a tensor")
raises("a length that is not an integer",
       function() data.DataLoader(setmetatable({}, {__len = function() return 2.5 end})) end,
       "length must be a non-negative integer")
raises("a length but no samples", function() data.DataLoader(setmetatable({}, {__len = function() return 3 end})) end,
       "no get(i) method and ds[1] is nil")
local Ragged = {get = function(_, i) return zorch.ones(i) end, len = function() return 3 end}
raises("samples of different shapes name the stack",
       function() for _ in data.DataLoader(Ragged, {batch_size = 3}):iter() do end end, "cannot stack the sample")
local Mixed = {get = function(_, i) return i == 1 and zorch.ones(1) or 2 end, len = function() return 2 end}
raises("samples of different kinds", function() for _ in data.DataLoader(Mixed, {batch_size = 2}):iter() do end end,
       "is a tensor in one sample and a number in another")
local Bad = {get = function() return print end, len = function() return 1 end}
raises("a function in a sample", function() for _ in data.DataLoader(Bad):iter() do end end, "is a function")

tap.done()
