-- zorch.generation.Scheduler: continuous batching over one model and one
-- paged KV cache. Requests wait in a queue; each step admits those whose
-- blocks the pool can promise (prompt + max_new_tokens), prefills them in one
-- packed forward (segments keep them apart, positions restart at 0), and
-- decodes one token of every running sequence in one batched forward; a
-- finished sequence leaves at once and gives its blocks back. A request that
-- can never fit the pool is refused (finish_reason "refused"), never a crash.
-- A prompt longer than prefill_chunk is prefilled in chunks through the cache.
-- A model split by tensor_parallel runs the same steps on every rank of its
-- group: the cache holds the rank's heads, the logits are gathered, and every
-- rank takes the first rank's ids.
--   Scheduler.new(model, {budget = bytes | blocks =, block_size = 16, tokenizer =, max_batch = 64, prefill_chunk = 512})
--   s:add(prompt, opts)   a request: prompt a list of 0-based ids or a string (with the tokenizer)
--   s:step()              one step; the requests that finished in it
--   s:busy()              whether a request waits or runs
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local sampler = zorch._require "zorch.generation.sampler"
local Cache = zorch._require "zorch.generation.kvcache"
local detok = zorch._require "zorch.generation.detok"
local Scheduler = {}
Scheduler.__index = Scheduler
Scheduler.__name = "zorch.generation.Scheduler"

local REQUEST_KEYS = {max_new_tokens = true, stop_token_ids = true, eos_token_id = true, stop = true, on_token = true}

