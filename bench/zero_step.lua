-- One optimizer step of a model under the ZeRO engine, timed on every rank; rank
-- 0 prints the slowest rank's mean step time as a JSON line.
-- zorch launch -n N bench/zero_step.lua NAME STAGE IN HIDDEN OUT BATCH STEPS
-- ZORCH_BENCH_BUCKET sets reduce_bucket_size; ZORCH_BENCH_OVERLAP=1 turns on
-- overlap_comm (the name gains "_overlap"); ZORCH_BENCH_REUSE sets stage 3's
-- max_reuse_distance (the name gains "_reuse"), ZORCH_BENCH_PREFETCH its
-- prefetch_bucket_size (the name gains "_prefetchN"). The line gives the mean time
-- backward was blocked in gradient reductions (stages 2-3), "waited_us": the
-- difference without and with overlap is the communication hidden; at stage 3
-- the same for the parameter gathers ("gather_waited_us" of
-- "gather_in_flight_us"), and rank 0's peak resident memory ("rss_peak_mib") and
-- page faults per timed step ("faults_per_step").
-- ZORCH_BENCH_PRECISION=bf16 (or fp16) gives the Engine that precision (the
-- name gains "_bf16"); bench/torch_ddp.py takes the same variable.
local zorch = require "zorch"
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
local prefetch = math.tointeger(tonumber(os.getenv("ZORCH_BENCH_PREFETCH") or ""))
local precision = os.getenv("ZORCH_BENCH_PRECISION") or "fp32"
local engine = zorch.Engine{zero_stage = stage, gradient_clipping = 1.0, seed = 1, overlap_comm = overlap,
                            reduce_bucket_size = bucket, max_reuse_distance = reuse, prefetch_bucket_size = prefetch,
                            precision = precision}
local model = nn.Sequential(nn.Linear(i, h), nn.ReLU(), nn.Linear(h, o))
local opt = optim.Adam(model:parameters(), {lr = 1e-4})
model, _, opt = engine:prepare(model, nil, opt)
local x, y = zorch.randn(batch // engine.world_size, i), zorch.randn(batch // engine.world_size, o)
local function step()
  local loss = zorch.mse_loss(model(x), y)
  opt:zero_grad(); engine:backward(loss); opt:step()
end
step()
local function minflt() -- this process's minor page faults so far (Linux)
  local f = io.open("/proc/self/stat")
  if not f then return 0 end
  local s = f:read("a"); f:close()
  return tonumber(s:match("%) %S+" .. (" %S+"):rep(6) .. " (%d+)")) or 0
end
local f0 = minflt()
local t0, waited, gwaited, gflight = zorch.clock(), 0, 0, 0
for _ = 1, steps do
  step()
  local c = engine:comm_report()
  waited, gwaited, gflight = waited + c.waited_s, gwaited + (c.gather_waited_s or 0), gflight + (c.gather_in_flight_s or 0)
end
local per = zorch.tensor({(zorch.clock() - t0) / steps}, {dtype = "float64"})
local faults = (minflt() - f0) / steps
zorch.dist.world():allreduce(per, "max")
local hwm = 0 -- peak resident kB (Linux)
local f = io.open("/proc/self/status")
if f then hwm = tonumber(f:read("a"):match("VmHWM:%s*(%d+)")) or 0; f:close() end
if engine.rank == 0 then
  print(('{"name": "zorch/%s_stage%d_ranks%d%s", "value": %.4g, "unit": "us"%s}'):format(
    name, stage, engine.world_size, (overlap and "_overlap" or "") .. (reuse > 0 and "_reuse" or "") ..
    (prefetch and "_prefetch" .. prefetch or "") .. (precision ~= "fp32" and "_" .. precision or ""), per:item() * 1e6,
    (stage >= 2 and (', "waited_us": %.4g'):format(waited / steps * 1e6) or "") ..
    (stage == 3 and (', "gather_waited_us": %.4g, "gather_in_flight_us": %.4g'):format(gwaited / steps * 1e6,
                                                                                      gflight / steps * 1e6) or "") ..
    (', "rss_peak_mib": %.1f, "faults_per_step": %.0f'):format(hwm / 1024, faults)))
end
