-- Every function exported to Lua, called with bad arguments (nil, strings,
-- tables, wrong-shaped tensors), must raise an error that names it; none may
-- crash. Run under ASan by `make check-asan`.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local t23, t45, ti = zorch.ones(2, 3), zorch.ones(4, 5), zorch.tensor{1, 2}
-- io.stdout: a userdata of a tensor box's size that is not one
local bad = {nil, "str", {}, {1, "a"}, true, t45, ti, 1e300, -1, 0, zorch.ones(0), io.stdout}
local nbad = 12

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

-- Tampered internals (through the metatable and the debug library): errors,
-- or the op still works; never a crash.
do
  local t = zorch.ones(2)
  local shown = getmetatable(t)
  tap.ok(type(shown) == "table" and shown.__name == "zorch.Tensor" and shown.__gc == nil and shown.__close == nil and
         shown.__index == nil, "getmetatable gives only the type's name")
  shown.__gc = function() error("ran") end
  tap.ok(pcall(function() local u <close> = zorch.ones(1) end), "writing into that table changes nothing")
  local mt = debug.getmetatable(t)
  tap.ok(not pcall(mt.__gc, io.stdout) and not pcall(mt.__unm, io.stdout) and not pcall(mt.__add, io.stdout, t),
         "the metamethods refuse a foreign userdata")
  for _, junk in ipairs({io.stdout, "x", zorch.ones(1)}) do
    for k, v in pairs(debug.getregistry()) do
      if type(k) == "userdata" and type(v) == "table" and rawget(v, 1) == mt then v[2] = junk end
    end
    local ok, r = pcall(function() return (t + t):sum():item() + zorch.relu(t):sum():item() end)
    tap.ok(ok and r == 6, "a spare box replaced by " .. type(junk) .. ": results still come (" .. tostring(r) .. ")")
  end
  local st
  for k, v in pairs(debug.getregistry()) do
    if type(k) == "userdata" and type(v) == "table" and rawget(v, 1) == mt then st = v end
  end
  st[1] = 5 -- the metatable's slot in the state table
  tap.ok(not pcall(function() return t + t end), "a replaced tensor metatable: an error, not a crash")
  st[1] = mt
  local _ = t + t -- (an empty spare again: the failed push left the result in the old one)
  debug.setupvalue(mt.__add, 1, {5, st[2]}) -- the metamethod's own state table, with that spare
  tap.ok(not pcall(function() return t + t end), "a metamethod's state replaced: an error, not a crash")
  debug.setupvalue(mt.__add, 1, st)
  tap.ok((t + t):sum():item() == 4, "and restored, the op works again")
  local u = zorch.ones(2)
  debug.setmetatable(u, nil)
  tap.ok(pcall(zorch.relu, u), "a tensor whose metatable was removed still works as an argument")
  debug.setmetatable(u, mt) -- finalised again (without it, nothing would free the tensor)
end

-- Gradients: a chain set through .grad is freed without one C call per link,
-- and a tensor can be its own gradient without a reference cycle.
do
  local g = zorch.zeros(1)
  local root = g
  for _ = 1, 300000 do
    g.grad = zorch.zeros(1)
    g = g.grad
  end
  root, g = nil, nil
  collectgarbage()
  collectgarbage()
  tap.ok(true, "a chain of 300000 gradients is freed (no stack overflow)")
  local t = zorch.ones(3)
  t.grad = t
  t.grad:fill_(2)
  tap.ok(t:sum():item() == 6 and t.grad.grad == nil, "t.grad = t shares t's memory, and the alias has no gradient")
end

-- Bindings read a script's tables raw: its __index or __len never runs inside one.
do
  local ran = false
  local proxy = setmetatable({}, {__len = function() ran = true return 2 end,
                                  __index = function() ran = true return zorch.ones(2) end})
  pcall(zorch.cat, proxy)
  pcall(zorch.layer_norm, zorch.ones(2, 3), proxy)
  pcall(zorch.permute, zorch.ones(2, 3), proxy)
  pcall(zorch.zeros_like, zorch.ones(2), proxy)
  tap.ok(not ran, "cat, layer_norm, permute, zeros_like: no metamethod of the script's table ran")
  local ok, err = pcall(zorch.cat, proxy)
  tap.ok(not ok and tostring(err):find("non%-empty list"), "a proxy list reads as the empty table it is: " .. tostring(err))
end

