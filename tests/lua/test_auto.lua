-- "auto" in DeepSpeed configs: Transformers' ZeRO-2/3 templates run unchanged, the
-- summary says what each "auto" became, and unresolvable ones are named in one error.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin = tap.zorch() -- launched ranks skip leak checks under sanitizers (tests/lua/tap.lua)
local out = os.tmpname()
local function run(cmd)
  local p = io.popen(("env -u ZORCH_QUIET %s 2>&1"):format(cmd))
  local text = p:read("a")
  return text, p:close()
end
for _, stage in ipairs({"zero2", "zero3"}) do
  local cfg = ("configs/ds_config_%s.json"):format(stage)
  for _, launch in ipairs({"", " launch -n 2"}) do
    local text, ok = run(("%s%s ../models/simple_net.lua --config %s --steps 2 --quiet --save %s"):format(bin, launch, cfg, out))
    local ranks = launch == "" and 1 or 2
    tap.ok(ok and text:find("done: 2 steps", 1, true), ("%s runs two steps on %d rank(s)"):format(cfg, ranks))
    tap.ok(text:find("auto: train_micro_batch_size_per_gpu = 64 (from the loader)", 1, true)
           and text:find(("auto: train_batch_size = %d "):format(64 * ranks), 1, true)
           and text:find("auto: gradient_accumulation_steps = 1", 1, true)
           and text:find("auto: gradient_clipping = 1 (from the script)", 1, true)
           and text:find("auto: bf16.enabled = false (from the Engine's precision option)", 1, true)
           and text:find("auto: optimizer.params.lr = 0.00015 (from the script's optimizer)", 1, true)
           and text:find("auto: scheduler.params.warmup_max_lr = 0.00015 (from the script's scheduler)", 1, true),
           ("%s on %d rank(s): the summary says what each auto became"):format(cfg, ranks))
    if stage == "zero3" then
      tap.ok(text:find("auto: zero_optimization.reduce_bucket_size = 400", 1, true)
             and text:find("auto: zero_optimization.stage3_prefetch_bucket_size = 360", 1, true)
             and text:find("auto: zero_optimization.stage3_param_persistence_threshold = 200", 1, true),
             "zero3: bucket sizes from the hidden size (20)")
    end
  end
end

-- unresolvable: no optimizer, no scheduler settings, an unknown key; one message
local path = os.tmpname()
local f = io.open(path, "w")
f:write([[{"optimizer": {"type": "AdamW", "params": {"lr": "auto"}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto"}},
  "zero_optimization": {"sub_group_size": "auto"}, "train_micro_batch_size_per_gpu": "auto"}]])
f:close()
local e = zorch.Engine(path)
local model = zorch.nn.Linear(4, 8)
local loader = zorch.data.DataLoader(zorch.data.TensorDataset(zorch.randn(16, 4), zorch.randn(16, 8)), {batch_size = 4})
local ok, err = pcall(e.prepare, e, model, loader)
err = tostring(err)
tap.ok(not ok and err:find("optimizer.params.lr (no optimizer", 1, true)
       and err:find("scheduler.params.warmup_num_steps (no scheduler", 1, true)
       and err:find("zero_optimization.sub_group_size", 1, true) and select(2, err:gsub("Engine:prepare", "")) == 1,
       "every unresolvable auto is named in one message: " .. err)
tap.ok(zorch.flags.is_usage_error(select(2, pcall(e.prepare, e, model, loader))),
       "an unresolvable auto is a usage error (no traceback, status 2 from the command)")
do
  local p2 = os.tmpname()
  local f2 = assert(io.open(p2, "w"))
  f2:write([[{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 3, "sub_group_size": "auto",
    "stage3_gather_16bit_weights_on_model_save": "auto"}}]])
  f2:close()
  local p = io.popen(("%s ../models/simple_net.lua --config %s --steps 1 --samples 16 --quiet --save %s 2>&1; echo \"status $?\""):format(
    tap.zorch(), p2, out))
  local text = p:read("a")
  p:close()
  tap.ok(text:find("status 2", 1, true) and text:find("zero_optimization.sub_group_size", 1, true) and
         not text:find("traceback", 1, true) and not text:find("stage3_gather_16bit", 1, true),
         "the command names the unresolvable auto with status 2, and resolves gather-on-save: " .. text:gsub("\n", " | "))
  os.remove(p2)
