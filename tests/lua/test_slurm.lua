-- Ranks that Slurm's srun starts, on a one-node cluster this test runs
-- itself (slurmctld and slurmd from Debian's slurm-wlm packages, a generated
-- slurm.conf, no authentication daemon): `srun -n 2` (MpiDefault=pmix, which
-- Debian's Open MPI uses) and `srun --mpi=none -n 2` (no PMIx: the ranks meet
-- by their Slurm variables) train simple_net as `zorch launch -n 2` does.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local bin = tap.zorch()
tap.need_mpi(bin)
local function sh(cmd) return (tap.run(cmd)) end
if not os.execute("command -v slurmctld > /dev/null && command -v slurmd > /dev/null && command -v srun > /dev/null") then
  print("1..0 # SKIP Slurm is not installed (apt-get install slurmctld slurmd slurm-client)")
  os.exit(0)
end
if sh("id -u"):match("%d+") ~= "0" then
  print("1..0 # SKIP the test cluster's daemons run as root")
  os.exit(0)
end

local dir = tap.tmpdir()
math.randomseed(os.time() + tonumber(tostring({}):match("0x(%x+)"), 16) % 1000)
local port = math.random(40000, 49000)
local host = sh("hostname -s"):match("%S+")
local conf = dir .. "/slurm.conf"
local f = assert(io.open(conf, "w"))
f:write(([[
ClusterName=zorchtest
SlurmctldHost=%s(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
StateSaveLocation=%s/state
SlurmdSpoolDir=%s/spool
SlurmctldPidFile=%s/ctld.pid
SlurmdPidFile=%s/d.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=pmix
ReturnToService=2
NodeName=%s NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=debug Nodes=%s Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
]]):format(host, port, port + 1, dir, dir, dir, dir, host, host))
f:close()
os.execute(("mkdir -p %s/state %s/spool"):format(dir, dir))
local env = "SLURM_CONF=" .. conf
-- the daemons in the foreground of their own shells, so their pids are known
for _, d in ipairs({"slurmctld", "slurmd"}) do
  os.execute(("sh -c 'echo $$ > %s/%s.run; exec %s -D -f %s' > %s/%s.log 2>&1 &"):format(dir, d, d, conf, dir, d))
end
local up = false
for _ = 1, 60 do
  if sh(env .. " sinfo -h -o %t 2>/dev/null"):match("idle") then up = true break end
  os.execute("sleep 0.25")
end
local function stop()
  for _, d in ipairs({"slurmd", "slurmctld"}) do
    local p = io.open(("%s/%s.run"):format(dir, d))
    local pid = p and p:read("l")
    if p then p:close() end
    if pid and pid:match("^%d+$") then os.execute("kill " .. pid .. " 2>/dev/null") end
  end
  os.execute("sleep 0.5; rm -rf " .. dir)
end
if not up then
  tap.ok(false, "the test cluster starts: " .. sh(("tail -5 %s/slurmctld.log %s/slurmd.log"):format(dir, dir)))
  stop()
  tap.done()
end

local job = "../models/simple_net.lua --epochs 2 --samples 512 --save " .. dir .. "/m.safetensors"
local function losses(out) local t = {} for l in out:gmatch("Epoch %d+ loss: ([%d.]+)") do t[#t + 1] = l end return table.concat(t, " ") end
local ref, okr = tap.run(("OMP_NUM_THREADS=1 %s launch -n 2 %s"):format(bin, job))
tap.ok(okr and losses(ref) ~= "", "zorch launch -n 2 trains" .. (okr and "" or ": " .. ref))
for _, how in ipairs({"", "--mpi=none "}) do
  local out, ok = tap.run(("%s OMP_NUM_THREADS=1 timeout 60 srun %s-n 2 %s %s"):format(env, how, bin, job))
  tap.ok(ok and losses(out) == losses(ref), ("srun %s-n 2 trains as zorch launch -n 2 does (%s | %s)"):format(how, losses(out),
         losses(ref)) .. (ok and "" or ": " .. out))
end
stop()
tap.done()
