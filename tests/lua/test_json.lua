-- zorch.json: encode and decode round trips, and errors part-way through an
-- encode (a table nested too deep) that leave nothing behind (the suite runs
-- under LeakSanitizer and valgrind too).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises

local v = {name = "run", steps = {1, 2, 3}, nested = {flag = true, ratio = 0.25, list = {"a", "b"}}}
local back = zorch.json.decode(zorch.json.encode(v))
ok(back.name == "run" and #back.steps == 3 and back.steps[3] == 3, "encode/decode: strings and arrays")
ok(back.nested.flag == true and back.nested.ratio == 0.25 and back.nested.list[2] == "b", "encode/decode: nested objects")
ok(zorch.json.encode(5) == "5" and zorch.json.encode("s") == '"s"' and zorch.json.encode(nil) == "null",
   "encode: scalars")
ok(zorch.json.encode({}) == "{\n}" or zorch.json.encode({}) == "{}", "encode: an empty table is an object")

-- 40 levels, past the encoder's 32: the partial tree is freed each time
local deep = {}
local c = deep
for _ = 1, 40 do c[1] = {x = {1, 2}}; c = c[1] end
for i = 1, 3 do raises("encode: too deep, try " .. i, function() zorch.json.encode(deep) end, "json: nested too deep") end
local wide = {}
for i = 1, 50 do wide[i] = {i, {i}} end
wide[51] = deep
raises("encode: too deep after a wide part", function() zorch.json.encode({a = wide}) end, "json: nested too deep")
-- 32 levels still encode
local ok32 = {}
c = ok32
for _ = 1, 31 do c[1] = {}; c = c[1] end
ok(pcall(zorch.json.encode, ok32), "encode: 32 levels")

-- compact: one line, no spaces, the same value
local compact = zorch.json.encode(v, {compact = true})
local cback = zorch.json.decode(compact)
ok(not compact:find("[\n\t ]") and cback.nested.list[2] == "b" and cback.steps[3] == 3 and cback.nested.ratio == 0.25,
  "encode compact: one line without spaces, the same value: " .. compact)
ok(zorch.json.encode(v):find("\n") ~= nil, "encode: indented by default")

tap.done()
