-- Activation checkpointing: zorch.checkpoint and nn.Checkpoint give the losses
-- and gradients of the plain model (dropout included, its mask replayed), hold
-- less host memory over a long chain, and pass errors of the recompute to the
-- caller of backward.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn

local function equal(a, b) return (a - b):abs():max():item() == 0 end

local function block(d)
  return nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Dropout(0.2))
end

local function make(d, n, wrap)
  zorch.manual_seed(7)
  local blocks = {}
  for i = 1, n do
    local b = block(d)
    blocks[i] = wrap and nn.Checkpoint(b) or b
  end
  return nn.Sequential(table.unpack(blocks)), nn.Linear(d, 1)
end

local function run(wrap)
  local body, head = make(8, 3, wrap)
  zorch.manual_seed(11)
  local x = zorch.randn({16, 8})
  local y = zorch.randn({16, 1})
  local losses = {}
  for step = 1, 3 do
    local loss = zorch.mse_loss(head(body(x)), y)
    loss:backward()
    losses[step] = loss:item()
  end
  local grads = {}
  for _, p in ipairs(body:parameters()) do grads[#grads + 1] = p.grad end
  for _, p in ipairs(head:parameters()) do grads[#grads + 1] = p.grad end
  return losses, grads, zorch.rand({1}):item()
end

local l0, g0, off0 = run(false)
local l1, g1, off1 = run(true)
local same = #g0 == #g1 and #g0 == 8
for i = 1, 3 do same = same and l0[i] == l1[i] end
tap.ok(same, "the same losses, bit for bit, with nn.Checkpoint around each Linear/ReLU/Dropout block")
local gsame = #g0 == #g1
for i = 1, #g0 do gsame = gsame and g1[i] ~= nil and equal(g0[i], g1[i]) end
tap.ok(gsame, "the same accumulated gradients of every parameter (dropout's mask replayed)")
tap.ok(off0 == off1, "the generator ends where it would have without checkpointing (the next draw is the same)")

-- gradient into a checkpointed function's input, and a plain function
do
  zorch.manual_seed(3)
  local w = zorch.randn({5, 5}, {requires_grad = true})
  local x = zorch.randn({4, 5}, {requires_grad = true})
  local function f(a, scale) return zorch.tanh(zorch.matmul(a, w)) * scale end
  local y = zorch.checkpoint(f, x, 2.5)
  y:sum():backward()
  local gx, gw = x.grad, w.grad
  x.grad, w.grad = nil, nil
  f(x, 2.5):sum():backward()
  tap.ok(equal(gx, x.grad) and equal(gw, w.grad), "input and weight gradients match the plain run")
end

-- nested checkpoints, and a retained graph run backward twice
do
  zorch.manual_seed(6)
  local w1 = zorch.randn({4, 4}, {requires_grad = true})
  local w2 = zorch.randn({4, 4}, {requires_grad = true})
  local x = zorch.randn({3, 4}, {requires_grad = true})
  local function inner(a) return zorch.relu(zorch.matmul(a, w2)) end
  local function outer(a) return zorch.checkpoint(inner, zorch.tanh(zorch.matmul(a, w1))) end
  zorch.checkpoint(outer, x):sum():backward()
  local g1, g2, gx = w1.grad, w2.grad, x.grad
  w1.grad, w2.grad, x.grad = nil, nil, nil
  inner(zorch.tanh(zorch.matmul(x, w1))):sum():backward()
  tap.ok(equal(g1, w1.grad) and equal(g2, w2.grad) and equal(gx, x.grad), "a checkpoint inside a checkpoint gives the plain gradients")
  w1.grad, w2.grad, x.grad = nil, nil, nil
  local y = zorch.checkpoint(outer, x):sum()
  y:backward(nil, true)
  y:backward()
  tap.ok(equal(w1.grad, g1 * 2) and equal(x.grad, gx * 2), "with retain_graph a second backward recomputes again and accumulates")
end

-- under no_grad, checkpoint is a plain call
do
  local w = zorch.ones({2}, {requires_grad = true})
  local y = zorch.no_grad(function() return zorch.checkpoint(function(a) return a * w end, zorch.ones({2})) end)
  tap.ok(not y.requires_grad, "under no_grad the result records nothing")
end

-- errors: bad arguments, bad results, and an error in the recompute reaches backward's caller
tap.raises("fn must be callable", function() zorch.checkpoint(42) end, "zorch.checkpoint", "argument 1")
tap.raises("fn must return a tensor", function()
  zorch.checkpoint(function() return 1 end, zorch.ones({1}, {requires_grad = true}))
end, "zorch.checkpoint", "one tensor")
do
  local calls = 0
  local x = zorch.ones({3}, {requires_grad = true})
  local y = zorch.checkpoint(function(a)
    calls = calls + 1
    if calls > 1 then error("boom in the recompute") end
    return a * 2
  end, x)
  local ok, err = pcall(function() y:sum():backward() end)
  tap.ok(not ok and tostring(err):find("boom in the recompute", 1, true) ~= nil,
         "an error in the recompute is backward's error: " .. tostring(err))
  tap.ok(zorch.is_grad_enabled(), "grad mode is back on after the failed backward")
  local ok2, err2 = pcall(function() y:sum():backward() end)
  tap.ok(not ok2, "a second backward through the released node fails cleanly: " .. tostring(err2))
end

-- memory: a long chain holds its 64 activations without checkpointing, about
-- 8 segments' worth with it
local function peak(wrap)
  local d, n, seg = 256, 64, 8
  zorch.manual_seed(5)
  local layers = {}
  for i = 1, n do layers[i] = nn.Linear(d, d) end
  local x = zorch.randn({512, d})
  collectgarbage()
  local function run_layers(a, b, h)
    for i = a, b do h = zorch.relu(layers[i](h)) end
    return h
  end
  zorch.reset_peak_host_memory()
  local base = zorch.host_memory().in_use
  local h = x
  for s = 1, n, seg do
    if wrap then
      h = zorch.checkpoint(run_layers, s, s + seg - 1, h)
    else
      h = run_layers(s, s + seg - 1, h)
    end
  end
  h:sum():backward()
  local p = zorch.host_memory().peak - base
  local gsum = layers[1].weight.grad:sum():item()
  for i = 1, n do layers[i].weight.grad, layers[i].bias.grad = nil, nil end
  h = nil
  collectgarbage()
  return p, gsum
end
collectgarbage("incremental", 50, 200) -- collect temporaries promptly: the peak counts live tensors
local p_plain, g_plain = peak(false)
local p_ckpt, g_ckpt = peak(true)
print(("# peak host bytes above the start: plain %d, checkpointed %d"):format(p_plain, p_ckpt))
tap.ok(g_plain == g_ckpt, "the first layer's gradient is the same through 8 checkpointed segments")
tap.ok(p_ckpt * 2 < p_plain, "peak host memory of the 64-layer chain falls by more than half with checkpointing")

-- engine:checkpoint with cpu_checkpointing (the saved inputs wait on the host;
-- on a CPU rank they are there already): the same gradients
do
  local e = zorch.Engine{cpu_checkpointing = true}
  zorch.manual_seed(9)
  local m = nn.Linear(6, 6)
  local x = zorch.randn({3, 6}, {requires_grad = true})
  e:checkpoint(m, x):pow(2):sum():backward()
  local gx, gw = x.grad, m.weight.grad
  x.grad, m.weight.grad = nil, nil
  m(x):pow(2):sum():backward()
  tap.ok(equal(gx, x.grad) and equal(gw, m.weight.grad), "engine:checkpoint gives the plain gradients")
end

-- the reference job under the ZeRO engine: --checkpoint-activations saves the
-- same bytes at stages 1-3 on 1 and 2 ranks
local bin = tap.zorch()
if tap.has_mpi(bin) then
  local tmp = tap.tmpdir()
  local common = "--steps 6 --accum 2 --seed 5 --samples 240 --bucket 64 --quiet"
  local function bytes(path)
    local f = io.open(path, "rb")
    if not f then return nil end
    local b = f:read("a")
    f:close()
    return b
  end
  for stage = 1, 3 do
    for n = 1, 2 do
      local files = {}
      for _, flag in ipairs({"", "--checkpoint-activations"}) do
        local out = ("%s/s%d_n%d%s.safetensors"):format(tmp, stage, n, flag == "" and "" or "_ckpt")
        local text, good = tap.run(("%s launch -n %d ../models/simple_net.lua %s --zero-stage %d --batch-size %d %s --save %s"):format(
          bin, n, common, stage, 24 // n, flag, out))
        if not good then print("# " .. text:gsub("\n", "\n# ")) end
        files[#files + 1] = bytes(out)
      end
      tap.ok(files[1] and files[1] == files[2],
             ("stage %d, %d rank(s): --checkpoint-activations saves the same weights, byte for byte"):format(stage, n))
    end
  end
end

-- an argument written in place between forward and backward: the recompute
-- would read the new values, so the backward refuses (as for a saved tensor)
do
  local x = zorch.tensor({1, 2}, {dtype = "float64", requires_grad = true})
  local z = zorch.checkpoint(function(a) return a * a end, x):sum()
  x[1] = 10
  local ok, err = pcall(function() z:backward() end)
  tap.ok(not ok and tostring(err):find("checkpoint: argument 1 of shape (2) was modified by an inplace operation", 1, true),
         "checkpoint refuses an argument written since the forward: " .. tostring(err))
  tap.ok(x.grad == nil, "and writes no gradient")
  local buf = zorch.tensor({3, 4}, {dtype = "float64"})
  local w = zorch.tensor({1, 1}, {dtype = "float64", requires_grad = true})
  local y = zorch.checkpoint(function(a, b) return a * b * b end, w, buf):sum()
  local y2 = zorch.checkpoint(function(a, b) return a * b end, w, buf:clone()):sum()
  buf:copy_(zorch.tensor({10, 10}, {dtype = "float64"}))
  tap.ok(not pcall(function() y:backward() end), "a reused input buffer written by copy_ is refused too")
  y2:backward()
  tap.ok(equal(w.grad, zorch.tensor({3, 4}, {dtype = "float64"})), "a clone passed instead keeps the gradient")
end

print("1.." .. tap.n)
os.exit(tap.failed == 0 and 0 or 1)
