-- Accelerate YAML files without DeepSpeed: distributed_type FSDP, MULTI_GPU or
-- MULTI_CPU, turned into the DeepSpeed table that means the same training.
-- FSDP's sharding strategies are ZeRO stages: FULL_SHARD shards parameters,
-- gradients and optimizer state (3), SHARD_GRAD_OP gradients and optimizer
-- state (2), NO_SHARD nothing (0). The HYBRID strategies shard within a node
-- and replicate across nodes; zorch shards across every rank instead (the
-- same stage, less memory a rank, more traffic between nodes).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local readable = zorch._require("zorch.util").readable

local STAGE = {FULL_SHARD = 3, SHARD_GRAD_OP = 2, NO_SHARD = 0, HYBRID_SHARD = 3, HYBRID_SHARD_ZERO2 = 2}
-- older Accelerate writes torch's ShardingStrategy numbers
local BY_NUMBER = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2"}
-- fsdp_config keys of the model's wrapping and state dicts: no effect on what zorch trains
local NO_EFFECT = {fsdp_auto_wrap_policy = 1, fsdp_backward_prefetch = 1, fsdp_backward_prefetch_policy = 1,
                   fsdp_forward_prefetch = 1, fsdp_state_dict_type = 1, fsdp_transformer_layer_cls_to_wrap = 1,
                   fsdp_use_orig_params = 1, fsdp_cpu_ram_efficient_loading = 1, fsdp_sync_module_states = 1,
                   fsdp_min_num_params = 1, fsdp_version = 1}
local READ = {fsdp_sharding_strategy = 1, fsdp_reshard_after_forward = 1, fsdp_offload_params = 1}

local function stage_of(fc, path, fail)
  local s = fc.fsdp_sharding_strategy
  if type(s) == "string" and tonumber(s) then s = tonumber(s) end
  if math.type(s) == "integer" then
    if not BY_NUMBER[s] then fail(("%s: fsdp_config.fsdp_sharding_strategy %d is not 1-5"):format(path, s)) end
    s = BY_NUMBER[s]
  end
  if s == nil then
    -- FSDP2 files say it with reshard_after_forward (true: FULL_SHARD), which is the default
    local r = fc.fsdp_reshard_after_forward
    if r ~= nil and type(r) ~= "boolean" then
      fail(("%s: fsdp_config.fsdp_reshard_after_forward must be true or false, got %s"):format(path, readable(r)))
    end
    return r == false and 2 or 3
  end
  local stage = STAGE[s]
  if not stage then
    fail(("%s: fsdp_config.fsdp_sharding_strategy must be FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, " ..
      "HYBRID_SHARD_ZERO2 or 1-5, got %s"):format(path, readable(s)))
  end
  return stage
end

-- The DeepSpeed table, and the keys read but not used (as "deepspeed_config.x"
-- notes are for DeepSpeed files). fail(message) raises the usage error.
return function(y, path, fail)
  local t = y.distributed_type
  local ds = {train_micro_batch_size_per_gpu = "auto", train_batch_size = "auto", gradient_accumulation_steps = 1,
              zero_optimization = {stage = 0}}
  local notes = {}
  if t == "FSDP" then
    local fc = y.fsdp_config
    if fc == nil then fc = {} end
    if type(fc) ~= "table" then fail(("%s: fsdp_config must be a section, got %s"):format(path, readable(fc))) end
    ds.zero_optimization.stage = stage_of(fc, path, fail)
    local off = fc.fsdp_offload_params
    if off ~= nil and type(off) ~= "boolean" then
      fail(("%s: fsdp_config.fsdp_offload_params must be true or false, got %s"):format(path, readable(off)))
    end
    if off then -- FSDP's CPU offload moves the parameters and the optimizer's step there
      ds.zero_optimization.offload_param = {device = "cpu"}
      ds.zero_optimization.offload_optimizer = {device = "cpu"}
    end
    for k in pairs(fc) do
      if not READ[k] and not NO_EFFECT[k] then notes[#notes + 1] = "fsdp_config." .. tostring(k) end
    end
  elseif t ~= "MULTI_GPU" and t ~= "MULTI_CPU" then
    fail(("%s: distributed_type is %s: zorch reads DEEPSPEED, FSDP, MULTI_GPU and MULTI_CPU files"):format(
      path, readable(t)))
  end
  local mp = y.mixed_precision
  if mp == "fp16" then ds.fp16 = {enabled = true} elseif mp == "bf16" then ds.bf16 = {enabled = true} end
  return ds, notes
end
