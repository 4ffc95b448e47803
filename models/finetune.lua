-- Supervised fine-tuning of a Hugging Face Llama, Mistral or Qwen2 folder on
-- JSON lines of {"prompt", "response"} or chat {"messages"}: the loss is the
-- mean over the response (assistant) tokens only; sequences one a row (padded
-- to the longest of the batch) or packed into rows of --context tokens with
-- positions and segments, so packed sequences never see each other. Full
-- fine-tuning or LoRA, through the Engine (ZeRO 0-3, bf16, accumulation,
-- clipping, checkpoints), --save-hf / --save-adapter at the end.
--   build/cpu/zorch models/finetune.lua --init DIR --data train.jsonl --lora-r 8 --pack
-- docs/llama.md ("Fine-tuning") describes the formats and the flags.
local zorch = require "zorch"
local llama, train, sft = zorch.models.llama, zorch.models.train, zorch.data.sft

local opt = zorch.flags(arg, train.flags({
  init = {"", "the Hugging Face folder to fine-tune (config.json, the safetensors, tokenizer.json)"},
  tokenizer = {"", "tokenizer.json (default: the one in --init)"},
  data = {"", "JSON lines, each {\"prompt\": ..., \"response\": ...} or {\"messages\": [{\"role\": ..., \"content\": ...}, ...]}"},
  template = {"{prompt}", "how a prompt is written before its response: {prompt} stands for it"},
  eos = {"", "the token that ends a response, as text (default: tokenizer_config.json's eos_token, else config.json's eos_token_id)"},
  ["chat-template"] = {"", "messages: the chat template, a name (chatml, llama3, zephyr) or a template's text " ..
                           "(default: the tokenizer_config.json's beside the tokenizer)"},
  context = {nil, "tokens per row: longer sequences are cut to it; packed rows hold this many " ..
                  "(default: the model's max_position_embeddings, at most 1024)", type = "integer"},
  pack = {false, "pack several sequences into each row of --context tokens (no attention across them)"},
  ["batch-size"] = {8, "rows per micro-batch and rank"},
  epochs = {nil, "passes over the data (default 1 when --steps is not given)", type = "integer"},
  steps = {nil, "optimizer steps (default: those of --epochs; past an epoch the data is read again)", type = "integer"},
  ["no-shuffle"] = {false, "read the examples in file order every epoch"},
  log = {"", "write each step's loss and learning rate here as JSON lines (zorch plot draws them)"},
  prompt = {nil, "--sample's prompt, written with --template, or a user turn with chat data " ..
                 "(default: the first example's prompt)", type = "string"},
}, {lr = 1e-4, warmup = 10, ["weight-decay"] = 0.0}), "usage: zorch models/finetune.lua --init DIR --data FILE.jsonl [flags]")

local usage, try = train.usage("finetune")
if opt.init == "" then usage("--init DIR is needed: the Hugging Face folder to fine-tune") end
if opt.data == "" then usage("--data FILE is needed: the JSON lines to fine-tune on") end
if opt.epochs and opt.steps then usage("give --epochs or --steps, not both") end
for _, k in ipairs{"context", "batch-size", "accum"} do
  if (opt[k] or 1) < 1 then usage("--%s must be at least 1, got %d", k, opt[k]) end
end
if (opt.epochs or 1) < 1 or (opt.steps or 1) < 0 then usage("--epochs must be at least 1 and --steps at least 0") end
train.check_outputs(opt, {"log"})

-- ---- the model and its tokenizer -------------------------------------------------------------

zorch.manual_seed(opt.seed)
local model, cfg, raw = try("--init", llama.from_pretrained, opt.init)
opt.context = opt.context or math.min(cfg.max_pos, 1024)
if opt.context > cfg.max_pos then
  usage("--context %d exceeds the model's max_position_embeddings %d", opt.context, cfg.max_pos)
end
local tokfile = opt.tokenizer ~= "" and opt.tokenizer or opt.init .. "/tokenizer.json"
local tok = try("--tokenizer", zorch.tokenizer.load, tokfile)

