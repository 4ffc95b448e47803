-- zorch.nn.flatten: Flatten and Unflatten.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_dim, list_str, shape_str = M.Module, M.check_dim, M.list_str, M.shape_str

-- Flattens dims start_dim..end_dim into one (defaults 2 and -1: all but the batch dim).
nn.Flatten = Module:extend "nn.Flatten"
function nn.Flatten:init(start_dim, end_dim)
  start_dim, end_dim = start_dim or 2, end_dim or -1
  check_dim("nn.Flatten", "start_dim", start_dim)
  check_dim("nn.Flatten", "end_dim", end_dim)
  self.start_dim, self.end_dim = start_dim, end_dim
end
function nn.Flatten:forward(x)
  if not zorch.is_tensor(x) then error(("nn.Flatten: expected a tensor, got %s"):format(type(x)), 2) end
  local n = x:dim()
  local s = self.start_dim < 0 and n + 1 + self.start_dim or self.start_dim
  local e = self.end_dim < 0 and n + 1 + self.end_dim or self.end_dim
  if s < 1 or e > n or s > e then
    error(("nn.Flatten: start_dim %d and end_dim %d do not fit an input of shape %s"):format(
      self.start_dim, self.end_dim, shape_str(x)), 2)
  end
  local shape, m = {}, 1
  for d = 1, s - 1 do shape[#shape + 1] = x.shape[d] end
  for d = s, e do m = m * x.shape[d] end
  shape[#shape + 1] = m
  for d = e + 1, n do shape[#shape + 1] = x.shape[d] end
  return x:reshape(shape)
end
nn.Flatten.__tostring = function(s)
  return ("nn.Flatten(start_dim=%d, end_dim=%d)"):format(s.start_dim, s.end_dim)
end

-- Unflatten(dim, sizes): dim becomes the dims `sizes` (one of them may be -1)
nn.Unflatten = Module:extend "nn.Unflatten"
function nn.Unflatten:init(dim, sizes)
  check_dim("nn.Unflatten", "dim", dim)
  local good = type(sizes) == "table" and #sizes > 0
  local free = 0
  for _, s in ipairs(type(sizes) == "table" and sizes or {}) do
    good = good and math.type(s) == "integer" and (s >= 0 or s == -1)
    if s == -1 then free = free + 1 end
  end
  if not good or free > 1 then
    error(("nn.Unflatten: sizes must be a list of integers >= 0 (one of them may be -1), got %s"):format(
      type(sizes) == "table" and "{" .. list_str(sizes) .. "}" or tostring(sizes)), 3)
  end
  self.dim, self.sizes = dim, sizes
end
function nn.Unflatten:forward(x)
  if not zorch.is_tensor(x) then error(("nn.Unflatten: expected a tensor, got %s"):format(type(x)), 2) end
  local n = x:dim()
  local d = self.dim < 0 and n + 1 + self.dim or self.dim
  if d < 1 or d > n then error(("nn.Unflatten: dim %d out of range for input %s"):format(self.dim, shape_str(x)), 2) end
  local known, len = 1, x.shape[d]
  for _, s in ipairs(self.sizes) do if s ~= -1 then known = known * s end end
  local sizes = {}
  for i, s in ipairs(self.sizes) do sizes[i] = s == -1 and (known > 0 and len // known or 0) or s end
  local prod = 1
  for _, s in ipairs(sizes) do prod = prod * s end
  if prod ~= len then
    error(("nn.Unflatten: sizes {%s} do not multiply to %d, the size of dim %d of input %s"):format(
      table.concat(self.sizes, ", "), len, self.dim, shape_str(x)), 2)
  end
  local shape = {}
  for i = 1, d - 1 do shape[#shape + 1] = x.shape[i] end
  for _, s in ipairs(sizes) do shape[#shape + 1] = s end
  for i = d + 1, n do shape[#shape + 1] = x.shape[i] end
  return x:reshape(shape)
end
