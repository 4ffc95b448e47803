-- Pipeline parallelism under zorch launch, for test_pipeline.lua:
--   zorch launch -n N pipe_worker.lua train SCHEDULE P STAGE OUT
--     an MLP of 6 layers (the first and last weights tied) as nn.Pipeline over
--     P stages, data parallel over the rest (ZeRO STAGE over the data group),
--     4 micro-batches a step, Adam with gradient clipping; rank 0 prints each
--     step's loss ("loss S L norm N") and each stage's parameters and bytes held
--     ("stages parameters P1 P2 ... memory B1 B2 ..."); the whole model's
--     weights go to OUT (world rank 0)
--   zorch launch -n P pipe_worker.lua bubble SCHEDULE M TF TB
--     P stages whose forward sleeps TF seconds and backward TB: the measured
--     bubble of the last of 3 steps, and each stage's activations in flight
--     ("bubble MEASURED IDEAL", "in_flight N N ...") on rank 0
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local Z = debug.getregistry()["zorch.private"] -- _sleep, _grad_fn
local mode = arg[1]

if mode == "train" then
  local schedule, P, stage, out = arg[2], math.tointeger(tonumber(arg[3])), math.tointeger(tonumber(arg[4])), arg[5]
  local L = zorch.dist.layout{pipeline = P}
  local function lin(i, a, b) return {name = tostring(i), build = function() return nn.Linear(a, b) end} end
  local layers = {lin(0, 6, 6), nn.Tanh(), lin(2, 6, 8), nn.Tanh(), lin(4, 8, 6), nn.Tanh(), lin(6, 6, 6)}
  local pipe = nn.Pipeline{layers = layers, group = L.pipeline, schedule = schedule, seed_layers = 11,
                           tied = {{"0.weight", "6.weight"}},
                           loss = function(y, t) return zorch.mse_loss(y, t) end}
  local M = 4
  local engine = zorch.Engine{zero_stage = stage, gradient_clipping = 0.05, gradient_accumulation_steps = M,
                              data_group = L.data, reduce_bucket_size = 16}
  local model, _, o = engine:prepare(pipe, nil, optim.Adam(pipe:parameters(), {lr = 0.02}))
  local per, d, D = 8 // L.sizes.data, L.coords.data, L.sizes.data
  for step = 1, 4 do
    o:zero_grad()
    local loss = model:train_batch(function(m)
      local xs, ys = {}, {}
      for i = d * per, (d + 1) * per - 1 do -- this data rank's rows of micro-batch m
        local g = (step * M + m) * 8 + i
        for j = 0, 5 do xs[#xs + 1] = math.sin(0.3 * (g * 6 + j)) end
        for j = 0, 5 do ys[#ys + 1] = math.cos(0.2 * (g * 6 + j)) end
      end
      return zorch.tensor(xs):reshape({per, 6}), zorch.tensor(ys):reshape({per, 6})
    end, engine)
    o:step()
    engine:print(("loss %d %.9g norm %.9g"):format(step, engine:mean(loss), engine:clip_grad_norm()))
  end
  local r = pipe:report()
  local ps, ms = {}, {}
  for i, st in ipairs(r.stages) do ps[i], ms[i] = st.parameters, st.memory end
  engine:print(("stages parameters %s memory %s"):format(table.concat(ps, " "), table.concat(ms, " ")))
  local sd = pipe:full_state_dict()
  if zorch.dist.rank() == 0 then zorch.save(sd, out) end
  return
end

-- bubble: stages of fixed times
local schedule, M, tf, tb = arg[2], math.tointeger(tonumber(arg[3])), tonumber(arg[4]), tonumber(arg[5])
local world = zorch.dist.world()
local Sleep = nn.Module:extend "Sleep"
function Sleep:init() self.w = nn.Parameter(zorch.ones(1)) end
function Sleep:forward(x)
  local y = x * self.w
  Z._sleep(tf)
  return Z._grad_fn(y:detach(), {y}, function(g) Z._sleep(tb); return g end)
end
local layers = {}
for i = 1, world:size() do layers[i] = {build = function() return Sleep() end} end
local pipe = nn.Pipeline{layers = layers, schedule = schedule, micro_batches = M,
                         loss = function(y) return y:sum() end}
local r
for _ = 1, 3 do
  pipe:train_batch(function() return zorch.ones(2) end)
  r = pipe:report()
end
if world:rank() == 0 then
  print(("bubble %.4f %.4f"):format(r.bubble, r.ideal))
  local f = {}
  for i, st in ipairs(r.stages) do f[i] = st.in_flight end
  print("in_flight " .. table.concat(f, " "))
end
