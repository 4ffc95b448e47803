-- Stage 3's gathers ahead, for test_prefetch.lua:
--   zorch launch -n N prefetch_worker.lua MODE STAGE PREFETCH MAX_LIVE OUT
-- trains a four-layer model for 4 steps with the Engine at STAGE
-- (prefetch_bucket_size PREFETCH, max_live_parameters MAX_LIVE), every rank its
-- part of a global batch of 12. MODE:
--   plain  the same forward order every step
--   vary   even steps run another order that uses one layer twice
--   fail   step 2's forward raises after its third layer began (gathers ahead
--          in flight), the script catches it and skips the step
-- Rank 0 writes the weights to OUT and prints what the engine reported for
-- the last step: "gathers in_flight waited sent params numel released", where
-- released is the sum of |b.weight| read between steps.
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local mode, stage, prefetch, live, out = arg[1], math.tointeger(tonumber(arg[2])), math.tointeger(tonumber(arg[3])),
  math.tointeger(tonumber(arg[4])), arg[5]

local Net = nn.Module:extend "PrefetchNet"
function Net:init()
  self.a = nn.Linear(6, 8)
  self.b = nn.Linear(8, 8)
  self.c = nn.Linear(8, 8)
  self.d = nn.Linear(8, 3)
end
local fail_now = false
function Net:forward(x, step)
  local h = zorch.relu(self.a(x))
  if mode == "vary" and step % 2 == 0 then
    h = zorch.relu(self.b(zorch.relu(self.c(h))))
    h = zorch.relu(self.b(h))
  else
    h = zorch.relu(self.c(zorch.relu(self.b(h))))
  end
  if fail_now then error("forward fails on purpose") end
  return self.d(h)
end

zorch.manual_seed(7)
local m = Net()
local engine = zorch.Engine{zero_stage = stage, reduce_bucket_size = 40, gradient_clipping = 1.0,
                            prefetch_bucket_size = prefetch, max_live_parameters = live}
local o = optim.Adam(m:parameters(), {lr = 0.01})
m, _, o = engine:prepare(m, nil, o)
local N, d, D = 12, engine.rank, engine.world_size
local per = N // D
for step = 1, 4 do
  local xs, ys = {}, {}
  for i = d * per, (d + 1) * per - 1 do
    for j = 0, 5 do xs[#xs + 1] = math.sin(0.1 * (i * 6 + j) + step) end
    for j = 0, 2 do ys[#ys + 1] = math.cos(0.2 * (i * 3 + j) - step) end
  end
  local x, y = zorch.tensor(xs):reshape({per, 6}), zorch.tensor(ys):reshape({per, 3})
  fail_now = mode == "fail" and step == 2
  local ok, err = pcall(function() return m(x, step) end)
  if fail_now then
    if ok or not tostring(err):find("forward fails on purpose", 1, true) then
      error("the failing forward did not fail with its message: " .. tostring(err))
    end
  else
    if not ok then error(err, 0) end
    local loss = zorch.mse_loss(err, y)
    o:zero_grad()
    engine:backward(loss)
    o:step()
  end
end
local c, mem = engine:comm_report(), engine:memory_report()
-- between steps a released stage-3 parameter reads zeros (its buffer went back to the pool)
local released = m.b.weight:abs():sum():item()
local sd = m:state_dict() -- (collective at stage 3: every rank gathers)
if d == 0 then
  zorch.save(sd, out)
  print(("gathers %.9g %.9g %d %d %d %.9g"):format(c.gather_in_flight_s, c.gather_waited_s, c.sent, mem.parameters,
                                                 mem.numel, released))
end
