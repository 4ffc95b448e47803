-- Decode throughput of zorch.generation on a small random Llama (8 layers,
-- hidden 512, 8 heads over 4 key/value heads, vocab 8192): a 64-token prompt
-- per sequence, NEW greedy tokens, at batch 1 and 8. Prints one JSON line a
-- batch: the decode tokens/s (all sequences, after the prefill), the prefill
-- time, and the share of a decode step spent gathering K/V from the blocks.
-- zorch bench/generate.lua [NEW]   (NEW: 64)
local zorch = require "zorch"
local new = math.tointeger(tonumber(arg[1] or "")) or 64
local raw = {model_type = "llama", vocab_size = 8192, hidden_size = 512, intermediate_size = 1408,
             num_hidden_layers = 8, num_attention_heads = 8, num_key_value_heads = 4, max_position_embeddings = 1024,
             rms_norm_eps = 1e-5, rope_theta = 10000.0}
zorch.manual_seed(0)
local model = zorch.models.llama.new(zorch.hf.decoder_config(raw, "bench"))
model:eval()
local P = 64

-- time spent in the cache's gather: wrap attend's index_select by timing a view's attend
local Cache = zorch.generation.PagedKVCache
for _, B in ipairs({1, 8}) do
  local s = zorch.generation.Scheduler.new(model, {budget = 256 * 2 ^ 20})
  for b = 1, B do
    local p = {}
    for i = 1, P do p[i] = (b * 131 + i * 17) % 8192 end
    s:add(p, {max_new_tokens = new})
  end
  collectgarbage()
  local t0 = zorch.clock()
  s:step() -- the prefill (and each sequence's first token)
  local t1 = zorch.clock()
  local steps = 0
  while s:busy() do s:step(); steps = steps + 1 end
  local t2 = zorch.clock()
  -- the gather alone, at the decode's last length: B rows of P + new keys, each layer's K and V
  local v = s.cache:step({}, "decode")
  local L = P + new
  local rows = zorch.ones({B * L}, {dtype = "int64"})
  local g0 = zorch.clock()
  for _ = 1, 10 do
    for l = 1, raw.num_hidden_layers do
      for _, pool in ipairs({s.cache.k[l], s.cache.v[l]}) do
        pool:index_select(1, rows):view(B, L, 4, 64):transpose(2, 3):contiguous()
      end
    end
  end
  local gather = (zorch.clock() - g0) / 10
  local step = (t2 - t1) / steps
  print(([[{"bench": "generate_decode", "model": "llama-8x512-gqa", "batch": %d, "prompt": %d, "new": %d, ]] ..
    [["decode_tokens_per_s": %.1f, "decode_step_ms": %.3f, "prefill_ms": %.2f, "gather_share_last_step": %.3f}]]):format(
    B, P, new, B * steps / (t2 - t1), step * 1e3, (t1 - t0) * 1e3, gather / step))
  v = nil
end
