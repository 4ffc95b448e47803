-- zorch.load of PyTorch's torch.save files (golden/pt, from golden/gen_pt.py):
-- every value as PyTorch reads it back (golden/pt/expect.json), storages
-- shared as they were, and hostile files refused without running anything:
-- calls outside the allowed globals, a whole nn.Module, truncated and
-- damaged files.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises = tap.ok, tap.raises

local dir = "golden/pt/"
local f = assert(io.open(dir .. "expect.json"))
local expect = zorch.json.decode(f:read("a"))
f:close()

-- Compares a loaded value with its description; returns false and the path where they differ.
local function same(got, want, path)
  if type(want) ~= "table" then
    if math.type(want) == "integer" then return math.type(got) == "integer" and got == want, path end
    return got == want, path
  end
  if want.none then return got == nil, path end
  if want.float then return math.type(got) == "float" and got == want.float, path end
  if want.tensor then
    local w = want.tensor
    if not zorch.is_tensor(got) then return false, path .. " (not a tensor)" end
    if got:dtype() ~= w.dtype then return false, path .. " dtype " .. got:dtype() .. " vs " .. w.dtype end
    if table.concat(got.shape, ",") ~= table.concat(w.shape, ",") then return false, path .. " shape" end
    local vals = got:numel() > 0 and got:double():reshape(-1):totable() or {}
    if #vals ~= #w.values then return false, path .. " count" end
    for i = 1, #vals do
      if vals[i] ~= w.values[i] then return false, ("%s[%d]: %s vs %s"):format(path, i, vals[i], w.values[i]) end
    end
    return true
  end
  if type(got) ~= "table" then return false, path .. " (not a table)" end
  local n = 0
  for _ in pairs(got) do n = n + 1 end
  local count = 0
  if want.map then
    for k, v in pairs(want.map) do
      if not (type(v) == "table" and v.none) then count = count + 1 end
      local good, where = same(got[k], v, path .. "." .. k)
      if not good then return false, where end
    end
  elseif want.pairs then
    for _, kv in ipairs(want.pairs) do
      local k = type(kv[1]) == "table" and kv[1].float or kv[1]
      if not (type(kv[2]) == "table" and kv[2].none) then count = count + 1 end
      local good, where = same(got[k], kv[2], path .. "[" .. tostring(k) .. "]")
      if not good then return false, where end
    end
  else
    for i, v in ipairs(want) do
      if not (type(v) == "table" and v.none) then count = count + 1 end
      local good, where = same(got[i], v, path .. "[" .. i .. "]")
      if not good then return false, where end
    end
  end
  return n == count, path .. " has " .. n .. " entries, not " .. count
end

local names = {}
for name in pairs(expect) do names[#names + 1] = name end
table.sort(names)
ok(#names >= 7, "the generator described " .. #names .. " files")
for _, name in ipairs(names) do
  local good, v = pcall(zorch.load, dir .. name)
  if not good then print("# " .. tostring(v)) end
  local match, where = false, nil
  if good then match, where = same(v, expect[name].value, name) end
  ok(match, name .. ": every value as PyTorch reads it" .. (where and not match and (" (differs at " .. where .. ")") or ""))
  -- storages shared in the file are shared after loading: a write through one shows in the other
  for _, pair in ipairs(good and expect[name].shares or {}) do
    local a, b = v[pair[1]], v[pair[2]]
    local before = b:double():sum():item()
    a:add_(1)
    ok(b:double():sum():item() ~= before, ("%s: %s and %s share their storage"):format(name, pair[1], pair[2]))
  end
end

-- the shares are what the generator saw: views.pt's views of one tensor do, its other tensor does not
local shares = {}
for _, p in ipairs(expect["views.pt"].shares) do shares[p[1] .. "+" .. p[2]] = true; shares[p[2] .. "+" .. p[1]] = true end
ok(shares["t+whole"] and shares["narrow+row"] and not shares["other+whole"], "views.pt: the expected pairs share storage")

-- a state dict goes into a model
local nn = zorch.nn
local model = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2))
local sd = zorch.load(dir .. "state_fp32.pt")
model:load_state_dict(sd)
ok((model:state_dict()["2.weight"] - sd["2.weight"]):abs():max():item() == 0, "state_fp32.pt loads into the same model")

