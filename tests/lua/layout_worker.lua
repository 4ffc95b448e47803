-- A model cut by hand into pipeline stages and tensor slices, for the
-- checkpoint tests of test_tensor_parallel.lua:
--   zorch launch -n N layout_worker.lua T P FROM TO DIR [RESUME]
-- The model is nn.Sequential(Linear(6, 8), Linear(8, 4)) made from one seed;
-- with P = 2 stage 0 holds "0.*" and stage 1 "1.*" (their names in the whole
-- model); with T > 1 layer 0 is column-parallel and layer 1 row-parallel. The
-- loss is a weighted sum of squares of each rank's parameters, so every
-- layout gets the gradients of the whole model, element by element (a
-- replicated bias: on each of its copies). AdamW with clipping at a norm the
-- gradients exceed, ZeRO stage 1 over the data ranks. Steps FROM..TO, then a
-- checkpoint in DIR (steps before FROM come from RESUME, a checkpoint).
local zorch = require "zorch"
local nn, dist = zorch.nn, zorch.dist
local T, P = math.tointeger(tonumber(arg[1])), math.tointeger(tonumber(arg[2]))
local from, to, dir, resume = math.tointeger(tonumber(arg[3])), math.tointeger(tonumber(arg[4])), arg[5], arg[6]

local L = dist.layout{tensor = T, pipeline = P}
zorch.manual_seed(42)
local full = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 4))
local layers = {full["0"], full["1"]}
if T > 1 then
  layers[1] = nn.ColumnParallelLinear.from(layers[1], {group = L.tensor})
  layers[2] = nn.RowParallelLinear.from(layers[2], {group = L.tensor})
end
local model = nn.Module:extend("Stage")()
for i = 1, 2 do
  if P == 1 or L.coords.pipeline == i - 1 then model[tostring(i - 1)] = layers[i] end
end

local engine = zorch.Engine{layout = L, zero_stage = 1, gradient_clipping = 0.5}
local opt = zorch.optim.AdamW(model:parameters(), {lr = 0.05, weight_decay = 0.1})
model, _, opt = engine:prepare(model, nil, opt)
if resume then engine:load_checkpoint(resume) end

-- sum over parameters of (0.5 + 0.1 k) p^2 + sin(k) p, k the element's index in the full tensor
-- (the same element gets the same weight on every layout)
local coef = {}
local function coefs(name, p, split)
  local key = name .. "@" .. L.coords.tensor
  if coef[key] then return coef[key] end
  local shape = {}
  for i, d in ipairs(p.shape) do shape[i] = (split and dist.split_spec(split).dim == i) and d * T or d end
  local n = 1
  for _, d in ipairs(shape) do n = n * d end
  local k = zorch.arange(0, n):float():view(shape)
  local a, b = k * 0.1 + 0.5, zorch.sin(k)
  if split then a, b = dist.slice(a, split, T, L.coords.tensor), dist.slice(b, split, T, L.coords.tensor) end
  coef[key] = {a, b}
  return coef[key]
end
local splits = nn.tp_splits(model)
for _ = from, to do
  opt:zero_grad()
  local loss
  for name, p in model:named_parameters() do
    local c = coefs(name, p, splits[name])
    local l = (c[1] * p * p + c[2] * p):sum()
    loss = loss and loss + l or l
  end
  engine:backward(loss)
  opt:step()
end
engine:save_checkpoint(dir)