-- The id (from 0) that ends a response: --eos, the tokenizer's eos_token (as
-- Transformers' tokenizer.eos_token), else the model's eos_token_id.
local function tokenizer_eos()
  local f = io.open((tokfile:match("^(.*)/[^/]*$") or ".") .. "/tokenizer_config.json", "rb")
  if not f then return nil end
  local ok, c = pcall(zorch.json.decode, f:read("a"))
  f:close()
  local e = ok and type(c) == "table" and c.eos_token
  if type(e) == "table" then e = e.content end
  return type(e) == "string" and e or nil
end
local eos_text = opt.eos ~= "" and opt.eos or tokenizer_eos()
local eos
if eos_text then
  eos = tok:special_id(eos_text) or tok:token_to_id(eos_text)
  if not eos then usage("the eos token %q is not a token of %s", eos_text, tokfile) end
else
  eos = type(raw.eos_token_id) == "table" and raw.eos_token_id[1] or raw.eos_token_id
  if math.type(eos) ~= "integer" then
    usage("%s/config.json has no eos_token_id: give --eos TEXT, the token that ends a response", opt.init)
  end
end
if eos < 0 or eos >= cfg.vocab then usage("the eos token %d is outside the model's vocabulary of %d", eos, cfg.vocab) end

-- ---- data: examples, an epoch's rows, this rank's batches -----------------------------------

local chat_template = opt["chat-template"] ~= "" and opt["chat-template"] or nil
local examples, stats = try("--data", sft.load, opt.data, tok, {template = opt.template, eos = eos,
  chat_template = chat_template, max_tokens = opt.context + 1, vocab = cfg.vocab})
local rank, world = zorch.dist.rank(), zorch.dist.size()
local B, T, accum = opt["batch-size"], opt.context, opt.accum
local per_step = B * world * accum -- rows an optimizer step reads, over every rank

local current = {} -- the epoch whose rows are at hand
local function rows_of(e)
  if current.epoch ~= e then
    current = {epoch = e, rows = sft.rows(examples, {context = T, pack = opt.pack, shuffle = not opt["no-shuffle"],
                                                     seed = opt.seed, epoch = e})}
  end
  return current.rows