-- a Hugging Face folder with pytorch_model.bin and no safetensors: hf.load reads it
local hfdir = tap.tmpdir()
local src = assert(io.open(dir .. "state_fp32.pt", "rb"))
zorch.fs.write_atomic(hfdir .. "/pytorch_model.bin", src:read("a"))
src:close()
local m2 = nn.Sequential(nn.Linear(4, 3), nn.LayerNorm(3), nn.Linear(3, 2))
ok(zorch.hf.load(m2, hfdir) == 6, "hf.load reads pytorch_model.bin: 6 tensors")
ok((m2:state_dict()["0.weight"] - sd["0.weight"]):abs():max():item() == 0, "hf.load: the weights are the file's")

-- ---- hostile files: refused, naming the file and the global, and nothing runs ----
os.remove("pt_pwned")
raises("a pickle calling os.system is refused", function() zorch.load(dir .. "evil_system.pt") end,
       "evil_system.pt", "the global posix.system", "nothing was run")
ok(io.open("pt_pwned") == nil, "os.system did not run (no pt_pwned file)")
raises("builtins.eval through STACK_GLOBAL is refused", function() zorch.load(dir .. "evil_eval.pt") end,
       "evil_eval.pt", "the global builtins.eval")
raises("a whole nn.Module is refused, naming its class", function() zorch.load(dir .. "whole_module.pt") end,
       "whole_module.pt", "torch.nn.modules.container.Sequential")

local tmp = tap.tmpdir()
local function bytes_of(path) return assert(io.open(path, "rb")):read("a") end -- (closed by the collector)
local write = zorch.fs.write_atomic

-- a pickle of our own in a torch.save-shaped zip (one stored entry, no compression)
local function crc32(s)
  local c = 0xFFFFFFFF
  for i = 1, #s do
    c = c ~ s:byte(i)
    for _ = 1, 8 do c = (c >> 1) ~ (0xEDB88320 & -(c & 1)) end
  end
  return c ~ 0xFFFFFFFF
