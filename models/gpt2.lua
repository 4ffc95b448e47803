-- GPT-2 as a zorch script: the model, its training through the Engine (ZeRO
-- stages 0-3, fp32 or bf16), generation with a key/value cache, and Hugging
-- Face interop (--init reads, --save-hf writes GPT-2 safetensors).
--   build/cpu/zorch models/gpt2.lua                    a small byte-level GPT on a book
--   build/cpu/zorch models/gpt2.lua --model gpt2 ...   GPT-2 124M
--   build/cpu/zorch launch -n 2 models/gpt2.lua --zero-stage 3
-- docs/gpt2.md describes the model, the flags and the file formats.
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data
local gpt2 = zorch.models.gpt2

local opt = zorch.flags(arg, {
  model = {"small", "preset: small (4 layers, 4 heads, 128 wide, context 64, bytes) or gpt2 (124M)",
           choices = {"small", "gpt2"}},
  layers = {nil, "transformer blocks (default: the preset's)", type = "integer"},
  heads = {nil, "attention heads (default: the preset's)", type = "integer"},
  dim = {nil, "embedding width C (default: the preset's)", type = "integer"},
  context = {nil, "longest sequence T (default: the preset's)", type = "integer"},
  vocab = {nil, "vocabulary size (default: 256 for text, 50257 for a .bin token file)", type = "integer"},
  ["batch-size"] = {16, "sequences per micro-batch and rank"},
  accum = {1, "micro-batches per optimizer step (gradient accumulation)"},
  steps = {600, "optimizer steps"},
  lr = {2e-3, "peak learning rate"},
  ["min-lr"] = {nil, "the cosine schedule's final learning rate (default: lr / 10)", type = "number"},
  ["lr-schedule"] = {"cosine", "cosine (after a linear warm-up) or constant", choices = {"cosine", "constant"}},
  warmup = {50, "warm-up steps (linear from lr / warmup to lr)"},
  beta2 = {0.99, "AdamW's beta2 (beta1 is 0.9)"},
  ["weight-decay"] = {0.1, "AdamW's decoupled weight decay, on the 2-d parameters only"},
  clip = {1.0, "gradient clipping: max global norm (0: off)"},
  config = {"", "a DeepSpeed JSON config (ZeRO, precision, clipping, optimizer, scheduler, monitors); its \"auto\" values take this script's"},
  ["flops-profile"] = {0, "print the FLOPs of this optimizer step by module, its TFLOP/s and the share of a measured peak (0: none)"},
  ["zero-stage"] = {nil, "ZeRO stage (0-3; default 0, or 1 over the data-parallel ranks with --tensor-parallel)",
                   type = "integer"},
  precision = {"fp32", "fp32 or bf16 (16-bit parameters and activations, fp32 master weights)",
               choices = {"fp32", "bf16"}},
  data = {"/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt",
          "a text file (one token a byte) or a .bin file of little-endian uint16 token ids"},
  ["val-fraction"] = {0.1, "the last part of the tokens kept for validation"},
  ["val-every"] = {0, "validation loss every N steps and at the end (0: only at the end)"},
  ["val-batches"] = {8, "batches of the validation split each validation reads"},
  sample = {0, "generate this many tokens at the end"},
  prompt = {nil, "the text generation starts from: bytes, or token ids separated by spaces when the vocabulary " ..
            "is not bytes (default: a newline, or the last id, GPT-2's <|endoftext|>)", type = "string"},
  temperature = {1.0, "sampling temperature (0: greedy)"},
  ["top-k"] = {0, "sample among the k most likely tokens only (0: all)"},
  ["no-cache"] = {false, "generate without the key/value cache (every token re-reads the window)"},
  init = {"", "start from this safetensors file with Hugging Face GPT-2 names and layouts"},
  ["save-hf"] = {"", "write config.json and model.safetensors for transformers into this folder"},
  logits = {"", "write the first validation batch (tokens) and the model's logits on it to this safetensors file"},
  ["checkpoint-dir"] = {"", "save a checkpoint here at the end (and every --checkpoint-every steps)"},
  ["checkpoint-every"] = {0, "optimizer steps between checkpoints (0: only at the end)"},
  ["keep-last"] = {0, "keep only the newest N checkpoints in --checkpoint-dir (0: every one)"},
  resume = {"", "continue from the latest checkpoint in this folder (--steps counts the total)"},
  seed = {1337, "seed of the weights, the batches and the sampling"},
  ["no-shuffle"] = {false, "read the data in order, llm.c's way, instead of random windows"},
  ["checkpoint-activations"] = {false, "recompute each block in backward instead of keeping its activations"},
  ["print-every"] = {1, "a step line every N steps"},
  device = {"cpu", "cpu, cuda (each rank its own GPU) or cuda:N"},
  ["tensor-parallel"] = {1, "tensor-parallel ranks T: each block's matrices, its heads and the vocabulary split " ..
                         "T ways (Megatron's layers); the data-parallel ranks are the rest"},
  bench = {0, "time N training steps (forward, backward, AdamW step) after a warm-up one, print JSON lines, and stop"},
  ["pipeline-parallel"] = {nil, "pipeline stages P: the layers cut into P stages, the --accum micro-batches of a step " ..
                           "flowing through them (data parallel over ranks / P)", type = "integer"},
  schedule = {"1f1b", "the pipeline's schedule: 1f1b or gpipe", choices = {"1f1b", "gpipe"}},
}, "usage: zorch models/gpt2.lua [flags]")

