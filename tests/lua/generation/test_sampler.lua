-- zorch.generation.sampler: each logits processor and their chain equal
-- Transformers' (tests/lua/generation/gen_generation.py; presence and frequency
-- penalties as OpenAI defines them), -inf where they remove a token; greedy,
-- seeds, logprobs, stop strings and the streaming callback of a request.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local sampler = zorch.generation.sampler
local G = zorch.load("lua/generation/golden.safetensors")
local CASES = { -- as gen_generation.py's, with do_sample
  {repetition_penalty = 1.3}, {presence_penalty = 0.5, frequency_penalty = 0.25}, {temperature = 0.7},
  {top_k = 10}, {top_p = 0.8}, {min_p = 0.2},
  {repetition_penalty = 1.2, frequency_penalty = 0.3, temperature = 0.8, top_k = 40, top_p = 0.9, min_p = 0.05},
}
local logits = G["proc.logits"]
local history = {}
for i, t in ipairs(G["proc.history"]:totable()) do history[i] = t + 1 end
local seq = {tokens = history, n_prompt = G["proc.n_prompt"]:totable()[1]}

for k, c in ipairs(CASES) do
  c.do_sample = true
  local got = sampler.process(logits, seq, sampler.options(c, "test")):totable()
  local want = G["proc.out." .. k]:totable()
  local ok, worst, names = true, 0, {}
  for i = 1, #want do
    if want[i] == -math.huge or got[i] == -math.huge then ok = ok and got[i] == want[i]
    else worst = math.max(worst, math.abs(got[i] - want[i])) end
  end
  for n in pairs(c) do if n ~= "do_sample" then names[#names + 1] = n end end
  table.sort(names)
  tap.ok(ok and worst < 1e-5, ("%s: the processed logits equal Transformers' (kept and removed tokens; |diff| %.2g)"):format(
    table.concat(names, ", "), worst))
end

-- a model for the requests' options
local model = zorch.models.llama.from_pretrained("lua/llama/llama_gqa")
model:eval()
local prompts = {{5, 6, 7, 8}, {11, 12}, {20, 21, 22, 23, 24, 25}}
local function gen(o) return zorch.generate(model, prompts, o) end
local function toks(out)
  local t = {}
  for i, r in ipairs(out) do t[i] = table.concat(r.tokens, ",") end
  return table.concat(t, "|")
end
local greedy = gen({max_new_tokens = 8})
tap.ok(toks(gen({max_new_tokens = 8, do_sample = true, top_k = 1})) == toks(greedy), "top_k 1 samples the greedy tokens")
tap.ok(toks(gen({max_new_tokens = 8, do_sample = true, temperature = 0})) == toks(greedy), "temperature 0 is greedy")
local s1 = gen({max_new_tokens = 8, do_sample = true, seed = 3})
local s2 = gen({max_new_tokens = 8, do_sample = true, seed = 3})
local s3 = gen({max_new_tokens = 8, do_sample = true, seed = 4})
tap.ok(toks(s1) == toks(s2) and toks(s1) ~= toks(s3), "a seed per request gives the same samples, another seed others")

local lp = gen({max_new_tokens = 4, logprobs = true, top_logprobs = 3})
local ok = true
for _, r in ipairs(lp) do
  for i, t in ipairs(r.tokens) do -- greedy: the chosen token is the most likely, and the top-n are sorted
    local top = r.top_logprobs[i]
    ok = ok and #top == 3 and top[1].id == t and math.abs(top[1].logprob - r.logprobs[i]) < 1e-6
      and top[1].logprob >= top[2].logprob and top[2].logprob >= top[3].logprob and r.logprobs[i] <= 0
  end
end
tap.ok(ok, "logprobs: the chosen token's log-probability and the top 3, most likely first")

do -- the streaming callback sees every token in order, per request
  local seen = {}
  local out = gen({max_new_tokens = 5, on_token = function(r, id) seen[r.id] = (seen[r.id] or "") .. id .. "," end})
  local same = true
  for i, r in ipairs(out) do same = same and seen[r.id] == table.concat(r.tokens, ",") .. "," end
  tap.ok(same, "on_token is called with each request's tokens as they come")
end

do -- stop strings: a tokenizer whose ids are bytes (id b is byte b)
  local g, first = greedy[1].tokens, 1
  while g[first] ~= g[3] do first = first + 1 end
  local eos = zorch.generate(model, {prompts[1]}, {max_new_tokens = 8, stop_token_ids = g[3]})[1]
  tap.ok(#eos.tokens == first and eos.tokens[first] == g[3] and eos.finish_reason == "stop",
    ("a stop token id ends the request at its first occurrence, with it (%d tokens)"):format(first))
  local fake = {encode = function(_, s) local t = {} for i = 1, #s do t[i] = s:byte(i) end return t end,
                decode = function(_, ids) local c = {} for i, v in ipairs(ids) do c[i] = string.char(v) end return table.concat(c) end}
  local text = fake:decode(greedy[1].tokens)
  local stop = text:sub(4, 5)
  local at = text:find(stop, 1, true)
  local r = zorch.generate(model, {prompts[1]}, {max_new_tokens = 8, tokenizer = fake, stop = stop})[1]
  tap.ok(r.finish_reason == "stop" and r.text == text:sub(1, at - 1) and #r.tokens == at + 1,
    ("a stop string ends the request where it completes, its text cut before it (%q)"):format(r.text or "nil"))
  local ids = {}
  for i, t in ipairs(prompts[3]) do ids[i] = string.char(t) end
  local st = zorch.generate(model, {table.concat(ids)}, {max_new_tokens = 8, tokenizer = fake})[1]
  tap.ok(table.concat(st.tokens, ",") == table.concat(greedy[3].tokens, ",") and st.text == fake:decode(st.tokens),
    "a string prompt is encoded with the tokenizer: the tokens of its ids, and their text")
  tap.raises("a string prompt without a tokenizer is an error", function() zorch.generate(model, "abc") end, "tokenizer")
  tap.raises("a stop string without a tokenizer is an error", function()
    zorch.generate(model, {prompts[1]}, {stop = "x"})
  end, "stop must be")
end
tap.raises("a bad top_p is named", function() zorch.generate(model, prompts, {top_p = 1.5}) end, "top_p")

tap.done()
