-- One run of a case drawn by engine_options.lua:
--   zorch [launch -n N] engine_worker.lua CASE MODE OUT [CKPT]
-- CASE is a Lua file returning the case (model, data, optimizer, configs);
-- MODE is
--   plain   one process, the optimizer alone over the whole global batch
--   engine  the Engine with case.engine, every rank its slice of the batch
--   first   the Engine with case.engine, stopping after case.ckpt.at steps
--           with a checkpoint saved in CKPT
--   resume  the Engine with case.ckpt.engine, loading CKPT and training on
-- Rank 0 writes the weights (float32) to OUT.safetensors and each step's loss
-- (the mean over the global batch and its micro-batches) to OUT.losses; plain
-- writes the initial weights to OUT.init.safetensors too.
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local case_file, mode, out, ckpt = arg[1], arg[2], arg[3], arg[4]
local case = dofile(case_file)

-- The model: layers in order, some weights tied to an earlier layer's, some
-- parameters frozen; every rank draws the same weights from the same seed.
local function build()
  zorch.manual_seed(case.seed)
  local layers = {}
  for i, l in ipairs(case.layers) do
    if l.t == "emb" then layers[i] = nn.Embedding(l.n, l.d)
    elseif l.t == "lin" then layers[i] = nn.Linear(l.i, l.o, {bias = l.bias})
    elseif l.t == "ln" then layers[i] = nn.LayerNorm(l.d)
    elseif l.t == "relu" then layers[i] = nn.ReLU()
    elseif l.t == "same" then layers[i] = layers[l.of] -- (one module, run twice)
    else error("unknown layer " .. tostring(l.t)) end
  end
  local m = nn.Sequential(table.unpack(layers))
  for _, t in ipairs(case.ties or {}) do m[t[2]].weight = m[t[1]].weight end
  if (case.freeze_from or 1) == 1 then
    for _, f in ipairs(case.frozen or {}) do m[f[1]][f[2]].requires_grad = false end
  end
  return m
end

-- The parameters of case.frozen are frozen from step case.freeze_from (1 if
-- not given) to before step case.unfreeze_at (the end if not given).
local function unfreeze(m, step)
  if not case.unfreeze_at and not case.freeze_from then return end
  local frozen = step >= (case.freeze_from or 1) and step < (case.unfreeze_at or math.huge)
  for _, f in ipairs(case.frozen or {}) do m[f[1]][f[2]].requires_grad = not frozen end
end

-- Sample s of micro-batch `micro` of step `step` (both 1-based): its input
-- (ids or features) and its target (a class or features), from closed forms.
local function batch(step, micro, first, count)
  local xs, ys = {}, {}
  local din, dout = case.input, case.out
  for s = first, first + count - 1 do
    if case.ids then
      xs[#xs + 1] = (s * 7 + step * 13 + micro * 5) % case.ids + 1 -- (1-based)
      ys[#ys + 1] = (s * 3 + step * 11 + micro) % dout + 1
    else
      for j = 0, din - 1 do xs[#xs + 1] = math.sin(0.37 * (s * din + j) + 1.3 * step + 0.7 * micro) end
      for j = 0, dout - 1 do ys[#ys + 1] = math.cos(0.23 * (s * dout + j) - 0.9 * step + 0.4 * micro) end
    end
  end
  if case.ids then
    return zorch.tensor(xs, {dtype = "int64"}), zorch.tensor(ys, {dtype = "int64"})
  end
  return zorch.tensor(xs):reshape({count, din}), zorch.tensor(ys):reshape({count, dout})
end

local function loss_of(y, t)
  if case.ids then return zorch.cross_entropy(y:float(), t) end
  return zorch.mse_loss(y:float(), t)
end

-- The optimizer; with case.opt.groups two groups, the parameters taken in
-- turn, the second at half the learning rate and without weight decay.
local function optimizer(m)
  local o = case.opt
  local opts = o.type == "SGD" and {lr = o.lr, momentum = o.momentum, dampening = o.dampening or 0} or
               {lr = o.lr, weight_decay = o.wd}
  if not o.groups then return optim[o.type](m:parameters(), opts) end
  local a, b = {}, {}
  for i, p in ipairs(m:parameters()) do table.insert(i % 2 == 1 and a or b, p) end
  return optim[o.type]({{params = a}, {params = b, lr = o.lr / 2, weight_decay = 0}}, opts)
end

local function weights(m, path)
  local w = {}
  for k, v in pairs(m:state_dict()) do w[k] = v:float() end -- (collective at stage 3)
  if path then zorch.save(w, path) end
end

local function write(m, losses, rank0)
  weights(m, rank0 and out .. ".safetensors")
  if not rank0 then return end
  local f = assert(io.open(out .. ".losses", "w"))
  for s = 1, case.steps do if losses[s] then f:write(("%d %.9g\n"):format(s, losses[s])) end end
  f:close()
end

local G, A = case.global_batch, case.accum
if mode == "plain" then
  local m = build()
  weights(m, out .. ".init.safetensors") -- (the tolerance scales with each tensor's change)
  local o = optimizer(m)
  local losses = {}
  for step = 1, case.steps do
    unfreeze(m, step)
    o:zero_grad()
    local sum = 0
    for micro = 1, A do
      local x, t = batch(step, micro, 0, G)
      local loss = loss_of(m(x), t)
      sum = sum + loss:item()
      if A > 1 then loss = loss * (1 / A) end
      loss:backward()
    end
    if case.clip > 0 then nn.utils.clip_grad_norm_(m:parameters(), case.clip) end
    o:step()
    losses[step] = sum / A
  end
  write(m, losses, true)
  return
end

-- The Engine: its table, or a DeepSpeed file with the keys zorch reads but
-- ignores (contiguous_gradients, reduce_scatter, allgather_bucket_size)
local cfg = mode == "resume" and case.ckpt.engine or case.engine
local engine
if cfg.json then
  local path = ("%s.%d.ds.json"):format(out, zorch.dist.rank()) -- (a file a rank: none reads one half written)
  local f = assert(io.open(path, "w"))
  f:write(cfg.json)
  f:close()
  engine = zorch.Engine(path, cfg.table)
else
  engine = zorch.Engine(cfg.table)
end
local model = build()
local m, _, o = engine:prepare(model, nil, optimizer(model))
local R, N = engine.rank, engine.world_size
if G % N ~= 0 then error(("engine_worker: a global batch of %d does not split over %d ranks"):format(G, N)) end
local per = G // N
local first_step = 1
if mode == "resume" then
  engine:load_checkpoint(ckpt)
  first_step = engine.steps + 1
end
local last = mode == "first" and case.ckpt.at or case.steps
local losses = {}
for step = first_step, last do
  unfreeze(m, step)
  local sum = 0
  for micro = 1, A do
    local x, t = batch(step, micro, R * per, per)
    local loss = loss_of(m(x), t)
    sum = sum + loss:item()
    o:zero_grad()
    engine:backward(loss)
    o:step()
  end
  losses[step] = engine:mean(sum / A)
end
if engine.steps ~= last then
  error(("engine_worker: the engine counts %d steps, %d were run"):format(engine.steps, last))
end
if mode == "first" then engine:save_checkpoint(ckpt) end
write(m, losses, R == 0)
