-- LoRA against PEFT (tests/lua/llama/gen_lora.py): PEFT's adapter folder
-- lora_gqa/ on the llama_gqa model gives PEFT's logits, merged logits and its
-- first AdamW losses through models/llama.lua --init-adapter; training leaves
-- every base weight bit for bit; --save-adapter writes a folder that reloads
-- with the same logits (and, when PEFT is installed, into PeftModel); configs
-- zorch cannot honour are one-line errors naming the file and the key. The
-- Lua API (nn.LoRALinear, nn.lora.*) is checked on its own first.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local here = "lua/llama/"
local script = "../models/llama.lua"
local G = zorch.load(here .. "lora_golden.safetensors")
local BASE, ADAPTER = here .. "llama_gqa", here .. "lora_gqa"
-- the settings of gen_lora.py
local TRAIN = "--batch-size 2 --context 12 --steps 10 --lr 1e-2 --lr-schedule constant --beta2 0.95 " ..
  "--weight-decay 0.1 --clip 1 --no-shuffle --val-fraction 0 --data " .. here .. "tokens.bin"

local function rel(a, b) return (a - b):abs():max():item() / b:abs():max():item() end
local function same(a, b) return a.shape[1] == b.shape[1] and (a - b):abs():max():item() == 0 end
local function load_or_empty(path)
  local ok, t = pcall(zorch.load, path)
  return ok and t or {}
end

-- ---- the Lua API -----------------------------------------------------------------------------

