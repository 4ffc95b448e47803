-- What a PyTorch user writes first: positional bias, Lua's false, misspelt
-- options and flags, and the messages that say what was meant.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn
local ok, raises = tap.ok, tap.raises

ok(nn.Linear(2, 3, false).bias == nil, "nn.Linear(2, 3, false): PyTorch's positional bias=False, no bias")
ok(nn.Linear(2, 3, true).bias ~= nil and nn.Linear(2, 3, true).bias.shape[1] == 3, "nn.Linear(2, 3, true) has a bias of 3")
ok(nn.Linear(2, 3, {bias = false}).bias == nil, "{bias = false} leaves the bias out")
raises("a non-boolean bias names Lua's booleans", function() nn.Linear(2, 3, {bias = 0}) end,
       "nn.Linear: bias must be true or false (Lua's lowercase booleans), got 0")
raises("a third argument that is neither", function() nn.Linear(2, 3, "no") end,
       "nn.Linear: the third argument must be the bias (a boolean) or an options table, got string")
raises("a misspelt option: did you mean", function() nn.Linear(2, 3, {bais = false}) end,
       "nn.Linear: unknown option 'bais'; did you mean 'bias'?")
raises("a misspelt Engine option: did you mean", function() zorch.Engine{zero_stag = 2} end,
       "Engine: unknown option 'zero_stag'; did you mean 'zero_stage'?")
local _, e = pcall(zorch.Engine, {completely_other = 1})
ok(tostring(e):find("unknown option 'completely_other' (allowed:", 1, true) ~= nil,
   "a name near none: no guess, the allowed names (" .. tostring(e):sub(1, 60) .. ")")

local spec = {["stop-at"] = {0, "step to stop at"}, max_len = {8, "longest"}, quiet = {false, "no output"}}
ok(zorch.flags({"--stop_at", "5"}, spec)["stop-at"] == 5, "--stop_at sets the flag spelt stop-at")
ok(zorch.flags({"--stop-at", "6"}, spec)["stop-at"] == 6, "--stop-at sets it too")
ok(zorch.flags({"--max-len", "3"}, spec).max_len == 3, "--max-len sets the flag spelt max_len")
ok(zorch.flags({"--no_quiet"}, spec).quiet == false, "--no_quiet negates a boolean")
local okp, err = pcall(zorch.flags, {"--stop-al", "1"}, spec)
ok(not okp and tostring(err):find("unknown flag '--stop-al'; did you mean '--stop-at'?", 1, true) ~= nil,
   "a misspelt flag: did you mean (" .. tostring(err):match("[^\n]*") .. ")")

