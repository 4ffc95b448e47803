-- A small model trained with a grouped optimizer (weights in one group, biases
-- in another, with other options), for test_groups.lua:
--   zorch groups_worker.lua KIND MODE OUT [STEPS [nosched]]
-- KIND adamw | sgd | lamb | frozen | partial; MODE plain (the optimizer alone), stage0..stage3 (the
-- Engine, under zorch launch for several ranks), or resumeN (stage N: a
-- checkpoint after 3 steps, then a new model and optimizer with other group
-- options resume from it). Rank 0 writes the parameters to OUT.
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local kind, mode, out = arg[1], arg[2], arg[3]
local steps = math.tointeger(tonumber(arg[4] or "5"))
-- a StepLR on every group's lr, but not around a checkpoint (its state is not in it)
local sched_on = mode:match("^resume") == nil and arg[5] ~= "nosched"

local function model_and_opt(wrong)
  local m = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 4))
  zorch.no_grad(function()
    for k, p in ipairs(m:parameters()) do
      local v = {}
      for i = 0, p:numel() - 1 do v[#v + 1] = 0.5 * math.sin(0.37 * i + k) end
      p:copy_(zorch.tensor(v):reshape(p.shape))
    end
  end)
  local w, b = {}, {}
  for _, p in ipairs(m:parameters()) do table.insert(p:dim() >= 2 and w or b, p) end
  local o
  if kind == "adamw" then
    o = optim.AdamW({{params = w, weight_decay = wrong and 0.5 or 0.1},
                     {params = b, weight_decay = 0, lr = wrong and 0.5 or 0.03, betas = {0.8, wrong and 0.9 or 0.99}}},
                    {lr = 0.01, betas = {0.9, 0.95}})
  elseif kind == "lamb" then -- a trust ratio per tensor, also when the Engine steps a flat shard
    o = optim.Lamb({{params = w, weight_decay = wrong and 0.5 or 0.01},
                    {params = b, lr = wrong and 0.5 or 0.02, max_coeff = wrong and 1 or 5}},
                   {lr = 0.01, betas = {0.9, 0.99}})
  elseif kind == "frozen" then -- one group over every parameter, the first weight frozen: no decay for it
    m["0"].weight.requires_grad = false
    o = optim.AdamW(m:parameters(), {lr = wrong and 0.5 or 0.05, weight_decay = 0.1})
  elseif kind == "partial" then -- one group over the last layer only: the rest is not stepped
    o = optim.AdamW(m["2"]:parameters(), {lr = wrong and 0.5 or 0.05, weight_decay = 0.1})
  else
    o = optim.SGD({{params = w, momentum = 0.9, nesterov = true, weight_decay = wrong and 0.3 or 0.01},
                   {params = b, lr = wrong and 0.01 or 0.2}}, {lr = 0.05})
  end
  return m, o
end

local N = 8
local X, Y = {}, {}
for i = 0, N * 6 - 1 do X[#X + 1] = math.sin(0.13 * i) end
for i = 0, N * 4 - 1 do Y[#Y + 1] = math.cos(0.29 * i) end
X, Y = zorch.tensor(X):reshape({N, 6}), zorch.tensor(Y):reshape({N, 4})

local function train(m, o, backward, from, to, rank, world)
  local sched = sched_on and optim.lr_scheduler.StepLR(o, 2, 0.5)
  local per = N // world
  local x, y = X:narrow(1, rank * per + 1, per), Y:narrow(1, rank * per + 1, per)
  for _ = from, to do
    o:zero_grad()
    backward(zorch.mse_loss(m(x), y))
    o:step()
    if sched then sched:step() end
  end
end

if mode == "plain" then
  local m, o = model_and_opt()
  train(m, o, function(l) l:backward() end, 1, steps, 0, 1)
  zorch.save(m:state_dict(), out)
  return
end

local stage = math.tointeger(tonumber(mode:match("%d$")))
local engine = zorch.Engine{zero_stage = stage, reduce_bucket_size = 16}
local m, o = model_and_opt()
m, _, o = engine:prepare(m, nil, o)
local back = function(l) engine:backward(l) end
if mode:match("^stage") then
  train(m, o, back, 1, steps, engine.rank, engine.world_size)
else -- resume: 3 steps, a checkpoint, the rest from it with options that must be overwritten
  local dir = out .. ".ckpt"
  train(m, o, back, 1, 3, engine.rank, engine.world_size)
  engine:save_checkpoint(dir)
  engine = zorch.Engine{zero_stage = stage, reduce_bucket_size = 16}
  m, o = model_and_opt(true)
  m, _, o = engine:prepare(m, nil, o)
  engine:load_checkpoint(dir)
  train(m, o, function(l) engine:backward(l) end, 4, steps, engine.rank, engine.world_size)
end
engine:save(m:state_dict(), out)
