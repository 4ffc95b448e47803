-- The one schema of zorch.Engine's options and of the DeepSpeed keys it reads.
-- One row per key: the Engine's name (none for a DeepSpeed key without one),
-- its DeepSpeed spellings (key paths; the first is the one written), Accelerate's
-- name, the kind and range, the default, the C field (include/zorch_zero.h's
-- zorch_zero_options: c = {field, type}), the status and one line of doc.
-- Derived from it: the Engine's defaults and checks (engine.lua), the reading
-- of DeepSpeed and Accelerate files and the warning's groups (dsconfig.lua),
-- the X-macro list of the C options (include/zorch_zero_options.h) and the
-- table in docs/config.md (both by scripts/gen_options.lua).
-- Plain data, loadable by lua5.4 alone (the generator runs without zorch).
--
-- kind: "int", "number", "bool", "enum" (values), "table" (check, want), or
-- "any" (an ignored key whose value is not checked). min/max bound int and
-- number; above: a number strictly greater. want: the check's words when they
-- are not those the kind and range make. ds_read: how a DeepSpeed value is read
-- when not by the kind ("count": a number of elements >= 0, floored; "whole": a
-- whole number 1..2^53; "posint": an integer >= 1). status: "implemented",
-- "no effect" (speed, memory, logging), "changes training" (ignored, zorch
-- trains without it) or "removed" (DeepSpeed refuses the key: so is a file
-- naming it). ds_default: the value a DeepSpeed file without the key means,
-- where DeepSpeed's default is not the Engine's. structural: read by a rule of
-- dsconfig.lua's from_table, not by its row (batch sizes, precision, offload, optimizer, scheduler).

local S = {}

-- The DeepSpeed release whose reading of a config zorch follows (defaults and
-- schedule shapes; scripts/ds_compare.py checks the corpus against it).
S.deepspeed_version = "0.19.8"

S.optimizer_types = {"Adam", "AdamW", "SGD", "Lamb", "OneBitAdam", "ZeroOneAdam", "OneBitLamb"}
S.scheduler_types = {"LRRangeTest", "OneCycle", "WarmupCosineLR", "WarmupDecayLR", "WarmupLR"}

