-- DeepSpeed JSON configurations: the keys zorch implements drive the engine,
-- the others are listed in one warning, invalid values are errors naming the key.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local dir = os.tmpname()
os.remove(dir)
os.execute("mkdir -p " .. dir)
local n = 0
local function config(text)
  n = n + 1
  local path = ("%s/ds%d.json"):format(dir, n)
  local f = io.open(path, "w")
  f:write(text)
  f:close()
  return path
end

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
tap.ok(table.concat(e.unimplemented, ",") == "wall_clock_breakdown,zero_optimization.overlap_comm",
       "keys zorch does not implement are collected for one warning: " .. table.concat(e.unimplemented, ", "))
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
tap.ok(math.abs(opt.lr - 0.0001) < 1e-9, "and rises linearly: one optimizer step of ten gives 1e-4 (" .. opt.lr .. ")")

local function refused(desc, text, ...)
  tap.raises(desc, function() zorch.Engine(config(text)) end, ...)
end
refused("an impossible stage names the key", [[{"zero_optimization": {"stage": 5}}]], "zero_optimization.stage", "5")
refused("inconsistent batch sizes are an error", [[{"train_batch_size": 60, "train_micro_batch_size_per_gpu": 16, "gradient_accumulation_steps": 2}]],
        "train_batch_size 60")
refused("a batch that does not divide is an error", [[{"train_batch_size": 30, "train_micro_batch_size_per_gpu": 16}]], "train_batch_size")
refused("fp16 says to use bf16", [[{"fp16": {"enabled": true}}]], "bf16")
refused("an unknown optimizer is named", [[{"optimizer": {"type": "Lamb"}}]], "optimizer.type", "Lamb")
refused("an unknown scheduler is named", [[{"scheduler": {"type": "OneCycle"}}]], "scheduler.type")
refused("a negative clip is refused", [[{"gradient_clipping": -1}]], "gradient_clipping")
refused("a file that is not JSON is refused", "{stage: 2", "not a JSON object")
tap.raises("a missing file is named", function() zorch.Engine(dir .. "/nope.json") end, "nope.json")

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
os.execute("rm -rf " .. dir)
tap.done()
