-- What `make install` gives other projects: zorch.pc, enough for a static link
-- of libzorch.a (the embedding example, through pkg-config --static); the Lua
-- sources beside zorch.so, so that stock lua5.4 finds `require "zorch.NAME"` and
-- tracebacks name files that exist; the rockspec LuaRocks installs with.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local build = os.getenv("ZORCH_BUILD") or "../build"
if os.getenv("ZORCH_TEST_SANITIZED") then
  tap.ok(true, "# SKIP stock lua5.4 cannot load a sanitizer build")
  tap.done()
end

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end
local function oneline(s)
  return (s:gsub("%s+$", ""):gsub("\n%s*", " | "))
end
local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local prefix = os.tmpname()
os.remove(prefix)
local make = ("make -s -C .. BUILD=%s PREFIX=%s "):format(build:gsub("^%.%./", ""), prefix)
local out, ok = run(make .. "install")
tap.ok(ok, "make install PREFIX=" .. prefix .. " " .. oneline(out))

-- zorch.pc
local pc = ("PKG_CONFIG_PATH=%s/lib/pkgconfig pkg-config "):format(prefix)
out, ok = run(pc .. "--print-variables zorch >/dev/null && " .. pc .. "--static --libs zorch")
tap.ok(ok and out:find("-lzorch", 1, true) and out:find("-llua5.4", 1, true) and out:find("-lcjson", 1, true)
       and out:find("-lm", 1, true) and out:find("-ldl", 1, true) and out:find("-fopenmp", 1, true),
       "pkg-config --static names the libraries libzorch.a needs: " .. oneline(out))
local f = io.open(prefix .. "/lib/pkgconfig/zorch.pc")
local text = f and f:read("a") or ""
if f then f:close() end
tap.ok(text:find("\nRequires.private: lua5.4 libcjson", 1, true) and text:find("\nLibs.private: -fopenmp", 1, true)
       and text:find("\nCflags: -I${includedir}\n", 1, true), "zorch.pc has Requires.private, Libs.private and Cflags")

-- the embedding example, linked statically against the installed libzorch.a
out, ok = run(make .. "examples")
local host = build .. "/examples/host"
tap.ok(ok, "make examples links examples/embed/host.c with pkg-config --static " .. oneline(out))
out = run("readelf -d " .. host)
tap.ok(out:find("NEEDED", 1, true) and not out:find("libzorch", 1, true), "the host does not need libzorch.so")
out, ok = run(host .. " ../examples/embed/model.lua")
tap.ok(ok and out:find("predict(x) = tensor([[", 1, true),
       "the statically linked host runs the model script: " .. oneline(out))

-- the Lua modules under stock lua5.4
local lua_dir = prefix .. "/share/lua/5.4"
local function lua(paths, chunk)
  return run(("lua5.4 -e '%s' -e '%s'"):format(paths, chunk))
end
local built = ('package.cpath = "%s/?.so;" .. package.cpath'):format(build)
out, ok = lua(built, 'local nn = require "zorch.nn"; assert(type(nn.Linear) == "table" and require("zorch").nn == nn)'
                     .. '; assert(require "zorch.optim" == require("zorch").optim); print "yes"')
tap.ok(ok and out == "yes\n", "the built zorch.so alone: require \"zorch.nn\" gives zorch.nn " .. oneline(out))

local installed = ('package.cpath = "%s/lib/lua/5.4/?.so;" .. package.cpath; package.path = "%s/?.lua;%s/?/init.lua;" .. package.path')
                    :format(prefix, lua_dir, lua_dir)
-- every installed file, as its module name: zorch/nn/loss.lua is zorch.nn.loss,
-- zorch/nn/init.lua is zorch.nn
local names = {}
for path in run("cd " .. lua_dir .. " && find zorch -name '*.lua' | sort"):gmatch("[^\n]+") do
  names[#names + 1] = {path, (path:gsub("%.lua$", ""):gsub("/init$", ""):gsub("/", "."))}
end
local listed = {}
for _, n in ipairs(names) do listed[#listed + 1] = n[1] end
tap.ok(#names >= 20 and listed[1]:find("^zorch/[%w_]+/"),
       "make install puts the Lua sources in share/lua/5.4/zorch/...: " .. table.concat(listed, " "))
for _, n in ipairs(names) do
  local path, mod = n[1], n[2]
  local field = mod:match("^zorch%.([%w_]+)$")
  out, ok = lua(installed, ('local m, where = require "%s"; local z = require "zorch"; local f = %q'
                            .. '; assert(m ~= nil and m == package.loaded["%s"], "not loaded")'
                            .. '; assert(f == "" or m == (type(z[f]) == "table" and z[f] or true), "not zorch." .. f)'
                            .. '; print(where)'):format(mod, field or "", mod))
  tap.ok(ok and out == ("%s/%s\n"):format(lua_dir, path),
         ("require \"%s\" finds the installed file %s %s"):format(mod, path, oneline(out)))
end
out, ok = lua(built, 'local z = require "zorch"; assert(require "zorch.nn.loss" == package.loaded["zorch.nn.loss"])'
                     .. '; assert(require "zorch.engine" == true); print "yes"')
tap.ok(ok and out == "yes\n", "the built zorch.so finds a nested module (zorch.nn.loss) by its luaopen_ entry "
       .. oneline(out))

-- an error from inside nn names the installed file of nn.Linear, at the line that ran
-- (in its message: the traceback starts where the error left the module's call)
out, ok = lua(installed, 'local z = require "zorch"; local m = z.nn.Linear(3, 2)'
                         .. '; print(select(2, xpcall(m, debug.traceback, m, z.ones(2, 5))))')
local file, line = out:match("(zorch/nn/[%w_/]*%.lua):(%d+): ")
local source = {}
if file and exists(lua_dir .. "/" .. file) then
  for l in io.lines(lua_dir .. "/" .. file) do source[#source + 1] = l end
end
tap.ok(file and (source[tonumber(line)] or ""):find("linear", 1, true),
       ("the traceback names %s:%s, installed: %s"):format(file, line, oneline(source[tonumber(line) or 0] or out)))

-- the rockspec
if select(2, run("luarocks --version")) then
  out, ok = run("luarocks lint ../zorch-*.rockspec")
  tap.ok(ok, "luarocks lint accepts the rockspec " .. oneline(out))
else
  tap.ok(true, "# SKIP luarocks is not installed")
end
os.execute("rm -rf " .. prefix)
tap.done()
