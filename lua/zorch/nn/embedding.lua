-- zorch.nn.embedding: Embedding.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local check_options = zorch._require("zorch.util").check_options
local M = zorch._require "zorch.nn.module"
local Module, check_int = M.Module, M.check_int

nn.Embedding = Module:extend "nn.Embedding"
-- Embedding(num, dim, {padding_idx}): as PyTorch, the padding row (1-based)
-- starts at zeros and never gets a gradient.
function nn.Embedding:init(num, dim, opts)
  check_int("nn.Embedding", "num_embeddings", num)
  check_int("nn.Embedding", "embedding_dim", dim)
  opts = check_options("nn.Embedding", opts, {"padding_idx"}, 4)
  local pad = opts.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > num or pad < -num then
      error(("nn.Embedding: padding_idx must be an integer in 1..%d or -%d..-1, got %s"):format(num, num, tostring(pad)), 3)
    end
    if pad < 0 then pad = num + 1 + pad end
  end
  self.padding_idx = pad
  local w = zorch.randn(num, dim)
  if pad then w[pad] = 0 end
  self.weight = nn.Parameter(w)
end
function nn.Embedding:forward(idx)
  local pad = rawget(self, "padding_idx")
  if zorch.is_tensor(idx) then
    local dt = idx:dtype()
    if dt == "int32" or dt == "uint8" or dt == "int8" or dt == "int16" then idx = idx:to("int64") end -- as torch takes int32
  end
  local out = zorch.embedding(self.weight, idx)
  if not pad or not zorch.is_grad_enabled() or not self.weight.requires_grad then return out end
  -- the padding positions read a detached weight: same values, no gradient to its row
  local at = idx:eq(zorch.full_like(idx, pad)):unsqueeze(-1)
  return zorch.where(at, zorch.embedding(self.weight:detach(), idx), out)
end
