-- The zorch command starts OpenMP with the passive wait unless the environment
-- names a policy, and leaves every other variable as it was.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local bin = os.getenv("ZORCH_BIN") or "../build/zorch"

local run = tap.run

local show = [[ -e 'print(os.getenv("OMP_WAIT_POLICY"), os.getenv("_"), os.getenv("A"), os.getenv("HOME"))']]
local out, ok = run("env -u OMP_WAIT_POLICY _=/bin/sh A=1 HOME=/h " .. bin .. show)
tap.ok(ok and out == "PASSIVE\t/bin/sh\t1\t/h\n", "unset: the script sees OMP_WAIT_POLICY=PASSIVE and the other variables")
out, ok = run("env -i A=1 HOME=/h " .. bin .. show)
tap.ok(ok and out == "PASSIVE\tnil\t1\t/h\n", "without _ another variable's slot is used and that variable comes back")
out, ok = run("env OMP_WAIT_POLICY=active A=1 " .. bin .. show)
tap.ok(ok and out:match("^active\t"), "a policy the user set is kept")
-- libgomp itself took it: no spinning
out, ok = run("env -u OMP_WAIT_POLICY OMP_DISPLAY_ENV=verbose " .. bin .. " -e 'print(1)'")
tap.ok(ok and out:find("GOMP_SPINCOUNT = '0'", 1, true), "libgomp runs with a spin count of 0")
out, ok = run("env OMP_WAIT_POLICY=active OMP_DISPLAY_ENV=verbose " .. bin .. " -e 'print(1)'")
tap.ok(ok and not out:find("GOMP_SPINCOUNT = '0'", 1, true), "and spins when asked to")
tap.done()
