-- The REPL at a terminal, driven through a pseudo-terminal (tests/pty_drive.py):
-- Ctrl-C at the prompt and while a chunk runs (through pcall and coroutines,
-- in loops without calls, repeated while a long op runs),
-- Tab completion, help(), protected printing, the history file of a killed
-- REPL, and zorch -i.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local p = io.popen("pwd")
local cwd = p:read("l")
p:close()
local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
if not bin:match("^/") then bin = cwd .. "/" .. bin end

if not os.execute("python3 -c 'import pty' 2>/dev/null") then
  tap.ok(true, "# SKIP no python3 with the pty module")
  tap.done()
end

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local history = dir .. "/history"

-- Text for a step line: control characters, backslashes and newlines escaped.
local function escape(s)
  return (s:gsub("[%c\\]", function(c) return ("\\x%02x"):format(c:byte()) end))
end

-- A session: steps to send and expect; run() returns the per-expect results.
-- A line typed with s.line is entered with Enter (\r, as a terminal sends it);
-- anything typed after it waits for the next prompt, so keys reach readline
-- and not the terminal's own line editing while a chunk runs.
local PROMPTED = "the REPL prompts again after every input"
local function session()
  local s = {lines = {}, names = {}, waiting = false}
  -- each expect is found after the previous one; name: the check it belongs to
  function s.expect(text, name)
    s.lines[#s.lines + 1] = "expect " .. escape(text)
    s.names[#s.names + 1] = name
  end
  local function settle()
    if s.waiting then
      s.waiting = false
      s.expect("> ", PROMPTED)
    end
  end
  function s.send(text)
    settle()
    s.lines[#s.lines + 1] = "send " .. escape(text)
  end
  function s.line(text)
    s.send(text .. "\r")
    s.waiting = true
  end
  -- a prompt named by the test (>> for a continuation line): no wait needed then
  function s.prompt(text, name)
    s.waiting = false
    s.expect(text, name)
  end
  -- Ctrl-C while a chunk runs or at a prompt already seen: no wait
  function s.interrupt()
    s.lines[#s.lines + 1] = "send " .. escape("\3")
    s.waiting = true
  end
  function s.sleep(sec) s.lines[#s.lines + 1] = "sleep " .. sec end
  function s.kill()
    settle()
    s.lines[#s.lines + 1] = "kill"
  end
  function s.run(args)
    settle()
    local steps = dir .. "/steps"
    local f = assert(io.open(steps, "w"))
    f:write(table.concat(s.lines, "\n"), "\n")
    f:close()
    local cmd = ("cd %s && HOME=%s ZORCH_HISTORY=%s INPUTRC=/dev/null TERM=xterm python3 %s/pty_drive.py %s -- %s %s 2>&1")
      :format(dir, dir, history, cwd, steps, bin, args or "")
    local p = io.popen(cmd)
    local out = p:read("a")
    p:close()
    local res = {found = {}, transcript = out:match("\ntranscript:\n(.*)$") or out}
    for what, n in out:gmatch("(%a+) (%d+)\n") do
      if what == "ok" then res.found[tonumber(n)] = true end
    end
    res.exit = tonumber(out:match("\nexit (%-?%d+)\n") or out:match("^exit (%-?%d+)\n"))
    -- a check passes when all its expects were found
    res.check = {}
    for i, name in ipairs(s.names) do
      if res.check[name] == nil then res.check[name] = true end
      res.check[name] = res.check[name] and res.found[i] == true
    end
    return res
  end
  return s
end

local shown = false
local function check(res, name)
  local ok = res.check[name]
  tap.ok(ok, name)
  if not ok and not shown then
    shown = true
    print("#   transcript:\n#   " .. res.transcript:gsub("\n", "\n#   "))
  end
end

-- the first session: everything at the prompt, then killed
local s = session()
local C = {
  banner = "the REPL starts on a terminal",
  ctrlc_prompt = "Ctrl-C at the prompt clears the line; print(1+1) then prints 2",
  help = "help(zorch.relu) prints its documentation from docs/api.md",
  help_class = "help(zorch.nn.Linear) prints the nn.Linear entry",
  help_none = "help of an undocumented function says so, with its kind",
  tab_field = "Tab after zorch.rel completes zorch.relu",
  tab_nested = "Tab after zorch.nn.Lin completes zorch.nn.Linear",
  tab_method = "Tab after x:resh completes a tensor method (reshape)",
  tab_odd = "completion survives __index functions that raise and odd input",
  close = "a closed <close> tensor printed: tensor(closed), and the REPL goes on",
  tostring = "a raising __tostring: an error, and the REPL goes on",
  int_pcall = "Ctrl-C interrupts while true do pcall(function() end) end",
  int_coroutine = "Ctrl-C interrupts a pcall loop inside a coroutine",
  ctrlc_cont = "Ctrl-C in a continuation line abandons the whole input",
}
s.expect("help(x) for documentation", C.banner)
s.expect("> ", C.banner)
s.send("print('never')")
s.expect("print('never')", C.ctrlc_prompt)
s.interrupt()
s.expect("^C\n", C.ctrlc_prompt)
s.line("print(1+1)")
s.expect("\n2\n", C.ctrlc_prompt)
s.line("help(zorch.relu)")
s.expect("zorch.relu: function", C.help)
s.expect("Functions, also methods", C.help)
s.line("help(zorch.nn.Linear)")
s.expect("zorch.nn.Linear: class", C.help_class)
s.expect("Linear(in, out, {bias = false", C.help_class)
s.line("function myfn() end; help(myfn)")
s.expect("no documentation for myfn (function", C.help_none)
s.line("zorch.rel\t(zorch.tensor({-1, 2}))")
s.expect("\ntensor([0, 2])\n", C.tab_field)
s.line("zorch.nn.Lin\t == zorch.nn.Linear")
s.expect("\ntrue\n", C.tab_nested)
s.line("x = zorch.ones(2)")
s.line("x:resh\t(2, 1):size(1) * 7")
s.expect("\n14\n", C.tab_method)
s.line("bad = setmetatable({}, {__index = function() error('boom') end})")
s.line("bad.f\t\t\21bad:\t\t\21bad.f.g\t\21(((\t\21print(6*7)")
s.expect("\n42\n", C.tab_odd)
s.line("do local c <close> = zorch.ones(2); y = c end")
s.line("y")
s.expect("tensor(closed)", C.close)
s.line("print('alive after close')")
s.expect("\nalive after close\n", C.close)
s.line("setmetatable({}, {__tostring = function() error('bad tostring') end})")
s.expect("bad tostring", C.tostring)
s.line("print(3*3)")
s.expect("\n9\n", C.tostring)
s.line("print('loop' .. 'ing'); while true do pcall(function() end) end")
s.expect("\nlooping\n", C.int_pcall)
s.sleep(0.3)
s.interrupt()
s.expect("interrupted", C.int_pcall)
s.line("print('back' .. 1)")
s.expect("\nback1\n", C.int_pcall)
s.line("co = coroutine.wrap(function() print('co' .. 'run'); while true do pcall(function() end) end end); co()")
s.expect("\ncorun\n", C.int_coroutine)
s.sleep(0.3)
s.interrupt()
s.expect("interrupted", C.int_coroutine)
s.line("print('back' .. 2)")
s.expect("\nback2\n", C.int_coroutine)
s.line("for i = 1, 2 do")
s.prompt(">> ", C.ctrlc_cont)
s.line("print('hist' .. i)")
s.line("end")
s.expect("\nhist2\n", C.ctrlc_cont)
s.line("if true then")
s.prompt(">> ", C.ctrlc_cont)
s.interrupt()
s.expect("^C\n", C.ctrlc_cont)
s.line("print('fre' .. 'sh')")
s.expect("\nfresh\n", C.ctrlc_cont)
s.line("setmetatable(_G, {__index = function(t, k) error('no global ' .. k) end})")
s.line("pri\t(5*5)")
s.expect("\n25\n", C.tab_odd)
s.kill()
local res = s.run()
for _, k in ipairs {"banner", "ctrlc_prompt", "help", "help_class", "help_none", "tab_field", "tab_nested",
                    "tab_method", "tab_odd", "close", "tostring", "int_pcall", "int_coroutine", "ctrlc_cont"} do
  check(res, C[k])
end
check(res, PROMPTED)
tap.ok(res.transcript:find("\nnever\n", 1, true) == nil, "the line abandoned with Ctrl-C did not run")

-- Ctrl-C in a coroutine's loop without calls, and pressed again and again
-- while a long matmul runs: each press only interrupts, the REPL lives on
s = session()
local I = {
  callfree = "Ctrl-C interrupts a loop without calls inside a coroutine",
  twice = "a second Ctrl-C during a long matmul only interrupts it; the REPL and its globals live on",
  many = "five Ctrl-C in a row during matmuls in a pcall loop: interrupted, the REPL lives on",
  burst = "ten Ctrl-C at once during a long matmul loop: the next line is answered, the globals live on",
}
s.line("co = coroutine.wrap(function() print('spin' .. 'ning'); while true do end end); co()")
s.expect("\nspinning\n", I.callfree)
s.sleep(0.3)
s.interrupt()
s.expect("interrupted", I.callfree)
s.line("print('back' .. 3)")
s.expect("\nback3\n", I.callfree)
res = s.run()
check(res, I.callfree)
s = session()
s.line("keep = 'kept'; x = zorch.ones(3000, 3000); print('mat' .. 'mul'); for i = 1, 1000 do y = zorch.matmul(x, x) end")
s.expect("\nmatmul\n", I.twice)
s.sleep(0.2)
s.interrupt()
s.sleep(0.05)
s.interrupt()
s.expect("interrupted", I.twice)
s.line("print(keep .. 4)")
s.expect("\nkept4\n", I.twice)
s.line("print('pc' .. 'all'); while true do pcall(zorch.matmul, x, x) end")
s.expect("\npcall\n", I.many)
for _ = 1, 5 do
  s.sleep(0.1)
  s.interrupt()
end
s.expect("interrupted", I.many)
s.line("print(zorch.matmul(zorch.ones(2, 2), zorch.ones(2, 2))[1][1]:item() + 1)")
s.expect("\n3.0\n", I.many)
s.line("print('bur' .. 'st'); for i = 1, 1000 do y = zorch.matmul(x, x) end")
s.expect("\nburst\n", I.burst)
s.sleep(0.2)
for _ = 1, 10 do s.interrupt() end -- no pause between the presses
s.expect("interrupted", I.burst)
s.line("print(keep .. x:size(1))")
s.expect("\nkept3000\n", I.burst)
res = s.run()
for _, k in ipairs {"twice", "many", "burst"} do check(res, I[k]) end
tap.ok(res.exit == 0, "and it exits 0 at Ctrl-D after them (exit " .. tostring(res.exit) .. ")")

-- the history file, written as the REPL went
local f = io.open(history)
local hist = f and f:read("a") or ""
if f then f:close() end
tap.ok(hist:find("print(1+1)\n", 1, true) and hist:find("print('fre' .. 'sh')\n", 1, true),
       "the history file has the lines of the killed REPL")
tap.ok(hist:find("\n#%d+\nfor i = 1, 2 do\nprint%('hist' %.%. i%)\nend\n#%d+\n"),
       "a multi-line input is one history entry (a timestamp line before each)")

-- the next session reads it: Ctrl-R finds the loop, which runs as one input
s = session()
s.expect("> ", "the history comes back")
s.send("\18hist' ..")
s.sleep(0.3)
s.line("") -- Enter (\r: C-j would only end the search)
s.expect("\nhist1\nhist2\n", "the history comes back")
res = s.run()
check(res, "the history comes back")
tap.ok(res.exit == 0, "the REPL exits 0 at Ctrl-D")

-- help() prints docs/api.md's own text: the description of zorch.tensor's row
f = assert(io.open("../docs/api.md"))
local row = f:read("a"):match("\n| `zorch%.tensor%([^\n]-` | ([^|\n]+) |")
f:close()
local p = io.popen(bin .. " -e 'help(zorch.tensor)' 2>&1")
local out = p:read("a")
p:close()
tap.ok(row and out:gsub("%s+", " "):find(row:gsub("`", ""):gsub("%s+$", ""), 1, true),
       "help(zorch.tensor) prints the row of docs/api.md: " .. tostring(row))

-- zorch -i script: the script's globals in the REPL, its arguments in arg
local script = dir .. "/script.lua"
f = assert(io.open(script, "w"))
f:write("greeting = 'hi from ' .. arg[1] .. ' and ' .. select(2, ...)\nlocal hidden = 1\n")
f:close()
s = session()
s.expect("> ", "zorch -i script.lua runs the script, then the REPL sees its globals")
s.line("greeting")
s.expect("\nhi from one and two\n", "zorch -i script.lua runs the script, then the REPL sees its globals")
s.line("print(hidden)")
s.expect("\nnil\n", "zorch -i script.lua runs the script, then the REPL sees its globals")
res = s.run("-i " .. script .. " one two")
check(res, "zorch -i script.lua runs the script, then the REPL sees its globals")

s = session()
s.expect("> ", "zorch -i alone is the REPL")
s.line("print(6 * 7)")
s.expect("\n42\n", "zorch -i alone is the REPL")
res = s.run("-i")
check(res, "zorch -i alone is the REPL")

os.execute("rm -rf " .. dir)
tap.done()
