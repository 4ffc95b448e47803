-- The Lua API: tensors, autograd, nn, optim, data, Engine, save/load, flags.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data
local ok, raises, close = tap.ok, tap.raises, tap.close

-- tensors
local x = zorch.tensor{{1, 2, 3}, {4, 5, 6}}
ok(x:dtype() == "int64" and #x == 2 and x:size(2) == 3, "zorch.tensor infers int64 and the shape")
ok(zorch.tensor{1.5, 2}:dtype() == "float32", "a fractional value makes float32")
ok(zorch.tensor({1, 2}, {dtype = "float64"}):dtype() == "float64", "dtype option")
ok(x[2][3]:item() == 6 and x[-1][1]:item() == 4, "x[i] is 1-based; negative counts from the end")
local f = x:to("float32")
ok(tostring(f * 2) == "tensor([[ 2.,  4.,  6.],\n        [ 8., 10., 12.]])", "operators and PyTorch-style printing")
ok((1 - f)[1][1]:item() == 0 and (f / 2)[1][2]:item() == 1 and (2 / f)[1][2]:item() == 1, "numbers on either side")
ok((-f)[1][1]:item() == -1 and (f ^ 2)[2][1]:item() == 16, "unary minus and power")
ok((f .. f):size(1) == 4, "a .. b concatenates along the first dim")
f[1] = 0
ok(f[1][2]:item() == 0 and f[2][1]:item() == 4, "x[i] = v writes a row")
local t = zorch.arange(12):view(3, 4)
ok(t:narrow(2, 2, 2)[1][1]:item() == 1 and t:select(1, 3)[1]:item() == 8, "narrow and select are 1-based")
ok(t:transpose(1, 2):size(1) == 4 and t:t():size(2) == 3 and t:permute(2, 1):size(1) == 4, "transpose, t, permute")
ok(t:sum(2):totable()[1] == 6 and t:sum():item() == 66, "sum over a 1-based dim and over all")
local v, i = t:max(2)
ok(v:totable()[3] == 11 and i:totable()[3] == 4, "max gives values and 1-based indices")
ok(t:unsqueeze(1):dim() == 3 and t:unsqueeze(1):squeeze():dim() == 2, "unsqueeze and squeeze")
ok(zorch.cat({t, t}, 2):size(2) == 8 and zorch.stack({t, t}):size(1) == 2, "cat and stack")
ok(zorch.zeros(2, 3).shape[2] == 3 and zorch.ones({2, 2}):sum():item() == 4, "sizes as numbers or a table")
ok(zorch.full({2}, 7):totable()[2] == 7, "full")
local tt = t:totable()
ok(type(tt) == "table" and tt[3][4] == 11, "totable")
local closed
do
  local c <close> = zorch.ones(3)
  ok(c:sum():item() == 3, "to-be-closed tensors")
  closed = c
end
local okc, errc = pcall(function() return closed + closed end)
ok(not okc and tostring(errc):find("closed tensor"), "arithmetic on a closed tensor says so: " .. tostring(errc))
ok(tostring(closed) == "tensor(closed)", "a closed tensor prints as tensor(closed)")
okc, errc = pcall(function() return 2 * closed end)
ok(not okc and tostring(errc):find("operand 2 is a closed tensor"), "and names the operand: " .. tostring(errc))

-- autograd
local w = zorch.randn(3, 2, {requires_grad = true})
local a = zorch.ones(4, 3)
local y = (a:matmul(w)):relu():sum()
y:backward()
ok(w.grad ~= nil and w.grad.shape[1] == 3, "backward fills .grad")
ok(w.is_leaf and not y.is_leaf and y.grad_fn == "SumBackward", "leaves and grad_fn")
local g = zorch.no_grad(function() return a:matmul(w) end)
ok(not g.requires_grad, "no_grad records nothing")
raises("backward twice is an error", function() y:backward() end, "second time")
w.grad = nil
ok(w.grad == nil, "grad can be cleared")

-- cross entropy and embedding take 1-based indices
local logits = zorch.tensor{{10.0, 0, 0}, {0, 0, 10.0}}
local ce = zorch.cross_entropy(logits, zorch.tensor{1, 3})
ok(ce:item() < 1e-3, "cross_entropy targets are 1-based")
local emb = nn.Embedding(5, 2)
ok(emb(zorch.tensor{{1, 5}}).shape[3] == 2, "nn.Embedding with 1-based indices")

-- nn
local Net = nn.Module:extend "Net"
function Net:init() self.fc1 = nn.Linear(3, 4); self.act = nn.Tanh(); self.fc2 = nn.Linear(4, 1) end
function Net:forward(x) return self.fc2(self.act(self.fc1(x))) end
local net = Net()
local names = {}
for k in net:named_parameters() do names[#names + 1] = k end
ok(table.concat(names, ",") == "fc1.weight,fc1.bias,fc2.weight,fc2.bias", "named_parameters in PyTorch's names and order")
ok(#net:parameters() == 4 and #net:children() == 3, "parameters and children")
net:eval()
ok(not net.fc1.training, "eval reaches children")
net:train()
local bound = 1 / math.sqrt(3)
ok(net.fc1.weight:abs():max():item() <= bound, "Linear initialised in PyTorch's range")
local sd = net:state_dict()
local net2 = Net()
net2:load_state_dict(sd)
close(net2.fc2.weight, net.fc2.weight, 0, "load_state_dict copies weights")
raises("load_state_dict names a shape mismatch", function() nn.Linear(2, 2):load_state_dict({weight = zorch.ones(3, 3), bias = zorch.ones(2)}) end, "weight", "(2, 2)", "(3, 3)")
raises("load_state_dict names missing keys", function() nn.Linear(2, 2):load_state_dict({}) end, "missing keys", "weight")
local seq = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(5, 1))
raises("Sequential says which module failed", function() seq(zorch.ones(2, 3)) end, "in module [3]", "nn.Linear", "(2, 4)")
local seqsd = nn.Sequential(nn.Linear(2, 2)):state_dict()
ok(seqsd["0.weight"] ~= nil, "Sequential children are named 0, 1, ... as in PyTorch")
local ln = nn.LayerNorm(4)
ok(math.abs(ln(zorch.randn(2, 4)):mean():item()) < 1e-5, "LayerNorm")
local drop = nn.Dropout(0.5)
drop:eval()
ok(drop(zorch.ones(10)):sum():item() == 10, "Dropout is the identity in eval mode")
ok(math.abs(nn.L1Loss()(zorch.ones(3), zorch.zeros(3)):item() - 1) < 1e-6, "L1Loss")
ok(nn.GELU()(zorch.zeros(2)):sum():item() == 0 and nn.Sigmoid()(zorch.zeros(1)):item() == 0.5, "GELU and Sigmoid")

-- optimizers reduce a quadratic
local function fit(make)
  local p = zorch.tensor({3.0, -2.0}, {requires_grad = true})
  local o = make({p})
  for _ = 1, 200 do
    o:zero_grad()
    local l = (p * p):sum()
    l:backward()
    o:step()
  end
  return (p * p):sum():item()
end
ok(fit(function(ps) return optim.SGD(ps, {lr = 0.1, momentum = 0.9}) end) < 1e-3, "SGD with momentum converges")
ok(fit(function(ps) return optim.Adam(ps, {lr = 0.1}) end) < 1e-2, "Adam converges")
ok(fit(function(ps) return optim.AdamW(ps, {lr = 0.1}) end) < 1e-2, "AdamW converges")
raises("unknown optimizer options are errors", function() optim.Adam({zorch.ones(1)}, {learning_rate = 1}) end, "unknown option 'learning_rate'", "lr")
local p = zorch.tensor({1.0}, {requires_grad = true})
local adam = optim.Adam({p}, {lr = 0.1})
p.grad = zorch.tensor{1.0}
adam:step()
local st = adam:state_dict()
local adam2 = optim.Adam({p}, {lr = 0.1})
adam2:load_state_dict(st)
ok(adam2.state[1].step == 1 and adam2.state[1].exp_avg:item() > 0, "optimizer state_dict round trip")
local sched = optim.lr_scheduler.StepLR(adam, 2, 0.5)
sched:step(); sched:step()
ok(math.abs(adam.lr - 0.05) < 1e-12, "StepLR")
local cos = optim.lr_scheduler.CosineWarmup(adam2, 2, 10, 0)
ok(math.abs(adam2.lr - 0.05) < 1e-12, "cosine schedule warms up linearly")
for _ = 1, 10 do cos:step() end
ok(adam2.lr < 1e-12, "and decays to min_lr")

-- data
local X, Y = zorch.arange(10):view(10, 1):float(), zorch.arange(10):float()
local ds = data.TensorDataset(X, Y)
local loader = data.DataLoader(ds, {batch_size = 4})
local sizes = {}
for bx, by in loader:iter() do sizes[#sizes + 1] = bx:size(1); assert(by:size(1) == bx:size(1)) end
ok(table.concat(sizes, ",") == "4,4,2" and #loader == 3, "batches in order, the last one short")
local dl = data.DataLoader(ds, {batch_size = 4, drop_last = true, shuffle = true, seed = 3})
local seen, firsts = {}, {}
for bx in dl:iter() do for _, r in ipairs(bx:totable()) do seen[#seen + 1] = r[1] end end
for bx in data.DataLoader(ds, {batch_size = 4, drop_last = true, shuffle = true, seed = 3}):iter() do firsts[#firsts + 1] = bx[1][1]:item() end
ok(#seen == 8 and seen[1] == firsts[1], "shuffle is deterministic per seed; drop_last drops the short batch")
raises("DataLoader checks its options", function() data.DataLoader(ds, {batchsize = 2}) end, "unknown option 'batchsize'")
local csv = os.tmpname()
local fh = io.open(csv, "w"); fh:write("a,b\n1,2\n3,4.5\n"); fh:close()
local c = data.read_csv(csv, {header = true})
ok(c.shape[1] == 2 and c[2][2]:item() == 4.5, "read_csv")
fh = io.open(csv, "w"); fh:write("1,2\n3\n"); fh:close()
raises("read_csv rejects ragged rows", function() data.read_csv(csv) end, "line 2")
os.remove(csv)
local npy = data.load_npy("golden/small.npy")
ok(npy:dtype() == "float32" and npy.shape[1] == 2 and npy.shape[2] == 3 and npy[2][3]:item() == 5, "load_npy reads NumPy's files")

-- safetensors both ways
local path = os.tmpname()
zorch.save({w = zorch.arange(6):view(2, 3):float(), b = zorch.tensor({true, false})}, path)
local back = zorch.load(path)
ok(back.w[2][3]:item() == 5 and back.b:dtype() == "bool", "save and load round trip")
os.remove(path)
local pt = zorch.load("golden/from_torch.safetensors")
ok(pt["layer.weight"] ~= nil and pt["layer.weight"]:dtype() == "float32" and pt.half:dtype() == "bfloat16",
   "files written by PyTorch load")
ok(math.abs(pt["layer.weight"]:sum():item() - 15) < 1e-6, "with PyTorch's values")

-- and zorch's files load in PyTorch, where Python has torch and safetensors
local for_torch = os.tmpname()
zorch.save({w = zorch.arange(6):view(2, 3):float(), h = zorch.tensor({1.5, -2}, {dtype = "bfloat16"}),
            i = zorch.tensor{7, -8}}, for_torch)
if os.execute("python3 -c 'import torch, safetensors' 2>/dev/null") then
  ok(os.execute("python3 golden/check_zorch_file.py " .. for_torch), "PyTorch's safetensors loads zorch's file")
else
  ok(true, "# SKIP python3 with torch and safetensors is not installed")
end
os.remove(for_torch)

-- Engine
raises("Engine rejects unknown keys", function() zorch.Engine{zero_stages = 2} end, "unknown option 'zero_stages'", "zero_stage")
raises("Engine rejects zero_stage = 5", function() zorch.Engine{zero_stage = 5} end, "zero_stage must be 0, 1, 2 or 3")
raises("Engine rejects gradient_clipping = -1", function() zorch.Engine{gradient_clipping = -1} end, "gradient_clipping")
local function train(stage, accum, bs)
  zorch.manual_seed(11)
  local model = nn.Linear(3, 2)
  local eng = zorch.Engine{zero_stage = stage, gradient_clipping = 0.5, gradient_accumulation_steps = accum}
  local o = optim.Adam(model:parameters(), {lr = 0.01})
  local Xs, Ys = zorch.randn(64, 3), zorch.randn(64, 2)
  local ld = data.DataLoader(data.TensorDataset(Xs, Ys), {batch_size = bs})
  model, ld, o = eng:prepare(model, ld, o)
  for _ = 1, 3 do
    for bx, by in ld:iter() do
      local l = zorch.mse_loss(model(bx), by)
      o:zero_grad(); eng:backward(l); o:step()
    end
  end
  return model:state_dict().weight -- under stage 3 the state dict gathers the slices
end
local ref = train(0, 1, 16)
close(train(2, 1, 16), ref, 0, "every ZeRO stage equals stage 0 in one process")
close(train(3, 2, 8), ref, 1e-5, "accumulating 2 micro-batches of 8 equals batches of 16")
local eng = zorch.Engine{gradient_clipping = 1.0}
local m = nn.Linear(2, 1)
eng:prepare(m)
m.weight.grad = zorch.tensor{{3.0, 4.0}}
m.bias.grad = zorch.tensor{0.0}
ok(math.abs(eng:clip_grad_norm() - 5) < 1e-9 and math.abs(m.weight.grad[1][2]:item() - 0.8) < 1e-6, "clip_grad_norm returns the norm and scales")
ok(eng.rank == 0 and eng.world_size == 1 and eng:config().zero_stage == 0, "rank, world_size, config")
do -- with an optimizer, clip_grad_norm reports the norm the step clipped with
  local lin = nn.Linear(2, 1)
  local e2 = zorch.Engine{zero_stage = 2, gradient_clipping = 1e-3}
  local _, _, o2 = e2:prepare(lin, nil, optim.SGD(lin:parameters(), {lr = 0.1}))
  local l = (lin(zorch.ones(4, 2)) * 10):sum()
  o2:zero_grad(); e2:backward(l); o2:step()
  ok(math.abs(e2:clip_grad_norm() - math.sqrt(40 * 40 * 3)) < 1e-3, "clip_grad_norm gives the step's global norm: " .. tostring(e2:clip_grad_norm()))
end

-- progress display
local lines = {}
local sink = {write = function(_, s) lines[#lines + 1] = s end}
local bar = zorch.progress(10, {every = 5, tty = false, out = sink})
for _ = 1, 10 do bar:update(1, {loss = 0.5}) end
ok(#lines == 2 and lines[2]:find("10/10", 1, true) and lines[2]:find("loss 0.500000", 1, true) and lines[2]:find("ETA", 1, true),
   "progress prints plain lines off a terminal: " .. (lines[2] or ""):gsub("\n", ""))
lines = {}
bar = zorch.progress(3, {tty = true, out = sink, interval = 0})
for _ = 1, 3 do bar:update() end
ok(#lines == 3 and lines[1]:sub(1, 1) == "\r" and lines[3]:sub(-1) == "\n", "and redraws one line on a terminal")


-- the fused linear + relu equals the two ops, forward and backward, bit for bit
for _, dt in ipairs({"float32", "float64"}) do
  zorch.manual_seed(11)
  local x = zorch.randn(7, 5, {dtype = dt}):requires_grad_()
  local w = zorch.randn(3, 5, {dtype = dt}):requires_grad_()
  local b = zorch.randn(3, {dtype = dt}):requires_grad_()
  local g = zorch.randn(7, 3, {dtype = dt})
  local y1 = zorch.linear(x, w, b, "relu")
  ;(y1 * g):sum():backward()
  local gx, gw, gb = x.grad, w.grad, b.grad
  x.grad, w.grad, b.grad = nil, nil, nil
  local y2 = zorch.relu(zorch.linear(x, w, b))
  ;(y2 * g):sum():backward()
  local same = (y1 - y2):abs():max():item() == 0 and (gx - x.grad):abs():max():item() == 0 and
    (gw - w.grad):abs():max():item() == 0 and (gb - b.grad):abs():max():item() == 0
  ok(same and (y1:relu() - y1):abs():max():item() == 0, "linear(x, w, b, \"relu\") equals relu(linear(x, w, b)) with its gradients in " .. dt)
end
local e0 = zorch.linear(zorch.randn(3, 0), zorch.randn(2, 0), zorch.tensor({-1, 2}), "relu")
ok(e0[1][1]:item() == 0 and e0[3][2]:item() == 2, "linear with no input features is relu(bias)")
raises("an unknown activation is named", function() zorch.linear(zorch.ones(2, 2), zorch.ones(2, 2), nil, "swish") end, "swish")
local fused = zorch.nn.Linear(4, 3, {activation = "relu"})
local fy = fused(zorch.randn(5, 4))
ok(tostring(fused):find("activation=relu", 1, true) and (fy:relu() - fy):abs():max():item() == 0,
   "nn.Linear{activation = \"relu\"} fuses the activation")
raises("nn.Linear checks the activation", function() zorch.nn.Linear(4, 3, {activation = "tanh"}) end, "activation", "tanh")

-- a loader's device option
do
  local l = zorch.data.DataLoader(zorch.data.TensorDataset(zorch.randn(6, 2)), {batch_size = 4, device = "cpu"})
  local x = l:iter()()
  ok(x:device() == "cpu" and x.shape[1] == 4, "DataLoader{device = ...} hands batches over on that device")
  raises("DataLoader checks the device", function() zorch.data.DataLoader(zorch.data.TensorDataset(zorch.randn(2)), {device = 1}) end,
         "DataLoader", "device")
end

-- 16-bit means scale in float32 and round once
local h = zorch.randn(50, 7):to("bfloat16")
ok(h:mean(1):dtype() == "bfloat16" and
   (h:mean(1):float() - h:float():mean(1):to("bfloat16"):float()):abs():max():item() == 0,
   "mean of bfloat16 equals the float32 mean rounded once")

-- Module:to converts every parameter, nested ones too, and names what fails
local net = zorch.nn.Sequential(zorch.nn.Linear(3, 4), zorch.nn.ReLU(), zorch.nn.Linear(4, 2))
net:to("float64")
local all64 = true
for _, p in ipairs(net:parameters()) do all64 = all64 and p:dtype() == "float64" and p.requires_grad and p.is_leaf end
ok(all64 and #net:parameters() == 4, "Module:to(\"float64\") converts every parameter to a leaf that requires grad")
ok(net(zorch.randn(2, 3, {dtype = "float64"})):dtype() == "float64", "and the model runs in float64")
if not zorch.cuda.available() then
  raises("Module:to a missing device names it", function() net:to("cuda") end, "nn.Sequential:to", "device cuda:0")
  raises("Engine{device = \"cuda\"} without a GPU fails at prepare, naming the device", function()
    zorch.Engine{device = "cuda"}:prepare(zorch.nn.Linear(2, 2)) end, "cannot move the model to cuda:0")
  raises("zorch.cuda.memory_stats without a device says so", function() zorch.cuda.memory_stats() end,
         "zorch.cuda.memory_stats", "cuda")
end
raises("Engine checks the device name", function() zorch.Engine{device = "gpu"} end, "device", "\"cuda:N\"", "gpu")
raises("zorch.cuda.memory_stats checks the device name", function() zorch.cuda.memory_stats("tpu") end,
       "zorch.cuda", "tpu")
raises("zorch.cuda.allow_tf32 takes a boolean", function() zorch.cuda.allow_tf32("yes") end, "boolean")
ok(zorch.cuda.allow_tf32() == false, "TF32 is off by default")
ok(math.type(zorch.cuda.device_count()) == "integer" and type(zorch.cuda.built()) == "boolean",
   "zorch.cuda reports the build and the devices")
ok(zorch.local_rank() == 0, "local_rank is 0 in a single process")

-- flags
local fl = zorch.flags({"--lr", "0.5", "--quiet", "--name=x"}, {lr = {1.0}, quiet = {false}, name = {"a"}})
ok(fl.lr == 0.5 and fl.quiet == true and fl.name == "x", "flags parse values, booleans and --k=v")
raises("unknown flags are errors", function() zorch.flags({"--nope"}, {lr = {1.0}}, "usage: x") end,
       "unknown flag '--nope'", "usage: x")

-- gradient hooks: they see the final gradient; an error in one stops backward
-- with an error (tests/test_allocfail.c makes memory errors), and grad mode
-- comes back on
do
  local w = zorch.ones(3):requires_grad_()
  local seen
  w:register_hook(function(t) seen = t.grad:sum():item() end)
  local loss = (w * 2):sum()
  loss:backward()
  ok(seen == 6, "a hook sees the final gradient")
  w:register_hook(function() error("hook failed") end)
  raises("an error in a hook stops backward, naming the hook", function() (w * 2):sum():backward() end,
         "gradient hook", "hook failed")
  ok(zorch.is_grad_enabled(), "grad mode is back on after a failed backward")
  w:register_hook(function() error({}) end)
  raises("an error object that is not a string still reaches the caller", function() (w * 2):sum():backward() end,
         "gradient hook")
  w:register_hook(nil)
  w.grad = nil
  loss = (w * 2):sum()
  loss:backward()
  ok(zorch.is_grad_enabled() and w.grad:sum():item() == 6, "backward runs normally once the hook is gone")
end
tap.done()