-- The atomic writer never writes through a file left at its temporary name.
do
  local f = io.open("/proc/self/stat")
  local pid = f and f:read("n")
  if f then f:close() end
  local dir = os.tmpname()
  os.remove(dir)
  os.execute(("mkdir '%s'"):format(dir))
  local victim = dir .. "/victim"
  local v = io.open(victim, "w")
  v:write("kept")
  v:close()
  -- (the temporary names are latest.tmp.<pid>.<a counter>: links at the first 50)
  os.execute(("for k in $(seq 0 49); do ln -s '%s' '%s/latest.tmp.%d.'$k; done"):format(victim, dir, pid))
  zorch.fs.write_atomic(dir .. "/latest", "new")
  local function read(p) local h = io.open(p) local s = h:read("a") h:close() return s end
  tap.ok(pid and read(victim) == "kept" and read(dir .. "/latest") == "new",
         "symlinks at the temporary names are passed over, never followed")
  -- saving never puts a file in place of a FIFO (or a device), and writes through a symlink
  os.execute(("mkfifo '%s/fifo' && ln -s victim '%s/link'"):format(dir, dir))
  local ok, err = pcall(zorch.save, {a = zorch.ones(2)}, dir .. "/fifo")
  tap.ok(not ok and tostring(err):find("FIFO", 1, true) and os.execute(("test -p '%s/fifo'"):format(dir)),
         "zorch.save onto a FIFO: refused, the FIFO stays: " .. tostring(err))
  zorch.save({a = zorch.ones(2)}, dir .. "/link")
  tap.ok(os.execute(("test -L '%s/link'"):format(dir)) and zorch.load(victim).a:sum():item() == 2,
         "zorch.save through a symlink writes its target and keeps the link")
  ok, err = pcall(zorch.save, {a = zorch.ones(1)}, dir .. "/x\0y")
  tap.ok(not ok and tostring(err):find("NUL", 1, true) and not io.open(dir .. "/x"),
         "a path with a NUL byte: an error, no file of the shorter name: " .. tostring(err))
  ok, err = pcall(zorch.data.read_csv, dir)
  tap.ok(not ok and tostring(err):find("cannot read", 1, true), "read_csv of a folder: an error: " .. tostring(err))
  os.execute(("rm -rf '%s'"):format(dir))
end

-- A hook that closes the tensor whose backward is running; integers past C's ranges.
do
  local x = zorch.ones(3):requires_grad_()
  local l = (x * x):sum()
  x:register_hook(function() local c <close> = l end)
  tap.ok(pcall(l.backward, l) and x.grad:sum():item() == 6, "a hook closing the root of its pass: the pass completes")
  tap.ok(not pcall(function() return l + 1 end), "and the closed tensor is closed")
  local row = {}
  for i = 1, 256 do row[i] = 1 end
  local deep = row
  for _ = 1, 7 do local up = {} for i = 1, 256 do up[i] = deep end deep = up end
  local ok, err = pcall(zorch.tensor, deep)
  tap.ok(not ok and tostring(err):find("too many values"), "256^8 nested values: an error, not an overflow: " .. tostring(err))
  ok, err = pcall(zorch.unsqueeze, zorch.ones(2), 2147483648)
  tap.ok(not ok and tostring(err):find("out of range"), "unsqueeze at 2^31: " .. tostring(err))
  ok, err = pcall(zorch.set_num_threads, (1 << 32) + 1)
  tap.ok(not ok and tostring(err):find("threads"), "set_num_threads(2^32 + 1): " .. tostring(err))
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
                         blas_info = true, cuda_available = true, is_tensor = true, is_engine = true, Engine = true, clock = true, local_rank = true,
                         zeros = true, ones = true, rand = true, randn = true, empty = true,
                         host_memory = true, reset_peak_host_memory = true}
  tap.ok(not ok or allowed_empty[name], name .. "() without arguments raises")
