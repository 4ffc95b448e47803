-- The 1-bit optimizers under zorch launch, for test_onebit.lua:
--   zorch launch -n N onebit_worker.lua coll
--     the compressed all-reduce over 6 calls against the algorithm written out
--     here in float64 (every rank simulates every rank); prints "rank R ok"
--   zorch launch -n N onebit_worker.lua train OPTIMIZER STEPS OUT [PRECISION]
--     a small net, each rank its own batches, ZeRO stage 0 (fp32 unless
--     PRECISION), gradient accumulation 2 with fp16; rank 0 writes one
--     line a step to OUT: the mean loss over the ranks and the bytes sent,
--     and each rank prints the largest difference of its weights from rank 0's
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local world = zorch.dist.world()
local R, W = world:rank(), world:size()

local function input(rank, call, n)
  zorch.manual_seed(1000 * call + rank)
  return (zorch.rand(n) - 0.5 + 0.01 * rank):totable()
end

-- (RMS scale, signs with 0 as +, the error) of x
local function compress(x)
  local sq = 0
  for _, v in ipairs(x) do sq = sq + v * v end
  local scale, sign, err = math.sqrt(sq / #x), {}, {}
  for i, v in ipairs(x) do sign[i] = v >= 0 and 1 or -1; err[i] = v - scale * sign[i] end
  return scale, sign, err
end

if arg[1] == "coll" then
  local n = 1003 -- (not a multiple of 8 x ranks: the padding is exercised)
  local P, C = world:onebit_sizes(n)
  local we, se = zorch.zeros(P), zorch.zeros(C)
  local ref_we, ref_se = {}, {}
  for w = 0, W - 1 do
    ref_we[w], ref_se[w] = {}, {}
    for i = 1, P do ref_we[w][i] = 0 end
    for i = 1, C do ref_se[w][i] = 0 end
  end
  local worst, bad = 0, {}
  world:bytes(true)
  for call = 1, 6 do
    local buf = zorch.tensor(input(R, call, n))
    world:compressed_allreduce(buf, we, se)
    -- the reference: workers, then servers, then the gathered result
    local scales, signs = {}, {}
    for w = 0, W - 1 do
      local a, x = input(w, call, n), {}
      for i = 1, P do x[i] = (a[i] or 0) + ref_we[w][i] end
      scales[w], signs[w], ref_we[w] = compress(x)
    end
    local want = {}
    for r = 0, W - 1 do
      local s = {}
      for i = 1, C do
        local v = ref_se[r][i]
        for w = 0, W - 1 do v = v + scales[w] / W * signs[w][r * C + i] end
        s[i] = v
      end
      local sc, sg, e = compress(s)
      ref_se[r] = e
      for i = 1, C do want[r * C + i] = sc * sg[i] end
    end
    local got, gw, gs = buf:totable(), we:totable(), se:totable()
    for i = 1, n do worst = math.max(worst, math.abs(got[i] - want[i])) end
    for i = 1, P do worst = math.max(worst, math.abs(gw[i] - ref_we[R][i])) end
    for i = 1, C do worst = math.max(worst, math.abs(gs[i] - ref_se[R][i])) end
  end
  if worst > 1e-5 then bad[#bad + 1] = ("largest difference %g"):format(worst) end
  local sent = world:bytes()
  -- per call: the signs (P/8 bytes a rank, twice, (W-1)/W of it leaves) and 2 scales
  local want_sent = 6 * (2 * (W - 1) * (P // W // 8) + 2 * (W - 1) * 4)
  if sent ~= want_sent then bad[#bad + 1] = ("sent %d bytes, expected %d"):format(sent, want_sent) end
  print(#bad == 0 and ("rank %d ok (worst %g)"):format(R, worst) or ("rank %d: %s"):format(R, table.concat(bad, "; ")))
  return
end

-- train OPTIMIZER STEPS OUT
local name, steps, out, precision = arg[2], tonumber(arg[3]), arg[4], arg[5] or "fp32"
local opts = {
  Adam = {lr = 0.01, bias_correction = false},
  OneBitAdam = {lr = 0.01, freeze_step = 10},
  ZeroOneAdam = {lr = 0.002, var_freeze_step = 20, var_update_scaler = 2, local_step_scaler = 4, local_step_clipper = 4},
  Lamb = {lr = 0.01, bias_correction = false},
  OneBitLamb = {lr = 0.01, freeze_step = 10},
}
zorch.manual_seed(7)
local model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 2))
local accum = precision == "fp16" and 2 or 1
local engine = zorch.Engine{zero_stage = 0, precision = precision, gradient_accumulation_steps = accum}
local opt = optim[name](model:parameters(), opts[name])
model, _, opt = engine:prepare(model, nil, opt)
local crit = nn.MSELoss()
local W1 = zorch.randn(10, 2) -- the target function, the same on every rank
local f = R == 0 and assert(io.open(out, "w"))
for step = 1, steps do
  local loss
  for a = 1, accum do
    zorch.manual_seed(100 * step + 10 * a + R)
    local x = zorch.randn(32, 10)
    local y = x:matmul(W1):tanh()
    loss = crit(model(x), y)
    opt:zero_grad()
    engine:backward(loss)
    opt:step()
  end
  local mean = engine:mean(loss:item())
  local sent = engine:comm_report().sent
  if f then f:write(("%d %.9g %d\n"):format(step, mean, sent)) end
end
if f then f:close() end
-- every rank's weights against rank 0's
local worst = 0
for _, p in ipairs(model:parameters()) do
  local mine = p:detach():contiguous()
  local r0 = mine:clone()
  world:broadcast(r0, 0)
  worst = math.max(worst, (mine - r0):abs():max():item())
end
print(("rank %d weights differ from rank 0's by %g"):format(R, worst))
