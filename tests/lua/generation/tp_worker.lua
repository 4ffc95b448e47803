-- zorch.generate with a model split over the ranks of zorch launch, for
-- test_generate_tp.lua:
--   zorch launch -n N generation/tp_worker.lua NAME OUT
-- NAME: a model of golden.safetensors (llama_gqa, gpt2_tiny); every rank
-- generates the 8 prompts greedily and seeded-sampled and writes OUT.RANK:
-- "greedy I ids...", "sampled I ids..." and "chunked I ids..." (greedy, a
-- prefill in chunks of 4) lines.
local zorch = require "zorch"
local name, out = arg[1], arg[2]
local G = zorch.load("lua/generation/golden.safetensors")
local model = name == "gpt2_tiny" and zorch.models.gpt2.from_pretrained("lua/generation/gpt2_tiny")
  or zorch.models.llama.from_pretrained("lua/llama/" .. name)
local world = zorch.dist.world()
if world:size() > 1 then
  local family = name == "gpt2_tiny" and zorch.models.gpt2 or zorch.models.llama
  family.tensor_parallel(model, world)
end
model:eval()
local prompts = {}
for i = 1, 8 do prompts[i] = G[("%s.prompt.%d"):format(name, i)]:totable() end
local f = assert(io.open(("%s.%d"):format(out, world:rank()), "w"))
local function put(kind, res)
  for i, r in ipairs(res) do f:write(kind, " ", i, " ", table.concat(r.tokens, " "), "\n") end
end
-- (block_size 4 and a small pool: sequences span several blocks of this rank's heads)
put("greedy", zorch.generate(model, prompts, {max_new_tokens = 12, eos_token_id = 2, block_size = 4, blocks = 128}))
put("sampled", zorch.generate(model, prompts, {max_new_tokens = 12, block_size = 4, blocks = 128, do_sample = true,
  temperature = 0.9, top_k = 20, seed = 7}))
-- (prompts of more than 4 tokens prefilled in chunks of 4 over the split cache)
put("chunked", zorch.generate(model, prompts, {max_new_tokens = 12, eos_token_id = 2, block_size = 4, blocks = 128,
  prefill_chunk = 4}))
f:close()
