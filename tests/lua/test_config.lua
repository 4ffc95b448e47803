-- DeepSpeed JSON configurations: the keys zorch implements drive the engine,
-- the others are listed in one warning, invalid values are errors naming the key.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local function config(text) return tap.temp_file(text, ".json") end

local e = zorch.Engine(config([[{
  "train_batch_size": 64, "train_micro_batch_size_per_gpu": 16,
  "gradient_clipping": 0.5, "bf16": {"enabled": true},
  "zero_optimization": {"stage": 3, "reduce_bucket_size": 1000, "overlap_comm": true},
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.01}},
  "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.001, "warmup_num_steps": 10, "warmup_type": "linear"}},
  "steps_per_print": 100, "wall_clock_breakdown": false
}]]))
local c = e:config()
tap.ok(c.zero_stage == 3 and c.precision == "bf16" and c.gradient_clipping == 0.5 and c.reduce_bucket_size == 1000,
       "stage, bf16, clipping and bucket size come from the file")
tap.ok(c.gradient_accumulation_steps == 4 and c.train_micro_batch_size == 16,
       "accumulation follows from train_batch_size / micro batch (64 / 16 on one rank = 4)")
tap.ok(#e.unimplemented == 0 and c.overlap_comm == true,
       "overlap_comm is honoured, and wall_clock_breakdown false is not listed as ignored: " ..
       table.concat(e.unimplemented, ", "))
local model = zorch.nn.Linear(3, 2)
local loader = zorch.data.DataLoader(zorch.data.TensorDataset(zorch.randn(64, 3), zorch.randn(64, 2)), {batch_size = 7})
local _, ld, opt = e:prepare(model, loader)
tap.ok(ld.batch_size == 16 and getmetatable(opt).__index.defaults.weight_decay == 0.01,
       "prepare sets the loader's micro batch and makes the AdamW the file names")
tap.ok(math.abs(opt.lr - 0) < 1e-12, "WarmupLR starts at warmup_min_lr")
for x, y in ld:iter() do
  local l = zorch.mse_loss(model(x), y)
  opt:zero_grad(); e:backward(l); opt:step()
end
tap.ok(math.abs(opt.lr - 0) < 1e-12, "and, counting as DeepSpeed does, is still warmup_min_lr after one step (" .. opt.lr .. ")")

local function refused(desc, text, ...)
  tap.raises(desc, function() zorch.Engine(config(text)) end, ...)
end
refused("an impossible stage names the key", [[{"zero_optimization": {"stage": 5}}]], "zero_optimization.stage", "5")
refused("inconsistent batch sizes are an error", [[{"train_batch_size": 60, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2}]],
        "train_batch_size 60")
refused("a batch that does not divide is an error", [[{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 16}]], "train_batch_size")
refused("fp16 and bf16 together are refused", [[{"fp16": {"enabled": true}, "bf16": {"enabled": true}}]], "fp16 and bf16")
refused("an unknown optimizer is named", [[{"optimizer": {"type": "Adagrad"}}]], "optimizer.type", "Adagrad")
refused("an unknown scheduler is named", [[{"scheduler": {"type": "CyclicLR"}}]], "scheduler.type")
refused("a negative clip is refused", [[{"gradient_clipping": -1}]], "gradient_clipping")
refused("a file that is not JSON is refused", "{stage: 2", "not a JSON object")
tap.raises("a missing file is named", function() zorch.Engine(dir .. "/nope.json") end, "nope.json")

-- booleans as DeepSpeed reads them: never "true because it is not false"
local function precision(text) return zorch.Engine(config(text)):config().precision end
tap.ok(precision([[{"bf16": {"enabled": 0}}]]) == "fp32", 'bf16.enabled 0 is off')
tap.ok(precision([[{"bf16": {"enabled": "false"}}]]) == "fp32", 'bf16.enabled "false" is off')
tap.ok(precision([[{"bf16": {"enabled": "True"}}]]) == "bf16" and precision([[{"bf16": {"enabled": 1}}]]) == "bf16",
       'bf16.enabled "True" and 1 are on')
