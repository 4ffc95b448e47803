-- The reference job: SimpleNet (Linear 10-20, ReLU, Linear 20-2), MSE, Adam,
-- batch 64, ZeRO stage 2 with gradient clipping 1.0, the model saved at the end.
-- Run: build/zorch models/simple_net.lua [--epochs N] [--log metrics.jsonl] [--help]
-- On a terminal a progress bar runs under the epoch lines; --print-every adds
-- step lines, --log/--csv/--tensorboard write the metrics (zorch plot draws them).
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data

local opt = zorch.flags(arg, {
  epochs = {1000, "number of epochs"},
  steps = {0, "stop after this many optimizer steps (0: no limit)"},
  ["batch-size"] = {64, "samples per batch"},
  lr = {0.00015, "Adam learning rate"},
  ["weight-decay"] = {0.0, "Adam's weight decay (L2; a config's AdamW with \"auto\" params takes it as its decoupled decay)"},
  ["in"] = {10, "input features"},
  hidden = {20, "hidden units"},
  layers = {1, "hidden layers (more than 1 adds hidden x hidden layers between fc1 and fc2)"},
  out = {2, "output features"},
  samples = {10000, "random samples to train on"},
  ["zero-stage"] = {2, "ZeRO stage (0-3)"},
  clip = {1.0, "gradient clipping (max global norm; 0: off)"},
  seed = {0, "random seed for the data, the weights and the shuffle"},
  data = {"", "a safetensors file with tensors X and Y to train on"},
  load = {"", "a state dict to start from"},
  save = {"model.safetensors", "where to save the final state dict"},
  ["no-shuffle"] = {false, "keep the data order"},
  quiet = {false, "print only the summary"},
  accum = {1, "gradient accumulation steps"},
  precision = {"fp32", "fp32, or bf16 or fp16 (16-bit parameters and gradients, fp32 master weights; fp16 with dynamic loss scaling)"},
  bucket = {500000000, "elements per gradient reduction bucket (ZeRO stages 2-3)"},
  report = {false, "print each rank's memory and communication reports as JSON lines"},
  ["checkpoint-dir"] = {"", "save a checkpoint here at the end (and every --checkpoint-every steps)"},
  ["checkpoint-every"] = {0, "optimizer steps between checkpoints (0: only at the end)"},
  ["keep-last"] = {0, "keep only the newest N checkpoints in --checkpoint-dir (0: every one)"},
  resume = {"", "continue from the latest checkpoint in this directory (--steps counts the total)"},
  config = {"", "a DeepSpeed JSON config (batch sizes, ZeRO, bf16, clipping, optimizer, scheduler)"},
  device = {"cpu", "cpu, cuda (each rank its own GPU) or cuda:N"},
  ["comm-timeout"] = {600, "seconds a collective may wait for the other ranks before the job ends (0: never)"},
  log = {"", "write metrics here as JSON lines: loss, lr, grad_norm each step; epoch_loss, samples_per_s each epoch"},
  csv = {"", "write the same metrics as CSV"},
  tensorboard = {"", "write the same metrics as TensorBoard event files in this directory"},
  ["flops-profile"] = {0, "print the FLOPs of this optimizer step by module, its TFLOP/s and the share of a measured peak (0: none)"},
  ["print-every"] = {0, "a step line (loss, lr, grad norm, samples/s) every N optimizer steps (0: none)"},
  ["checkpoint-activations"] = {false, "recompute fc1 and its ReLU in backward instead of keeping their activations"},
  ["offload-optimizer"] = {"none", "none, cpu or nvme: where Adam's moments of the shard live (nvme: files under --nvme-path)"},
  ["offload-param"] = {"none", "none, cpu or nvme: where the parameter shard lives (stage 3; nvme with --offload-optimizer nvme; cpu on GPU ranks with --offload-optimizer cpu)"},
  ["nvme-path"] = {"/tmp", "the folder for the offload files (made and removed at once: nothing stays)"},
  ["offload-chunk"] = {1048576, "elements per streamed chunk of the optimizer step"},
  ["offload-buffers"] = {4, "chunk buffers of the optimizer step (2-32)"},
}, "usage: zorch models/simple_net.lua [flags]")
-- a bad output path fails now, not after the training (rank 0 writes it)
if zorch.dist.rank() == 0 then zorch.flags.check_output(opt.save, "--save") end

