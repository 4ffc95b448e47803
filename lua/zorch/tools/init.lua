-- zorch.tools: the folder's modules, loaded with the others by luaopen_zorch.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
return nil
