-- models/gpt2.lua: the first 10 training losses equal PyTorch's (Transformers'
-- GPT2LMHeadModel from the same weights, tests/golden/gen_gpt2.py) at stage 0,
-- with accumulation, from a uint16 token file, and at stage 3 on 2 ranks; the
-- --save-hf folder loads back with --init to the same logits (and, when
-- Transformers is installed, into GPT2LMHeadModel with the same logits);
-- generation gives the same tokens with and without the key/value cache.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local TEXT = "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt"
local script = "../models/gpt2.lua"
local init = "golden/gpt2_init.safetensors"
-- the settings of tests/golden/gen_gpt2.py
local parity = "--init " .. init .. " --heads 4 --steps 10 --lr 3e-3 --min-lr 3e-4 --warmup 3 --beta2 0.99 " ..
  "--weight-decay 1 --clip 1 --no-shuffle --val-batches 1 --data "

-- data.load_tokens: bytes and little-endian uint16, checked sizes
do
  local path = tap.temp_file("\1\0\255\2", ".bin")
  local b = zorch.data.load_tokens(path)
  tap.ok(b:dtype() == "int64" and table.concat(b:totable(), ",") == "1,0,255,2", "load_tokens reads bytes as int64")
  local w = zorch.data.load_tokens(path, {dtype = "uint16"})
  tap.ok(table.concat(w:totable(), ",") == "1,767", "load_tokens reads little-endian uint16")
  tap.raises("an odd size is not uint16 tokens", function()
    zorch.data.load_tokens(tap.temp_file("abc"), {dtype = "uint16"})
  end, "load_tokens", "not a whole number of uint16 tokens")
  tap.raises("a folder is not a token file", function() zorch.data.load_tokens(tmp) end, "not a regular file")
  tap.ok(zorch.data.load_tokens(tap.temp_file("")):numel() == 0, "an empty file has no tokens")
  tap.raises("a missing file is named", function() zorch.data.load_tokens(tmp .. "/none") end, "cannot open", "none")
  tap.raises("a bad dtype is named", function() zorch.data.load_tokens(path, {dtype = "int8"}) end,
    "data.load_tokens", "int8")
end

-- the embedding's backward (index_add) in 16-bit floats: the sums of fp32, rounded
for _, dt in ipairs({"bfloat16", "float16"}) do
  zorch.manual_seed(1)
  local w32 = zorch.randn(5, 3)
  local g = zorch.randn(7, 3):to(dt):float() -- gradients that 16 bits hold exactly
  local idx = zorch.tensor{1, 2, 1, 5, 1, 2, 4}
  local w = w32:to(dt):requires_grad_(true)
  zorch.sum(zorch.embedding(w, idx) * g:to(dt)):backward()
  local w2 = w32:clone():requires_grad_(true)
  zorch.sum(zorch.embedding(w2, idx) * g):backward()
  local err = (w.grad:float() - w2.grad):abs():max():item()
  tap.ok(w.grad:dtype() == dt and err <= 0.02 * w2.grad:abs():max():item() and w.grad[3]:abs():max():item() == 0,
    ("embedding backward in %s sums the rows of each index (largest difference from fp32 %.3g)"):format(dt, err))
end

-- flags that do not fit: a usage error (status 2, no traceback) naming them
for _, c in ipairs({{"--heads 3", "--dim 128 is not a multiple of --heads 3"},
                    {"--vocab 100", "outside the vocabulary of 100"},
                    {"--data " .. tmp .. "/none", "--data: load_tokens: cannot open"},
                    {"--init " .. TEXT, "--init: load:"},
                    {"--sample 5 --prompt ''", "--prompt is empty"}}) do
  local out = run(("%s %s %s 2>&1; echo status $?"):format(bin, script, c[1]))
  tap.ok(out:find(c[2], 1, true) and out:find("status 2", 1, true) and not out:find("traceback", 1, true),
    ("%s is a usage error: %s"):format(c[1], c[2]))
end

local want = {}
for line in io.lines("golden/gpt2_losses.txt") do
  local s, l = line:match("^(%d+) (%S+)$")
  want[tonumber(s)] = tonumber(l)
