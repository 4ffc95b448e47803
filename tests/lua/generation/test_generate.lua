-- zorch.generate and the Scheduler against Transformers' greedy generate()
-- (tests/lua/generation/gen_generation.py): 8 prompts of different lengths in
-- one batch give each prompt's tokens as Transformers gives them one by one,
-- for Llama (GQA), Mistral (a sliding window shorter than the sequences),
-- Qwen2 and GPT-2; the same when the requests arrive at different steps of a
-- continuous Scheduler; a pool too small for a request refuses it, one too
-- small for all at once queues them; blocks go back when sequences finish.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local G = zorch.load("lua/generation/golden.safetensors")
local NAMES, N, NEW, EOS = {"llama_gqa", "mistral", "qwen2", "gpt2_tiny"}, 8, 12, 2
local function load(name)
  if name == "gpt2_tiny" then return zorch.models.gpt2.from_pretrained("lua/generation/gpt2_tiny") end
  return zorch.models.llama.from_pretrained("lua/llama/" .. name)
end

local function case(name)
  local prompts, want = {}, {}
  for i = 1, N do
    prompts[i] = G[("%s.prompt.%d"):format(name, i)]:totable()
    want[i] = G[("%s.out.%d"):format(name, i)]:totable()
  end
  return prompts, want
end
local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end
local function all_same(out, want)
  local bad = {}
  for i = 1, #want do
    if not same(out[i].tokens, want[i]) then
      bad[#bad + 1] = ("prompt %d: got {%s}, want {%s}"):format(i, table.concat(out[i].tokens, " "), table.concat(want[i], " "))
    end
  end
  for _, b in ipairs(bad) do tap.diag(b) end
  return #bad == 0
end

for _, name in ipairs(NAMES) do
  local model = load(name)
  model:eval()
  local prompts, want = case(name)
  local out = zorch.generate(model, prompts, {max_new_tokens = NEW, eos_token_id = EOS, block_size = 4, blocks = 128})
  tap.ok(all_same(out, want), name .. ": 8 ragged prompts in one batch give Transformers' greedy tokens, prompt for prompt")
  local reasons = true
  for i = 1, N do
    local r = out[i]
    local want_reason = (want[i][#want[i]] == EOS) and "stop" or "length"
    reasons = reasons and r.finish_reason == want_reason
  end
  tap.ok(reasons, name .. ": finish_reason is stop at the eos token, length at max_new_tokens")

  -- continuous batching: request i arrives at step 2i - 1, into a pool of 16 blocks (the longest needs 11)
  local s = zorch.generation.Scheduler.new(model, {block_size = 4, blocks = 16})
  local reqs, step, max_running, queued, leak = {}, 0, 0, false, false
  while #reqs < N or s:busy() do
    step = step + 1
    if #reqs < N and step % 2 == 1 then reqs[#reqs + 1] = s:add(prompts[#reqs + 1], {max_new_tokens = NEW, eos_token_id = EOS}) end
    s:step()
    max_running = math.max(max_running, #s.running)
    queued = queued or (#s.waiting > 0 and #s.running > 0)
    leak = leak or s.cache:free_blocks() - s.promised < 0
    if step > 500 then break end
  end
  leak = leak or s.cache:free_blocks() ~= s.cache.n_blocks or s.promised ~= 0
  tap.ok(all_same(reqs, want), name .. ": the same tokens when the 8 requests join a running Scheduler at different steps")
  tap.ok(max_running >= 2 and queued and not leak,
    ("%s: requests run together (%d at most), wait while the pool is promised, and give every block back"):format(name, max_running))
end

-- the memory budget: a request that can never fit is refused, the others still run
do
  local model = zorch.models.llama.from_pretrained("lua/llama/llama_gqa")
  local prompts, want = case("llama_gqa")
  local spec = model:cache_spec()
  local per_block = 2 * spec.layers * 4 * spec.kv_heads * spec.head_dim * 4
  local s = zorch.generation.Scheduler.new(model, {block_size = 4, budget = 10 * per_block + per_block // 2})
  tap.ok(s.cache.n_blocks == 10, "the budget in bytes gives the blocks it holds (" .. s.cache.n_blocks .. ")")
  local big = s:add(prompts[8], {max_new_tokens = NEW, eos_token_id = EOS}) -- 30 + 12 tokens: 11 blocks
  local small = s:add(prompts[2], {max_new_tokens = NEW, eos_token_id = EOS})
  tap.ok(big.done and big.finish_reason == "refused" and big.error:find("11 blocks", 1, true) ~= nil,
    "a request larger than the pool is refused with the reason: " .. tostring(big.error))
  s:step() -- the prefill of the 3-token prompt: one block of 4 taken, not the 4 its 15 tokens may need
  local held = #s.running[1].blocks
  local grew = 0
  while s:busy() do
    grew = math.max(grew, s.running[1] and #s.running[1].blocks or 0)
    s:step()
  end
  tap.ok(held == 1 and grew == 4 and s.cache:free_blocks() == 10,
    ("blocks are taken as the sequence grows (%d after the prefill, %d at most) and all given back"):format(held, grew))
  tap.ok(same(small.tokens, want[2]), "the request that fits still runs to its tokens")
  tap.raises("a budget below one block is an error naming it", function()
    zorch.generation.Scheduler.new(model, {budget = 10})
  end, "budget holds no block")
  tap.raises("a prompt id outside the vocabulary is an error", function() s:add({5, 96}) end, "prompt[2] = 96")
  tap.raises("an unknown option is named", function() s:add({5}, {top_z = 3}) end, "top_z")
end

tap.done()
