-- The reference job against PyTorch: models/simple_net.lua from PyTorch's initial
-- weights and data, 200 Adam steps with clipping, must land on PyTorch's final
-- weights (tests/golden/gen_simplenet.py) to 1e-5 relative.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
local out = os.tmpname()
local cmd = ("%s ../models/simple_net.lua --load golden/simplenet_init.safetensors " ..
             "--data golden/simplenet_data.safetensors --no-shuffle --steps 200 --lr 0.01 --clip 1.0 " ..
             "--save %s --quiet > /dev/null"):format(bin, out)
tap.ok(os.execute(cmd), "simple_net.lua trains 200 steps from PyTorch's start")
local got, want = zorch.load(out), zorch.load("golden/simplenet_final.safetensors")
local init = zorch.load("golden/simplenet_init.safetensors")
for _, k in ipairs({"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"}) do
  tap.ok(got[k] ~= nil, k .. " saved under PyTorch's name")
  if got[k] then
    tap.close(got[k], want[k], 1e-5, k .. " matches PyTorch after 200 steps")
    local moved = (want[k] - init[k]):abs():max():item()
    tap.ok(moved > 1e-2, ("%s moved during training (%.3g), so the comparison means something"):format(k, moved))
  end
end
os.remove(out)
tap.done()
