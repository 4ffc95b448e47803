-- zorch.models.train: what the decoder scripts (models/llama.lua,
-- models/finetune.lua) share around their own data: the flags of the
-- optimizer, schedule, engine, LoRA, checkpoints, exports and sampling; LoRA
-- on the model; AdamW with decay on the 2-d parameters; the warm-up + cosine
-- schedule; the --save-hf and --save-adapter exports at the end.
--   train.flags(spec, defaults)          the shared flags added to a zorch.flags spec
--   train.usage(name)                    usage(fmt, ...) and try(flag, fn, ...) raising usage errors
--   train.lora(model, opt, usage, try)   adapters from the flags; true when LoRA is on
--   train.check_outputs(opt, more)       usage errors now for outputs that cannot be written
--   train.token_data(opt, x)             --data's tokens and their checked train/validation split
--   train.lm_loss(logits, y, group)      the language-model loss (vocabulary-parallel with a group)
--   train.engine(opt, x)                 the Engine of the flags
--   train.adamw(model, opt, use_lora)    AdamW over the trained parameters, in decay groups
--   train.lr_at(opt, steps)              the learning rate of step s (from 0)
--   train.summary(model, use_lora)       the parameter count and the LoRA part of the first line
--   train.export(model, engine, opt, x)  --save-hf and --save-adapter
--   train.sample(model, engine, ids, opt, x)  --sample: ids (from 1) with the tokens generated
-- docs/llama.md lists the flags.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn, hf = zorch._require "zorch.nn", zorch._require "zorch.io.hf"
local train = {}

-- name -> {default, help, ...}; defaults[name] replaces the default.
local SHARED = {
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
  device = {"cpu", "cpu, cuda (each rank its own GPU) or cuda:N"},
  seed = {1337, "seed of the weights and the batches"},
  ["checkpoint-activations"] = {false, "recompute each layer in backward instead of keeping its activations"},
  ["save-hf"] = {"", "write config.json and the safetensors (sharded past --max-shard-size) into this folder"},
  ["max-shard-size"] = {"5GB", "--save-hf's largest shard: bytes or a size such as 200MB or 2GiB"},
  ["checkpoint-dir"] = {"", "save a checkpoint here at the end (and every --checkpoint-every steps)"},
  ["checkpoint-every"] = {0, "optimizer steps between checkpoints (0: only at the end)"},
  resume = {"", "continue from the latest checkpoint in this folder (--steps counts the total)"},
  ["lora-r"] = {0, "LoRA: the adapters' rank (0: off, every weight trained)", type = "integer"},
  ["lora-alpha"] = {16, "LoRA: alpha (the adapter's output scaled by alpha / r)", type = "number"},
  ["lora-dropout"] = {0.0, "LoRA: dropout on the adapter's input", type = "number"},
  ["lora-targets"] = {"q_proj,v_proj", "LoRA: the Linear modules that take adapters (PEFT's target_modules, by the name's last part)"},
  ["lora-rslora"] = {false, "LoRA: scale by alpha / sqrt(r) (rank-stabilised)"},
  ["init-adapter"] = {"", "start from this PEFT LoRA folder (adapter_config.json, adapter_model.safetensors); its config sets r, alpha, dropout and the targets"},
  ["save-adapter"] = {"", "write the adapters as a PEFT folder (adapter_config.json, adapter_model.safetensors)"},
  ["print-every"] = {1, "a step line every N steps"},
  sample = {0, "generate this many tokens at the end (greedy at --temperature 0)", type = "integer"},
  temperature = {1.0, "sampling temperature (0: greedy)", type = "number"},
  ["top-k"] = {0, "sample among the k most likely tokens only (0: all)", type = "integer"},
}

-- The spec with every shared flag the script does not define itself.
function train.flags(spec, defaults)
  for name, entry in pairs(SHARED) do
    if spec[name] == nil then
      local e = {}
      for k, v in pairs(entry) do e[k] = v end
      if defaults and defaults[name] ~= nil then e[1] = defaults[name] end
      spec[name] = e
    end
  end
  return spec
end

