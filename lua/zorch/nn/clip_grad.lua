-- zorch.nn.clip_grad: nn.utils.clip_grad_norm_.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn

-- nn.utils.clip_grad_norm_(params, max_norm, norm_type = 2): scales the
-- parameters' .grad so that their global norm is at most max_norm (PyTorch's
-- factor max_norm / (norm + 1e-6), applied only below 1, so 0 zeroes them); returns the norm
-- before clipping. norm_type 2 (the squares summed in float64 on each gradient's
-- device) or math.huge (the largest |g|).
nn.utils = nn.utils or {}
function nn.utils.clip_grad_norm_(params, max_norm, norm_type)
  local fn = "nn.utils.clip_grad_norm_"
  if zorch.is_tensor(params) then params = {params} end
  if type(params) ~= "table" then error(("%s: argument 1 must be a tensor or a list of tensors, got %s"):format(fn, type(params)), 2) end
  if type(max_norm) ~= "number" or not (max_norm >= 0) then
    error(("%s: max_norm must be a number >= 0, got %s"):format(fn, tostring(max_norm)), 2)
  end
  norm_type = norm_type or 2
  if norm_type ~= 2 and norm_type ~= math.huge then
    error(("%s: norm_type must be 2 or math.huge, got %s"):format(fn, tostring(norm_type)), 2)
  end
  local grads = {}
  for i, p in ipairs(params) do
    if not zorch.is_tensor(p) then error(("%s: parameter %d is a %s, not a tensor"):format(fn, i, type(p)), 2) end
    if p.grad then grads[#grads + 1] = p.grad end
  end
  local norm = 0
  if norm_type == 2 then
    -- each gradient's squares summed in float64 where it lives, one sum per
    -- device; one read back per device
    local sums, order = {}, {}
    zorch.no_grad(function()
      for _, g in ipairs(grads) do
        local d, dev = g:double(), g:device()
        local s = (d * d):sum()
        if sums[dev] then sums[dev] = sums[dev] + s else sums[dev], order[#order + 1] = s, dev end
      end
    end)
    for _, dev in ipairs(order) do norm = norm + sums[dev]:item() end
    norm = math.sqrt(norm)
  else
    for _, g in ipairs(grads) do
      if g:numel() > 0 then norm = math.max(norm, g:abs():max():item()) end
    end
  end
  local coef = max_norm / (norm + 1e-6)
  if coef < 1 then
    zorch.no_grad(function() for _, g in ipairs(grads) do g:copy_(g * coef) end end)
  end
  return norm
end
