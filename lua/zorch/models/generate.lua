-- zorch.models.generate: sampling from a language model, for the model
-- scripts (models/gpt2.lua's key/value-cache loop picks its tokens here too).
--   models.pick(logits, {temperature = 1, top_k = 0})   the next index (from 1)
--   models.generate(model, ids, n, opts)                 ids with up to n more
-- models.generate reruns the model over the whole window for every token (no
-- key/value cache): simple, and right for any model(idx) -> (1, T, vocab).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local models = zorch.models

-- The next token (from 1) from logits (vocab,): greedy at temperature 0, else
-- a draw from softmax(logits / temperature) over the top-k (0: all).
function models.pick(logits, opts)
  local temperature, k = opts and opts.temperature or 1, opts and opts.top_k or 0
  logits = logits:float():to("cpu")
  if temperature == 0 then return zorch.argmax(logits):item() end
  logits = logits / temperature
  if k > 0 and k < logits:numel() then
    local kth = zorch.topk(logits, k)[k]:item()
    logits = logits:masked_fill(zorch.lt(logits, kth), -math.huge)
  end
  return zorch.multinomial(zorch.softmax(logits, 1), 1):item()
end

-- Appends up to n tokens to ids (a list of indices from 1) and returns it:
-- each from the logits of the last position over the last opts.context
-- tokens (default: all), picked by models.pick (opts.temperature, opts.top_k);
-- it stops after opts.eos (an index from 1) when given. opts.device: where
-- the input goes. Run it under zorch.no_grad with the model in eval mode.
function models.generate(model, ids, n, opts)
  opts = zorch._check_options("models.generate", opts, {"context", "temperature", "top_k", "eos", "device"}, 3)
  if type(ids) ~= "table" or #ids == 0 then error("models.generate: ids must be a non-empty list of token indices", 2) end
  local ctx = opts.context or math.huge
  for _ = 1, n do
    local first = math.max(1, #ids - ctx + 1)
    local logits = model(zorch.tensor({table.move(ids, first, #ids, 1, {})}, {dtype = "int64", device = opts.device}))
    local id = models.pick(logits[1][logits:size(2)], opts)
    ids[#ids + 1] = id
    if id == opts.eos then break end
  end
  return ids
end

return models
