-- Metrics across a resume: a run killed after a checkpoint and resumed from it
-- (by hand, or by an elastic restart) appends to its --log and --csv files,
-- dropping the killed run's lines after the checkpoint's step, so the files
-- equal an uninterrupted run's line for line but for the timings.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local run = tap.run
local tmp = tap.tmpdir()
-- (each run works in its own folder: the command and the script by absolute path)
local here = io.popen("pwd"):read("l")
local function absolute(p) return p:sub(1, 1) == "/" and p or here .. "/" .. p end
local bin = tap.zorch():gsub("(%S+)$", absolute)
local net = absolute("../models/simple_net.lua")
local common = "--samples 640 --batch-size 64 --steps 30 --quiet"

local function slurp(p) local f = io.open(p); local s = f and f:read("a") or ""; if f then f:close() end; return s end
-- the files without their timings: JSON's time and samples_per_s, CSV's columns 2 and 8
local function untimed_jsonl(p) return (slurp(p):gsub('"time": [^,}]*, ', ""):gsub(', "samples_per_s": [^,}]*', "")) end
local function untimed_csv(p)
  local out = {}
  for line in slurp(p):gmatch("[^\n]+") do
    local cells = {}
    for c in (line .. ","):gmatch("([^,]*),") do cells[#cells + 1] = c end
    table.remove(cells, 8); table.remove(cells, 2)
    out[#out + 1] = table.concat(cells, ",")
  end
  return table.concat(out, "\n")
end
local function lines(s) local n = 0; for _ in s:gmatch("[^\n]+") do n = n + 1 end; return n end

-- runs `launch` (a prefix: "" or "launch -n 2 ...") uninterrupted and killed at step 25, then resumed
-- (`want`: 30 step lines and one a epoch)
local function case(name, every, launch, kill, resume, want)
  local d = ("%s/%s"):format(tmp, name)
  os.execute("mkdir -p " .. d)
  local args = ("%s --checkpoint-every %d"):format(common, every)
  local text, ok = run(("cd %s && %s %s %s %s --checkpoint-dir A --log a.jsonl --csv a.csv"):format(d, bin, launch, net, args))
  tap.ok(ok, name .. ": the uninterrupted run " .. (ok and "" or text:sub(-300)))
  text, ok = run(("cd %s && env ZORCH_TEST_KILL_AT=%s %s %s %s %s --checkpoint-dir B --log b.jsonl --csv b.csv"):format(
    d, kill, bin, launch, net, args))
  local killed = (not ok) == resume -- (an elastic job restarts by itself and succeeds)
  tap.ok(killed, name .. ": killed at step 25 " .. (killed and "" or text:sub(-300)))
  if resume then
    local t2
    t2, ok = run(("cd %s && %s %s %s %s --checkpoint-dir B --resume B --log b.jsonl --csv b.csv"):format(
      d, bin, launch, net, args))
    text = text .. t2
  end
  tap.ok(ok, name .. ": resumed from step 20 or 21 " .. (ok and "" or text:sub(-300)))
  local a, b = untimed_jsonl(d .. "/a.jsonl"), untimed_jsonl(d .. "/b.jsonl")
  tap.ok(lines(a) == want and a == b, ("%s: the JSON lines equal the uninterrupted run's but for times (%d and %d lines)"):format(
    name, lines(a), lines(b)))
  local ca, cb = untimed_csv(d .. "/a.csv"), untimed_csv(d .. "/b.csv")
  tap.ok(lines(ca) == want + 1 and ca == cb, ("%s: so does the CSV (%d and %d lines)"):format(name, lines(ca), lines(cb)))
end

-- checkpoints at the epochs' ends (10 steps an epoch), then in the middle of one
case("epoch_end", 10, "", "0:25", true, 33)
case("mid_epoch", 7, "", "0:25", true, 33)
-- an elastic restart resumes by itself
if tap.has_mpi(bin) then
  case("elastic", 10, "launch -n 2 --max-restarts 1", "1:25:0", false, 36)
end

tap.done()