refused("a boolean that is not one is named", [[{"bf16": {"enabled": "maybe"}}]], "bf16.enabled", "true or false", '"maybe"')
refused("a number other than 0 and 1 is not a boolean", [[{"bf16": {"enabled": 2}}]], "bf16.enabled", "2")
tap.ok(precision([[{"bf16": {"enabled": "auto"}}]]) == "fp32", 'bf16.enabled "auto" is off until the Engine option says otherwise')
refused("bf16 that is not an object", [[{"bf16": true}]], "bf16 must be", "an object")
-- the batch check cannot overflow: 2^33 x (2^31 + 1) wraps to 2^33 in 64 bits
refused("a batch product that would wrap around is refused",
        [[{"train_batch_size": 8589934592, "train_micro_batch_size_per_gpu": 8589934592, "gradient_accumulation_steps": 2147483649}]],
        "train_batch_size 8589934592")
-- strict JSON
refused("a top-level array is refused", [[ [{"train_batch_size": 8}] ]], "not a JSON object")
refused("trailing garbage is refused", [[{"train_batch_size": 8} x]], "not a JSON object")
refused("a second object is refused", [[{"train_batch_size": 8} {}]], "not a JSON object")
refused("leading zeros are refused", [[{"train_batch_size": 08}]], "number", "byte")
refused("a repeated key is refused", [[{"train_batch_size": 8, "train_batch_size": 16}]], "train_batch_size", "twice")
-- every value type-checked, the value shown readably
refused("a scheduler step count given as text", [[{"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "10"}}}]],
        "scheduler.params.warmup_num_steps", "an integer >= 1", '"10"')
-- DeepSpeed 0.19.8 refuses the keys of the features it removed, even disabled
refused("a removed feature's key", [[{"progressive_layer_drop": {"enabled": false}}]],
        "progressive_layer_drop", "names a feature DeepSpeed 0.19.8 removed", "remove the key")
-- DeepSpeed 0.19.8 refuses a warm-up of 0 steps (earlier releases took it as 2)
refused("no warm-up steps", [[{"scheduler": {"type": "WarmupCosineLR", "params": {"warmup_num_steps": 0, "total_num_steps": 9}}}]],
        "scheduler.params.warmup_num_steps", "an integer >= 1", "0")
refused("betas out of range are shown as a list", [[{"optimizer": {"type": "Adam", "params": {"betas": [0.9, 2]}}}]],
        "optimizer.params.betas", "[0.9, 2]")
refused("an unknown optimizer parameter is named", [[{"optimizer": {"type": "SGD", "params": {"lr": 0.1, "momentun": 0.9}}}]],
        "optimizer.params.momentun", "momentum")
refused("a learning rate given as text", [[{"optimizer": {"type": "Adam", "params": {"lr": "0.1"}}}]], "optimizer.params.lr", '"0.1"')
refused("optimizer params that are not an object", [[{"optimizer": {"type": "Adam", "params": 5}}]], "optimizer.params", "5")
refused("zero_optimization that is a list", [[{"zero_optimization": [2]}]], "zero_optimization", "an object")
refused("a stage given as text", [[{"zero_optimization": {"stage": "2"}}]], "zero_optimization.stage", '"2"')
refused("an ignored key of the wrong type", [[{"zero_optimization": {"overlap_comm": "sometimes"}}]],
        "zero_optimization.overlap_comm", '"sometimes"')
refused("a cosine schedule needs its length", [[{"scheduler": {"type": "WarmupCosineLR", "params": {}}}]], "total_num_steps")
refused("a clip given as text", [[{"gradient_clipping": "1.0"}]], "gradient_clipping", '"1.0"')
tap.raises("Lua tables show values readably too", function() zorch.Engine{zero_stage = {2}} end, "zero_stage", "[2]")
tap.raises("and optimizers", function() zorch.optim.Adam(zorch.nn.Linear(2, 2):parameters(), {betas = {0.9, 2}}) end,
           "betas", "two numbers", "[0.9, 2]")
-- comm_timeout: seconds a collective may wait
tap.ok(zorch.Engine(config([[{"comm_timeout": 5}]])):config().comm_timeout == 5, "comm_timeout comes from the file")
refused("a comm_timeout that is not a number", [[{"comm_timeout": "soon"}]], "comm_timeout", '"soon"')
tap.ok(zorch.Engine(config([[{"comm_timeout": 5}]]), {comm_timeout = 9}):config().comm_timeout == 9, "an override wins")

-- the warning's groups: no effect on results, changes training, not recognised;
-- keys that are off are not listed
do
  local e2 = zorch.Engine(config([[{
    "zero_optimization": {"stage": 3, "overlap_comm": true, "reduce_scatter": false, "sub_group_size": 1e9,
      "offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "none"},
      "stage3_gather_16bit_weights_on_model_save": true, "stage3_gather_fp16_weights_on_model_save": false},
    "tensorboard": {"enabled": false, "output_path": "x"}, "wandb": {"enabled": false}, "comet": {"enabled": true},
    "flops_profiler": {}, "wall_clock_breakdown": false, "memory_breakdown": false,
    "data_efficiency": {"enabled": true}, "data_types": {"grad_accum_dtype": "fp32"},
    "zero_allow_untested_optimizer": true, "my_own_key": 1
  }]]))
  local groups = {}
  for _, g in ipairs(Z._unimplemented_groups(e2.unimplemented)) do groups[g.kind] = table.concat(g.keys, ",") end
  tap.ok(groups["no effect"] == "comet,zero_allow_untested_optimizer,zero_optimization.sub_group_size",
         "no effect on results: " .. tostring(groups["no effect"]))
  tap.ok(groups["changes training"] == "data_efficiency,data_types",
         "changes training: " .. tostring(groups["changes training"]))
  tap.ok(groups["not recognised"] == "my_own_key", "not recognised: " .. tostring(groups["not recognised"]))
  local text = tap.run(("env -u ZORCH_QUIET %s -e 'local z = require \"zorch\"; z.Engine(\"%s\")'"):format(
    os.getenv("ZORCH_BIN") or "../build/zorch", config([[{"data_efficiency": {"enabled": true},
    "zero_optimization": {"sub_group_size": 1000}, "tensorboard": {"enabled": false}}]])))
  tap.ok(text:find("ignored, no effect on results", 1, true) and text:find("ignored, which changes training", 1, true)
         and text:find("data_efficiency", 1, true) and not text:find("tensorboard", 1, true),
         "the warning has one line a group: " .. text:gsub("\n", " | "))
end
-- activation_checkpointing: cpu_checkpointing drives engine:checkpoint, the other
-- keys are named one by one (false and 0 are off, so not listed)
do
  local e3 = zorch.Engine(config([[{"activation_checkpointing": {"partition_activations": true,
    "cpu_checkpointing": true, "contiguous_memory_optimization": false, "number_checkpoints": 4,
    "synchronize_checkpoint_boundary": false, "profile": false, "my_ac_key": 1}}]]))
  tap.ok(e3:config().cpu_checkpointing == true, "activation_checkpointing.cpu_checkpointing is read")
  local groups = {}
  for _, g in ipairs(Z._unimplemented_groups(e3.unimplemented)) do groups[g.kind] = table.concat(g.keys, ",") end
  tap.ok(groups["no effect"] == "activation_checkpointing.number_checkpoints,activation_checkpointing.partition_activations",
         "activation checkpointing keys with no effect: " .. tostring(groups["no effect"]))
  tap.ok(groups["not recognised"] == "activation_checkpointing.my_ac_key",
         "an unknown activation checkpointing key: " .. tostring(groups["not recognised"]))
  tap.ok(zorch.Engine(config([[{"activation_checkpointing": {}}]])):config().cpu_checkpointing == false,
         "cpu_checkpointing is off by default")
end
refused("activation_checkpointing that is not an object", [[{"activation_checkpointing": 3}]], "activation_checkpointing")
refused("a cpu_checkpointing that is not a boolean", [[{"activation_checkpointing": {"cpu_checkpointing": "often"}}]],
        "activation_checkpointing.cpu_checkpointing", '"often"')
-- offload_optimizer: cpu and nvme are read (the old cpu_offload too), pin_memory too; the buffers'
-- placement keys are listed; nvme needs a path
do
  local c1 = zorch.Engine(config([[{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
    "nvme_path": "/tmp", "buffer_count": 5, "pin_memory": true, "fast_init": false}}}]]))
  local oo = c1:config().offload_optimizer
  tap.ok(oo.device == "nvme" and oo.nvme_path == "/tmp" and oo.buffer_count == 5 and oo.pin_memory == true,
         "offload_optimizer nvme, its path, buffer_count and pin_memory are read")
  tap.ok(table.concat(c1.unimplemented, ",") == "zero_optimization.offload_optimizer.pin_memory",
         "pin_memory is listed (no effect on results), fast_init false is off: " .. table.concat(c1.unimplemented, ","))
  tap.ok(zorch.Engine(config([[{"zero_optimization": {"cpu_offload": true}}]])):config().offload_optimizer.device == "cpu",
         "cpu_offload: true is offload_optimizer to cpu")
  tap.ok(zorch.Engine(config([[{"zero_optimization": {"cpu_offload": false}}]])):config().offload_optimizer == false,
         "cpu_offload: false is no offload")
end
refused("nvme offload without a path", [[{"zero_optimization": {"offload_optimizer": {"device": "nvme"}}}]],
        "zero_optimization.offload_optimizer.nvme_path")
refused("a buffer_count of 1", [[{"zero_optimization": {"offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "buffer_count": 1}}}]],
        "zero_optimization.offload_optimizer.buffer_count")
refused("an offload device zorch does not know", [[{"zero_optimization": {"offload_param": {"device": "gpu"}}}]],
        "zero_optimization.offload_param.device", '"gpu"')
refused("max_grad_norm is refused as DeepSpeed refuses it", [[{"optimizer": {"type": "Adam", "params": {"max_grad_norm": 1}}}]],
        "optimizer.params.max_grad_norm", "gradient_clipping")
tap.ok(precision([[{"bfloat16": {"enabled": true}}]]) == "bf16", 'the older "bfloat16" spelling is bf16')
refused("the gather-on-save flag is checked", [[{"zero_optimization": {"stage3_gather_16bit_weights_on_model_save": "yes please"}}]],
        "stage3_gather_16bit_weights_on_model_save")

-- Accelerate YAML: a deepspeed_config section, or the JSON file it names
do
  local yaml = tap.temp_file([[
compute_environment: LOCAL_MACHINE
debug: false
deepspeed_config:
  deepspeed_multinode_launcher: standard
  gradient_accumulation_steps: 2
  gradient_clipping: 0.5   # a comment
  offload_optimizer_device: cpu
  offload_param_device: none
  zero3_init_flag: true
  zero3_save_16bit_model: true
  zero_stage: 3
distributed_type: DEEPSPEED
downcast_bf16: 'no'
mixed_precision: 'bf16'
num_machines: 1
num_processes: 8
tpu_env: []
use_cpu: false
]], ".yaml")
  local ey = zorch.Engine(yaml)
  local cy = ey:config()
  tap.ok(cy.zero_stage == 3 and cy.precision == "bf16" and cy.gradient_accumulation_steps == 2 and cy.gradient_clipping == 0.5,
         "an Accelerate YAML file gives stage, precision, accumulation and clipping")
  local quoted = zorch.Engine(tap.temp_file("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: '2'\n" ..
                                            "  gradient_accumulation_steps: \"4\"\n", ".yaml")):config()
  tap.ok(quoted.zero_stage == 2 and quoted.gradient_accumulation_steps == 4,
         "quoted numbers read as Accelerate reads them (int('2'))")
  tap.ok(table.concat(ey.unimplemented, ",") == "num_processes" and cy.offload_optimizer.device == "cpu",
         "its optimizer offload to cpu is read, a num_processes other than the ranks is listed: " ..
         table.concat(ey.unimplemented, ","))
  local m = zorch.nn.Linear(3, 2)
  local _, ld = ey:prepare(m, zorch.data.DataLoader(zorch.data.TensorDataset(zorch.randn(8, 3), zorch.randn(8, 2)), {batch_size = 4}),
                           zorch.optim.Adam(m:parameters(), {lr = 0.01}))
  tap.ok(ld.batch_size == 4, "the micro batch is the loader's (\"auto\")")
  local json = config([[{"train_micro_batch_size_per_gpu": 5, "bf16": {"enabled": "auto"}, "zero_optimization": {"stage": 1}}]])
  local named = tap.temp_file(("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: %s\nmixed_precision: bf16\n"):format(json), ".yml")
  local cn = zorch.Engine(named):config()
  tap.ok(cn.zero_stage == 1 and cn.train_micro_batch_size == 5 and cn.precision == "bf16",
         "deepspeed_config_file is read, its bf16 \"auto\" from mixed_precision")
  local beside = tap.temp_file("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: " ..
    json:match("[^/]+$") .. "\n", ".yaml")
  tap.ok(zorch.Engine(beside):config().zero_stage == 1, "a relative deepspeed_config_file is found beside the YAML file")
  tap.raises("a missing deepspeed_config_file is named", function()
    zorch.Engine(tap.temp_file("distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: nope.json\n", ".yaml"))
  end, "deepspeed_config_file", "nope.json")
  tap.raises("a YAML file that is not for DeepSpeed is refused", function()
    zorch.Engine(tap.temp_file("distributed_type: 'NO'\ndeepspeed_config: {}\n", ".yaml"))
  end, "not DEEPSPEED")
  tap.raises("a bad mixed_precision is named", function()
    zorch.Engine(tap.temp_file("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\nmixed_precision: fp8\n", ".yaml"))
  end, "mixed_precision", "fp8")
  tap.raises("a line that is not key: value names the line", function()
    zorch.Engine(tap.temp_file("distributed_type: DEEPSPEED\nthis is not yaml\n", ".yaml"))
  end, ":2:")
  tap.raises("three levels are refused", function()
    zorch.Engine(tap.temp_file("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 2\n    deeper: 1\n", ".yaml"))
  end, "two levels")
  tap.raises("a bad stage in YAML names the key", function()
    zorch.Engine(tap.temp_file("distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 7\n", ".yaml"))
  end, "zero_optimization.stage", "7")
end

-- the reader for tools and fuzzing: seeds are valid, anything else a message
local seeds = io.popen("ls ../tests/fuzz/seeds/dsconfig/*.json 2>/dev/null"):read("a")
local nseeds = 0
for path in seeds:gmatch("[^\n]+") do
  local ok, why = Z._read_ds_config_text(io.open(path):read("a"), 2)
  tap.ok(ok, "seed " .. path:match("[^/]+$") .. " is a valid DeepSpeed config " .. (ok and "" or why))
  nseeds = nseeds + 1
end
tap.ok(nseeds >= 3, ("%d DeepSpeed config seeds in tests/fuzz/seeds/dsconfig"):format(nseeds))
for _, text in ipairs({"", "[]", "1", '{"bf16": {"enabled": []}}', '{"optimizer": {"type": 1}}', '{"scheduler": []}',
                       '{"zero_optimization": {"offload_optimizer": {"device": 1}}}', '{"train_batch_size": -1e999}'}) do
  local ok, a, b = pcall(Z._read_ds_config_text, text)
  tap.ok(ok and a == false and type(b) == "string" and not b:find("attempt to", 1, true),
         ("_read_ds_config_text(%q): %s"):format(text, tostring(b)))
end

-- DeepSpeed's older boolean zero_optimization (its Getting Started config)
for _, case in ipairs({{"true", 1}, {"false", 0}}) do
  local ok, cfg = Z._read_ds_config_text(('{"train_batch_size": 8, "zero_optimization": %s}'):format(case[1]), 1)
  tap.ok(ok and cfg.zero_stage == case[2], ('"zero_optimization": %s is stage %d'):format(case[1], case[2]))
end

-- a batch larger than the data set: an error with drop_last, else a warning
tap.raises("drop_last with a batch larger than the data set makes no batch: an error naming both",
  function()
    local e2 = zorch.Engine{train_micro_batch_size = 16}
    e2:prepare(zorch.nn.Linear(3, 2), zorch.data.DataLoader(zorch.data.TensorDataset(zorch.randn(10, 3), zorch.randn(10, 2)),
                                                             {drop_last = true}))
  end, "16 samples", "10 samples", "drop_last")

-- the reference job driven by a config file gives the flags' result
local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
local ds = config([[{"train_batch_size": 32, "gradient_clipping": 1.0, "zero_optimization": {"stage": 2},
  "optimizer": {"type": "Adam", "params": {"lr": 0.01}}}]])
local a, b = dir .. "/a.safetensors", dir .. "/b.safetensors"
os.execute(("%s ../models/simple_net.lua --samples 320 --steps 20 --batch-size 32 --lr 0.01 --quiet --save %s > /dev/null 2>&1"):format(bin, a))
os.execute(("%s ../models/simple_net.lua --samples 320 --steps 20 --config %s --quiet --save %s > /dev/null 2>&1"):format(bin, ds, b))
local wa, wb = zorch.load(a), zorch.load(b)
tap.ok(wa["fc1.weight"] and wb["fc1.weight"] and (wa["fc1.weight"] - wb["fc1.weight"]):abs():max():item() == 0,
       "simple_net.lua --config trains exactly as the same flags")
local text = io.popen(("env -u ZORCH_QUIET %s ../models/simple_net.lua --samples 10 --batch-size 16 --steps 2 --quiet --save %s 2>&1"):format(
  bin, a)):read("a")
tap.ok(text:find("warning", 1, true) and text:find("16 samples", 1, true) and text:find("10 samples", 1, true),
       "a batch larger than the data set is a warning naming both sizes: " .. (text:match("warning[^\n]*") or text))
local ok = os.execute(("%s ../models/simple_net.lua --samples 64 --steps 1 --quiet --comm-timeout -1 --save %s > /dev/null 2>&1"):format(bin, a))
tap.ok(not ok, "simple_net.lua --comm-timeout is the engine's comm_timeout (-1 is refused)")
-- steps_per_print and wall_clock_breakdown: the step lines and the times
do
  local wc = config([[{"train_micro_batch_size_per_gpu": 16, "steps_per_print": 2, "wall_clock_breakdown": true,
    "fp16": {"enabled": true, "initial_scale_power": 8}, "zero_optimization": {"stage": 2}}]])
  local out = tap.run(("%s ../models/simple_net.lua --samples 128 --steps 4 --config %s --quiet --save %s"):format(bin, wc, a))
  local steps, times = {}, {}
  for n, line in out:gmatch("step (%d+)  (loss[^\n]*)") do steps[#steps + 1] = {tonumber(n), line} end
  for n, f, b, r, st in out:gmatch("step (%d+)  time %(ms/step%)  forward ([%d.]+)  backward ([%d.]+)  reduction ([%d.]+)  step ([%d.]+)") do
    times[#times + 1] = {tonumber(n), tonumber(f), tonumber(b), tonumber(r), tonumber(st)}
  end
  local l = steps[1] and steps[1][2] or ""
  tap.ok(#steps == 2 and steps[1][1] == 2 and steps[2][1] == 4 and l:find("lr", 1, true) and l:find("grad norm", 1, true)
         and l:find("loss scale 256", 1, true) and l:find("samples/s", 1, true),
         "steps_per_print 2: loss, lr, grad norm, loss scale and samples/s at steps 2 and 4: " .. l)
  tap.ok(#times == 2 and times[1][2] > 0 and times[1][3] > 0 and times[1][4] >= 0 and times[1][5] > 0,
         "wall_clock_breakdown: forward, backward, reduction and step times with each line: " ..
         (out:match("step %d+  time[^\n]*") or out))
  local quiet = tap.run(("%s ../models/simple_net.lua --samples 64 --steps 2 --config %s --quiet --save %s"):format(bin,
    config([[{"wall_clock_breakdown": false, "steps_per_print": 1}]]), a))
  tap.ok(quiet:find("step 1  loss", 1, true) and not quiet:find("time (ms/step)", 1, true),
         "wall_clock_breakdown false prints no times")
end
-- a config mistake under launch: one line, status 2, no mpirun notes
do
  local bad = config([[{"train_micro_batch_size_per_gpu": 4, "optimizer": {"type": "Adam", "params": {"eps": "x"}}}]])
  local p = io.popen(("%s launch -n 2 ../models/simple_net.lua --config %s --steps 1 --quiet --save %s/l.safetensors 2>&1; echo \"status $?\""):format(
    tap.zorch(), bad, dir))
  local out = p:read("a")
  p:close()
  local _, n = out:gsub("optimizer%.params%.eps", "")
  tap.ok(out:match("status 2%s*$") and n == 1 and not out:find("mpirun", 1, true) and not out:find("MPI_ABORT", 1, true)
         and not out:find("traceback", 1, true), "a config mistake on 2 ranks is one message and status 2: " .. out)
end
os.execute("rm -rf " .. dir)
tap.done()
