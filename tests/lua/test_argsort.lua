-- argsort against PyTorch's stable argsort (tests/lua/argsort.txt, written by
-- gen_argsort.py), and its refused options.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local G = require("golden")("lua/argsort.txt")

local function same(name, got)
  local exp = G.want[name].out
  local shifted = {}
  for i, v in ipairs(exp) do shifted[i] = v + 1 end -- 1-based, as every index zorch returns
  tap.ok(got:dtype() == "int64" and G.worst(got:double(), shifted) == 0, name .. ": PyTorch's indices")
end
local x = G.fixed({3, 5}, 2)
same("last", x:argsort())
same("dim0_desc", zorch.argsort(x, {dim = 1, descending = true}))
local ties = (G.fixed({4, 6}, 3) * 2):round()
same("ties", ties:argsort({dim = 2, stable = true}))
same("ties_desc", ties:argsort({dim = -1, descending = true}))

tap.raises("an unknown option", function() x:argsort({dims = 1}) end,
  "argsort: unknown option 'dims' (allowed: dim, descending, stable)")
tap.raises("a dim of the wrong type", function() x:argsort({dim = "1"}) end, "argsort: option dim must be a number, got string")
tap.raises("a dim out of range", function() x:argsort({dim = 3}) end, "sort", "dim")
tap.raises("not a tensor", function() zorch.argsort({1, 2}) end, "argsort: argument 1 must be a tensor, got table")
tap.done()
