-- Errors raised inside a module's forward name the module: its path from
-- the module called (as Lua reaches it: list children from 1), its class,
-- and the user's forward, even when the failing call is a tail call
-- (`return self.head(x)`) that leaves no frame of the user's behind.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn
local ok = tap.ok

local function err_of(f, ...)
  local good, e = pcall(f, ...)
  return not good and e or nil
end
local src = debug.getinfo(1, "S").short_src

local Attention = nn.Module:extend "Attention"
function Attention:init() self.qkv = nn.Linear(4, 4); self.out = nn.Linear(5, 4) end
function Attention:forward(x) return self.out(self.qkv(x)) end -- the failing call is a tail call
local DEF_ATTN = debug.getinfo(Attention.forward, "S").linedefined

local Block = nn.Module:extend "Block"
function Block:init() self.attn = Attention() end
function Block:forward(x)
  local h = self.attn(x) -- not a tail call: this line stays on the stack
  return h
end
local CALL_LINE = debug.getinfo(Block.forward, "S").linedefined + 1

local Net = nn.Module:extend "Net"
function Net:init(n)
  self.blocks = nn.ModuleList()
  for _ = 1, n do self.blocks:append(Block()) end
  self.head = nn.Linear(4, 2)
end
function Net:forward(x)
  for _, b in ipairs(self.blocks) do x = b(x) end
  return self.head(x)
end

local e = err_of(Net(4), zorch.ones(2, 4))
ok(e and e:find("linear: input (2, 4) and weight (4, 5) do not fit", 1, true), "the op's own message comes first")
ok(e and e:find("\n  in module blocks[1].attn.out (nn.Linear) of Net", 1, true), "the path from the model, list entries from 1")
ok(e and e:find(("in Attention:forward (defined at %s:%d)"):format(src, DEF_ATTN), 1, true),
   "the innermost forward of the user's, where it is defined (its frame went with the tail call)")
ok(e and e:find(("from Block:forward at %s:%d"):format(src, CALL_LINE), 1, true), "the user's line that is still on the stack")
ok(e and select(2, e:gsub("\n  in module", "")) == 1, "annotated once, not once a level")

-- a layer of zorch's called on its own: its message as it was (it names the op)
e = err_of(nn.Linear(3, 2), zorch.ones(1, 4))
ok(e and e:find("linear: input (1, 4)", 1, true) and not e:find("\n", 1, true), "a layer called alone: no trailer")
-- a module of the user's called on its own names itself and its forward
local Bad = nn.Module:extend "Bad"
function Bad:forward(x) return x + zorch.ones(3) end
e = err_of(Bad(), zorch.ones(2))
ok(e and e:find(("\n  in Bad, in Bad:forward at %s:%d"):format(src, debug.getinfo(Bad.forward, "S").linedefined), 1, true),
   "a user's module called alone: in Bad, in Bad:forward at the line of the add")

-- the head: the tail call of the outermost forward
local net = Net(1)
net.blocks[1].attn.out = nn.Linear(4, 4)
e = err_of(net, zorch.ones(2, 3))
ok(e and e:find("in module blocks[1].attn.qkv (nn.Linear) of Net", 1, true), "the first layer of the first block")
e = err_of(net, zorch.ones(2, 4):float())
ok(e == nil, "a model that fits runs")

-- nn.Sequential: the same form, seq[i] as printed
local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Sequential(nn.Linear(4, 1)))
e = err_of(seq, zorch.ones(1, 2))
ok(e and e:find("in module [3][1] (nn.Linear) of nn.Sequential", 1, true), "nested Sequential: [3][1]")

-- error objects that are not strings pass through untouched
local Raise = nn.Module:extend "Raise"
function Raise:forward() error({code = 7}) end
local obj = err_of(nn.Sequential(Raise()), 1)
ok(type(obj) == "table" and obj.code == 7, "a table error object comes out as it went in")

-- a module's error caught and re-raised by the user's code is annotated again as new
local Catch = nn.Module:extend "Catch"
function Catch:init() self.l = nn.Linear(2, 2) end
function Catch:forward(x)
  local good, m = pcall(self.l, x)
  if not good then error("wrapped: " .. m:match("^[^\n]*"), 0) end
  return m
end
e = err_of(Catch(), zorch.ones(1, 3))
local line = debug.getinfo(Catch.forward, "S").linedefined + 2
ok(e and e:find("wrapped: ", 1, true) and e:find(("\n  in Catch, in Catch:forward at %s:%d$"):format(src, line)),
   "a new message from a forward names that module and the line it raised at, once")

tap.done()
