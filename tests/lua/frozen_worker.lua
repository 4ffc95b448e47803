-- LoRA through the Engine, for test_frozen.lua: a stack of Linears, frozen,
-- with adapters on two of them, AdamW over the adapters alone.
--   zorch frozen_worker.lua STAGE PRECISION MODE OUT [OFFLOAD]
-- MODE run (6 steps), or resume (3 steps and a checkpoint in OUT.ckpt, then a
-- model built from another seed, so its base weights are wrong, resumes from
-- it and takes 3 more), or regroup (the same from a checkpoint whose first
-- run had the base in the optimizer's group: in the engine's flat pieces). OFFLOAD "cpu": offload_optimizer device cpu. Rank 0
-- writes to OUT: the losses, the memory report and the frozen tensors' dtypes.
local zorch = require "zorch"
local nn = zorch.nn
local stage, precision, mode, out = math.tointeger(tonumber(arg[1])), arg[2], arg[3], arg[4]
local offload = arg[5]

local function build(seed, grouped)
  zorch.manual_seed(seed)
  local m = nn.Sequential(nn.Linear(16, 24), nn.Tanh(), nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 8))
  m:requires_grad_(false)
  zorch.manual_seed(7) -- (the adapters start alike whatever the base)
  nn.lora.apply(m, {r = 4, alpha = 8, target_modules = {"0", "2"}})
  local engine = zorch.Engine{zero_stage = stage, precision = precision, gradient_clipping = 0.5,
                              offload_optimizer = offload and {device = offload} or nil}
  -- grouped: the frozen base in the optimizer's group too (so in the engine's buffer)
  local opt = zorch.optim.AdamW(grouped and m:parameters() or nn.lora.parameters(m), {lr = 0.05, weight_decay = 0.1})
  local model, _, o = engine:prepare(m, nil, opt)
  return model, o, engine
end

zorch.manual_seed(3)
local xs, ys = {}, {}
for i = 1, 6 do xs[i], ys[i] = zorch.randn(5, 16), zorch.randn(5, 8) end
local losses = {}
local function train(model, o, engine, from, to)
  for i = from, to do
    o:zero_grad()
    local loss = ((model(xs[i]):to("float32") - ys[i]) ^ 2):mean()
    engine:backward(loss)
    o:step()
    losses[#losses + 1] = ("%.9g"):format(loss:item())
  end
end

local model, o, engine = build(1, mode == "regroup")
if mode == "run" then
  train(model, o, engine, 1, 6)
else
  train(model, o, engine, 1, 3)
  engine:save_checkpoint(out .. ".ckpt")
  model, o, engine = build(2)
  engine:load_checkpoint(out .. ".ckpt")
  train(model, o, engine, 4, 6)
end
if engine.rank == 0 and zorch.dist.rank() == 0 then
  local r = engine:memory_report()
  local dtypes, base = {}, 0
  for name, p in model:named_parameters() do
    if not p.requires_grad then dtypes[#dtypes + 1] = p:dtype(); base = base + p:numel() end
  end
  local f = assert(io.open(out, "w"))
  f:write("losses ", table.concat(losses, " "), "\n")
  for _, k in ipairs({"numel", "master_weights", "gradients", "parameters", "optimizer_state", "frozen",
                      "frozen_numel"}) do
    f:write(k, " ", tostring(r[k]), "\n")
  end
  f:write("shard ", tostring(engine.zero:memory().shard), "\n")
  f:write("base_numel ", base, "\n")
  f:write("frozen_dtypes ", table.concat(dtypes, " "), "\n")
  f:close()
end
