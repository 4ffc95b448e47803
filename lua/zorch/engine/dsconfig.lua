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

-- The schema (options.lua): each key's row says how it is read, or in which
-- group of the one warning it is listed when zorch does not implement it ("no
-- effect on results" or "changes training"; a key without a row is "not
-- recognised"). A key set to false, an empty object or one whose "enabled" is
-- false is off, and not listed.
local OPTIONS = zorch._require("zorch.engine.options")
local function one_of(v, list) for _, x in ipairs(list) do if v == x then return true end end return false end

-- Off: false, 0, an empty object, {"enabled": false}, an offload to device "none".
local function is_off(v)
  if v == false or v == 0 or (type(v) == "string" and (v:lower() == "false" or v:lower() == "none")) then return true end
  if type(v) ~= "table" then return false end
  if next(v) == nil then return true end
  local en = v.enabled
  if en == false or en == 0 or (type(en) == "string" and (en:lower() == "false" or en:lower() == "0")) then return true end
  return v.device == "none"
end

-- How a row's DeepSpeed value is read (by its ds_read, else its kind).
local READ = {
  bool = function(_, key, v) return boolean(key, v) end,
  number = function(r, key, v) return number(key, v, r.ds_min or r.min or 0) end,
  int = function(r, key, v) return integer(key, v, r.min) end,
  posint = function(_, key, v) return posint(key, v) end,
  enum = function(r, key, v)
    if not one_of(v, r.values) then bad(key, OPTIONS.want(r), v) end
    return math.tointeger(v) or v
  end,
  count = function(_, key, v) -- (often written 5e7)
    if type(v) ~= "number" or v < 0 or v > 2^53 then bad(key, "a number of parameters >= 0", v) end
    return math.floor(v)
  end,
  whole = function(_, key, v)
    if type(v) ~= "number" or v < 1 or v > 2^53 or v ~= math.floor(v) then bad(key, "a whole number from 1 to 2^53", v) end
    return math.tointeger(v)
  end,
  any = function() end,
}

-- One key of the file by its row: an Engine option read into out, a key without
-- one checked, one zorch does not implement checked and listed, one without a
-- row listed.
local function leaf(out, note, prefix, k, v)
  local key = prefix .. tostring(k)
  local r = type(k) == "string" and not k:find(".", 1, true) and OPTIONS.by_path[key] or nil
  if r and r.structural then r = nil end
  if r and r.name then out[r.name] = READ[r.ds_read or r.kind](r, key, v)
  elseif r and r.status == "implemented" then READ[r.kind](r, key, v)
  else
    if r then READ[r.kind](r, key, v) end
    note(key, v)
  end
end

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
-- DeepSpeed's 1-bit optimizers (lua/zorch/optim/onebit.lua): its parameter names.
local function backend(key, v)
  if type(v) ~= "string" then bad(key, '"nccl", "mpi", "hccl" or "compressed"', v) end
  return v
end
local ONEBIT = {lr = "rate", betas = betas, eps = "nonneg", weight_decay = "nonneg", bias_correction = "bool",
                eps_inside_sqrt = "bool", amsgrad = "bool", cuda_aware = "bool", comm_backend_name = backend,
                max_grad_norm = "nonneg"} -- (DeepSpeed's 1-bit optimizers take it, and ignore it)
local function onebit(extra)
  local t = {}
  for k, v in pairs(ONEBIT) do t[k] = v end
  for k, v in pairs(extra) do t[k] = v end
  return t
end
OPT_PARAMS.OneBitAdam = onebit{freeze_step = "int0"}
OPT_PARAMS.ZeroOneAdam = onebit{var_freeze_step = "int0", var_update_scaler = "int1", local_step_scaler = "int1",
                                local_step_clipper = "int1"}
OPT_PARAMS.OneBitLamb = onebit{freeze_step = "int0", max_coeff = "nonneg", min_coeff = "nonneg", coeff_beta = "nonneg",
                               factor_max = "nonneg", factor_min = "nonneg", factor_threshold = "nonneg"}
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
  WarmupLR = {warmup_min_lr = "rate", warmup_max_lr = "rate", warmup_num_steps = "int1", warmup_type = "warmup_type"},
  WarmupDecayLR = {warmup_min_lr = "rate", warmup_max_lr = "rate", warmup_num_steps = "int1",
                   warmup_type = "warmup_type", total_num_steps = "int1"},
  WarmupCosineLR = {warmup_min_ratio = "unit", cos_min_ratio = "unit", warmup_num_steps = "int1",
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
    local r = OPTIONS.by_path[k]
    unimplemented.kind[k] = r and r.status ~= "implemented" and r.status or "not recognised"
  end
  -- keys of features DeepSpeed removed: it refuses a file naming one, even disabled
  for _, r in ipairs(OPTIONS.rows) do
    if r.status == "removed" then
      local section, key = r.ds[1]:match("^([^.]*)%.(.*)$")
      local t = section and ds[section] or ds
      if type(t) == "table" and t[key or r.ds[1]] ~= nil then try(function()
        error(("Engine: DeepSpeed config key '%s' names a feature DeepSpeed %s removed, and DeepSpeed refuses " ..
          "a file with it; remove the key%s"):format(r.ds[1], OPTIONS.deepspeed_version,
          r.ds[1] == "curriculum_learning" and " (its place is data_efficiency.data_sampling.curriculum_learning)" or ""), 0)
      end) end
    end
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
  if ds.bf16 ~= nil then try(function()
    object("bf16", ds.bf16)
    local on = ds.bf16.enabled ~= nil and boolean("bf16.enabled", ds.bf16.enabled)
    if on then out.precision = "bf16" end
    for k, v in pairs(ds.bf16) do
      if k ~= "enabled" and on then leaf(out, note, "bf16.", k, v) end
    end
  end) end
  if ds.fp16 ~= nil then try(function()
    -- DeepSpeed's keys and defaults (the Engine's, under the same names)
    object("fp16", ds.fp16)
    local fp16 = ds.fp16.enabled ~= nil and boolean("fp16.enabled", ds.fp16.enabled)
    if fp16 and out.precision == "bf16" then error("Engine: fp16 and bf16 are both enabled; enable one", 0) end
    for k, v in pairs(ds.fp16) do -- (the loss scaler's rows: read only when fp16 is on)
      if k ~= "enabled" and fp16 then leaf(out, note, "fp16.", k, v) end
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
      if k == "offload_optimizer" or k == "offload_param" then
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
      else
        leaf(out, note, "zero_optimization.", k, v)
      end
    end) end
  end) end
  if ds.optimizer ~= nil then try(function()
    local o = ds.optimizer
    local types, names = {}, OPTIONS.optimizer_types
    for _, t in ipairs(names) do types[t:lower()] = t end
    object("optimizer", o)
    if type(o.type) ~= "string" or not types[o.type:lower()] then bad("optimizer.type",
      table.concat(names, ", ", 1, #names - 1) .. " or " .. names[#names], o.type) end
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
  -- activation_checkpointing: cpu_checkpointing keeps engine:checkpoint's saved
  -- inputs in host memory; the other keys are listed
  if ds.activation_checkpointing ~= nil then try(function()
    object("activation_checkpointing", ds.activation_checkpointing)
    for k, v in pairs(ds.activation_checkpointing) do leaf(out, note, "activation_checkpointing.", k, v) end
  end) end
  -- the monitors and profilers (engine/monitor.lua, engine/flops.lua): an enabled section is the Engine option
  local function enabled(k)
    if ds[k] == nil then return false end
    local v = object(k, ds[k])
    return v.enabled ~= nil and boolean(k .. ".enabled", v.enabled), v
  end
  for _, k in ipairs({"tensorboard", "csv_monitor"}) do try(function()
    local on, v = enabled(k)
    if not on then return end
    local m = {output_path = "", job_name = "DeepSpeedJobName"} -- (DeepSpeed's defaults)
    for kk, vv in pairs(v) do
      local sub = k .. "." .. tostring(kk)
      if kk == "output_path" or kk == "job_name" then
        if type(vv) ~= "string" or (kk == "job_name" and vv == "") then bad(sub, "a folder name", vv) end
        m[kk] = vv
      elseif kk ~= "enabled" then note(sub, vv) end
    end
    out[k] = m
  end) end
  try(function()
    local on, v = enabled("wandb")
    if not on then return end
    local mode = (os.getenv("WANDB_MODE") or ""):lower()
    if mode ~= "offline" and mode ~= "disabled" then
      error("Engine: DeepSpeed config key 'wandb' is enabled, but zorch has no Weights & Biases client: use " ..
        "tensorboard or csv_monitor, or set WANDB_MODE=offline to train writing nothing for it", 0)
    end
    note("wandb", v) -- (listed: WANDB_MODE asks for no upload, and zorch writes nothing)
  end)
  try(function()
    local on, v = enabled("comms_logger")
    if on then out.comms_logger = true end
    for kk, vv in pairs(v or {}) do if kk ~= "enabled" and on then leaf(out, note, "comms_logger.", kk, vv) end end
  end)
  try(function()
    local on, v = enabled("flops_profiler")
    if not on then return end
    local f = {profile_step = 1}
    for kk, vv in pairs(v) do
      local sub = "flops_profiler." .. tostring(kk)
      if kk == "profile_step" then f.profile_step = integer(sub, vv, 1)
      elseif kk == "output_file" then
        if vv ~= nil and type(vv) ~= "string" then bad(sub, "a file name or null", vv) end
        f.output_file = vv
      elseif kk ~= "enabled" then leaf(out, note, "flops_profiler.", kk, vv) end
    end
    out.flops_profiler = f
  end)
  -- the other top-level keys, each by its row
  local sections = {train_batch_size = 1, train_micro_batch_size_per_gpu = 1, gradient_accumulation_steps = 1,
                    bf16 = 1, fp16 = 1, zero_optimization = 1, optimizer = 1, scheduler = 1, activation_checkpointing = 1,
                    tensorboard = 1, csv_monitor = 1, wandb = 1, comms_logger = 1, flops_profiler = 1}
  for k, v in pairs(ds) do if not sections[k] then try(leaf, out, note, "", k, v) end end
  -- what a key left out means to DeepSpeed, where that is not the Engine's default
  for _, r in ipairs(OPTIONS.rows) do
    if r.name and r.ds_default ~= nil and out[r.name] == nil then out[r.name] = r.ds_default end
  end

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
  local mp = y.mixed_precision
  if mp ~= nil and mp ~= "no" and mp ~= "fp16" and mp ~= "bf16" then
    error(mistake(("%s: mixed_precision must be no, fp16 or bf16, got %s"):format(path, readable(mp))))
  end
  -- the file's world: a job of other ranks runs (as `accelerate launch
  -- --num_processes` would), and the warning says the file meant another
  local np, nm = y.num_processes, y.num_machines
  local notes = {}
  if math.type(np) == "integer" and np * (math.type(nm) == "integer" and nm or 1) ~= world then
    notes[1] = "num_processes"
  end
  local dc = y.deepspeed_config
  if y.distributed_type ~= "DEEPSPEED" then
    local ds, more = zorch._require("zorch.engine.accelerate")(y, path, function(m) error(mistake(m)) end)
    table.move(more, 1, #more, #notes + 1, notes)
    return ds, path, notes
  end
  if type(dc) ~= "table" then
    error(mistake(("%s: distributed_type DEEPSPEED needs a deepspeed_config section"):format(path)))
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
  -- each row with an Accelerate name: the value at the row's DeepSpeed path
  local ds = {train_micro_batch_size_per_gpu = "auto", train_batch_size = "auto"}
  local read_keys = {-- the launcher's and the model loader's, not the training's
                     deepspeed_multinode_launcher = 1, deepspeed_hostfile = 1, deepspeed_exclusion_filter = 1,
                     deepspeed_inclusion_filter = 1, zero3_init_flag = 1}
  for _, r in ipairs(OPTIONS.rows) do
    local a = r.accelerate
    if a and a ~= "mixed_precision" then -- (mixed_precision: top level, below)
      read_keys[a] = 1
      local v = dc[a]
      if r.kind == "int" or r.kind == "number" or r.kind == "enum" then v = num(v) end
      if v ~= nil and not (r.kind == "number" and v == "none") then -- (gradient_clipping: none is off)
        local t, path = ds, r.accelerate_path or r.ds[1]
        for part in path:gmatch("([^.]+)%.") do t[part] = t[part] or {}; t = t[part] end
        t[path:match("[^.]+$")] = v
      end
    end
  end
  ds.gradient_accumulation_steps = ds.gradient_accumulation_steps or 1
  if mp == "fp16" then ds.fp16 = {enabled = true} elseif mp == "bf16" then ds.bf16 = {enabled = true} end
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

-- The scheduler a config's "scheduler" section names: optim.lr_scheduler's
-- DeepSpeed schedule of that type over the section's params.
function zorch._make_scheduler(spec, opt)
  return zorch._require("zorch.optim").lr_scheduler[spec.type](opt, spec.params)
end

return nil
