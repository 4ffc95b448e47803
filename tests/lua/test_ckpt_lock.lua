-- One job at a time in a checkpoint folder: three jobs started together into
-- one folder, a reader polling latest meanwhile; one job saves, the others are
-- refused naming the holder, and latest never names a folder without
-- manifest.json. The lock of a job killed with -9 is free again.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()

local job = tap.temp_file([[
local zorch = require "zorch"
local dir, steps, die = arg[1], tonumber(arg[2]), arg[3] == "die"
zorch.manual_seed(1)
local model = zorch.nn.Linear(3, 2)
local e = zorch.Engine{zero_stage = 1}
local _, _, o = e:prepare(model, nil, zorch.optim.Adam(model:parameters(), {lr = 0.01}))
local x, y = zorch.randn(8, 3), zorch.randn(8, 2)
local pid = io.open("/proc/self/stat"):read("n")
for _ = 1, steps do
  o:zero_grad(); e:backward(zorch.mse_loss(model(x), y)); o:step()
  e:save_checkpoint(dir)
  if die then os.execute("kill -9 " .. pid) end
end
print("saved " .. steps .. " pid " .. pid)
]], ".lua")

local reader = tap.temp_file([[
local dir, stop = arg[1], arg[2]
local reads, bad, seen = 0, 0, {}
while not io.open(stop) do
  local f = io.open(dir .. "/latest")
  local name = f and f:read("a")
  if f then f:close() end
  if name and name ~= "" then
    reads = reads + 1
    local m = io.open(dir .. "/" .. name .. "/manifest.json")
    if m then m:close() else bad = bad + 1; seen[#seen + 1] = name end
  end
end
print(("reads %d bad %d %s"):format(reads, bad, table.concat(seen, " ", 1, math.min(#seen, 5))))
]], ".lua")

do
  local dir, stop = tmp .. "/ck", tmp .. "/stop"
  os.execute("mkdir -p " .. dir)
  os.execute(("%s %s %s %s > %s/reader.out 2>&1 &"):format(bin, reader, dir, stop, tmp))
  local cmds = {}
  for j = 1, 3 do cmds[j] = ("(%s %s %s 40 > %s/job%d.out 2>&1; echo $? > %s/job%d.rc)"):format(bin, job, dir, tmp, j, tmp, j) end
  os.execute(table.concat(cmds, " & ") .. " & wait")
  io.open(stop, "w"):close()
  os.execute("sleep 0.3")
  local function slurp(p) local f = io.open(p); local s = f and f:read("a") or ""; if f then f:close() end; return s end
  local winners, refused, holder_named = 0, 0, 0
  local lock = slurp(dir .. "/lock")
  local host, pid = lock:match("^(%S+) (%d+)")
  for j = 1, 3 do
    local out, rc = slurp(("%s/job%d.out"):format(tmp, j)), tonumber(slurp(("%s/job%d.rc"):format(tmp, j)))
    if rc == 0 and out:find("saved 40 pid " .. tostring(pid), 1, true) then winners = winners + 1 end
    if rc ~= 0 and out:find("is in use by another job", 1, true) then
      refused = refused + 1
      if pid and out:find(("pid %s on host %s"):format(pid, host), 1, true) then holder_named = holder_named + 1 end
    end
  end
  tap.ok(winners == 1, ("one of three jobs saves all its checkpoints, the lock's holder (%d)"):format(winners))
  tap.ok(refused == 2, ("the other two are refused (%d)"):format(refused))
  tap.ok(holder_named == 2, ("each refusal names the holder's pid and host, %s (%d)"):format(lock:gsub("\n", ""), holder_named))
  local r = slurp(tmp .. "/reader.out")
  local reads, bad = r:match("reads (%d+) bad (%d+)")
  tap.ok(tonumber(reads or 0) > 0 and tonumber(bad) == 0,
         ("latest never names a folder without manifest.json (%s)"):format(r:gsub("\n", "")))
  local text, ok = run(("%s -e 'local e = require(\"zorch\").Engine{}; local m = require(\"zorch\").nn.Linear(3, 2); " ..
    "e:prepare(m, nil, require(\"zorch\").optim.Adam(m:parameters())); print(\"step \" .. e:load_checkpoint(\"%s\").step)'"):format(bin, dir))
  tap.ok(ok and text:find("step 40", 1, true), "the folder holds one job's steps: latest is step 40 " .. text:gsub("\n", " "))
end

-- a job killed while holding the lock: the kernel freed it, the next job saves
do
  local dir = tmp .. "/dead"
  local _, ok = run(("%s %s %s 3 die"):format(bin, job, dir))
  tap.ok(not ok, "the first job was killed after its first save")
  local text
  text, ok = run(("%s %s %s 2"):format(bin, job, dir))
  tap.ok(ok and text:find("saved 2", 1, true), "the next job takes the dead job's lock: " .. text:gsub("\n", " "))
end

tap.done()