end
-- the hidden_size option wins
e = zorch.Engine(path, {hidden_size = 7})
tap.ok(e.cfg.hidden_size == 7, "hidden_size is an Engine option")
os.remove(path)
os.remove(out)
-- as Accelerate: explicit values beside the autos win, the autos take the script's,
-- and the section's type is the optimizer that runs
do
  local p3 = os.tmpname()
  local f3 = assert(io.open(p3, "w"))
  f3:write([[{"train_micro_batch_size_per_gpu": 4,
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": 0.5}}}]])
  f3:close()
  local e3 = zorch.Engine(p3)
  local m3 = zorch.nn.Linear(4, 8)
  local _, _, o3 = e3:prepare(m3, nil, zorch.optim.Adam(m3:parameters(), {lr = 1e-3}))
  local d = e3.user_opt.defaults
  tap.ok(getmetatable(e3.user_opt).__name == "optim.AdamW" and d.weight_decay == 0.5 and d.lr == 1e-3 and o3.lr == 1e-3,
         ("the config's AdamW runs, its weight decay 0.5, the script's lr: %s wd %s lr %s"):format(
           getmetatable(e3.user_opt).__name, d.weight_decay, d.lr))
  os.remove(p3)
end
-- the script's values fill "auto" clipping and AdamW's params: the weights are those of the
-- same run with the values written in (and differ from a run with other values)
do
  local dir = tap.tmpdir()
  local function job(name, json, flags)
    local cfg = dir .. "/" .. name .. ".json"
    if json then local f = assert(io.open(cfg, "w")); f:write(json); f:close() end
    local save = dir .. "/" .. name .. ".safetensors"
    local text, ok = run(("%s ../models/simple_net.lua %s --steps 4 --samples 256 --quiet --save %s %s"):format(
      bin, json and ("--config " .. cfg) or "", save, flags))
    tap.ok(ok, name .. " runs: " .. (ok and "" or text))
    return zorch.load(save), text
  end
  local function same(a, b)
    for k, t in pairs(a) do if not zorch.equal(t, b[k]) then return false end end
    return true
  end
  local auto_clip, text = job("auto_clip", [[{"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto",
    "zero_optimization": {"stage": 2}}]], "--clip 0.5 --lr 0.05")
  tap.ok(text:find("auto: gradient_clipping = 0.5 (from the script)", 1, true), "the summary: clipping 0.5 from --clip")
  local clip05 = job("clip05", nil, "--clip 0.5 --lr 0.05")
  local clip1 = job("clip1", nil, "--clip 1 --lr 0.05")
  tap.ok(same(auto_clip, clip05) and not same(auto_clip, clip1), "\"auto\" clipping with --clip 0.5 clips at 0.5")
  local auto_w = job("auto_adamw", [[{"train_micro_batch_size_per_gpu": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "weight_decay": "auto"}}}]], "--weight-decay 0.1 --lr 0.05")
  local adamw = job("adamw", [[{"train_micro_batch_size_per_gpu": 64,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.05, "weight_decay": 0.1}}}]], "")
  local adamw0 = job("adamw0", [[{"train_micro_batch_size_per_gpu": 64,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.05, "weight_decay": 0}}}]], "")
  tap.ok(same(auto_w, adamw) and not same(auto_w, adamw0),
         "AdamW with \"auto\" params runs AdamW with the script's weight decay 0.1")
end
tap.done()
