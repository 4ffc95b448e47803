-- nn modules, losses, schedulers and summaries against PyTorch's values
-- (lua/nn/modules.lua, written by lua/nn/gen_modules.py).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local ok, raises, close = tap.ok, tap.raises, tap.close
local G = dofile("lua/nn/modules.lua")

local function shape(t) return "(" .. table.concat(t.shape, ", ") .. ")" end
local function opts_str(o)
  local keys = {}
  for k in pairs(o) do keys[#keys + 1] = k end
  table.sort(keys)
  local parts = {}
  for _, k in ipairs(keys) do
    local v = o[k]
    parts[#parts + 1] = k .. "=" .. (type(v) == "table" and "{" .. table.concat(v, ",") .. "}" or tostring(v))
  end
  return table.concat(parts, " ")
end

-- ---- *_like --------------------------------------------------------------------------------------
local x64 = zorch.randn(2, 3, {dtype = "float64"})
ok(zorch.zeros_like(x64):dtype() == "float64" and shape(zorch.zeros_like(x64)) == "(2, 3)" and
   zorch.zeros_like(x64):sum():item() == 0, "zeros_like keeps shape and dtype")
ok(zorch.ones_like(x64, {dtype = "int32"}):dtype() == "int32" and zorch.ones_like(x64):sum():item() == 6,
   "ones_like; dtype from the options")
ok(zorch.full_like(x64, 2.5):sum():item() == 15 and zorch.full_like(zorch.tensor{1, 2}, 7):dtype() == "int64",
   "full_like")
ok(zorch.rand_like(x64):dtype() == "float64" and zorch.randn_like(zorch.ones(4, 5)):dtype() == "float32" and
   shape(zorch.randn_like(zorch.ones(4, 5))) == "(4, 5)", "rand_like and randn_like")
ok(zorch.zeros_like(x64):device() == x64:device() and zorch.zeros_like(x64, {device = "cpu"}):device() == "cpu",
   "the device is the input's unless given")
local rg = zorch.zeros_like(x64, {requires_grad = true})
ok(rg.requires_grad and rg.is_leaf and not zorch.zeros_like(rg).requires_grad, "requires_grad only when asked")
zorch.manual_seed(3)
local r1 = zorch.randn_like(x64)
zorch.manual_seed(3)
ok(zorch.randn(2, 3, {dtype = "float64"}):eq(r1):sum():item() == 6, "randn_like draws as randn")
raises("rand_like of an integer tensor", function() zorch.rand_like(zorch.tensor{1, 2}) end,
       "rand_like", "floating-point", "int64")
raises("zeros_like wants a tensor", function() zorch.zeros_like({2, 3}) end, "zeros_like", "tensor expected")
raises("full_like wants a value", function() zorch.full_like(x64) end, "full_like", "number expected")
raises("ones_like checks its options", function() zorch.ones_like(x64, {dtyp = "float32"}) end, "unknown option 'dtyp'")

-- ---- losses -----------------------------------------------------------------------------------
for _, dt in ipairs({"float64", "float32"}) do
  local tol = dt == "float64" and 1e-10 or 1e-4
  local counts = {}
  for _, c in ipairs(G.losses) do
    local opts = {}
    for k, v in pairs(c.opts) do
      opts[k] = type(v) == "table" and zorch.tensor(v, {dtype = dt}) or v
    end
    local x = zorch.tensor(c.input, {dtype = dt, requires_grad = true})
    local target = c.loss == "NLLLoss" and zorch.tensor(c.target) or zorch.tensor(c.target, {dtype = dt})
    local out = nn[c.loss](opts)(x, target)
    out:backward(zorch.tensor(c.grad_output, {dtype = dt}))
    local desc = ("%s{%s} %s"):format(c.loss, opts_str(c.opts), dt)
    local want = zorch.tensor(c.output, {dtype = "float64"})
    local good = shape(out) == shape(want)
    good = close(out:double(), want, tol, desc .. ": loss") and good
    close(x.grad:double(), zorch.tensor(c.grad, {dtype = "float64"}), tol, desc .. ": input gradient")
    if not good then print("#   shape " .. shape(out) .. ", PyTorch's " .. shape(want)) end
    counts[c.loss] = (counts[c.loss] or 0) + 1
  end
  ok(counts.BCEWithLogitsLoss == 9 and counts.BCELoss == 6 and counts.NLLLoss == 16, dt .. ": every loss case ran")
end

-- a 16-bit input is reduced in float32 and returned in its dtype
local lp16 = zorch.log_softmax(zorch.randn(4, 3), 2)
local l16 = nn.NLLLoss()(lp16:to("bfloat16"), zorch.tensor{1, 2, 3, 1})
ok(l16:dtype() == "bfloat16" and math.abs(l16:float():item() - nn.NLLLoss()(lp16, zorch.tensor{1, 2, 3, 1}):item()) < 0.05,
   "NLLLoss of bfloat16 log-probabilities")
ok(math.abs(nn.NLLLoss()(lp16, zorch.tensor{1, 2, 3, 1}):item() -
            nn.CrossEntropyLoss()(lp16, zorch.tensor{1, 2, 3, 1}):item()) < 1e-6,
   "NLLLoss of log_softmax equals CrossEntropyLoss")
do -- stable at any magnitude: no inf or nan for logits of +-1000
  local big = zorch.tensor({-1000., 1000., 0.}, {requires_grad = true})
  local l = nn.BCEWithLogitsLoss{reduction = "sum"}(big, zorch.tensor{1., 0., 1.})
  l:backward()
  local g = big.grad:totable()
  ok(math.abs(l:item() - (2000 + math.log(2))) < 1e-3 and g[1] == -1 and g[2] == 1 and g[3] == -0.5,
     "BCEWithLogitsLoss at logits of +-1000 and 0: finite loss, exact gradients")
end

raises("NLLLoss checks the class range", function() nn.NLLLoss()(lp16, zorch.tensor{1, 2, 4, 1}) end,
       "nll_loss", "target 4 at position 3 is out of range 1..3")
raises("NLLLoss wants int64 targets", function() nn.NLLLoss()(lp16, zorch.ones(4)) end, "int64")
raises("NLLLoss names the shapes", function() nn.NLLLoss()(lp16, zorch.tensor{1, 2}) end,
       "nll_loss", "(4, 3)", "(2,)")
raises("NLLLoss weight per class", function() nn.NLLLoss{weight = zorch.ones(4)}(lp16, zorch.tensor{1, 2, 3, 1}) end,
       "nn.NLLLoss", "weight (4)", "(4, 3)")
raises("NLLLoss weight is 1-D", function() nn.NLLLoss{weight = zorch.ones(2, 2)} end, "nn.NLLLoss", "1-D")
raises("NLLLoss ignore_index is an integer", function() nn.NLLLoss{ignore_index = 1.5} end, "ignore_index")
raises("BCEWithLogitsLoss shapes must match", function() nn.BCEWithLogitsLoss()(zorch.ones(2, 3), zorch.ones(3)) end,
       "nn.BCEWithLogitsLoss", "(2, 3)", "(3)")
raises("BCELoss shapes must match", function() nn.BCELoss()(zorch.ones(2), zorch.ones(3)) end,
       "nn.BCELoss", "(2)", "(3)")
raises("unknown loss option", function() nn.BCEWithLogitsLoss{pos_weigth = zorch.ones(3)} end,
       "unknown option 'pos_weigth'", "pos_weight")
raises("pos_weight is a tensor", function() nn.BCEWithLogitsLoss{pos_weight = 2} end, "pos_weight must be a tensor")
raises("bad reduction", function() nn.BCELoss{reduction = "avg"} end, "nn.BCELoss", "'avg'")

-- ---- Softmax, LogSoftmax, Flatten ---------------------------------------------------------------
for _, c in ipairs(G.softmax) do
  local out = nn[c.module](c.dim)(zorch.tensor(c.input, {dtype = "float64"}))
  close(out, zorch.tensor(c.output, {dtype = "float64"}), 1e-12, ("nn.%s(%d)"):format(c.module, c.dim))
end
raises("Softmax needs a dim", function() nn.Softmax() end, "nn.Softmax", "dim")
raises("LogSoftmax dim 0 is refused", function() nn.LogSoftmax(0) end, "nn.LogSoftmax", "dims count from 1")

for _, c in ipairs(G.flatten) do
  local out = nn.Flatten(c.start_dim, c.end_dim)(zorch.zeros(c.input_shape))
  ok(table.concat(out.shape, ",") == table.concat(c.shape, ","),
     ("nn.Flatten(%d, %d) of (%s) gives (%s)"):format(c.start_dim, c.end_dim, table.concat(c.input_shape, ", "),
                                                      table.concat(c.shape, ", ")))
end
ok(shape(nn.Flatten()(zorch.zeros(7, 2, 3))) == "(7, 6)", "nn.Flatten() keeps the batch dim")
local fx = zorch.randn(2, 3, 4, {requires_grad = true})
nn.Flatten()(fx):sum():backward()
ok(shape(fx.grad) == "(2, 3, 4)", "gradients flow through Flatten")
raises("Flatten's dims must fit the input", function() nn.Flatten(3)(zorch.ones(2, 3)) end,
       "nn.Flatten", "start_dim 3", "(2, 3)")
raises("Flatten with start after end", function() nn.Flatten(3, 2)(zorch.ones(2, 3, 4)) end, "nn.Flatten")
raises("Flatten dims count from 1", function() nn.Flatten(0) end, "nn.Flatten", "start_dim", "count from 1")

-- ---- ModuleList -------------------------------------------------------------------------------
-- the structure of gen_modules.py's Net
local Net = nn.Module:extend "Net"
function Net:init()
  self.embed = nn.Linear(3, 4)
  self.blocks = nn.ModuleList{nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)),
                              nn.ModuleList{nn.Linear(4, 4, {bias = false}), nn.Tanh()}}
  self.blocks:append(nn.Linear(4, 2))
  self.head = nn.Sequential(nn.Flatten(), nn.Linear(2, 1))