end
-- zip64: the sizes and offsets in the zip64 extra field and end record, as
-- files past 4 GiB have them
local function zip_of(pkl, zip64)
  local name, ones = "archive/data.pkl", 0xFFFFFFFF
  local lh = string.pack("<I4I2I2I2I2I2I4I4I4I2I2", 0x04034b50, 20, 0, 0, 0, 0, crc32(pkl), #pkl, #pkl, #name, 0)
  local local_part = lh .. name .. pkl
  local extra = zip64 and string.pack("<I2I2I8I8I8", 1, 24, #pkl, #pkl, 0) or ""
  local cd = string.pack("<I4I2I2I2I2I2I2I4I4I4I2I2I2I2I2I4I4", 0x02014b50, 45, 45, 0, 0, 0, 0, crc32(pkl),
                         zip64 and ones or #pkl, zip64 and ones or #pkl, #name, #extra, 0, 0, 0, 0,
                         zip64 and ones or 0) .. name .. extra
  if not zip64 then
    return local_part .. cd .. string.pack("<I4I2I2I2I2I4I4I2", 0x06054b50, 0, 0, 1, 1, #cd, #local_part, 0)
  end
  local at = #local_part + #cd
  local z64 = string.pack("<I4I8I2I2I4I4I8I8I8I8", 0x06064b50, 44, 45, 45, 0, 0, 1, 1, #cd, #local_part)
  local locator = string.pack("<I4I4I8I4", 0x07064b50, 0, at, 1)
  return local_part .. cd .. z64 .. locator .. string.pack("<I4I2I2I2I2I4I4I2", 0x06054b50, 0, 0, 0xFFFF, 0xFFFF, ones, ones, 0)
end
local function load_pickle(pkl)
  local p = tmp .. "/p.pt"
  write(p, zip_of(pkl))
  return pcall(zorch.load, p)
end

local good, v = load_pickle("\x80\x02}q\x00(X\x01\x00\x00\x00aK\x05u.")
ok(good and v.a == 5, "a hand-made pickle in a hand-made zip loads ({a = 5})")
write(tmp .. "/z64.pt", zip_of("\x80\x02}q\x00(X\x01\x00\x00\x00aK\x06u.", true))
good, v = pcall(zorch.load, tmp .. "/z64.pt")
ok(good and v.a == 6, "a zip64 archive loads ({a = 6}) " .. tostring(not good and v or ""))
local z = zip_of("\x80\x02K\x01.", true)
write(tmp .. "/z64cut.pt", z:sub(1, -43) .. z:sub(-22))
good, v = pcall(zorch.load, tmp .. "/z64cut.pt")
ok(not good and tostring(v):find("zip64", 1, true), "a zip64 end record without its locator is refused")
local cases = {
  {"\x80\x02cos\nsystem\nX\x02\x00\x00\x00idtR.", "the global os.system"},
  {"\x80\x02ctorch\nFloatStorage\n)R.", "REDUCE at byte", "calls torch.FloatStorage"},
  {"\x80\x02X\x01\x00\x00\x00a)R.", "calls a str"},
  {"\x80\x02]X\x01\x00\x00\x00ab.", "BUILD at byte", "on a list"},
  {"\x80\x02h\x05.", "memo index 5"},
  {"\x80\x02Nr\xff\xff\xff\x7f.", "memo index 2147483647"},
  {"\x80\x02X\xff\xff\xff\x7fabc.", "a string of 2147483647 bytes"},
  {"\x80\x02\x8a\x09123456789.", "an integer of 9 bytes"},
  {"\x80\x02i__builtin__\nprint\n.", "INST"},
  {"\x80\x02K\x01K\x02K\x03s.", "SETITEM at byte", "on a int"},
  {"\x80\x02)a.", "finds too few"},
  {"\x80\x02K\x01", "ends without STOP"},
  {"\x80\x02\xff.", "opcode 0xff"},
  {"\x80\x02(X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK\x04tQ.",
   "lacks the storage archive/data/0"},
}
for _, c in ipairs(cases) do
  local g, err = load_pickle(c[1])
  local hit = not g
  for k = 2, #c do hit = hit and tostring(err):find(c[k], 1, true) ~= nil end
  if not hit then print("# got: " .. tostring(err)) end
  ok(hit, "refused: " .. c[2])
end
-- a list that holds itself is a cycle
good, v = load_pickle("\x80\x02]q\x00h\x00a.")
ok(not good, "a list holding itself is refused")
good, v = load_pickle("\x80\x02]q\x00(h\x00h\x00e.")
ok(not good and tostring(v):find("holds itself (a cycle)", 1, true), "a list holding itself twice is refused as a cycle")
-- a dict shared 2^40 times over 40 levels is refused by its size
local deep = {"\x80\x02]q\x00"}
for i = 1, 40 do deep[#deep + 1] = ("0]q%s(h%sh%se"):format(string.char(i), string.char(i - 1), string.char(i - 1)) end
good, v = load_pickle(table.concat(deep) .. ".")
if good or not tostring(v):find("more than 4194304 items", 1, true) then print("# got: " .. tostring(v)) end
ok(not good and tostring(v):find("more than 4194304 items", 1, true) ~= nil, "sharing that would expand 2^40 times is refused")

-- truncated files: every cut of the valid ones fails with a message (or, past the
-- zip's end record, still loads): none crashes
local cuts, clean = 0, 0
for _, name in ipairs({"dtypes.pt", "nested.pt", "legacy.pt"}) do
  local s = bytes_of(dir .. name)
  for len = 0, #s - 1, 7 do
    write(tmp .. "/cut.pt", s:sub(1, len))
    local g, err = pcall(zorch.load, tmp .. "/cut.pt")
    cuts = cuts + 1
    if not g and tostring(err):find("load", 1, true) then clean = clean + 1 end
  end
end
ok(clean == cuts, ("truncated files: %d of %d refused with a message"):format(clean, cuts))

-- damaged bytes: each loads or fails with a message
math.randomseed(7)
local tries, fine = 0, 0
for _, name in ipairs({"dtypes.pt", "views.pt", "nested.pt", "legacy.pt", "proto4.pt"}) do
  local s = bytes_of(dir .. name)
  for _ = 1, 60 do
    local b = {s:byte(1, -1)}
    for _ = 1, 3 do
      b[math.random(#b)] = math.random(0, 255)
    end
    local chunks = {}
    for i = 1, #b, 4096 do chunks[#chunks + 1] = string.char(table.unpack(b, i, math.min(i + 4095, #b))) end
    write(tmp .. "/fuzz.pt", table.concat(chunks))
    local g, err = pcall(zorch.load, tmp .. "/fuzz.pt")
    tries = tries + 1
    if g or tostring(err):find("load", 1, true) then fine = fine + 1 end
  end
end
ok(fine == tries, ("damaged files: %d of %d load or fail with a message"):format(fine, tries))
ok(io.open("pt_pwned") == nil, "still no pt_pwned file")

tap.done()
