-- zorch.save / zorch.load of tables that hold numbers, strings, booleans and
-- nested tables beside tensors: the tree round-trips (integers stay integers,
-- floats floats, arrays arrays), a table of tensors alone is written as before
-- (no metadata, PyTorch's layout), PyTorch's files still load, and malformed
-- metadata is refused with a message.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers
local nn, optim = zorch.nn, zorch.optim
local ok, raises = tap.ok, tap.raises

local tmp = tap.tmpdir()
local function header(path)
  local f = assert(io.open(path, "rb"))
  local n = string.unpack("<I8", f:read(8))
  local h = f:read(n)
  f:close()
  return Z.json.decode(h)
end

-- Deep equality with Lua 5.4's number subtypes: a float 1.0 is not an integer 1.
local function same(a, b, path)
  path = path or "value"
  if zorch.is_tensor(a) or zorch.is_tensor(b) then
    if not (zorch.is_tensor(a) and zorch.is_tensor(b)) then return false, path .. ": tensor vs not" end
    if a:dtype() ~= b:dtype() or table.concat(a.shape, ",") ~= table.concat(b.shape, ",") then
      return false, path .. ": dtype or shape"
    end
    if a:numel() > 0 and (a:double() - b:double()):abs():max():item() ~= 0 then return false, path .. ": values" end
    return true
  end
  if type(a) ~= type(b) then return false, ("%s: %s vs %s"):format(path, type(a), type(b)) end
  if type(a) == "number" then
    if math.type(a) ~= math.type(b) then return false, ("%s: %s vs %s"):format(path, math.type(a), math.type(b)) end
    if a ~= b and not (a ~= a and b ~= b) then return false, ("%s: %s vs %s"):format(path, a, b) end
    return true
  end
  if type(a) ~= "table" then return a == b, path end
  for k, v in pairs(a) do
    local good, where = same(v, b[k], path .. "." .. tostring(k))
    if not good then return false, where end
  end
  for k in pairs(b) do
    if a[k] == nil then return false, path .. "." .. tostring(k) .. ": extra" end
  end
  return true
end

-- a model, an optimizer with state, an epoch, a name and a nested config
zorch.manual_seed(3)
local model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
local opt = optim.Adam(model:parameters(), {lr = 1e-3, betas = {0.9, 0.999}})
local x, y = zorch.randn(8, 4), zorch.randn(8, 2)
for _ = 1, 3 do
  opt:zero_grad()
  zorch.mse_loss(model(x), y):backward()
  opt:step()
end
local tree = {model = model:state_dict(), opt = opt:state_dict(), epoch = 3, name = "run1",
              cfg = {lr = 1e-3, betas = {0.9, 0.999}, warm = 1.0, steps = 1000, big = math.maxinteger,
                     small = math.mininteger, inf = math.huge, ninf = -math.huge, tiny = 5e-324,
                     third = 1 / 3, on = true, off = false, empty = {}, text = "a \"quoted\"\n string, \u{e9}\u{1F600}",
                     sparse = {[1] = "a", [3] = "c"}, mixed = {10, 20, n = 2}, keys = {[2.5] = "x", [true] = 1},
                     nested = {{1, {2, {3}}}}}}
local path = tmp .. "/mixed.safetensors"
zorch.save(tree, path)
local back = zorch.load(path)
local good, where = same(tree, back)
ok(good, "the tree round-trips: tensors, integers, floats, strings, booleans, arrays, maps" ..
   (good and "" or (" (differs at " .. where .. ")")))
ok(math.type(back.epoch) == "integer" and math.type(back.cfg.warm) == "float" and back.cfg.warm == 1.0,
   "3 comes back an integer, 1.0 a float")
ok(back.cfg.big == math.maxinteger and back.cfg.small == math.mininteger, "64-bit integers beyond 2^53 are exact")
ok(back.cfg.third == 1 / 3 and back.cfg.tiny == 5e-324 and back.cfg.inf == math.huge and back.cfg.ninf == -math.huge,
   "floats are exact, infinities too")
ok(#back.cfg.betas == 2 and back.cfg.sparse[2] == nil and back.cfg.sparse[3] == "c" and back.cfg.mixed.n == 2 and
   #back.cfg.mixed == 2 and back.cfg.keys[2.5] == "x" and back.cfg.keys[true] == 1, "sparse, mixed and odd keys")
ok(next(back.cfg.empty) == nil and back.cfg.text == tree.cfg.text, "an empty table; a string with quotes and UTF-8")

zorch.save(tree, tmp .. "/again.safetensors")
ok(io.open(path, "rb"):read("a") == io.open(tmp .. "/again.safetensors", "rb"):read("a"),
   "the same tree writes the same bytes")

for k = 1, 2 do -- and in another process, where strings hash differently
  os.execute(("%s -e 'zorch.save({cfg = {a = 1, b = {x = 1, y = 2.5, [3] = true, [true] = \"t\"}, c = \"s\"}, " ..
              "w = zorch.ones(2)}, \"%s/p%d.safetensors\")'"):format(tap.zorch(), tmp, k))
end
ok(io.open(tmp .. "/p1.safetensors", "rb"):read("a") == io.open(tmp .. "/p2.safetensors", "rb"):read("a"),
   "two processes write the same bytes")

-- the optimizer resumes from the loaded state exactly as the live one continues
local model2 = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
model2:load_state_dict(back.model)
local opt2 = optim.Adam(model2:parameters(), {lr = 1e-3, betas = {0.9, 0.999}})
opt2:load_state_dict(back.opt)
for _, pair in ipairs({{model, opt}, {model2, opt2}}) do
  pair[2]:zero_grad()
  zorch.mse_loss(pair[1](x), y):backward()
  pair[2]:step()
end
ok(same(model:state_dict(), model2:state_dict()) and same(opt:state_dict(), opt2:state_dict()),
   "an optimizer loaded from the file takes the same next step")

-- the file: tensors under their paths, the rest in __metadata__["zorch.values"]
local h = header(path)
ok(h["model.0.weight"] and h["opt.state.1.exp_avg"] and h["opt.state.4.exp_avg_sq"], "tensors are named by their paths")
ok(type(h.__metadata__) == "table" and type(h.__metadata__["zorch.values"]) == "string", "the values are metadata")
local v = Z.json.decode(h.__metadata__["zorch.values"])
ok(v.version == 1 and v.value.map.epoch == 3 and v.value.map.cfg.map.warm.float == "1" and
   v.value.map.model.map["0.weight"].tensor == "model.0.weight", "the documented JSON layout")
-- a table of tensors alone: no metadata, names as given (PyTorch's layout)
local flat = tmp .. "/flat.safetensors"
zorch.save(model:state_dict(), flat)
h = header(flat)
ok(h.__metadata__ == nil and h["0.weight"] and h["2.bias"], "a state dict is written as before, without metadata")
ok(same(zorch.load(flat), model:state_dict()), "and loads as before")

-- PyTorch's files: no zorch metadata, or other metadata, load as tensors
local pt = zorch.load("golden/from_torch.safetensors")
ok(pt["layer.weight"]:dtype() == "float32" and pt.half:dtype() == "bfloat16" and
   math.abs(pt["layer.weight"]:sum():item() - 15) < 1e-6, "a file written by PyTorch loads as {name = tensor}")
local function write_file(p, hdr, data)
  hdr = hdr .. string.rep(" ", (8 - #hdr % 8) % 8)
  local f = assert(io.open(p, "wb"))
  f:write(string.pack("<I8", #hdr), hdr, data or "")
  f:close()
end
local function tensor_entry(name) return ('"%s":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'):format(name) end
local data = string.pack("<ff", 1.5, -2)
local hf = tmp .. "/hf.safetensors"
write_file(hf, '{"__metadata__":{"format":"pt"},' .. tensor_entry("w") .. "}", data)
local t = zorch.load(hf)
ok(t.w and t.w[2]:item() == -2 and t.format == nil and t.__metadata__ == nil, "other metadata ({format = pt}) is not a value")
-- dtypes zorch has no dtype for widen (as load_idx's do); a writer's final newline pads too
local function entry(name, dt, shape, a, b)
  return ('"%s":{"dtype":"%s","shape":[%s],"data_offsets":[%d,%d]}'):format(name, dt, shape, a, b)
end
local wide = tmp .. "/wide.safetensors"
local raw = string.pack("<i1i1", -128, 127) .. string.pack("<i2i2", -32768, 7) .. string.pack("<I2", 65535) ..
            string.pack("<I4", 4294967295) .. string.pack("<I8", (1 << 62) + 1) .. string.char(0x38, 0xFE, 0x7F) ..
            string.char(0x3C, 0xFB, 0x7C)
local h = "{" .. table.concat({entry("i8", "I8", "2", 0, 2), entry("i16", "I16", "2", 2, 6), entry("u16", "U16", "1", 6, 8),
  entry("u32", "U32", "1", 8, 12), entry("u64", "U64", "1", 12, 20), entry("e4m3", "F8_E4M3", "3", 20, 23),
  entry("e5m2", "F8_E5M2", "3", 23, 26)}, ",") .. "}\n"
local f = assert(io.open(wide, "wb"))
f:write(string.pack("<I8", #h), h, raw)
f:close()
local w = zorch.load(wide)
ok(w.i8:dtype() == "int8" and w.i8[1]:item() == -128 and w.i8[2]:item() == 127, "I8 loads as int8")
ok(w.i16:dtype() == "int32" and w.i16[1]:item() == -32768 and w.u16:dtype() == "int32" and w.u16[1]:item() == 65535,
   "I16, U16 load as int32 with their values")
ok(w.u32:dtype() == "int64" and w.u32[1]:item() == 4294967295 and w.u64[1]:item() == (1 << 62) + 1,
   "U32 and U64 load as int64, exact")
local e4, e5 = w.e4m3:totable(), w.e5m2:totable()
ok(w.e4m3:dtype() == "float32" and e4[1] == 1 and e4[2] == -448 and e4[3] ~= e4[3] and
   e5[1] == 1 and e5[2] == -57344 and e5[3] == math.huge, "float8 (E4M3, E5M2) loads as float32, exact, with nan and inf")
ok(zorch.load(wide, "i8")[1]:item() == -128, "one tensor of such a file loads by name")
local over = tmp .. "/over.safetensors"
h = "{" .. entry("u", "U64", "1", 0, 8) .. "}"
f = assert(io.open(over, "wb"))
f:write(string.pack("<I8", #h), h, string.pack("<I8", -1))
f:close()
tap.raises("a U64 value past int64 is an error", function() return zorch.load(over) end, "past int64")

if os.execute("python3 -c 'import torch, safetensors' 2>/dev/null") then
  ok(os.execute(("python3 -c \"from safetensors import safe_open; f = safe_open('%s', 'pt'); " ..
    "assert 'zorch.values' in f.metadata() and 'opt.state.1.exp_avg' in f.keys()\""):format(path)),
    "PyTorch's safetensors opens a file with values")
else
  ok(true, "# SKIP python3 with torch and safetensors is not installed")
end

-- malformed metadata is refused with a message
local function meta_file(values_json)
  local p = tmp .. "/bad.safetensors"
  write_file(p, ('{"__metadata__":{"zorch.values":%s},%s}'):format(values_json, tensor_entry("w")), data)
  return p
end
local function q(s) return '"' .. s:gsub('"', '\\"') .. '"' end
for _, c in ipairs({
  {'{"__metadata__":{"zorch.values":3},' .. tensor_entry("w") .. "}", "__metadata__ entry 'zorch.values' is not a string"},
  {'{"__metadata__":[1],' .. tensor_entry("w") .. "}", "__metadata__ is not an object of strings"},
}) do
  local p = tmp .. "/bad.safetensors"
  write_file(p, c[1], data)
  raises("metadata that is not strings: " .. c[2], function() zorch.load(p) end, p, c[2])
end
for _, c in ipairs({
  {q("{not json"), "not valid JSON"},
  {q('{"value":{"map":{}}}'), 'expected {"version": 1, "value": ...}'},
  {q('{"version":2,"value":{"map":{}}}'), "has version 2; this zorch reads version 1"},
  {q('{"version":1,"value":3}'), "the value is not a table"},
  {q('{"version":1,"value":{"map":{"a":1.5}}}'), "a number that is not an integer"},
  {q('{"version":1,"value":{"map":{"a":{"float":"x1"}}}}'), "a float node that is not a number"},
  {q('{"version":1,"value":{"map":{"a":{"int":"99999999999999999999"}}}}'), "not a 64-bit integer"},
  {q('{"version":1,"value":{"map":{"a":{"tensor":"nope"}}}}'), "refers to tensor 'nope', which the file does not hold"},
  {q('{"version":1,"value":{"map":{"a":{"what":1}}}}'), "a node that is not"},
  {q('{"version":1,"value":{"map":{"a":null}}}'), "a node that is not"},
  {q('{"version":1,"value":{"pairs":[[1]]}}'), "a pair that is not [key, value]"},
  {q('{"version":1,"value":{"pairs":[[[1],2]]}}'), "a key that is not a string, number or boolean"},
  {q('{"version":1,"value":{"map":{"a":{"map":[]}}}}'), "a map node that is not an object"},
  {q('{"version":1,"value":' .. string.rep("[", 100) .. string.rep("]", 100) .. "}"), "nested too deep"},
}) do
  local p = meta_file(c[1])
  raises("malformed zorch.values: " .. c[2], function() zorch.load(p) end, p, c[2])
end
-- a tensor the tree does not name still loads, beside the values
t = zorch.load(meta_file(q('{"version":1,"value":{"map":{"epoch":2}}}')))
ok(t.epoch == 2 and t.w and t.w[1]:item() == 1.5, "a tensor the values do not name is kept under its name")

-- what cannot be saved
raises("a function is refused, by path", function() zorch.save({a = {b = print}}, tmp .. "/x") end,
       "save: a.b is a function")
raises("a table key is refused", function() zorch.save({a = {[{}] = 1}}, tmp .. "/x") end,
       "save: a key of a is a table")
local cyc = {n = 1}
cyc.self = cyc
raises("a cycle is refused", function() zorch.save(cyc, tmp .. "/x") end, "nested more than 64 tables deep")
raises("a string with a NUL byte is refused", function() zorch.save({a = {b = "x\0y"}}, tmp .. "/x") end,
       "save: the string at a.b is not UTF-8 text")
raises("a key that is not UTF-8 is refused", function() zorch.save({a = {["\xff"] = 1}}, tmp .. "/x") end,
       "save: a key in a is not UTF-8 text")
ok(io.open(tmp .. "/x", "rb") == nil, "a refused save writes no file")
-- names that collide get a suffix; both tensors come back
local t1, t2 = zorch.ones(2), zorch.zeros(3)
zorch.save({["a.b"] = t1, a = {b = t2}, n = 1}, tmp .. "/coll.safetensors")
back = zorch.load(tmp .. "/coll.safetensors")
ok(same(back, {["a.b"] = t1, a = {b = t2}, n = 1}), "tensors whose paths collide both round-trip")

os.execute("rm -rf " .. tmp)
tap.done()
