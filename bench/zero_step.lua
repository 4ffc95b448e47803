-- One optimizer step of a model under the ZeRO engine, timed on every rank; rank
-- 0 prints the slowest rank's mean step time as a JSON line.
-- zorch launch -n N bench/zero_step.lua NAME STAGE IN HIDDEN OUT BATCH STEPS
-- ZORCH_BENCH_BUCKET sets reduce_bucket_size; ZORCH_BENCH_OVERLAP=1 turns on
-- overlap_comm (the name gains "_overlap"); ZORCH_BENCH_REUSE sets stage 3's
-- max_reuse_distance (the name gains "_reuse"). The line gives the mean time
-- backward was blocked in gradient reductions (stages 2-3), "waited_us": the
-- difference without and with overlap is the communication hidden.
-- ZORCH_BENCH_PRECISION=bf16 (or fp16) gives the Engine that precision (the
-- name gains "_bf16"); bench/torch_ddp.py takes the same variable.
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers (a terminal test, a barrier)
local nn, optim = zorch.nn, zorch.optim
local a = zorch.flags(arg, {
  {"NAME", "the benchmark's name in the JSON line"},
  {"STAGE", "ZeRO stage", type = "integer", choices = {0, 1, 2, 3}},
  {"IN", "input features", type = "integer"},
  {"HIDDEN", "hidden units", type = "integer"},
  {"OUT", "output features", type = "integer"},
  {"BATCH", "global batch size", type = "integer"},
  {"STEPS", "timed steps", type = "integer"},
}, "usage: zorch launch -n N bench/zero_step.lua NAME STAGE IN HIDDEN OUT BATCH STEPS")
local name, stage, i, h, o, batch, steps = a.NAME, a.STAGE, a.IN, a.HIDDEN, a.OUT, a.BATCH, a.STEPS
local overlap = os.getenv("ZORCH_BENCH_OVERLAP") == "1"
local bucket = math.tointeger(tonumber(os.getenv("ZORCH_BENCH_BUCKET") or "")) or 500000000
local reuse = math.tointeger(tonumber(os.getenv("ZORCH_BENCH_REUSE") or "")) or 0
local precision = os.getenv("ZORCH_BENCH_PRECISION") or "fp32"
local engine = zorch.Engine{zero_stage = stage, gradient_clipping = 1.0, seed = 1, overlap_comm = overlap,
                            reduce_bucket_size = bucket, max_reuse_distance = reuse, precision = precision}
local model = nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))
local opt = optim.Adam(model:parameters(), {lr = 1e-4})
model, _, opt = engine:prepare(model, nil, opt)
local x, y = zorch.randn(batch // engine.world_size, i), zorch.randn(batch // engine.world_size, o)
local function step()
  local loss = zorch.mse_loss(model(x), y)
  opt:zero_grad(); engine:backward(loss); opt:step()
end
step()
local t0, waited = zorch.clock(), 0
for _ = 1, steps do step(); waited = waited + engine:comm_report().waited_s end
local per = zorch.tensor({(zorch.clock() - t0) / steps}, {dtype = "float64"})
Z._allreduce(per, "max")
if engine.rank == 0 then
  print(('{"name": "zorch/%s_stage%d_ranks%d%s", "value": %.4g, "unit": "us"%s}'):format(
    name, stage, engine.world_size, (overlap and "_overlap" or "") .. (reuse > 0 and "_reuse" or "") .. (precision ~= "fp32" and "_" .. precision or ""),
    per:item() * 1e6,
    stage >= 2 and (', "waited_us": %.4g'):format(waited / steps * 1e6) or ""))
end
