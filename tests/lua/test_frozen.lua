-- Frozen parameters in no optimizer group stay outside the Engine's buffers
-- (lua/zorch/engine/frozen.lua): a LoRA fine-tune at bf16 keeps master
-- weights, gradients and optimizer state for the adapters alone, the base
-- weights as bf16 tensors of the model; the losses are the same at stages 0-3
-- on 1 and 2 ranks, with offload_optimizer, and across a checkpoint that must
-- bring the base weights back (the resumed model is built from another seed).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local has_mpi = tap.has_mpi(bin)

local function read(path)
  local f = io.open(path)
  if not f then return nil end
  local r = {}
  for line in f:lines() do
    local k, v = line:match("^(%S+) ?(.*)$")
    r[k] = tonumber(v) or v
  end
  f:close()
  return r
end
local function worker(n, stage, precision, mode, extra)
  local out = ("%s/n%d_s%d_%s_%s%s.txt"):format(tmp, n, stage, precision, mode, extra and "_" .. extra or "")
  local launch = n > 1 and ("launch -n %d "):format(n) or ""
  local text = run(("ZORCH_QUIET=1 %s %slua/frozen_worker.lua %d %s %s %s %s"):format(bin, launch, stage, precision,
    mode, out, extra or ""))
  local r = read(out)
  if not r then io.stderr:write(text) end
  return r or {}
end

-- the worker's model: Linears 16-24, 24-24, 24-8, adapters of rank 4 on the first two
local adapters = (4 * 16 + 24 * 4) + (4 * 24 + 24 * 4)
local base = (16 * 24 + 24) + (24 * 24 + 24) + (24 * 8 + 8)

local ref = worker(1, 0, "bf16", "run")
tap.ok(type(ref.losses) == "string" and select(2, ref.losses:gsub("%S+", "")) == 6, "bf16 LoRA, stage 0: six losses")
for _, n in ipairs({1, 2}) do
  if n == 1 or has_mpi then
    for stage = 0, 3 do
      local r = n == 1 and stage == 0 and ref or worker(n, stage, "bf16", "run")
      local what = ("%d rank%s, stage %d"):format(n, n == 1 and "" or "s", stage)
      tap.ok(r.losses == ref.losses, what .. ": the losses of stage 0 on one rank, bit for bit")
      tap.ok(r.numel == adapters and r.frozen_numel == base and r.base_numel == base,
        ("%s: the engine holds the adapters' %d elements, the %d frozen ones are the model's (got %s and %s)"):format(
          what, adapters, base, tostring(r.numel), tostring(r.frozen_numel)))
      tap.ok(r.frozen == 2 * base and r.frozen_dtypes == ("bfloat16 "):rep(6):sub(1, -2),
        what .. ": the frozen parameters are bfloat16 tensors, their bf16 bytes only")
      local slice = stage == 0 and r.shard * n or r.shard -- (what the update steps)
      tap.ok(r.master_weights == 4 * slice and r.optimizer_state == 2 * 4 * slice,
        ("%s: master weights and Adam's moments of the adapters' slice alone (%s and %s bytes for %d elements)"):format(
          what, tostring(r.master_weights), tostring(r.optimizer_state), slice))
    end
  end
end

-- a checkpoint holds the frozen weights: the resumed run (its base drawn from
-- another seed) takes the uninterrupted run's losses; regroup: the checkpoint
-- holds the base in its flat pieces (its run kept it in the engine, in the
-- optimizer's group) and resumes a run that leaves it out
local RESUMES = {
  resume = {{1, 0}, {1, 1}, {1, 2}, {1, 3}, {2, 1}, {2, 3}},
  regroup = {{1, 0}, {1, 3}, {2, 2}},
}
for _, mode in ipairs({"resume", "regroup"}) do
  for _, c in ipairs(RESUMES[mode]) do
    local n, stage = c[1], c[2]
    if n == 1 or has_mpi then
      local r = worker(n, stage, "bf16", mode)
      tap.ok(r.losses == ref.losses, ("%s, %d rank%s, stage %d: 3 steps, a checkpoint, a model with other base " ..
        "weights resumes from it: the uninterrupted losses"):format(mode, n, n == 1 and "" or "s", stage))
    end
  end
end

-- offload_optimizer "cpu" steps the same adapters; fp32 keeps float32 frozen tensors
local off = worker(1, 2, "bf16", "run", "cpu")
tap.ok(off.losses == ref.losses and off.numel == adapters, "offload_optimizer cpu, stage 2: the same losses, adapters only")
local f32 = worker(1, 1, "fp32", "run")
tap.ok(f32.numel == adapters and f32.frozen == 4 * base and f32.frozen_dtypes == ("float32 "):rep(6):sub(1, -2),
  "fp32, stage 1: the frozen parameters stay float32 outside the engine")
local f32r = worker(1, 1, "fp32", "resume")
tap.ok(f32r.losses == f32.losses, "fp32, stage 1: resume gives the uninterrupted losses")

-- a frozen parameter in an optimizer group stays in the engine (it may be unfrozen later)
do
  local m = zorch.nn.Sequential(zorch.nn.Linear(4, 3), zorch.nn.Linear(3, 2))
  m["0"].weight.requires_grad = false
  local e = zorch.Engine{zero_stage = 1}
  e:prepare(m, nil, zorch.optim.AdamW(m:parameters(), {lr = 0.1}))
  local r = e:memory_report()
  tap.ok(r.numel == 12 + 3 + 6 + 2 and r.frozen_numel == 0, "a frozen parameter of an optimizer group: in the engine")
end
-- without an optimizer: the frozen parameters stay out; all of them frozen:
-- the engine keeps them (it needs one)
do
  local m = zorch.nn.Sequential(zorch.nn.Linear(4, 3), zorch.nn.Linear(3, 2))
  m["1"]:requires_grad_(false)
  local e = zorch.Engine{zero_stage = 0}
  e:prepare(m)
  local r = e:memory_report()
  tap.ok(r.numel == 15 and r.frozen_numel == 8, "no optimizer: the frozen layer outside the engine")
  local all = zorch.nn.Linear(4, 3)
  all:requires_grad_(false)
  local e2 = zorch.Engine{zero_stage = 0}
  e2:prepare(all)
  r = e2:memory_report()
  tap.ok(r.numel == 15 and r.frozen_numel == 0, "every parameter frozen: the engine keeps them")
end
tap.done()
