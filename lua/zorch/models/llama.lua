-- zorch.models.llama: the decoder of Hugging Face's Llama, Mistral and Qwen2
-- (RMSNorm, rotary embeddings, SwiGLU, grouped-query attention), one model for
-- the three model_types, named module for module as Transformers names them
-- (model.layers.N.self_attn.q_proj, ...), so a folder loads and saves name for name.
--   llama.new(cfg, {init_weights =, initializer_range =})  cfg: hf.decoder_config's table
--   llama.from_pretrained(dir)                             model, cfg, raw from a folder
--   llama.hf_config(raw, cfg)                              config.json for save_pretrained
--   llama.tensor_parallel(model, group)                    the model split over a tensor group
--   model(idx, ctx)                                        logits (B, T, vocab; vocab / T when split)
--   model:cache_spec()                                     {layers, kv_heads, head_dim, vocab, max_pos} for a KV cache
--                                                          (split: this rank's kv_heads)
-- idx holds token indices counted from 1 (Hugging Face's id t is row t + 1 of
-- embed_tokens). ctx (optional) describes packed batches:
--   ctx.positions  int64 (B, T), each token's position from 0 (the rotary angle);
--                  default 0 .. T-1 in every row
--   ctx.segments   int64 (B, T), a sequence id per token: a token attends only to
--                  earlier tokens of its own segment (no attention across packed sequences)
--   ctx.cache      a key/value cache's view of this forward (zorch.generation.PagedKVCache:
--                  cache:step): each layer's attention goes through cache:attend (docs/generation.md)
--   ctx.logits_at  int64 (K,): the 1-based rows of the B·T tokens whose logits are wanted;
--                  the logits are then (K, vocab) (a prefill needs each prompt's last only)
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn, hf = zorch._require "zorch.nn", zorch._require "zorch.io.hf"
zorch._require "zorch.parallel.tensorparallel" -- (nn.ColumnParallelLinear, ...: llama.tensor_parallel)
local llama = {}

local function check_ctx(idx, ctx)
  if ctx == nil then return {} end
  if type(ctx) ~= "table" then error(("llama: ctx must be a table {positions =, segments =}, got %s"):format(type(ctx)), 3) end
  for k, v in pairs(ctx) do
    if k == "cache" then
      if type(v) ~= "table" or type(v.attend) ~= "function" then
        error(("llama: ctx.cache must be a cache view with an attend method (PagedKVCache:step), got %s"):format(type(v)), 3)
      end
      goto continue
    end
    if k == "logits_at" then
      if not zorch.is_tensor(v) or v:dtype() ~= "int64" or v:dim() ~= 1 then
        error(("llama: ctx.logits_at must be int64 (K,) rows of the tokens, got %s"):format(
          zorch.is_tensor(v) and (v:dtype() .. " (" .. table.concat(v.shape, ", ") .. ")") or type(v)), 3)
      end
      goto continue
    end
    if k ~= "positions" and k ~= "segments" then
      error(("llama: ctx.%s is not an option (positions, segments, cache, logits_at)"):format(k), 3)
    end
    if not zorch.is_tensor(v) or v:dtype() ~= "int64" or v:dim() ~= 2 or v:size(1) ~= idx:size(1)
       or v:size(2) ~= idx:size(2) then
      error(("llama: ctx.%s must be int64 (%d, %d) as the tokens, got %s"):format(k, idx:size(1), idx:size(2),
        zorch.is_tensor(v) and (v:dtype() .. " (" .. table.concat(v.shape, ", ") .. ")") or type(v)), 3)
    end
    ::continue::
  end
  return ctx
end

-- softmax(q kᵀ / sqrt(D)) v over q (B, H, T, D) and k, v (B, Hkv, T, D), causal,
-- in one fused op: query head h reads key/value head h / (H / Hkv) in place; with
-- a window W query i sees keys i - W < j <= i only (Mistral's sliding window, as
-- Transformers masks it); with segments, keys of its own segment only.
-- With a cache, the keys and values so far come from it (layer: 1-based).
local function attention(q, k, v, ctx, c, layer)
  local o = {causal = true, window = c.sliding_window, segments = ctx.segments}
  if ctx.cache then return ctx.cache:attend(layer, q, k, v, o) end
  return zorch.attention(q, k, v, o)
end

local Attention = nn.Module:extend "LlamaAttention"
function Attention:init(c)
  self.q_proj = nn.Linear(c.dim, c.heads * c.head_dim, {bias = c.qkv_bias})
  self.k_proj = nn.Linear(c.dim, c.kv_heads * c.head_dim, {bias = c.qkv_bias})
  self.v_proj = nn.Linear(c.dim, c.kv_heads * c.head_dim, {bias = c.qkv_bias})
  self.o_proj = nn.Linear(c.heads * c.head_dim, c.dim, {bias = c.o_bias})
  rawset(self, "c", c)
end
function Attention:forward(x, cos, sin, ctx, layer)
  local c = rawget(self, "c")
  local B, T = x:size(1), x:size(2)
  local function heads(t, n) return t:view(B, T, n, c.head_dim):transpose(2, 3) end -- (B, n, T, D)
  local q = zorch.rope(heads(self.q_proj(x), c.heads), cos, sin)
  local k = zorch.rope(heads(self.k_proj(x), c.kv_heads), cos, sin)
  local v = heads(self.v_proj(x), c.kv_heads)
  local y = attention(q, k, v, ctx, c, layer)
  return self.o_proj(y:transpose(2, 3):reshape(B, T, c.heads * c.head_dim))
end

-- SwiGLU: down(silu(gate(x)) * up(x))
local MLP = nn.Module:extend "LlamaMLP"
function MLP:init(c)
  self.gate_proj = nn.Linear(c.dim, c.hidden, {bias = c.mlp_bias})
  self.up_proj = nn.Linear(c.dim, c.hidden, {bias = c.mlp_bias})
  self.down_proj = nn.Linear(c.hidden, c.dim, {bias = c.mlp_bias})
end
function MLP:forward(x) return self.down_proj(zorch.swiglu(self.gate_proj(x), self.up_proj(x))) end

-- Transformers' RMSNorm: x / sqrt(mean(x²) + eps) * weight, in one fused op
local RMSNorm = nn.Module:extend "LlamaRMSNorm"
function RMSNorm:init(dim, eps)
  self.weight = nn.Parameter(zorch.ones(dim))
  rawset(self, "eps", eps)
end
function RMSNorm:forward(x) return zorch.fused_rms_norm(x, self.weight, self.eps) end

local Layer = nn.Module:extend "LlamaDecoderLayer"
function Layer:init(c)
  self.self_attn = Attention(c)
  self.mlp = MLP(c)
  self.input_layernorm = RMSNorm(c.dim, c.eps)
  self.post_attention_layernorm = RMSNorm(c.dim, c.eps)
end
function Layer:forward(x, cos, sin, ctx, i)
  x = x + self.self_attn(self.input_layernorm(x), cos, sin, ctx, i)
  return x + self.mlp(self.post_attention_layernorm(x))
end

local Body = nn.Module:extend "LlamaModel"
function Body:init(c)
  self.embed_tokens = nn.Embedding(c.vocab, c.dim)
  local layers = {}
  for i = 1, c.layers do layers[i] = Layer(c) end
  self.layers = nn.ModuleList(layers)
  self.norm = RMSNorm(c.dim, c.eps)
end

local CausalLM = nn.Module:extend "LlamaForCausalLM"
llama.CausalLM = CausalLM
function CausalLM:init(c, opts)
  rawset(self, "cfg", c)
  self.model = Body(c)
  self.lm_head = nn.Linear(c.dim, c.vocab, {bias = false})
  if c.tie then self.lm_head.weight = self.model.embed_tokens.weight end -- one tensor, both uses
  if opts and opts.init_weights == false then return end -- (weights a folder is about to replace)
  -- Transformers' initialisation: N(0, initializer_range) matrices, zero biases, unit norms
  local std = opts and opts.initializer_range or 0.02
  zorch.no_grad(function()
    for name, p in self:named_parameters() do
      if name:match("norm%.weight$") then p:fill_(1)
      elseif p:dim() == 1 then p:zero_()
      else p:copy_(zorch.randn(p.shape) * std) end
    end
  end)
end

function CausalLM:forward(idx, ctx)
  ctx = check_ctx(idx, ctx)
  local T = idx:size(2)
  local x = self.model.embed_tokens(idx)
  local c = rawget(self, "cfg")
  local cos, sin = nn.rope_tables(ctx.positions or T, c.head_dim, {theta = c.rope.theta, scaling = c.rope.scaling,
                                                                   dtype = x:dtype(), device = x:device()})
  local ckpt = rawget(self, "checkpoint") -- a function(fn, x) recomputing fn in backward (training only)
  for i, layer in ipairs(self.model.layers) do
    if ckpt and zorch.is_grad_enabled() then x = ckpt(function(h) return layer(h, cos, sin, ctx, i) end, x)
    else x = layer(x, cos, sin, ctx, i) end
  end
  if ctx.logits_at then x = x:reshape(-1, x:size(3)):index_select(1, ctx.logits_at) end
  return self.lm_head(self.model.norm(x))
end

-- what a KV cache of this model holds per token and layer (zorch.generation)
function CausalLM:cache_spec()
  local c, g = rawget(self, "cfg"), rawget(self, "tensor_group")
  return {layers = c.layers, kv_heads = c.kv_heads // (g and g:size() or 1), head_dim = c.head_dim, vocab = c.vocab, max_pos = c.max_pos}
end

function llama.new(cfg, opts)
  return CausalLM(cfg, opts)
end

-- The folder's config and weights (a tied head comes with embed_tokens; old
-- Llama files keep rotary inv_freq buffers, which are recomputed, not read).
function llama.from_pretrained(dir)
  local raw = hf.config(dir)
  local cfg = hf.decoder_config(raw, dir .. "/config.json")
  local model = CausalLM(cfg, {init_weights = false})
  if raw.quantization_config ~= nil then -- a quantised folder (docs/quantization.md)
    local qo = nn.quantization_options(raw.quantization_config, dir .. "/config.json: quantization_config")
    qo.weights = false -- (the folder's buffers replace them)
    nn.quantize(model, qo)
  end
  hf.load(model, dir, {optional = cfg.tie and {"lm_head.weight"} or nil, ignore = {"%.rotary_emb%.inv_freq$"}})
  return model, cfg, raw
end

-- config.json for a folder of float32 weights, from the config it was read
-- from (or made of) and its normalised form.
local arch = {llama = "LlamaForCausalLM", mistral = "MistralForCausalLM", qwen2 = "Qwen2ForCausalLM"}
function llama.hf_config(raw, cfg)
  local out = {}
  for k, v in pairs(raw) do out[k] = v end
  out.architectures = {arch[cfg.model_type]}
  out.dtype, out.torch_dtype = "float32", "float32"
  return out
end

-- llama.tensor_parallel(model, group): Megatron's split of the model over the
-- T ranks of a tensor group, each rank keeping its slices of the weights the
-- model holds (so a folder loaded whole, or the same seed, gives every rank
-- the one-process model's parts). Per layer: q, k and v column-parallel by
-- heads (rank t: query heads t H/T .. (t+1) H/T - 1 and the Hkv/T key/value
-- heads they share), o_proj row-parallel; gate and up column-parallel, down
-- row-parallel; embed_tokens vocabulary-parallel and lm_head column-parallel
-- (tied: the embedding's slice), so the logits are this rank's vocabulary
-- range (nn.vocab_parallel_cross_entropy takes them; dist.gather_last joins
-- them). Call it before LoRA and Engine:prepare. Returns the model.
function llama.tensor_parallel(model, group)
  local fn = "llama.tensor_parallel"
  zorch.dist.check_model_split(fn, model, CausalLM, "llama model (llama.new, from_pretrained)", group)
  local c, T = rawget(model, "cfg"), group:size()
  for _, d in ipairs({{"num_attention_heads", c.heads}, {"num_key_value_heads", c.kv_heads},
                      {"intermediate_size", c.hidden}, {"vocab_size", c.vocab}}) do
    if d[2] % T ~= 0 then
      error(("%s: %s %d is not a multiple of the %d tensor-parallel ranks"):format(fn, d[1], d[2], T), 2)
    end
  end
  local function linear(l, name) -- (adapters are applied after the split, to the split layers)
    if getmetatable(l) ~= nn.Linear then
      error(("%s: %s is a %s, not an nn.Linear: split the model before nn.lora.apply"):format(fn, name,
        tostring(getmetatable(l) and getmetatable(l).__name)), 3)
    end
    return l
  end
  local function col(l, name) return nn.ColumnParallelLinear.from(linear(l, name), {group = group}) end
  local function row(l, name) return nn.RowParallelLinear.from(linear(l, name), {group = group}) end
  -- the attention's counts are this rank's heads (the rep query heads of a kv head stay together)
  local lc = {}
  for k, v in pairs(c) do lc[k] = v end
  lc.heads, lc.kv_heads = c.heads // T, c.kv_heads // T
  for i, layer in ipairs(model.model.layers) do
    local a, m = layer.self_attn, layer.mlp
    local at, mt = ("model.layers.%d.self_attn."):format(i - 1), ("model.layers.%d.mlp."):format(i - 1)
    a.q_proj, a.k_proj, a.v_proj = col(a.q_proj, at .. "q_proj"), col(a.k_proj, at .. "k_proj"), col(a.v_proj, at .. "v_proj")
    a.o_proj = row(a.o_proj, at .. "o_proj")
    rawset(a, "c", lc)
    m.gate_proj, m.up_proj = col(m.gate_proj, mt .. "gate_proj"), col(m.up_proj, mt .. "up_proj")
    m.down_proj = row(m.down_proj, mt .. "down_proj")
  end
  local emb = nn.VocabParallelEmbedding.from(model.model.embed_tokens, {group = group})
  local head = col(model.lm_head, "lm_head")
  model.model.embed_tokens = emb
  if c.tie then head.weight = emb.weight end -- (one tensor: the same rows of the vocabulary)
  model.lm_head = head
  rawset(model, "tensor_group", group)
  return model
end

zorch.models.llama = llama
return llama
