-- DeepSpeed JSON configurations for zorch.Engine. zorch._from_deepspeed(path,
-- world_size) returns the Engine table it means and the keys zorch does not
-- implement (reported together in one warning). Invalid values are errors that
-- name the key.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local readable = zorch._require("zorch.util").readable

local function bad(key, want, got)
  if got == "auto" then
    error(("Engine: DeepSpeed config key '%s' is \"auto\", which Hugging Face Accelerate or Transformers fill in " ..
      "before DeepSpeed reads the file; give zorch %s"):format(key, want), 0)
  end
  error(("Engine: DeepSpeed config key '%s' must be %s, got %s"):format(key, want, readable(got)), 0)
end

-- The problems of the file being read: each check that fails is recorded here by
-- try() and reading goes on, so one message can list them all.
local problems
local function try(f, ...)
  local ok, err = pcall(f, ...)
  if ok then return err end
  err = tostring(err):gsub("^Engine: ", ""):gsub("^DeepSpeed config key '([^']*)'", "%1")
  if problems then problems[#problems + 1] = err else error(err, 0) end
end

local function posint(key, v)
  if v ~= nil and (math.type(v) ~= "integer" or v < 1) then bad(key, "a positive integer", v) end
  return v
end

local function number(key, v, lo, hi)
  if type(v) ~= "number" or v ~= v or v - v ~= 0 or v < lo or (hi and v > hi) then
    bad(key, hi and ("a number from %g to %g"):format(lo, hi) or ("a number >= %g"):format(lo), v)
  end
  return v
end

local function integer(key, v, lo)
  if math.type(v) ~= "integer" or v < lo then bad(key, ("an integer >= %d"):format(lo), v) end
  return v
end

-- Booleans as DeepSpeed reads them (its config classes are pydantic models, whose
-- booleans also take 0 and 1 and these strings, in any case): anything else is
-- an error, never "true because it is not false".
local BOOL_WORDS = {["true"] = true, ["false"] = false, ["1"] = true, ["0"] = false, yes = true, no = false,
                    on = true, off = false, t = true, f = false, y = true, n = false}
local function boolean(key, v)
  if type(v) == "boolean" then return v end
  if v == 0 or v == 1 then return v == 1 end
  if type(v) == "string" and BOOL_WORDS[v:lower()] ~= nil then return BOOL_WORDS[v:lower()] end
  bad(key, "true or false", v)
end

local function object(key, v)
  if type(v) ~= "table" or (next(v) ~= nil and #v > 0) then bad(key, "an object", v) end
  return v
end

-- Keys zorch reads but does not implement, in two groups for the one warning:
-- those that change speed, memory or logging but not the numbers a run
-- computes ("no effect on results"), and those that change what is trained
-- ("changes training"). Others are "not recognised". A key set to false, an
-- empty object or one whose "enabled" is false is off, and not listed.
local function set(list) local t = {} for _, k in ipairs(list) do t[k] = true end return t end
local NO_EFFECT = set {
  -- speed and memory: communication, buckets, prefetching, placement, compilation
  "zero_optimization.contiguous_gradients", "zero_optimization.allgather_partitions",
  "zero_optimization.reduce_scatter", "zero_optimization.allgather_bucket_size", "zero_optimization.round_robin_gradients",
  "zero_optimization.stage3_param_persistence_threshold", "zero_optimization.param_persistence_threshold",
  "zero_optimization.stage3_model_persistence_threshold", "zero_optimization.model_persistence_threshold",

  "zero_optimization.sub_group_size", "zero_optimization.elastic_checkpoint", "zero_optimization.load_from_fp32_weights",
  "zero_optimization.ignore_unused_parameters", "zero_optimization.legacy_stage1", "zero_optimization.memory_efficient_linear",
  "zero_optimization.zero_hpz_partition_size", "zero_optimization.mics_shard_size",
  "zero_optimization.mics_hierarchical_params_gather", "zero_optimization.use_multi_rank_bucket_allreduce",
  "zero_optimization.stage3_module_granularity_threshold", "zero_optimization.module_granularity_threshold",
  "zero_optimization.use_all_reduce_for_fetch_params", "zero_optimization.log_trace_cache_warnings",
  "zero_optimization.offload_optimizer", "zero_optimization.offload_param", "zero_optimization.cpu_offload",
  "zero_optimization.cpu_offload_params", "zero_optimization.cpu_offload_use_pin_memory",
  "zero_optimization.offload_optimizer.pin_memory", "zero_optimization.offload_optimizer.fast_init",
  "zero_optimization.offload_optimizer.pipeline_read", "zero_optimization.offload_optimizer.pipeline_write",
  "zero_optimization.offload_optimizer.pipeline", "zero_optimization.offload_optimizer.ratio",
  "zero_optimization.offload_optimizer.buffer_size", "zero_optimization.offload_optimizer.max_in_cpu",
  "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.max_in_cpu",
  "prescale_gradients", "gradient_predivide_factor", "communication_data_type", "seq_parallel_communication_data_type",
  "disable_allgather", "sparse_gradients", "compile", "tensor_parallel", "pipeline", "aio",
  -- activation checkpointing: the model calls engine:checkpoint; these shape only
  -- DeepSpeed's buffers (model-parallel partitions, one contiguous block, syncs, timers)
  "activation_checkpointing.partition_activations", "activation_checkpointing.contiguous_memory_optimization",
  "activation_checkpointing.number_checkpoints", "activation_checkpointing.synchronize_checkpoint_boundary",
  "activation_checkpointing.profile",
  "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "hybrid_engine", "checkpoint", "nebula",
  "autotuning", "cuda_visible_devices", "torch_autocast",
  -- logging and monitoring
  "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comet", "monitor_config", "comms_logger", "comms_config",
  "memory_breakdown", "dump_state", "_comment",
  -- bf16: DeepSpeed reads no loss scale for bf16
  "bf16.loss_scale", "bf16.initial_scale_power", "bf16.loss_scale_window", "bf16.hysteresis", "bf16.min_loss_scale",
  "bf16.consecutive_hysteresis", "bf16.immediate_grad_update", "bf16.check_grad_overflow",
}
local CHANGES_TRAINING = set {
  "compression_training", "curriculum_learning", "data_efficiency", "progressive_layer_drop", "quantize_training",
  "sparse_attention", "eigenvalue", "amp", "elasticity", "data_types", "fp16.fp16_master_weights_and_grads",
  "zero_optimization.zero_quantized_weights", "zero_optimization.zero_quantized_gradients",
  "zero_optimization.zero_quantized_nontrainable_weights",
}

-- Off: false, 0, an empty object, {"enabled": false}, an offload to device "none".
local function is_off(v)
  if v == false or v == 0 or (type(v) == "string" and (v:lower() == "false" or v:lower() == "none")) then return true end
  if type(v) ~= "table" then return false end
  if next(v) == nil then return true end
  local en = v.enabled
  if en == false or en == 0 or (type(en) == "string" and (en:lower() == "false" or en:lower() == "0")) then return true end
  return v.device == "none"
end

-- Checks of the values of some listed keys.
local IGNORED = {
  ["zero_optimization.contiguous_gradients"] = boolean,
  ["zero_optimization.allgather_partitions"] = boolean, ["zero_optimization.reduce_scatter"] = boolean,
  ["zero_optimization.allgather_bucket_size"] = function(k, v) number(k, v, 0) end,
  ["zero_optimization.stage3_param_persistence_threshold"] = function(k, v) number(k, v, 0) end,
}

-- Optimizer params zorch's optimizers take, and DeepSpeed's own that change nothing here.
local function betas(key, v)
  if type(v) ~= "table" or #v ~= 2 or type(v[1]) ~= "number" or type(v[2]) ~= "number" or v[1] < 0 or v[1] >= 1
     or v[2] < 0 or v[2] >= 1 then
    bad(key, "two numbers in [0, 1)", v)
  end
  return {v[1], v[2]}
end
local OPT_PARAMS = {
  Adam = {lr = "rate", betas = betas, eps = "nonneg", weight_decay = "nonneg", amsgrad = "bool",
          bias_correction = "bool", adam_w_mode = "bool", torch_adam = "bool"},
  SGD = {lr = "rate", momentum = "nonneg", dampening = "nonneg", weight_decay = "nonneg", nesterov = "bool"},
}
OPT_PARAMS.AdamW = OPT_PARAMS.Adam
OPT_PARAMS.Lamb = {lr = "rate", betas = betas, eps = "nonneg", weight_decay = "nonneg", bias_correction = "bool",
                   max_coeff = "nonneg", min_coeff = "nonneg"}
local OPT_NOTED = {fused = true}

local function check_params(prefix, params, spec, noted, note)
  local out = {}
  for k, v in pairs(params) do try(function()
    local key = prefix .. "." .. tostring(k)
    local kind = spec[k]
    if kind == nil then
      if noted[k] then
        note(key, v)
      elseif k == "max_grad_norm" then
        error(("Engine: DeepSpeed config key '%s' is not an optimizer parameter (DeepSpeed refuses it too); " ..
          "use the top-level gradient_clipping"):format(key), 0)
      else
        local names = {}
        for n in pairs(spec) do names[#names + 1] = n end
        table.sort(names)
        error(("Engine: DeepSpeed config key '%s' is not a parameter zorch knows (allowed: %s)"):format(
          key, table.concat(names, ", ")), 0)
      end
    elseif type(kind) == "function" then out[k] = kind(key, v)
    elseif kind == "rate" or kind == "nonneg" then out[k] = number(key, v, 0)
    elseif kind == "int0" then out[k] = integer(key, v, 0)
    elseif kind == "int1" then out[k] = integer(key, v, 1)
    elseif kind == "unit" then out[k] = number(key, v, 0, 1)
    elseif kind == "bool" then out[k] = boolean(key, v)
    elseif kind == "warmup_type" then
      if v ~= "log" and v ~= "linear" then bad(key, '"log" or "linear"', v) end
      out[k] = v
    end
  end) end
  return out
end

local SCHED_PARAMS = {
  WarmupLR = {warmup_min_lr = "rate", warmup_max_lr = "rate", warmup_num_steps = "int0", warmup_type = "warmup_type"},
  WarmupDecayLR = {warmup_min_lr = "rate", warmup_max_lr = "rate", warmup_num_steps = "int0",
                   warmup_type = "warmup_type", total_num_steps = "int1"},
  WarmupCosineLR = {warmup_min_ratio = "unit", cos_min_ratio = "unit", warmup_num_steps = "int0",
                    warmup_type = "warmup_type", total_num_steps = "int1"},
  OneCycle = {cycle_min_lr = "rate", cycle_max_lr = "rate", decay_lr_rate = "nonneg", cycle_first_step_size = "int1",
              cycle_second_step_size = "int1", cycle_first_stair_count = "int0", cycle_second_stair_count = "int0",
              decay_step_size = "int0", cycle_momentum = "bool", cycle_min_mom = "unit", cycle_max_mom = "unit",
              decay_mom_rate = "nonneg"},
  LRRangeTest = {lr_range_test_min_lr = "rate", lr_range_test_step_size = "int1", lr_range_test_step_rate = "nonneg",
                 lr_range_test_staircase = "bool"},
}
local SCHED_NOTED = {last_batch_iteration = true}

-- The Engine table a DeepSpeed configuration (a decoded JSON object) means, and
-- the keys zorch does not implement.
local function from_table(ds, world)
  local out, unimplemented = {}, {kind = {}}
  local function note(k, v)
    if is_off(v) then return end
    unimplemented[#unimplemented + 1] = k
    unimplemented.kind[k] = NO_EFFECT[k] and "no effect" or CHANGES_TRAINING[k] and "changes training" or "not recognised"
  end
  -- DeepSpeed's older spelling of bf16
  if ds.bfloat16 ~= nil and ds.bf16 == nil then ds.bf16, ds.bfloat16 = ds.bfloat16, nil end
  -- batch sizes: train = micro * accumulation * world; any two give the third.
  -- Checked by division, so no product can overflow.
  try(function()
  local tb = posint("train_batch_size", ds.train_batch_size)
  local mb = posint("train_micro_batch_size_per_gpu", ds.train_micro_batch_size_per_gpu)
  local ga = posint("gradient_accumulation_steps", ds.gradient_accumulation_steps)
  local function divides(d, n) return n % d == 0 end
  if tb and mb and ga then
    if not (divides(world, tb) and divides(mb, tb // world) and tb // world // mb == ga) then
      error(("Engine: train_batch_size %d is not train_micro_batch_size_per_gpu %d x gradient_accumulation_steps %d x %d ranks"):format(
        tb, mb, ga, world), 0)
    end
  elseif tb and mb then
    if not (divides(world, tb) and divides(mb, tb // world)) then
      bad("train_batch_size", ("a multiple of train_micro_batch_size_per_gpu %d x %d ranks"):format(mb, world), tb)
    end
    ga = tb // world // mb
  elseif tb and ga then
    if not (divides(world, tb) and divides(ga, tb // world)) then
      bad("train_batch_size", ("a multiple of gradient_accumulation_steps %d x %d ranks"):format(ga, world), tb)
    end
    mb = tb // world // ga
  elseif tb then
    if not divides(world, tb) then bad("train_batch_size", ("a multiple of the ranks (%d)"):format(world), tb) end
    mb, ga = tb // world, 1
  end
  if mb and ga and (mb + 0.0) * ga * world > 2^53 then
    error(("Engine: train_micro_batch_size_per_gpu %d x gradient_accumulation_steps %d x %d ranks exceeds 2^53 samples"):format(
      mb, ga, world), 0)
  end
  out.gradient_accumulation_steps = ga
  out.train_micro_batch_size = mb
  end)
  if ds.gradient_clipping ~= nil then out.gradient_clipping = try(number, "gradient_clipping", ds.gradient_clipping, 0) end
  if ds.bf16 ~= nil then try(function()
    object("bf16", ds.bf16)
    local on = ds.bf16.enabled ~= nil and boolean("bf16.enabled", ds.bf16.enabled)
    if on then out.precision = "bf16" end
    for k, v in pairs(ds.bf16) do
      if k ~= "enabled" and on then note("bf16." .. tostring(k), v) end
    end
  end) end
  if ds.fp16 ~= nil then try(function()
    -- DeepSpeed's keys and defaults (the Engine's, under the same names)
    object("fp16", ds.fp16)
    local fp16 = ds.fp16.enabled ~= nil and boolean("fp16.enabled", ds.fp16.enabled)
    if fp16 and out.precision == "bf16" then error("Engine: fp16 and bf16 are both enabled; enable one", 0) end
    for k, v in pairs(ds.fp16) do
      local key = "fp16." .. tostring(k)
      if k == "enabled" then -- (read above)
      elseif k == "loss_scale" or k == "min_loss_scale" then
        if fp16 then out[k] = number(key, v, 0) end
      elseif k == "initial_scale_power" or k == "loss_scale_window" or k == "hysteresis" then
        if fp16 then out[k] = integer(key, v, k == "initial_scale_power" and 0 or 1) end
      elseif k == "consecutive_hysteresis" or k == "auto_cast" then
        if fp16 then out[k] = boolean(key, v) end
      elseif fp16 then
        note(key, v)
      end
    end
    if fp16 then out.precision = "fp16" end
  end) end
  local zo = ds.zero_optimization
  -- DeepSpeed's older boolean form (its tutorial's): true is stage 1, false stage 0
  if type(zo) == "boolean" then zo = {stage = zo and 1 or 0} end
  if zo ~= nil then try(function()
    object("zero_optimization", zo)
    for k, v in pairs(zo) do try(function()
      local key = "zero_optimization." .. tostring(k)
      if k == "stage" then
        if v ~= 0 and v ~= 1 and v ~= 2 and v ~= 3 then bad(key, "0, 1, 2 or 3", v) end
        out.zero_stage = math.tointeger(v)
      elseif k == "overlap_comm" then
        out.overlap_comm = boolean(key, v)
      elseif k == "stage3_max_reuse_distance" or k == "max_reuse_distance" then
        if type(v) ~= "number" or v < 0 or v > 2^53 then bad(key, "a number of parameters >= 0", v) end
        out.max_reuse_distance = math.floor(v)
      elseif k == "stage3_prefetch_bucket_size" or k == "prefetch_bucket_size" then
        if type(v) ~= "number" or v < 0 or v > 2^53 then bad(key, "a number of parameters >= 0", v) end
        out.prefetch_bucket_size = math.floor(v)
      elseif k == "stage3_max_live_parameters" or k == "max_live_parameters" then
        if type(v) ~= "number" or v < 0 or v > 2^53 then bad(key, "a number of parameters >= 0", v) end
        out.max_live_parameters = math.floor(v)
      elseif k == "reduce_bucket_size" then
        if type(v) ~= "number" or v < 1 or v > 2^53 or v ~= math.floor(v) then bad(key, "a whole number from 1 to 2^53", v) end
        out.reduce_bucket_size = math.tointeger(v)
      elseif k == "offload_optimizer" or k == "offload_param" then
        object(key, v)
        if v.device ~= nil and type(v.device) ~= "string" then bad(key .. ".device", '"none", "cpu" or "nvme"', v.device) end
        if v.device ~= nil and v.device ~= "none" and v.device ~= "cpu" and v.device ~= "nvme" then
          bad(key .. ".device", '"none", "cpu" or "nvme"', v.device)
        end
        if v.device == "cpu" or v.device == "nvme" then
          -- honoured: the Engine's offload_optimizer and offload_param (lua/offload.lua;
          -- offload_param "cpu" is where a CPU rank's shard already is); the buffers'
          -- placement, pinning and pipelining knobs are listed
          local oo = {device = v.device}
          for kk, vv in pairs(v) do
            local sub = key .. "." .. tostring(kk)
            if kk == "device" then -- (read above)
            elseif kk == "nvme_path" then
              if v.device == "nvme" and (type(vv) ~= "string" or vv == "") then bad(sub, "a folder name", vv) end
              oo.nvme_path = vv
            elseif kk == "buffer_count" then
              oo.buffer_count = integer(sub, vv, 2)
              if oo.buffer_count > 32 then bad(sub, "an integer from 2 to 32", vv) end
            elseif kk == "buffer_size" and k == "offload_param" then -- (often written 1e8)
              local n = type(vv) == "number" and vv >= 1 and vv <= 2^53 and math.tointeger(vv) or nil
              if not n then bad(sub, "a whole number of elements from 1 to 2^53", vv) end
              oo.buffer_size = n
            elseif kk == "pin_memory" and k == "offload_optimizer" then -- (GPU ranks: the host copy page-locked)
              if type(vv) ~= "boolean" then bad(sub, "true or false", vv) end
              oo.pin_memory = vv
              note(sub, vv) -- (and listed: it changes no result, and nothing on a CPU rank)
            else
              note(sub, vv)
            end
          end
          if v.device == "nvme" and oo.nvme_path == nil then bad(key .. ".nvme_path", "a folder name (device nvme)", nil) end
          out[k] = oo
        elseif v.device and v.device ~= "none" then
          note(key, v)
        end
      elseif k == "cpu_offload" then
        -- the older spelling of offload_optimizer {device = "cpu"}
        if boolean(key, v) and not (type(zo.offload_optimizer) == "table" and zo.offload_optimizer.device) then
          out.offload_optimizer = out.offload_optimizer or {device = "cpu"}
        end
      elseif k == "stage3_gather_16bit_weights_on_model_save" or k == "stage3_gather_fp16_weights_on_model_save" or
             k == "gather_16bit_weights_on_model_save" then
        -- zorch's saved state dict always holds the full weights (gathered at stage 3),
        -- in the parameters' dtype: what true asks for
        boolean(key, v)
      elseif IGNORED[key] then
        IGNORED[key](key, v)
        note(key, v)
      else
        note(key, v)
      end
    end) end
  end) end
  if ds.optimizer ~= nil then try(function()
    local o = ds.optimizer
    local types = {adam = "Adam", adamw = "AdamW", sgd = "SGD", lamb = "Lamb"}
    object("optimizer", o)
    -- DeepSpeed's 1-bit optimizers compress communication; zorch has none of them.
    local onebit = {onebitadam = "Adam", zerooneadam = "Adam", onebitlamb = "Lamb"}
    if type(o.type) == "string" and onebit[o.type:lower()] then
      error(("Engine: DeepSpeed optimizer '%s' is not implemented; use %s instead"):format(o.type,
        onebit[o.type:lower()]), 0)
    end
    if type(o.type) ~= "string" or not types[o.type:lower()] then bad("optimizer.type", "Adam, AdamW, SGD or Lamb", o.type) end
    local t = types[o.type:lower()]
    local params = o.params == nil and {} or object("optimizer.params", o.params)
    local p = check_params("optimizer.params", params, OPT_PARAMS[t], OPT_NOTED, note)
    if t == "Adam" or t == "AdamW" then
      -- DeepSpeed's FusedAdam: "Adam" decouples weight decay (adam_w_mode) unless
      -- adam_w_mode is false; "AdamW" always does; weight_decay defaults to 0 for both.
      -- torch_adam picks an implementation and changes nothing here.
      if t == "Adam" and p.adam_w_mode ~= false then t = "AdamW" end
      p.adam_w_mode, p.torch_adam = nil, nil
      if p.weight_decay == nil then p.weight_decay = 0 end
    end
    out.optimizer = {type = t, params = p}
    for k, v in pairs(o) do if k ~= "type" and k ~= "params" then note("optimizer." .. tostring(k), v) end end
  end) end
  if ds.scheduler ~= nil then try(function()
    local s = ds.scheduler
    object("scheduler", s)
    if not SCHED_PARAMS[s.type] then
      local names = {}
      for k in pairs(SCHED_PARAMS) do names[#names + 1] = k end
      table.sort(names)
      bad("scheduler.type", "one of " .. table.concat(names, ", "), s.type)
    end
    local params = s.params == nil and {} or object("scheduler.params", s.params)
    out.scheduler = {type = s.type, params = check_params("scheduler.params", params, SCHED_PARAMS[s.type], SCHED_NOTED, note)}
    if (s.type == "WarmupDecayLR" or s.type == "WarmupCosineLR") and params.total_num_steps == nil then
      error(("Engine: DeepSpeed config key 'scheduler.params.total_num_steps' is required by %s"):format(s.type), 0)
    end
    if s.type == "OneCycle" then
      for _, k in ipairs({"cycle_min_lr", "cycle_max_lr"}) do
        if params[k] == nil then
          error(("Engine: DeepSpeed config key 'scheduler.params.%s' is required by OneCycle"):format(k), 0)
        end
      end
    end
    for k, v in pairs(s) do if k ~= "type" and k ~= "params" then note("scheduler." .. tostring(k), v) end end
  end) end
  if ds.steps_per_print ~= nil then out.steps_per_print = try(posint, "steps_per_print", ds.steps_per_print) end
  if ds.wall_clock_breakdown ~= nil then
    out.wall_clock_breakdown = try(boolean, "wall_clock_breakdown", ds.wall_clock_breakdown)
  end
  -- activation_checkpointing: cpu_checkpointing keeps engine:checkpoint's saved
  -- inputs in host memory; the other keys are listed
  if ds.activation_checkpointing ~= nil then try(function()
    object("activation_checkpointing", ds.activation_checkpointing)
    for k, v in pairs(ds.activation_checkpointing) do
      local key = "activation_checkpointing." .. tostring(k)
      if k == "cpu_checkpointing" then out.cpu_checkpointing = boolean(key, v)
      else note(key, v) end
    end
  end) end
  -- zorch's own key: seconds a collective may wait (Engine's comm_timeout; 0: never)
  if ds.comm_timeout ~= nil then out.comm_timeout = try(number, "comm_timeout", ds.comm_timeout, 0) end
  local known = {train_batch_size = 1, train_micro_batch_size_per_gpu = 1, gradient_accumulation_steps = 1,
                 gradient_clipping = 1, bf16 = 1, fp16 = 1, zero_optimization = 1, optimizer = 1, scheduler = 1,
                 steps_per_print = 1, comm_timeout = 1, wall_clock_breakdown = 1, activation_checkpointing = 1}
  for k, v in pairs(ds) do if not known[k] then note(tostring(k), v) end end
  table.sort(unimplemented)
  return out, unimplemented
end

-- The keys zorch does not implement, in the warning's groups (those present):
-- {title = ..., keys = {...}}. A list without kinds is "not recognised".
function zorch._unimplemented_groups(keys)
  local kind = keys.kind or {}
  local order = {{"no effect", "ignored, no effect on results (speed, memory, logging)"},
                 {"changes training", "ignored, which changes training (zorch trains without them)"},
                 {"not recognised", "not recognised, ignored"}}
  local groups = {}
  for _, o in ipairs(order) do
    local g = {title = o[2], kind = o[1], keys = {}}
    for _, k in ipairs(keys) do if (kind[k] or "not recognised") == o[1] then g.keys[#g.keys + 1] = k end end
    if #g.keys > 0 then groups[#groups + 1] = g end
  end
  return groups
end

-- A user's mistake in the file, which every rank makes alike.
local function mistake(message)
  local e = zorch.flags.usage_error(message)
  e.every_rank = true
  return e
end

local function decode(text, what)
  local ok, cfg = pcall(zorch.json.decode, text, true)
  if not ok then
    error(mistake(("%s is not a JSON object: %s"):format(what, tostring(cfg):gsub("^json: ", ""))))
  end
  return cfg
end

-- Reads a decoded file: every problem it has, in one usage error (a user's
-- mistake: its message, no traceback, exit status 2) that names the file.
local function read(ds, world, what)
  problems = {}
  local ok, out, unimplemented = pcall(from_table, ds, world)
  local found = problems
  problems = nil
  if not ok then error(out, 0) end
  if #found == 1 then error(mistake(what .. ": " .. found[1])) end
  if #found > 1 then
    table.sort(found)
    error(mistake(("%s: %d problems:\n  %s"):format(what, #found, table.concat(found, "\n  "))))
  end
  return out, unimplemented
end

-- Accelerate's `accelerate config` YAML files: the flat subset they are written
-- in (key: value lines, nested by indentation, two levels; scalars, quoted
-- strings, {} and [] as empty), enough for their deepspeed_config section.
local function yaml_scalar(v)
  if v:match('^".*"$') or v:match("^'.*'$") then return v:sub(2, -2) end
  if v == "true" or v == "True" then return true end
  if v == "false" or v == "False" then return false end
  if v == "null" or v == "~" or v == "" then return nil end
  if v == "{}" then return {} end
  if v == "[]" then return {} end
  local n = tonumber(v)
  if n and v:match("^[-+]?[%d.]+[eE]?[-+]?%d*$") then return math.tointeger(n) or n end
  return v
end

local function read_yaml(text, what)
  local root, parent, parent_indent = {}, nil, nil
  local n = 0
  for line in (text .. "\n"):gmatch("([^\n]*)\n") do
    n = n + 1
    line = line:gsub("\r$", "")
    -- a comment: # at the start or after a space, outside quotes
    local code = line:match("^(.-)%s+#.*$") or line
    if code:match("^%s*#") then code = "" end
    if code:match("%S") then
      local indent, key, value = code:match("^(%s*)([%w_%-%.]+):%s*(.-)%s*$")
      if not key then
        if code:match("^%s*%-") then -- a list item: kept as text, accelerate's launcher settings only
          goto continue
        end
        error(mistake(("%s:%d: expected `key: value`, got %q"):format(what, n, code)))
      end
      if #indent == 0 then
        parent = nil
        if value == "" then root[key] = {}; parent, parent_indent = root[key], nil
        else root[key] = yaml_scalar(value) end
      else
        if not parent then error(mistake(("%s:%d: %q is indented under no section"):format(what, n, key))) end
        parent_indent = parent_indent or #indent
        if #indent ~= parent_indent then
          error(mistake(("%s:%d: %q: only two levels of indentation are read"):format(what, n, key)))
        end
        parent[key] = yaml_scalar(value)
      end
    end
    ::continue::
  end
  return root
end

-- The DeepSpeed table an Accelerate YAML file means (Accelerate's DeepSpeedPlugin):
-- its deepspeed_config_file, or one made from zero_stage, gradient_accumulation_steps,
-- gradient_clipping, offload_*_device, zero3_save_16bit_model and mixed_precision,
-- with the micro and train batch sizes "auto" (from the script's loader).
local function from_accelerate(y, path, world)
  local dc = y.deepspeed_config
  if y.distributed_type ~= "DEEPSPEED" or type(dc) ~= "table" then
    error(mistake(("%s: distributed_type is %s, not DEEPSPEED: not a DeepSpeed configuration"):format(
      path, readable(y.distributed_type))))
  end
  local mp = y.mixed_precision
  if mp ~= nil and mp ~= "no" and mp ~= "fp16" and mp ~= "bf16" then
    error(mistake(("%s: mixed_precision must be no, fp16 or bf16, got %s"):format(path, readable(mp))))
  end
  local notes = {}
  if math.type(y.num_processes) == "integer" and y.num_processes * (math.type(y.num_machines) == "integer" and
     y.num_machines or 1) ~= world then
    notes[#notes + 1] = "num_processes"
  end
  if dc.deepspeed_config_file then
    local file = dc.deepspeed_config_file
    if type(file) ~= "string" then
      error(mistake(("%s: deepspeed_config.deepspeed_config_file must be a path, got %s"):format(path, readable(file))))
    end
    -- as Accelerate: relative to the working folder; else beside the YAML file
    local f = io.open(file, "rb")
    if not f and not file:match("^/") then
      local beside = (path:match("^(.*/)") or "") .. file
      f = io.open(beside, "rb")
      if f then file = beside end
    end
    if not f then
      error(mistake(("%s: deepspeed_config.deepspeed_config_file %s cannot be read"):format(path, readable(file))))
    end
    local ds = decode(f:read("a"), file)
    f:close()
    -- mixed_precision fills fp16/bf16 "auto" (Accelerate requires them auto when both are given)
    for _, k in ipairs({"fp16", "bf16"}) do
      if type(ds[k]) == "table" and ds[k].enabled == "auto" and mp then ds[k].enabled = (mp == k) end
    end
    return ds, file, notes
  end
  -- Accelerate reads these with int() and float(): a quoted '3' is 3
  local function num(v) local n = type(v) == "string" and tonumber(v) if n then return math.tointeger(n) or n end return v end
  dc.zero_stage, dc.gradient_accumulation_steps = num(dc.zero_stage), num(dc.gradient_accumulation_steps)
  if dc.gradient_clipping ~= "none" then dc.gradient_clipping = num(dc.gradient_clipping) end
  local ds = {train_micro_batch_size_per_gpu = "auto", train_batch_size = "auto",
              gradient_accumulation_steps = dc.gradient_accumulation_steps or 1}
  local zo = {stage = dc.zero_stage}
  ds.zero_optimization = zo
  if dc.gradient_clipping ~= nil and dc.gradient_clipping ~= "none" then ds.gradient_clipping = dc.gradient_clipping end
  if dc.offload_optimizer_device ~= nil then zo.offload_optimizer = {device = dc.offload_optimizer_device} end
  if dc.offload_param_device ~= nil then zo.offload_param = {device = dc.offload_param_device} end
  if dc.zero3_save_16bit_model ~= nil then zo.stage3_gather_16bit_weights_on_model_save = dc.zero3_save_16bit_model end
  if mp == "fp16" then ds.fp16 = {enabled = true} elseif mp == "bf16" then ds.bf16 = {enabled = true} end
  local read_keys = {zero_stage = 1, gradient_accumulation_steps = 1, gradient_clipping = 1, offload_optimizer_device = 1,
                     offload_param_device = 1, zero3_save_16bit_model = 1,
                     -- the launcher's and the model loader's, not the training's
                     deepspeed_multinode_launcher = 1, deepspeed_hostfile = 1, deepspeed_exclusion_filter = 1,
                     deepspeed_inclusion_filter = 1, zero3_init_flag = 1}
  for k, v in pairs(dc) do
    if not read_keys[k] then notes[#notes + 1] = "deepspeed_config." .. tostring(k) end
  end
  return ds, path, notes
end

function zorch._from_deepspeed(path, world)
  local f, err = io.open(path, "rb")
  if not f then error(mistake("cannot read DeepSpeed config: " .. tostring(err))) end
  local text = f:read("a")
  f:close()
  local ds, notes
  if path:match("%.ya?ml$") then
    ds, path, notes = from_accelerate(read_yaml(text, path), path, world)
  else
    ds = decode(text, path)
  end
  local autos = zorch._ds_take_autos(ds) -- resolved at prepare (lua/dsauto.lua)
  local out, unimplemented = read(ds, world, path)
  for _, k in ipairs(notes or {}) do
    unimplemented[#unimplemented + 1] = k
    unimplemented.kind[k] = k == "num_processes" and "no effect" or "not recognised"
  end
  table.sort(unimplemented)
  return out, unimplemented, autos
end

-- zorch._read_ds_config_text(text [, world_size]) -> true, engine table,
-- unimplemented keys | false, message. Never raises: parses text as a DeepSpeed
-- JSON configuration (strict JSON) and checks every value, as zorch.Engine(path)
-- does, for world_size ranks (default 1). For fuzz drivers and tools.
function zorch._read_ds_config_text(text, world)
  if type(text) ~= "string" then return false, "DeepSpeed config: expected a string" end
  local ok, cfg, unimplemented = pcall(function() return read(decode(text, "the DeepSpeed config"), world or 1, "the DeepSpeed config") end)
  if not ok then return false, tostring(cfg) end
  return true, cfg, unimplemented
end

-- DeepSpeed's learning-rate schedules (their documented formulas), stepping the
-- optimizer's lr after every optimizer step. Warm-up is "log" unless
-- warmup_type is "linear".
local function warm(p, step)
  local n = math.max(2, p.warmup_num_steps or 1000) -- DeepSpeed: max(2, warmup_num_steps)
  if step >= n then return 1 end
  if (p.warmup_type or "log") == "linear" then return step / n end
  return math.log(step + 1) / math.log(n)
end

function zorch._make_scheduler(spec, opt)
  local p, base = spec.params, opt.lr
  local s = {optimizer = opt, last_step = 0}
  -- each parameter group's lr; WarmupCosineLR scales each group's own initial lr
  local groups = opt.param_groups
  local bases = {}
  for i, g in ipairs(groups or {}) do bases[i] = g.lr end
  if spec.type == "WarmupLR" then
    local lo, hi = p.warmup_min_lr or 0, p.warmup_max_lr or 0.001
    function s.lr_at(n) return n < 0 and lo or lo + (hi - lo) * warm(p, n) end
  elseif spec.type == "WarmupDecayLR" then
    local lo, hi, total = p.warmup_min_lr or 0, p.warmup_max_lr or 0.001, p.total_num_steps
    if math.type(total) ~= "integer" then error("Engine: scheduler WarmupDecayLR needs params.total_num_steps", 0) end
    local n = math.max(2, p.warmup_num_steps or 1000)
    function s.lr_at(k)
      if k < 0 then return lo end
      if k < n then return lo + (hi - lo) * warm(p, k) end
      return lo + (hi - lo) * math.max(0, (total - k) / math.max(1, total - n))
    end
  elseif spec.type == "LRRangeTest" then
    -- DeepSpeed's LRRangeTest: lr = min_lr * (1 + step_rate * interval), interval =
    -- (iteration + 1) / step_size, floored when lr_range_test_staircase
    local lo, size, rate = p.lr_range_test_min_lr or 0.001, p.lr_range_test_step_size or 2000,
                           p.lr_range_test_step_rate or 1.0
    function s.lr_at(k)
      local interval = (k + 1) / size
      if p.lr_range_test_staircase then interval = math.floor(interval) end
      return lo * (1 + rate * interval)
    end
  elseif spec.type == "OneCycle" then
    -- DeepSpeed's OneCycle: a triangle from cycle_min_lr up to cycle_max_lr over
    -- cycle_first_step_size steps and back over cycle_second_step_size, then the lr
    -- decays as min_lr / (1 + decay_lr_rate * k / decay_step_size); momentum runs
    -- the other way (max down to min and back), then grows by (1 + decay_mom_rate *
    -- k / decay_step_size). The stair counts are accepted and, as in DeepSpeed, unused.
    local first = p.cycle_first_step_size or 2000
    local total = first + (p.cycle_second_step_size or first)
    local ratio = first / total
    local lo, hi, lrate = p.cycle_min_lr, p.cycle_max_lr, p.decay_lr_rate or 0
    local mlo, mhi, mrate = p.cycle_min_mom or 0.8, p.cycle_max_mom or 0.9, p.decay_mom_rate or 0
    local dsize = p.decay_step_size or 0
    local function scale(k) -- _get_scale_factor
      local it = k + 1
      local x = 1 + it / total - math.floor(1 + it / total)
      if x <= ratio then return x / ratio end
      return (x - 1) / (ratio - 1)
    end
    function s.lr_at(k)
      if k < total then return lo + (hi - lo) * scale(k) end
      if dsize == 0 or lrate == 0 then return lo end
      return lo / (1 + lrate * (k - total + 1) / dsize)
    end
    function s.mom_at(k)
      if k < 0 then return mlo end -- set at construction
      if k < total then return mhi - (mhi - mlo) * scale(k) end
      if dsize == 0 or mrate == 0 then return mhi end
      return mhi * (1 + mrate * (k - total + 1) / dsize)
    end
    if p.cycle_momentum ~= false then
      -- Adam's betas[1] (its second beta is kept), or SGD's momentum
      local d = opt.defaults
      local all = {d} -- the defaults and every group
      for _, g in ipairs(groups or {}) do all[#all + 1] = g end
      if d and type(d.betas) == "table" then
        function s.set_mom(m) for _, g in ipairs(all) do g.betas = {m, g.betas[2]} end end
      elseif d and d.momentum ~= nil then
        function s.set_mom(m) for _, g in ipairs(all) do g.momentum = m end end
      end
    end
  else -- WarmupCosineLR: ratios of the optimizer's lr
    local total = p.total_num_steps
    if math.type(total) ~= "integer" then error("Engine: scheduler WarmupCosineLR needs params.total_num_steps", 0) end
    local n, wmin, cmin = math.max(2, p.warmup_num_steps or 1000), p.warmup_min_ratio or 0, p.cos_min_ratio or 0.0001
    function s.lr_at(k, b)
      b = b or base
      if k < 0 then return 0 end
      if k < n then return b * (wmin + (1 - wmin) * warm(p, k)) end
      -- DeepSpeed's get_lr_ratio: (k - n + 1) / (total - n), not clamped at 1
      local t = (k - n + 1) / (total - n)
      return b * math.max(0, cmin + (1 - cmin) * (1 + math.cos(math.pi * t)) / 2)
    end
    s.per_group = true
  end
  -- DeepSpeed's count: last_batch_iteration starts at -1 (lr_at(-1) at construction),
  -- so after k steps the lr is lr_at(k - 1).
  -- every group's lr at k: the same for all, or (per_group) from each group's own
  function s.set_lr(k)
    if s.per_group and groups then
      for i, g in ipairs(groups) do g.lr = s.lr_at(k, bases[i]) end
    else
      opt.lr = s.lr_at(k)
    end
  end
  function s.step()
    s.last_step = s.last_step + 1
    s.set_lr(s.last_step - 1)
    if s.set_mom then s.set_mom(s.mom_at(s.last_step - 1)) end
  end
  s.set_lr(-1)
  if s.set_mom then s.set_mom(s.mom_at(-1)) end
  return s
end

return nil
