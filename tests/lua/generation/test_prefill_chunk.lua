-- Chunked prefill: a prompt longer than prefill_chunk goes through the paged
-- cache in chunks, each over the keys of the chunks before it; at float32 the
-- tokens equal a one-pass prefill's and every step's log-probabilities over
-- the whole vocabulary agree within 1e-5, for Llama (GQA), Mistral (a sliding
-- window shorter than the prompt) and GPT-2; short prompts around it pack.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local function load(name)
  if name == "gpt2_tiny" then return zorch.models.gpt2.from_pretrained("lua/generation/gpt2_tiny") end
  return zorch.models.llama.from_pretrained("lua/llama/" .. name)
end

for _, name in ipairs({"llama_gqa", "mistral", "gpt2_tiny"}) do
  local model = load(name)
  model:eval()
  local V = model:cache_spec().vocab
  local long, short = {}, {}
  for i = 1, 41 do long[i] = (i * 37 + 11) % V end
  for i = 1, 5 do short[i] = (i * 13 + 2) % V end
  local prompts = {short, long, {7, 8}}
  local function gen(chunk)
    return zorch.generate(model, prompts, {max_new_tokens = 8, block_size = 4, prefill_chunk = chunk, top_logprobs = V})
  end
  local one, chunked = gen(512), gen(8) -- (41 tokens: chunks of 8, 8, 8, 8, 8 and 1)
  local same, worst = true, 0
  for p = 1, #prompts do
    same = same and table.concat(one[p].tokens, " ") == table.concat(chunked[p].tokens, " ")
    for t = 1, #one[p].top_logprobs do
      local a, b = {}, {}
      for _, e in ipairs(one[p].top_logprobs[t]) do a[e.id] = e.logprob end
      for _, e in ipairs(chunked[p].top_logprobs[t]) do b[e.id] = e.logprob end
      for id = 0, V - 1 do worst = math.max(worst, math.abs(a[id] - b[id])) end
    end
  end
  tap.ok(same and worst <= 1e-5 and #one[2].tokens == 8,
    ("%s: a 41-token prompt in chunks of 8 gives one pass's tokens, log-probabilities within %.2g"):format(name, worst))
end

tap.raises("prefill_chunk must be a positive integer", function()
  zorch.generate(load("llama_gqa"), {1, 2}, {prefill_chunk = 0})
end, "prefill_chunk must be a positive integer")

tap.done()
