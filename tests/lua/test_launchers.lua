-- Ranks that no mpirun started: two processes given RANK, WORLD_SIZE,
-- MASTER_ADDR and MASTER_PORT (as torchrun and DeepSpeed's launcher give them)
-- train simple_net as `zorch launch -n 2` does, loss for loss; torchrun and
-- DeepSpeed's launcher themselves where they are installed; a rank that fails ends the other at once; and the
-- variables' mistakes are named.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local bin = tap.zorch()
tap.need_mpi(bin)

local dir = tap.tmpdir()
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 1000)
local function port() return math.random(30000, 39999) end
local job = "../models/simple_net.lua --epochs 2 --samples 512 --batch-size 64 --save " .. dir .. "/m.safetensors"
local function losses(out) local t = {} for l in out:gmatch("Epoch %d+ loss: ([%d.]+)") do t[#t + 1] = l end return table.concat(t, " ") end

-- both ranks by hand: rank 1 in the background, rank 0 here
local function by_hand(script, world, extra)
  local p, env = port(), ""
  local cmds = {}
  for r = world - 1, 1, -1 do
    cmds[#cmds + 1] = ("(RANK=%d WORLD_SIZE=%d MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s timeout 50 %s %s > %s/r%d.log 2>&1 &)"):format(
      r, world, p, extra or "", bin, script, dir, r)
  end
  cmds[#cmds + 1] = ("RANK=0 WORLD_SIZE=%d MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s timeout 50 %s %s"):format(
    world, p, extra or "", bin, script)
  local t0 = os.time()
  local out, ok = tap.run(table.concat(cmds, "; "))
  os.execute("sleep 0.5")
  local f = io.open(dir .. "/r1.log")
  local r1 = f and f:read("a") or ""
  if f then f:close() end
  return out, ok, r1, os.time() - t0
end

local ref, okr = tap.run(("OMP_NUM_THREADS=1 %s launch -n 2 %s"):format(bin, job))
local out, ok = by_hand(job, 2, "OMP_NUM_THREADS=1")
tap.ok(okr and ok, "two processes from RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT train as one job" ..
       (ok and "" or ": " .. out))
tap.ok(losses(out) ~= "" and losses(out) == losses(ref), ("their losses are zorch launch -n 2's (%s | %s)"):format(losses(out), losses(ref)))

-- a rank that fails: the other is told at once, not after the collective timeout
local fail = tap.temp_file([[
local zorch = require "zorch"
local w = zorch.dist.world()
local t = zorch.tensor({1.0})
w:allreduce(t)
if w:rank() == 1 then error("rank 1 gives up") end
w:allreduce(t)
]], ".lua")
local fout, fok, r1, took = by_hand(fail, 2)
tap.ok(not fok and r1:find("rank 1 gives up", 1, true) and fout:find("rank 1 has ended", 1, true) and took < 30,
       ("a failing rank ends the other at once (%d s)"):format(took) .. (fok and "" or ": " .. fout))

-- mistakes in the variables
local o1 = tap.run(("RANK=1 WORLD_SIZE=2 %s -e 'print(require(\"zorch\").dist.rank())'"):format(bin))
tap.ok(o1:find("MASTER_ADDR and MASTER_PORT", 1, true) and o1:find("rank 1 of 2", 1, true), "a missing MASTER_ADDR is named: " .. o1)
local o2 = tap.run(("RANK=2 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=%d %s -e 'print(require(\"zorch\").dist.rank())'"):format(port(), bin))
tap.ok(o2:find("below the world size", 1, true), "a rank outside the world is refused: " .. o2)

-- torchrun (its agent keeps MASTER_PORT; zorch takes the next port) and
-- DeepSpeed's launcher (the same variables, from deepspeed.launcher.launch)
local launchers = {
  {"torchrun", "torchrun --nproc-per-node 2 --master-port %d --no-python"},
  {"deepspeed", "deepspeed --num_gpus 2 --master_port %d --no_python --no_local_rank"},
}
for _, l in ipairs(launchers) do
  if os.execute(("command -v %s > /dev/null 2>&1"):format(l[1])) then
    local o, okl = tap.run(("OMP_NUM_THREADS=1 timeout 90 %s %s %s"):format(l[2]:format(port()), bin, job))
    tap.ok(okl and losses(o) == losses(ref), l[1] .. " starts the same job: " .. losses(o) .. (okl and "" or ": " .. o))
  else
    tap.ok(true, ("# SKIP %s is not installed"):format(l[1]))
  end
end
os.execute("rm -rf " .. dir)
tap.done()
