-- The Lua layers: nn, optim and io are below engine and parallel, so no file of
-- lua/zorch/nn, lua/zorch/optim or lua/zorch/io requires those modules or names what they
-- define (zorch.Engine, zorch._readable before it moved, ...). The names come
-- from the files of engine/ and parallel/ themselves; comments are left out.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local root = "../lua/zorch/"
local function files(dir)
  local list = {}
  local p = io.popen(("find %s%s -name '*.lua' | sort"):format(root, dir))
  for f in p:lines() do list[#list + 1] = f end
  p:close()
  return list
end
local function read(path)
  local f = assert(io.open(path))
  local s = f:read("a")
  f:close()
  return s
end
-- code without comments (--[[ ]] blocks, then -- to the end of a line; a "--"
-- inside a string is rare enough here to cut a line short, never to add a name)
local function code(s) return (s:gsub("%-%-%[(=*)%[.-%]%1%]", ""):gsub("%-%-[^\n]*", "")) end

-- the names the higher layers define on zorch
local higher = {}
for _, dir in ipairs({"engine", "parallel"}) do
  for _, f in ipairs(files(dir)) do
    local s = code(read(f))
    for name in s:gmatch("zorch%.([%a_][%w_]*)%s*=[^=]") do higher[name] = f end
    for name in s:gmatch("function%s+zorch%.([%a_][%w_]*)") do higher[name] = f end
  end
end
higher.dist = higher.dist or "parallel/dist.lua"
local count = 0
for _ in pairs(higher) do count = count + 1 end
tap.ok(higher.Engine and higher._from_deepspeed and count > 10,
       ("engine/ and parallel/ define %d names on zorch (zorch.Engine among them)"):format(count))

-- what in `text` reaches up: a require of zorch.engine / zorch.parallel, or a
-- name one of them defines
local function reaches_up(text)
  local found = {}
  local s = code(text)
  for m in s:gmatch("[\"'](zorch%.[%w_.]+)[\"']") do
    if m:match("^zorch%.engine") or m:match("^zorch%.parallel") then found[#found + 1] = m end
  end
  s = s:gsub('"[^"\n]*"', '""'):gsub("'[^'\n]*'", "''") -- a message naming zorch.Engine is no use of it
  for name in s:gmatch("zorch%.([%a_][%w_]*)") do
    if higher[name] then found[#found + 1] = "zorch." .. name .. " (" .. higher[name]:gsub("^.*/zorch/", "") .. ")" end
  end
  return found
end

-- the check fails where it should
tap.ok(#reaches_up('local E = zorch._require "zorch.engine.engine"') == 1, "a require of zorch.engine.engine is found")
tap.ok(#reaches_up("local r = zorch._readable_x; local e = zorch.Engine{}") == 1, "a use of zorch.Engine is found")
tap.ok(#reaches_up("local g = zorch.dist.world()") == 1, "a use of zorch.dist is found")
tap.ok(#reaches_up("-- zorch.Engine calls this\nlocal x = zorch.relu; error('use zorch.Engine')") == 0,
       "a comment, a message or a lower name is not")
local tmp = os.tmpname()
local f = assert(io.open(tmp, "w"))
f:write('local zorch = ...\nlocal pipe = zorch._require("zorch.parallel.pipeline")\n')
f:close()
tap.ok(#reaches_up(read(tmp)) == 1, "a file requiring zorch.parallel.pipeline is found")
os.remove(tmp)

for _, dir in ipairs({"nn", "optim", "io"}) do
  local list = files(dir)
  tap.ok(#list > 0, ("lua/zorch/%s has files (%d)"):format(dir, #list))
  for _, path in ipairs(list) do
    local found = reaches_up(read(path))
    tap.ok(#found == 0, ("%s reaches no higher layer%s"):format(path:gsub("^%.%./", ""),
                                                                 #found > 0 and ": " .. table.concat(found, ", ") or ""))
  end
end
tap.done()