end
function Net:forward(x)
  x = self.embed(x)
  for i, b in ipairs(self.blocks) do
    if i == 3 then
      for _, m in ipairs(b) do x = m(x) end
    else
      x = b(x)
    end
  end
  return self.head(x)
end
local net = Net()
local names = {}
for name in net:named_parameters() do names[#names + 1] = name end
ok(table.concat(names, " ") == table.concat(G.names.state_dict, " "),
   "ModuleList parameter names are PyTorch's state-dict names, in its order")
local sd = net:state_dict()
local n_sd, all_in = 0, true
for k in pairs(sd) do n_sd = n_sd + 1 end
for _, k in ipairs(G.names.state_dict) do all_in = all_in and sd[k] ~= nil end
ok(all_in and n_sd == #G.names.state_dict, "state_dict has exactly PyTorch's keys")
ok(net:num_parameters() == G.names.num_parameters, "num_parameters equals PyTorch's count")
ok(#net.blocks == 4 and net.blocks[1] == rawget(net.blocks, "0") and net.blocks[-1] == rawget(net.blocks, "3") and
   net.blocks[5] == nil and net.blocks[0] == nil, "#list, list[i] 1-based, negative from the end")
local seen = 0
for i, m in ipairs(net.blocks) do seen = seen + ((m == rawget(net.blocks, tostring(i - 1))) and 1 or 0) end
ok(seen == 4, "ipairs visits the modules in order")
ok(shape(net(zorch.randn(5, 3))) == "(5, 1)", "a model iterating over its lists runs")
local loaded = Net()
loaded:load_state_dict(sd)
ok(loaded.blocks[2]["2"].weight:eq(net.blocks[2]["2"].weight):sum():item() == 16, "load_state_dict fills list members")
local ml = nn.ModuleList()
ml[1] = nn.Linear(2, 2)
ml[1] = nn.Linear(2, 3)
ml:append(nn.ReLU())
ok(#ml == 2 and ml[1].out_features == 3 and #ml:parameters() == 2, "list[i] = m replaces, list[#list + 1] = m appends")
ok(#nn.Sequential(nn.ModuleList{nn.Linear(2, 2)}):parameters() == 2, "a list inside a Sequential is registered")
ml:train(false)
ok(ml[1].training == false, "train/eval reach list members")
raises("ModuleList has no forward", function() ml(zorch.ones(2)) end, "nn.ModuleList", "iterate")
raises("ModuleList items must be modules", function() nn.ModuleList{nn.ReLU(), 3} end, "nn.ModuleList", "item 2")
raises("append wants a module", function() ml:append("x") end, "append", "module")
raises("out-of-range assignment", function() ml[5] = nn.ReLU() end, "nn.ModuleList", "index 5", "2 modules")
raises("ModuleList wants a list", function() nn.ModuleList(nn.ReLU()) end, "nn.ModuleList", "list of modules")

-- ---- summary and num_parameters --------------------------------------------------------------
local text, info = net:summary(zorch.randn(5, 3), {print = false})
ok(info.total == G.names.num_parameters and info.trainable == info.total and info.bytes == 4 * info.total,
   "summary totals: params, trainable, bytes")
ok(text:find("blocks", 1, true) and text:find("nn.ModuleList", 1, true) and text:find("(5, 2)", 1, true) and
   text:find("(5, 1)", 1, true) and text:find("Total params: 105", 1, true) and
   text:find("Trainable params: 105", 1, true), "summary lists modules, output shapes and totals")
ok(net.training and net.blocks[2].training, "summary restores the training flags")
ok(rawget(net, "forward") == nil and rawget(net.blocks[1], "forward") == nil, "summary leaves no wrappers behind")
net.embed.weight:requires_grad_(false)
ok(net:num_parameters(true) == G.names.num_parameters - 12 and net:num_parameters() == G.names.num_parameters,
   "num_parameters(true) counts trainable ones")
local _, info2 = nn.summary(net, nil, {print = false})
ok(info2.trainable == info.total - 12, "summary without an input; frozen parameters are not trainable")
local Shared = nn.Module:extend "Shared"
function Shared:init() self.a = nn.Linear(2, 2); self.b = self.a end
ok(Shared():num_parameters() == 6, "a shared module counts once")
raises("summary of a failing forward names it", function() nn.summary(net, zorch.randn(5, 4), {print = false}) end,
       "nn.summary", "forward")
raises("summary wants a module", function() nn.summary(3) end, "nn.summary", "module")

-- ---- schedulers --------------------------------------------------------------------------------
local lambdas = {
  exp = function(e) return 0.95 ^ e end,
  warmup = function(e) return math.min(1.0, (e + 1) / 5) end,
  step = function(e) return 0.5 ^ (e // 7) end,
}
local function make_opt(kind)
  local w = {zorch.zeros(2, {requires_grad = true})}
  if kind == "sgd" then return optim.SGD(w, {lr = 0.1, momentum = 0.9}) end
  if kind == "sgd0" then return optim.SGD(w, {lr = 0.1}) end
  return optim.Adam(w, {lr = 1e-3})
end
local function momentum(o) return o.defaults.betas and o.defaults.betas[1] or o.defaults.momentum end
local function worst(a, b)
  local w = 0
  for i = 1, math.max(#a, #b) do
    local x, y = a[i], b[i]
    if x == nil or y == nil then return math.huge end
    w = math.max(w, math.abs(x - y) / math.max(math.abs(y), 1e-300))
  end
  return w
end
local sched_counts = {}
for _, c in ipairs(G.schedulers) do
  local opt = make_opt(c.optimizer)
  local o = {}
  for k, v in pairs(c.opts) do o[k] = v end
  if c.scheduler == "LambdaLR" then o.lr_lambda = lambdas[c.opts.lr_lambda] end
  local s = optim.lr_scheduler[c.scheduler](opt, o)
  local lrs, moms = {opt.lr}, {momentum(opt)}
  for i = 1, #c.lr - 1 do
    if c.metrics then s:step(c.metrics[i]) else s:step() end
    lrs[#lrs + 1], moms[#moms + 1] = opt.lr, momentum(opt)
  end
  local wl, wm = worst(lrs, c.lr), worst(moms, c.momentum)
  ok(wl <= 1e-12 and wm <= 1e-12, ("%s(%s, {%s}): %d lrs and momenta as PyTorch's (worst relative %.3g, %.3g)"):format(
    c.scheduler, c.optimizer, opts_str(c.opts), #c.lr, wl, wm))
  sched_counts[c.scheduler] = (sched_counts[c.scheduler] or 0) + 1
end
ok(sched_counts.MultiStepLR == 3 and sched_counts.LambdaLR == 3 and sched_counts.OneCycleLR == 6 and
   sched_counts.ReduceLROnPlateau == 6, "every scheduler configuration ran")

-- state_dict round trips: a fresh scheduler resumes where the first stopped
do
  local o1, o2 = make_opt("sgd"), make_opt("sgd")
  local s1 = optim.lr_scheduler.OneCycleLR(o1, {max_lr = 0.5, total_steps = 30})
  for _ = 1, 12 do s1:step() end
  local s2 = optim.lr_scheduler.OneCycleLR(o2, {max_lr = 0.5, total_steps = 30})
  s2:load_state_dict(s1:state_dict())
  ok(o2.lr == o1.lr and o2.defaults.momentum == o1.defaults.momentum and s2:step() == s1:step(),
     "OneCycleLR state_dict resumes the cycle")
  local p1 = optim.lr_scheduler.ReduceLROnPlateau(make_opt("sgd"), {patience = 1})
  for _, m in ipairs({1, 1, 1, 0.5, 0.6}) do p1:step(m) end
  local p2 = optim.lr_scheduler.ReduceLROnPlateau(make_opt("sgd"), {patience = 1})
  p2:load_state_dict(p1:state_dict())
  ok(p2.best == 0.5 and p2.num_bad_epochs == p1.num_bad_epochs and p2.last_step == 5,
     "ReduceLROnPlateau state_dict carries its counters")
  local m1 = optim.lr_scheduler.MultiStepLR(make_opt("sgd"), {milestones = {2, 4}})
  for _ = 1, 3 do m1:step() end
  local mo = make_opt("sgd")
  local m2 = optim.lr_scheduler.MultiStepLR(mo, {milestones = {2, 4}})
  m2:load_state_dict(m1:state_dict())
  ok(math.abs(mo.lr - 0.01) < 1e-15 and m2:step() == m1:step(), "MultiStepLR state_dict")
  ok(optim.lr_scheduler.ReduceLROnPlateau(make_opt("sgd"), {patience = 0}):step(zorch.tensor(1.5)) == 0.1,
     "ReduceLROnPlateau takes a one-element tensor")
end

do -- an SGD that has stepped without momentum gets a momentum buffer once the cycle turns it on
  local w = zorch.ones(2, {requires_grad = true})
  local o = optim.SGD({w}, {lr = 0.1})
  w:sum():backward()
  o:step()
  local s = optim.lr_scheduler.OneCycleLR(o, {max_lr = 0.1, total_steps = 5})
  o:step()
  s:step()
  ok(o.state[1].momentum_buffer ~= nil and o.defaults.momentum < 0.95 and math.abs(w[1]:item() - 0.896) < 1e-6,
     "OneCycleLR turns momentum on for an SGD that stepped without it")
end

local onecycle = optim.lr_scheduler.OneCycleLR(make_opt("sgd"), {max_lr = 0.1, total_steps = 3})
for _ = 1, 3 do onecycle:step() end
raises("OneCycleLR past total_steps", function() onecycle:step() end, "OneCycleLR", "4 times", "total_steps = 3")
raises("OneCycleLR needs max_lr", function() optim.lr_scheduler.OneCycleLR(make_opt("sgd"), {total_steps = 3}) end,
       "OneCycleLR", "'max_lr' is required")
raises("OneCycleLR needs a length", function() optim.lr_scheduler.OneCycleLR(make_opt("sgd"), {max_lr = 1}) end,
       "OneCycleLR", "total_steps", "epochs and steps_per_epoch")
raises("OneCycleLR anneal_strategy", function()
  optim.lr_scheduler.OneCycleLR(make_opt("sgd"), {max_lr = 1, total_steps = 5, anneal_strategy = "exp"})
end, "OneCycleLR", "anneal_strategy")
raises("OneCycleLR unknown option", function()
  optim.lr_scheduler.OneCycleLR(make_opt("sgd"), {max_lr = 1, total_step = 5})
end, "unknown option 'total_step'")
raises("MultiStepLR milestones", function() optim.lr_scheduler.MultiStepLR(make_opt("sgd"), {milestones = {1.5}}) end,
       "MultiStepLR", "milestones")
raises("MultiStepLR wants an optimizer", function() optim.lr_scheduler.MultiStepLR({}, {milestones = {1}}) end,
       "MultiStepLR", "optimizer")
raises("LambdaLR needs lr_lambda", function() optim.lr_scheduler.LambdaLR(make_opt("sgd"), {}) end,
       "LambdaLR", "'lr_lambda' is required")
raises("LambdaLR's function must return a number", function()
  optim.lr_scheduler.LambdaLR(make_opt("sgd"), {lr_lambda = function() return "x" end})
end, "LambdaLR", "lr_lambda(0)", "string")
raises("ReduceLROnPlateau factor < 1", function() optim.lr_scheduler.ReduceLROnPlateau(make_opt("sgd"), {factor = 1}) end,
       "ReduceLROnPlateau", "factor")
raises("ReduceLROnPlateau mode", function() optim.lr_scheduler.ReduceLROnPlateau(make_opt("sgd"), {mode = "low"}) end,
       "ReduceLROnPlateau", "mode")
raises("ReduceLROnPlateau step wants a metric", function()
  optim.lr_scheduler.ReduceLROnPlateau(make_opt("sgd")):step()
end, "ReduceLROnPlateau:step", "metric")

-- Module:to keeps which parameters are frozen
do
  local m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
  m[1].weight:requires_grad_(false)
  m:to("float64")
  ok(m[1].weight:dtype() == "float64" and not m[1].weight.requires_grad and m[1].bias.requires_grad
     and m[2].weight.requires_grad, "to(dtype) keeps a frozen parameter frozen and the others trainable")
end

tap.done()
