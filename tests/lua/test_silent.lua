-- Training that used to go wrong without a word: tied weights, modules that
-- refer to their parents, in-place writes to saved tensors, overlapping and
-- expanded writes, layer_norm shapes, gradients of the wrong kind.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local ok, raises, close = tap.ok, tap.raises, tap.close

-- ---- tied weights ---------------------------------------------------------------------------------
-- A GPT-2 style tie (head.weight = wte.weight) against one parameter used twice by hand.
local Tied = nn.Module:extend "Tied"
function Tied:init()
  self.wte = nn.Embedding(5, 3)
  self.head = nn.Linear(3, 5, {bias = false})
  self.head.weight = self.wte.weight
end
function Tied:forward(idx) return self.head(self.wte(idx)) end

local Hand = nn.Module:extend "Hand"
function Hand:init(w) self.w = nn.Parameter(w) end
function Hand:forward(idx) return zorch.linear(zorch.embedding(self.w, idx), self.w) end

local idx, target = zorch.tensor{1, 3, 5, 2}, zorch.tensor{2, 4, 1, 3}

local function train(model, opt, step, steps)
  for _ = 1, steps do
    opt:zero_grad()
    local loss = zorch.cross_entropy(model(idx), target)
    if step then step(loss) else loss:backward() end
    opt:step()
  end
end

