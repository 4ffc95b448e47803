-- zorch.nn.shuffle: pixel shuffle, pixel unshuffle and channel shuffle.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, lead_of, lead_shape, need_tensor = M.Module, M.lead_of, M.lead_shape, M.need_tensor
local pos_int, shape_str = M.pos_int, M.shape_str

-- pixel_shuffle(x, r): (*, C r^2, H, W) to (*, C, H r, W r)
function zorch.pixel_shuffle(x, r)
  need_tensor("pixel_shuffle", "input", x)
  pos_int("pixel_shuffle", "upscale_factor", r, 2)
  local n = x:dim()
  if n < 3 or r > (1 << 31) or x.shape[n - 2] % (r * r) ~= 0 then
    error(("pixel_shuffle: expected input (*, C * %s, H, W) (channels divisible by upscale_factor^2), got %s"):format(
      r <= (1 << 31) and tostring(r * r) or r .. "^2", shape_str(x)), 2)
  end
  local c, h, w = x.shape[n - 2] // (r * r), x.shape[n - 1], x.shape[n]
  local y = x:reshape({lead_of(x, 3), c, r, r, h, w}):permute(1, 2, 5, 3, 6, 4)
  return y:reshape(lead_shape(x, 3, {c, h * r, w * r}))
end

-- pixel_unshuffle(x, r): (*, C, H r, W r) to (*, C r^2, H, W)
function zorch.pixel_unshuffle(x, r)
  need_tensor("pixel_unshuffle", "input", x)
  pos_int("pixel_unshuffle", "downscale_factor", r, 2)
  local n = x:dim()
  if n < 3 or r > (1 << 31) or x.shape[n - 1] % r ~= 0 or x.shape[n] % r ~= 0 then
    error(("pixel_unshuffle: expected input (*, C, H * %d, W * %d), got %s"):format(r, r, shape_str(x)), 2)
  end
  local c, h, w = x.shape[n - 2], x.shape[n - 1] // r, x.shape[n] // r
  local y = x:reshape({lead_of(x, 3), c, h, r, w, r}):permute(1, 2, 4, 6, 3, 5)
  return y:reshape(lead_shape(x, 3, {c * r * r, h, w}))
end

-- channel_shuffle(x, groups): (N, C, *) with C read as (groups, C / groups), transposed
function zorch.channel_shuffle(x, g)
  need_tensor("channel_shuffle", "input", x)
  pos_int("channel_shuffle", "groups", g, 2)
  if x:dim() < 3 or x.shape[2] % g ~= 0 then
    error(("channel_shuffle: expected input (N, C, *) with %d groups dividing C, got %s"):format(g, shape_str(x)), 2)
  end
  local s = {x.shape[1], g, x.shape[2] // g}
  for i = 3, x:dim() do s[#s + 1] = x.shape[i] end
  return x:reshape(s):transpose(2, 3):reshape(x.shape)
end

local function scale_class(name, fn, field)
  local cls = Module:extend(name)
  function cls:init(v)
    pos_int(name, field, v, 3)
    self[field] = v
  end
  function cls:forward(x) return fn(x, self[field]) end
  cls.__tostring = function(s) return ("%s(%s=%d)"):format(name, field, s[field]) end
  return cls
end
nn.PixelShuffle = scale_class("nn.PixelShuffle", zorch.pixel_shuffle, "upscale_factor")
nn.PixelUnshuffle = scale_class("nn.PixelUnshuffle", zorch.pixel_unshuffle, "downscale_factor")
nn.ChannelShuffle = scale_class("nn.ChannelShuffle", zorch.channel_shuffle, "groups")