end
tap.ok(checked == total, ("%d bad calls over %d functions ran without crashing (%d raised)"):format(total, #names, raised))

-- messages name the function, the argument and the shapes
tap.raises("add names the broadcast shapes", function() return t23 + t45 end, "add", "(2, 3)", "(4, 5)")
tap.raises("a string operand is named", function() return t23 + "x" end, "add", "string")
tap.raises("a bad argument type is named", function() zorch.relu("x") end, "relu", "tensor expected")
tap.raises("1-based dims: 0 is refused", function() t23:sum(0) end, "1-based")
tap.raises("indices are 1-based", function() return t23[0] end, "1-based")
tap.raises("out-of-range index", function() return t23[3] end, "select", "(2, 3)")
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
tap.raises("a data set of math.maxinteger samples: an error, not an endless loop", function()
  zorch.data.DataLoader(setmetatable({}, {__len = function() return math.maxinteger end,
                                         __index = function() return {zorch.ones(2), 1} end}), {batch_size = 2})
end, "DataLoader", "2^31")
tap.ok(zorch.randint(0, 255, {64}, {dtype = "uint8"}):max():item() <= 255 and zorch.randperm(255, {dtype = "uint8"}):numel() == 255,
       "ranges that fit uint8 still work")
tap.raises("Generator wants a seed", function() zorch.Generator() end, "Generator")
tap.raises("tensor of a ragged table", function() zorch.tensor{{1, 2}, {3}} end, "ragged")
tap.raises("tensor of strings", function() zorch.tensor{"a"} end, "expected numbers")
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
-- Module-level functions: a bad value is an error that names the function,
-- not an error from inside the module's Lua code.
do
  local nn, optim, data = zorch.nn, zorch.optim, require "zorch.data"
  zorch.set_grad_enabled(true) -- (the bad calls above may have left it off)
  local function named(label, fn, ...)
    local ok, err = pcall(fn)
    local msg = tostring(err)
    local good = not ok and not msg:find("%.lua:%d+: attempt") and not msg:find("bad argument #%d+ to '")
    for _, want in ipairs{...} do good = good and msg:find(want, 1, true) ~= nil end
    tap.ok(good, label .. (good and "" or (": got " .. msg)))
  end
  local m = nn.Linear(2, 2)
  local before = m.weight:clone()
  named("load_state_dict with a string for a tensor", function() m:load_state_dict({weight = "x"}, false) end,
        "load_state_dict: 'weight' is a string in the state dict, not a tensor")
  named("load_state_dict with a wrong shape", function() m:load_state_dict({weight = zorch.ones(3, 2), bias = zorch.ones(2)}) end,
        "'weight' has shape (2, 2) in the model but (3, 2)")
  named("load_state_dict checks every name before writing", function()
    m:load_state_dict({weight = zorch.ones(2, 2), bias = zorch.ones(3)}) end, "'bias' has shape (2)")
  tap.close(m.weight, before, 0, "a refused load_state_dict wrote no parameter")
  local o = optim.Adam(m:parameters(), {lr = 0.1})
  local s = optim.lr_scheduler.StepLR(o, 1)
  named("a scheduler state without last_step", function() s:load_state_dict({last_epoch = "x"}) end,
        "lr_scheduler:load_state_dict: last_step must be an integer >= 0, got nil")
  named("a scheduler state with base_lrs of strings", function()
    s:load_state_dict({last_step = 1, base_lr = 0.1, base_lrs = {"a"}}) end, "base_lrs must be a list of numbers")
  m(zorch.ones(1, 2)):sum():backward()
  o:step()
  local sd = o:state_dict()
  sd.state[1].step = "x"
  named("an optimizer state with a string step", function() o:load_state_dict(sd) end,
        "state 'step' of parameter 1 must be an integer >= 0, got x")
  sd.state[1].step = 1.0
  o:load_state_dict(sd)
  o:step()
  tap.ok(math.type(o.state[1].step) == "integer" and o.state[1].step == 2, "a float step of integer value loads as an integer")
  local ds = data.TensorDataset(zorch.zeros(4, 2))
  named("DataLoader with a NaN seed", function() data.DataLoader(ds, {seed = 0 / 0, shuffle = true}) end,
        "DataLoader: seed must be an integer")
  named("DataLoader with a number for shuffle", function() data.DataLoader(ds, {shuffle = 1}) end,
        "DataLoader: shuffle must be a boolean, got 1")
  local cyc = {}
  cyc.self = cyc
  local cds = setmetatable({get = function() return cyc end}, {__len = function() return 2 end})
  named("DataLoader over a cyclic sample", function() for _ in data.DataLoader(cds, {batch_size = 2}):iter() do end end,
        "nests tables deeper than 32 levels")
  named("progress with a NaN total", function() zorch.progress(0 / 0) end, "progress: total must be an integer >= 0")
  named("progress with a number for out", function() zorch.progress(10, {out = 5}) end,
        "progress: out must be a file or an object with a write method, got 5")
  named("progress with every 0", function() zorch.progress(10, {every = 0}) end, "progress: every must be an integer >= 1")
  named("l1_loss of shapes that do not broadcast", function() zorch.l1_loss(zorch.zeros(2, 2), zorch.zeros(3)) end,
        "l1_loss: ", "(2, 2) and (3,)")
  local E = nn.Module:extend "E"
  function E:forward() error({code = 7}) end
  local ok, err = pcall(function() return nn.Sequential(E())(zorch.ones(1)) end)
  tap.ok(not ok and type(err) == "table" and err.code == 7, "nn.Sequential passes a table error object up unchanged")
end

-- the declared ops' bad calls (include/zorch_ops.h): each raises its message
for _, c in ipairs(debug.getregistry()["zorch.private"]._op_cases()) do
  if c.kind == "bad" then
    local ok, err = pcall(assert(load(c.code, "=" .. c.op, "t", {zorch = zorch})))
    tap.ok(not ok and tostring(err):find(c.message, 1, true) ~= nil,
           ("%s raises %q (%s)"):format(c.code, c.message, tostring(err)))
  end
end
tap.done()
