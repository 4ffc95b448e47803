-- The Engine's auto_cast: under a 16-bit precision the prepared model's
-- forward gets its float arguments in that dtype (so its layers run 16-bit
-- kernels), integer arguments as they are; auto_cast = false, and DeepSpeed's
-- fp16.auto_cast false, pass them as given.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn

-- A Lua module that records the dtypes its forward receives.
local function recorder()
  local Probe = nn.Module:extend("Probe")
  function Probe:init() self.lin = nn.Linear(4, 3) end
  function Probe:forward(x, ids, extra)
    self.seen = {x:dtype(), ids and ids:dtype() or "none", tostring(extra)}
    return self.lin(x)
  end
  return Probe()
end

local function run(cfg)
  local engine = zorch.Engine(cfg)
  local model = recorder()
  local opt = zorch.optim.Adam(model:parameters(), {lr = 1e-3})
  local m, _, o = engine:prepare(model, nil, opt)
  local x = zorch.randn(5, 4)
  local ids = zorch.tensor({1, 2, 3}, {dtype = "int64"})
  local y = m(x, ids, "label")
  local loss = zorch.mse_loss(y, zorch.zeros(5, 3))
  o:zero_grad(); engine:backward(loss); o:step()
  return model.seen, y:dtype(), x:dtype(), loss
end

for _, p in ipairs({"bf16", "fp16"}) do
  local want = p == "bf16" and "bfloat16" or "float16"
  local seen, out, xin, loss = run({precision = p, seed = 1})
  tap.ok(seen[1] == want and seen[2] == "int64" and seen[3] == "label",
         p .. ": the forward gets the float batch in " .. want .. ", ids and other values unchanged: " .. table.concat(seen, " "))
  tap.ok(out == want and xin == "float32", p .. ": the output is " .. want .. " and the caller's batch is untouched: " .. out .. " " .. xin)
  tap.ok(loss:item() == loss:item() and loss:dtype() == "float32", p .. ": the loss against a float32 target is float32 and finite")
  seen, out = run({precision = p, seed = 1, auto_cast = false})
  tap.ok(seen[1] == "float32" and out == "float32", p .. ", auto_cast = false: the batch as given, the layer computes in float32: " ..
         seen[1] .. " " .. out)
end

local seen = run({precision = "fp32", seed = 1})
tap.ok(seen[1] == "float32", "fp32: nothing is cast")
seen = run({precision = "fp32", seed = 1, auto_cast = true})
tap.ok(seen[1] == "float32", "fp32 with auto_cast: nothing is cast")

-- DeepSpeed's fp16.auto_cast
local function cfg_of(text)
  local path = tap.temp_file(text, ".json")
  return zorch.Engine(path):config()
end
tap.ok(cfg_of([[{"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true, "auto_cast": false}}]]).auto_cast == false,
       "fp16.auto_cast false turns the cast off")
tap.ok(cfg_of([[{"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true, "auto_cast": true}}]]).auto_cast == true,
       "fp16.auto_cast true keeps it")
tap.ok(cfg_of([[{"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": true}}]]).auto_cast == true,
       "a bf16 config without the key casts")
tap.raises("a non-boolean auto_cast is named", function() zorch.Engine{auto_cast = "yes"} end, "auto_cast", "true or false")
tap.raises("a non-boolean fp16.auto_cast is named", function()
  cfg_of([[{"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": true, "auto_cast": 3}}]])
end, "fp16.auto_cast")
tap.done()