-- usage(fmt, ...): a usage error "name: message" (status 2); try(flag, fn, ...):
-- fn's results, or its error as a usage error naming the flag.
function train.usage(name)
  local function usage(fmt, ...) error(zorch.flags.usage_error(name .. ": " .. fmt:format(...)), 0) end
  local function try(flag, fn, ...)
    local r = table.pack(pcall(fn, ...))
    if not r[1] then usage("%s: %s", flag, (tostring(r[2]):gsub("^[^:]*:%d+: ", ""))) end
    return table.unpack(r, 2, r.n)
  end
  return usage, try
end

-- LoRA: adapters on the targets (or PEFT's folder), every base weight frozen.
function train.lora(model, opt, usage, try)
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
  return use_lora
end

-- --save-hf, --save-adapter and the flags named in `more` (a list): a usage
-- error before any training when one cannot be written (a missing folder).
function train.check_outputs(opt, more)
  local names = {"save-hf", "save-adapter"}
  for _, k in ipairs(more or {}) do names[#names + 1] = k end
  for _, k in ipairs(names) do zorch.flags.check_output(opt[k], "--" .. k) end
end

-- The token file of --data (dtype: uint8 for text, uint16/uint32 ids), its
-- train/validation split by --val-fraction, checked against what one batch
-- needs (x: {dtype, batch, seq, world, vocab, usage, try}). Returns
-- tokens, split {train, val}, nval.
function train.token_data(opt, x)
  local tokens = x.try("--data", zorch.data.load_tokens, opt.data, {dtype = x.dtype})
  local ntok = tokens:numel()
  local nval = math.floor(ntok * opt["val-fraction"])
  local split = {train = tokens:narrow(1, 1, ntok - nval),
                 val = nval > 0 and tokens:narrow(1, ntok - nval + 1, nval) or nil}
  for name, t in pairs(split) do
    if t:numel() < x.batch * x.seq * x.world + 1 then
      x.usage("the %s split of %s has %d tokens, fewer than a batch needs (%d x %d x %d ranks + 1)",
        name, opt.data, t:numel(), x.batch, x.seq, x.world)
    end
  end
  if ntok > 0 and tokens:max():item() >= x.vocab then
    x.usage("%s holds token id %d, outside the vocabulary of %d", opt.data, tokens:max():item(), x.vocab)
  end
  return tokens, split, nval
end

-- The mean cross-entropy of logits (B, T, V) against targets (B, T); with a
-- tensor-parallel group the logits are this rank's vocabulary slice and the
-- loss is taken without gathering them.
function train.lm_loss(logits, y, tensor_group)
  local n = y:numel()
  if tensor_group then
    return nn.vocab_parallel_cross_entropy(logits:reshape(n, logits:size(3)), y:reshape(n), tensor_group)
  end
  return zorch.cross_entropy(logits:reshape(n, logits:size(3)), y:reshape(n))
end

-- x: {layout = zorch.dist.layout's table with tensor parallelism}
function train.engine(opt, x)
  return zorch.Engine{zero_stage = opt["zero-stage"], gradient_clipping = opt.clip,
                      gradient_accumulation_steps = opt.accum, precision = opt.precision, device = opt.device,
                      layout = x and x.layout or false}
end

-- AdamW: the 2-d parameters (matrices, embeddings) decay; norms and biases do
-- not. With LoRA the adapters only.
function train.adamw(model, opt, use_lora)
  local decay, no_decay = {}, {}
  for _, p in ipairs(use_lora and nn.lora.parameters(model) or model:parameters()) do
    table.insert(p:dim() >= 2 and decay or no_decay, p)
  end
  local groups = {{params = decay, weight_decay = opt["weight-decay"]}}
  if #no_decay > 0 then groups[2] = {params = no_decay, weight_decay = 0} end
  return zorch.optim.AdamW(groups, {lr = opt.lr, betas = {0.9, opt.beta2}, eps = 1e-8})
end

-- Step s (from 0) of `steps`: linear warm-up from lr / warmup, then a cosine
-- to min-lr (default lr / 10), or constant.
function train.lr_at(opt, steps)
  local min_lr, lr, warmup = opt["min-lr"] or opt.lr / 10, opt.lr, opt.warmup
  return function(s)
    if opt["lr-schedule"] == "constant" then return lr end
    if s < warmup then return lr * (s + 1) / warmup end
    local ratio = math.min((s - warmup) / math.max(steps - warmup, 1), 1)
    return min_lr + 0.5 * (1 + math.cos(math.pi * ratio)) * (lr - min_lr)
  end
end

function train.count(n)
  return n >= 1e6 and ("%.2fM"):format(n / 1e6) or n >= 1e3 and ("%.1fk"):format(n / 1e3) or tostring(n)
end

-- "N parameters" and, with LoRA, "; LoRA r R, alpha A on M modules: K trainable",
-- the whole model's counts when its layers are split over tp (default 1) ranks.
function train.summary(model, use_lora, tp)
  tp = tp or 1
  local params = train.count(nn.tp_num_parameters(model, tp))
  if not use_lora then return params, "" end
  local split = nn.tp_splits(model)
  local n, names, first = 0, {}, nil
  for name, p in model:named_parameters() do
    if p.requires_grad then n = n + p:numel() * (split[name] and tp or 1) end
  end
  for name, m in nn.lora.modules(model) do names[#names + 1] = name; first = first or m end
  return params, ("; LoRA r %d, alpha %g%s on %d modules: %s trainable"):format(first.r, first.alpha,
    first.rslora and " (rslora)" or "", #names, train.count(n))
end

-- The exports the flags ask for: --save-hf (the merged model with LoRA:
-- W + B A * scaling, PEFT's merge_and_unload) and --save-adapter (PEFT's
-- folder). x: {raw = config.json read, cfg = its normalised form, use_lora,
-- usage, try, base = the base model's folder for adapter_config.json,
-- tensor = the tensor-parallel group whose slices are gathered, or nil}.
-- World rank 0 writes.
function train.export(model, engine, opt, x)
  local rank = zorch.dist.rank()
  if opt["save-hf"] ~= "" then
    local dir = opt["save-hf"]
    local sd = model:state_dict() -- (stage 3 gathers it on every rank)
    if x.tensor then sd = zorch.dist.gather_state_dict(x.tensor, sd, nn.tp_splits(model)) end -- (the whole, everywhere)
    if x.use_lora then sd = nn.lora.merged_state_dict(model, sd) end -- the fine-tuned model, adapters folded in
    if rank == 0 then
      local out = zorch.models.llama.hf_config(x.raw, x.cfg)
      out.quantization_config = nn.quantization_config(model)
      x.try("--save-hf", hf.save_pretrained, sd, dir, {config = out, max_shard_size = opt["max-shard-size"],
            dtype = "float32", skip = x.cfg.tie and {"lm_head.weight"} or nil})
    end
    engine:print(("saved %s (config.json and the safetensors)"):format(dir))
  end
  if opt["save-adapter"] ~= "" then
    engine:gather() -- (stage 3: every rank gathers, rank 0 writes)
    local sd = nn.lora.state_dict(model) -- (with tensor parallelism every rank gathers the whole adapters)
    local ok, err = true, nil
    if rank == 0 then
      ok, err = pcall(nn.lora.save, model, opt["save-adapter"], {state_dict = sd, base_model_name_or_path = x.base})
    end
    engine:release()
    if not ok then x.usage("--save-adapter: %s", (tostring(err):gsub("^[^:]*:%d+: ", ""))) end
    engine:print(("saved %s (adapter_config.json and adapter_model.safetensors)"):format(opt["save-adapter"]))
  end
end

-- --sample tokens appended to ids (a list of indices from 1) by
-- zorch.generate (the paged cache and the sampler), with --temperature and
-- --top-k; x: {context = the model's positions, eos = an index that ends it}.
-- Every rank holds the whole model meanwhile (stage 3 gathers it), or its
-- tensor-parallel slices (each rank caches its heads). Returns ids and the
-- seconds it took.
function train.sample(model, engine, ids, opt, x)
  x = x or {}
  local n = opt.sample
  if x.context and #ids + n > x.context then
    error(("--sample %d after a prompt of %d tokens exceeds the model's %d positions"):format(n, #ids, x.context), 2)
  end
  local prompt = {}
  for i, id in ipairs(ids) do prompt[i] = id - 1 end
  model:eval()
  engine:gather()
  local t0 = zorch.clock()
  local r = zorch.generate(model, prompt, {max_new_tokens = n, eos_token_id = x.eos and x.eos - 1 or nil,
    do_sample = opt.temperature > 0, temperature = opt.temperature, top_k = opt["top-k"]})[1]
  local dt = zorch.clock() - t0
  engine:release()
  model:train()
  for _, t in ipairs(r.tokens) do ids[#ids + 1] = t + 1 end
  return ids, dt
end

zorch.models.train = train
return train