local function is_group(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "zorch.Group" or false
end
local function monitor_ok(v)
  return v == false or (type(v) == "table" and type(v.output_path) == "string" and type(v.job_name) == "string"
                        and v.job_name ~= "")
end
local function one_of(v, list) for _, x in ipairs(list) do if v == x then return true end end return false end
local function offload_ok(v, param)
  if v == false then return true end
  if type(v) ~= "table" or (v.device ~= "cpu" and v.device ~= "nvme" and v.device ~= "none") then return false end
  if v.device == "nvme" and (type(v.nvme_path) ~= "string" or v.nvme_path == "") then return false end
  if v.buffer_count ~= nil and not (math.type(v.buffer_count) == "integer" and v.buffer_count >= 2 and v.buffer_count <= 32) then return false end
  if v.pin_memory ~= nil and type(v.pin_memory) ~= "boolean" then return false end
  if not param then return v.chunk == nil or (math.type(v.chunk) == "integer" and v.chunk >= 1) end
  if v.buffer_size ~= nil and not (math.type(v.buffer_size) == "integer" and v.buffer_size >= 1) then return false end
  return v.max_in_cpu == nil or type(v.max_in_cpu) == "number"
end

-- The Engine's options, in the order of the docs' table.
S.rows = {
  {name = "zero_stage", ds = {"zero_optimization.stage"}, accelerate = "zero_stage", kind = "enum", values = {0, 1, 2, 3},
   default = 0, c = {field = "stage", type = "int"}, doc = "0-3: what is partitioned across ranks (`docs/distributed.md`)"},
  {name = "gradient_clipping", ds = {"gradient_clipping"}, accelerate = "gradient_clipping", kind = "number", min = 0,
   want = "a number >= 0 (0 turns it off)", default = 0, ds_default = 1.0, c = {field = "clip", type = "double"},
   doc = "max global L2 norm of the gradients; 0 is off. A DeepSpeed file without the key clips at 1.0, as DeepSpeed does"},
  {name = "gradient_accumulation_steps", ds = {"gradient_accumulation_steps"}, accelerate = "gradient_accumulation_steps",
   kind = "int", min = 1, default = 1, structural = true, c = {field = "accumulation", type = "int"},
   doc = "micro-steps per optimizer step (DeepSpeed: any two of the three batch keys give the third)"},
  {name = "train_micro_batch_size", ds = {"train_micro_batch_size_per_gpu"}, kind = "int", min = 1, default = false,
   structural = true, doc = "per-rank batch: `prepare` sets the loader's batch size"},
  {name = "reduce_bucket_size", ds = {"zero_optimization.reduce_bucket_size"}, kind = "int", min = 1, ds_read = "whole",
   default = 500000000, c = {field = "bucket", type = "int64"}, doc = "elements per gradient reduction (stages 2-3)"},
  {name = "overlap_comm", ds = {"zero_optimization.overlap_comm"}, kind = "bool", default = false,
   c = {field = "overlap", type = "bool"},
   doc = "stages 2-3: a full bucket's reduction runs while backward goes on (`docs/distributed.md`, \"Overlap\")"},
  {name = "max_reuse_distance", ds = {"zero_optimization.stage3_max_reuse_distance", "zero_optimization.max_reuse_distance"},
   kind = "int", min = 0, ds_read = "count", default = 0, c = {field = "max_reuse_distance", type = "int64"},
   doc = "stage 3: a module stays gathered from forward to backward when backward needs it within this many elements (0: released at once)"},
  {name = "prefetch_bucket_size",
   ds = {"zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.prefetch_bucket_size"}, kind = "int",
   min = 0, ds_read = "count", default = 50000000, c = {field = "prefetch_bucket_size", type = "int64"},
   doc = "stage 3: elements of the next modules' parameters gathered ahead while the current one computes; 0: none"},
  {name = "max_live_parameters",
   ds = {"zero_optimization.stage3_max_live_parameters", "zero_optimization.max_live_parameters"}, kind = "int",
   min = 0, ds_read = "count", default = 1000000000, c = {field = "max_live_parameters", type = "int64"},
   doc = "stage 3: gathers ahead stop, and the gather pool keeps no more, beyond this many gathered elements"},
  {name = "seed", kind = "int", want = "an integer", default = false, doc = "an integer seeds zorch's default generator"},
  {name = "hidden_size", kind = "int", min = 1, default = false,
   doc = "the model's hidden size for a DeepSpeed file's \"auto\" bucket sizes"},
  {name = "comm_timeout", ds = {"comm_timeout"}, kind = "number", min = 0, want = "a number of seconds >= 0", default = 600,
   doc = "seconds a collective may wait before it times out (zorch's own DeepSpeed key); 0: never"},
  {name = "keep_last", kind = "int", min = 1, default = false,
   doc = "`save_checkpoint` keeps the newest N complete checkpoints of its folder, whatever their tags; false: every one"},
  {name = "optimizer", ds = {"optimizer"}, kind = "table", default = false, structural = true,
   check = function(v) return v == false or (type(v) == "table" and one_of(v.type, S.optimizer_types)) end,
   want = "{type = \"Adam\" | \"AdamW\" | \"SGD\" | \"Lamb\" | \"OneBitAdam\" | \"ZeroOneAdam\" | \"OneBitLamb\", params = {...}}",
   doc = "`{type = \"Adam\" | \"AdamW\" | \"SGD\" | \"Lamb\" | \"OneBitAdam\" | \"ZeroOneAdam\" | \"OneBitLamb\", params = {...}}`: `prepare` makes it when given no optimizer (the 1-bit ones: docs/onebit.md)"},
  {name = "scheduler", ds = {"scheduler"}, kind = "table", default = false, structural = true,
   check = function(v) return v == false or (type(v) == "table" and one_of(v.type, S.scheduler_types)) end,
   want = "{type = \"WarmupLR\" | \"WarmupDecayLR\" | \"WarmupCosineLR\" | \"OneCycle\" | \"LRRangeTest\", params = {...}}",
   doc = "`{type = \"WarmupLR\" | \"WarmupDecayLR\" | \"WarmupCosineLR\" | \"OneCycle\" | \"LRRangeTest\", params}`, stepped after every optimizer step"},
  {name = "steps_per_print", ds = {"steps_per_print"}, kind = "int", min = 1, ds_read = "posint", default = false,
   doc = "rank 0 prints step, loss, lr, gradient norm, samples/s and step time every so many steps"},
  {name = "wall_clock_breakdown", ds = {"wall_clock_breakdown"}, kind = "bool", default = false,
   doc = "with the progress lines (every 10 steps when not given): forward, backward, reduction and step times"},
  {name = "tensorboard", ds = {"tensorboard"}, kind = "table", default = false, structural = true, check = monitor_ok,
   want = "false or {output_path = \"dir\", job_name = \"name\"}",
   doc = "`{output_path, job_name}`: rank 0 writes DeepSpeed's Train/Samples events (lr, train_loss, loss_scale) as a TensorBoard event file in output_path/job_name (`docs/config.md`, Monitors)"},
  {name = "csv_monitor", ds = {"csv_monitor"}, kind = "table", default = false, structural = true, check = monitor_ok,
   want = "false or {output_path = \"dir\", job_name = \"name\"}",
   doc = "`{output_path, job_name}`: the same events as DeepSpeed's CSV monitor writes them, one file each (Train_Samples_lr.csv) in output_path/job_name"},
  {name = "comms_logger", ds = {"comms_logger.enabled"}, kind = "bool", default = false, structural = true,
   doc = "every steps_per_print steps (10 when not given) and in `engine:comms_summary()`: each collective's calls, bytes, total and per-call time (start to completion) and GB/s"},
  {name = "flops_profiler", ds = {"flops_profiler"}, kind = "table", default = false, structural = true,
   check = function(v) return v == false or (type(v) == "table" and (v.profile_step == nil or
     (math.type(v.profile_step) == "integer" and v.profile_step >= 1))) end,
   want = "false or {profile_step = N (>= 1), output_file = path}",
   doc = "`{profile_step = 1, output_file}`: at that optimizer step rank 0 prints the step's FLOPs by module, TFLOP/s and the utilisation of a measured peak"},
  {name = "cpu_checkpointing", ds = {"activation_checkpointing.cpu_checkpointing"}, kind = "bool", default = false,
   doc = "`engine:checkpoint` keeps its saved inputs in host memory"},
  {name = "offload_optimizer", ds = {"zero_optimization.offload_optimizer"}, accelerate = "offload_optimizer_device",
   accelerate_path = "zero_optimization.offload_optimizer.device", kind = "table", default = false, structural = true,
   check = function(v) return offload_ok(v, false) end,
   want = "false or {device = \"cpu\" | \"nvme\", nvme_path (for nvme), buffer_count in 2..32, chunk >= 1, " ..
          "pin_memory (true or false)}",
   doc = "`{device = \"cpu\" | \"nvme\", nvme_path, buffer_count = 4, chunk = 2^20}`: \"nvme\" keeps Adam's moments of the shard in a file"},
  {name = "offload_param", ds = {"zero_optimization.offload_param"}, accelerate = "offload_param_device",
   accelerate_path = "zero_optimization.offload_param.device", kind = "table", default = false, structural = true,
   check = function(v) return offload_ok(v, true) end,
   want = "false or {device = \"cpu\" | \"nvme\", nvme_path (for nvme), buffer_count in 2..32, buffer_size >= 1 (elements), " ..
          "max_in_cpu (a number), pin_memory (true or false)}",
   doc = "`{device = \"cpu\" | \"nvme\", nvme_path, buffer_count, buffer_size}`: stage 3 keeps the parameter shard and its gradients in a file"},
  {name = "precision", ds = {"bf16.enabled", "fp16.enabled"}, accelerate = "mixed_precision", kind = "enum",
   values = {"fp32", "bf16", "fp16"}, default = "fp32", structural = true, c = {field = "dtype", type = "dtype"},
   doc = "`\"bf16\"` / `\"fp16\"`: 16-bit parameters and gradients, fp32 master weights and moments in the shards"},
  {name = "auto_cast", ds = {"fp16.auto_cast"}, only = "fp16", kind = "bool", default = true,
   doc = "with bf16 / fp16, the prepared model's forward casts its float32 and float64 tensor arguments to that dtype"},
  {name = "loss_scale", ds = {"fp16.loss_scale"}, only = "fp16", kind = "number", min = 0, want = "a number >= 0 (0: dynamic)",
   default = 0, c = {field = "loss_scale", type = "double"}, doc = "fp16: a static loss scale; 0: dynamic"},
  {name = "initial_scale_power", ds = {"fp16.initial_scale_power"}, only = "fp16", kind = "int", min = 0, max = 64,
   default = 16, c = {field = "initial_scale_power", type = "int"}, doc = "fp16: the dynamic scale starts at 2^this"},
  {name = "loss_scale_window", ds = {"fp16.loss_scale_window"}, only = "fp16", kind = "int", min = 1, default = 1000,
   c = {field = "loss_scale_window", type = "int"}, doc = "fp16: good steps in a row after which the scale doubles"},
  {name = "hysteresis", ds = {"fp16.hysteresis"}, only = "fp16", kind = "int", min = 1, default = 2,
   c = {field = "hysteresis", type = "int"}, doc = "fp16: overflows absorbed before the scale halves"},
  {name = "consecutive_hysteresis", ds = {"fp16.consecutive_hysteresis"}, only = "fp16", kind = "bool", default = false,
   c = {field = "consecutive_hysteresis", type = "bool"}, doc = "fp16: a good step restores the hysteresis"},
  {name = "min_loss_scale", ds = {"fp16.min_loss_scale"}, only = "fp16", kind = "number", above = 0, ds_min = 0,
   default = 1, c = {field = "min_loss_scale", type = "double"}, doc = "fp16: the dynamic scale never falls below this"},
  {name = "check_grad_overflow", ds = {"bf16.check_grad_overflow"}, only = "bf16", kind = "bool", default = false,
   c = {field = "check_grad_overflow", type = "bool"},
   doc = "fp32 and bf16: a step whose gradients hold an inf or nan is skipped, as fp16's are (DeepSpeed's bf16 key)"},
  {name = "device", kind = "table", default = "cpu",
   check = function(v) return v == "cpu" or v == "cuda" or (type(v) == "string" and v:match("^cuda:%d+$") ~= nil) end,
   want = "\"cpu\", \"cuda\" or \"cuda:N\"",
   doc = "`\"cuda\"` (each rank its own GPU) or `\"cuda:N\"`: `prepare` moves the model there; collectives run over NCCL"},
  {name = "data_group", kind = "table", default = false, check = function(v) return v == false or is_group(v) end,
   want = "false or a zorch.Group", doc = "a `zorch.Group`: the ranks holding replicas of this model (default: every rank)"},
  {name = "layout", kind = "table", default = false,
   check = function(v)
     return v == false or (type(v) == "table" and is_group(v.data) and is_group(v.model) and is_group(v.tensor)
       and type(v.sizes) == "table" and type(v.coords) == "table")
   end, want = "false or a zorch.dist.layout{...}",
   doc = "a `zorch.dist.layout`: its data group is the engine's; the clipping norm is summed over its model group"},
}

-- DeepSpeed keys without an Engine option: read and checked, or listed in the
-- warning by their status. A key set to false, an empty object or one whose
-- "enabled" is false is off, and not listed.
local function keys(status, kind, list, doc)
  for _, k in ipairs(list) do S.rows[#S.rows + 1] = {ds = {k}, status = status, kind = kind, doc = doc} end
end
keys("implemented", "bool", {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
  "zero_optimization.stage3_gather_fp16_weights_on_model_save", "zero_optimization.gather_16bit_weights_on_model_save"},
  "checked; the saved state dict always holds the full weights (gathered at stage 3)")
S.rows[#S.rows - 2].accelerate = "zero3_save_16bit_model"
S.rows[#S.rows + 1] = {ds = {"zero_optimization.cpu_offload"}, kind = "bool", structural = true,
                       doc = "DeepSpeed's older spelling of offload_optimizer {device = \"cpu\"}"}
keys("no effect", "bool", {"zero_optimization.contiguous_gradients", "zero_optimization.allgather_partitions",
  "zero_optimization.reduce_scatter"}, "communication and buckets")
keys("no effect", "number", {"zero_optimization.allgather_bucket_size",
  "zero_optimization.stage3_param_persistence_threshold"}, "communication and buckets")
keys("no effect", "any", {
  "zero_optimization.round_robin_gradients", "zero_optimization.param_persistence_threshold",
  "zero_optimization.stage3_model_persistence_threshold", "zero_optimization.model_persistence_threshold",
  "zero_optimization.sub_group_size", "zero_optimization.elastic_checkpoint", "zero_optimization.load_from_fp32_weights",
  "zero_optimization.ignore_unused_parameters", "zero_optimization.legacy_stage1", "zero_optimization.memory_efficient_linear",
  "zero_optimization.zero_hpz_partition_size", "zero_optimization.use_multi_rank_bucket_allreduce",
  "zero_optimization.stage3_module_granularity_threshold", "zero_optimization.module_granularity_threshold",
  "zero_optimization.use_all_reduce_for_fetch_params", "zero_optimization.log_trace_cache_warnings",
  "prescale_gradients", "gradient_predivide_factor", "communication_data_type", "seq_parallel_communication_data_type",
  "disable_allgather", "compile", "tensor_parallel", "pipeline", "aio"},
  "speed and memory: communication, buckets, prefetching, placement, compilation")
keys("no effect", "any", {"zero_optimization.cpu_offload_params", "zero_optimization.cpu_offload_use_pin_memory",
  "zero_optimization.offload_optimizer.pin_memory", "zero_optimization.offload_optimizer.fast_init",
  "zero_optimization.offload_optimizer.pipeline_read", "zero_optimization.offload_optimizer.pipeline_write",
  "zero_optimization.offload_optimizer.pipeline", "zero_optimization.offload_optimizer.ratio",
  "zero_optimization.offload_optimizer.buffer_size", "zero_optimization.offload_optimizer.max_in_cpu",
  "zero_optimization.offload_param.pin_memory", "zero_optimization.offload_param.max_in_cpu"},
  "offload: the buffers' placement, pinning and pipelining")
keys("no effect", "any", {"activation_checkpointing.partition_activations",
  "activation_checkpointing.contiguous_memory_optimization", "activation_checkpointing.number_checkpoints",
  "activation_checkpointing.synchronize_checkpoint_boundary", "activation_checkpointing.profile"},
  "activation checkpointing: DeepSpeed's buffers (the model calls engine:checkpoint)")
keys("no effect", "any", {"zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "hybrid_engine", "checkpoint",
  "autotuning", "cuda_visible_devices", "torch_autocast"}, "DeepSpeed's own machinery")
keys("no effect", "any", {"comet", "monitor_config", "comms_config", "memory_breakdown", "dump_state", "_comment"},
  "logging and monitoring")
keys("no effect", "any", {"comms_logger.verbose", "comms_logger.prof_all", "comms_logger.prof_ops", "comms_logger.debug",
  "flops_profiler.module_depth", "flops_profiler.top_modules", "flops_profiler.detailed",
  "flops_profiler.recompute_fwd_factor"}, "the profilers' detail: zorch prints every collective and the top-level modules")
S.rows[#S.rows + 1] = {ds = {"wandb"}, kind = "any", structural = true, status = "no effect",
                       doc = "refused when enabled (zorch has no Weights & Biases client), unless WANDB_MODE is offline or disabled: then nothing is written and the summary says so"}
keys("no effect", "any", {"bf16.loss_scale", "bf16.initial_scale_power", "bf16.loss_scale_window", "bf16.hysteresis",
  "bf16.min_loss_scale", "bf16.consecutive_hysteresis", "bf16.immediate_grad_update"},
  "bf16: DeepSpeed reads no loss scale for bf16")
keys("changes training", "any", {"data_efficiency", "data_types",
  "fp16.fp16_master_weights_and_grads", "zero_optimization.zero_quantized_weights",
  "zero_optimization.zero_quantized_gradients", "zero_optimization.zero_quantized_nontrainable_weights"},
  "DeepSpeed would train something else; zorch trains the plain model")

keys("removed", "any", {"nebula", "compression_training", "amp", "quantize_training", "sparse_gradients", "eigenvalue",
  "sparse_attention", "elasticity", "graph_harvesting", "curriculum_learning", "progressive_layer_drop",
  "zero_optimization.mics_shard_size", "zero_optimization.mics_hierarchical_params_gather",
  "zero_optimization.zeropp_loco_param"},
  "DeepSpeed 0.19.8 removed the feature and refuses a file that names the key (even disabled); so does zorch")

for _, r in ipairs(S.rows) do r.status = r.status or "implemented" end

-- Rows by Engine name and by DeepSpeed path.
S.by_name, S.by_path = {}, {}
for _, r in ipairs(S.rows) do
  if r.name then S.by_name[r.name] = r end
  for _, p in ipairs(r.ds or {}) do S.by_path[p] = r end
end

-- What a value of the row must be, in words.
local function quote(v) return type(v) == "string" and ('"' .. v .. '"') or tostring(v) end
function S.want(r)
  if r.want then return r.want end
  if r.kind == "bool" then return "true or false" end
  if r.kind == "enum" then
    local q = {}
    for i, v in ipairs(r.values) do q[i] = quote(v) end
    return table.concat(q, ", ", 1, #q - 1) .. " or " .. q[#q]
  end
  local what = r.kind == "int" and "an integer" or "a number"
  if r.max then return ("%s in %d..%d"):format(what, r.min, r.max) end
  if r.above then return ("%s > %g"):format(what, r.above) end
  return ("%s >= %g"):format(what, r.min)
end

-- Whether v is a value of the row (false is one where the default is false).
function S.valid(r, v)
  if r.default == false and v == false then return true end
  local k = r.kind
  if k == "table" then return r.check(v) end
  if k == "bool" then return type(v) == "boolean" end
  if k == "enum" then return one_of(v, r.values) end
  if k == "int" and math.type(v) ~= "integer" then return false end
  if type(v) ~= "number" then return false end
  if r.min and v < r.min then return false end
  if r.max and v > r.max then return false end
  return not (r.above and v <= r.above)
end

return S
