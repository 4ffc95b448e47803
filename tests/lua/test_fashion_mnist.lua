-- models/fashion_mnist.lua: a quick MLP run prints its epoch line, the test
-- accuracy and a confusion matrix and saves PyTorch's names; the first 5
-- steps' losses match PyTorch's from the same initial weights and batches
-- (tests/golden/gen_fashion.py) to 1e-4 relative.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local data_dir = "/usr/share/datasets/fashion-mnist"
if not io.open(data_dir .. "/train-images-idx3-ubyte.gz", "rb") then
  tap.ok(true, "# SKIP " .. data_dir .. " is not installed")
  return tap.done()
end
local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local script = "../models/fashion_mnist.lua"

-- a quick run: 512 images, one epoch
local saved, log = tmp .. "/mlp.safetensors", tmp .. "/mlp.jsonl"
local out, ok = run(("ZORCH_QUIET=1 %s %s --model mlp --limit 512 --epochs 1 --test-limit 500 --save %s --log %s"):format(
  bin, script, saved, log))
tap.ok(ok, "the quick MLP run succeeds")
local loss, acc = out:match("Epoch 1 train loss: ([%d.]+)  test accuracy: ([%d.]+)%%")
tap.ok(loss and acc, "it prints the epoch's train loss and test accuracy")
tap.ok(tonumber(loss or "9") < 2.3 and tonumber(acc or "0") > 40,
       ("and learns something from 512 images (loss %s, accuracy %s%%)"):format(loss, acc))
tap.ok(out:find("Confusion matrix", 1, true) and out:find("9 Ankle boot", 1, true), "it prints the confusion matrix")
local rows, total = 0, 0
for line in out:gmatch("[^\n]+") do
  if line:match("^%d [%a/%- ]+ +%d") then
    rows = rows + 1
    for v in line:sub(13):gmatch("%d+") do total = total + tonumber(v) end
  end
end
tap.ok(rows == 10 and total == 500, ("10 rows counting the 500 test images (%d rows, %d images)"):format(rows, total))
tap.ok(out:find("done: mlp, 1 epochs, 4 steps", 1, true), "the summary line")
local sd = zorch.load(saved)
tap.ok(sd["1.weight"] and sd["1.weight"].shape[2] == 784 and sd["5.bias"] and sd["5.bias"].shape[1] == 10,
       "the state dict has PyTorch's Sequential names (1.weight (256, 784) ... 5.bias (10,))")
local f = io.open(log)
local text = f and f:read("a") or ""
if f then f:close() end
tap.ok(text:find('"test_accuracy"', 1, true) and text:find('"loss"', 1, true), "the log has the loss and test accuracy")

-- PyTorch's first 5 losses from zorch's initial weights
local golden = {}
for line in io.lines("golden/fashion_mnist_losses.txt") do
  local kind, step, l = line:match("^(%a+) (%d+) ([%d.e%-]+)$")
  if kind then
    golden[kind] = golden[kind] or {}
    golden[kind][tonumber(step)] = tonumber(l)
  end
end
for _, kind in ipairs({"mlp", "cnn"}) do
  if not golden[kind] then
    tap.ok(true, "# SKIP no golden losses for the " .. kind)
  elseif kind == "cnn" and not zorch.nn.Conv2d then
    tap.ok(true, "# SKIP this zorch has no nn.Conv2d")
  else
    local o, good = run(("%s %s --model %s --no-shuffle --limit 320 --batch-size 64 --seed 1 --epochs 1 " ..
      "--test-limit 100 --quiet --save '' --print-steps 5"):format(bin, script, kind))
    local worst, n = 0, 0
    for step, l in o:gmatch("step (%d+) loss ([%d.]+)") do
      local want = golden[kind][tonumber(step)]
      worst = math.max(worst, math.abs(tonumber(l) - want) / math.abs(want))
      n = n + 1
    end
    tap.ok(good and n == 5 and worst <= 1e-4,
           ("%s: the first 5 losses match PyTorch's (%d steps, worst relative error %.2g)"):format(kind, n, worst))
  end
end

-- PyTorch's --train from zorch's initial weights on the same shuffled batches
-- (2 epochs of 5 steps: the second at half the learning rate)
local shuffled = {}
for line in io.lines("golden/fashion_mnist_losses.txt") do
  local step, l = line:match("^shuffled%-mlp (%d+) ([%d.e%-]+)$")
  if step then shuffled[tonumber(step)] = tonumber(l) end
end
if not shuffled[10] then
  tap.ok(true, "# SKIP no golden shuffled losses")
else
  local o, good = run(("%s %s --model mlp --limit 320 --batch-size 64 --seed 1 --epochs 2 --test-limit 100 --quiet " ..
    "--save '' --print-steps 10"):format(bin, script))
  local worst, n = 0, 0
  for step, l in o:gmatch("step (%d+) loss ([%d.]+)") do
    local want = shuffled[tonumber(step)]
    worst = math.max(worst, math.abs(tonumber(l) - want) / math.abs(want))
    n = n + 1
  end
  tap.ok(good and n == 10 and worst <= 1e-4,
         ("shuffled MLP: 10 losses over 2 epochs match PyTorch's --train (%d steps, worst relative error %.2g)"):format(
           n, worst))
end
tap.done()