zorch.manual_seed(3)
local tied = Tied()
local w0 = tied.wte.weight:detach():clone()
ok(#tied:parameters() == 1, "parameters() lists a tied weight once: " .. #tied:parameters())
local names = {}
for n in tied:named_parameters() do names[#names + 1] = n end
ok(table.concat(names, ",") == "wte.weight", "named_parameters() keeps the first name: " .. table.concat(names, ","))
local sd = tied:state_dict()
ok(sd["wte.weight"] and sd["head.weight"], "state_dict() keeps both names")

for _, O in ipairs({{"SGD", {lr = 0.1, momentum = 0.9}}, {"Adam", {lr = 0.05}}, {"AdamW", {lr = 0.05}}}) do
  zorch.manual_seed(3)
  local a = Tied()
  a.wte.weight:detach():copy_(w0)
  local b = Hand(w0:clone())
  train(a, optim[O[1]](a:parameters(), O[2]), nil, 5)
  train(b, optim[O[1]](b:parameters(), O[2]), nil, 5)
  close(a.wte.weight, b.w, 1e-6, O[1] .. ": a tied model trains as one parameter used twice")
  ok(rawequal(a.wte.weight, a.head.weight), O[1] .. ": the tie holds")
end

local ref = Hand(w0:clone())
train(ref, optim.Adam(ref:parameters(), {lr = 0.05}), nil, 4)
for stage = 0, 3 do
  local m = Tied()
  m.wte.weight:detach():copy_(w0)
  local eng = zorch.Engine{zero_stage = stage}
  local _, _, o = eng:prepare(m, nil, optim.Adam(m:parameters(), {lr = 0.05}))
  train(m, o, function(l) eng:backward(l) end, 4)
  close(m:state_dict()["wte.weight"], ref.w, 1e-5, ("ZeRO stage %d trains a tied model as one parameter"):format(stage))
end

raises("an optimizer refuses a list with a tensor twice", function()
  local p = nn.Parameter(zorch.zeros(2))
  optim.SGD({p, p}, {lr = 0.1})
end, "parameter 2 is parameter 1 again")

do -- to() keeps the tie
  local m = Tied():to("float64")
  ok(rawequal(m.wte.weight, m.head.weight) and m.wte.weight:dtype() == "float64", "to() keeps a tied weight one tensor")
end

-- ---- a module that refers to its parent -------------------------------------------------------------
do
  local net = nn.Sequential(nn.Linear(2, 3), nn.Linear(3, 1))
  local child = net:children()[1]
  child.parent = net -- a back reference, registered as a child
  ok(#net:parameters() == 4, "parameters() ends on a cycle")
  local n = 0
  for _ in pairs(net:state_dict()) do n = n + 1 end
  ok(n == 4, "state_dict() ends on a cycle: " .. n)
  net:eval()
  ok(not net.training and not child.training, "eval() ends on a cycle")
  net:train()
  ok(net.training and child.training, "train() ends on a cycle")
  net:to("float64")
  ok(child.weight:dtype() == "float64", "to() ends on a cycle")
  ok(net:num_parameters() == 13, "num_parameters() ends on a cycle")
  local text = nn.summary(net, nil, {print = false})
  ok(text:find("Total params: 13", 1, true), "summary ends on a cycle")
  net:load_state_dict(net:state_dict())
  ok(true, "load_state_dict ends on a cycle")
  net:zero_grad()
end

-- ---- in-place writes to saved tensors ------------------------------------------------------------------
do
  local x = zorch.randn(2, 3, {requires_grad = true})
  local y = zorch.randn(2, 3)
  local z = x * y
  y:fill_(1)
  raises("backward after a saved tensor was written in place fails", function() z:sum():backward() end,
         "modified by an inplace operation", "[MulBackward]", "of shape (2, 3) is at version 1; expected version 0")
end
do -- index assignment and copy_ bump too, through views
  local x = zorch.randn(3, {requires_grad = true})
  local y = zorch.randn(3)
  local z = x * y
  y[2] = 5
  raises("index assignment counts as a write", function() z:sum():backward() end, "modified by an inplace operation")
  local y2 = zorch.randn(4)
  local z2 = x * y2:narrow(1, 1, 3)
  y2:narrow(1, 4, 1):copy_(zorch.ones(1))
  raises("a write through another view of the storage counts", function() z2:sum():backward() end,
         "is at version 1; expected version 0")
  local w = nn.Parameter(zorch.randn(3))
  local z3 = (w * w):sum()
  optim.SGD({w}, {lr = 0.1}):step() -- no grad yet: nothing written
  w.grad = zorch.ones(3)
  optim.SGD({w}, {lr = 0.1}):step()
  raises("an optimizer step counts as a write", function() z3:backward() end, "modified by an inplace operation")
end
do -- no false alarms: accumulating gradients, writes after backward, unrelated tensors
  local x = zorch.randn(2, 3, {requires_grad = true})
  local y = zorch.randn(2, 3)
  for _ = 1, 3 do (x * y):sum():backward() end
  close(x.grad, y * 3, 1e-6, "accumulating .grad three times trips nothing")
  local z = x * y
  local other = zorch.zeros(2, 3)
  other:fill_(2)
  z:sum():backward()
  y:fill_(0)
  ok(true, "writes to other tensors or after backward are fine")
end

-- ---- in-place writes and autograd ---------------------------------------------------------------------
-- copy_, fill_, zero_ and x[i] = v on a tensor are recorded on that tensor
-- (PyTorch's values, from tests/golden/inplace_grads.py); a value then read
-- through another handle to its storage (an older view, detach) refuses the
-- backward instead of giving a wrong gradient. Leaves and no_grad writes are data.
do
  local x = zorch.tensor({1, 2, 3}, {dtype = "float32", requires_grad = true})
  local y = x * 2
  y[2] = 5
  y:sum():backward()
  close(x.grad, zorch.tensor{2, 0, 2}, 0, "y[2] = 5 after y = x * 2: no gradient through the written element")
  x.grad = nil
  local y2 = x * 2
  y2:fill_(5)
  y2:sum():backward()
  close(x.grad, zorch.zeros(3), 0, "fill_ of all of y: zeros for x, as PyTorch")
  x.grad = nil
  local w = zorch.tensor({1, 1, 1}, {dtype = "float32", requires_grad = true})
  local y3 = x * 2
  y3:copy_(w * 3)
  local l3 = (y3 * y3):sum()
  l3:backward()
  close(w.grad, zorch.tensor{18, 18, 18}, 0, "copy_ of w * 3: w gets 2 * 3w * 3")
  close(x.grad, zorch.zeros(3), 0, "and x nothing")
  x.grad, w.grad = nil, nil
  local out = zorch.zeros(2, 3)
  out[1] = x * 2
  out[2] = x:pow(2)
  ok(out.requires_grad and out.grad_fn == "CopySlices", "rows assigned from values that require grad record CopySlices")
  local l = (out * zorch.tensor{{1, 2, 3}, {4, 5, 6}}):sum()
  l:backward()
  close(x.grad, zorch.tensor{2 + 4 * 2, 4 + 5 * 4, 6 + 6 * 6}, 1e-12, "and both rows' gradients reach x")
  x.grad = nil
  local b = zorch.zeros(2, 3)
  b[1] = 7
  b[-1] = w
  b:sum():backward()
  close(w.grad, zorch.ones(3), 0, "a negative index and a broadcast value")
  w.grad = nil
  local y4 = x * 2
  local early = y4 * 3
  y4[1] = 0
  early:sum():backward()
  close(x.grad, zorch.full({3}, 6), 0, "a reader from before the write keeps the old values' gradient")
end
do -- writes through a view are followed: the base and its other views see the write's history
  local x = zorch.ones(3, {requires_grad = true})
  local y = x * 2
  local v = y:narrow(1, 1, 2)
  v:copy_(zorch.zeros(2))
  ok(y.grad_fn == "CopySlices" and v.grad_fn == "AsStridedBackward", "the base gets CopySlices, the view follows it")
  ;(y * 3):sum():backward()
  close(x.grad, zorch.tensor{0, 0, 6}, 0, "a write through a view, then a read of the base: no gradient through the written part")
  x.grad = nil
  local y2 = x * 2
  local old = y2:narrow(1, 2, 2)
  y2[1] = 4
  y2[2] = 4
  old:sum():backward()
  close(x.grad, zorch.tensor{0, 0, 2}, 0, "an older view read after writes to its base sees them")
  x.grad = nil
end
do -- writes through another handle to the storage: refused at backward
  local x = zorch.ones(3, {requires_grad = true})
  local y3 = x * 2
  y3:detach():fill_(0)
  raises("a write through detach()", function() y3:backward(zorch.ones(3)) end,
         "[MulBackward] made was written in place before backward read it")
  ok(x.grad == nil, "the refused backward wrote no gradient")
end
do -- data writes
  local x = zorch.ones(3, {requires_grad = true})
  local q = x * 2
  zorch.no_grad(function() q:fill_(5) end)
  q:sum():backward()
  close(x.grad, zorch.full({3}, 2), 0, "a write under no_grad is data: the recorded gradient stays")
  close(q, zorch.full({3}, 5), 0, "and the values are the written ones")
  local w = zorch.ones(3, {requires_grad = true})
  w[1] = 4
  zorch.no_grad(function() w:narrow(1, 2, 1):fill_(2) end)
  ok(w.is_leaf, "a leaf written with constants stays a leaf")
  local sq = (w * w):sum()
  sq:backward()
  close(w.grad, zorch.tensor{8, 4, 2}, 0, "writes to a leaf, and to its views under no_grad, are data")
  raises("a view of the leaf written in grad mode", function() w:narrow(1, 3, 1):fill_(7) end,
         "fill_: a view of a leaf tensor that requires grad (the leaf's shape (3,)) is being used in an in-place operation")
  raises("a leaf that requires grad given a value that requires grad", function() w:copy_(x * 2) end,
         "copy_: a leaf tensor of shape (3,) that requires grad cannot take a value that requires grad")
  raises("the same by index", function() w[1] = x[1] * 2 end, "index assignment: a leaf tensor")
  close(w, zorch.tensor{4, 2, 1}, 0, "the refused writes wrote nothing")
  zorch.no_grad(function() w:copy_(x * 3) end)
  close(w, zorch.full({3}, 3), 0, "under no_grad the leaf takes the values")
end

-- ---- overlapping copy_ ---------------------------------------------------------------------------------
do
  local x = zorch.arange(1, 7)
  x:narrow(1, 2, 5):copy_(x:narrow(1, 1, 5))
  ok(table.concat(x:totable(), ",") == "1,1,2,3,4,5", "copy_ shifting right within one tensor: " .. table.concat(x:totable(), ","))
  local y = zorch.arange(1, 7)
  y:narrow(1, 1, 5):copy_(y:narrow(1, 2, 5))
  ok(table.concat(y:totable(), ",") == "2,3,4,5,6,6", "copy_ shifting left: " .. table.concat(y:totable(), ","))
  local m = zorch.arange(1, 5):reshape(2, 2)
  m:copy_(m:t())
  ok(table.concat(m:reshape(4):totable(), ",") == "1,3,2,4", "copy_ of a transpose onto itself")
end

-- ---- writes through an expanded view ----------------------------------------------------------------
do
  local e = zorch.zeros(1, 3):expand(4, 3)
  raises("fill_ into an expanded view fails", function() e:fill_(1) end,
         "more than one element of the written-to tensor refers to a single memory location")
  raises("copy_ into an expanded view fails", function() e:copy_(zorch.randn(4, 3)) end,
         "more than one element of the written-to tensor refers to a single memory location")
  raises("zero_ into an expanded view fails", function() e:zero_() end, "single memory location")
  ok(zorch.zeros(1, 3):expand(1, 3):fill_(2):sum():item() == 6, "a stride-0 dim of size 1 is fine")
end

-- ---- layer_norm shapes --------------------------------------------------------------------------------
raises("layer_norm checks normalized_shape against the last dims", function()
  zorch.layer_norm(zorch.randn(2, 3), {4})
end, "normalized_shape (4,)", "(2, 3)")
raises("nn.LayerNorm checks its shape", function() nn.LayerNorm(4)(zorch.randn(2, 3)) end, "(4,)", "(2, 3)")
ok(zorch.layer_norm(zorch.randn(2, 3), {3}):numel() == 6, "a matching normalized_shape works")

-- ---- gradients of the wrong kind -----------------------------------------------------------------------
do
  local x = zorch.randn(2, 3, {requires_grad = true})
  raises(".grad of another shape", function() x.grad = zorch.zeros(3, 2) end, "does not match")
  raises(".grad of another dtype", function() x.grad = zorch.zeros(2, 3, {dtype = "float64"}) end,
         "gradient dtype float64 does not match tensor dtype float32")
  x.grad = zorch.ones(2, 3)
  ok(x.grad:sum():item() == 6, ".grad of the right kind")
end

tap.done()
