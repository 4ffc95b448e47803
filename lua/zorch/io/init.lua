-- zorch.io: readers and writers of other programs' model formats (zorch.hf:
-- Hugging Face folders), each file loaded once with what it requires.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
for _, part in ipairs(zorch._parts "zorch.io") do zorch._require(part) end -- the folder's files
return nil
