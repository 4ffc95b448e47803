-- zorch.nn.functional: PyTorch's functional names over zorch's functions, and
-- zorch.split and zorch.chunk.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn

-- zorch.split(x, size | {sizes}, dim = 1) and zorch.chunk(x, n, dim = 1):
-- views along dim (narrow), as PyTorch's: split's pieces of `size` (the last
-- smaller), chunk's of ceil(len / n) (so possibly fewer than n).
function zorch.split(x, sizes, dim)
  if not zorch.is_tensor(x) then error("split: argument 1 must be a tensor, got " .. type(x), 2) end
  dim = dim or 1
  if math.type(dim) ~= "integer" or dim == 0 or dim > x:dim() or dim < -x:dim() then
    error(("split: dim %s out of range for a %d-d tensor"):format(math.type(dim) and tostring(dim) or type(dim), x:dim()), 2)
  end
  if dim < 0 then dim = x:dim() + 1 + dim end
  local len, out, at = x:size(dim), {}, 1
  if type(sizes) == "table" then
    local total = 0
    for i, n in ipairs(sizes) do
      if math.type(n) ~= "integer" or n < 0 then error(("split: size %d must be an integer >= 0"):format(i), 2) end
      total = total + n
    end
    if total ~= len then error(("split: sizes add up to %d, but dim %d has %d"):format(total, dim, len), 2) end
    for i, n in ipairs(sizes) do out[i] = x:narrow(dim, at, n); at = at + n end
    return out
  end
  if math.type(sizes) ~= "integer" or sizes < 1 then
    error("split: size must be an integer >= 1 or a list of sizes, got " .. tostring(sizes), 2)
  end
  while at <= len do
    local n = math.min(sizes, len - at + 1)
    out[#out + 1] = x:narrow(dim, at, n)
    at = at + n
  end
  return out
end
function zorch.chunk(x, n, dim)
  if math.type(n) ~= "integer" or n < 1 then error("chunk: chunks must be an integer >= 1, got " .. tostring(n), 2) end
  if not zorch.is_tensor(x) then error("chunk: argument 1 must be a tensor, got " .. type(x), 2) end
  local d = dim or 1
  if math.type(d) ~= "integer" or d == 0 or d > x:dim() or d < -x:dim() then
    error(("chunk: dim %s out of range for a %d-d tensor"):format(math.type(d) and tostring(d) or type(d), x:dim()), 2)
  end
  local len = x:size(d)
  return zorch.split(x, math.max(1, (len + n - 1) // n), dim)
end

-- nn.functional (`local F = zorch.nn.functional`, as PyTorch scripts write
-- it): PyTorch's functional names are zorch's own functions, so F.relu is
-- zorch.relu and F.cross_entropy zorch.cross_entropy; anything else is nil.
nn.functional = setmetatable({}, {__index = function(_, k)
  local f = zorch[k]
  return type(f) == "function" and f or nil
end, __newindex = function(_, k) error("nn.functional: read-only (set zorch." .. tostring(k) .. " instead)", 2) end})
