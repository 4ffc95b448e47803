-- Module forward hooks: pre-hooks replace the arguments, hooks the output,
-- handles remove them, and a bad hook is refused naming the method.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn
local ok, raises = tap.ok, tap.raises

zorch.manual_seed(1)
local lin = nn.Linear(3, 2)
local x = zorch.randn(4, 3)
local plain = lin(x)

local seen = {}
local h1 = lin:register_forward_pre_hook(function(m, args)
  seen[#seen + 1] = "pre"
  if #seen == 1 then ok(m == lin and args.n == 1 and args[1] == x, "pre-hook gets the module and the packed arguments") end
end)
local got
local h2 = lin:register_forward_hook(function(m, args, out)
  seen[#seen + 1] = "post"
  got = got or {m, args[1], out}
end)
local y = lin(x)
ok(got[1] == lin and got[2] == x and zorch.equal(got[3], plain), "forward hook gets the module, arguments and output")
ok(table.concat(seen, ",") == "pre,post" and zorch.equal(y, plain), "hooks returning nothing leave the call as it was")

local h3 = lin:register_forward_pre_hook(function(_, args) return args[1] * 2 end)
ok(zorch.allclose(lin(x), (x * 2):matmul(lin.weight:t()) + lin.bias),
   "a pre-hook's value replaces the argument")
local h4 = lin:register_forward_hook(function(_, _, out) return out:sum() end)
ok(lin(x):numel() == 1, "a forward hook's value replaces the output")

for _, h in ipairs{h1, h2, h3, h4} do h:remove() end
h4:remove() -- twice: nothing happens
seen = {}
ok(zorch.equal(lin(x), plain) and #seen == 0, "removed hooks no longer run")

-- hooks see the output of the whole module and keep autograd
local net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
local acts = {}
local h = net[2]:register_forward_hook(function(m, _, out) acts[#acts + 1] = out end)
local loss = net(x):sum()
loss:backward()
ok(#acts == 1 and acts[1].shape[2] == 4 and net[1].weight.grad ~= nil, "a hook on a child sees its activation")
h:remove()

raises("a hook that is not a function", function() lin:register_forward_hook(3) end,
  "register_forward_hook: argument 1 (hook) must be a function, got number")
raises("a nil pre-hook", function() lin:register_forward_pre_hook(nil) end,
  "register_forward_pre_hook: argument 1 (hook) must be a function, got nil")
tap.done()
