-- The CUDA backend against the CPU: the same inputs (and the same random
-- streams) give the same results within each dtype's tolerance. Without a GPU
-- it says so and skips.
package.path = "../lua/?.lua;lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

if not zorch.cuda_available() then
  print("1..0 # SKIP no CUDA device (a CPU-only build, or no GPU on this machine)")
  os.exit(0)
end

local function same(cpu, gpu, tol, desc)
  local g = gpu:to("cpu")
  local d = ((g:to("float64") - cpu:to("float64")):abs():max():item())
  tap.ok(d <= tol, ("%s (max difference %.3g)"):format(desc, d))
end

zorch.manual_seed(3)
local a, b = zorch.randn(257, 129), zorch.randn(129)
local ga, gb = a:to("cuda"), b:to("cuda")
same(a, ga, 0, "copies to the GPU and back")
for _, name in ipairs({"neg", "exp", "tanh", "sigmoid", "relu", "gelu", "abs"}) do
  same(zorch[name](a), zorch[name](ga), 1e-5, name)
end
same(a + b, ga + gb, 1e-6, "broadcast add")
same(a * b, ga * gb, 1e-6, "broadcast mul")
same(a:t():contiguous(), ga:t():contiguous(), 0, "strided copy")
local w = zorch.randn(64, 129)
same(zorch.matmul(a, w:t()), zorch.matmul(ga, w:to("cuda"):t()), 1e-3, "matmul through cuBLAS")
same(a:to("bfloat16"), ga:to("bfloat16"), 0, "bfloat16 conversion")
zorch.manual_seed(9)
local r1 = zorch.randn(1000)
zorch.manual_seed(9)
local r2 = zorch.randn(1000, {device = "cuda"})
same(r1, r2, 1e-6, "the same random stream on both devices")
same(a:sum(1), ga:sum(1), 1e-4, "sum over a dim")
same(a:max(2), ga:max(2), 0, "max over a dim")
same(zorch.softmax(a, 2), zorch.softmax(ga, 2), 1e-6, "softmax")
same(zorch.log_softmax(a, 1), zorch.log_softmax(ga, 1), 1e-5, "log_softmax")
local t = zorch.tensor({1, 5, 3, 2})
same(zorch.cross_entropy(a:narrow(1, 1, 4), t), zorch.cross_entropy(ga:narrow(1, 1, 4), t:to("cuda")), 1e-5, "cross_entropy")
same(zorch.layer_norm(a, 1), zorch.layer_norm(ga, 1), 1e-5, "layer_norm")
same(zorch.index_select(a, 1, t), zorch.index_select(ga, 1, t:to("cuda")), 0, "index_select")
same(zorch.where(a:gt(0), a, b), zorch.where(ga:gt(0), ga, gb), 0, "where")

-- the reference model trains the same on both devices
local function train(device)
  zorch.manual_seed(5)
  local model = zorch.nn.Sequential(zorch.nn.Linear(10, 20), zorch.nn.ReLU(), zorch.nn.Linear(20, 2))
  local X, Y = zorch.randn(256, 10), zorch.randn(256, 2)
  local params = model:parameters()
  if device == "cuda" then
    for _, p in ipairs(params) do
      local g = p:detach():to("cuda"):requires_grad_()
      -- move each parameter into the module, by name
      for name, q in model:named_parameters() do
        if q == p then
          local mod, field = name:match("^(.*)%.(%w+)$")
          rawset(model[mod], field, g)
        end
      end
    end
    X, Y = X:to("cuda"), Y:to("cuda")
  end
  local opt = zorch.optim.Adam(model:parameters(), {lr = 0.01})
  for s = 0, 7 do
    local x, y = X:narrow(1, s * 32 + 1, 32), Y:narrow(1, s * 32 + 1, 32)
    local loss = zorch.mse_loss(model(x), y)
    opt:zero_grad(); loss:backward(); opt:step()
  end
  return model:state_dict()["2.weight"]:to("cpu")
end
same(train("cpu"), train("cuda"), 1e-4, "SimpleNet, 8 Adam steps: the GPU matches the CPU")
local ok, err = pcall(function() return zorch.ones(4, {device = "cuda"}) + zorch.ones(4) end)
tap.ok(not ok and tostring(err):find("different devices", 1, true), "mixing devices is an error naming them")
local m1 = zorch.cuda_memory_stats()
for _ = 1, 100 do local t2 = zorch.ones(1000, {device = "cuda"}) + 1 end
collectgarbage()
local m2 = zorch.cuda_memory_stats()
tap.ok(m2.cached + m2.in_use <= m1.cached + m1.in_use + 64 * 1024, "the caching allocator reuses blocks")
local big, berr = pcall(zorch.zeros, 1 << 40, {device = "cuda"})
tap.ok(not big and tostring(berr):find("out of memory", 1, true), "a GPU out-of-memory is a Lua error saying how much: " .. tostring(berr))
tap.done()
