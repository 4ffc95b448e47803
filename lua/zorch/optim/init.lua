-- zorch.optim: optimizers on the fused C kernels (one pass over each
-- parameter, PyTorch's formulas), one file an algorithm, and the
-- learning-rate schedulers (schedulers.lua). This file only makes the table.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = {}
zorch.optim = optim
for _, part in ipairs(zorch._parts "zorch.optim") do zorch._require(part) end -- the folder's files
return optim
