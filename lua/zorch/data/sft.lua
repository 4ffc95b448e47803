-- zorch.data.sft: supervised fine-tuning data. JSON lines of prompt/response
-- pairs or chat messages become token ids with a mask of the tokens the loss
-- reads (the response, the assistant turns), then rows (one sequence each, or
-- several packed) and batches of inputs, targets and, packed, positions and
-- segments for a decoder's ctx.
--   sft.load(path, tok, opts)         examples {ids (0-based), train (booleans), line, targets}
--   sft.encode(tok, record, opts)     one record's ids and train mask
--   sft.rows(examples, opts)          an epoch's rows: lists of example indices
--   sft.batch(examples, rows, opts)   {input, target, positions, segments, tokens}
--   sft.loss(logits, target, denom)   summed cross-entropy of the targets / denom
-- docs/llama.md ("Fine-tuning") describes the formats.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local read_file = zorch._require("zorch.util").read_file
local sft = {}

-- Targets the loss skips (cross_entropy's default ignore_index).
sft.ignore_index = -100

local function is_list(v) return type(v) == "table" and (next(v) == nil or rawlen(v) > 0) end

local function append(ids, train, more, on)
  for _, id in ipairs(more) do ids[#ids + 1] = id; train[#train + 1] = on end
end

-- The ids of a render (a chat template gives a string to encode, or ids).
local function ids_of(tok, r)
  if type(r) == "table" then return r end
  return tok:encode(r, {add_special = false})
end

-- Chat messages: the whole conversation rendered once; each assistant turn's
-- tokens are those between the render of the turns before it with the
-- generation prompt and the render up to and with it.
local function encode_messages(tok, msgs, template)
  if not is_list(msgs) or #msgs == 0 then error("messages must be a non-empty list of {role, content}", 0) end
  local assistant = false
  for k, m in ipairs(msgs) do
    if type(m) ~= "table" or type(m.role) ~= "string" or type(m.content) ~= "string" then
      error(("messages[%d] must be {\"role\": string, \"content\": string}"):format(k), 0)
    end
    assistant = assistant or m.role == "assistant"
  end
  if not assistant then error("messages has no assistant turn (nothing to train on)", 0) end
  if type(tok.apply_chat_template) ~= "function" then
    error("the tokenizer has no apply_chat_template (messages need a chat template)", 0)
  end
  local function render(n, gen)
    return tok:apply_chat_template(table.move(msgs, 1, n, 1, {}), {add_generation_prompt = gen, template = template})
  end
  local ids = ids_of(tok, render(#msgs, false))
  local train = {}
  for i = 1, #ids do train[i] = false end
  for k, m in ipairs(msgs) do
    if m.role == "assistant" then
      local from, to = ids_of(tok, render(k - 1, true)), ids_of(tok, render(k, false))
      for _, part in ipairs{from, to} do
        for i = 1, #part do
          if part[i] ~= ids[i] then
            error(("the chat template's text up to messages[%d] does not tokenize as the start of the whole " ..
                   "conversation (token %d differs)"):format(k, i), 0)
          end
        end
      end
      for i = #from + 1, #to do train[i] = true end
    end
  end
  return ids, train
end

-- sft.encode(tok, record, {template = "{prompt}", eos =, chat_template =}): ids (0-based) and a
-- train flag per id. {prompt, response}: the template with the prompt in it,
-- encoded with the tokenizer's special tokens (a BOS), then the response
-- encoded alone, then eos; the response and eos are trained. {messages}: the
-- chat template (encode_messages; chat_template: apply_chat_template's
-- template, a name or a text, for a tokenizer without one); the assistant
-- turns are trained.
function sft.encode(tok, rec, opts)
  opts = opts or {}
  if type(rec) ~= "table" then error("not a JSON object", 0) end
  if rec.messages ~= nil then
    if rec.prompt ~= nil or rec.response ~= nil then error("has both messages and prompt/response", 0) end
    return encode_messages(tok, rec.messages, opts.chat_template)
  end
  if rec.prompt == nil and rec.response == nil then error("has neither \"prompt\" and \"response\" nor \"messages\"", 0) end
  for _, k in ipairs{"prompt", "response"} do
    if type(rec[k]) ~= "string" then
      error(("\"%s\" must be a string, got %s"):format(k, rec[k] == nil and "nothing" or type(rec[k])), 0)
    end
  end
  if math.type(opts.eos) ~= "integer" then error("sft.encode: opts.eos must be the eos token's id", 2) end
  local template = opts.template or "{prompt}"
  local text = template:gsub("{prompt}", function() return rec.prompt end)
  local ids, train = {}, {}
  append(ids, train, tok:encode(text, {add_special = true}), false)
  append(ids, train, tok:encode(rec.response, {add_special = false}), true)
  append(ids, train, {opts.eos}, true)
  return ids, train
end

-- sft.load(path, tok, {template, eos, chat_template, max_tokens, vocab}): the examples of a
-- JSON lines file (blank lines skipped), each {ids, train, line, targets =
-- the trained ids after the first}. A sequence
-- longer than max_tokens is cut to its first max_tokens ids; one left with
-- nothing to train is dropped. Returns examples, {truncated =, dropped =,
-- chat = (some line had messages)}. Every error is one line naming the file
-- and the line ("train.jsonl: line 3: not valid JSON (near byte 12)").
function sft.load(path, tok, opts)
  local fn = "data.sft.load"
  opts = zorch._check_options(fn, opts, {"template", "eos", "chat_template", "max_tokens", "vocab"}, 3)
  if type(path) ~= "string" then error(fn .. ": path must be a string", 2) end
  if opts.template ~= nil and (type(opts.template) ~= "string" or not opts.template:find("{prompt}", 1, true)) then
    error(fn .. ": template must be a string holding {prompt}, got " .. zorch._require("zorch.util").readable(opts.template), 2)
  end
  local text, err = read_file(path)
  if not text then error(("%s: cannot read %s"):format(fn, tostring(err)), 2) end
  local examples, stats, n = {}, {truncated = 0, dropped = 0, chat = false}, 0
  for line in (text:sub(-1) == "\n" and text or text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    if line:find("%S") then
      local function fail(msg) error(("%s: line %d: %s"):format(path, n, msg), 0) end
      local ok, rec = pcall(zorch.json.decode, line, true)
      if not ok then fail((tostring(rec):gsub("^json: the text is", "the line is"):gsub("^json: ", ""))) end
      local ok2, ids, train = pcall(sft.encode, tok, rec, {template = opts.template, eos = opts.eos,
                                                                 chat_template = opts.chat_template})
      if not ok2 then fail(tostring(ids)) end
      stats.chat = stats.chat or rec.messages ~= nil
      for _, id in ipairs(ids) do
        if opts.vocab and id >= opts.vocab then fail(("token id %d is outside the model's vocabulary of %d"):format(id, opts.vocab)) end
      end
      if opts.max_tokens and #ids > opts.max_tokens then
        stats.truncated = stats.truncated + 1
        for i = #ids, opts.max_tokens + 1, -1 do ids[i], train[i] = nil, nil end
      end
      local targets = 0
      for i = 2, #ids do if train[i] then targets = targets + 1 end end -- (the first id is never a target)
      if targets > 0 then examples[#examples + 1] = {ids = ids, train = train, line = n, targets = targets}
      else stats.dropped = stats.dropped + 1 end
    end
  end
  if #examples == 0 then
    error(("%s: %s"):format(path, stats.dropped > 0 and ("none of its %d examples has a token to train on"):format(stats.dropped)
      or "holds no examples (an empty file)"), 0)
  end
  return examples, stats
end

-- sft.rows(examples, {context =, pack = false, shuffle = true, seed = 0, epoch = 1}):
-- an epoch's rows, each a list of example indices. The examples in order, or
-- shuffled by data.permutation(seed * 1000003 + epoch); without pack one a
-- row, packed each into the first row with room for its #ids - 1 inputs among
-- context (first fit).
function sft.rows(examples, opts)
  local n = #examples
  local order
  if opts.shuffle == false then
    order = {}
    for i = 1, n do order[i] = i end
  else
    order = zorch.data.permutation(n, (opts.seed or 0) * 1000003 + (opts.epoch or 1))
  end
  if not opts.pack then
    local rows = {}
    for k, i in ipairs(order) do rows[k] = {i} end
    return rows
  end
  local T = opts.context
  local rows, free, open = {}, {}, {} -- open: rows with room for a sequence (2 ids, 1 input)
  for _, i in ipairs(order) do
    local len = #examples[i].ids - 1
    if len > T then error(("data.sft.rows: example %d has %d inputs, more than the context %d"):format(i, len, T), 2) end
    local at
    for k, r in ipairs(open) do
      if free[r] >= len then at = k; break end
    end
    local r
    if at then r = open[at] else rows[#rows + 1] = {}; r = #rows; free[r] = T; open[#open + 1] = r end
    table.insert(rows[r], i)
    free[r] = free[r] - len
    if free[r] < 1 then table.remove(open, at or #open) end
  end
  return rows
end

-- sft.batch(examples, rows, {size =, context =, pack =, pad = 0, device =}):
-- size rows (missing ones empty) as int64 tensors (size, T): input (indices
-- from 1: id + 1), target (the next id + 1 where trained, else
-- sft.ignore_index), and packed (T = context) positions (from 0 in each
-- sequence) and segments (1, 2, ... in the row, 0 for the padding); without
-- pack T is the longest sequence's inputs, right-padded. tokens: the targets
-- not ignored.
function sft.batch(examples, rows, opts)
  local B, pad = opts.size or #rows, (opts.pad or 0) + 1
  local T = opts.context
  if not opts.pack then
    T = 1
    for b = 1, B do
      if rows[b] then T = math.max(T, #examples[rows[b][1]].ids - 1) end
    end
  end
  local input, target, pos, seg, count = {}, {}, {}, {}, 0
  for b = 1, B do
    local x, y, p, s = {}, {}, {}, {}
    for k, i in ipairs(rows[b] or {}) do
      local e = examples[i]
      for j = 1, #e.ids - 1 do
        x[#x + 1], p[#p + 1], s[#s + 1] = e.ids[j] + 1, j - 1, k
        if e.train[j + 1] then y[#y + 1] = e.ids[j + 1] + 1; count = count + 1 else y[#y + 1] = sft.ignore_index end
      end
    end
    if #x > T then error(("data.sft.batch: row %d holds %d inputs, more than %d"):format(b, #x, T), 2) end
    for j = #x + 1, T do x[j], y[j], p[j], s[j] = pad, sft.ignore_index, j - 1, 0 end
    input[b], target[b], pos[b], seg[b] = x, y, p, s
  end
  local function t(v)
    local r = zorch.tensor(v, {dtype = "int64"})
    return opts.device and opts.device ~= "cpu" and r:to(opts.device) or r
  end
  local out = {input = t(input), target = t(target), tokens = count}
  if opts.pack then out.positions, out.segments = t(pos), t(seg) end
  return out
end

-- sft.loss(logits (B, T, V), target (B, T), denom): the cross-entropy summed
-- over the targets not ignored, summed in fp32, divided by denom (default:
-- their count). The mean over a step's response tokens is this with the
-- step's count as denom.
function sft.loss(logits, target, denom)
  local V = logits:size(logits:dim())
  local per = zorch.cross_entropy(logits:reshape(-1, V), target:reshape(-1), {reduction = "none"})
  local sum = per:float():sum()
  if denom == nil then denom = math.max(1, target:ne(sft.ignore_index):sum():item()) end
  return sum / denom
end

zorch.data.sft = sft
return sft
