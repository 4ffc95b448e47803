-- Llama, Mistral and Qwen2 as a zorch script: one decoder-only model (RMSNorm,
-- rotary embeddings, SwiGLU, grouped-query attention) for the three model_types
-- of Hugging Face, trained through the Engine (ZeRO stages 0-3, fp32 or bf16);
-- --init reads a Hugging Face folder, --save-hf writes one; --tensor-parallel T
-- splits each layer over T ranks (Megatron's layers, llama.tensor_parallel).
--   build/cpu/zorch models/llama.lua                          a small byte-level Llama on a book
--   build/cpu/zorch models/llama.lua --init DIR --data t.bin  from a Hugging Face folder
-- docs/llama.md describes the model, the flags and what is refused.
local zorch = require "zorch"
local nn, data, hf, llama, train = zorch.nn, zorch.data, zorch.hf, zorch.models.llama, zorch.models.train

local opt = zorch.flags(arg, train.flags({
  init = {"", "start from this Hugging Face folder (config.json and model.safetensors or its shards)"},
  ["model-type"] = {"llama", "without --init: llama, mistral or qwen2", choices = {"llama", "mistral", "qwen2"}},
  layers = {4, "without --init: decoder layers", type = "integer"},
  heads = {4, "without --init: attention heads", type = "integer"},
  ["kv-heads"] = {nil, "without --init: key/value heads (default: --heads)", type = "integer"},
  dim = {128, "without --init: hidden size", type = "integer"},
  hidden = {nil, "without --init: the MLP's intermediate size (default: 8/3 dim, a multiple of 32)", type = "integer"},
  vocab = {nil, "without --init: vocabulary size (default: 256 for text, 65536 for a .bin token file)", type = "integer"},
  ["sliding-window"] = {nil, "without --init, mistral: the attention window", type = "integer"},
  context = {64, "sequence length T of the batches (at most the model's max_position_embeddings)"},
  ["batch-size"] = {16, "sequences per micro-batch and rank"},
  data = {"/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt",
          "a text file (one token a byte) or a .bin file of little-endian token ids (Hugging Face's, from 0)"},
  ["token-bytes"] = {2, "bytes per token id in a .bin file: 2 (uint16) or 4 (uint32, vocabularies over 65536)"},
  ["val-fraction"] = {0.1, "the last part of the tokens kept for validation"},
  ["val-every"] = {0, "validation loss every N steps and at the end (0: only at the end)"},
  ["val-batches"] = {8, "batches of the validation split each validation reads"},
  logits = {"", "write the first validation batch (tokens, from 0) and the model's logits on it to this safetensors file"},
  ["no-shuffle"] = {false, "read the data in order, llm.c's way, instead of random windows"},
  quantize = {"none", "at the end: the validation loss and perplexity before and after quantising the Linear layers (int8, or int4 in groups of 32); --save-hf then writes the quantised folder", choices = {"none", "int8", "int4"}},
  ["tensor-parallel"] = {1, "tensor-parallel ranks T: each layer's matrices, its heads and the vocabulary split " ..
                         "T ways (Megatron's layers); the data-parallel ranks are the rest"},
  prompt = {nil, "--sample's start: text (a byte a token) or, with a .bin file, token ids separated by spaces " ..
                 "(default: a newline, or the last id)", type = "string"},
}), "usage: zorch models/llama.lua [flags]")

-- ---- configuration ------------------------------------------------------------------------

local usage, try = train.usage("llama")
train.check_outputs(opt, {"logits"})

local binary = opt.data:match("%.bin$") ~= nil
if opt["token-bytes"] ~= 2 and opt["token-bytes"] ~= 4 then usage("--token-bytes must be 2 or 4, got %d", opt["token-bytes"]) end
local raw -- config.json, as Transformers reads it
if opt.init ~= "" then
  raw = try("--init", hf.config, opt.init)
else
  local dim = opt.dim
  raw = {model_type = opt["model-type"], vocab_size = opt.vocab or (binary and 65536 or 256), hidden_size = dim,
         intermediate_size = opt.hidden or math.max(32, (8 * dim // 3 + 31) // 32 * 32),
         num_hidden_layers = opt.layers, num_attention_heads = opt.heads,
         num_key_value_heads = opt["kv-heads"] or opt.heads, max_position_embeddings = math.max(opt.context, 64),
         rms_norm_eps = 1e-5, rope_theta = 10000.0, hidden_act = "silu", tie_word_embeddings = false,
         sliding_window = opt["model-type"] == "mistral" and opt["sliding-window"] or nil,
         initializer_range = 0.02}
end
local cfg = try("--init", hf.decoder_config, raw, opt.init ~= "" and (opt.init .. "/config.json") or "the flags")
if opt.context > cfg.max_pos then
  usage("--context %d exceeds the model's max_position_embeddings %d", opt.context, cfg.max_pos)
end

-- ---- the model: zorch.models.llama (lua/zorch/models/llama.lua) ---------------------------

-- ---- data: token ids, a train/validation split, batches --------------------------------------

local rank, world = zorch.dist.rank(), zorch.dist.size()
-- Tensor parallelism: the world is tensor x data ranks (zorch.dist.layout); the
-- ranks of a tensor group read the same batches, so batches go by data rank.
local TP = opt["tensor-parallel"]
if TP < 1 then usage("--tensor-parallel must be >= 1, got %d", TP) end
if world % TP ~= 0 then usage("--tensor-parallel %d does not divide the %d ranks", TP, world) end
local layout
if TP > 1 then
  layout = zorch.dist.layout{tensor = TP}
  rank, world = layout.coords.data, layout.sizes.data
end
local device = "cpu" -- where batches go: the Engine's device, set once it is made
local B, T = opt["batch-size"], opt.context
local tokens, split, nval = train.token_data(opt, {dtype = binary and (opt["token-bytes"] == 4 and "uint32" or "uint16")
  or "uint8", batch = B, seq = T, world = world, vocab = cfg.vocab, usage = usage, try = try})
local ntok = tokens:numel()

-- Micro-batch m (from 0) of this rank as inputs and targets (B, T), as
-- models/gpt2.lua reads them (in order: the next B*T*ranks tokens; else B
-- random windows). The ids become indices from 1 here, once.
local function batch(t, m, ordered)
  return data.token_batch(t, m, {batch = B, seq = T, rank = rank, world = world, ordered = ordered == true,
                                   device = device})
end

local function loss_of(model, x, y) return train.lm_loss(model(x), y, TP > 1 and layout.tensor or nil) end

-- ---- model, optimizer and engine ------------------------------------------------------------

zorch.manual_seed(opt.seed)
local model
if opt.init ~= "" then model = try("--init", function() return (llama.from_pretrained(opt.init)) end)
else model = llama.new(cfg, {initializer_range = raw.initializer_range}) end
if TP > 1 then try("--tensor-parallel", llama.tensor_parallel, model, layout.tensor) end -- (this rank's slices)

local use_lora = train.lora(model, opt, usage, try)
local engine = train.engine(opt, {layout = layout})
device = engine.device
if opt["checkpoint-activations"] then rawset(model, "checkpoint", function(...) return engine:checkpoint(...) end) end
local adam
model, _, adam = engine:prepare(model, nil, train.adamw(model, opt, use_lora))
local lr_at = train.lr_at(opt, opt.steps)

local nparams, lora_line = train.summary(model, use_lora, TP)
engine:print(("llama: %s, %d layers, %d heads (%d key/value), dim %d, MLP %d, vocab %d%s%s: %s parameters; " ..
  "%s tokens of %s (%s for validation); batch %d x %d x %d accumulation x %d %sranks%s%s"):format(cfg.model_type,
  cfg.layers, cfg.heads, cfg.kv_heads, cfg.dim, cfg.hidden, cfg.vocab, cfg.tie and ", tied head" or "",
  cfg.sliding_window and (", window %d"):format(cfg.sliding_window) or "", nparams,
  train.count(ntok), opt.data, train.count(nval), B, T, opt.accum, world, TP > 1 and "data-parallel " or "",
  TP > 1 and (" x %d tensor-parallel"):format(TP) or "", lora_line))

local function validate()
  if not split.val then return nil end
  model:eval()
  local total = 0
  zorch.no_grad(function()
    for m = 0, opt["val-batches"] - 1 do
      local x, y = batch(split.val, m, true)
      total = total + loss_of(model, x, y):item()
    end
  end)
  model:train()
  return engine:mean(total / opt["val-batches"])
end

-- ---- training ------------------------------------------------------------------------------

local step = 0
if opt.resume ~= "" then
  step = engine:load_checkpoint(opt.resume).step
  engine:print(("resumed from %s at step %d"):format(opt.resume, step))
end
local ordered = opt["no-shuffle"]
local tok_per_step = B * T * opt.accum * world
while step < opt.steps do
  local t0 = zorch.clock()
  adam.lr = lr_at(step)
  adam:zero_grad()
  local loss = 0
  for a = 0, opt.accum - 1 do
    local x, y = batch(split.train, step * opt.accum + a, ordered)
    local l = loss_of(model, x, y)
    engine:backward(l)
    loss = loss + l:item() / opt.accum
  end
  adam:step()
  step = step + 1
  loss = engine:mean(loss)
  local dt = zorch.clock() - t0
  if step % opt["print-every"] == 0 or step == opt.steps then
    engine:print(("step %d/%d | loss %.7f | lr %.4e | norm %.4f | %.1f ms | tok/s %.0f"):format(step, opt.steps,
      loss, adam.lr, engine:clip_grad_norm() or 0, dt * 1000, tok_per_step / dt))
  end
  if opt["val-every"] > 0 and step % opt["val-every"] == 0 and step < opt.steps then
    engine:print(("step %d/%d | val loss %.6f"):format(step, opt.steps, validate()))
  end
  if opt["checkpoint-dir"] ~= "" and opt["checkpoint-every"] > 0 and step % opt["checkpoint-every"] == 0 then
    engine:save_checkpoint(opt["checkpoint-dir"])
  end
end
if opt.steps > 0 and split.val then engine:print(("step %d/%d | val loss %.6f"):format(step, opt.steps, validate())) end
if opt["checkpoint-dir"] ~= "" then engine:save_checkpoint(opt["checkpoint-dir"]) end

-- ---- weight-only quantisation (docs/quantization.md) -----------------------------------------

if opt.quantize ~= "none" then
  if not split.val then usage("--quantize: needs a validation split (--val-fraction above 0)") end
  local before = validate()
  try("--quantize", nn.quantize, model, opt.quantize == "int8" and {bits = 8} or {bits = 4, group = 32})
  local after = validate()
  engine:print(("quantize %s | val loss %.6f -> %.6f | perplexity %.4f -> %.4f (%+.2f%%)"):format(opt.quantize,
    before, after, math.exp(before), math.exp(after), 100 * (math.exp(after - before) - 1)))
end

-- ---- Hugging Face export --------------------------------------------------------------------

train.export(model, engine, opt, {raw = raw, cfg = cfg, use_lora = use_lora, usage = usage, try = try,
                                  base = opt.init ~= "" and opt.init or nil, tensor = layout and layout.tensor})

if opt.logits ~= "" then
  model:eval()
  local x = batch(split.val or split.train, 0, true)
  local logits = zorch.no_grad(function() return model(x) end)
  if TP > 1 then logits = zorch.dist.gather_last(layout.tensor, logits) end -- (the vocabulary's ranges side by side)
  if zorch.dist.rank() == 0 then zorch.save({tokens = (x - 1):to("cpu"), logits = logits:float():to("cpu"):contiguous()}, opt.logits) end
  model:train()
end

-- ---- a sample -------------------------------------------------------------------------------

if opt.sample > 0 then
  local prompt, ids = opt.prompt or (binary and tostring(cfg.vocab - 1) or "\n"), {}
  if binary then for w in prompt:gmatch("%d+") do ids[#ids + 1] = tonumber(w) + 1 end
  else for i = 1, #prompt do ids[i] = prompt:byte(i) + 1 end end
  if #ids == 0 then usage("--prompt %q gives no token ids", prompt) end
  local plen = #ids
  local _, dt = try("--sample", train.sample, model, engine, ids, opt, {context = cfg.max_pos})
  if zorch.dist.rank() == 0 then
    local out = {}
    for i = plen + 1, #ids do out[#out + 1] = binary and tostring(ids[i] - 1) or ids[i] <= 256 and string.char(ids[i] - 1) or ("<%d>"):format(ids[i] - 1) end
    local sep = binary and " " or ""
    io.stdout:write("---- sample ----\n", prompt, sep, table.concat(out, sep), "\n---- end ----\n")
    io.stderr:write(("llama: %d tokens in %.2f s (%.1f tokens/s, paged cache)\n"):format(#ids - plen, dt, (#ids - plen) / dt))
  end
end