end

-- the step losses a run printed, and its output
local function losses(cmd)
  local out, ok = run(cmd)
  local got = {}
  for s, l in out:gmatch("step (%d+)/%d+ | loss (%S+)") do got[tonumber(s)] = tonumber(l) end
  if not ok then print("# " .. out:gsub("\n", "\n# ")) end
  return got, out
end

local function check(got, desc, n)
  local worst = 0
  for s = 1, n or 10 do
    worst = math.max(worst, got[s] and math.abs(got[s] - want[s]) / want[s] or math.huge)
  end
  tap.ok(worst <= 1e-4, ("%s: losses of steps 1-%d equal PyTorch's (worst relative difference %.2g)"):format(
    desc, n or 10, worst))
end

check(losses(("%s %s %s %s --batch-size 4"):format(bin, script, parity, TEXT)), "stage 0, one process")
check(losses(("%s %s %s %s --batch-size 2 --accum 2 --zero-stage 1"):format(bin, script, parity, TEXT)),
  "stage 1, batch 2 x 2 accumulation steps")
check(losses(("%s %s %s %s --batch-size 4 --checkpoint-activations"):format(bin, script, parity, TEXT)),
  "--checkpoint-activations (each block recomputed in backward)")

-- the same tokens as uint16 ids in a .bin file (with the vocabulary given)
do
  local f = assert(io.open(TEXT, "rb"))
  local text = f:read("a")
  f:close()
  local bin16 = tmp .. "/book.bin"
  local o = assert(io.open(bin16, "wb"))
  for i = 1, #text, 4096 do
    local part = {}
    for j = i, math.min(i + 4095, #text) do part[#part + 1] = string.pack("<I2", text:byte(j)) end
    o:write(table.concat(part))
  end
  o:close()
  check(losses(("%s %s %s %s --vocab 256 --batch-size 4 --steps 3"):format(bin, script, parity, bin16)),
    "a uint16 token file", 3)
end

-- a checkpoint after step 2, resumed at 2 ranks and stage 2: steps 3-4 go on as in one run
do
  local ck = tmp .. "/ck"
  local first = losses(("%s %s %s %s --batch-size 4 --steps 2 --checkpoint-dir %s"):format(bin, script, parity, TEXT, ck))
  local launch = tap.has_mpi(bin) and (bin .. " launch -n 2") or bin
  local bs = tap.has_mpi(bin) and 2 or 4
  local rest, out = losses(("%s %s %s %s --batch-size %d --zero-stage 2 --resume %s"):format(launch, script,
    parity, TEXT, bs, ck))
  local got = {first[1], first[2], rest[3], rest[4], rest[5], rest[6], rest[7], rest[8], rest[9], rest[10]}
  tap.ok(rest[1] == nil and out:find("resumed from", 1, true), "the resumed run starts after step 2")
  check(got, "checkpoint at step 2, resumed")
end

-- bf16: 16-bit parameters and activations follow the fp32 run closely
do
  local got = losses(("%s %s %s %s --batch-size 4 --steps 2 --precision bf16"):format(bin, script, parity, TEXT))
  local worst = 0
  for s = 1, 2 do worst = math.max(worst, got[s] and math.abs(got[s] - want[s]) / want[s] or math.huge) end
  tap.ok(worst <= 0.01, ("bf16: the first 2 losses within 1%% of PyTorch's fp32 ones (worst %.2g)"):format(worst))
end

if tap.has_mpi(bin) then
  check(losses(("%s launch -n 2 %s %s %s --batch-size 2 --zero-stage 3"):format(bin, script, parity, TEXT)),
    "stage 3 on 2 ranks")
else
  print("# skipped the 2-rank run: zorch was built without MPI")
end

-- random windows: 2 ranks of batch 2 read the windows of one process of batch 4
if tap.has_mpi(bin) then
  local shuffled = "--init " .. init .. " --heads 4 --steps 3 --val-batches 1 --data " .. TEXT
  local one = losses(("%s %s %s --batch-size 4"):format(bin, script, shuffled))
  local two = losses(("%s launch -n 2 %s %s --batch-size 2"):format(bin, script, shuffled))
  local worst = 0
  for s = 1, 3 do worst = math.max(worst, one[s] and two[s] and math.abs(one[s] - two[s]) / one[s] or math.huge) end
  tap.ok(worst <= 1e-5 and one[1] ~= want[1],
    ("random windows: 2 ranks of batch 2 give the losses of one process of batch 4 (worst %.2g)"):format(worst))
end

-- --save-hf, then --init from it: the same logits
local hf, a, b = tmp .. "/hf", tmp .. "/a.safetensors", tmp .. "/b.safetensors"
local _, out = losses(("%s %s %s %s --batch-size 4 --steps 3 --save-hf %s --logits %s"):format(
  bin, script, parity, TEXT, hf, a))
local cfg = io.open(hf .. "/config.json")
local ctext = cfg and cfg:read("a") or ""
if cfg then cfg:close() end
tap.ok(ctext:find('"n_head":%s*4') and ctext:find('"activation_function":%s*"gelu_new"') and
  ctext:find('"GPT2LMHeadModel"'), "config.json has GPT2Config's fields")
local ok_saved, saved = pcall(zorch.load, hf .. "/model.safetensors")
if not ok_saved then saved = {} end
tap.ok(saved["transformer.h.0.attn.c_attn.weight"] and table.concat(saved["transformer.h.0.attn.c_attn.weight"].shape, ",")
  == "64,192", "model.safetensors has Hugging Face names and Conv1D's (in, out) layout")
local _, out2 = losses(("%s %s --init %s/model.safetensors --steps 0 --batch-size 4 --logits %s"):format(
  bin, script, hf, b))
local la, lb = select(2, pcall(zorch.load, a)), select(2, pcall(zorch.load, b))
if type(la) ~= "table" then la = {} end
if type(lb) ~= "table" then lb = {} end
tap.ok(la.logits and lb.logits and (la.logits - lb.logits):abs():max():item() == 0 and
  (la.tokens - lb.tokens):abs():max():item() == 0, "--init of the --save-hf folder gives the same logits")
if not (la.logits and lb.logits) then print("# " .. (out .. out2):gsub("\n", "\n# ")) end

if (run("python3 -c 'import transformers' ")) == "" then
  local text, ok = run(("python3 golden/check_hf.py %s %s 1e-4"):format(hf, a))
  print("# " .. (text:match("transformers vs zorch[^\n]*") or text:gsub("\n", "\n# ")))
  tap.ok(ok, "transformers' GPT2LMHeadModel loads the folder and gives zorch's logits within 1e-4")
else
  print("# skipped the Transformers check: python3 cannot import transformers")
end

-- generation: the same tokens with and without the cache, across a move of the
-- window (60 tokens after a 10-byte prompt, context 32), greedy and sampled
local function sample(flags)
  local o, ok = run(("%s %s --init %s --heads 4 --steps 0 --sample 60 --prompt 'It is a tr' %s --data %s"):format(
    bin, script, init, flags, TEXT))
  return ok and o:match("%-%-%-%- sample %-%-%-%-\n(.*)\n%-%-%-%- end %-%-%-%-") or nil, o
end
local texts = {}
for _, f in ipairs({"--temperature 0", "--temperature 1 --top-k 1", "--temperature 0.8 --top-k 20 --seed 3"}) do
  local with, o1 = sample(f)
  local without, o2 = sample(f .. " --no-cache")
  tap.ok(with and #with == 70 and with == without, ("%s: the same 60 tokens with and without the cache"):format(f))
  if not with then print((("# " .. o1 .. o2):gsub("\n", "\n# "))) end
  texts[#texts + 1] = with
end
tap.ok(texts[1] and texts[1] == texts[2], "top-k 1 is greedy: " .. tostring(texts[1]) .. " / " .. tostring(texts[2]))
-- at bf16 the cache holds the model's bfloat16 keys and values
local bf, obf = sample("--precision bf16 --temperature 0")
tap.ok(bf and #bf == 70, "bf16: 60 tokens through the cache")
if not bf then print((("# " .. obf):gsub("\n", "\n# "))) end

tap.done()
