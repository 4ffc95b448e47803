-- zorch.text: text around the tokenizers: zorch.text.jinja (the Jinja
-- subset chat templates use) and zorch.text.templates (chat templates by
-- name); tok:apply_chat_template is zorch.text.chat's.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
for _, part in ipairs(zorch._parts "zorch.text") do zorch._require(part) end -- the folder's files
local text = {jinja = zorch._require("zorch.text.jinja"), templates = zorch._require("zorch.text.chat").templates}
zorch.text = text
return text
