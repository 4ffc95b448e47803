-- Llama, Mistral and Qwen2 as a zorch script: one decoder-only model (RMSNorm,
-- rotary embeddings, SwiGLU, grouped-query attention) for the three model_types
-- of Hugging Face, trained through the Engine (ZeRO stages 0-3, fp32 or bf16);
-- --init reads a Hugging Face folder, --save-hf writes one; --tensor-parallel T
-- splits each layer over T ranks (Megatron's layers, llama.tensor_parallel).
--   build/cpu/zorch models/llama.lua                          a small byte-level Llama on a book
--   build/cpu/zorch models/llama.lua --init DIR --data t.bin  from a Hugging Face folder
-- docs/llama.md describes the model, the flags and what is refused.
local zorch = require "zorch"
local nn, optim, data, hf, llama = zorch.nn, zorch.optim, zorch.data, zorch.hf, zorch.models.llama

local opt = zorch.flags(arg, {
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
  accum = {1, "micro-batches per optimizer step (gradient accumulation)"},
  steps = {300, "optimizer steps"},
  lr = {1e-3, "peak learning rate"},
  ["min-lr"] = {nil, "the cosine schedule's final learning rate (default: lr / 10)", type = "number"},
  ["lr-schedule"] = {"cosine", "cosine (after a linear warm-up) or constant", choices = {"cosine", "constant"}},
  warmup = {20, "warm-up steps (linear from lr / warmup to lr)"},
  beta2 = {0.95, "AdamW's beta2 (beta1 is 0.9)"},
  ["weight-decay"] = {0.1, "AdamW's decoupled weight decay, on the 2-d parameters only"},
  clip = {1.0, "gradient clipping: max global norm (0: off)"},
  ["zero-stage"] = {0, "ZeRO stage (0-3)"},
  precision = {"fp32", "fp32 or bf16 (16-bit parameters and activations, fp32 master weights)",
               choices = {"fp32", "bf16"}},
  data = {"/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt",
          "a text file (one token a byte) or a .bin file of little-endian token ids (Hugging Face's, from 0)"},
  ["token-bytes"] = {2, "bytes per token id in a .bin file: 2 (uint16) or 4 (uint32, vocabularies over 65536)"},
  ["val-fraction"] = {0.1, "the last part of the tokens kept for validation"},
  ["val-every"] = {0, "validation loss every N steps and at the end (0: only at the end)"},
  ["val-batches"] = {8, "batches of the validation split each validation reads"},
  ["save-hf"] = {"", "write config.json and the safetensors (sharded past --max-shard-size) into this folder"},
  ["max-shard-size"] = {"5GB", "--save-hf's largest shard: bytes or a size such as 200MB or 2GiB"},
  logits = {"", "write the first validation batch (tokens, from 0) and the model's logits on it to this safetensors file"},
  ["checkpoint-dir"] = {"", "save a checkpoint here at the end (and every --checkpoint-every steps)"},
  ["checkpoint-every"] = {0, "optimizer steps between checkpoints (0: only at the end)"},
  resume = {"", "continue from the latest checkpoint in this folder (--steps counts the total)"},
  seed = {1337, "seed of the weights and the batches"},
  ["no-shuffle"] = {false, "read the data in order, llm.c's way, instead of random windows"},
  ["checkpoint-activations"] = {false, "recompute each layer in backward instead of keeping its activations"},
  ["lora-r"] = {0, "LoRA: the adapters' rank (0: off, every weight trained)", type = "integer"},
  ["lora-alpha"] = {16, "LoRA: alpha (the adapter's output scaled by alpha / r)", type = "number"},
  ["lora-dropout"] = {0.0, "LoRA: dropout on the adapter's input", type = "number"},
  ["lora-targets"] = {"q_proj,v_proj", "LoRA: the Linear modules that take adapters (PEFT's target_modules, by the name's last part)"},
  ["lora-rslora"] = {false, "LoRA: scale by alpha / sqrt(r) (rank-stabilised)"},
  ["init-adapter"] = {"", "start from this PEFT LoRA folder (adapter_config.json, adapter_model.safetensors); its config sets r, alpha, dropout and the targets"},
  ["save-adapter"] = {"", "write the adapters as a PEFT folder (adapter_config.json, adapter_model.safetensors)"},
  ["print-every"] = {1, "a step line every N steps"},
  quantize = {"none", "at the end: the validation loss and perplexity before and after quantising the Linear layers (int8, or int4 in groups of 32); --save-hf then writes the quantised folder", choices = {"none", "int8", "int4"}},
  device = {"cpu", "cpu, cuda (each rank its own GPU) or cuda:N"},
  ["tensor-parallel"] = {1, "tensor-parallel ranks T: each layer's matrices, its heads and the vocabulary split " ..
                         "T ways (Megatron's layers); the data-parallel ranks are the rest"},
}, "usage: zorch models/llama.lua [flags]")

-- ---- configuration ------------------------------------------------------------------------

local function usage(fmt, ...) error(zorch.flags.usage_error("llama: " .. fmt:format(...)), 0) end
local function try(flag, fn, ...)
  local ok, r = pcall(fn, ...)
  if not ok then usage("%s: %s", flag, (tostring(r):gsub("^[^:]*:%d+: ", ""))) end
  return r
end

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
local tokens = try("--data", data.load_tokens, opt.data,
                   {dtype = binary and (opt["token-bytes"] == 4 and "uint32" or "uint16") or "uint8"})
local ntok = tokens:numel()
local nval = math.floor(ntok * opt["val-fraction"])
local split = {train = tokens:narrow(1, 1, ntok - nval), val = nval > 0 and tokens:narrow(1, ntok - nval + 1, nval) or nil}
local B, T = opt["batch-size"], opt.context
for name, t in pairs(split) do
  if t:numel() < B * T * world + 1 then
    usage("the %s split of %s has %d tokens, fewer than a batch needs (%d x %d x %d ranks + 1)",
      name, opt.data, t:numel(), B, T, world)
  end
end
if ntok > 0 and tokens:max():item() >= cfg.vocab then
  usage("%s holds token id %d, outside the vocabulary of %d", opt.data, tokens:max():item(), cfg.vocab)
end

-- Micro-batch m (from 0) of this rank as inputs and targets (B, T), as
-- models/gpt2.lua reads them (in order: the next B*T*ranks tokens; else B
-- random windows). The ids become indices from 1 here, once.
local function batch(t, m, ordered)
  return data.token_batch(t, m, {batch = B, seq = T, rank = rank, world = world, ordered = ordered == true,
                                   device = device})
end

local function loss_of(model, x, y)
  local logits = model(x)
  if TP > 1 then -- logits split by vocabulary: the loss without gathering them
    return nn.vocab_parallel_cross_entropy(logits:reshape(B * T, cfg.vocab // TP), y:reshape(B * T), layout.tensor)
  end
  return zorch.cross_entropy(logits:reshape(B * T, cfg.vocab), y:reshape(B * T))
end

-- ---- model, optimizer and engine ------------------------------------------------------------

zorch.manual_seed(opt.seed)
local model
if opt.init ~= "" then model = try("--init", function() return (llama.from_pretrained(opt.init)) end)
else model = llama.new(cfg, {initializer_range = raw.initializer_range}) end
if TP > 1 then try("--tensor-parallel", llama.tensor_parallel, model, layout.tensor) end -- (this rank's slices)

-- LoRA: adapters on the targets, every base weight frozen (the optimizer steps the adapters only)
local use_lora = opt["init-adapter"] ~= "" or opt["lora-r"] > 0
if opt["lora-r"] < 0 then usage("--lora-r must be 0 (off) or a positive rank, got %d", opt["lora-r"]) end
if opt["save-adapter"] ~= "" and not use_lora then usage("--save-adapter needs --lora-r or --init-adapter") end
if opt["init-adapter"] ~= "" then
  try("--init-adapter", nn.lora.load, model, opt["init-adapter"])
elseif use_lora then
  local targets = {}
  for t in opt["lora-targets"]:gmatch("[^,%s]+") do targets[#targets + 1] = t end
  try("--lora-r", nn.lora.apply, model, {r = opt["lora-r"], alpha = opt["lora-alpha"], dropout = opt["lora-dropout"],
                                         rslora = opt["lora-rslora"], target_modules = targets})
end

local engine = zorch.Engine{zero_stage = opt["zero-stage"], gradient_clipping = opt.clip,
                            gradient_accumulation_steps = opt.accum, precision = opt.precision, device = opt.device,
                            layout = layout or false}
device = engine.device
if opt["checkpoint-activations"] then rawset(model, "checkpoint", function(...) return engine:checkpoint(...) end) end
-- AdamW: the 2-d parameters (matrices, embeddings) decay; norms and biases do not
local decay, no_decay = {}, {}
for _, p in ipairs(use_lora and nn.lora.parameters(model) or model:parameters()) do
  table.insert(p:dim() >= 2 and decay or no_decay, p)
end
local groups = {{params = decay, weight_decay = opt["weight-decay"]}}
if #no_decay > 0 then groups[2] = {params = no_decay, weight_decay = 0} end
local adam = optim.AdamW(groups, {lr = opt.lr, betas = {0.9, opt.beta2}, eps = 1e-8})
model, _, adam = engine:prepare(model, nil, adam)

local min_lr = opt["min-lr"] or opt.lr / 10
local function lr_at(s)
  if opt["lr-schedule"] == "constant" then return opt.lr end
  if s < opt.warmup then return opt.lr * (s + 1) / opt.warmup end
  local ratio = math.min((s - opt.warmup) / math.max(opt.steps - opt.warmup, 1), 1)
  return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (opt.lr - min_lr)
end

local function count(n)
  return n >= 1e6 and ("%.2fM"):format(n / 1e6) or n >= 1e3 and ("%.1fk"):format(n / 1e3) or tostring(n)
end
local tp_split = nn.tp_splits(model) -- (the split parameters: the whole model's counts, --save-hf's gather)
local function lora_line()
  if not use_lora then return "" end
  local n, names, first = 0, {}, nil
  for name, p in model:named_parameters() do
    if p.requires_grad then n = n + p:numel() * (tp_split[name] and TP or 1) end
  end
  for name, m in nn.lora.modules(model) do names[#names + 1] = name; first = first or m end
  return ("; LoRA r %d, alpha %g%s on %d modules: %s trainable"):format(first.r, first.alpha,
    first.rslora and " (rslora)" or "", #names, count(n))
end
engine:print(("llama: %s, %d layers, %d heads (%d key/value), dim %d, MLP %d, vocab %d%s%s: %s parameters; " ..
  "%s tokens of %s (%s for validation); batch %d x %d x %d accumulation x %d %sranks%s%s"):format(cfg.model_type,
  cfg.layers, cfg.heads, cfg.kv_heads, cfg.dim, cfg.hidden, cfg.vocab, cfg.tie and ", tied head" or "",
  cfg.sliding_window and (", window %d"):format(cfg.sliding_window) or "", count(nn.tp_num_parameters(model, TP)),
  count(ntok), opt.data, count(nval), B, T, opt.accum, world, TP > 1 and "data-parallel " or "",
  TP > 1 and (" x %d tensor-parallel"):format(TP) or "", lora_line()))

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

if opt["save-hf"] ~= "" then
  local dir = opt["save-hf"]
  local sd = model:state_dict() -- (stage 3 gathers it on every rank)
  if TP > 1 then sd = zorch.dist.gather_state_dict(layout.tensor, sd, tp_split) end -- (every tensor rank: the whole)
  if use_lora then sd = nn.lora.merged_state_dict(model, sd) end -- the fine-tuned model, adapters folded in
  if zorch.dist.rank() == 0 then
    local out = llama.hf_config(raw, cfg)
    out.quantization_config = nn.quantization_config(model)
    try("--save-hf", hf.save_pretrained, sd, dir, {config = out, max_shard_size = opt["max-shard-size"],
        dtype = "float32", skip = cfg.tie and {"lm_head.weight"} or nil})
  end
  engine:print(("saved %s (config.json and the safetensors)"):format(dir))
end

if opt["save-adapter"] ~= "" then
  engine:gather() -- (stage 3: every rank gathers, rank 0 writes)
  local sd = nn.lora.state_dict(model) -- (with --tensor-parallel every rank gathers the whole adapters)
  local ok, err = true, nil
  if zorch.dist.rank() == 0 then
    ok, err = pcall(nn.lora.save, model, opt["save-adapter"], {state_dict = sd,
                    base_model_name_or_path = opt.init ~= "" and opt.init or nil})
  end
  engine:release()
  if not ok then usage("--save-adapter: %s", (tostring(err):gsub("^[^:]*:%d+: ", ""))) end
  engine:print(("saved %s (adapter_config.json and adapter_model.safetensors)"):format(opt["save-adapter"]))
end

if opt.logits ~= "" then
  model:eval()
  local x = batch(split.val or split.train, 0, true)
  local logits = zorch.no_grad(function() return model(x) end)
  if TP > 1 then logits = zorch.dist.gather_last(layout.tensor, logits) end -- (the vocabulary's ranges side by side)
  if zorch.dist.rank() == 0 then zorch.save({tokens = (x - 1):to("cpu"), logits = logits:float():to("cpu"):contiguous()}, opt.logits) end
  model:train()
end
