-- Every function exported to Lua, called with bad arguments (nil, strings,
-- tables, wrong-shaped tensors), must raise an error that names it; none may
-- crash. Run under ASan by `make check-asan`.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local t23, t45, ti = zorch.ones(2, 3), zorch.ones(4, 5), zorch.tensor{1, 2}
local bad = {nil, "str", {}, {1, "a"}, true, t45, ti, 1e300, -1, 0, zorch.ones(0)}
local nbad = 11

-- Functions a bad call must not crash; most must raise. `skip` lists the ones for
-- which some argument lists are legal (an error is then not required).
local checked, raised, total = 0, 0, 0
local function try(name, fn, args)
  total = total + 1
  local ok, err = pcall(fn, table.unpack(args, 1, args.n or #args))
  checked = checked + 1
  if not ok then
    raised = raised + 1
    -- a string, or a usage error (zorch.flags.UsageError: a table whose tostring is the message)
    local mt = type(err) == "table" and getmetatable(err)
    local msg = type(err) == "string" and err or (mt and mt.__tostring and tostring(err)) or nil
    if not msg or #msg == 0 then
      tap.ok(false, name .. ": error without a message")
    end
  end
  return ok, err
end

local names = {}
for k, v in pairs(zorch) do
  if type(v) == "function" and k ~= "no_grad" and k ~= "progress" and k ~= "flags" and k:sub(1, 1) ~= "_" then
    names[#names + 1] = k
  end
end
table.sort(names)

-- one bad argument in each position, with the others good where possible
for _, name in ipairs(names) do
  local fn = zorch[name]
  for pos = 1, 4 do
    for b = 1, nbad do
      local args = {t23, t23, t23, t23, n = 4}
      args[pos] = bad[b]
      try(name, fn, args)
    end
  end
  -- no arguments at all must raise
  local ok = pcall(fn)
  local allowed_empty = {set_grad_enabled = true, is_grad_enabled = true, get_num_threads = true,
                         blas_info = true, cuda_available = true, is_tensor = true, Engine = true, clock = true, local_rank = true,
                         zeros = true, ones = true, rand = true, randn = true,
                         host_memory = true, reset_peak_host_memory = true}
  tap.ok(not ok or allowed_empty[name], name .. "() without arguments raises")
end
tap.ok(checked == total, ("%d bad calls over %d functions ran without crashing (%d raised)"):format(total, #names, raised))

-- messages name the function, the argument and the shapes
tap.raises("matmul names both shapes", function() zorch.matmul(zorch.ones(64, 10), zorch.ones(20, 2)) end,
           "matmul", "(64, 10)", "(20, 2)")
tap.raises("add names the broadcast shapes", function() return t23 + t45 end, "add", "(2, 3)", "(4, 5)")
tap.raises("a string operand is named", function() return t23 + "x" end, "add", "string")
tap.raises("a bad argument type is named", function() zorch.relu("x") end, "relu", "tensor expected")
tap.raises("1-based dims: 0 is refused", function() t23:sum(0) end, "1-based")
tap.raises("indices are 1-based", function() return t23[0] end, "1-based")
tap.raises("out-of-range index", function() return t23[3] end, "select", "(2, 3)")
tap.raises("cross_entropy checks the class range", function() zorch.cross_entropy(t23, zorch.tensor{1, 9}) end, "target")
tap.raises("cross_entropy wants int64 targets", function() zorch.cross_entropy(t23, zorch.ones(2)) end, "int64")
tap.raises("nll_loss checks the class range", function() zorch.nll_loss(t23, zorch.tensor{1, 4}) end,
           "nll_loss", "target 4 at position 2 is out of range 1..3")
tap.raises("nll_loss names both shapes", function() zorch.nll_loss(t23, zorch.tensor{1}) end, "nll_loss", "(2, 3)", "(1,)")
tap.raises("zeros_like wants a tensor", function() zorch.zeros_like(3) end, "zeros_like", "tensor expected")
tap.raises("randn_like wants a float dtype", function() zorch.randn_like(t23, {dtype = "int64"}) end,
           "randn_like", "int64")

-- the index, sorting and random ops name the bad value and the valid range
local x34, i2 = zorch.randn(3, 4), zorch.tensor{{1, 2}, {3, 4}}
tap.raises("gather: an index out of range names it and the range", function() zorch.gather(x34, 2, zorch.tensor{{1, 9}}) end,
           "gather", "index 9 at position 2 is out of range 1..4")
tap.raises("gather wants int64 indices", function() zorch.gather(x34, 2, zorch.ones(1, 2)) end, "int64")
tap.raises("gather wants an index with the input's dims", function() zorch.gather(x34, 1, zorch.tensor{1, 2}) end,
           "gather", "(2,)", "(3, 4)")
tap.raises("gather wants an index no larger outside dim", function() zorch.gather(x34, 2, zorch.ones(5, 2):long()) end,
           "gather", "(5, 2)", "(3, 4)")
tap.raises("gather: a 0 index is refused (1-based)", function() zorch.gather(x34, 2, zorch.tensor{{0}}) end, "gather",
           "index 0", "1-based")
tap.raises("scatter: an index out of range", function() zorch.scatter(x34, 1, i2, zorch.ones(2, 2)) end,
           "scatter", "index 4 at position 4 is out of range 1..3")
tap.raises("scatter wants src of the index's shape", function() zorch.scatter(x34, 1, i2, zorch.ones(3, 3)) end,
           "scatter", "(3, 3)", "(2, 2)")
tap.raises("scatter wants src of the input's dtype", function() zorch.scatter(x34, 1, i2, zorch.ones(2, 2):double()) end,
           "scatter", "float64", "float32")
tap.raises("scatter_add wants int64 indices", function() zorch.scatter_add(x34, 1, zorch.ones(2, 2), zorch.ones(2, 2)) end,
           "int64")
tap.raises("topk: k larger than the dim", function() zorch.topk(x34, 5) end, "topk", "k = 5", "size 4", "(3, 4)")
tap.raises("topk: a negative k", function() zorch.topk(x34, -1, 1) end, "topk", "k = -1")
tap.raises("sort: a dim out of range", function() zorch.sort(x34, 3) end, "sort", "dim")
tap.raises("cumsum: a dim out of range", function() zorch.cumsum(x34, 5) end, "cumsum", "dim")
tap.raises("std of integers", function() zorch.std(zorch.tensor{1, 2, 3}) end, "std", "floating-point", "int64")
tap.raises("var: a negative correction", function() zorch.var(x34, 1, false, -1) end, "var", "correction")
tap.raises("argmax of an empty dim", function() zorch.argmax(zorch.ones(0, 3), 1) end, "argmax", "empty")
tap.raises("min: a dim out of range", function() zorch.min(x34, -3) end, "min", "dim")
tap.raises("randperm of a negative n", function() zorch.randperm(-1) end, "randperm", "-1")
tap.raises("randint with high below low", function() zorch.randint(5, 2, {3}) end, "randint", "high", "low")
tap.raises("randint wants its sizes as a table", function() zorch.randint(1, 5, 3) end, "table")
tap.raises("randint of bool", function() zorch.randint(0, 1, {3}, {dtype = "bool"}) end, "randint", "bool")
tap.raises("linear names input and weight", function() zorch.linear(t23, t45) end, "linear", "(2, 3)", "(4, 5)")
tap.raises("view of a bad size", function() t23:view(4, 4) end, "view", "(4, 4)", "(2, 3)")
tap.raises("tensor of a ragged table", function() zorch.tensor{{1, 2}, {3}} end, "ragged")
tap.raises("tensor of strings", function() zorch.tensor{"a"} end, "expected numbers")
tap.raises("unknown dtype", function() zorch.zeros(2, {dtype = "float7"}) end, "unknown dtype 'float7'")
tap.raises("unknown option", function() zorch.zeros(2, {dtyp = "float32"}) end, "unknown option 'dtyp'")
tap.raises("save of a function", function() zorch.save({a = print}, os.tmpname()) end, "save: a is a function")
tap.raises("load of a missing file", function() zorch.load("/nonexistent/x.safetensors") end, "cannot open")

-- corrupt and truncated safetensors files are rejected with a message
local good = os.tmpname()
zorch.save({w = zorch.randn(4, 4), b = zorch.ones(4)}, good)
local f = io.open(good, "rb")
local bytes = f:read("a")
f:close()
local function write(s)
  local p = os.tmpname()
  local h = io.open(p, "wb")
  h:write(s)
  h:close()
  return p
end
local cases = {
  {"empty file", ""},
  {"truncated length", bytes:sub(1, 4)},
  {"header longer than the file", string.pack("<I8", 1 << 40) .. bytes:sub(9)},
  {"truncated data", bytes:sub(1, #bytes - 10)},
  {"header not JSON", string.pack("<I8", 8) .. "notjson!"},
  {"bad dtype", (bytes:gsub('"F32"', '"X32"', 1))},
  {"offsets past the end", (bytes:gsub('"data_offsets":%[(%d+),(%d+)%]', '"data_offsets":[%1,99999]', 1))},
}
for _, c in ipairs(cases) do
  local p = write(c[2])
  tap.raises("load rejects a file with " .. c[1], function() zorch.load(p) end, "load", p)
  os.remove(p)
end
-- random single-byte mutations never crash the reader
local rejected, survived = 0, 0
for k = 1, 300 do
  local pos = (k * 7919) % #bytes + 1
  local mutated = bytes:sub(1, pos - 1) .. string.char((bytes:byte(pos) + k) % 256) .. bytes:sub(pos + 1)
  local p = write(mutated)
  if pcall(zorch.load, p) then survived = survived + 1 else rejected = rejected + 1 end
  os.remove(p)
end
tap.ok(rejected + survived == 300, ("300 mutated files: %d rejected with an error, %d still valid, no crash"):format(rejected, survived))
os.remove(good)
tap.done()
