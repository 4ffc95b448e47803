-- zorch.models: the model families zorch ships as modules (zorch.models.llama:
-- Llama, Mistral, Qwen2), for the scripts of models/ and any host that loads a
-- Hugging Face folder. This file only makes the table; its parts fill it.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local models = {}
zorch.models = models
for _, part in ipairs(zorch._parts "zorch.models") do zorch._require(part) end -- the folder's files
return models
