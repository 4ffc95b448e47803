-- Decode throughput of zorch.generation on a small random Llama (8 layers,
-- hidden 512, 8 heads over 4 key/value heads, vocab 8192): a 64-token prompt
-- per sequence, NEW greedy tokens, at batch 1 and 8. Prints one JSON line a
-- batch: the decode tokens/s (all sequences, after the prefill), the prefill
-- time, and the share of a decode step spent gathering K/V from the blocks.
-- zorch bench/generate.lua [NEW] [--model DIR] [--precision fp32|bf16|int8|int4]
--   [--threads N] [--batches 1,8] [--prompt 64]     (NEW: 64)
-- --model loads a Llama folder instead (scripts/bench-llamacpp.py runs it so).
local zorch = require "zorch"
local opt, pos = {}, {}
do
  local i = 1
  while i <= #arg do
    local k = arg[i]:match("^%-%-(.+)")
    if k then opt[k], i = arg[i + 1], i + 2 else pos[#pos + 1], i = arg[i], i + 1 end
  end
end
local new = math.tointeger(tonumber(pos[1] or "")) or 64
local P = math.tointeger(tonumber(opt.prompt or "")) or 64
if opt.threads then zorch.set_num_threads(math.tointeger(tonumber(opt.threads))) end
local batches = {}
for b in (opt.batches or "1,8"):gmatch("%d+") do batches[#batches + 1] = math.tointeger(tonumber(b)) end
local model, name
zorch.manual_seed(0)
if opt.model then
  model = zorch.models.llama.from_pretrained(opt.model)
  name = opt.model:match("([^/]+)/*$")
else
  local raw = {model_type = "llama", vocab_size = 8192, hidden_size = 512, intermediate_size = 1408,
         num_hidden_layers = 8, num_attention_heads = 8, num_key_value_heads = 4, max_position_embeddings = 1024,
         rms_norm_eps = 1e-5, rope_theta = 10000.0}
  model = zorch.models.llama.new(zorch.hf.decoder_config(raw, "bench"))
  name = "llama-8x512-gqa"
end
local precision = opt.precision or "fp32"
if precision == "bf16" then model:to("bfloat16")
elseif precision == "int8" then zorch.nn.quantize(model, {bits = 8})
elseif precision == "int4" then zorch.nn.quantize(model, {bits = 4, group = 32})
elseif precision ~= "fp32" then error("bench/generate.lua: --precision must be fp32, bf16, int8 or int4, got " .. precision) end
model:eval()
local spec = model:cache_spec()
local vocab, layers, kvh, hd = spec.vocab, spec.layers, spec.kv_heads, spec.head_dim

-- time spent in the cache's gather: wrap attend's index_select by timing a view's attend
local Cache = zorch.generation.PagedKVCache
for _, B in ipairs(batches) do
  local s = zorch.generation.Scheduler.new(model, {budget = 256 * 2 ^ 20})
  for b = 1, B do
    local p = {}
    for i = 1, P do p[i] = (b * 131 + i * 17) % vocab end
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
    for l = 1, layers do
      for _, pool in ipairs({s.cache.k[l], s.cache.v[l]}) do
        pool:index_select(1, rows):view(B, L, kvh, hd):transpose(2, 3):contiguous()
      end
    end
  end
  local gather = (zorch.clock() - g0) / 10
  local step = (t2 - t1) / steps
  print(([[{"bench": "generate_decode", "model": "%s", "precision": "%s", "threads": %d, "batch": %d, "prompt": %d, ]] ..
    [["new": %d, "decode_tokens_per_s": %.1f, "decode_step_ms": %.3f, "prefill_ms": %.2f, "prompt_tokens_per_s": %.1f, ]] ..
    [["gather_share_last_step": %.3f}]]):format(name, precision, zorch.get_num_threads(), B, P, new, B * steps / (t2 - t1), step * 1e3, (t1 - t0) * 1e3, B * P / (t1 - t0), gather / step))
  v = nil
end
