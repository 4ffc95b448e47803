-- zorch.nn: modules written in Lua over the C ops, one file a concept as in
-- torch.nn.modules (module, containers, linear, activation, loss, dropout,
-- norm, conv, pool, ...). A module defines `init` and `forward`; autograd
-- does the rest. This file only makes the table; its parts fill it.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = {}
zorch.nn = nn
for _, part in ipairs(zorch._parts "zorch.nn") do zorch._require(part) end -- the folder's files
return nn
