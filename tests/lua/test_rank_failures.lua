-- A rank killed by a signal or stopped inside a collective is named, at every
-- ZeRO stage: `zorch launch` names a rank killed with -9 (it prints nothing
-- itself, and mpirun runs --quiet); the ranks waiting for one stopped inside
-- a collective name it from its heartbeat. The test hook
-- ZORCH_TEST_HOOKS=comm_signal=RANK/N/SIG sends the signal as the rank enters
-- its collective #N.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
tap.need_mpi(bin)
local script = tap.temp_file([[
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local engine = zorch.Engine{zero_stage = tonumber(arg[1]), comm_timeout = 2}
local model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
local _, _, opt = engine:prepare(model, nil, optim.Adam(model:parameters()))
for _ = 1, 1000000 do
  local loss = model(zorch.randn(4, 8)):sum()
  opt:zero_grad(); engine:backward(loss); opt:step()
end
]], ".lua")

for stage = 0, 3 do
  local t0 = zorch.clock()
  local text, good = run(("timeout 40 env ZORCH_TEST_HOOKS=comm_signal=1/40/KILL %s launch -n 3 %s %d"):format(bin, script, stage))
  local dt = zorch.clock() - t0
  tap.ok(not good and dt < 30 and text:find("zorch launch: rank 1 was killed by signal 9 (Killed)", 1, true),
         ("stage %d: a rank killed by -9 inside a collective is named by the launcher (%.1f s): %s"):format(
           stage, dt, text:match("zorch launch:[^\n]*") or text:sub(-200)))

  t0 = zorch.clock()
  text, good = run(("timeout 40 env ZORCH_TEST_HOOKS=comm_signal=1/40/STOP %s launch -n 3 %s %d"):format(bin, script, stage))
  dt = zorch.clock() - t0
  local named, blamed_other = 0, false
  for line in text:gmatch("zorch: rank [02]:[^\n]*") do
    if line:find("rank 1 reached %a+ #40 but has made no progress in it for [%d.]+ s") then named = named + 1 end
    if line:find("rank [02] reached") or line:find("rank [02] did not") then blamed_other = true end
  end
  tap.ok(not good and dt < 30 and named >= 1 and not blamed_other,
         ("stage %d: a rank stopped inside collective #40 is named by the ranks waiting for it (%.1f s): %s"):format(
           stage, dt, text:match("zorch: rank [02]:[^\n]*") or text:sub(-200)))
end

tap.done()
