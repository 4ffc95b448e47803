-- The reference job: SimpleNet (Linear 10-20, ReLU, Linear 20-2), MSE, Adam,
-- batch 64, ZeRO stage 2 with gradient clipping 1.0, the model saved at the end.
-- Run: build/zorch models/simple_net.lua [--epochs N] [--help]
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data

local opt = zorch.flags(arg, {
  epochs = {1000, "number of epochs"},
  steps = {0, "stop after this many optimizer steps (0: no limit)"},
  ["batch-size"] = {64, "samples per batch"},
  lr = {0.00015, "Adam learning rate"},
  ["in"] = {10, "input features"},
  hidden = {20, "hidden units"},
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
  precision = {"fp32", "fp32, or bf16 (bf16 parameters and gradients, fp32 master weights)"},
  bucket = {500000000, "elements per gradient reduction bucket (ZeRO stages 2-3)"},
  report = {false, "print each rank's memory and communication reports as JSON lines"},
  ["checkpoint-dir"] = {"", "save a checkpoint here at the end (and every --checkpoint-every steps)"},
  ["checkpoint-every"] = {0, "optimizer steps between checkpoints (0: only at the end)"},
  resume = {"", "continue from the latest checkpoint in this directory (--steps counts the total)"},
  config = {"", "a DeepSpeed JSON config (batch sizes, ZeRO, bf16, clipping, optimizer, scheduler)"},
  device = {"cpu", "cpu, cuda (each rank its own GPU) or cuda:N"},
}, "usage: zorch models/simple_net.lua [flags]")

local SimpleNet = nn.Module:extend "SimpleNet"
function SimpleNet:init(i, h, o)
  self.fc1 = nn.Linear(i, h)
  self.fc2 = nn.Linear(h, o)
end
function SimpleNet:forward(x)
  return self.fc2(zorch.relu(self.fc1(x)))
end

zorch.manual_seed(opt.seed)
local config = opt.config ~= "" and opt.config or os.getenv("ZORCH_CONFIG")
local engine = config and zorch.Engine(config, {device = opt.device}) or
  zorch.Engine{zero_stage = opt["zero-stage"], gradient_clipping = opt.clip, gradient_accumulation_steps = opt.accum,
               reduce_bucket_size = opt.bucket, precision = opt.precision, device = opt.device}
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
local model = SimpleNet(opt["in"], opt.hidden, opt.out)
if opt.load ~= "" then model:load_state_dict(zorch.load(opt.load)) end
-- a config that names an optimizer gets it from the engine
local adam = not engine.cfg.optimizer and optim.Adam(model:parameters(), {lr = opt.lr}) or nil
local criterion = nn.MSELoss()
model, loader, adam = engine:prepare(model, loader, adam)

local steps, samples, t0 = 0, 0, zorch.clock()
local first_epoch = 1
if opt.resume ~= "" then
  local m = engine:load_checkpoint(opt.resume)
  steps, first_epoch = m.step, m.loader and m.loader.epoch or 1
  engine:print(("resumed from %s at step %d (saved by %d ranks at stage %d)"):format(
    opt.resume, m.step, m.world_size, m.zero_stage))
end
local ckdir, every = opt["checkpoint-dir"], opt["checkpoint-every"]
local loss, mean
for epoch = first_epoch, opt.epochs do
  model:train()
  local total, n = 0, 0
  for x, y in loader:iter() do
    loss = criterion(model(x), y)
    adam:zero_grad(); engine:backward(loss)
    if adam:step() then
      steps = steps + 1
      if ckdir ~= "" and every > 0 and steps % every == 0 then engine:save_checkpoint(ckdir) end
    end
    -- on a GPU the losses add up there: reading each one would wait for the GPU every step
    if engine.device == "cpu" then total = total + loss:item() else total = loss:detach() + total end
    n = n + 1
    samples = samples + x:size(1)
    if opt.steps > 0 and steps >= opt.steps then break end
  end
  if zorch.is_tensor(total) then total = total:item() end
  mean = engine:mean(total / math.max(n, 1)) -- over every rank's batches
  -- the epoch's mean loss: the last batch's alone is noisy
  if not opt.quiet then
    engine:print(("Epoch %d loss: %.6f  grad norm: %.4f"):format(epoch, mean, engine:clip_grad_norm() or 0))
  end
  if opt.steps > 0 and steps >= opt.steps then break end
end
local dt = zorch.clock() - t0
samples = math.floor(engine:mean(samples) * engine.world_size + 0.5) -- over every rank
if opt.report then
  -- one JSON object per rank and report, in rank order
  local m, c = engine:memory_report(), engine:comm_report()
  for r = 0, engine.world_size - 1 do
    if r == engine.rank then
      print(('{"report": "memory", "rank": %d, "world_size": %d, "stage": %d, "numel": %d, "parameters": %d, ' ..
             '"gradients": %d, "optimizer_state": %d, "master_weights": %d, "buffers": %d}'):format(
        r, m.world_size, m.stage, m.numel, m.parameters, m.gradients, m.optimizer_state, m.master_weights, m.buffers))
      print(('{"report": "comm", "rank": %d, "sent": %d, "received": %d, "param_bytes": %d}'):format(
        r, c.sent, c.received, m.numel * 4))
      io.stdout:flush()
    end
    zorch._allreduce(zorch.zeros(1)) -- a barrier, so lines come out in rank order
  end
end
if ckdir ~= "" then engine:save_checkpoint(ckdir) end
engine:save(model:state_dict(), opt.save)
engine:print(("done: %d steps, %d samples, %.0f samples/s, last epoch's loss %.6f, saved %s"):format(
  steps, samples, samples / math.max(dt, 1e-9), mean or 0 / 0, opt.save))
