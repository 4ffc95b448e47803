-- zorch.models.gpt2: GPT-2 (pre-LayerNorm blocks, learned positions, a tied
-- head), named as Hugging Face's GPT2LMHeadModel names it without the
-- "transformer." prefix (wte, wpe, h.N.attn.c_attn, ...); models/gpt2.lua
-- trains it (docs/gpt2.md).
--   gpt2.new(cfg)                  cfg {layers, heads, dim, context, vocab}, GPT-2's initialisation
--   gpt2.Block(cfg), gpt2.init_block(b, cfg)   one block and its initialisation
--   gpt2.from_hf(tensors)          the state dict of Hugging Face tensors (Conv1D transposed)
--   gpt2.from_pretrained(dir)      model, cfg from a folder (config.json, model.safetensors)
--   gpt2.tensor_parallel(model, g) the model split over a tensor group (gpt2.tp_block: one block)
--   model(idx, ctx)                logits (B, T, vocab); idx counted from 1
-- ctx (optional): positions int64 (B, T) from 0 (default 0 .. T-1), segments
-- int64 (B, T) (packed sequences), cache (a KV cache's view, docs/generation.md),
-- logits_at int64 (K,) (the 1-based rows of the B·T tokens whose logits are
-- wanted: logits (K, vocab)).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn, hf = zorch._require "zorch.nn", zorch._require "zorch.io.hf"
zorch._require "zorch.parallel.tensorparallel" -- (nn.ColumnParallelLinear, ...: gpt2.tensor_parallel)
local gpt2 = {}

local CausalSelfAttention = nn.Module:extend "CausalSelfAttention"
function CausalSelfAttention:init(c)
  self.c_attn = nn.Linear(c.dim, 3 * c.dim) -- q, k and v in one matmul
  self.c_proj = nn.Linear(c.dim, c.dim)
  rawset(self, "n_head", c.heads)
end
function CausalSelfAttention:forward(x, ctx, layer)
  local B, T = x:size(1), x:size(2)
  local H = self.n_head -- (this rank's heads under tensor parallelism)
  local qkv = self.c_attn(x)
  local C = qkv:size(3) // 3 -- (and their width)
  local function heads(t) return t:reshape(B, T, H, C // H):transpose(2, 3) end -- (B, H, T, D)
  local q = heads(qkv:narrow(3, 1, C))
  local k = heads(qkv:narrow(3, C + 1, C))
  local v = heads(qkv:narrow(3, 2 * C + 1, C))
  local o = {causal = true, segments = ctx and ctx.segments}
  local y = ctx and ctx.cache and ctx.cache:attend(layer, q, k, v, o) or zorch.attention(q, k, v, o)
  return self.c_proj(y:transpose(2, 3):reshape(B, T, C)) -- heads side by side again
end

local MLP = nn.Module:extend "MLP"
function MLP:init(c)
  self.c_fc = nn.Linear(c.dim, 4 * c.dim, {activation = "gelu_tanh"}) -- the GELU with its GEMM
  self.c_proj = nn.Linear(4 * c.dim, c.dim)
end
function MLP:forward(x) return self.c_proj(self.c_fc(x)) end

-- Pre-LayerNorm: each sublayer reads a normalised copy and adds to the residual stream.
local Block = nn.Module:extend "Block"
gpt2.Block = Block
function Block:init(c)
  self.ln_1 = nn.LayerNorm(c.dim)
  self.attn = CausalSelfAttention(c)
  self.ln_2 = nn.LayerNorm(c.dim)
  self.mlp = MLP(c)
end
function Block:forward(x, ctx, layer)
  x = x + self.attn(self.ln_1(x), ctx, layer)
  return x + self.mlp(self.ln_2(x))
end

-- GPT-2's initialisation of a block: weights N(0, 0.02), the projections into
-- the residual stream scaled down by sqrt(2 * layers) (two per block), biases 0;
-- LayerNorms start as the identity (as nn.LayerNorm does).
function gpt2.init_block(b, c)
  zorch.no_grad(function()
    for _, lin in ipairs({b.attn.c_attn, b.attn.c_proj, b.mlp.c_fc, b.mlp.c_proj}) do
      local proj = lin == b.attn.c_proj or lin == b.mlp.c_proj
      lin.weight:copy_(zorch.randn(lin.weight.shape) * (proj and 0.02 / math.sqrt(2 * c.layers) or 0.02))
      lin.bias:zero_()
    end
  end)
  return b
end

local GPT = nn.Module:extend "GPT"
gpt2.GPT = GPT
function GPT:init(c, opts)
  rawset(self, "cfg", c)
  self.wte = nn.Embedding(c.vocab, c.dim)   -- token embeddings
  self.wpe = nn.Embedding(c.context, c.dim) -- position embeddings
  local blocks = {}
  for i = 1, c.layers do blocks[i] = Block(c) end
  self.h = nn.ModuleList(blocks)
  self.ln_f = nn.LayerNorm(c.dim)
  -- the output head shares the token embedding's matrix (weight tying): one
  -- tensor, listed once by parameters(), its gradient the sum of both uses
  self.lm_head = nn.Linear(c.dim, c.vocab, {bias = false})
  self.lm_head.weight = self.wte.weight
  if opts and opts.init_weights == false then return end
  zorch.no_grad(function()
    self.wte.weight:copy_(zorch.randn(self.wte.weight.shape) * 0.02)
    self.wpe.weight:copy_(zorch.randn(self.wpe.weight.shape) * 0.02)
  end)
  for _, b in ipairs(self.h) do gpt2.init_block(b, c) end
end

local CTX = {positions = true, segments = true, cache = true, logits_at = true}
function GPT:forward(idx, ctx)
  ctx = ctx or {}
  if type(ctx) ~= "table" then error(("GPT: ctx must be a table {positions =, segments =, cache =}, got %s"):format(type(ctx)), 2) end
  for k in pairs(ctx) do
    if not CTX[k] then error(("GPT: ctx.%s is not an option (positions, segments, cache, logits_at)"):format(k), 2) end
  end
  local T, c = idx:size(2), rawget(self, "cfg")
  local pos = ctx.positions
  local last = pos and pos:max():item() or T - 1
  if last >= c.context then
    error(("GPT: %d positions do not fit the context of %d"):format(last + 1, c.context), 2)
  end
  local pe = pos and self.wpe(pos + 1) or self.wpe(zorch.arange(1, T + 1, {device = idx:device()}))
  local x = self.wte(idx) + pe
  local ckpt = rawget(self, "checkpoint") -- (training only)
  for i, block in ipairs(self.h) do
    if ckpt and not ctx.cache and zorch.is_grad_enabled() then x = ckpt(function(h) return block(h, ctx, i) end, x)
    else x = block(x, ctx, i) end
  end
  if ctx.logits_at then x = x:reshape(-1, x:size(3)):index_select(1, ctx.logits_at) end
  return self.lm_head(self.ln_f(x))
end

function GPT:cache_spec()
  local c, g = rawget(self, "cfg"), rawget(self, "tensor_group")
  return {layers = c.layers, kv_heads = c.heads // (g and g:size() or 1), head_dim = c.dim // c.heads, vocab = c.vocab, max_pos = c.context}
end

function gpt2.new(cfg, opts) return GPT(cfg, opts) end

-- Megatron's layers in place of the full ones, each rank keeping its slices of
-- the weights the model was made with: per block, the fused q, k, v matmul
-- column-parallel by head groups and the output projection row-parallel (one
-- all-reduce), the MLP's c_fc column- and c_proj row-parallel (one more); the
-- token embedding split by vocabulary, with the tied head reading its slice
-- (the logits are this rank's vocabulary range).
function gpt2.tp_block(b, g)
  local heads = rawget(b.attn, "n_head")
  if heads % g:size() ~= 0 then
    error(("gpt2.tp_block: %d heads are not a multiple of the %d tensor-parallel ranks"):format(heads, g:size()), 2)
  end
  b.attn.c_attn = nn.ColumnParallelLinear.from(b.attn.c_attn, {group = g, blocks = 3})
  b.attn.c_proj = nn.RowParallelLinear.from(b.attn.c_proj, {group = g})
  rawset(b.attn, "n_head", heads // g:size())
  b.mlp.c_fc = nn.ColumnParallelLinear.from(b.mlp.c_fc, {group = g})
  b.mlp.c_proj = nn.RowParallelLinear.from(b.mlp.c_proj, {group = g})
  return b
end

function gpt2.tensor_parallel(m, g)
  local fn = "gpt2.tensor_parallel"
  zorch.dist.check_model_split(fn, m, GPT, "gpt2 model (gpt2.new, from_pretrained)", g)
  local c = rawget(m, "cfg")
  if c.heads % g:size() ~= 0 or c.vocab % g:size() ~= 0 then
    error(("%s: heads %d and vocab %d must be multiples of the %d tensor-parallel ranks"):format(fn, c.heads, c.vocab, g:size()), 2)
  end
  for _, b in ipairs(m.h) do gpt2.tp_block(b, g) end
  m.wte = nn.VocabParallelEmbedding.from(m.wte, {group = g})
  local head = nn.ColumnParallelLinear.from(m.lm_head, {group = g})
  head.weight = m.wte.weight -- (tied: the same slice of rows)
  m.lm_head = head
  rawset(m, "tensor_group", g)
  return m
end

-- Hugging Face's tensors as this model's state dict: the "transformer." prefix
-- dropped, the attention's mask buffers left out, Conv1D's (in, out) weights
-- transposed to a Linear's, the tied head from wte.
local CONV1D = {"%.c_attn%.weight$", "%.c_proj%.weight$", "%.c_fc%.weight$"}
function gpt2.from_hf(tensors)
  local sd = {}
  for name, t in pairs(tensors) do
    name = name:gsub("^transformer%.", "")
    if name ~= "lm_head.weight" and not name:match("%.attn%.bias$") and not name:match("%.attn%.masked_bias$") then
      for _, p in ipairs(CONV1D) do
        if name:match(p) then t = t:t():contiguous() break end
      end
      sd[name] = t:float()
    end
  end
  sd["lm_head.weight"] = sd["wte.weight"]
  return sd
end

-- A GPT2LMHeadModel folder: its config.json and model.safetensors.
function gpt2.from_pretrained(dir)
  local raw = hf.config(dir)
  local function int(k)
    local v = raw[k]
    if math.type(v) ~= "integer" or v < 1 then
      error(("gpt2.from_pretrained: %s/config.json: %s must be a positive integer, got %s"):format(dir, k, tostring(v)), 3)
    end
    return v
  end
  local cfg = {layers = int("n_layer"), heads = int("n_head"), dim = int("n_embd"), context = int("n_positions"),
               vocab = int("vocab_size")}
  local model = GPT(cfg, {init_weights = false})
  model:load_state_dict(gpt2.from_hf(zorch.load(dir .. "/model.safetensors")))
  return model, cfg, raw
end

zorch.models.gpt2 = gpt2
return gpt2
