-- A small model for examples/embed/host.c: predict(x) maps (n, 4) to (n, 2).
-- The VM is sandboxed: zorch is the only module, and there is no io or os.
local zorch = require "zorch"
local nn = zorch.nn

zorch.manual_seed(42)
local net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
net:eval()

function predict(x)
  return zorch.no_grad(function() return net(x) end)
end