end
local counts = {} -- steps of each epoch (packing changes with the order)
local function steps_of(e)
  counts[e] = counts[e] or (#rows_of(e) + per_step - 1) // per_step
  return counts[e]
end
local total = opt.steps
if not total then
  total = 0
  for e = 1, opt.epochs or 1 do total = total + steps_of(e) end
end
-- Step s (from 0) as an epoch and its step (from 0).
local function locate(s)
  local e = 1
  while s >= steps_of(e) do s, e = s - steps_of(e), e + 1 end
  return e, s
end

-- ---- engine, optimizer ----------------------------------------------------------------------

local use_lora = train.lora(model, opt, usage, try)
local engine = train.engine(opt)
local device = engine.device
if opt["checkpoint-activations"] then rawset(model, "checkpoint", function(...) return engine:checkpoint(...) end) end
local adam
model, _, adam = engine:prepare(model, nil, train.adamw(model, opt, use_lora))
local lr_at = train.lr_at(opt, total)

local nparams, lora_line = train.summary(model, use_lora)
engine:print(("finetune: %s, %d layers, dim %d, vocab %d: %s parameters%s"):format(cfg.model_type, cfg.layers,
  cfg.dim, cfg.vocab, nparams, lora_line))
engine:print(("finetune: %d examples of %s (%s%d cut to %d tokens, %d with nothing to train dropped), %d rows " ..
  "in epoch 1%s; batch %d x %d accumulation x %d ranks; %d steps"):format(#examples, opt.data,
  stats.chat and "chat; " or "", stats.truncated, T + 1, stats.dropped, #rows_of(1),
  opt.pack and (" (packed into %d tokens)"):format(T) or "", B, accum, world, total))

-- ---- training ------------------------------------------------------------------------------

local logger = opt.log ~= "" and zorch.Logger{jsonl = opt.log} or nil
local step = 0
if opt.resume ~= "" then
  step = engine:load_checkpoint(opt.resume).step
  engine:print(("resumed from %s at step %d"):format(opt.resume, step))
end
while step < total do
  local t0 = zorch.clock()
  local e, j = locate(step)
  local rows = rows_of(e)
  local first = j * per_step -- the step's rows are first + 1 .. first + per_step (fewer at the end)
  local targets, inputs = 0, 0 -- over every rank: the mean's denominator, and the tokens read
  for r = first + 1, math.min(first + per_step, #rows) do
    for _, i in ipairs(rows[r]) do targets, inputs = targets + examples[i].targets, inputs + #examples[i].ids - 1 end
  end
  adam.lr = lr_at(step)
  adam:zero_grad()
  local loss = 0
  for a = 0, accum - 1 do
    local mine, at = {}, first + (a * world + rank) * B
    for b = 1, B do mine[b] = rows[at + b] end
    local x = sft.batch(examples, mine, {size = B, context = T, pack = opt.pack, pad = eos, device = device})
    local logits = model(x.input, opt.pack and {positions = x.positions, segments = x.segments} or nil)
    -- the engine divides by accum and averages the ranks: the sum is the step's token mean
    local l = sft.loss(logits, x.target, targets / (accum * world))
    engine:backward(l)
    loss = loss + l:item() / accum
  end
  adam:step()
  step = step + 1
  loss = engine:mean(loss)
  local dt = zorch.clock() - t0
  if logger then logger:log(step, {loss = loss, lr = adam.lr, epoch = e}) end
  if step % opt["print-every"] == 0 or step == total then
    engine:print(("step %d/%d | epoch %d | loss %.7f | lr %.4e | norm %.4f | %.1f ms | tok/s %.0f"):format(step, total,
      e, loss, adam.lr, engine:clip_grad_norm() or 0, dt * 1000, inputs / dt))
  end
  if opt["checkpoint-dir"] ~= "" and opt["checkpoint-every"] > 0 and step % opt["checkpoint-every"] == 0 then
    engine:save_checkpoint(opt["checkpoint-dir"])
  end
end
if logger then logger:close() end
if opt["checkpoint-dir"] ~= "" then engine:save_checkpoint(opt["checkpoint-dir"]) end

-- ---- exports: the model (and its tokenizer) or the adapters ---------------------------------

if raw.eos_token_id == nil then raw.eos_token_id = eos end -- (the saved folder knows its eos)
train.export(model, engine, opt, {raw = raw, cfg = cfg, use_lora = use_lora, usage = usage, try = try, base = opt.init})
if opt["save-hf"] ~= "" and rank == 0 then -- the folder fine-tunes and samples again as it is
  local f = io.open(tokfile, "rb")
  if f then zorch.fs.write_atomic(opt["save-hf"] .. "/tokenizer.json", f:read("a")); f:close() end
end

-- ---- a sample -------------------------------------------------------------------------------

if opt.sample > 0 then
  local ids
  if opt.prompt then -- as the data wrote its prompts
    local p = stats.chat and try("--prompt", tok.apply_chat_template, tok, {{role = "user", content = opt.prompt}},
                                 {add_generation_prompt = true, template = chat_template})
      or tok:encode((opt.template:gsub("{prompt}", function() return opt.prompt end)), {add_special = true})
    ids = type(p) == "table" and p or tok:encode(p, {add_special = false})
  else -- the first example up to its response
    local ex = examples[1]
    ids = {}
    for i = 1, #ex.ids do
      if ex.train[i] then break end
      ids[i] = ex.ids[i]
    end
  end
  local idx = {}
  for i, id in ipairs(ids) do idx[i] = id + 1 end
  local plen = #idx
  local _, dt = try("--sample", train.sample, model, engine, idx, opt, {context = cfg.max_pos, eos = eos + 1})
  if rank == 0 then
    local out = {}
    for i = plen + 1, #idx do if idx[i] ~= eos + 1 then out[#out + 1] = idx[i] - 1 end end
    io.stdout:write("---- sample ----\n", tok:decode(ids), tok:decode(out), "\n---- end ----\n")
    io.stderr:write(("finetune: %d tokens in %.2f s (%.1f tokens/s, paged cache%s)\n"):format(#idx - plen, dt,
      (#idx - plen) / dt, idx[#idx] == eos + 1 and ", ended by eos" or ""))
  end
end
