-- Failures end the job with a message, never a hang: a rank that never reaches a
-- collective trips the watchdog (comm_timeout); a rank killed mid-step ends the
-- others.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
tap.need_mpi(bin)
local script = os.tmpname() .. ".lua"

local f = io.open(script, "w")
f:write([[
local zorch = require "zorch"
local engine = zorch.Engine{comm_timeout = 2}
if engine.rank == 1 then while true do end end -- never reaches the collective
print(engine:mean(1.0))
]])
f:close()
local t0 = zorch.clock()
local text, good = run(("timeout 60 env %s launch -n 2 %s"):format(bin, script))
local dt = zorch.clock() - t0
tap.ok(not good and dt < 30, ("a hung collective ends the job in %.1f s (comm_timeout 2)"):format(dt))
tap.ok(text:find("rank 0: allreduce of 1 elements for a logged value did not complete within 2 s", 1, true),
       "the message names the rank, the collective, its size and what it carried: " ..
       (text:match("zorch: rank[^\n]*") or text:sub(1, 200)))

-- Writes a 3-rank training job whose rank 1 sends itself `signal` at `step`.
local function signalled_job(signal, step, timeout)
  local f = io.open(script, "w")
  f:write(([[
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local engine = zorch.Engine{zero_stage = 2, comm_timeout = %d}
local model = nn.Linear(8, 8)
local _, _, opt = engine:prepare(model, nil, optim.Adam(model:parameters()))
for step = 1, 1000000 do
  if engine.rank == 1 and step == %d then
    os.execute("kill -%s " .. io.open("/proc/self/stat"):read("n"))
  end
  local loss = model(zorch.randn(4, 8)):sum()
  opt:zero_grad(); engine:backward(loss); opt:step()
end
]]):format(timeout, step, signal))
  f:close()
end

signalled_job("9", 50, 20)
t0 = zorch.clock()
text, good = run(("timeout 60 env %s launch -n 3 %s"):format(bin, script))
dt = zorch.clock() - t0
tap.ok(not good and dt < 30, ("a rank killed mid-step ends the others in %.1f s"):format(dt))

-- A stopped rank (SIGSTOP: alive, but never reaching the next collective) is
-- named by the ranks that wait for it: each reads the others' progress counters.
signalled_job("STOP", 5, 2)
t0 = zorch.clock()
text, good = run(("timeout 60 env %s launch -n 3 %s"):format(bin, script))
dt = zorch.clock() - t0
tap.ok(not good and dt < 20, ("a stopped rank ends the job in %.1f s (comm_timeout 2)"):format(dt))
local culprit, blamed_other = 0, false
for line in text:gmatch("zorch: rank [02]:[^\n]*") do
  if line:find("rank 1 did not reach reduce_scatter #%d+ %(it is at #%d+%)") then culprit = culprit + 1 end
  if line:find("rank [02] did not") then blamed_other = true end
end
tap.ok(culprit >= 1 and not blamed_other, "the waiting ranks name rank 1 as the one behind: " ..
       (text:match("zorch: rank [02]:[^\n]*") or text:sub(1, 300)))

-- Without the zorch command's handler (stock lua5.4 loading zorch.so), a hung
-- collective is an error the script can catch, and later collectives fail at once.
if os.getenv("ZORCH_TEST_SANITIZED") then
  tap.ok(true, "# SKIP stock lua5.4 cannot load a sanitizer build")
else
  local build = os.getenv("ZORCH_BUILD") or "../build"
  f = io.open(script, "w")
  f:write(([[
package.cpath = "%s/?.so;" .. package.cpath
local zorch = require "zorch"
local engine = zorch.Engine{comm_timeout = 2}
if engine.rank == 1 then
  local t = zorch.clock()
  while zorch.clock() - t < 30 do end
  os.exit(0)
end
local ok, err = pcall(engine.mean, engine, 1.0)
print("first:", ok, err)
ok, err = pcall(engine.mean, engine, 1.0)
print("second:", ok, err)
io.stdout:flush()
os.exit(0)
]]):format(build))
  f:close()
  local root = io.popen("id -u"):read("l") == "0" and "--allow-run-as-root " or ""
  t0 = zorch.clock()
  text = run(("timeout 60 mpirun %s--oversubscribe -n 2 lua5.4 %s"):format(root, script))
  dt = zorch.clock() - t0
  tap.ok(text:find("first:\tfalse\t[^\n]*rank 0: allreduce of 1 elements for a logged value did not complete within 2 s")
         and dt < 30,
         ("with no hang handler the collective fails with an error the script catches (%.1f s): "):format(dt) ..
         (text:match("first:[^\n]*") or text:sub(1, 300)))
  tap.ok(text:find("second:\tfalse\t[^\n]*an earlier collective timed out"),
         "and a later collective fails at once: " .. (text:match("second:[^\n]*") or text:sub(1, 300)))
end
os.remove(script)
tap.done()
