-- zorch.generation.sampler: the next token of one sequence from its logits (V,),
-- the logits processors in Transformers' order: repetition penalty (over the
-- prompt and the output, as Transformers), presence and frequency penalties
-- (over the output, as OpenAI), then temperature, top-k, top-p, min-p; greedy
-- when `do_sample` is false (the default) or the temperature is 0.
--   sampler.options(opts, fn)          checked options, defaults filled in
--   sampler.next(logits, seq, o)       id (1-based row), logprob, top {{id, logprob}...}
-- seq: {tokens = 1-based ids so far (prompt and output), n_prompt =, generator =}.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local sampler = {}

local DEFAULTS = {do_sample = false, temperature = 1.0, top_k = 0, top_p = 1.0, min_p = 0.0,
                  repetition_penalty = 1.0, presence_penalty = 0.0, frequency_penalty = 0.0,
                  logprobs = false, top_logprobs = 0, seed = false}
sampler.DEFAULTS = DEFAULTS

local function bad(fn, k, want, v)
  error(("%s: option '%s' must be %s, got %s"):format(fn, k, want, tostring(v)), 4)
end

-- The sampling options of opts (other keys are left to the caller), checked.
function sampler.options(opts, fn)
  local o = {}
  for k, d in pairs(DEFAULTS) do
    local v = opts[k]
    if v == nil then v = d end
    if type(d) == "boolean" and k ~= "seed" and type(v) ~= "boolean" then bad(fn, k, "a boolean", v) end
    if type(d) == "number" and (type(v) ~= "number" or v ~= v) then bad(fn, k, "a number", v) end
    o[k] = v
  end
  if o.temperature < 0 then bad(fn, "temperature", ">= 0", o.temperature) end
  if o.top_k < 0 or math.type(o.top_k) ~= "integer" then bad(fn, "top_k", "an integer >= 0", o.top_k) end
  if o.top_p <= 0 or o.top_p > 1 then bad(fn, "top_p", "in (0, 1]", o.top_p) end
  if o.min_p < 0 or o.min_p > 1 then bad(fn, "min_p", "in [0, 1]", o.min_p) end
  if o.repetition_penalty <= 0 then bad(fn, "repetition_penalty", "> 0", o.repetition_penalty) end
  if o.top_logprobs < 0 or math.type(o.top_logprobs) ~= "integer" then
    bad(fn, "top_logprobs", "an integer >= 0", o.top_logprobs)
  end
  if o.seed ~= false and math.type(o.seed) ~= "integer" then bad(fn, "seed", "an integer", o.seed) end
  o.greedy = not o.do_sample or o.temperature == 0
  return o
end

-- the distinct tokens of seq.tokens[from..] and how often each occurs
local function counts(tokens, from)
  local n, ids, cs = {}, {}, {}
  for i = from, #tokens do
    local t = tokens[i]
    if not n[t] then ids[#ids + 1] = t end
    n[t] = (n[t] or 0) + 1
  end
  for i, t in ipairs(ids) do cs[i] = n[t] end
  return ids, cs
end

local NEG = -math.huge

-- the logits after the processors (a new tensor; logits is not written)
function sampler.process(logits, seq, o)
  local s = logits
  if o.repetition_penalty ~= 1.0 and #seq.tokens > 0 then
    -- Transformers: a seen token's score is divided by the penalty when positive, multiplied when negative
    local ids = counts(seq.tokens, 1)
    local idx = zorch.tensor(ids, {dtype = "int64"}):to(s:device())
    local g = s:index_select(1, idx)
    g = zorch.where(g:lt(0), g * o.repetition_penalty, g / o.repetition_penalty)
    s = zorch.scatter(s, 1, idx, g)
  end
  if (o.presence_penalty ~= 0 or o.frequency_penalty ~= 0) and #seq.tokens > seq.n_prompt then
    -- OpenAI: logit - count * frequency - (count > 0) * presence, over the output
    local ids, cs = counts(seq.tokens, seq.n_prompt + 1)
    local sub = {}
    for i, c in ipairs(cs) do sub[i] = c * o.frequency_penalty + o.presence_penalty end
    local idx = zorch.tensor(ids, {dtype = "int64"}):to(s:device())
    s = zorch.scatter_add(s, 1, idx, -zorch.tensor(sub, {dtype = s:dtype()}):to(s:device()))
  end
  if o.greedy then return s end
  if o.temperature ~= 1.0 then s = s / o.temperature end
  local V = s:size(1)
  if o.top_k > 0 and o.top_k < V then
    local kth = zorch.topk(s, o.top_k)[o.top_k]:item()
    s = s:masked_fill(s:lt(kth), NEG)
  end
  if o.top_p < 1.0 then
    -- keep the most likely tokens until their mass reaches top_p: drop a token
    -- when the more likely ones hold top_p already (never the first: 0 before it)
    local sorted, order = zorch.sort(s, 1, true)
    local p = zorch.softmax(sorted, 1)
    local drop = (zorch.cumsum(p, 1) - p):ge(o.top_p)
    s = zorch.scatter(s, 1, order, sorted:masked_fill(drop, NEG))
  end
  if o.min_p > 0 then
    local p = zorch.softmax(s, 1)
    s = s:masked_fill(p:lt(o.min_p * p:max():item()), NEG)
  end
  return s
end

-- The next token (1-based row of the logits), its log-probability under the
-- model (the raw logits' log_softmax, as OpenAI's logprobs) and the top n.
function sampler.next(logits, seq, o)
  local s = sampler.process(logits, seq, o)
  local id
  if o.greedy then
    local _, i = s:max(1)
    id = i:item()
  else
    id = zorch.multinomial(zorch.softmax(s:double(), 1), 1, {generator = seq.generator})[1]:item()
  end
  local lp, top
  if o.logprobs or o.top_logprobs > 0 then
    local l = zorch.log_softmax(logits:float(), 1)
    lp = l[id]:item()
    if o.top_logprobs > 0 then
      local v, i = zorch.topk(l, math.min(o.top_logprobs, l:size(1)))
      top = {}
      local vt, it = v:totable(), i:totable()
      for k = 1, #vt do top[k] = {id = it[k] - 1, logprob = vt[k]} end
    end
  end
  return id, lp, top
end

zorch.generation.sampler = sampler
return sampler