-- ---- configuration ------------------------------------------------------------------------

-- A bad command line (flags that do not fit together, a file that cannot be
-- used) ends the run with the message and the usage, without a traceback.
local function usage(fmt, ...) error(zorch.flags.usage_error("gpt2: " .. fmt:format(...)), 0) end
-- fn(...), with its error as a usage error naming the flag
local function try(flag, fn, ...)
  local ok, r = pcall(fn, ...)
  if not ok then usage("%s: %s", flag, (tostring(r):gsub("^[^:]*:%d+: ", ""))) end
  return r
end

local PRESETS = {
  small = {layers = 4, heads = 4, dim = 128, context = 64},
  gpt2 = {layers = 12, heads = 12, dim = 768, context = 1024, vocab = 50257},
}
local binary = opt.data:match("%.bin$") ~= nil
local cfg = {}
for _, k in ipairs({"layers", "heads", "dim", "context", "vocab"}) do cfg[k] = opt[k] or PRESETS[opt.model][k] end
cfg.vocab = cfg.vocab or (binary and 50257 or 256)

-- A Hugging Face file fixes the sizes: read them from its tensors (and the
-- heads from a config.json beside it).
local hf_init
if opt.init ~= "" then
  hf_init = gpt2.from_hf(try("--init", zorch.load, opt.init)) -- (the model's names and layouts)
  if not hf_init["wte.weight"] or not hf_init["wpe.weight"] then
    usage("--init %s: no wte.weight or wpe.weight: not a GPT-2 state dict", opt.init)
  end
  cfg.vocab, cfg.dim = hf_init["wte.weight"]:size(1), hf_init["wte.weight"]:size(2)
  cfg.context = hf_init["wpe.weight"]:size(1)
  if opt.context then -- a shorter context: the first position embeddings, as a cropped GPT-2
    if opt.context > cfg.context then
      usage("--context %d: %s has position embeddings for %d tokens only", opt.context, opt.init, cfg.context)
    end
    hf_init["wpe.weight"] = hf_init["wpe.weight"]:narrow(1, 1, opt.context):contiguous()
    cfg.context = opt.context
  end
  local n = 0
  while hf_init[("h.%d.ln_1.weight"):format(n)] do n = n + 1 end
  cfg.layers = n
  local f = io.open((opt.init:match("^(.*)/[^/]*$") or ".") .. "/config.json")
  if f then
    local ok, c = pcall(zorch.json.decode, f:read("a"))
    f:close()
    if ok and type(c) == "table" and math.type(c.n_head) == "integer" then cfg.heads = c.n_head end
  end
end
opt.prompt = opt.prompt or (cfg.vocab == 256 and "\n" or tostring(cfg.vocab - 1))
if opt.sample > 0 and opt.prompt == "" then usage("--prompt is empty: generation needs a token to start from") end
if cfg.dim % cfg.heads ~= 0 then
  usage("--dim %d is not a multiple of --heads %d", cfg.dim, cfg.heads)
end

-- ---- the model ----------------------------------------------------------------------------

-- The model is the module zorch.models.gpt2 (lua/zorch/models/gpt2.lua).
local Block, GPT = gpt2.Block, gpt2.GPT

-- ---- pipeline parallelism: the model as a list of layers -----------------------------------

-- With --pipeline-parallel P the model is nn.Pipeline's list: the embeddings,
-- the blocks, the head (ln_f and lm_head, tied to wte). Each layer is seeded
-- from --seed and its index, so its weights do not depend on P; a stage builds
-- only its own layers, under the names of the whole model's state dict.
local Embed = nn.Module:extend "GPTEmbed"
function Embed:init(c)
  self.wte = nn.Embedding(c.vocab, c.dim)
  self.wpe = nn.Embedding(c.context, c.dim)
  zorch.no_grad(function()
    self.wte.weight:copy_(zorch.randn(self.wte.weight.shape) * 0.02)
    self.wpe.weight:copy_(zorch.randn(self.wpe.weight.shape) * 0.02)
  end)
end
function Embed:forward(idx)
  local pos = zorch.arange(1, idx:size(2) + 1, {device = idx:device()})
  return self.wte(idx) + self.wpe(pos)
end
local function pipeline_block(c) return gpt2.init_block(Block(c), c) end
local Head = nn.Module:extend "GPTHead"
function Head:init(c)
  self.ln_f = nn.LayerNorm(c.dim)
  self.lm_head = nn.Linear(c.dim, c.vocab, {bias = false}) -- (tied: the first stage's wte, broadcast)
end
function Head:forward(x) return self.lm_head(self.ln_f(x)) end

local pipe_layout -- zorch.dist.layout{pipeline = P}
if opt["pipeline-parallel"] then
  local P = opt["pipeline-parallel"]
  local n = zorch.dist.size()
  if P < 1 or n % P ~= 0 then usage("--pipeline-parallel %d does not divide the %d ranks", P, n) end
  local _ = n -- (with --tensor-parallel, P x T must divide them: checked below)
  if P > cfg.layers + 2 then usage("--pipeline-parallel %d: more stages than the %d layers (embeddings, %d blocks, head)", P, cfg.layers + 2, cfg.layers) end
  for _, f in ipairs({"sample", "bench", "logits", "checkpoint-activations"}) do
    local v = opt[f]
    if v ~= nil and v ~= 0 and v ~= "" and v ~= false then usage("--%s is not available with --pipeline-parallel yet", f) end
  end
  if (opt["zero-stage"] or 0) > 1 then usage("--pipeline-parallel takes --zero-stage 0 or 1, not %d", opt["zero-stage"]) end
  pipe_layout = true -- (the layout, with any tensor parallelism, is made below)
end

-- ---- data: token ids, a train/validation split, batches --------------------------------------

local rank, world = zorch.dist.rank(), zorch.dist.size()
local world_rank = rank
-- Tensor parallelism: each block's matrices, heads and the vocabulary split
-- over T ranks; with --pipeline-parallel too, the world is tensor x data x
-- pipeline ranks (zorch.dist.layout). The ranks of a tensor group and of a
-- pipeline read the same batches, so batches go by data rank.
local TP = opt["tensor-parallel"]
if TP < 1 then usage("--tensor-parallel must be >= 1, got %d", TP) end
if TP > 1 then
  local PP = opt["pipeline-parallel"] or 1
  if world % (TP * PP) ~= 0 then usage("--tensor-parallel %d x --pipeline-parallel %d does not divide the %d ranks", TP, PP, world) end
  if cfg.heads % TP ~= 0 then usage("--heads %d is not a multiple of --tensor-parallel %d", cfg.heads, TP) end
  if cfg.vocab % TP ~= 0 then usage("--vocab %d is not a multiple of --tensor-parallel %d", cfg.vocab, TP) end
  for _, f in ipairs({"save-hf", "logits"}) do
    if opt[f] ~= 0 and opt[f] ~= "" then usage("--%s needs the whole model: not with --tensor-parallel", f) end
  end
end
local layout
if TP > 1 or pipe_layout then
  layout = zorch.dist.layout{tensor = TP, pipeline = opt["pipeline-parallel"] or 1}
  if pipe_layout then pipe_layout = layout end
  rank, world = layout.coords.data, layout.sizes.data
end
local device = "cpu" -- where batches go: the Engine's device, set once it is made
local B, T = opt["batch-size"], cfg.context
local tokens, split, nval = zorch.models.train.token_data(opt, {dtype = binary and "uint16" or "uint8", batch = B,
  seq = T, world = world, vocab = cfg.vocab, usage = usage, try = try})
local ntok = tokens:numel()

-- Micro-batch m (from 0) of this rank as inputs and targets (B, T), indices from 1.
-- In order (llm.c's loader): every micro-batch reads the next B*T*ranks tokens,
-- this rank its own B rows; the targets are the inputs shifted by one; at the
-- end it starts again. Otherwise: B windows at random places (different on each rank).
local function batch(t, m, ordered)
  return data.token_batch(t, m, {batch = B, seq = T, rank = rank, world = world, ordered = ordered == true,
                                   device = device})
end

local function loss_of(model, x, y) return zorch.models.train.lm_loss(model(x), y, TP > 1 and layout.tensor or nil) end

-- (Megatron's split of a block and of the model: zorch.models.gpt2.tp_block, tensor_parallel)
local tp_block = zorch.models.gpt2.tp_block

-- ---- model, optimizer and engine ------------------------------------------------------------

zorch.manual_seed(opt.seed)
local model, pipe
if pipe_layout then
  -- (numel: the partition by parameters need not build every layer to count it)
  local C, V = cfg.dim, cfg.vocab
  -- (with --tensor-parallel each layer is made whole, then cut to this rank's slices;
  -- the head's weight, tied to wte, is the first stage's slice of the same rows)
  local g = TP > 1 and layout.tensor or nil
  local function embed()
    local e = Embed(cfg)
    if g then e.wte = nn.VocabParallelEmbedding.from(e.wte, {group = g}) end
    return e
  end
  local function head()
    local h = Head(cfg)
    if g then h.lm_head = nn.ColumnParallelLinear.from(h.lm_head, {group = g}) end
    return h
  end
  local layers = {{name = "", build = embed, numel = (V + cfg.context) * C}}
  for i = 1, cfg.layers do
    layers[#layers + 1] = {name = "h." .. (i - 1), numel = 12 * C * C + 13 * C,
                           build = function() local b = pipeline_block(cfg) return g and tp_block(b, g) or b end}
  end
  layers[#layers + 1] = {name = "", build = head, numel = 2 * C + V * C}
  pipe = nn.Pipeline{layers = layers, group = pipe_layout.pipeline, schedule = opt.schedule, seed_layers = opt.seed,
                     tied = {{"wte.weight", "lm_head.weight"}},
                     loss = function(logits, y) return loss_of(function() return logits end, nil, y) end}
  model = pipe
else
  model = GPT(cfg)
end
if hf_init then
  local sd = hf_init
  if pipe and TP > 1 then -- a stage's layers are already this tensor rank's slices: so are their values
    for name, split in pairs(nn.tp_splits(model)) do
      if sd[name] then sd[name] = zorch.dist.slice(sd[name], split, TP, layout.coords.tensor) end
    end
  end
  try("--init " .. opt.init, model.load_state_dict, model, sd, not pipe) -- (a stage loads its own names)
end

if layout and TP > 1 and not pipe then zorch.models.gpt2.tensor_parallel(model, layout.tensor) end

local flops = opt["flops-profile"] > 0 and {profile_step = math.tointeger(opt["flops-profile"])} or false
local keep_last = opt["keep-last"] > 0 and math.tointeger(opt["keep-last"]) or false
local engine = opt.config ~= "" and
  zorch.Engine(opt.config, {device = opt.device, layout = layout or false, keep_last = keep_last, flops_profiler = flops or nil}) or
  zorch.Engine{zero_stage = opt["zero-stage"] or (TP > 1 and 1 or 0), gradient_clipping = opt.clip,
               gradient_accumulation_steps = opt.accum, precision = opt.precision, device = opt.device,
               layout = layout or false, keep_last = keep_last, flops_profiler = flops}
device = engine.device -- (the Engine picks this rank's GPU for "cuda")
if opt["checkpoint-activations"] then rawset(model, "checkpoint", function(...) return engine:checkpoint(...) end) end
-- AdamW as nanoGPT and llm.c use it: every 2-d parameter (the matrices and both
-- embeddings) decays, the biases and LayerNorms do not: two parameter groups,
-- which the engine steps with their own options at every ZeRO stage.
local decay, no_decay = {}, {}
for _, p in ipairs(model:parameters()) do table.insert(p:dim() >= 2 and decay or no_decay, p) end
local groups = {{params = decay, weight_decay = opt["weight-decay"]}}
if #no_decay > 0 then groups[2] = {params = no_decay, weight_decay = 0} end
local adam = optim.AdamW(groups, {lr = opt.lr, betas = {0.9, opt.beta2}, eps = 1e-8, weight_decay = opt["weight-decay"]})
-- (a config's "auto" values: this script's clipping, AdamW and schedule)
model, _, adam = engine:prepare(model, nil, adam, {gradient_clipping = opt.clip, warmup_min_lr = 0, warmup_max_lr = opt.lr,
  warmup_num_steps = math.max(1, math.tointeger(opt.warmup)), total_num_steps = math.tointeger(opt.steps)})

-- the learning rate of step s (from 0): linear warm-up, then cosine down to min-lr
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
local nparams = model:num_parameters()
if pipe then
  pipe:attach(engine) -- (prints on world rank 0)
  -- the whole model's: every stage's, a tied copy once
  local mine = nparams
  for _, t in ipairs(pipe.ties) do if t.copy then mine = mine - t.param:numel() end end
  local n = zorch.tensor({mine}, {dtype = "float64"})
  pipe.group:allreduce(n)
  nparams = math.tointeger(n:item())
end
if TP > 1 then -- the whole model's: split ones whole, replicated ones once, over the tensor group
  local split, mine = nn.tp_splits(model), 0
  for name, p in model:named_parameters() do mine = mine + (split[name] and p:numel() or p:numel() / TP) end
  if pipe then for _, t in ipairs(pipe.ties) do if t.copy then mine = mine - t.param:numel() end end end
  local n = zorch.tensor({mine}, {dtype = "float64"})
  layout.model:allreduce(n)
  nparams = math.floor(n:item() + 0.5)
end
engine:print(("gpt2: %d layers, %d heads, dim %d, context %d, vocab %d: %s parameters; %s tokens of %s " ..
  "(%s for validation); batch %d x %d x %d accumulation x %d ranks"):format(cfg.layers, cfg.heads, cfg.dim,
  cfg.context, cfg.vocab, count(nparams), count(ntok), opt.data, count(nval), B, T, opt.accum, world) ..
  (pipe and (" x %d pipeline stages (%s)"):format(pipe.num_stages, opt.schedule) or "") ..
  (TP > 1 and (" (data parallel; tensor parallel %d)"):format(TP) or ""))

-- Mean loss over the first --val-batches in-order batches of the validation split.
local function validate()
  if not split.val then return nil end
  if pipe then
    local l = pipe:eval_batch(function(m) return batch(split.val, m - 1, true) end, opt["val-batches"], device)
    return engine:mean(l)
  end
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

-- ---- benchmark: the three parts of a training step, timed apart --------------------------------

if opt.bench > 0 then
  local best = {fwd = math.huge, bwd = math.huge, step = math.huge}
  for r = 0, opt.bench do
    local x, y = batch(split.train, r, false)
    adam:zero_grad()
    local t0 = zorch.clock()
    local l = loss_of(model, x, y)
    l:item() -- (waits for the result)
    local t1 = zorch.clock()
    engine:backward(l)
    local t2 = zorch.clock()
    adam:step()
    local t3 = zorch.clock()
    if r > 0 then -- round 0 warms up
      best.fwd, best.bwd, best.step = math.min(best.fwd, t1 - t0), math.min(best.bwd, t2 - t1), math.min(best.step, t3 - t2)
    end
  end
  local name = ("gpt2_%s_b%d_t%d_%s"):format(opt.model, B, T, opt.precision)
  local function emit(what, v, unit)
    engine:print(('{"name": "zorch/%s_%s", "value": %.4g, "unit": "%s"}'):format(name, what, v, unit))
  end
  emit("fwd", best.fwd * 1e3, "ms")
  emit("bwd", best.bwd * 1e3, "ms")
  emit("adamw", best.step * 1e3, "ms")
  emit("tok_per_s", B * T * world / (best.fwd + best.bwd + best.step), "tok/s")
  return
end

-- ---- training ------------------------------------------------------------------------------

local step = 0
if opt.resume ~= "" then
  step = engine:load_checkpoint(opt.resume).step
  engine:print(("resumed from %s at step %d"):format(opt.resume, step))
end
local ordered = opt["no-shuffle"]
local tok_per_step = B * T * opt.accum * world
-- on a terminal a bar under the step lines; in a log a line every 30 s of a long run
local bar <close> = zorch.progress(math.max(opt.steps - step, 0), {unit = "step", every_s = 30})
local function say(line) if bar.tty then bar:print(line) else engine:print(line) end end
while step < opt.steps do
  local t0 = zorch.clock()
  if not engine.lr_scheduler then adam.lr = lr_at(step) end -- (a config's scheduler steps it)
  adam:zero_grad()
  local loss = 0
  if pipe then -- the micro-batches through the stages; the loss from the last
    local s = step
    loss = pipe:train_batch(function(m) return batch(split.train, s * opt.accum + m - 1, ordered) end, engine)
  else
    for a = 0, opt.accum - 1 do
      local x, y = batch(split.train, step * opt.accum + a, ordered)
      local l = loss_of(model, x, y)
      engine:backward(l)
      loss = loss + l:item() / opt.accum
    end
  end
  adam:step()
  step = step + 1
  loss = engine:mean(loss)
  local dt = zorch.clock() - t0
  if step % opt["print-every"] == 0 or step == opt.steps then
    local bubble = pipe and (" | " .. nn.Pipeline.report_line(pipe:report())) or ""
    say(("step %d/%d | loss %.6f | lr %.4e | norm %.4f | %.1f ms | tok/s %.0f%s"):format(step, opt.steps,
      loss, adam.lr, engine:clip_grad_norm() or 0, dt * 1000, tok_per_step / dt, bubble))
  end
  if opt["val-every"] > 0 and step % opt["val-every"] == 0 and step < opt.steps then
    say(("step %d/%d | val loss %.6f"):format(step, opt.steps, validate()))
  end
  bar:update(1, {loss = loss})
  if opt["checkpoint-dir"] ~= "" and opt["checkpoint-every"] > 0 and step % opt["checkpoint-every"] == 0 then
    engine:save_checkpoint(opt["checkpoint-dir"])
  end
end
bar:close()
if opt.steps > 0 and split.val then engine:print(("step %d/%d | val loss %.6f"):format(step, opt.steps, validate())) end
if opt["checkpoint-dir"] ~= "" then engine:save_checkpoint(opt["checkpoint-dir"]) end
if layout then -- bytes per group over the run (rank 0's: its tensor group and its data group)
  local ts, tr = layout.tensor:bytes()
  engine:print(("comm: tensor group sent %d received %d bytes; data group sent %d received %d bytes (last step)"):format(
    ts, tr, engine:comm_report().sent, engine:comm_report().received))
end

-- ---- Hugging Face export --------------------------------------------------------------------

if opt["save-hf"] ~= "" then
  -- (a pipeline's stages send theirs to the first, world rank 0 among them)
  local dir, sd, hf = opt["save-hf"], (pipe and pipe:full_state_dict() or model:state_dict()) or {}, {}
  rank = world_rank
  sd["lm_head.weight"] = nil -- (tied: transformers takes it from wte)
  for name, t in pairs(sd) do
    if name:match("%.c_attn%.weight$") or name:match("%.c_proj%.weight$") or name:match("%.c_fc%.weight$") then
      t = t:t() -- back to Conv1D's (in, out)
    end
    hf["transformer." .. name] = t:float():contiguous()
  end
  if rank == 0 then
    zorch.fs.mkdir(dir)
    zorch.save(hf, dir .. "/model.safetensors")
    local config = zorch.json.encode({
      architectures = {"GPT2LMHeadModel"}, model_type = "gpt2", vocab_size = cfg.vocab,
      n_positions = cfg.context, n_ctx = cfg.context, n_embd = cfg.dim, n_layer = cfg.layers, n_head = cfg.heads,
      activation_function = "gelu_new", layer_norm_epsilon = 1e-5,
      initializer_range = 0.02, resid_pdrop = 0.0, embd_pdrop = 0.0, attn_pdrop = 0.0,
      bos_token_id = cfg.vocab - 1, eos_token_id = cfg.vocab - 1, tie_word_embeddings = true,
      torch_dtype = "float32",
    })
    zorch.fs.write_atomic(dir .. "/config.json", config .. "\n")
  end
  engine:print(("saved %s/model.safetensors and %s/config.json"):format(dir, dir))
end

if opt.logits ~= "" then
  model:eval()
  local x = batch(split.val or split.train, 0, true)
  local logits = zorch.no_grad(function() return model(x) end)
  if rank == 0 then zorch.save({tokens = (x - 1):to("cpu"), logits = logits:float():to("cpu"):contiguous()}, opt.logits) end
  model:train()
end

-- ---- generation -----------------------------------------------------------------------------

-- The next token (from 1) of seq from the logits (vocab,): zorch.generation's
-- sampler, greedy at temperature 0, else a draw over the top-k. With
-- --tensor-parallel the logits are gathered (every rank samples the whole
-- vocabulary) and every rank takes the first rank's token.
local sampling = zorch.generation.sampler.options({do_sample = opt.temperature > 0, temperature = opt.temperature,
                                                   top_k = opt["top-k"]}, "gpt2 --sample")
local tgroup = TP > 1 and layout.tensor or nil
local function pick(logits, seq)
  if tgroup then logits = zorch.dist.gather_last(tgroup, logits) end
  local id = zorch.generation.sampler.next(logits:float():to("cpu"), seq, sampling)
  if not tgroup then return id end
  local t = zorch.tensor({id}, {dtype = "float64"})
  tgroup:broadcast(t, 0)
  return math.tointeger(t[1]:item())
end

-- Appends n tokens to ids (a list of indices from 1). The model reads a window
-- of the last tokens; when it is full the oldest half is dropped. With the
-- cache (zorch.generation's paged one, a window's blocks) each new token costs
-- one position (its query against the stored keys and values); the window is
-- re-read only when it moves.
local function generate(ids, n, use_cache)
  local ctx = cfg.context
  local cache = use_cache and zorch.generation.PagedKVCache.new{layers = cfg.layers, kv_heads = cfg.heads // TP,
    head_dim = cfg.dim // cfg.heads, blocks = (ctx + 15) // 16, device = device,
    dtype = model:parameters()[1]:dtype()} -- (the keys and values the model makes: bfloat16 at bf16)
  local seq, start = {len = 0}, 1 -- the window starts at ids[start]; seq: its blocks and the positions cached
  local function row(t) return zorch.tensor({t}, {device = device}) end
  for _ = 1, n do
    if #ids - start + 1 > ctx then
      start = #ids - ctx // 2 + 1
      if cache then cache:free(seq) end
    end
    local logits
    if cache then -- the window's tokens not cached yet: all of it after a move, else the last one
      local new, pos = table.move(ids, start + seq.len, #ids, 1, {}), {}
      for i = 1, #new do pos[i] = seq.len + i - 1 end
      assert(cache:reserve(seq, #new)) -- (the pool holds a whole window)
      seq.pending = #new
      local view = cache:step({seq}, seq.len == 0 and "prefill" or "decode")
      logits = model(row(new), {positions = zorch.tensor({pos}, {dtype = "int64", device = device}), cache = view})
      view:commit()
    else
      logits = model(row(table.move(ids, start, #ids, 1, {})))
    end
    ids[#ids + 1] = pick(logits[1][logits:size(2)], {tokens = ids, n_prompt = #ids})
  end
  return ids
end

if opt.sample > 0 then
  local ids = {}
  if cfg.vocab == 256 then
    for i = 1, #opt.prompt do ids[i] = opt.prompt:byte(i) + 1 end
  else
    for w in opt.prompt:gmatch("%d+") do ids[#ids + 1] = tonumber(w) + 1 end
  end
  if #ids == 0 then usage("--prompt %q gives no token ids", opt.prompt) end
  local plen = #ids
  model:eval()
  engine:gather() -- (stage 3: every rank holds the whole model while it generates)
  local t0 = zorch.clock()
  zorch.no_grad(function() generate(ids, opt.sample, not opt["no-cache"]) end)
  local dt = zorch.clock() - t0
  engine:release()
  if rank == 0 then
    local out = {}
    for i = plen + 1, #ids do
      out[#out + 1] = cfg.vocab == 256 and string.char(ids[i] - 1) or tostring(ids[i] - 1)
    end
    local sep = cfg.vocab == 256 and "" or " "
    io.stdout:write("---- sample ----\n", opt.prompt, sep, table.concat(out, sep), "\n---- end ----\n")
    io.stderr:write(("gpt2: %d tokens in %.2f s (%.1f tokens/s, %s)\n"):format(opt.sample, dt, opt.sample / dt,
      opt["no-cache"] and "no cache" or "key/value cache"))
  end
end
