-- The small elementwise passes of an MLP step, one at a time: relu, add, a
-- product with a broadcast scalar, the MSE loss with and without its backward,
-- at the shapes of the 1024-4096-1024 MLP at batch 256. Prints one JSON line a
-- case: the best of ROUNDS calls, in ms.
-- zorch bench/ops16.lua [DTYPE] [ROUNDS]   (DTYPE: bf16, f16 or f32; ROUNDS: 30)
local zorch = require "zorch"
local dt, rounds = arg[1] or "bf16", math.tointeger(tonumber(arg[2] or "")) or 30

local function best(f)
  local b = math.huge
  for _ = 1, rounds do
    collectgarbage() -- the last call's tensors go back to the allocator's caches first
    local t0 = zorch.clock()
    f()
    b = math.min(b, zorch.clock() - t0)
  end
  return b * 1e3
end

local x, y = zorch.randn({256, 4096}):to(dt), zorch.randn({256, 4096}):to(dt)
local s = zorch.randn({}):to(dt):expand({256, 4096})
local o, t = zorch.randn({256, 1024}):to(dt), zorch.randn({256, 1024}):to(dt)
local w = o:clone():requires_grad_(true)
local cases = {
  {"relu_256x4096", function() return zorch.relu(x) end},
  {"add_256x4096", function() return x + y end},
  {"mul_broadcast_scalar_256x4096", function() return x * s end},
  {"mse_loss_256x1024", function() return zorch.mse_loss(o, t) end},
  {"mse_loss_256x1024_fwd_bwd", function()
    zorch.mse_loss(w, t):backward()
    w:zero_grad()
  end},
}
for _, c in ipairs(cases) do
  print(string.format('{"name": "%s_%s", "value": %.4f, "unit": "ms"}', c[1], dt, best(c[2])))
end
