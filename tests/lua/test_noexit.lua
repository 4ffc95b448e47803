-- Library code never ends the process: no exit, _exit or abort outside the
-- zorch command (vm/main.c), comments included, except the _exit of a forked
-- child whose exec failed (it ends the child, never the caller), marked on its
-- line with "(the forked child)".
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local root = ".."
local cmd = ("grep -rnE '\\b(_exit|exit|abort)\\(' %s/vm %s/ops %s/zero %s/lua " ..
             "--include=*.c --include=*.cu --include=*.h"):format(root, root, root, root)
local p = io.popen(cmd)
local found = {}
for line in p:lines() do
  if not line:find("/vm/main.c:", 1, true) and not line:find("_exit(127); /* (the forked child)", 1, true) then
    found[#found + 1] = line
  end
end
p:close()
tap.ok(#found == 0, "no exit, _exit or abort in library code" ..
       (#found > 0 and (":\n#   " .. table.concat(found, "\n#   ")) or ""))

-- and the grep itself works: it finds the zorch command's own exit
p = io.popen(cmd)
local main = p:read("a"):find("/vm/main.c:", 1, true) ~= nil
p:close()
tap.ok(main, "the check sees vm/main.c's exit, so it reads the sources")
tap.done()