local SimpleNet = nn.Module:extend "SimpleNet"
function SimpleNet:init(i, h, o, layers)
  self.fc1 = nn.Linear(i, h)
  -- --layers N: N - 1 more hidden layers (hid1, hid2, ...) between fc1 and fc2
  for k = 1, (layers or 1) - 1 do self["hid" .. k] = nn.Linear(h, h) end
  self.fc2 = nn.Linear(h, o)
  self.nhid = (layers or 1) - 1
end
local checkpoint -- engine:checkpoint with --checkpoint-activations
function SimpleNet:forward(x)
  local h
  if checkpoint then h = checkpoint(function(a) return zorch.relu(self.fc1(a)) end, x)
  else h = zorch.relu(self.fc1(x)) end
  for k = 1, self.nhid do h = zorch.relu(self["hid" .. k](h)) end
  return self.fc2(h)
end

-- An elastic restart (zorch launch --max-restarts) may run on fewer ranks than
-- the first launch (ZORCH_ELASTIC_WORLD): the global batch stays, so each rank
-- accumulates more micro-batches, and the run resumes from --checkpoint-dir.
local accum = opt.accum
local first_world = tonumber(os.getenv("ZORCH_ELASTIC_WORLD") or "")
if first_world then
  local world = zorch.dist.size()
  if (accum * first_world) % world ~= 0 then -- a usage error: exit status 2, so no restart tries again
    local e = zorch.flags.usage_error(("simple_net: a global batch of %d x %d accumulation x %d ranks does not split over %d ranks"):format(
      opt["batch-size"], accum, first_world, world))
    e.every_rank = true
    error(e, 0)
  end
  accum = accum * first_world // world
  if (tonumber(os.getenv("ZORCH_ELASTIC_RESTART") or "0") or 0) > 0 and opt.resume == "" and
     opt["checkpoint-dir"] ~= "" and io.open(opt["checkpoint-dir"] .. "/latest") then
    opt.resume = opt["checkpoint-dir"]
  end
end
-- a test hook: ZORCH_TEST_KILL_AT=rank:step[:restart] kills that rank (SIGKILL) once it has taken
-- that step (with restart, only in that run of an elastic job: ZORCH_ELASTIC_RESTART)
local kill_rank, kill_step, kill_run = (os.getenv("ZORCH_TEST_KILL_AT") or ""):match("^(%d+):(%d+):?(%d*)$")
if kill_run and kill_run ~= "" and tonumber(kill_run) ~= tonumber(os.getenv("ZORCH_ELASTIC_RESTART") or "0") then
  kill_rank = nil
end

zorch.manual_seed(opt.seed)
local config = opt.config ~= "" and opt.config or os.getenv("ZORCH_CONFIG")
local print_every = opt["print-every"] > 0 and opt["print-every"] or nil
-- --comm-timeout given on the command line wins over a config file's comm_timeout
local timeout
for _, a in ipairs(arg) do
  if a == "--comm-timeout" or a:match("^%-%-comm%-timeout=") then timeout = opt["comm-timeout"] end
end
local function offload(dev, extra)
  if dev == "none" then return false end
  local t = {device = dev, nvme_path = dev == "nvme" and opt["nvme-path"] or nil}
  for k, v in pairs(extra or {}) do t[k] = v end
  return t
end
local keep_last = opt["keep-last"] > 0 and math.tointeger(opt["keep-last"]) or nil
local flops = opt["flops-profile"] > 0 and {profile_step = math.tointeger(opt["flops-profile"])} or nil
local engine = config and zorch.Engine(config, {device = opt.device, steps_per_print = print_every,
                                               comm_timeout = timeout, keep_last = keep_last,
                                               flops_profiler = flops}) or
  zorch.Engine{zero_stage = opt["zero-stage"], gradient_clipping = opt.clip, gradient_accumulation_steps = accum,
               reduce_bucket_size = opt.bucket, precision = opt.precision, device = opt.device,
               steps_per_print = print_every, comm_timeout = opt["comm-timeout"], keep_last = keep_last,
               flops_profiler = flops or false,
               offload_optimizer = offload(opt["offload-optimizer"], {chunk = math.tointeger(opt["offload-chunk"]),
                                                                       buffer_count = math.tointeger(opt["offload-buffers"])}),
               offload_param = offload(opt["offload-param"])}
