-- The zorch command (script, -e, --version, info, the REPL through a pipe), the
-- stock lua5.4 interpreter loading zorch.so, and the C embedding example built
-- with pkg-config after make install.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
local build = os.getenv("ZORCH_BUILD") or "../build"
local sanitized = os.getenv("ZORCH_TEST_SANITIZED") ~= nil

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end

local out, ok = run(bin .. " --version")
tap.ok(ok and out:match("^zorch %d+%.%d+%.%d+"), "--version")
out, ok = run(bin .. " info")
tap.ok(ok and out:find("blas:", 1, true) and out:find("kernel", 1, true) and out:find("threads:", 1, true),
       "info names the BLAS kernel and threads")
out, ok = run(bin .. [[ -e 'print(#arg, arg[1], (zorch.ones(2) * 3):sum():item())' one two]])
tap.ok(ok and out == "2\tone\t6.0\n", "-e runs a chunk and sees arg")
out, ok = run(bin .. [[ -e 'warn("hidden"); warn("@on"); warn("a ", "b"); warn("@off"); warn("no")']])
tap.ok(ok and out == "Lua warning: a b\n", "warn() is off until @on, as in lua5.4: " .. out)
local script = os.tmpname()
local f = io.open(script, "w")
f:write('local zorch = require "zorch"\nprint(select("#", ...), arg[0] ~= nil, arg[2])\n')
f:close()
out, ok = run(bin .. " " .. script .. " a b")
tap.ok(ok and out == "2\ttrue\tb\n", "a script gets its arguments as ... and arg, as in lua5.4")
f = io.open(script, "w")
f:write('error("boom")\n')
f:close()
out, ok = run(bin .. " " .. script)
tap.ok(not ok and out:find("boom", 1, true) and out:find("traceback", 1, true), "an error exits non-zero with a traceback")
os.remove(script)
-- an output path that cannot be written stops a model script before it trains
out = run(("cd .. && %s models/simple_net.lua --save /nonexistent-folder/m.safetensors 2>&1; echo status=$?"):format(
  bin:sub(1, 1) == "/" and bin or "tests/" .. bin))
tap.ok(out:find("--save: cannot write /nonexistent-folder/m.safetensors", 1, true) and out:find("status=2", 1, true)
       and not out:find("traceback", 1, true) and not out:find("epoch", 1, true),
       "a --save into a missing folder is a usage error before training: " .. out)

-- the REPL, driven through a pipe
local input = os.tmpname()
f = io.open(input, "w")
f:write("x = zorch.ones(2,3)\nx * 2\nerror('oops')\nfor i = 1, 2 do\n  print('line', i)\nend\n1 + 1\n")
f:close()
out, ok = run(bin .. " < " .. input)
os.remove(input)
tap.ok(ok, "the REPL exits cleanly at end of input")
tap.ok(out:find("tensor([[2., 2., 2.],", 1, true), "the REPL prints expressions (x * 2)")
tap.ok(out:find("oops", 1, true) and out:find("line\t2", 1, true), "the REPL survives an error and continues")
tap.ok(out:find("for i", 1, true) == nil and out:find("line\t1", 1, true), "multi-line statements run once complete")
tap.ok(out:find("\n2\n", 1, true) or out:match("^2\n") or out:find("2\n$"), "later expressions still print")

-- Ctrl-C interrupts a running chunk and the REPL carries on
input = os.tmpname()
f = io.open(input, "w")
f:write("while true do end\nprint('after interrupt')\n")
f:close()
local log = os.tmpname()
os.execute(("sh -c '%s < %s > %s 2>&1 & pid=$!; sleep 1; kill -INT $pid; wait $pid'"):format(bin, input, log))
f = io.open(log)
out = f:read("a")
f:close()
os.remove(input)
os.remove(log)
tap.ok(out:find("interrupted", 1, true) and out:find("after interrupt", 1, true),
       "Ctrl-C stops a running loop and the REPL continues")

if sanitized then
  tap.ok(true, "# SKIP stock lua5.4 cannot load a sanitizer build")
  tap.ok(true, "# SKIP the embedding example links the regular build")
  tap.done()
end

-- stock Lua loads the C module
out, ok = run(("lua5.4 -e 'package.cpath=\"%s/?.so;\"..package.cpath; local zorch = require \"zorch\"; print(zorch.ones(2,2):sum():item())'"):format(build))
tap.ok(ok and out == "4.0\n", "lua5.4 loads zorch.so: " .. out:gsub("\n", " "))

-- the embedding example, built with pkg-config after make install
local prefix = os.tmpname()
os.remove(prefix)
out, ok = run(("make -s -C .. install PREFIX=%s BUILD=%s"):format(prefix, build:gsub("^%.%./", "")))
tap.ok(ok, "make install PREFIX=" .. prefix)
out, ok = run(("PKG_CONFIG_PATH=%s/lib/pkgconfig sh -c 'cc ../examples/embed/host.c $(pkg-config --cflags --libs zorch) -o %s/host'"):format(prefix, prefix))
tap.ok(ok, "examples/embed/host.c builds with pkg-config " .. out)
out, ok = run(("%s/host ../examples/embed/model.lua"):format(prefix))
tap.ok(ok and out:find("predict(x) = tensor([[", 1, true), "the host runs the model script in a sandbox")
f = io.open(prefix .. "/escape.lua", "w")
f:write('function predict(x) return io.open("/etc/passwd") end\n')
f:close()
out, ok = run(("%s/host %s/escape.lua"):format(prefix, prefix))
tap.ok(not ok and out:find("io", 1, true), "the sandbox has no io")
os.execute("rm -rf " .. prefix)
tap.done()
