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
local ok, err = pcall(zorch.sum, ga)
tap.ok(not ok and tostring(err):find("no CUDA kernel", 1, true), "an op without a CUDA kernel yet says so: " .. tostring(err))
tap.done()