if opt["checkpoint-activations"] then checkpoint = function(...) return engine:checkpoint(...) end end
local X, Y
if opt.data ~= "" then
  local d = zorch.load(opt.data)
  X, Y = d.X, d.Y
  if not X or not Y then error(opt.data .. ": expected tensors named X and Y") end
else
  X, Y = zorch.randn(opt.samples, opt["in"]), zorch.randn(opt.samples, opt.out)
end
local loader = data.DataLoader(data.TensorDataset(X, Y),
                               {batch_size = opt["batch-size"], shuffle = not opt["no-shuffle"], seed = opt.seed})
-- with the parameters on nvme the model is built without values (nn.deferred):
-- prepare fills them group by group in the file, so memory never holds them all
local pfile = engine.param_dir ~= nil -- (offload_param nvme; cpu on GPU ranks: files in host memory)
local function build() return SimpleNet(opt["in"], opt.hidden, opt.out, math.tointeger(opt.layers)) end
local model = pfile and nn.deferred(build) or build()
if opt.load ~= "" then model:load_state_dict(zorch.load(opt.load)) end
-- a config that names an optimizer gets it from the engine, its "auto" params from this script's Adam
local adam = optim.Adam(model:parameters(), {lr = opt.lr, weight_decay = opt["weight-decay"]})
local criterion = nn.MSELoss()
-- the schedule's settings, for a config whose scheduler params are "auto" (Transformers' rule: warm-up
-- from 0 to --lr; one warm-up step, as Accelerate gives DeepSpeed, which refuses 0; the run's optimizer steps)
local schedule = {warmup_min_lr = 0, warmup_max_lr = opt.lr, warmup_num_steps = 1,
                  total_num_steps = opt.steps > 0 and math.tointeger(opt.steps) or
                    math.max(1, math.tointeger(opt.epochs) * math.ceil(opt.samples / opt["batch-size"]) // accum),
                  gradient_clipping = opt.clip} -- (and a config's "auto" clipping: --clip)
model, loader, adam = engine:prepare(model, loader, adam, schedule)

local steps, samples, t0 = 0, 0, zorch.clock()
local first_epoch = 1
local carry -- the resumed epoch's loss so far (its sum over the batches before the checkpoint, and their count)
if opt.resume ~= "" then
  local m = engine:load_checkpoint(opt.resume)
  steps, first_epoch = m.step, m.loader and m.loader.epoch or 1
  carry = type(m.extra) == "table" and m.extra.epoch_loss or nil
  engine:print(("resumed from %s at step %d (saved by %d ranks at stage %d)"):format(
    opt.resume, m.step, m.world_size, m.zero_stage))
end
local ckdir, every = opt["checkpoint-dir"], opt["checkpoint-every"]
-- metrics (rank 0 writes them) and a progress display over the run's steps
local logger = (opt.log ~= "" or opt.csv ~= "" or opt.tensorboard ~= "") and zorch.Logger{
  jsonl = opt.log ~= "" and opt.log or nil, csv = opt.csv ~= "" and opt.csv or nil,
  tensorboard = opt.tensorboard ~= "" and opt.tensorboard or nil,
  resume = opt.resume ~= "" and steps or nil} or nil -- (a resumed run appends)
-- (on a terminal a bar; in a log a line every 30 s of a long run)
local bar
if not opt.quiet then
  local total = (opt.epochs - first_epoch + 1) * (#loader // accum)
  if opt.steps > 0 then total = math.min(total, math.max(opt.steps - steps, 0)) end
  bar = zorch.progress(total, {unit = "step", every_s = 30})
end
local function say(line)
  if bar and bar.tty then bar:print(line) else engine:print(line) end
end
local loss, mean
for epoch = first_epoch, opt.epochs do
  model:train()
  local total, n, fresh = 0, 0, 0
  if carry then total, n, carry = carry.sum, carry.batches, nil end
  local epoch_t0, epoch_samples = zorch.clock(), 0
  for x, y in loader:iter() do
    fresh = fresh + 1
    loss = criterion(model(x), y)
    adam:zero_grad(); engine:backward(loss)
    if adam:step() then
      steps = steps + 1
      if kill_rank and engine.rank == tonumber(kill_rank) and steps == tonumber(kill_step) then
        os.execute("kill -9 " .. io.open("/proc/self/stat"):read("n"))
      end
      if ckdir ~= "" and every > 0 and steps % every == 0 then
        -- the epoch's loss so far, this batch's included (mean over ranks: the epoch's line is a mean anyway)
        local sum = engine:mean((zorch.is_tensor(total) and total:item() or total) + loss:item())
        engine:save_checkpoint(ckdir, {extra = {epoch_loss = {sum = sum, batches = n + 1}}})
      end
      if bar then bar:update(1, {loss = loss}) end
      -- this rank's loss of the step's last micro-batch (reading it waits for a GPU)
      if logger then logger:log(steps, {loss = loss, lr = adam.lr, grad_norm = engine:clip_grad_norm() or 0}) end
    end
    -- on a GPU the losses add up there: reading each one would wait for the GPU every step
    if engine.device == "cpu" then total = total + loss:item() else total = loss:detach() + total end
    n = n + 1
    samples = samples + x:size(1)
    epoch_samples = epoch_samples + x:size(1)
    if opt.steps > 0 and steps >= opt.steps then break end
  end
  -- (a run resumed at an epoch's end finds no batch left in it: no line for it)
  if fresh > 0 then
    if zorch.is_tensor(total) then total = total:item() end
    mean = engine:mean(total / math.max(n, 1)) -- over every rank's batches
    local rate = engine:mean(epoch_samples) * engine.world_size / math.max(zorch.clock() - epoch_t0, 1e-9)
    -- the epoch's mean loss: the last batch's alone is noisy
    if not opt.quiet then
      say(("Epoch %d loss: %.6f  grad norm: %.4f  lr: %.3g  samples/s: %.0f"):format(
        epoch, mean, engine:clip_grad_norm() or 0, adam.lr, rate))
    end
    if logger then logger:log(steps, {epoch = epoch, epoch_loss = mean, samples_per_s = rate}) end
  end
  if opt.steps > 0 and steps >= opt.steps then break end
end
if bar then bar:close() end
if logger then logger:close() end
local dt = zorch.clock() - t0
samples = math.floor(engine:mean(samples) * engine.world_size + 0.5) -- over every rank
if opt.report then
  -- one JSON object per rank and report, in rank order
  local m, c = engine:memory_report(), engine:comm_report()
  for r = 0, engine.world_size - 1 do
    if r == engine.rank then
      print(('{"report": "memory", "rank": %d, "world_size": %d, "stage": %d, "numel": %d, "parameters": %d, ' ..
             '"gradients": %d, "optimizer_state": %d, "master_weights": %d, "buffers": %d, "nvme": %d, ' ..
             '"offload_buffers": %d}'):format(
        r, m.world_size, m.stage, m.numel, m.parameters, m.gradients, m.optimizer_state, m.master_weights, m.buffers,
        m.nvme, m.offload_buffers))
      print(('{"report": "comm", "rank": %d, "sent": %d, "received": %d, "param_bytes": %d}'):format(
        r, c.sent, c.received, m.numel * 4))
      -- offload: the working set (what the engine holds in memory between steps, and its
      -- stream buffers), the files' bytes, and the last step's traffic with the bandwidth it reached
      local lio = engine.last_io
      if m.nvme > 0 then
        print(('{"report": "offload", "rank": %d, "working_set": %d, "nvme": %d, "nvme_optimizer": %d, ' ..
               '"nvme_parameters": %d, "step_read": %d, "step_written": %d, "step_s": %.3f, "step_MBps": %.0f}'):format(
          r, m.parameters + m.gradients + m.optimizer_state + m.master_weights + m.buffers + m.offload_buffers,
          m.nvme, m.nvme_optimizer, m.nvme_parameters, lio and lio.read or 0, lio and lio.written or 0,
          lio and lio.step_s or 0, lio and (lio.read + lio.written) / 1e6 / math.max(lio.step_s, 1e-9) or 0))
      end
      io.stdout:flush()
    end
    zorch.dist.barrier() -- so lines come out in rank order
  end
end
if ckdir ~= "" then engine:save_checkpoint(ckdir) end
if opt.save ~= "" then engine:save(model:state_dict(), opt.save) end -- (--save "": none)
engine:print(("done: %d steps, %d samples, %.0f samples/s, last epoch's loss %.6f, saved %s"):format(
  steps, samples, samples / math.max(dt, 1e-9), mean or 0 / 0, opt.save))
