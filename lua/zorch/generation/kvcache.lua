-- zorch.generation.PagedKVCache: every layer's keys and values of the live
-- sequences in one pool of fixed-size blocks, preallocated to a memory budget
-- (vLLM's paging): a sequence holds a block table, gets a block when it grows
-- past its last one and gives all back when it finishes, so sequences of any
-- length share the pool without fragmenting it.
--   PagedKVCache.new{layers, kv_heads, head_dim, block_size = 16, budget = bytes | blocks =, dtype, device}
--   cache:reserve(seq, n)   blocks for n more tokens of seq (a table); false, why when the pool is short
--   cache:free(seq)         its blocks back to the pool
--   cache:step(seqs, kind)  the ctx.cache of one forward: "prefill" (the seqs' prompts packed in one
--                           row), "chunk" (one seq's next prompt tokens, after those cached) or
--                           "decode" (one token of each seq, a row each)
-- A model's attention calls view:attend(layer, q, k, v, opts): the new keys and
-- values are written into their blocks and the output is computed over the
-- sequence's keys so far, gathered from its blocks into contiguous K/V for
-- zorch.attention.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local Cache = {}
Cache.__index = Cache
Cache.__name = "zorch.generation.PagedKVCache"

local BYTES = {float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2}

function Cache.new(o)
  local fn = "PagedKVCache.new"
  if type(o) ~= "table" then error(fn .. ": argument 1 must be a table {layers, kv_heads, head_dim, budget | blocks}", 2) end
  for _, k in ipairs({"layers", "kv_heads", "head_dim"}) do
    if math.type(o[k]) ~= "integer" or o[k] < 1 then error(("%s: %s must be a positive integer, got %s"):format(fn, k, tostring(o[k])), 2) end
  end
  local bs, dtype = o.block_size or 16, o.dtype or "float32"
  if math.type(bs) ~= "integer" or bs < 1 then error(fn .. ": block_size must be a positive integer, got " .. tostring(bs), 2) end
  if not BYTES[dtype] then error(fn .. ": dtype must be a float dtype, got " .. tostring(dtype), 2) end
  local per_block = 2 * o.layers * bs * o.kv_heads * o.head_dim * BYTES[dtype]
  local n = o.blocks
  if n == nil then
    if type(o.budget) ~= "number" or o.budget <= 0 then error(fn .. ": budget (bytes) or blocks must be given", 2) end
    n = math.floor(o.budget / per_block)
  end
  if math.type(n) ~= "integer" or n < 1 then
    error(("%s: the budget holds no block (a block of %d tokens is %d bytes over %d layers)"):format(fn, bs, per_block, o.layers), 2)
  end
  local self = setmetatable({block_size = bs, n_blocks = n, block_bytes = per_block, kv_heads = o.kv_heads,
                             head_dim = o.head_dim, k = {}, v = {}, free_list = {}}, Cache)
  for l = 1, o.layers do -- a pool per layer: (blocks · block_size, Hkv, D), slot s of block b is row (b-1)·bs + s
    self.k[l] = zorch.zeros({n * bs, o.kv_heads, o.head_dim}, {dtype = dtype, device = o.device})
    self.v[l] = zorch.zeros({n * bs, o.kv_heads, o.head_dim}, {dtype = dtype, device = o.device})
  end
  for b = n, 1, -1 do self.free_list[#self.free_list + 1] = b end -- (popped from the end: block 1 first)
  return self
end

function Cache:free_blocks() return #self.free_list end

-- the blocks a sequence of n tokens needs
function Cache:blocks_for(n) return (n + self.block_size - 1) // self.block_size end

-- Blocks for n more tokens of seq (seq.blocks, seq.len: its table and length);
-- all or none.
function Cache:reserve(seq, n)
  seq.blocks, seq.len = seq.blocks or {}, seq.len or 0
  local need = self:blocks_for(seq.len + n) - #seq.blocks
  if need > #self.free_list then
    return false, ("needs %d blocks of %d tokens, %d of %d free"):format(need, self.block_size, #self.free_list, self.n_blocks)
  end
  for _ = 1, need do
    seq.blocks[#seq.blocks + 1] = table.remove(self.free_list)
  end
  return true
end

function Cache:free(seq)
  for i = #(seq.blocks or {}), 1, -1 do self.free_list[#self.free_list + 1] = seq.blocks[i] end
  seq.blocks, seq.len = {}, 0
end

-- the pool row of token p (0-based) of seq
local function slot(cache, seq, p)
  local bs = cache.block_size
  return (seq.blocks[p // bs + 1] - 1) * bs + p % bs + 1
end

-- write rows src (n, Hkv, D) as tokens from..from+n-1 of seq: one copy per block run
local function write(cache, pool, seq, from, src)
  local bs, n, i = cache.block_size, src:size(1), 0
  while i < n do
    local p = from + i
    local run = math.min(bs - p % bs, n - i)
    pool:narrow(1, slot(cache, seq, p), run):copy_(src:narrow(1, i + 1, run))
    i = i + run
  end
end

local View = {}
View.__index = View

-- The ctx.cache of one forward over seqs. Prefill: the tokens are the seqs'
-- new tokens packed in one row (seq.pending of them each, the cache empty
-- before); decode: one token per seq, a row each. The lengths grow when the
-- forward is done (view:commit()).
function Cache:step(seqs, kind)
  local v = setmetatable({cache = self, seqs = seqs, kind = kind}, View)
  if kind == "decode" then -- the slots each row reads, left-padded to the longest (pads masked)
    local L = 0
    for _, s in ipairs(seqs) do L = math.max(L, s.len + 1) end
    local rows, keep = {}, {}
    for b, s in ipairs(seqs) do
      local pad = L - (s.len + 1)
      for j = 1, L do
        local p = j - 1 - pad
        rows[#rows + 1] = p >= 0 and slot(self, s, p) or 1
        keep[#keep + 1] = p >= 0
      end
    end
    v.L = L
    v.rows = zorch.tensor(rows, {dtype = "int64"}):to(self.k[1]:device())
    v.mask = zorch.tensor(keep):view(#seqs, 1, 1, L):to(self.k[1]:device())
  end
  return v
end

-- y = attention over the keys so far of each sequence, after writing k, v:
-- q (B, H, T, D), k and v (B, Hkv, T, D) of this forward's tokens.
function View:attend(layer, q, k, v, opts)
  local c = self.cache
  local K, Vp = c.k[layer], c.v[layer]
  if not K then error(("PagedKVCache: layer %d is not one of the cache's %d"):format(layer, #c.k), 3) end
  if self.kind == "prefill" then
    local ks, vs = k[1]:transpose(1, 2), v[1]:transpose(1, 2) -- (N, Hkv, D)
    local off = 0
    for _, s in ipairs(self.seqs) do
      write(c, K, s, s.len, ks:narrow(1, off + 1, s.pending))
      write(c, Vp, s, s.len, vs:narrow(1, off + 1, s.pending))
      off = off + s.pending
    end
    return zorch.attention(q, k, v, {causal = true, window = opts.window, segments = opts.segments})
  end
  if self.kind == "chunk" then -- one sequence's next tokens over its keys so far (bottom-right causal)
    local s, n = self.seqs[1], k:size(3)
    write(c, K, s, s.len, k[1]:transpose(1, 2))
    write(c, Vp, s, s.len, v[1]:transpose(1, 2))
    local rows = {}
    for p = 0, s.len + n - 1 do rows[p + 1] = slot(c, s, p) end
    local idx = zorch.tensor(rows, {dtype = "int64"}):to(K:device())
    local function gather(pool) return pool:index_select(1, idx):transpose(1, 2):unsqueeze(1) end -- (1, Hkv, L, D)
    return zorch.attention(q, gather(K), gather(Vp), {causal = true, window = opts.window})
  end
  local B = #self.seqs
  local ks, vs = k:select(3, 1), v:select(3, 1) -- (B, Hkv, D)
  for b, s in ipairs(self.seqs) do
    write(c, K, s, s.len, ks:narrow(1, b, 1))
    write(c, Vp, s, s.len, vs:narrow(1, b, 1))
  end
  local function gather(pool)
    return pool:index_select(1, self.rows):view(B, self.L, c.kv_heads, c.head_dim):transpose(2, 3):contiguous()
  end
  return zorch.attention(q, gather(K), gather(Vp), {causal = true, window = opts.window, mask = self.mask})
end

-- the forward is done: the sequences hold its tokens
function View:commit()
  for _, s in ipairs(self.seqs) do s.len = s.len + (self.kind == "decode" and 1 or s.pending) end
end

zorch.generation.PagedKVCache = Cache
return Cache
