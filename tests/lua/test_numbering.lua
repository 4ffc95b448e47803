-- Errors count dims, indices, targets, list entries and modules from 1, as the
-- Lua API does (negative ones from the end): the core's 0-based numbers never
-- reach a Lua message.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn

local x = zorch.ones(2, 3)

-- message of fn's error, without the "file:line: " Lua adds
local function err(fn)
  local ok, e = pcall(fn)
  if ok then return "no error" end
  return (tostring(e):gsub("^[^:\n]*:%d+: ", ""))
end

local function is(fn, want, desc)
  local got = err(fn)
  if got ~= want then print("#   got:  " .. got .. "\n#   want: " .. want) end
  tap.ok(got == want, desc)
end

-- class targets
local logits = zorch.randn(4, 3)
is(function() nn.CrossEntropyLoss()(logits, zorch.tensor{0, 1, 2, 0}) end,
  "cross_entropy: target 0 at position 1 is out of range 1..3 (targets are 1-based, as Lua counts; add 1 to 0-based labels)",
  "a 0 target says targets are 1-based")
is(function() zorch.cross_entropy(logits, zorch.tensor{1, 3, 2, 4}) end,
  "cross_entropy: target 4 at position 4 is out of range 1..3",
  "a target past the classes is reported as given, with its 1-based position")
tap.ok(not err(function() zorch.cross_entropy(logits, zorch.tensor{1, 3, 2, 5}) end):find("1-based"),
  "only a 0 target gets the note")
tap.ok(pcall(zorch.cross_entropy, logits, zorch.tensor{1, 3, -100, 2}), "ignore_index still works")

-- dims
is(function() return x:sum(3) end,
  "sum: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "sum names dim 3")
is(function() return x:sum(-3) end,
  "sum: dim -3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "negative dims stay as given")
is(function() return zorch.ones(5):mean(2) end,
  "mean: dim 2 out of range for a 1-d tensor (expected 1 or -1)", "mean on a 1-d tensor")
is(function() return x:sum{1, -2} end, "sum: dim -2 repeated", "a repeated dim")
is(function() return x:softmax(3) end,
  "softmax: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "softmax dim")
is(function() return x:log_softmax(-3) end,
  "log_softmax: dim -3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "log_softmax dim")
is(function() return x:transpose(1, 3) end,
  "transpose: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "transpose dim")
is(function() return x:permute(1, 3) end,
  "permute: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "permute dim")
is(function() return x:permute(2, 2) end, "permute: dim 2 repeated", "permute repeated dim")
is(function() return x:unsqueeze(4) end,
  "unsqueeze: dim 4 out of range for a 2-d tensor (expected 1..3 or -3..-1)", "unsqueeze dim (one more place)")
is(function() return x:squeeze(3) end,
  "squeeze: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "squeeze dim")
is(function() return x:size(3) end,
  "size: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "size dim")
is(function() return zorch.cat({x, x}, 3) end,
  "cat: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "cat dim")
is(function() return zorch.stack({x, x}, 4) end,
  "stack: dim 4 out of range for a 2-d tensor (expected 1..3 or -3..-1)", "stack dim")
is(function() return zorch.cat({x, zorch.ones(3, 2)}, 1) end,
  "cat: tensor 2 has shape (3, 2), which does not fit (2, 3) outside dim 1", "cat counts list entries and dims from 1")
is(function() return zorch.stack{x, zorch.ones(3, 2)} end,
  "stack: tensor 2 has shape (3, 2) but tensor 1 has (2, 3)", "stack counts list entries from 1")
is(function() return x + zorch.ones(3, 3) end,
  "add: shapes (2, 3) and (3, 3) cannot be broadcast (dim 1: 2 vs 3)", "broadcast names the dim from 1")

-- indices
is(function() return x[5] end,
  "select: index 5 out of range for dim 1 of input (2, 3) (expected 1..2 or -2..-1)", "x[5] names index 5")
is(function() return x[-3] end,
  "select: index -3 out of range for dim 1 of input (2, 3) (expected 1..2 or -2..-1)", "x[-3]")
is(function() x[3] = 1 end,
  "select: index 3 out of range for dim 1 of input (2, 3) (expected 1..2 or -2..-1)", "x[3] = v")
is(function() return x:select(2, 4) end,
  "select: index 4 out of range for dim 2 of input (2, 3) (expected 1..3 or -3..-1)", "select")
is(function() return x:narrow(2, 5, 1) end,
  "narrow: start 5 out of range for dim 2 of input (2, 3) (expected 1..3 or -3..-1)", "narrow start")
is(function() return x:narrow(2, 3, 2) end,
  "narrow: start 3 and length 2 run past the end of dim 2 of input (2, 3) (elements 3..4 asked, the dim has 1..3)",
  "narrow past the end")
is(function() return x:narrow(3, 1, 1) end,
  "narrow: dim 3 out of range for a 2-d tensor (expected 1..2 or -2..-1)", "narrow dim")
tap.ok(x:narrow(2, 3, 1):size(2) == 1 and x:narrow(2, -1, 1):size(2) == 1, "narrow's last element is in range")
is(function() return x:index_select(2, zorch.tensor{1, 4}) end,
  "index_select: index 4 at position 2 is out of range 1..3", "index_select index")
is(function() return x:index_select(1, zorch.tensor{0}) end,
  "index_select: index 0 at position 1 is out of range 1..2 (indices are 1-based, as Lua counts)",
  "index_select index 0")
is(function() return nn.Embedding(5, 2)(zorch.tensor{0}) end,
  "embedding: index_select: index 0 at position 1 is out of range 1..5 (indices are 1-based, as Lua counts)",
  "embedding index 0")
is(function() return zorch.embedding(zorch.ones(5, 2), zorch.tensor{2, 6}) end,
  "embedding: index_select: index 6 at position 2 is out of range 1..5", "embedding index past the end")

-- modules of nn.Sequential: the printout and the errors agree
local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(4, 1))
local printed = tostring(seq)
tap.ok(printed:find("(1): nn.Linear(in_features=2", 1, true) and printed:find("(3): nn.Linear(in_features=4", 1, true)
  and not printed:find("(0)", 1, true), "nn.Sequential prints its modules as (1), (2), (3)")
local e = err(function() return seq(zorch.ones(1, 2)) end)
tap.ok(e:find("in module [3] (nn.Linear) of nn.Sequential", 1, true) ~= nil, "the error names module 3 as seq[3], printed as (3)")
tap.ok(seq:state_dict()["2.weight"] ~= nil, "state dict names keep PyTorch's 0-based names")
tap.ok(tostring(nn.Sequential()) == "nn.Sequential()", "an empty nn.Sequential")
local nested = tostring(nn.Sequential(nn.Sequential(nn.ReLU())))
tap.ok(nested == "nn.Sequential(\n  (1): nn.Sequential(\n    (1): nn.ReLU()\n  )\n)", "nested printout indents")

-- no marks of the core's messages leak into Lua
tap.ok(not err(function() return x:sum(3) end):find("[\1-\4]"), "no control bytes in messages")

tap.done()