function Scheduler.new(model, o)
  local fn = "Scheduler.new"
  o = o or {}
  if type(model) ~= "table" or type(model.cache_spec) ~= "function" then
    error(fn .. ": argument 1 must be a model with a cache (zorch.models.llama, zorch.models.gpt2)", 2)
  end
  local spec = model:cache_spec()
  local p = model:parameters()[1]
  local cache = o.cache or Cache.new{layers = spec.layers, kv_heads = spec.kv_heads, head_dim = spec.head_dim,
    block_size = o.block_size, budget = o.budget or (o.blocks == nil and 256 * 2 ^ 20 or nil), blocks = o.blocks,
    dtype = p and p:dtype() or "float32", device = p and p:device() or nil}
  local chunk = o.prefill_chunk or 512
  if math.type(chunk) ~= "integer" or chunk < 1 then
    error(fn .. ": prefill_chunk must be a positive integer (tokens a prefill forward), got " .. tostring(chunk), 2)
  end
  local group = rawget(model, "tensor_group") -- (a model split by heads: the cache holds this rank's)
  if group and group:size() == 1 then group = nil end
  return setmetatable({model = model, cache = cache, spec = spec, group = group, tokenizer = o.tokenizer, max_batch = o.max_batch or 64,
                       prefill_chunk = chunk,
                       waiting = {}, running = {}, promised = 0, n = 0, steps = 0}, Scheduler)
end

local function id_list(v, what, fn)
  if v == nil then return {} end
  if math.type(v) == "integer" then return {v} end
  if type(v) ~= "table" then error(("%s: %s must be an id or a list of ids, got %s"):format(fn, what, type(v)), 4) end
  for i, x in ipairs(v) do
    if math.type(x) ~= "integer" then error(("%s: %s[%d] must be an integer id, got %s"):format(fn, what, i, tostring(x)), 4) end
  end
  return v
end

-- A request (returned; its fields fill in as it runs): tokens (the output's
-- 0-based ids), text (with a tokenizer), logprobs, top_logprobs, finish_reason
-- ("stop", "length", "refused"), error (why refused), done.
function Scheduler:add(prompt, opts)
  local fn = "Scheduler:add"
  opts = opts or {}
  if type(opts) ~= "table" then error(fn .. ": argument 2 must be a table of options", 2) end
  for k in pairs(opts) do
    if not REQUEST_KEYS[k] and sampler.DEFAULTS[k] == nil then error(("%s: '%s' is not an option"):format(fn, k), 2) end
  end
  local ids = prompt
  if type(prompt) == "string" then
    if not self.tokenizer then error(fn .. ": a string prompt needs the scheduler's tokenizer", 2) end
    ids = self.tokenizer:encode(prompt)
  end
  if type(ids) ~= "table" or #ids == 0 then error(fn .. ": argument 1 must be a non-empty list of token ids or a string", 2) end
  local toks = {}
  for i, t in ipairs(ids) do
    if math.type(t) ~= "integer" or t < 0 or t >= self.spec.vocab then
      error(("%s: prompt[%d] = %s is not a token id in [0, %d)"):format(fn, i, tostring(t), self.spec.vocab), 2)
    end
    toks[i] = t + 1
  end
  local max_new = opts.max_new_tokens or 16
  if math.type(max_new) ~= "integer" or max_new < 1 then error(fn .. ": max_new_tokens must be a positive integer", 2) end
  if opts.on_token ~= nil and type(opts.on_token) ~= "function" then error(fn .. ": on_token must be a function", 2) end
  local stop = opts.stop
  if type(stop) == "string" then stop = {stop} end
  if stop ~= nil and (type(stop) ~= "table" or not self.tokenizer) then
    error(fn .. ": stop must be a string or a list of strings, and needs the scheduler's tokenizer", 2)
  end
  local so = sampler.options(opts, fn)
  local stop_ids = {}
  for _, l in ipairs({id_list(opts.stop_token_ids, "stop_token_ids", fn), id_list(opts.eos_token_id, "eos_token_id", fn)}) do
    for _, t in ipairs(l) do stop_ids[t + 1] = true end
  end
  self.n = self.n + 1
  local r = {id = self.n, tokens = {}, logprobs = so.logprobs and {} or nil, top_logprobs = so.top_logprobs > 0 and {} or nil,
             done = false}
  local seq = {req = r, tokens = toks, n_prompt = #toks, max_new = max_new, o = so, stop_ids = stop_ids, stop = stop,
               on_token = opts.on_token, generator = so.seed and zorch.Generator(so.seed) or nil,
               detok = self.tokenizer and detok.new(self.tokenizer) or nil, stop_len = 0}
  if self.tokenizer then r.text = "" end
  for i, st in ipairs(stop or {}) do
    if type(st) ~= "string" or #st == 0 then
      error(("%s: stop[%d] must be a non-empty string, got %s"):format(fn, i, tostring(st)), 2)
    end
    seq.stop_len = math.max(seq.stop_len, #st)
  end
  local total = #toks + max_new
  seq.need = self.cache:blocks_for(total)
  if seq.need > self.cache.n_blocks or (self.spec.max_pos and total > self.spec.max_pos) then
    r.done, r.finish_reason = true, "refused"
    r.error = seq.need > self.cache.n_blocks
      and ("%d tokens need %d blocks of %d, the pool holds %d"):format(total, seq.need, self.cache.block_size, self.cache.n_blocks)
      or ("%d tokens exceed the model's %d positions"):format(total, self.spec.max_pos)
    return r
  end
  self.waiting[#self.waiting + 1] = seq
  return r
end

function Scheduler:busy() return #self.waiting > 0 or #self.running > 0 end

local function finish(self, seq, reason)
  seq.req.done, seq.req.finish_reason = true, reason
  self.promised = self.promised - (seq.need - #seq.blocks)
  self.cache:free(seq)
  seq.finished = true
  self.done[#self.done + 1] = seq.req
end

-- the next token of each seq from its row of logits (1-based rows, their
-- logprobs and tops). Under tensor parallelism every rank samples the same
-- gathered logits; the ids of the group's first rank are taken by all, so an
-- unseeded draw (each rank's default generator) cannot set the ranks apart.
local function choose(self, seqs, row)
  local ids, lps, tops = {}, {}, {}
  for b, s in ipairs(seqs) do ids[b], lps[b], tops[b] = sampler.next(row(b), s, s.o) end
  if self.group then
    local t = zorch.tensor(ids, {dtype = "float64"})
    self.group:broadcast(t, 0)
    for b, v in ipairs(t:totable()) do ids[b] = math.tointeger(v) end
  end
  return ids, lps, tops
end

-- a sampled token (1-based row) joins seq; whether seq is finished
local function emit(self, seq, id, lp, top)
  local r = seq.req
  seq.tokens[#seq.tokens + 1] = id
  r.tokens[#r.tokens + 1] = id - 1
  if r.logprobs then r.logprobs[#r.logprobs + 1] = lp end
  if r.top_logprobs then r.top_logprobs[#r.top_logprobs + 1] = top end
  local piece
  if seq.detok then
    piece = seq.detok:push(r.tokens)
    r.text = r.text .. piece
  end
  if seq.on_token then seq.on_token(r, id - 1, piece) end
  local function flush() if seq.detok then r.text = r.text .. seq.detok:flush(r.tokens) end end -- (a character held back)
  if seq.stop_ids[id] then flush(); return finish(self, seq, "stop") end
  -- a stop string ends in the new piece: look at the tail that can hold it only
  if seq.stop and #piece > 0 then
    local from = math.max(1, #r.text - #piece - seq.stop_len + 2)
    for _, s in ipairs(seq.stop) do
      local at = r.text:find(s, from, true)
      if at then r.text = r.text:sub(1, at - 1); return finish(self, seq, "stop") end
    end
  end
  if #r.tokens >= seq.max_new then flush(); return finish(self, seq, "length") end
end

-- the logits of one forward of seqs through the cache
local function forward(self, seqs, kind, idx, pos, seg, at)
  local view = self.cache:step(seqs, kind)
  local logits = zorch.no_grad(function()
    return self.model(idx, {positions = pos, segments = seg, cache = view, logits_at = at})
  end)
  view:commit()
  -- (a split model's logits are this rank's vocabulary range: every rank samples the whole row)
  if self.group then logits = zorch.dist.gather_last(self.group, logits) end
  return logits
end

local function row(t) return zorch.tensor(t, {dtype = "int64"}):view(1, #t) end

-- the prompts of seqs packed in one forward (segments apart, positions from 0
-- each): the logits of each one's last token
local function prefill_packed(self, seqs)
  local ids, pos, seg, last = {}, {}, {}, {}
  for i, s in ipairs(seqs) do
    s.pending = s.n_prompt
    for p = 1, s.n_prompt do
      ids[#ids + 1], pos[#pos + 1], seg[#seg + 1] = s.tokens[p], p - 1, i
    end
    last[i] = #ids
  end
  return forward(self, seqs, "prefill", row(ids), row(pos), row(seg), zorch.tensor(last, {dtype = "int64"}))
end

-- a long prompt in chunks of prefill_chunk tokens, each attending over the
-- cached keys of the chunks before it: the logits of its last token
local function prefill_chunks(self, s)
  local C, logits = self.prefill_chunk, nil
  for off = 0, s.n_prompt - 1, C do
    local n = math.min(C, s.n_prompt - off)
    local ids, pos, seg = {}, {}, {}
    for p = 1, n do ids[p], pos[p], seg[p] = s.tokens[off + p], off + p - 1, 1 end
    s.pending = n
    logits = forward(self, {s}, off == 0 and "prefill" or "chunk", row(ids), row(pos), row(seg),
      zorch.tensor({n}, {dtype = "int64"}))
  end
  return logits
end

-- admit waiting requests the pool can promise, in arrival order, and prefill them together
local function prefill(self)
  local admit = {}
  while #self.waiting > 0 and #self.running + #admit < self.max_batch do
    local seq = self.waiting[1]
    if seq.need > self.cache:free_blocks() - self.promised then break end -- (first come, first served)
    table.remove(self.waiting, 1)
    self.promised = self.promised + seq.need
    admit[#admit + 1] = seq
  end
  if #admit == 0 then return end
  -- whole prompts packed up to prefill_chunk tokens a forward; a longer one alone, in chunks
  local units, cur, n = {}, nil, 0
  for _, sq in ipairs(admit) do
    local ok = self.cache:reserve(sq, sq.n_prompt)
    assert(ok, "the pool promised these blocks")
    self.promised = self.promised - #sq.blocks
    if sq.n_prompt > self.prefill_chunk then units[#units + 1] = {sq}; cur = nil
    else
      if not cur or n + sq.n_prompt > self.prefill_chunk then cur, n = {}, 0; units[#units + 1] = cur end
      cur[#cur + 1], n = sq, n + sq.n_prompt
    end
  end
  for _, u in ipairs(units) do
    local logits = u[1].n_prompt > self.prefill_chunk and prefill_chunks(self, u[1]) or prefill_packed(self, u)
    local ids, lps, tops = choose(self, u, function(i) return logits[i] end)
    for i, sq in ipairs(u) do
      self.running[#self.running + 1] = sq
      emit(self, sq, ids[i], lps[i], tops[i])
    end
  end
end

local function decode(self, seqs)
  local B = #seqs
  local ids, pos = {}, {}
  for b, s in ipairs(seqs) do
    local had = #s.blocks
    assert(self.cache:reserve(s, 1), "the pool promised this block")
    self.promised = self.promised - (#s.blocks - had)
    ids[b], pos[b] = s.tokens[#s.tokens], s.len
  end
  local logits = forward(self, seqs, "decode", zorch.tensor(ids, {dtype = "int64"}):view(B, 1),
    zorch.tensor(pos, {dtype = "int64"}):view(B, 1))
  local nx, lps, tops = choose(self, seqs, function(b) return logits[b][1] end)
  for b, s in ipairs(seqs) do emit(self, s, nx[b], lps[b], tops[b]) end
end

local function drop_finished(self)
  local keep = {}
  for _, s in ipairs(self.running) do if not s.finished then keep[#keep + 1] = s end end
  self.running = keep
end

-- One step: a decode of the running sequences, then the prefill of the
-- admitted ones (which produces their first token). The requests finished.
function Scheduler:step()
  self.steps, self.done = self.steps + 1, {}
  if #self.running > 0 then decode(self, self.running) end
  drop_finished(self)
  prefill(self)
  drop_finished(self)
  return self.done
end

zorch.generation.Scheduler = Scheduler
return Scheduler