zorch.manual_seed(3)
local function small() return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 5)) end
do
  local m = small()
  local x = zorch.randn(4, 6)
  local y0 = m(x)
  local _, names = nn.lora.apply(m, {r = 2, alpha = 6, target_modules = {"2"}})
  local l = m[3]
  local trainable = {}
  for n, p in m:named_parameters() do if p.requires_grad then trainable[#trainable + 1] = n end end
  tap.ok(#names == 1 and names[1] == "2" and getmetatable(l) == nn.LoRALinear and l.scaling == 3 and
         table.concat(trainable, " ") == "2.lora_A 2.lora_B" and #nn.lora.parameters(m) == 2,
         "apply wraps the target, scaling alpha / r, only lora_A and lora_B train (" .. table.concat(trainable, " ") .. ")")
  local bound = 1 / math.sqrt(8)
  tap.ok(l.lora_A.shape[1] == 2 and l.lora_A.shape[2] == 8 and l.lora_B.shape[1] == 5 and l.lora_B.shape[2] == 2 and
         l.lora_B:abs():max():item() == 0 and l.lora_A:abs():max():item() <= bound and l.lora_A:abs():max():item() > bound / 4,
         "PEFT's default init: lora_A (r, in) in U(-1/sqrt(in), 1/sqrt(in)), lora_B (out, r) zero")
  tap.ok(same(m(x), y0), "a fresh adapter leaves the output as it was")
  zorch.no_grad(function() l.lora_B:copy_(zorch.randn(5, 2)) end)
  local want = zorch.linear(m[2](m[1](x)), l.weight, l.bias) +
               zorch.matmul(zorch.matmul(m[2](m[1](x)), l.lora_A:t()), l.lora_B:t()) * 3
  local y1 = m(x)
  tap.ok(rel(y1, want) <= 1e-6, "forward is base(x) + B A x * scaling")
  local w0 = l.weight:clone()
  nn.lora.merge(m)
  local r1 = rel(m(x), y1)
  tap.ok(l.merged and r1 <= 1e-6 and not same(l.weight, w0), ("merge folds B A into the weight (logits within %.2g)"):format(r1))
  nn.lora.unmerge(m)
  local r2 = rel(l.weight, w0)
  tap.ok(not l.merged and r2 <= 1e-6 and rel(m(x), y1) <= 1e-6, ("unmerge restores the weight (within %.2g)"):format(r2))
  local w1 = l.weight:clone() -- (unmerge is not bit for bit)
  local msd = nn.lora.merged_state_dict(m)
  tap.ok(msd["2.lora_A"] == nil and msd["2.weight"] and rel(msd["2.weight"], w1 + zorch.matmul(l.lora_B, l.lora_A) * 3) <= 1e-7
         and same(l.weight, w1), "merged_state_dict folds the adapters in without changing the model")
  -- training through the Engine steps the adapter only: the base bit for bit
  local base = {}
  for n, p in m:named_parameters() do base[n] = p:detach():clone() end
  local engine = zorch.Engine{zero_stage = 1, gradient_clipping = 1.0}
  local opt = zorch.optim.AdamW(nn.lora.parameters(m), {lr = 0.05, weight_decay = 0.1})
  local model
  model, _, opt = engine:prepare(m, nil, opt)
  for _ = 1, 3 do
    opt:zero_grad()
    engine:backward((model(x) ^ 2):mean())
    opt:step()
  end
  local frozen_ok, moved = true, true
  for n, p in model:named_parameters() do
    if n:match("lora_") then moved = moved and not same(p, base[n]) else frozen_ok = frozen_ok and same(p, base[n]) end
  end
  tap.ok(frozen_ok and moved, "Engine + AdamW: the adapters move, every base parameter stays bit for bit")
end
do -- dropout on the adapter's input, in training only; rslora; gaussian init
  local m = small()
  nn.lora.apply(m, {r = 4, alpha = 8, dropout = 0.5, rslora = true, init = "gaussian", target_modules = {"0", "2"}})
  zorch.no_grad(function() m[1].lora_B:fill_(0.5) end)
  local x = zorch.randn(16, 6)
  m:eval()
  local e1, e2 = m(x), m(x)
  m:train()
  local t1 = m(x)
  tap.ok(m[1].scaling == 4 and same(e1, e2) and not same(t1, e1), "rslora scales by alpha / sqrt(r); dropout only in training")
  local s = m[1].lora_A:std():item()
  tap.ok(s > 0.1 and s < 0.45, ("init gaussian: lora_A ~ N(0, 1/r) (std %.3f, 1/r = 0.25)"):format(s))
end
tap.raises("no matching target is an error", function() nn.lora.apply(small(), {target_modules = {"q_proj"}}) end,
  "nn.lora.apply", "no nn.Linear of the model matches target_modules {q_proj}")
tap.raises("a bad rank is named", function() nn.lora.apply(small(), {r = 0, target_modules = {"0"}}) end, "r must be a positive integer")
tap.raises("LoRALinear takes an nn.Linear", function() nn.LoRALinear(nn.ReLU()) end, "nn.LoRALinear", "nn.ReLU")
do -- save and load through the API: same tensors, under PEFT's names
  local m = small()
  nn.lora.apply(m, {r = 3, alpha = 3, target_modules = {"0", "2"}})
  zorch.no_grad(function() for _, p in ipairs(nn.lora.parameters(m)) do p:copy_(zorch.randn(p.shape)) end end)
  nn.lora.save(m, tmp .. "/api")
  local t = zorch.load(tmp .. "/api/adapter_model.safetensors")
  local m2 = small()
  m2:load_state_dict(m:state_dict(), false)
  local _, c = nn.lora.load(m2, tmp .. "/api")
  local x = zorch.randn(3, 6)
  tap.ok(t["base_model.model.0.lora_A.weight"] and t["base_model.model.2.lora_B.weight"] and c.r == 3 and
         same(m(x), m2(x)), "nn.lora.save writes PEFT's names; nn.lora.load applies and fills the adapters")
end

-- ---- models/llama.lua with PEFT's adapter ----------------------------------------------------

local function token_file()
  local ids = G.tokens:view(-1):totable()
  ids[#ids + 1] = 0
  local parts = {}
  for i, v in ipairs(ids) do parts[i] = string.pack("<I2", v) end
  local path = tmp .. "/tokens.bin"
  local f = assert(io.open(path, "wb"))
  f:write(table.concat(parts))
  f:close()
  return path
end
local TOK = token_file()
local function logits_of(init, adapter, out, data)
  local text = run(("%s %s --init %s %s --data %s --batch-size 2 --context 12 --val-fraction 0 --steps 0 --logits %s"):format(
    bin, script, init, adapter and ("--init-adapter " .. adapter) or "", data or TOK, out))
  local z = load_or_empty(out)
  if not z.logits then print("# " .. text:gsub("\n", "\n# ")) end
  return z.logits, z.tokens
end

do
  local l, tok = logits_of(BASE, ADAPTER, tmp .. "/peft.safetensors")
  local r = l and rel(l, G.logits) or math.huge
  tap.ok(tok and same(tok, G.tokens) and r <= 1e-4,
    ("--init-adapter: logits equal PEFT's (largest difference %.2g of the largest logit)"):format(r))
  local lb = logits_of(BASE, nil, tmp .. "/base.safetensors")
  tap.ok(lb and rel(lb, G.logits) > 1e-2, "the adapter changes the logits (the golden's lora_B is not zero)")
end

local function losses(text)
  local wl, worst = G.losses:totable(), 0
  for s = 1, #wl do
    local l = tonumber(text:match(("step %d/%%d+ | loss (%%S+)"):format(s)))
    worst = math.max(worst, l and math.abs(l - wl[s]) / wl[s] or math.huge)
  end
  return worst, #wl
end
local out_hf, out_ad = tmp .. "/trained_hf", tmp .. "/trained_adapter"
local trained = tmp .. "/trained.safetensors"
do
  local got, ok = run(("%s %s --init %s --init-adapter %s %s --save-hf %s --save-adapter %s --logits %s"):format(
    bin, script, BASE, ADAPTER, TRAIN, out_hf, out_ad, trained))
  local worst, n = losses(got)
  tap.ok(ok and worst <= 1e-4 and got:find("LoRA r 8, alpha 16 on 4 modules", 1, true),
    ("the first %d AdamW losses on the adapter equal PEFT's (worst relative difference %.2g)"):format(n, worst))
  if worst > 1e-4 then print("# " .. got:gsub("\n", "\n# ")) end
  for _, z in ipairs({{"--zero-stage 2", 1e-4}, {"--batch-size 1 --accum 2 --zero-stage 1", 1e-4},
                      {"--checkpoint-activations", 1e-4}}) do
    local g2 = run(("%s %s --init %s --init-adapter %s %s %s"):format(bin, script, BASE, ADAPTER, TRAIN, z[1]))
    local w2 = losses(g2)
    tap.ok(w2 <= z[2], ("%s: the LoRA losses equal PEFT's (worst relative difference %.2g)"):format(z[1], w2))
  end
end

do -- the base weights are bit for bit: the merged folder is base + B A * scaling of the trained adapter
  local base = {}
  for _, f in ipairs({"model-00001-of-00003", "model-00002-of-00003", "model-00003-of-00003"}) do
    for k, v in pairs(zorch.load(BASE .. "/" .. f .. ".safetensors")) do base[k] = v end
  end
  local merged = {}
  local idx = io.open(out_hf .. "/model.safetensors")
  if idx then idx:close(); merged = load_or_empty(out_hf .. "/model.safetensors") end
  local ad = load_or_empty(out_ad .. "/adapter_model.safetensors")
  local n, bad, targets = 0, {}, 0
  for k, w in pairs(base) do
    n = n + 1
    local want = w
    local mod = k:match("^(.*)%.weight$")
    local a = mod and ad["base_model.model." .. mod .. ".lora_A.weight"]
    if a then
      targets = targets + 1
      want = w + zorch.matmul(ad["base_model.model." .. mod .. ".lora_B.weight"], a) * 2.0
    end
    if not (merged[k] and same(merged[k], want)) then bad[#bad + 1] = k end
  end
  tap.ok(n == 21 and targets == 4 and #bad == 0,
    ("after 10 steps every base weight is bit for bit the folder's (%d tensors, %d with the adapter folded in)%s"):format(
      n, targets, #bad > 0 and (": differ " .. table.concat(bad, " ")) or ""))
  local trained_ad = load_or_empty(out_ad .. "/adapter_model.safetensors")
  local orig = zorch.load(ADAPTER .. "/adapter_model.safetensors")
  local k = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
  tap.ok(trained_ad[k] and not same(trained_ad[k], orig[k]), "the saved adapter is the trained one")
end

do -- --save-adapter reloads with the trained model's logits; --save-hf is the merged model
  -- (--logits reads the first batch of the training data)
  local lt = load_or_empty(trained).logits
  local data = here .. "tokens.bin"
  local la = logits_of(BASE, out_ad, tmp .. "/reload.safetensors", data)
  tap.ok(lt and la and same(la, lt), "--init-adapter of the --save-adapter folder gives the trained model's logits")
  local lm = logits_of(out_hf, nil, tmp .. "/merged.safetensors", data)
  local r = (lt and lm) and rel(lm, lt) or math.huge
  tap.ok(r <= 1e-5, ("--save-hf with an adapter writes the merged model (logits within %.2g)"):format(r))
  -- PEFT's merge of its own adapter, against zorch's merged folder of it
  local m0 = tmp .. "/merged0"
  run(("%s %s --init %s --init-adapter %s %s --steps 0 --save-hf %s"):format(bin, script, BASE, ADAPTER, TRAIN, m0))
  local lm0 = logits_of(m0, nil, tmp .. "/merged0.safetensors")
  local r0 = lm0 and rel(lm0, G.merged_logits) or math.huge
  tap.ok(r0 <= 1e-4, ("merged logits equal PEFT's after merge_adapter (largest difference %.2g)"):format(r0))
  local cfg = io.open(out_ad .. "/adapter_config.json")
  local text = cfg and cfg:read("a") or ""
  if cfg then cfg:close() end
  local c = #text > 0 and zorch.json.decode(text) or {}
  tap.ok(c.peft_type == "LORA" and c.task_type == "CAUSAL_LM" and c.r == 8 and c.lora_alpha == 16 and c.bias == "none"
         and table.concat(c.target_modules or {}, ",") == "q_proj,v_proj" and c.base_model_name_or_path == BASE,
         "adapter_config.json: peft_type, task_type, r, lora_alpha, bias, target_modules, base_model_name_or_path")
  local has_peft = (run("python3 -c 'import peft, transformers' 2>&1")) == ""
  if has_peft then
    local t2, ok = run(("python3 %sgen_lora.py --check %s %s 1e-4 2>&1"):format(here, out_ad, trained))
    print("# " .. (t2:match("peft vs zorch[^\n]*") or t2:gsub("\n", "\n# ")))
    tap.ok(ok, "PEFT's PeftModel.from_pretrained loads the --save-adapter folder with zorch's logits within 1e-4")
  else
    print("# skipped the PEFT check: python3 cannot import peft and transformers")
  end
end

do -- --lora-r from scratch: adapters on the targets named, B zero (the base model's logits)
  local o = tmp .. "/fresh.safetensors"
  local text = run(("%s %s --init %s --lora-r 4 --lora-alpha 8 --lora-targets q_proj,k_proj,o_proj --data %s " ..
    "--batch-size 2 --context 12 --val-fraction 0 --steps 0 --logits %s"):format(bin, script, BASE, TOK, o))
  local l = load_or_empty(o).logits
  local lb = load_or_empty(tmp .. "/base.safetensors").logits
  tap.ok(text:find("LoRA r 4, alpha 8 on 6 modules", 1, true) and l and lb and same(l, lb),
    "--lora-r 4 --lora-targets q_proj,k_proj,o_proj: 6 adapters, starting as the base model")
end

-- ---- configs zorch cannot honour: one-line errors naming the file and the key ----------------

local function edited(key, value)
  local dir = ("%s/bad_%s"):format(tmp, key)
  os.execute(("rm -rf %s; cp -r %s %s"):format(dir, ADAPTER, dir))
  local f = assert(io.open(dir .. "/adapter_config.json"))
  local c = zorch.json.decode(f:read("a"))
  f:close()
  c[key] = value
  f = assert(io.open(dir .. "/adapter_config.json", "w"))
  f:write(zorch.json.encode(c))
  f:close()
  return dir
end
local function bad(desc, dir, ...)
  local out = run(("%s %s --init %s --init-adapter %s --data %s --batch-size 2 --context 12 --steps 0 --val-fraction 0 2>&1; echo status $?"):format(
    bin, script, BASE, dir, here .. "tokens.bin"))
  local msg = out:match("[^\n]*llama: %-%-init%-adapter:[^\n]*") or ""
  local good = out:find("status 2", 1, true) and not out:find("traceback", 1, true)
  for _, p in ipairs({...}) do good = good and msg:find(p, 1, true) end
  tap.ok(good, ("%s: %s"):format(desc, msg))
  if not good then print("# " .. out:gsub("\n", "\n# ")) end
end
local function refused(key, value, shown)
  local d = edited(key, value)
  bad(("%s %s is refused"):format(key, shown), d, d .. "/adapter_config.json", key .. " " .. shown .. " is not implemented")
end
refused("peft_type", "IA3", '"IA3"')
refused("use_dora", true, "true")
refused("bias", "all", '"all"')
refused("fan_in_fan_out", true, "true")
refused("rank_pattern", {["model.layers.0.self_attn.q_proj"] = 4}, '{ "model.layers.0.self_attn.q_proj": 4 }')
refused("alpha_pattern", {q_proj = 32}, '{ "q_proj": 32 }')
refused("modules_to_save", {"lm_head"}, '["lm_head"]')
do -- use_rslora is honoured: scaling alpha / sqrt(r)
  local d = edited("use_rslora", true)
  local o = tmp .. "/rs.safetensors"
  local text = run(("%s %s --init %s --init-adapter %s --data %s --batch-size 2 --context 12 --val-fraction 0 --steps 0 --logits %s"):format(
    bin, script, BASE, d, TOK, o))
  local l = load_or_empty(o).logits
  tap.ok(text:find("LoRA r 8, alpha 16 (rslora)", 1, true) and l and rel(l, G.logits) > 1e-3,
    "use_rslora true is read (scaling alpha / sqrt(r)), giving other logits")
end
do
  local d = edited("target_modules", {"q_proj", "k_proj", "v_proj"})
  bad("a target the file has no tensors for", d, d .. "/adapter_model.safetensors",
      "no tensor base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight")
  d = edited("r", 4)
  bad("a rank the tensors do not have", d, d .. "/adapter_model.safetensors", "has shape (8, 32), the model's is (4, 32)")
  d = edited("target_modules", {"nothing_here"})
  bad("targets the model lacks", d, d .. "/adapter_config.json", "no nn.Linear of the model matches target_modules {nothing_here}")
  d = edited("r", 8)
  os.remove(d .. "/adapter_model.safetensors")
  bad("a folder without adapter_model.safetensors", d, d .. "/adapter_model.safetensors: missing")
end

tap.done()
