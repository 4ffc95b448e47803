-- zorch.generation: text generation with the decoder models (docs/generation.md):
-- the sampler, the paged KV cache, the continuous-batching Scheduler, and
-- zorch.generate, a loop over a Scheduler.
--   zorch.generate(model, prompts, opts)  a result per prompt: {tokens, text, logprobs, top_logprobs, finish_reason}
--   generation.from_pretrained(dir)       the model of a folder, by its config.json's model_type
--   generation.eos_token_id(dir)          the folder's end-of-text id(s)
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local generation = {}
zorch.generation = generation
for _, part in ipairs(zorch._parts "zorch.generation") do zorch._require(part) end -- the folder's files

-- the scheduler's own options; the rest are each request's
local SCHED_KEYS = {budget = true, blocks = true, block_size = true, tokenizer = true, max_batch = true,
                    prefill_chunk = true}

-- prompts: a list of prompts (each a list of 0-based ids or a string) or one
-- prompt; opts: the Scheduler's and the requests' options in one table.
function zorch.generate(model, prompts, opts)
  local fn = "zorch.generate"
  opts = opts or {}
  if type(opts) ~= "table" then error(fn .. ": argument 3 must be a table of options", 2) end
  if type(prompts) == "string" or (type(prompts) == "table" and math.type(prompts[1]) == "integer") then
    prompts = {prompts}
  end
  if type(prompts) ~= "table" or #prompts == 0 then
    error(fn .. ": argument 2 must be a prompt or a non-empty list of prompts (token id lists or strings)", 2)
  end
  local so, ro = {}, {}
  for k, v in pairs(opts) do
    if SCHED_KEYS[k] then so[k] = v else ro[k] = v end
  end
  local ids = {}
  for i, p in ipairs(prompts) do -- (strings encoded once, here)
    ids[i] = type(p) == "string" and so.tokenizer and so.tokenizer:encode(p) or p
  end
  if so.budget == nil and so.blocks == nil then -- a pool of what these prompts can need at most, not the default 256 MiB
    local bs, n, new = so.block_size or 16, 0, ro.max_new_tokens or 16
    for _, p in ipairs(ids) do
      if type(p) == "table" and math.type(new) == "integer" then n = n + (#p + new + bs - 1) // bs end
    end
    if n > 0 then so.blocks = n end
  end
  local s = generation.Scheduler.new(model, so)
  local out = {}
  for i, p in ipairs(ids) do out[i] = s:add(p, ro) end
  while s:busy() do s:step() end
  return out
end

-- the end-of-text id(s) of a folder: generation_config.json's, else config.json's (nil: none)
function generation.eos_token_id(dir)
  for _, name in ipairs({"/generation_config.json", "/config.json"}) do
    local f = io.open(dir .. name, "rb")
    if f then
      local ok, v = pcall(zorch.json.decode, f:read("a"))
      f:close()
      if ok and type(v) == "table" and v.eos_token_id ~= nil then return v.eos_token_id end
    end
  end
end

-- gpt2 -> zorch.models.gpt2, llama / mistral / qwen2 -> zorch.models.llama
function generation.from_pretrained(dir)
  if type(dir) ~= "string" then error("generation.from_pretrained: argument 1 must be a folder (a string)", 2) end
  local raw = zorch.hf.config(dir)
  local family = raw.model_type == "gpt2" and zorch.models.gpt2 or zorch.models.llama
  local model = family.from_pretrained(dir)
  model:eval()
  return model
end

return generation
