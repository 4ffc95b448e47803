-- zorch.engine: the modules of lua/zorch/engine/, each loaded once with what it requires.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
for _, part in ipairs(zorch._parts "zorch.engine") do zorch._require(part) end -- the folder's files
return nil
