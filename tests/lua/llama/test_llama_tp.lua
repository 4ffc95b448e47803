-- models/llama.lua --tensor-parallel against one process, from the same
-- Hugging Face folders (llama_gqa: 4 query heads sharing 2 key/value heads;
-- mistral: a sliding window; qwen2: q/k/v biases and a tied head): logits, the
-- first 10 AdamW losses and the --save-hf folder at tensor 2, and at (tensor 2,
-- data 2) with ZeRO stages 1 and 3; LoRA adapters on the split layers
-- (tp_lora_worker.lua: outputs, gradients, merge), their losses and the
-- --save-adapter folder at tensor 2 and at ZeRO-3 on 2 ranks, PEFT's adapter
-- loaded into the split model; what tensor parallelism refuses.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local hf, llama = zorch.hf, zorch.models.llama

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local here = "lua/llama/"
local script = "../models/llama.lua"
-- Tensor parallelism sums the same products in another order (a row-parallel
-- layer adds two half-length dot products; the vocabulary's log-sum-exp is
-- summed by parts): after 10 steps the losses, logits and adapters below differ
-- by under 5e-6. The whole model's weights after 10 steps differ more where Adam
-- divides a gradient near zero by the root of its small second moment (one row
-- of qwen2's tied embedding, 7.6e-6 of its norm); the key projections' biases,
-- whose gradient is zero in exact arithmetic (a key bias adds the same score to
-- every key of a query), move by rounding noise in any two runs and are left out.
local TOL, WEIGHTS_TOL = 1e-5, 5e-5
local TRAIN = "--batch-size 2 --context 12 --steps 10 --lr 1e-2 --warmup 2 --beta2 0.95 --weight-decay 0.1 " ..
  "--clip 1 --no-shuffle --val-fraction 0 --data " .. here .. "tokens.bin"
local LORA = "--lora-r 4 --lora-alpha 16 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"

local function load_or_empty(path)
  local ok, t = pcall(zorch.load, path)
  return ok and t or {}
end
local function losses(text)
  local l = {}
  for s, v in text:gmatch("step (%d+)/%d+ | loss (%S+)") do l[tonumber(s)] = tonumber(v) end
  return l
end
-- the worst relative difference of two runs' losses (inf when one lacks a step)
local function worst_loss(a, b, n)
  local la, lb, w = losses(a), losses(b), 0
  for s = 1, n do w = math.max(w, (la[s] and lb[s]) and math.abs(la[s] - lb[s]) / math.abs(lb[s]) or math.huge) end
  return w
end
-- the worst difference, tensor by tensor, of two safetensors files of the same
-- names, relative to the tensor's norm (skip: a pattern of names left out)
local function worst_file(a, b, skip)
  local ta, tb = load_or_empty(a), load_or_empty(b)
  local w, n = 0, 0
  for k, v in pairs(tb) do
    n = n + 1
    local d = ta[k] and ta[k].shape[1] == v.shape[1] and
              (ta[k] - v):pow(2):sum():sqrt():item() / v:pow(2):sum():sqrt():item() or math.huge
    if not (skip and k:match(skip)) then w = math.max(w, d) end
  end
  for k in pairs(ta) do if not tb[k] then w = math.huge end end
  return n > 0 and w or math.huge, n
end
local function show(text) print("# " .. text:gsub("\n", "\n# ")) end

-- ---- llama.tensor_parallel on one process --------------------------------------------------

do
  local model = llama.new(hf.decoder_config(hf.config(here .. "llama_gqa"), "llama_gqa"))
  tap.raises("llama.tensor_parallel takes a group", function() llama.tensor_parallel(model, 2) end,
    "llama.tensor_parallel: argument 2 must be a zorch.Group")
  tap.raises("llama.tensor_parallel takes a llama model", function()
    llama.tensor_parallel(zorch.nn.Linear(2, 2), zorch.dist.world()) end, "argument 1 must be a llama model")
  local with = llama.new(hf.decoder_config(hf.config(here .. "llama_gqa"), "llama_gqa"))
  zorch.nn.lora.apply(with, {r = 2})
  tap.raises("a model with adapters already", function() llama.tensor_parallel(with, zorch.dist.world()) end,
    "llama.tensor_parallel: model.layers.0.self_attn.q_proj is a nn.LoRALinear, not an nn.Linear: split the model before nn.lora.apply")
  local idx = zorch.tensor({{1, 5, 9, 3}})
  local before = model(idx)
  llama.tensor_parallel(model, zorch.dist.world())
  local a = model.model.layers[1].self_attn
  tap.ok(getmetatable(a.q_proj) == zorch.nn.ColumnParallelLinear and getmetatable(a.o_proj) == zorch.nn.RowParallelLinear
         and getmetatable(model.model.embed_tokens) == zorch.nn.VocabParallelEmbedding and
         (model(idx) - before):abs():max():item() == 0,
         "a group of one rank: the split layers in place, the same logits")
  tap.raises("a model split twice", function() llama.tensor_parallel(model, zorch.dist.world()) end, "split already")
end

tap.need_mpi(bin)

-- ---- LoRA on the split layers ----------------------------------------------------------------

do
  local out = tmp .. "/lora_layers.txt"
  local text, ok = run(("%s launch -n 2 %stp_lora_worker.lua %s"):format(bin, here, out))
  if not ok then show(text) end
  local got = {}
  for line in io.lines(ok and out or "/dev/null") do
    local k, v = line:match("^(%S+) (.*)$")
    got[k] = v
  end
  tap.ok(got.splits == "ok", "column-parallel adapters split lora_B as the weight (blocks too), row-parallel ones lora_A")
  for _, k in ipairs({"init_lora_A_drawn_as_one_process", "state_dict_whole"}) do
    tap.ok(tonumber(got[k] or "") == 0, ("%s: exact (%s)"):format(k, got[k] or "missing"))
  end
  for _, k in ipairs({"forward", "input_grad", "grad_a_lora_A", "grad_a_lora_B", "grad_b_lora_A", "grad_b_lora_B",
                      "grad_c_lora_A", "grad_c_lora_B", "grad_d_lora_A", "grad_d_lora_B", "merged_forward",
                      "unmerged_weight", "unmerged_forward"}) do
    local v = tonumber(got[k] or "")
    tap.ok(v and v <= 1e-5, ("LoRA on 2 tensor ranks, %s: within 1e-5 of one process's (relative %s)"):format(k,
      got[k] or "missing"))
  end
end

-- ---- the model at tensor 2, and at (tensor 2, data 2) ---------------------------------------

for _, name in ipairs({"llama_gqa", "mistral", "qwen2"}) do
  local init = here .. name
  local l1, l2 = tmp .. "/" .. name .. "_1.st", tmp .. "/" .. name .. "_2.st"
  local logits = "--batch-size 2 --context 12 --val-fraction 0 --steps 0 --data " .. here .. "tokens.bin --logits "
  local o1 = run(("%s %s --init %s %s%s"):format(bin, script, init, logits, l1))
  local o2 = run(("%s launch -n 2 %s --init %s --tensor-parallel 2 %s%s"):format(bin, script, init, logits, l2))
  local r = worst_file(l2, l1)
  tap.ok(r <= TOL, ("%s: logits at tensor 2 equal one process's (relative %.2g)"):format(name, r))
  if r > TOL then show(o1 .. o2) end
  -- --sample through zorch.generate on the split model (each rank caching its heads)
  local sflags = "--batch-size 2 --context 12 --val-fraction 0 --steps 0 --data " .. here ..
    "tokens.bin --sample 10 --temperature 0 --prompt '5 9 3'"
  local s1 = run(("%s %s --init %s %s 2>/dev/null"):format(bin, script, init, sflags)) -- (stdout: the sample alone)
  local s2 = run(("%s launch -n 2 %s --init %s --tensor-parallel 2 %s 2>/dev/null"):format(bin, script, init, sflags))
  local g1 = s1:match("%-%-%-%- sample %-%-%-%-\n(.-)\n%-%-%-%- end")
  local g2 = s2:match("%-%-%-%- sample %-%-%-%-\n(.-)\n%-%-%-%- end")
  tap.ok(g1 and g1 == g2 and select(2, g1:gsub("%d+", "")) == 13,
    ("%s: --sample 10 at tensor 2 prints one process's greedy tokens (%s)"):format(name, tostring(g2)))
  if not (g1 and g1 == g2) then show(s1 .. s2) end

  local h1, h2 = tmp .. "/" .. name .. "_hf1", tmp .. "/" .. name .. "_hf2"
  local t1 = run(("%s %s --init %s %s --save-hf %s"):format(bin, script, init, TRAIN, h1))
  local t2, ok = run(("%s launch -n 2 %s --init %s %s --tensor-parallel 2 --save-hf %s"):format(bin, script, init, TRAIN, h2))
  local w = worst_loss(t2, t1, 10)
  tap.ok(ok and w <= TOL and t2:find("x 2 tensor-parallel", 1, true),
    ("%s: the first 10 AdamW losses at tensor 2 equal one process's (worst relative %.2g)"):format(name, w))
  if w > TOL then show(t1 .. t2) end
  local wf, n = worst_file(h2 .. "/model.safetensors", h1 .. "/model.safetensors", "k_proj%.bias$")
  tap.ok(wf <= WEIGHTS_TOL, ("%s: --save-hf at tensor 2 writes the whole trained model (%d tensors, worst relative %.2g)"):format(
    name, n, wf))
  if name == "qwen2" then
    for _, flags in ipairs({"--zero-stage 3", "--zero-stage 2"}) do
      local t4 = run(("%s launch -n 4 %s --init %s %s --tensor-parallel 2 --batch-size 1 %s"):format(bin, script, init,
        TRAIN, flags))
      local w4 = worst_loss(t4, t1, 10)
      tap.ok(w4 <= TOL and t4:find("x 2 data-parallel ranks x 2 tensor-parallel", 1, true),
        ("%s at (tensor 2, data 2) %s: the losses of one process (worst relative %.2g)"):format(name, flags, w4))
      if w4 > TOL then show(t4) end
    end
  end
end

-- ---- LoRA: tensor 2 and ZeRO-3 on 2 ranks write one process's adapter folder ---------------

local function same_config(a, b)
  local function read(p)
    local f = io.open(p .. "/adapter_config.json")
    if not f then return nil end
    local c = zorch.json.decode(f:read("a"))
    f:close()
    return c
  end
  local ca, cb = read(a), read(b)
  if not (ca and cb) then return false end
  local ja, jb = {}, {}
  for k, v in pairs(ca) do ja[#ja + 1] = k .. "=" .. zorch.json.encode(v):gsub("%s+", "") end
  for k, v in pairs(cb) do jb[#jb + 1] = k .. "=" .. zorch.json.encode(v):gsub("%s+", "") end
  table.sort(ja)
  table.sort(jb)
  return table.concat(ja, ";") == table.concat(jb, ";")
end
do
  local init = here .. "llama_gqa"
  local LTRAIN = TRAIN:gsub("%-%-warmup 2", "--lr-schedule constant") .. " " .. LORA
  local a1 = tmp .. "/ad1"
  local t1 = run(("%s %s --init %s %s --save-adapter %s --save-hf %s/m1"):format(bin, script, init, LTRAIN, a1, tmp))
  for _, c in ipairs({{"tensor 2", "-n 2", "--tensor-parallel 2"}, {"ZeRO-3 on 2 ranks", "-n 2", "--zero-stage 3 --batch-size 1"},
                      {"(tensor 2, data 2) ZeRO-3", "-n 4", "--tensor-parallel 2 --zero-stage 3 --batch-size 1"}}) do
    local dir = tmp .. "/ad_" .. c[3]:gsub("[^%w]", "")
    local t2 = run(("%s launch %s %s --init %s %s %s --save-adapter %s --save-hf %s_m"):format(bin, c[2], script, init,
      LTRAIN, c[3], dir, dir))
    local w = worst_loss(t2, t1, 10)
    tap.ok(w <= TOL and t2:find("LoRA r 4, alpha 16 on 14 modules: 4.1k trainable", 1, true),
      ("LoRA %s: the first 10 losses on the 14 adapters equal one process's (worst relative %.2g)"):format(c[1], w))
    if w > TOL then show(t1 .. t2) end
    local wa, n = worst_file(dir .. "/adapter_model.safetensors", a1 .. "/adapter_model.safetensors")
    tap.ok(wa <= TOL and n == 28 and same_config(dir, a1),
      ("LoRA %s: --save-adapter writes one process's folder (the same config, %d tensors within %.2g)"):format(c[1], n, wa))
    local wm = worst_file(dir .. "_m/model.safetensors", tmp .. "/m1/model.safetensors")
    tap.ok(wm <= TOL, ("LoRA %s: --save-hf writes one process's merged model (worst relative %.2g)"):format(c[1], wm))
  end
  -- dropout on the adapters' inputs: the ranks draw the masks one process draws
  -- (the column-parallel adapters' on the replicated input alike, the
  -- row-parallel ones' of the whole input, each rank keeping its columns)
  local D = LTRAIN .. " --lora-dropout 0.2 --steps 4"
  local d1 = run(("%s %s --init %s %s"):format(bin, script, init, D))
  local d2 = run(("%s launch -n 2 %s --init %s %s --tensor-parallel 2"):format(bin, script, init, D))
  local wd = worst_loss(d2, d1, 4)
  tap.ok(wd <= TOL and worst_loss(d1, t1, 4) > 1e-4,
    ("LoRA dropout 0.2 at tensor 2: one process's losses (worst relative %.2g)"):format(wd))
  if wd > TOL then show(d1 .. d2) end
  -- PEFT's adapter cut into the ranks' parts: the logits of one process
  local logits = "--batch-size 2 --context 12 --val-fraction 0 --steps 0 --data " .. here .. "tokens.bin --init-adapter " ..
    here .. "lora_gqa --logits "
  local p1, p2 = tmp .. "/peft1.st", tmp .. "/peft2.st"
  local o1 = run(("%s %s --init %s %s%s"):format(bin, script, init, logits, p1))
  local o2 = run(("%s launch -n 2 %s --init %s --tensor-parallel 2 %s%s"):format(bin, script, init, logits, p2))
  local r = worst_file(p2, p1)
  tap.ok(r <= TOL, ("--init-adapter at tensor 2: PEFT's adapter gives one process's logits (relative %.2g)"):format(r))
  if r > TOL then show(o1 .. o2) end
end

-- ---- refused ---------------------------------------------------------------------------------

local function refused(desc, n, flags, want)
  local out = run(("%s launch -n %d %s %s --steps 0 --val-fraction 0 --data %stokens.bin 2>&1; echo status $?"):format(
    bin, n, script, flags, here))
  local good = out:find(want, 1, true) and out:find("status 2", 1, true) and not out:find("traceback", 1, true)
  tap.ok(good, desc .. ": " .. (out:match("[^\n]*" .. want:gsub("%p", "%%%0") .. "[^\n]*") or "no message"))
  if not good then show(out) end
end
refused("a tensor-parallel size that does not divide the ranks", 2, "--init " .. here .. "llama_gqa --tensor-parallel 3",
  "llama: --tensor-parallel 3 does not divide the 2 ranks")
refused("key/value heads that T does not divide", 2,
  "--layers 1 --heads 4 --kv-heads 1 --dim 32 --vocab 96 --batch-size 2 --context 12 --tensor-parallel 2",
  "llama: --tensor-parallel: llama.tensor_parallel: num_key_value_heads 1 is not a multiple of the 2 tensor-parallel ranks")

tap.done()
