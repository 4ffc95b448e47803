-- models/llama.lua against Transformers (tests/lua/llama/gen_llama.py): four
-- tiny Hugging Face folders (Llama with GQA and Llama-3 rope_scaling, a tied
-- Llama in bf16, Mistral with a sliding window shorter than the sequence, Qwen2
-- with q/k/v biases; sharded with an index, one in a single file) give
-- Transformers' logits and its first AdamW training losses; --save-hf writes a
-- folder that loads back with the same logits (and, when Transformers is
-- installed, into AutoModelForCausalLM); a bad folder is a one-line error
-- naming the file and the key. zorch.hf's pieces are checked on their own.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local hf = zorch.hf

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local here = "lua/llama/"
local script = "../models/llama.lua"
local G = zorch.load(here .. "golden.safetensors")
local MODELS = {"llama_gqa", "llama_tied", "mistral", "qwen2"}
-- the settings of gen_llama.py
local TRAIN = "--batch-size 2 --context 12 --steps 4 --lr 1e-2 --warmup 2 --beta2 0.95 --weight-decay 0.1 " ..
  "--clip 1 --no-shuffle --val-fraction 0 --data " .. here .. "tokens.bin"

-- a token file of the golden tokens (and one more, the last target)
local function token_file(name)
  local ids = G[name .. ".tokens"]:view(-1):totable()
  ids[#ids + 1] = 0
  local parts = {}
  for i, v in ipairs(ids) do parts[i] = string.pack("<I2", v) end
  local path = ("%s/%s.bin"):format(tmp, name)
  local f = assert(io.open(path, "wb"))
  f:write(table.concat(parts))
  f:close()
  return path
end
local function logits_run(init, name, out, extra)
  return run(("%s %s --init %s --data %s --batch-size 2 --context 12 --val-fraction 0 --steps 0 --logits %s %s"):format(
    bin, script, init, token_file(name), out, extra or ""))
end
local function load_or_empty(path)
  local ok, t = pcall(zorch.load, path)
  return ok and t or {}
end
-- largest |a - b| over the largest |b|
local function rel(a, b) return (a - b):abs():max():item() / b:abs():max():item() end

-- ---- zorch.hf on its own ----------------------------------------------------------------------

tap.ok(hf.parse_size("40KB") == 40000 and hf.parse_size("2GiB") == 2 ^ 31 and hf.parse_size(123) == 123
       and hf.parse_size("1.5 MB") == 1500000, "parse_size reads bytes, KB, GiB and fractions as Transformers does")
tap.raises("a bad shard size is named", function() hf.parse_size("lots") end, "max_shard_size", "lots")
for _, name in ipairs(MODELS) do
  local c = hf.decoder_config(hf.config(here .. name), name)
  local f = zorch.tensor(zorch.nn.rope_inv_freq(c.head_dim, {theta = c.rope.theta, scaling = c.rope.scaling}))
  local r = rel(f, G[name .. ".inv_freq"])
  tap.ok(r <= 1e-6, ("%s: the rotary frequencies equal Transformers' (%s; largest relative difference %.2g)"):format(
    name, c.rope.type or "default", r))
end
do -- the config.json of Transformers 4 (rope_theta beside rope_scaling {type = ...}) reads the same
  local raw = hf.config(here .. "llama_gqa")
  local rp = raw.rope_parameters
  raw.rope_parameters, raw.rope_theta = nil, rp.rope_theta
  raw.rope_scaling = {type = "llama3", factor = rp.factor, low_freq_factor = rp.low_freq_factor,
                      high_freq_factor = rp.high_freq_factor,
                      original_max_position_embeddings = rp.original_max_position_embeddings}
  local c = hf.decoder_config(raw, "old.json")
  tap.ok(rel(zorch.tensor(zorch.nn.rope_inv_freq(c.head_dim, {theta = c.rope.theta, scaling = c.rope.scaling})), G["llama_gqa.inv_freq"]) <= 1e-6 and c.kv_heads == 2,
    "a Transformers 4 config.json (rope_theta, rope_scaling.type) reads as the same model")
  raw.rope_scaling = {rope_type = "dynamic", factor = 2}
  tap.raises("rope_scaling dynamic is refused, naming the key", function() hf.decoder_config(raw, "old.json") end,
    "old.json: rope_scaling.rope_type dynamic is not implemented")
  local q = hf.config(here .. "qwen2")
  q.use_sliding_window = true
  tap.raises("qwen2's use_sliding_window is refused", function() hf.decoder_config(q, "q.json") end,
    "q.json: use_sliding_window true is not implemented")
  q.use_sliding_window, q.hidden_act = false, "gelu"
  tap.raises("an activation other than silu is refused", function() hf.decoder_config(q, "q.json") end,
    'q.json: hidden_act "gelu" is not implemented')
  q.hidden_act, q.num_key_value_heads = "silu", 3
  tap.raises("key/value heads that do not divide the heads are refused", function() hf.decoder_config(q, "q.json") end,
    "q.json: num_attention_heads 4 is not a multiple of num_key_value_heads 3")
end
do -- a state dict through save_pretrained (shards, then one file) and back through load
  local m = zorch.nn.Sequential(zorch.nn.Linear(8, 16), zorch.nn.Linear(16, 4))
  local files = hf.save_pretrained(m, tmp .. "/seq", {max_shard_size = 300, config = {model_type = "x"}})
  local m2 = zorch.nn.Sequential(zorch.nn.Linear(8, 16), zorch.nn.Linear(16, 4))
  local n = hf.load(m2, tmp .. "/seq")
  local x = zorch.randn(3, 8)
  tap.ok(#files == 5 and files[4] == "model.safetensors.index.json" and n == 4 and
         (m(x) - m2(x)):abs():max():item() == 0,
         ("save_pretrained shards past max_shard_size (%s) and load reads them back"):format(table.concat(files, " ")))
  local one = hf.save_pretrained(m, tmp .. "/one", {dtype = "bfloat16"})
  local t = zorch.load(tmp .. "/one/model.safetensors")
  tap.ok(#one == 1 and one[1] == "model.safetensors" and t["0.weight"]:dtype() == "bfloat16",
         "a small model is one model.safetensors, in the dtype asked for")
  tap.raises("a tensor the model lacks is named with its file", function()
    hf.load(zorch.nn.Sequential(zorch.nn.Linear(8, 16)), tmp .. "/seq") end, "model-0000", "1.", "is no parameter of the model")
end

-- ---- logits and training losses equal Transformers' ------------------------------------------

for _, name in ipairs(MODELS) do
  local out = tmp .. "/" .. name .. ".safetensors"
  local text = logits_run(here .. name, name, out)
  local z = load_or_empty(out)
  local want = G[name .. ".logits"]
  local r = z.logits and rel(z.logits, want) or math.huge
  tap.ok(z.tokens and (z.tokens - G[name .. ".tokens"]):abs():max():item() == 0 and r <= 1e-4,
    ("%s: logits equal Transformers' (largest difference %.2g of the largest logit)"):format(name, r))
  if not z.logits then print("# " .. text:gsub("\n", "\n# ")) end

  local got, ok = run(("%s %s --init %s%s %s"):format(bin, script, here, name, TRAIN))
  local wl, worst = G[name .. ".losses"]:totable(), 0
  for s = 1, #wl do
    local l = tonumber(got:match(("step %d/%%d+ | loss (%%S+)"):format(s)))
    worst = math.max(worst, l and math.abs(l - wl[s]) / wl[s] or math.huge)
  end
  tap.ok(ok and worst <= 1e-4, ("%s: the first %d AdamW losses equal Transformers' (worst relative difference %.2g)"):format(
    name, #wl, worst))
  if worst > 1e-4 then print("# " .. got:gsub("\n", "\n# ")) end
end

-- the same losses with accumulation, recomputed layers, ZeRO stages; close ones in bf16
local function losses_of(flags)
  local got = run(("%s %s --init %sllama_gqa %s %s"):format(bin, script, here, TRAIN, flags))
  local wl, worst = G["llama_gqa.losses"]:totable(), 0
  for s = 1, #wl do
    local l = tonumber(got:match(("step %d/%%d+ | loss (%%S+)"):format(s)))
    worst = math.max(worst, l and math.abs(l - wl[s]) / wl[s] or math.huge)
  end
  return worst, got
end
local cases = {{"--batch-size 1 --accum 2 --zero-stage 1", 1e-4}, {"--checkpoint-activations --zero-stage 2", 1e-4},
               {"--precision bf16", 0.02}}
if tap.has_mpi(bin) then cases[#cases + 1] = {"--batch-size 1 --zero-stage 3", 1e-4, bin .. " launch -n 2"} end
for _, c in ipairs(cases) do
  local worst, got
  if c[3] then
    got = run(("%s %s --init %sllama_gqa %s %s"):format(c[3], script, here, TRAIN, c[1]))
    worst = 0
    for s, want in ipairs(G["llama_gqa.losses"]:totable()) do
      local l = tonumber(got:match(("step %d/%%d+ | loss (%%S+)"):format(s)))
      worst = math.max(worst, l and math.abs(l - want) / want or math.huge)
    end
  else
    worst, got = losses_of(c[1])
  end
  tap.ok(worst <= c[2], ("llama_gqa %s%s: the losses within %g of Transformers' (worst relative difference %.2g)"):format(
    c[3] and "on 2 ranks " or "", c[1], c[2], worst))
  if worst > c[2] then print("# " .. got:gsub("\n", "\n# ")) end
end
if not tap.has_mpi(bin) then print("# skipped the 2-rank run: zorch was built without MPI") end

-- ---- --save-hf, then --init from it ----------------------------------------------------------

local has_tf = (run("python3 -c 'import transformers'")) == ""
for _, name in ipairs({"llama_gqa", "mistral", "qwen2", "llama_tied"}) do
  local dir = tmp .. "/saved_" .. name
  local a, b, c = tmp .. "/a_" .. name .. ".safetensors", tmp .. "/b_" .. name .. ".safetensors", tmp .. "/c_" .. name .. ".safetensors"
  local o1 = run(("%s %s --init %s%s %s --steps 2 --save-hf %s --max-shard-size 30KB --logits %s"):format(
    bin, script, here, name, TRAIN, dir, a))
  local cfg = io.open(dir .. "/config.json")
  local ctext = cfg and cfg:read("a") or ""
  if cfg then cfg:close() end
  local index = io.open(dir .. "/model.safetensors.index.json")
  if index then index:close() end
  tap.ok(ctext:find('"model_type":%s*"' .. hf.config(here .. name).model_type .. '"') and index,
    ("%s: --save-hf writes config.json, shards and the index"):format(name))
  -- the saved folder gives the trained model's logits (on the first batch), the original other ones
  local o2 = run(("%s %s --init %s %s --steps 0 --logits %s"):format(bin, script, dir, TRAIN, b))
  local o3 = run(("%s %s --init %s%s %s --steps 0 --logits %s"):format(bin, script, here, name, TRAIN, c))
  local la, lb, lc = load_or_empty(a), load_or_empty(b), load_or_empty(c)
  tap.ok(la.logits and lb.logits and lc.logits and (la.logits - lb.logits):abs():max():item() == 0 and
    (la.logits - lc.logits):abs():max():item() > 1e-3,
    ("%s: --init of the --save-hf folder gives the trained model's logits"):format(name))
  if not (la.logits and lb.logits) then print("# " .. (o1 .. o2 .. o3):gsub("\n", "\n# ")) end
  if has_tf then
    local text, ok = run(("python3 %scheck_hf.py %s %s 1e-4"):format(here, dir, a))
    print("# " .. (text:match("transformers vs zorch[^\n]*") or text:gsub("\n", "\n# ")))
    tap.ok(ok, ("%s: Transformers loads the --save-hf folder and gives zorch's logits within 1e-4"):format(name))
  end
end
if not has_tf then print("# skipped the Transformers checks: python3 cannot import transformers") end

-- ---- bad folders: one-line errors naming the file and the key --------------------------------

local function copy(name)
  local dir = tmp .. "/bad_" .. name .. "_" .. tostring(math.random(1 << 30))
  os.execute(("cp -r %s%s %s"):format(here, name, dir))
  return dir
end
local function edit(path, fn)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  f = assert(io.open(path, "wb"))
  f:write(fn(s))
  f:close()
end
local function bad(desc, dir, ...)
  local out = run(("%s %s --init %s --data %s --batch-size 2 --context 12 --steps 0 --val-fraction 0 2>&1; echo status $?"):format(
    bin, script, dir, here .. "tokens.bin"))
  local msg = out:match("[^\n]*llama: %-%-init:[^\n]*") or ""
  local good = out:find("status 2", 1, true) and not out:find("traceback", 1, true)
  for _, p in ipairs({...}) do good = good and msg:find(p, 1, true) end
  tap.ok(good, ("%s: %s"):format(desc, msg))
  if not good then print("# " .. out:gsub("\n", "\n# ")) end
end

local d = copy("llama_gqa")
os.remove(d .. "/model-00002-of-00003.safetensors")
bad("a missing shard", d, d .. "/model-00002-of-00003.safetensors: missing", "model.safetensors.index.json")

d = copy("llama_gqa")
edit(d .. "/model.safetensors.index.json", function(s)
  return (s:gsub('("lm_head%.weight":%s*")model%-00003%-of%-00003', "%1model-00001-of-00003"))
end)
bad("an index naming a tensor its shard lacks", d, "model.safetensors.index.json", "weight_map.lm_head.weight",
    "model-00001-of-00003.safetensors")

d = copy("llama_gqa")
edit(d .. "/config.json", function(s) return (s:gsub('"model_type":%s*"llama"', '"model_type": "gpt_neox"')) end)
bad("an unknown model_type", d, d .. "/config.json", 'model_type "gpt_neox" is not implemented')

d = copy("llama_gqa")
edit(d .. "/config.json", function(s) return (s:gsub('"rope_type":%s*"llama3"', '"rope_type": "yarn"')) end)
bad("a rope_scaling type not implemented", d, d .. "/config.json", "rope_parameters.rope_type yarn is not implemented")

d = copy("llama_gqa")
edit(d .. "/config.json", function(s) return (s:gsub('"intermediate_size":%s*64', '"intermediate_size": 48')) end)
bad("a shape mismatch", d, "model-00001-of-00003.safetensors: model.layers.0.mlp.gate_proj.weight has shape (64, 32), the model's is (48, 32)")

d = copy("llama_tied")
do -- the single file without the final norm
  local t = zorch.load(d .. "/model.safetensors")
  t["model.norm.weight"] = nil
  zorch.save(t, d .. "/model.safetensors")
end
bad("a parameter no file provides", d, d .. "/model.safetensors: no file provides model.norm.weight")

d = copy("llama_tied")
os.remove(d .. "/model.safetensors")
bad("a folder without weights", d, d .. ": neither model.safetensors nor model.safetensors.index.json")

-- ---- packed batches: one row holding several sequences ---------------------------------------

-- ctx.segments and ctx.positions make a packed row's logits those of its
-- sequences run alone (GQA's shared heads; Mistral's window counted inside each)
for _, name in ipairs({"llama_gqa", "mistral"}) do
  local model = zorch.models.llama.from_pretrained(here .. name)
  model:eval()
  local lens, ids = {5, 3, 7}, G[name .. ".tokens"]:view(-1)
  local seqs, pos, seg, at = {}, {}, {}, 0
  for s, n in ipairs(lens) do
    seqs[s] = ids:narrow(1, at + 1, n):view(1, n)
    for t = 0, n - 1 do pos[#pos + 1], seg[#seg + 1] = t, s end
    at = at + n
  end
  local packed = zorch.no_grad(function()
    return model(zorch.cat(seqs, 2), {positions = zorch.tensor({pos}):long(), segments = zorch.tensor({seg}):long()})
  end)
  local worst, at2 = 0, 0
  for s, n in ipairs(lens) do
    local alone = zorch.no_grad(function() return model(seqs[s]) end)
    worst = math.max(worst, rel(packed:narrow(2, at2 + 1, n), alone))
    at2 = at2 + n
  end
  tap.ok(worst <= 1e-5, ("%s: a packed row (segments and positions) gives its sequences' own logits (largest "
    .. "difference %.2g of the largest logit)"):format(name, worst))
end

tap.done()
