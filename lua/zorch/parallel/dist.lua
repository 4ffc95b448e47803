-- dist.lua: zorch.dist, process groups and the data x pipeline x tensor layout.
-- A group (zorch.Group, lua/ldist.c) is a set of ranks with its own
-- communicator; its collectives and point-to-point exchanges run over MPI for
-- CPU tensors and NCCL for cuda ones, like the engine's.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local dist = {}

-- The group of every rank.
function dist.world() return zorch._group_world() end
function dist.rank() return dist.world():rank() end
function dist.size() return dist.world():size() end
function dist.barrier() return dist.world():barrier() end

local function positive(fn, name, v)
  if v ~= nil and not (math.type(v) == "integer" and v >= 1) then
    error(("%s: %s must be an integer >= 1, got %s"):format(fn, name, zorch._readable(v)), 3)
  end
end

-- dist.layout{tensor = T, pipeline = P, data = D}: splits the world into
-- T x P x D ranks (D defaults to what is left). Rank r sits at
--   tensor coordinate   r % T
--   data coordinate     (r // T) % D
--   pipeline coordinate r // (T * D)
-- so the T ranks of a tensor group are consecutive (one machine, where
-- launchers place consecutive ranks), then the data replicas, then the
-- pipeline stages. Every rank must call it with the same arguments (it is
-- collective). Returns {world, tensor, data, pipeline, model (the ranks of one
-- model replica: every stage and shard with this data coordinate), coords =
-- {tensor, data, pipeline}, sizes = {tensor, data, pipeline}}.
function dist.layout(opts)
  opts = opts or {}
  if type(opts) ~= "table" then error("dist.layout: expected a table {tensor = T, pipeline = P, data = D}", 2) end
  for k in pairs(opts) do
    if k ~= "tensor" and k ~= "pipeline" and k ~= "data" then
      error(("dist.layout: unknown key '%s' (allowed: data, pipeline, tensor)"):format(tostring(k)), 2)
    end
  end
  positive("dist.layout", "tensor", opts.tensor)
  positive("dist.layout", "pipeline", opts.pipeline)
  positive("dist.layout", "data", opts.data)
  local world = dist.world()
  local n, T, P = world:size(), opts.tensor or 1, opts.pipeline or 1
  local D = opts.data or n // (T * P)
  if T * P * D ~= n then
    error(("dist.layout: tensor %d x pipeline %d x data %d = %d ranks, but the world has %d"):format(
      T, P, D, T * P * D, n), 2)
  end
  local r = world:rank()
  local t, d, p = r % T, (r // T) % D, r // (T * D)
  local L = {world = world, sizes = {tensor = T, data = D, pipeline = P},
             coords = {tensor = t, data = d, pipeline = p}}
  -- one split per kind, in the same order on every rank (splits are collective)
  L.tensor = world:split(p * D + d, t)
  L.data = world:split(p * T + t, d)
  L.pipeline = world:split(d * T + t, p)
  L.model = world:split(d, p * T + t)
  return setmetatable(L, {__tostring = function(l)
    return ("zorch.dist.layout(tensor %d x pipeline %d x data %d; rank %d at tensor %d, pipeline %d, data %d)"):format(
      T, P, D, r, t, p, d)
  end})
end

-- The rank at given coordinates of a layout's sizes (the inverse of the map above).
function dist.rank_of(sizes, coords)
  return (coords.pipeline * sizes.data + coords.data) * sizes.tensor + coords.tensor
end

zorch.dist = dist
return dist
