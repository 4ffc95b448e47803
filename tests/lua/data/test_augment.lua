-- Image batch augmentation (random crop with padding, horizontal flip) and
-- normalisation, alone and through the DataLoader's options.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local data = zorch.data

local n, H, W = 32, 5, 6
local x = zorch.rand(n, 1, H, W) + 1 -- no zeros, so padding shows
local function same(a, b) return (a - b):abs():max():item() == 0 end

tap.ok(same(data.augment(x, {}), x), "no options: the batch as it is")

-- flips: every image is itself or its mirror, and both happen
zorch.manual_seed(5)
local f = data.augment(x, {hflip = true})
local mirror = zorch.index_select(x, 4, zorch.arange(W, 0, -1, {dtype = "int64"}))
local kept, flipped = 0, 0
for i = 1, n do
  if same(f[i], x[i]) then kept = kept + 1 elseif same(f[i], mirror[i]) then flipped = flipped + 1 end
end
tap.ok(kept + flipped == n and kept > 4 and flipped > 4, ("flips: %d kept, %d mirrored, none else"):format(kept, flipped))

-- crops: each image is the original shifted by (dy, dx) within the padding, zero-filled
local p = 2
zorch.manual_seed(6)
local c = data.augment(x, {crop_padding = p})
local function shifted(img, dy, dx)
  local out = zorch.zeros_like(img)
  for r = 1, H do
    for col = 1, W do
      local sr, sc = r + dy, col + dx
      if sr >= 1 and sr <= H and sc >= 1 and sc <= W then out[1][r][col] = img[1][sr][col + dx]:item() end
    end
  end
  return out
end
local all_match, shifts = true, {}
for i = 1, n do
  local found
  for dy = -p, p do
    for dx = -p, p do
      if not found and same(c[i], shifted(x[i], dy, dx)) then found = dy .. "," .. dx end
    end
  end
  all_match = all_match and found ~= nil
  if found then shifts[found] = true end
end
local kinds = 0
for _ in pairs(shifts) do kinds = kinds + 1 end
tap.ok(all_match, "every crop is the image shifted within the padding, zero-filled")
tap.ok(kinds > 5, ("the shifts vary (%d different ones in %d images)"):format(kinds, n))

-- seeded: the same seed gives the same batch
zorch.manual_seed(6)
tap.ok(same(data.augment(x, {crop_padding = p}), c), "zorch.manual_seed repeats the augmentation")
tap.ok(data.augment(zorch.rand(4, H, W), {crop_padding = 1, hflip = true}).shape[2] == H, "(N, H, W) batches too")

-- normalisation: numbers or one value per channel
local img = zorch.rand(8, 3, 4, 4)
local z = data.normalize(img, {0.1, 0.2, 0.3}, {2, 4, 8})
tap.close(z[3][2], (img[3][2] - 0.2) / 4, 1e-6, "per-channel mean and std")
tap.close(data.normalize(img, 0.5, 0.25), (img - 0.5) / 0.25, 1e-6, "one mean and std")
tap.ok(data.normalize(zorch.ones(2, 1, 2, 2, {dtype = "uint8"}), 0, 1):dtype() == "float32", "uint8 images become float32")
tap.raises("a mean list of the wrong length", function() data.normalize(img, {1, 2}, 1) end, "data.normalize", "3")
tap.raises("an unknown augment option", function() data.augment(x, {rotate = 1}) end, "unknown augment option 'rotate'")
tap.raises("a negative padding", function() data.augment(x, {crop_padding = -1}) end, "crop_padding")
tap.raises("not images", function() data.augment(zorch.ones(3, 4), {}) end, "data.augment", "(N, H, W)")

-- through the loader: augmented, then normalised; labels untouched
local y = zorch.arange(1, n + 1)
local loader = data.DataLoader(data.TensorDataset(x, y), {batch_size = 8, augment = {crop_padding = 1, hflip = true},
                                                          normalize = {mean = 1, std = 2}})
local bx, by = loader:iter()()
tap.ok(bx.shape[1] == 8 and same(by, y:narrow(1, 1, 8)), "the loader's batches keep their labels")
tap.ok(bx:min():item() >= -0.5 - 1e-6, "and are normalised after the padding ((0 - 1) / 2 at the least)")
tap.raises("the loader checks augment", function() data.DataLoader(data.TensorDataset(x), {augment = 3}) end,
           "DataLoader", "augment")
tap.done()
