-- Accelerate YAML files without DeepSpeed: FSDP's sharding strategies (names
-- and the numbers older Accelerate writes), its parameter offload and mixed
-- precision as ZeRO settings; MULTI_GPU and MULTI_CPU as stage 0; num_processes
-- against the world. An FSDP and a MULTI_GPU file train simple_net on 2 ranks
-- as the same flags do.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin = tap.zorch()

local function yaml(body, np) return tap.temp_file(body .. ("num_machines: 1\nnum_processes: %d\n"):format(np or 1), ".yaml") end
local function fsdp(fc, extra) return yaml("distributed_type: FSDP\nfsdp_config:\n" .. fc .. (extra or "")) end

for _, c in ipairs({{"FULL_SHARD", 3}, {"SHARD_GRAD_OP", 2}, {"NO_SHARD", 0}, {"HYBRID_SHARD", 3}, {"HYBRID_SHARD_ZERO2", 2},
                    {"1", 3}, {"2", 2}, {"3", 0}}) do
  local cfg = zorch.Engine(fsdp("  fsdp_sharding_strategy: " .. c[1] .. "\n")):config()
  tap.ok(cfg.zero_stage == c[2], ("fsdp_sharding_strategy %s is ZeRO stage %d (got %s)"):format(c[1], c[2], tostring(cfg.zero_stage)))
end
local c2 = zorch.Engine(fsdp("  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n")):config()
tap.ok(c2.zero_stage == 2, "FSDP2's reshard_after_forward false is stage 2")
local off = zorch.Engine(fsdp("  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_offload_params: true\n  fsdp_state_dict_type: FULL_STATE_DICT\n",
                              "mixed_precision: bf16\n"))
local co = off:config()
tap.ok(co.offload_param.device == "cpu" and co.offload_optimizer.device == "cpu" and co.precision == "bf16",
       "fsdp_offload_params offloads parameters and optimizer to cpu; mixed_precision bf16 is read")
tap.ok(#off.unimplemented == 0, "the wrapping and state-dict keys are read without a note: " .. table.concat(off.unimplemented, ","))
local fp16 = zorch.Engine(fsdp("  fsdp_sharding_strategy: NO_SHARD\n", "mixed_precision: fp16\n")):config()
tap.ok(fp16.precision == "fp16" and fp16.zero_stage == 0, "mixed_precision fp16 with NO_SHARD")
local odd = zorch.Engine(fsdp("  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_something_new: 1\n"))
tap.ok(table.concat(odd.unimplemented, ",") == "fsdp_config.fsdp_something_new", "an unknown fsdp_config key is listed")
for _, t in ipairs({"MULTI_GPU", "MULTI_CPU"}) do
  local cm = zorch.Engine(yaml("distributed_type: " .. t .. "\nmixed_precision: 'no'\n")):config()
  tap.ok(cm.zero_stage == 0 and cm.precision == "fp32", t .. " is stage 0 data parallel")
end
tap.raises("a bad sharding strategy is named", function() zorch.Engine(fsdp("  fsdp_sharding_strategy: HALF_SHARD\n")) end,
           "fsdp_sharding_strategy", "HALF_SHARD")
tap.raises("a strategy number out of range is named", function() zorch.Engine(fsdp("  fsdp_sharding_strategy: 7\n")) end,
           "fsdp_sharding_strategy 7")
local e2 = zorch.Engine(yaml("distributed_type: MULTI_GPU\n", 2))
tap.ok(table.concat(e2.unimplemented, ",") == "num_processes", "a num_processes other than the world is noted")
tap.raises("other distributed types are refused", function() zorch.Engine(yaml("distributed_type: TPU\n")) end,
           "distributed_type is \"TPU\"", "FSDP")

-- training on 2 ranks: each file against the flags that mean the same
if tap.has_mpi(bin) then
  local dir = tap.tmpdir()
  local job = "../models/simple_net.lua --epochs 2 --samples 512 --save " .. dir .. "/m.safetensors"
  local function losses(out) local t = {} for l in out:gmatch("Epoch %d+ loss: ([%d.]+)") do t[#t + 1] = l end return table.concat(t, " ") end
  local files = {
    {yaml("distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: FULL_SHARD\nmixed_precision: bf16\n", 2),
     "--zero-stage 3 --precision bf16 --clip 0", "FSDP FULL_SHARD bf16"},
    {yaml("distributed_type: MULTI_GPU\nmixed_precision: 'no'\n", 2), "--zero-stage 0 --clip 0", "MULTI_GPU"},
  }
  for _, f in ipairs(files) do
    local a, oka = tap.run(("OMP_NUM_THREADS=1 %s launch -n 2 --config %s %s"):format(bin, f[1], job))
    local b, okb = tap.run(("OMP_NUM_THREADS=1 %s launch -n 2 %s %s"):format(bin, job, f[2]))
    tap.ok(oka and okb and losses(a) ~= "" and losses(a) == losses(b),
           ("%s trains as %s (%s | %s)"):format(f[3], f[2], losses(a), losses(b)) .. (oka and "" or ": " .. a))
  end
  local three, ok3 = tap.run(("%s launch -n 3 --config %s %s --epochs 1"):format(bin, files[2][1], job))
  tap.ok(ok3 and three:find("num_processes", 1, true), "a job of 3 ranks runs a file for 2 and says so: " .. three)
  os.execute("rm -rf " .. dir)
end
tap.done()
