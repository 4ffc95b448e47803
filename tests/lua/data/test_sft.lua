-- zorch.data.sft: prompt/response and chat records to ids and train masks,
-- the errors of bad files (one line naming the file and the line), rows and
-- batches, and on a small Llama: a packed batch gives the loss and the
-- gradients of its sequences run one by one (the token-weighted mean), a
-- padded batch too, and masked (prompt) positions get no gradient at all.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local sft = zorch.data.sft

local tok = zorch.tokenizer.load("tokenizer/llama3.json")
local EOS = tok:special_id("<|end_of_text|>")
local function list(t) return table.concat(t, " ") end
local function trained(ids, train)
  local out = {}
  for i, on in ipairs(train) do if on then out[#out + 1] = ids[i] end end
  return out
end
local function concat(...)
  local out = {}
  for _, t in ipairs{...} do for _, v in ipairs(t) do out[#out + 1] = v end end
  return out
end

-- ---- encoding ---------------------------------------------------------------------------------

do
  local ids, train = sft.encode(tok, {prompt = "Name a colour.", response = " Blue, like the sky."},
                                {eos = EOS, template = "Q: {prompt}\nA:"})
  local want = concat(tok:encode("Q: Name a colour.\nA:", {add_special = true}),
                      tok:encode(" Blue, like the sky.", {add_special = false}), {EOS})
  local resp = concat(tok:encode(" Blue, like the sky.", {add_special = false}), {EOS})
  tap.ok(list(ids) == list(want) and #train == #ids, "prompt/response: the template's prompt (with BOS), the response, eos")
  tap.ok(list(trained(ids, train)) == list(resp) and not train[1], "only the response and eos are trained")
  local ids2 = sft.encode(tok, {prompt = "100% {x}", response = "y"}, {eos = EOS, template = "<{prompt}>"})
  tap.ok(tok:decode(ids2):find("<100% {x}>y", 1, true) ~= nil, "the prompt goes into the template as it is (no pattern escapes)")
end

-- A chat template of Qwen's form over the real tokenizer: <|im_start|>role\ncontent<|im_end|>\n
local function chat_tok(render)
  local t = {}
  function t:encode(s, o) return tok:encode(s, o) end
  function t:apply_chat_template(msgs, o)
    local parts = {}
    for _, m in ipairs(msgs) do parts[#parts + 1] = render(m) end
    if o.add_generation_prompt then parts[#parts + 1] = "<|im_start|>assistant\n" end
    return table.concat(parts)
  end
  return t
end
local qwen = chat_tok(function(m) return "<|im_start|>" .. m.role .. "\n" .. m.content .. "<|im_end|>\n" end)
do
  local msgs = {{role = "system", content = "Be brief."}, {role = "user", content = "Hi there"},
                {role = "assistant", content = "Hello!"}, {role = "user", content = "Two plus two?"},
                {role = "assistant", content = "Four."}}
  local ids, train = sft.encode(qwen, {messages = msgs})
  local whole = qwen:apply_chat_template(msgs, {})
  tap.ok(list(ids) == list(tok:encode(whole, {add_special = false})), "messages: the whole conversation's render, encoded once")
  tap.ok(tok:decode(trained(ids, train)) == "Hello!<|im_end|>\nFour.<|im_end|>\n",
         ("only the assistant turns (and their end of turn) are trained: %q"):format(tok:decode(trained(ids, train))):gsub("\\\n", "\\n"))
  -- a template that renders a turn differently once another follows: refused, naming the turn
  local n = 0
  local odd = chat_tok(function(m) n = n + 1; return m.role .. (n % 2 == 0 and ": " or "= ") .. m.content .. "\n" end)
  tap.raises("a template whose prefixes are not the conversation's start is refused",
             function() sft.encode(odd, {messages = msgs}) end, "messages[", "does not tokenize as the start")
  tap.raises("messages need a chat template: the tokenizer's or one named",
             function() sft.encode(tok, {messages = msgs}) end, "no chat_template")
  -- the tokenizer's own apply_chat_template with zorch's ChatML and Llama 3 templates
  for _, name in ipairs{"chatml", "llama3"} do
    local ids2, train2 = sft.encode(tok, {messages = msgs}, {chat_template = name})
    local whole2 = tok:apply_chat_template(msgs, {template = name})
    local want = name == "chatml" and "Hello!<|im_end|>\nFour.<|im_end|>\n" or "Hello!<|eot_id|>Four.<|eot_id|>"
    tap.ok(list(ids2) == list(tok:encode(whole2, {add_special = false})) and tok:decode(trained(ids2, train2)) == want,
           ("tok:apply_chat_template %s: the assistant turns trained: %q"):format(name, tok:decode(trained(ids2, train2))):gsub("\\\n", "\\n"))
  end
end

-- ---- bad files: one line, the file and the line ---------------------------------------------

local function load_text(text) local p = tap.temp_file(text, ".jsonl"); return p, pcall(sft.load, p, tok, {eos = EOS}) end
for _, c in ipairs{
  {'{"prompt": "a", "response": "b"}\n{"prompt": "a"}\n', "line 2", "\"response\" must be a string"},
  {'{"prompt": "a", "response": "b"}\n\nnot json\n', "line 3", "not valid JSON"},
  {'{"text": "a"}\n', "line 1", "neither \"prompt\" and \"response\" nor \"messages\""},
  {'[1, 2]\n', "line 1", "not a JSON object"},
  {'{"prompt": "a", "response": 3}\n', "line 1", "\"response\" must be a string, got number"},
  {'{"messages": [{"role": "user", "content": "a"}]}\n', "line 1", "no assistant turn"},
  {'{"messages": [{"role": "user"}]}\n', "line 1", "messages[1] must be"},
  {'{"prompt": "a", "response": "b"} {"x": 1}\n', "line 1", "not valid JSON"},
  {'', nil, "holds no examples (an empty file)"},
  {'\n  \n', nil, "holds no examples (an empty file)"},
} do
  local p, ok, err = load_text(c[1])
  err = tostring(err)
  local want = c[2] and (p .. ": " .. c[2] .. ": ") or (p .. ": ")
  tap.ok(not ok and err:sub(1, #want) == want and err:find(c[3], 1, true) ~= nil and not err:find("\n"),
         ("%s: one line naming the file and the line (%s)"):format(c[1]:sub(1, 30):gsub("\n", "\\n"), err))
end
tap.raises("a missing file", function() sft.load("/nonexistent/x.jsonl", tok, {eos = EOS}) end, "/nonexistent/x.jsonl")
do
  local p = tap.temp_file('{"prompt": "' .. ("word "):rep(40) .. '", "response": "a b c"}\n' ..
                          '{"prompt": "a", "response": "' .. ("long "):rep(40) .. '"}\n{"prompt": "x", "response": "y"}\n', ".jsonl")
  local ex, st = sft.load(p, tok, {eos = EOS, max_tokens = 20})
  tap.ok(#ex == 2 and st.truncated == 2 and st.dropped == 1 and #ex[1].ids == 20 and ex[1].line == 2 and ex[2].line == 3,
         ("past max_tokens a sequence is cut to its start; one left with nothing to train is dropped (%d kept, %d cut, %d dropped)"):format(
         #ex, st.truncated, st.dropped))
  local _, err = pcall(sft.load, p, tok, {eos = EOS, vocab = 100})
  tap.ok(tostring(err):find(p .. ": line 1: token id", 1, true) ~= nil, "an id outside the vocabulary names the line: " .. tostring(err))
end

-- ---- rows and batches ---------------------------------------------------------------------

local texts = {{"What is two plus two?", " Four."}, {"Name a colour.", " Blue, like the sky on a clear day."},
               {"Say hello", " Hello there!"}, {"Count to three", " One, two, three."}, {"Spell cat", " C-A-T"},
               {"A long question about nothing in particular at all?", " Indeed."}}
local lines = {}
for i, t in ipairs(texts) do lines[i] = zorch.json.encode({prompt = t[1], response = t[2]}):gsub("[\n\t]", "") end
local path = tap.temp_file(table.concat(lines, "\n") .. "\n", ".jsonl")
local ex = sft.load(path, tok, {eos = EOS, template = "Q: {prompt}\nA:"})
local T = 64
do
  local r1, r2 = sft.rows(ex, {seed = 3, epoch = 1}), sft.rows(ex, {seed = 3, epoch = 1})
  local r3, r0 = sft.rows(ex, {seed = 3, epoch = 2}), sft.rows(ex, {shuffle = false})
  local f = function(rows) local o = {} for i, r in ipairs(rows) do o[i] = r[1] end return list(o) end
  tap.ok(f(r1) == f(r2) and f(r1) ~= f(r3) and f(r0) == "1 2 3 4 5 6" and #r1 == #ex,
         "rows: one example each, shuffled by seed and epoch (" .. f(r1) .. " / " .. f(r3) .. "), in order without shuffle")
  local packed = sft.rows(ex, {pack = true, context = T, seed = 3})
  local seen, fits = {}, true
  for _, r in ipairs(packed) do
    local n = 0
    for _, i in ipairs(r) do seen[#seen + 1] = i; n = n + #ex[i].ids - 1 end
    fits = fits and n <= T
  end
  table.sort(seen)
  tap.ok(list(seen) == "1 2 3 4 5 6" and fits and #packed < #ex, ("packed: every example once, %d rows of at most %d inputs"):format(#packed, T))
  tap.raises("a sequence longer than the packed row is refused", function() sft.rows(ex, {pack = true, context = 4}) end,
             "more than the context 4")
end
do
  local b = sft.batch(ex, {{1, 3}}, {size = 2, context = T, pack = true, pad = EOS})
  local n1, n3 = #ex[1].ids - 1, #ex[3].ids - 1
  local x, y, p, s = b.input:totable(), b.target:totable(), b.positions:totable(), b.segments:totable()
  local ok = b.input.shape[1] == 2 and b.input.shape[2] == T and x[1][1] == ex[1].ids[1] + 1 and x[1][n1 + 1] == ex[3].ids[1] + 1
  ok = ok and p[1][n1] == n1 - 1 and p[1][n1 + 1] == 0 and s[1][n1] == 1 and s[1][n1 + 1] == 2 and s[1][n1 + n3 + 1] == 0
  local count = 0
  for j = 1, T do
    for r = 1, 2 do if y[r][j] ~= sft.ignore_index then count = count + 1 end end
  end
  ok = ok and count == ex[1].targets + ex[3].targets and b.tokens == count and y[1][n1] == ex[1].ids[n1 + 1] + 1
  ok = ok and y[2][1] == sft.ignore_index and x[2][1] == EOS + 1 and y[1][n1 + n3 + 1] == sft.ignore_index
  tap.ok(ok, "a packed batch: ids + 1, targets of the next trained id, positions from 0 in each sequence, segments 1, 2 and 0 for padding")
  local u = sft.batch(ex, {{2}, {5}}, {size = 3})
  local L = math.max(#ex[2].ids, #ex[5].ids) - 1
  tap.ok(u.input.shape[2] == L and u.positions == nil and u.target[3]:eq(sft.ignore_index):all():item() and
         u.target[2][L]:item() == sft.ignore_index, "unpacked: right-padded to the longest, padding and missing rows ignored")
end

-- ---- the loss on a small Llama: packed = one by one, masked = no gradient -------------------

zorch.manual_seed(11)
local cfg = zorch.hf.decoder_config({model_type = "llama", vocab_size = tok:vocab_size(), hidden_size = 32,
  intermediate_size = 64, num_hidden_layers = 2, num_attention_heads = 4, num_key_value_heads = 2,
  max_position_embeddings = 64, rms_norm_eps = 1e-5, rope_theta = 10000.0, hidden_act = "silu"}, "the test")
local model = zorch.models.llama.new(cfg, {initializer_range = 0.1}) -- (large enough for attention to matter)

-- The loss of a batch and the gradients it leaves (a name -> tensor table).
local function run(b, denom, grads)
  model:zero_grad()
  local logits = model(b.input, b.positions and {positions = b.positions, segments = b.segments} or nil)
  local l = sft.loss(logits, b.target, denom)
  l:backward()
  grads = grads or {}
  for name, p in model:named_parameters() do
    grads[name] = grads[name] and (grads[name] + p.grad) or p.grad:clone()
  end
  return l:item(), grads
end
local function worst(a, b)
  local w = 0
  for name, g in pairs(a) do w = math.max(w, (g - b[name]):abs():max():item() / math.max(b[name]:abs():max():item(), 1e-12)) end
  return w
end

local all = {}
for i = 1, #ex do all[i] = i end
local total = 0
for _, e in ipairs(ex) do total = total + e.targets end
-- one by one: the token-weighted mean of the sequences' own means
local single, sg = 0, nil
for i = 1, #ex do
  local b = sft.batch(ex, {{i}}, {})
  local l
  l, sg = run(b, total, sg) -- (the sum over the sequence / the batch's count: the weighted share)
  single = single + l
end
local mean_of_means = 0
for i = 1, #ex do mean_of_means = mean_of_means + run(sft.batch(ex, {{i}}, {})) * ex[i].targets / total end
tap.ok(math.abs(mean_of_means - single) <= 1e-6 * single, "the weighted mean of the one-by-one means is the summed loss over the count")

local rows = sft.rows(ex, {pack = true, context = T, shuffle = false})
local lp, gp = run(sft.batch(ex, rows, {context = T, pack = true, pad = EOS}))
tap.ok(math.abs(lp - single) <= 1e-5 * single, ("packed loss %.8f = one by one %.8f (%d rows)"):format(lp, single, #rows))
local wp = worst(gp, sg)
tap.ok(wp <= 1e-5, ("packed gradients = one by one (worst relative %.2g)"):format(wp))
-- without the segments the packed sequences see each other: the test can fail
local bx = sft.batch(ex, rows, {context = T, pack = true, pad = EOS})
bx.segments = nil
bx.positions = nil
local lx = run(bx)
tap.ok(math.abs(lx - single) > 1e-4 * single, ("without positions and segments the loss differs (%.6f)"):format(lx))

local lu, gu = run(sft.batch(ex, {{1}, {2}, {3}, {4}, {5}, {6}}, {pad = EOS}))
tap.ok(math.abs(lu - single) <= 1e-5 * single and worst(gu, sg) <= 1e-5,
       ("a right-padded batch: loss %.8f and gradients as one by one (worst %.2g)"):format(lu, worst(gu, sg)))

do -- masked positions: exactly no gradient into their logits
  local b = sft.batch(ex, rows, {context = T, pack = true, pad = EOS})
  local logits = zorch.no_grad(function() return model(b.input, {positions = b.positions, segments = b.segments}) end)
  logits = logits:detach():requires_grad_()
  sft.loss(logits, b.target):backward()
  local g = logits.grad:abs():sum(3) -- (B, T)
  local masked = b.target:eq(sft.ignore_index)
  local on_masked = (g * masked:float()):max():item()
  local off = zorch.where(masked, zorch.ones_like(g), g):min():item()
  tap.ok(on_masked == 0 and off > 0, ("the logits' gradient is exactly 0 at masked positions (max %g) and not at trained ones (min %.3g)"):format(
    on_masked, off))
  -- another prompt token in an example leaves the targets as they were
  local e = ex[1]
  local changed = {ids = {}, train = e.train, targets = e.targets}
  for i, id in ipairs(e.ids) do changed.ids[i] = id end
  changed.ids[2] = (changed.ids[2] + 7) % 300
  local b1, b2 = sft.batch({e}, {{1}}, {}), sft.batch({changed}, {{1}}, {})
  tap.ok((b1.target - b2.target):abs():max():item() == 0 and (b1.input - b2.input):abs():max():item() > 0,
         "changing a prompt token changes the inputs, never the targets")
end

tap.done()
