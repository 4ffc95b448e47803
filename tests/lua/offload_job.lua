-- A small job for tests/lua/test_offload.lua, run by `zorch launch`:
--   offload_job.lua STAGE NVME_DIR|cpu|- CHUNK STEPS SAVE [CKPT_DIR [resume]]
-- trains a 10-40-3 MLP with AdamW under the Engine at STAGE, its optimizer
-- state offloaded to NVME_DIR in CHUNK-element chunks ("-": no offload), for
-- STEPS optimizer steps in total, saves the weights to SAVE; with CKPT_DIR it
-- saves a checkpoint there at the end, or with "resume" starts from it.
-- ZORCH_TEST_GROUPS=1: two parameter groups (weights; biases with their own lr
-- and no weight decay). ZORCH_TEST_PARAM=1: the parameters on nvme too
-- (offload_param, stage 3; with NVME_DIR "cpu", offload_param and
-- offload_optimizer "cpu", which a GPU rank, or ZORCH_TEST_HOOKS=offload_host,
-- keeps in files in host memory). ZORCH_TEST_ACCUM=k: k micro-batches a step.
-- ZORCH_TEST_DEFER=1: the model built under nn.deferred (filled at prepare).
-- ZORCH_TEST_HOOKS=offload_host: the GPU ranks' path (a host copy of the shard
-- stepped) on CPU ranks; ZORCH_TEST_PIN=1: with pin_memory. ZORCH_TEST_CHUNK=k: chunks of k elements instead
-- of CHUNK. ZORCH_TEST_CLIP=x: gradient_clipping x (else 0.5).
-- With offload, rank 0 prints the last step's traffic to and from the files
-- and the clip's norm.
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data
local stage, nvme, chunk, steps, save, ckdir, resume = tonumber(arg[1]), arg[2], tonumber(arg[3]), tonumber(arg[4]),
  arg[5], arg[6], arg[7] == "resume"
chunk = tonumber(os.getenv("ZORCH_TEST_CHUNK") or "") or chunk
zorch.manual_seed(3)
local _, world = debug.getregistry()["zorch.private"]._comm()
local accum = tonumber(os.getenv("ZORCH_TEST_ACCUM") or "1") // 1
local e = zorch.Engine{zero_stage = stage, gradient_clipping = tonumber(os.getenv("ZORCH_TEST_CLIP") or "0.5"), reduce_bucket_size = 50, seed = 1,
                       gradient_accumulation_steps = accum,
                       offload_optimizer = nvme == "cpu" and {device = "cpu", pin_memory = os.getenv("ZORCH_TEST_PIN") ~= nil,
                                                              chunk = os.getenv("ZORCH_TEST_PARAM") and chunk or nil} or
                                           nvme ~= "-" and {device = "nvme", nvme_path = nvme, buffer_count = 3,
                                                            chunk = chunk} or false,
                       offload_param = nvme ~= "-" and os.getenv("ZORCH_TEST_PARAM") and
                                       (nvme == "cpu" and {device = "cpu", buffer_count = 3} or {device = "nvme", nvme_path = nvme})
                                       or false}
-- (after the Engine, whose seed resets the generator: a deferred model draws
-- its values at prepare, from where an eager one would)
local X, Y = zorch.randn(192, 10), zorch.randn(192, 3)
local function build() return nn.Sequential(nn.Linear(10, 40), nn.ReLU(), nn.Linear(40, 3)) end
local model = os.getenv("ZORCH_TEST_DEFER") and nn.deferred(build) or build()
local loader = data.DataLoader(data.TensorDataset(X, Y), {batch_size = 24 // world // accum, shuffle = true, seed = 2})
local params = model:parameters()
if os.getenv("ZORCH_TEST_GROUPS") then
  params = {{params = {params[1], params[3]}}, {params = {params[2], params[4]}, lr = 2e-2, weight_decay = 0}}
end
local m, ld, opt = e:prepare(model, loader, optim.AdamW(params, {lr = 1e-2, weight_decay = 0.01}))
local done = 0
if resume then done = e:load_checkpoint(ckdir).step end
while done < steps do
  for x, y in ld:iter() do
    local loss = zorch.mse_loss(m(x), y)
    opt:zero_grad(); e:backward(loss)
    if opt:step() then done = done + 1 end
    if done >= steps then break end
  end
end
if ckdir and not resume then e:save_checkpoint(ckdir) end
e:save(m:state_dict(), save)
if e.rank == 0 and e.host then
  print(("host copy: bucketed %s, pinned %s, host_pinned %d bytes"):format(tostring(e.host.bucketed), tostring(e.host.pinned),
    e:memory_report().host_pinned))
end
if e.rank == 0 and nvme == "cpu" and os.getenv("ZORCH_TEST_PARAM") then
  local r = e:memory_report()
  print(("offload in host memory: host_files %d bytes, nvme %d bytes, parameters %d"):format(r.host_files, r.nvme, r.parameters))
end
if e.rank == 0 and nvme ~= "-" and nvme ~= "cpu" then
  local r = e:memory_report()
  print(("offload: nvme %d bytes, buffers %d bytes, optimizer_state in memory %d bytes, parameters %d, gradients %d"):format(
    r.nvme, r.offload_buffers, r.optimizer_state, r.parameters, r.gradients))
  local io = e.last_io
  print(("last step: read %d bytes, wrote %d bytes, read ahead %d bytes, norm %.9g, direct %s, written behind %d bytes"):format(
    io.read, io.written, io.param.ahead_bytes or 0, e.last_norm, tostring(io.opt.direct), io.param.behind_bytes or 0))
end
