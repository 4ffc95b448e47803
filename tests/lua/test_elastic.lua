-- Elastic jobs: zorch launch --max-restarts restarts a job whose rank died from
-- its latest checkpoint, at the same world size and, when it fails again there,
-- on fewer ranks with the same global batch; the run ends with the weights of
-- an uninterrupted one.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
tap.need_mpi(bin)
local tmp = tap.tmpdir()
local net = "../models/simple_net.lua --samples 1280 --quiet --steps 60" -- 20 steps an epoch at a global batch of 64

local ref = tmp .. "/ref.safetensors"
tap.ok(select(2, run(("env %s %s --batch-size 64 --save %s"):format(bin, net, ref))), "the uninterrupted run (1 rank)")

-- rank 3 dies at step 25 whenever it runs: twice at 4 ranks, then the job goes on at 2
local out = tmp .. "/elastic.safetensors"
local t0 = zorch.clock()
local text, good = run(("timeout 120 env ZORCH_TEST_KILL_AT=3:25 %s launch -n 4 --max-restarts 2 --min-ranks 2 %s " ..
                        "--batch-size 16 --checkpoint-dir %s/c --checkpoint-every 10 --save %s"):format(
                        bin, net, tmp, out))
tap.ok(good, ("the job finishes after two restarts (%.1f s)"):format(zorch.clock() - t0))
tap.ok(text:find("rank 3 was killed by signal 9 %(Killed%); restart 1 of 2 with 4 ranks") and
       text:find("rank 3 was killed by signal 9 %(Killed%); restart 2 of 2 with 2 ranks"),
       "the log names the rank, how it died, the restart and the world size: " ..
       table.concat({text:match("(zorch launch: [^\n]*)\n.-(zorch launch: [^\n]*)")}, " / "))
tap.ok(select(2, text:gsub("resumed from [^\n]* at step 20", "")) == 2, "each restart resumes at step 20")
local worst = math.huge
if good then
  local a, b = zorch.load(out), zorch.load(ref)
  worst = 0
  for k, v in pairs(b) do worst = math.max(worst, ((a[k] - v):abs() / (v:abs() + 1e-3)):max():item()) end
end
tap.ok(worst < 1e-5, ("its final weights equal the uninterrupted run's (worst %.2g relative)"):format(worst))

-- out of restarts: the job fails and says so
text, good = run(("timeout 60 env ZORCH_TEST_KILL_AT=1:5 %s launch -n 2 --max-restarts 1 %s --batch-size 32 " ..
                  "--save %s/x.safetensors"):format(bin, net, tmp))
tap.ok(not good and text:find("rank 1 was killed by signal 9 %(Killed%); no restarts left %(1 of 1 used%)"),
       "with its restarts used up the job fails: " .. (text:match("zorch launch: [^\n]*no restarts[^\n]*") or ""))
-- 5 ranks that fail twice go to 1, the largest divisor of 5 up to half: 2
-- would not split the global batch of 5 x 4
local small = "../models/simple_net.lua --samples 200 --quiet --steps 6"
text, good = run(("timeout 120 env ZORCH_TEST_KILL_AT=4:3 %s launch -n 5 --max-restarts 2 %s --batch-size 4 " ..
                  "--checkpoint-dir %s/c5 --checkpoint-every 2 --save %s/five.safetensors"):format(bin, small, tmp, tmp))
tap.ok(good and text:find("restart 2 of 2 with 1 ranks %(it failed twice at that size%)"),
       "5 ranks failing twice restart on 1, where the global batch still splits: " ..
       (text:match("[^\n]*restart 2 of 2[^\n]*") or text:sub(-300)))
os.execute("rm -rf " .. tmp)
tap.done()
