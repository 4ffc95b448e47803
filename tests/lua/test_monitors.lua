-- DeepSpeed's monitor and profiler sections do what they name: tensorboard and
-- csv_monitor write readable files at output_path/job_name, wandb is refused
-- unless WANDB_MODE asks for no upload, comms_logger prints each collective's
-- calls and bytes, and the FLOPs profiler counts GPT-2's step as 6 N tokens
-- plus attention.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"]

local bin = tap.zorch()
local dir = tap.tmpdir()
local function run(cmd) return tap.run("env -u ZORCH_QUIET " .. cmd) end
local function lines_of(path)
  local t = {}
  for l in io.lines(path) do t[#t + 1] = l end
  return t
end

-- tensorboard and csv_monitor
local cfg = tap.temp_file(([[{"train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage": 2},
  "tensorboard": {"enabled": true, "output_path": "%s/tb", "job_name": "run1"},
  "csv_monitor": {"enabled": true, "output_path": "%s/csv", "job_name": "run1"}}]]):format(dir, dir), ".json")
local text, ok = run(("%s ../models/simple_net.lua --config %s --steps 5 --samples 256 --save '' --quiet"):format(bin, cfg))
tap.ok(ok and text:find(("monitors: tensorboard in %s/tb/run1, csv_monitor in %s/csv/run1"):format(dir, dir), 1, true),
       "the summary names the monitors' folders: " .. text)
local lr = io.open(dir .. "/csv/run1/Train_Samples_lr.csv") and lines_of(dir .. "/csv/run1/Train_Samples_lr.csv") or {}
tap.ok(#lr == 6 and lr[1] == "step,lr" and lr[2] == "32,0.00015" and lr[6] == "160,0.00015",
       "Train_Samples_lr.csv: DeepSpeed's header, one row per step at the samples seen: " .. table.concat(lr, " | "))
local loss = io.open(dir .. "/csv/run1/Train_Samples_train_loss.csv") and
             lines_of(dir .. "/csv/run1/Train_Samples_train_loss.csv") or {}
local finite = #loss == 6
for i = 2, #loss do
  local v = tonumber(loss[i]:match("^%d+,(.*)$"))
  finite = finite and v ~= nil and v > 0 and v < 10
end
tap.ok(loss[1] == "step,train_loss" and finite, "Train_Samples_train_loss.csv holds the step losses")
local tbfile = io.popen("ls " .. dir .. "/tb/run1"):read("a"):match("events%.out%.tfevents%.[^\n]+")
local ev = tbfile and io.open(dir .. "/tb/run1/" .. tbfile, "rb"):read("a") or ""
local nrec, pos, good = 0, 1, #ev > 0
while good and pos <= #ev do
  local n = string.unpack("<I8", ev, pos)
  good = string.unpack("<I4", ev, pos + 8) == Z._crc32c(ev:sub(pos, pos + 7), true) and
         string.unpack("<I4", ev, pos + 12 + n) == Z._crc32c(ev:sub(pos + 12, pos + 11 + n), true)
  nrec, pos = nrec + 1, pos + 16 + n
end
tap.ok(good and nrec == 6 and ev:find("Train/Samples/lr", 1, true) and ev:find("Train/Samples/train_loss", 1, true),
       ("the event file: the version record and 5 steps, good CRCs, DeepSpeed's tags (%d records)"):format(nrec))

-- wandb: refused with the reason, or (WANDB_MODE=offline) trained with nothing written and listed
local wb = tap.temp_file([[{"train_micro_batch_size_per_gpu": 32, "wandb": {"enabled": true, "project": "p"}}]], ".json")
text, ok = run(("%s ../models/simple_net.lua --config %s --steps 1 --samples 64 --save '' --quiet 2>&1; echo status $?"):format(bin, wb))
tap.ok(text:find("status 2", 1, true) and text:find("wandb is enabled, but zorch has no Weights & Biases client", 1, true),
       "wandb enabled is a usage error that says why: " .. text)
text = run(("WANDB_MODE=offline %s ../models/simple_net.lua --config %s --steps 1 --samples 64 --save '' --quiet 2>&1; echo status $?"):format(
  bin, wb))
tap.ok(text:find("status 0", 1, true) and text:find("no effect on results (speed, memory, logging): wandb", 1, true),
       "WANDB_MODE=offline: trains, wandb listed as writing nothing: " .. text)

-- comms_logger: every 2 steps, each collective's calls and bytes (two ranks, stage 2)
if tap.has_mpi(bin) then
  local cl = tap.temp_file([[{"train_micro_batch_size_per_gpu": 32, "zero_optimization": {"stage": 2},
    "steps_per_print": 2, "comms_logger": {"enabled": true}}]], ".json")
  text, ok = run(("%s launch -n 2 ../models/simple_net.lua --config %s --steps 4 --samples 256 --save '' --quiet"):format(bin, cl))
  local rs = tonumber(text:match("comms: reduce_scatter%s+(%d+) calls"))
  local ag = tonumber(text:match("comms: allgather%s+(%d+) calls"))
  tap.ok(ok and rs == 2 and ag == 2 and text:find("comms: reductions", 1, true),
         "stage 2 on 2 ranks: one reduce-scatter and one all-gather per step, counted over 2 steps: " .. text)
  -- a rank sends the other rank's part of SimpleNet's 262 gradients: some, at most all of them
  local mb = tonumber(text:match("comms: reduce_scatter%s+%d+ calls%s+([%d.e+-]+) MB sent"))
  tap.ok(mb and mb > 0 and mb <= 2 * 262 * 4 / 1e6, "the reduce-scatters' bytes, 2 calls: " .. tostring(mb))
  -- their time: start to completion, the total over the calls and its mean per call
  local ms, per = text:match("comms: reduce_scatter%s+%d+ calls%s+[%d.e+-]+ MB sent%s+[%d.e+-]+ MB/call%s+([%d.]+) ms%s+([%d.]+) ms/call")
  ms, per = tonumber(ms), tonumber(per)
  tap.ok(ms and ms > 0 and math.abs(ms - 2 * per) <= 0.002 + 1e-3 * ms, ("the reduce-scatters' time: %s ms, %s ms/call"):format(
    tostring(ms), tostring(per)))
else
  tap.ok(true, "# SKIP comms_logger time: no MPI")
  tap.ok(true, "# SKIP comms_logger over ranks: no MPI")
  tap.ok(true, "# SKIP comms_logger bytes: no MPI")
end

-- the FLOPs profiler on GPT-2 (small preset): 6 N tokens plus attention, within 5%
text, ok = run(("%s ../models/gpt2.lua --steps 2 --flops-profile 2 --batch-size 4 --layers 2 --val-batches 1"):format(bin))
local n = tonumber(text:match("([%d.]+)k parameters")) -- (the script prints N in thousands)
local total = tonumber(text:match("flops profiler: step 2: ([%d.e+]+) FLOPs"))
local B, T, C, L = 4, 64, 128, 2
local expect = n and 6 * n * 1e3 * B * T + 3 * L * 4 * B * T * T * C -- (attention: q kᵀ and the weights times v)
tap.ok(ok and total and math.abs(total - expect) / expect < 0.05,
       ("GPT-2's step: %s FLOPs counted, 6 N tokens + attention = %s"):format(tostring(total), tostring(expect)))
tap.ok(text:find("h.0 ", 1, true) and text:find("lm_head", 1, true) and text:find("TFLOP/s", 1, true) and
       text:find("of the measured peak", 1, true), "the report: by module, TFLOP/s, against a measured peak")
tap.done()
