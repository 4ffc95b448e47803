-- tap.lua: TAP output for the Lua tests.
local tap = {n = 0, failed = 0}

function tap.ok(cond, desc)
  tap.n = tap.n + 1
  print(("%s %d - %s"):format(cond and "ok" or "not ok", tap.n, desc or ""))
  if not cond then
    tap.failed = tap.failed + 1
    local info = debug.getinfo(3, "Sl") or debug.getinfo(2, "Sl")
    print(("#   at %s:%d"):format(info.short_src, info.currentline))
  end
  return cond
end

-- A diagnostic line (TAP's "# ..."), one per line of msg.
function tap.diag(msg)
  for line in (tostring(msg) .. "\n"):gmatch("([^\n]*)\n") do print("# " .. line) end
end

-- fn(...) must raise an error whose message contains every pattern (plain text).
function tap.raises(desc, fn, ...)
  local pats = {...}
  local ok, err = pcall(fn)
  err = tostring(err)
  local good = not ok
  for _, p in ipairs(pats) do good = good and err:find(p, 1, true) ~= nil end
  if not good then print("#   got: " .. (ok and "no error" or err)) end
  return tap.ok(good, desc)
end

function tap.close(a, b, tol, desc)
  local da, db = a:totable(), b:totable()
  local function flat(t, out)
    if type(t) ~= "table" then out[#out + 1] = t return out end
    for _, v in ipairs(t) do flat(v, out) end
    return out
  end
  local fa, fb = flat(da, {}), flat(db, {})
  local worst = 0
  for i = 1, math.max(#fa, #fb) do
    local x, y = fa[i] or 0 / 0, fb[i] or 0 / 0
    local r
    if tol == 0 then r = (x == y) and 0 or math.huge
    else r = math.abs(x - y) / (tol * (math.abs(y) + 1e-3)) end
    if r ~= r then r = math.huge end
    if r > worst then worst = r end
  end
  return tap.ok(#fa == #fb and worst <= 1, ("%s (worst ratio %.3g)"):format(desc, worst))
end

-- The zorch command under test; under sanitizers, launched ranks skip leak
-- checks (Open MPI unloads its plugins at exit, leaving allocations LeakSanitizer
-- cannot attribute; zorch's own leaks are checked by the single-process tests).
function tap.zorch()
  local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
  if os.getenv("ZORCH_TEST_SANITIZED") then
    bin = "ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1 " .. bin
  end
  return bin
end

-- Output (stdout and stderr) and success of a shell command.
function tap.run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  return out, p:close()
end

-- A fresh temporary folder.
function tap.tmpdir()
  local dir = os.tmpname()
  os.remove(dir)
  os.execute("mkdir -p " .. dir)
  return dir
end

-- Writes text to a new file (named with `suffix`) in one temporary folder; returns its path.
local temp_dir, temp_n = nil, 0
function tap.temp_file(text, suffix)
  temp_dir = temp_dir or tap.tmpdir()
  temp_n = temp_n + 1
  local path = ("%s/f%d%s"):format(temp_dir, temp_n, suffix or "")
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
  return path
end

-- True when the zorch command was built with MPI.
function tap.has_mpi(bin)
  return (tap.run(bin .. " info")):find("Open MPI", 1, true) ~= nil
end

-- Ends the test with one skip line when zorch was built without MPI.
function tap.need_mpi(bin)
  if not tap.has_mpi(bin) then
    print("1..0 # SKIP zorch was built without MPI")
    os.exit(0)
  end
end

function tap.done()
  print("1.." .. tap.n)
  os.exit(tap.failed == 0 and 0 or 1)
end

return tap