-- the loader called by a for loop, as PyTorch's `for x, y in loader`
local data = zorch.data
local X, Y = zorch.arange(10):reshape({10, 1}):float(), zorch.arange(10):float()
local loader = data.DataLoader(data.TensorDataset(X, Y), {batch_size = 4})
local seen, firsts = 0, {}
for x, y in loader do
  seen = seen + x:size(1)
  firsts[#firsts + 1] = y[1]:item()
end
ok(seen == 10 and #firsts == 3 and firsts[3] == 8, "for x, y in loader do: every sample once, in 3 batches (" .. seen .. ")")
for _ in loader do break end -- an abandoned epoch
local again = 0
for x in loader do again = again + x:size(1) end
ok(again == 10, "a loop after a break starts a whole epoch (" .. again .. " samples)")

local path = os.tmpname()
raises("zorch.save of a module says to save its state dict", function() zorch.save(nn.Linear(2, 2), path) end,
       "save: got a module (nn.Linear), not its weights; save model:state_dict() instead")
zorch.save(nn.Linear(2, 2, false):state_dict(), path)
ok(zorch.load(path).weight ~= nil and zorch.load(path).bias == nil, "its state dict saves: weight, no bias")
os.remove(path)

-- a log (not a terminal) with every_s: nothing for a short run, a line once the seconds pass
local lines = {}
local sink = {write = function(_, s) lines[#lines + 1] = s end}
local bar = zorch.progress(50, {every_s = 0.05, tty = false, out = sink, label = "epoch 1", rank = 0})
for _ = 1, 5 do bar:update(1, {loss = 0.25}) end
ok(#lines == 0, "every_s: no line before the seconds pass (" .. #lines .. ")")
local t = zorch.clock()
while zorch.clock() - t < 0.06 do end
bar:update(1)
ok(#lines == 1 and lines[1]:find("^epoch 1 6/50") and lines[1]:find("ETA", 1, true) and lines[1]:find("loss 0.250000", 1, true),
   "then one plain line with the count, rate, ETA and loss: " .. (lines[1] or ""):gsub("\n", ""))
bar:update(1)
bar:close()
ok(#lines == 2 and lines[2]:find("7/50", 1, true), "close ends a log that had lines with the last state")
lines = {}
bar = zorch.progress(50, {every_s = 60, tty = false, out = sink, rank = 0})
for _ = 1, 50 do bar:update() end
bar:close()
ok(#lines == 0, "a run shorter than every_s prints nothing (" .. #lines .. " lines)")

do -- the reference job in a log: its epoch lines, and no progress line in a run of under 30 s
  -- indices of any integer dtype, and probability targets, as torch takes them
zorch.manual_seed(3)
local logits = zorch.randn(4, 5)
local idx = zorch.tensor({1, 5, 3, 2}, {dtype = "int64"})
local ref = zorch.cross_entropy(logits, idx):item()
for _, dt in ipairs({"int32", "uint8"}) do
  ok(zorch.cross_entropy(logits, idx:to(dt)):item() == ref, "cross_entropy takes " .. dt .. " class indices")
  local e = nn.Embedding(6, 3)
  ok(zorch.equal(e(idx:to(dt)), e(idx)), "nn.Embedding takes " .. dt .. " indices")
end
local onehot = zorch.zeros(4, 5)
for i = 1, 4 do onehot[i][idx[i]:item()] = 1 end
for _, red in ipairs({"mean", "sum", "none"}) do
  for _, eps in ipairs({0, 0.1}) do
    local a = zorch.cross_entropy(logits, onehot, {reduction = red, label_smoothing = eps})
    local b = zorch.cross_entropy(logits, idx, {reduction = red, label_smoothing = eps})
    ok(zorch.allclose(a, b, 1e-6, 1e-6), ("one-hot probability targets give the index targets' loss (%s, smoothing %g)"):format(red, eps))
  end
end
local lg = zorch.randn(4, 5):requires_grad_()
local soft = zorch.softmax(zorch.randn(4, 5), 2)
nn.CrossEntropyLoss()(lg, soft):backward()
ok(lg.grad and zorch.allclose(lg.grad, (zorch.softmax(lg:detach(), 2) - soft) / 4, 1e-5, 1e-6),
   "soft targets: the gradient is (softmax - p) / N")
raises("probability targets of another shape", function() zorch.cross_entropy(logits, zorch.zeros(4, 4)) end,
       "cross_entropy: probability targets must have the logits' shape (4, 5), got (4, 4)")

do -- gpt2.lua --init F --context T: the first T position embeddings, or a clear refusal
  local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
  local dir = tap.tmpdir()
  local function run(args)
    local p = io.popen(("OMP_NUM_THREADS=1 %s ../models/gpt2.lua %s 2>&1; echo rc=$?"):format(bin, args))
    local out = p:read("a")
    p:close()
    return out
  end
  run("--steps 0 --save-hf " .. dir)
  local out = run(("--init %s/model.safetensors --context 16 --steps 1 --batch-size 2"):format(dir))
  ok(out:find("context 16,", 1, true) and out:find("step 1/1 | loss", 1, true) and out:find("rc=0", 1, true),
     "--init with --context 16 trains at context 16 (" .. (out:match("gpt2: [^\n]*context %d+") or out:sub(1, 200)) .. ")")
  out = run(("--init %s/model.safetensors --context 100 --steps 1"):format(dir))
  ok(out:find("--context 100: " .. dir .. "/model.safetensors has position embeddings for 64 tokens only", 1, true)
     and out:find("rc=2", 1, true), "a --context longer than the file's positions is a usage error")
end

local p = io.popen((os.getenv("ZORCH_BIN") or "../build/zorch") .. " ../models/simple_net.lua --epochs 3 --save '' 2>&1")
  local out = p:read("a")
  p:close()
  local losses = {}
  for l in out:gmatch("Epoch %d+ loss: (%d+%.%d+)") do losses[#losses + 1] = l end
  ok(#losses == 3 and not out:find("step/s", 1, true), "simple_net --epochs 3 in a log: 3 epoch lines, no progress line ("
     .. table.concat(losses, " ") .. ")")
end

local p = io.popen((os.getenv("ZORCH_BIN") or "../build/zorch") .. " ../models/simple_net.lua --help 2>/dev/null; echo rc=$?")
local out = p:read("a")
p:close()
ok(out:find("usage: ", 1, true) ~= nil and out:find("--epochs", 1, true) ~= nil and out:find("\nrc=0\n", 1, true) ~= nil,
   "--help prints the usage to stdout and exits 0")
tap.done()
