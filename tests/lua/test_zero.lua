-- The ZeRO engine across processes (zorch launch, 2 cores oversubscribed):
-- stages 0-3 at 1-4 ranks give the parameters of one process with the same
-- global batch; memory and communication reports match the formulas; ranks
-- that disagree are named; a failing rank ends the job.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

local bin, run = tap.zorch(), tap.run
tap.need_mpi(bin)
local tmp = tap.tmpdir()
local common = "--steps 20 --accum 2 --clip 0.05 --seed 5 --samples 480 --bucket 64 --quiet"

local ref = tmp .. "/ref.safetensors"
local _, ok = run(("%s ../models/simple_net.lua %s --batch-size 24 --save %s"):format(bin, common, ref))
tap.ok(ok, "one process, global batch 24, 2 accumulation steps, clipping")
local want = zorch.load(ref)

local function worst(a, b)
  local w = 0
  for k, v in pairs(b) do w = math.max(w, ((a[k] - v):abs() / (v:abs() + 1e-3)):max():item()) end
  return w
end

for n = 1, 4 do
  local per_stage = {}
  for stage = 0, 3 do
    local out = ("%s/n%d_s%d.safetensors"):format(tmp, n, stage)
    local text, good = run(("%s launch -n %d ../models/simple_net.lua %s --zero-stage %d --batch-size %d --save %s"):format(
      bin, n, common, stage, 24 // n, out))
    if not good then print("# " .. text:gsub("\n", "\n# ")) end
    local got = good and zorch.load(out)
    local w = got and worst(got, want) or math.huge
    tap.ok(w <= 1e-5, ("stage %d at %d ranks equals one process (worst relative difference %.2g)"):format(stage, n, w))
    per_stage[stage] = got
  end
  local w = 0
  for stage = 1, 3 do
    if per_stage[stage] and per_stage[0] then w = math.max(w, worst(per_stage[stage], per_stage[0])) else w = math.huge end
  end
  tap.ok(w <= 1e-6, ("stages 1-3 equal stage 0 at %d ranks (worst %.2g)"):format(n, w))
end

-- memory and communication at 4 ranks, for a model of 2.1 million parameters
local psi_bytes, N = nil, 4
for stage = 0, 3 do
  local text, good = run(("%s launch -n 4 ../models/simple_net.lua --zero-stage %d --steps 2 --batch-size 4 " ..
    "--samples 64 --in 1024 --hidden 1024 --out 1024 --bucket 100000 --quiet --report --save %s/m.safetensors"):format(
    bin, stage, tmp))
  local mem = {}
  for line in text:gmatch("[^\n]+") do
    if line:find('"report": "memory", "rank": 2,', 1, true) then
      for k, v in line:gmatch('"([%w_]+)": (%d+)') do mem[k] = tonumber(v) end
    end
    if line:find('"report": "comm", "rank": 2,', 1, true) then
      for k, v in line:gmatch('"([%w_]+)": (%d+)') do mem["comm_" .. k] = tonumber(v) end
    end
  end
  local psi = mem.numel and mem.numel * 4 or 0
  psi_bytes = psi
  local formula = ({16 * psi / 4, 4 * psi / 4 * 2 + 8 * psi / 4 / N, 4 * psi / 4 + 12 * psi / 4 / N, 16 * psi / 4 / N})[stage + 1]
  local held = (mem.parameters or 0) + (mem.gradients or 0) + (mem.optimizer_state or 0) + (mem.master_weights or 0)
  tap.ok(good and mem.numel and mem.numel > 1000000 and math.abs(held - formula) <= 0.05 * formula,
         ("stage %d: rank 2 holds %d bytes, the formula says %d (buffers %d apart)"):format(
           stage, held, math.floor(formula), mem.buffers or -1))
  -- ring volumes: stages 0-2 move 2 psi (N-1)/N; stage 3 gathers each module
  -- before its forward and again before its backward: 3 psi (N-1)/N
  local k = stage == 3 and 3 or 2
  local expect = k * psi * (N - 1) / N
  tap.ok(mem.comm_sent and math.abs(mem.comm_sent - expect) <= 0.05 * expect,
         ("stage %d: a step sends %s bytes, %d psi (N-1)/N is %d"):format(stage, tostring(mem.comm_sent), k,
                                                                        math.floor(expect)))
end

-- bf16: parameters and gradients in bf16, fp32 master weights and moments in the
-- shards; memory as the ZeRO paper's mixed-precision formulas (K = 12)
for stage = 0, 3 do
  local text, good = run(("%s launch -n 4 ../models/simple_net.lua --zero-stage %d --steps 2 --batch-size 4 " ..
    "--samples 64 --in 1024 --hidden 1024 --out 1024 --bucket 100000 --precision bf16 --quiet --report " ..
    "--save %s/m.safetensors"):format(bin, stage, tmp))
  local mem = {}
  for line in text:gmatch("[^\n]+") do
    if line:find('"report": "memory", "rank": 3,', 1, true) then
      for k, v in line:gmatch('"([%w_]+)": (%d+)') do mem[k] = tonumber(v) end
    end
  end
  local psi = mem.numel or 0
  local formula = ({16 * psi, 4 * psi + 12 * psi / N, 2 * psi + 14 * psi / N, 16 * psi / N})[stage + 1]
  local held = (mem.parameters or 0) + (mem.gradients or 0) + (mem.optimizer_state or 0) + (mem.master_weights or 0)
  tap.ok(good and psi > 1000000 and math.abs(held - formula) <= 0.05 * formula,
         ("bf16 stage %d: rank 3 holds %d bytes (master weights %s), the formula says %d"):format(
           stage, held, tostring(mem.master_weights), math.floor(formula)))
end
local bf = {}
for stage = 0, 3 do
  local out = ("%s/bf16_s%d.safetensors"):format(tmp, stage)
  local _, good = run(("%s launch -n 3 ../models/simple_net.lua %s --zero-stage %d --batch-size 8 --precision bf16 --save %s"):format(
    bin, common, stage, out))
  bf[stage] = good and zorch.load(out)
end
local wb = bf[0] and worst(bf[0], want) or math.huge
tap.ok(wb < 0.05, ("bf16 at 3 ranks trains like fp32 within bf16's precision (worst %.3g)"):format(wb))
tap.ok(bf[1] and worst(bf[1], bf[0]) == 0 and bf[3] and worst(bf[3], bf[2]) == 0,
       "bf16: stage 1 equals stage 0 and stage 3 equals stage 2 exactly")

-- a short last batch is split so every rank runs the same steps (no hang)
do
  local text, good = run(("timeout 60 env %s launch -n 3 ../models/simple_net.lua --zero-stage 3 --epochs 2 " ..
    "--samples 100 --batch-size 8 --save %s/short.safetensors"):format(bin, tmp))
  tap.ok(good and text:find("done: 10 steps, 200 samples", 1, true),
         "100 samples over 3 ranks of 8: 5 steps an epoch, the short batch split: " .. (text:match("done:[^\n]*") or text:sub(1, 300)))
end

-- ranks that disagree on the model are named
local script = tmp .. "/disagree.lua"
local f = io.open(script, "w")
f:write([[
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers
local engine = zorch.Engine{zero_stage = 2}
local h = engine.rank == 1 and 5 or 4
local model = zorch.nn.Linear(3, h)
engine:prepare(model, nil, zorch.optim.Adam(model:parameters()))
]])
f:close()
local text, good = run(("timeout 60 env %s launch -n 3 %s"):format(bin, script))
tap.ok(not good and text:find("rank 1 has parameter elements", 1, true), "a rank with another model is named: " ..
       (text:match("(Engine:prepare[^\n]*)") or text:sub(1, 200)))

-- an error on one rank ends every rank, with that rank's message, no hang
f = io.open(script, "w")
f:write([[
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers
local rank = Z._comm()
if rank == 2 then error("rank two gives up") end
Z._allreduce(zorch.ones(4))
]])
f:close()
text, good = run(("timeout 60 env %s launch -n 3 %s"):format(bin, script))
tap.ok(not good and text:find("rank two gives up", 1, true) and not text:find("Terminated", 1, true),
       "a failing rank ends the job with its message")
-- a usage error on one rank only (a flag that rank refuses) keeps its status 2
f = io.open(script, "w")
f:write([[
local zorch = require "zorch"
if zorch.dist.rank() == 1 then error(zorch.flags.usage_error("rank one refuses its flag"), 0) end
zorch.dist.world():barrier()
]])
f:close()
local p = io.popen(("timeout 60 env %s launch -n 2 %s 2>&1"):format(bin, script))
text = p:read("a")
local _, _, code = p:close()
tap.ok(code == 2 and text:find("rank one refuses its flag", 1, true) ~= nil,
       "a usage error on one rank ends the job with status 2: got " .. tostring(code))
os.execute("rm -rf " .. tmp)
tap.done()
