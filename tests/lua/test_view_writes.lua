-- In-place writes into views of a tensor and autograd (PyTorch's copy-slices
-- semantics): the base's history is rebased onto the write, so its gradient
-- and every view's follow it; the writes PyTorch refuses are errors naming
-- the op. test_view_writes_torch.lua compares random programs with PyTorch.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises, close = tap.ok, tap.raises, tap.close

local function w23() return zorch.tensor({{1, -2, 3}, {0.5, 4, -1}}, {dtype = "float64", requires_grad = true}) end

-- z = zeros(3, 3); write(z, w); loss = sum(z * z) + sum(w): w's gradient is 2w + 1 wherever w
-- lands in z (PyTorch's), not the 1 that forgetting the write into z gives.
local variants = {
  {"narrow():copy_", function(z, w) z:narrow(1, 1, 2):copy_(w) end, function(w) return w end},
  {"select():copy_", function(z, w) z:select(1, 2):copy_(w[1]) end, function(w) return w[1] end},
  {"z[i]:copy_", function(z, w) z[2]:copy_(w[1]) end, function(w) return w[1] end},
  {"select():add_", function(z, w) z:select(1, 3):add_(w[2]) end, function(w) return w[2] end},
  {"view(-1):narrow():copy_", function(z, w) z:view(-1):narrow(1, 4, 3):copy_(w[2]) end, function(w) return w[2] end},
  {"t():select():copy_", function(z, w) z:t():select(1, 2):copy_(w[1]) end, function(w) return w[1] end},
}
for _, v in ipairs(variants) do
  local name, write, part = v[1], v[2], v[3]
  local w = w23()
  local z = zorch.zeros(3, 3, {dtype = "float64"})
  write(z, w)
  ;((z * z):sum() + w:sum()):backward()
  local want = zorch.ones(2, 3, {dtype = "float64"})
  zorch.no_grad(function() part(want):add_(part(w) * 2) end)
  close(w.grad, want, 1e-12, name .. ": w's gradient is 2w + 1 where it was written, 1 elsewhere")
end

-- the base and the other views follow the write
do
  local x = zorch.tensor({1, 2, 3, 4}, {dtype = "float64", requires_grad = true})
  local y = x * 2
  local left, right = y:narrow(1, 1, 2), y:narrow(1, 3, 2)
  local w = zorch.tensor({10, 20}, {dtype = "float64", requires_grad = true})
  right:mul_(w)
  ok(y.grad_fn == "CopySlices" and left.grad_fn == "AsStridedBackward" and right.grad_fn == "AsStridedBackward",
     "the base records CopySlices; its views follow it: " .. tostring(y.grad_fn) .. ", " .. tostring(left.grad_fn))
  ;(right:sum() + (left * 3):sum()):backward()
  close(x.grad, zorch.tensor({6, 6, 20, 40}, {dtype = "float64"}), 0, "an older view and the written one: x gets both")
  close(w.grad, zorch.tensor({6, 8}, {dtype = "float64"}), 0, "and w the old values it multiplied")
  x.grad = nil
  local y2 = x * 1
  y2[2] = 0
  y2:narrow(1, 1, 2):add_(1)   -- two writes, the second over the first
  zorch.zeros(1):copy_(y2[1]) -- a value without grad into no base: nothing recorded
  y2:sum():backward()
  close(x.grad, zorch.tensor({1, 0, 1, 1}, {dtype = "float64"}), 0, "successive writes through views")
end

-- the writes PyTorch refuses, under the op's name, and nothing written
do
  local p = zorch.zeros(2, 3, {dtype = "float64", requires_grad = true})
  raises("copy_ into a view of a leaf that requires grad", function() p[1]:copy_(zorch.ones(3)) end,
         "copy_: a view of a leaf tensor that requires grad (the leaf's shape (2, 3)) is being used in an in-place operation")
  raises("add_", function() p:narrow(2, 1, 1):add_(1) end, "add_: a view of a leaf tensor that requires grad")
  raises("masked_fill_", function() p:t():masked_fill_(zorch.ones(3, 2):gt(0), 1) end,
         "masked_fill_: a view of a leaf tensor")
  raises("index assignment into a view", function() p[{1, {2, 3}}] = 5 end, "a view of a leaf tensor that requires grad")
  raises("x[i] = v on a view", function() p:t()[1] = zorch.ones(2) end,
         "index assignment: a view of a leaf tensor that requires grad")
  ok(p:abs():sum():item() == 0 and p.is_leaf, "the refused writes wrote nothing and the leaf stays one")
  zorch.no_grad(function() p[1]:fill_(2) end)
  ok(p:sum():item() == 6 and p.is_leaf, "under no_grad a view of the leaf takes values as data")

  local w = zorch.ones(2, {requires_grad = true})
  local base = zorch.zeros(4)
  local early = zorch.no_grad(function() return base:narrow(1, 1, 2) end)
  raises("a view made under no_grad, written with grad mode on", function() early:copy_(w) end,
         "copy_: a view of shape (2,) was made under no_grad and is being written in place with grad mode on")
  base:narrow(1, 3, 2):copy_(w)
  raises("and one read after its base was written", function() return early * 2 end,
         "a view of shape (2,) made under no_grad is used after a write")
end

-- version counters: a view saved for a backward and then written
do
  local x = zorch.ones(4, {dtype = "float64", requires_grad = true})
  local y = x * 2
  local v = y:narrow(1, 1, 2)
  local w = zorch.ones(2, {dtype = "float64", requires_grad = true})
  local saved = v * w -- saves v for w's gradient
  y:narrow(1, 2, 2):fill_(0)
  raises("a saved view written through another view fails at backward", function() (saved:sum() + y:sum()):backward() end,
         "modified by an inplace operation", "[MulBackward]", "is at version 1; expected version 0")
  local e = (x * 1):exp()
  e[1] = 0
  raises("a saved output written by index assignment", function() e:sum():backward() end, "[ExpBackward]")
end

-- writes that cannot be followed are refused as before
raises("a write into an expanded view", function() zorch.zeros(1, 3):expand(2, 3):copy_(zorch.ones(2, 3, {requires_grad = true})) end,
       "copy_: unsupported operation: more than one element of the written-to tensor refers to a single memory location")

tap.done()
