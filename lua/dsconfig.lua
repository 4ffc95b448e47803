-- DeepSpeed JSON configurations for zorch.Engine. zorch._from_deepspeed(path,
-- world_size) returns the Engine table it means and the keys zorch does not
-- implement (reported together in one warning). Invalid values are errors that
-- name the key.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then error("Engine: cannot read DeepSpeed config: " .. tostring(err), 0) end
  local text = f:read("a")
  f:close()
  local ok, cfg = pcall(zorch._json_decode, text)
  if not ok or type(cfg) ~= "table" then error(("Engine: %s is not a JSON object"):format(path), 0) end
  return cfg
end

local function bad(key, want, got)
  error(("Engine: DeepSpeed config key '%s' must be %s, got %s"):format(key, want, tostring(got)), 0)
end

local function posint(key, v)
  if v ~= nil and (math.type(v) ~= "integer" or v < 1) then bad(key, "a positive integer", v) end
  return v
end

-- Keys that are understood but change nothing in zorch (listed in the warning).
local IGNORED = {
  ["zero_optimization.overlap_comm"] = true, ["zero_optimization.contiguous_gradients"] = true,
  ["zero_optimization.allgather_bucket_size"] = true, ["zero_optimization.stage3_prefetch_bucket_size"] = true,
  ["zero_optimization.stage3_param_persistence_threshold"] = true, ["zero_optimization.allgather_partitions"] = true,
  ["zero_optimization.reduce_scatter"] = true,
}

function zorch._from_deepspeed(path, world)
  local ds = read(path)
  local out, unimplemented = {}, {}
  local function note(k) unimplemented[#unimplemented + 1] = k end
  -- batch sizes: train = micro * accumulation * world; any two give the third
  local tb = posint("train_batch_size", ds.train_batch_size)
  local mb = posint("train_micro_batch_size_per_gpu", ds.train_micro_batch_size_per_gpu)
  local ga = posint("gradient_accumulation_steps", ds.gradient_accumulation_steps)
  if tb and mb and ga and tb ~= mb * ga * world then
    error(("Engine: train_batch_size %d is not train_micro_batch_size_per_gpu %d x gradient_accumulation_steps %d x %d ranks"):format(
      tb, mb, ga, world), 0)
  end
  if tb and mb and not ga then
    if tb % (mb * world) ~= 0 then bad("train_batch_size", ("a multiple of %d (micro batch x ranks)"):format(mb * world), tb) end
    ga = tb // (mb * world)
  elseif tb and ga and not mb then
    if tb % (ga * world) ~= 0 then bad("train_batch_size", ("a multiple of %d (accumulation x ranks)"):format(ga * world), tb) end
    mb = tb // (ga * world)
  elseif tb and not mb and not ga then
    if tb % world ~= 0 then bad("train_batch_size", "a multiple of the ranks", tb) end
    mb, ga = tb // world, 1
  end
  out.gradient_accumulation_steps = ga
  out.train_micro_batch_size = mb
  if ds.gradient_clipping ~= nil then
    if type(ds.gradient_clipping) ~= "number" or ds.gradient_clipping < 0 then bad("gradient_clipping", "a number >= 0", ds.gradient_clipping) end
    out.gradient_clipping = ds.gradient_clipping
  end
  if type(ds.bf16) == "table" and ds.bf16.enabled then out.precision = "bf16" end
  if type(ds.fp16) == "table" and ds.fp16.enabled then
    error("Engine: fp16 (with loss scaling) is not supported; use \"bf16\": {\"enabled\": true}", 0)
  end
  local zo = ds.zero_optimization
  if zo ~= nil then
    if type(zo) ~= "table" then bad("zero_optimization", "an object", zo) end
    for k, v in pairs(zo) do
      local key = "zero_optimization." .. k
      if k == "stage" then
        if v ~= 0 and v ~= 1 and v ~= 2 and v ~= 3 then bad(key, "0, 1, 2 or 3", v) end
        out.zero_stage = v
      elseif k == "reduce_bucket_size" then
        if type(v) ~= "number" or v < 1 then bad(key, "a positive number", v) end
        out.reduce_bucket_size = math.floor(v)
      elseif k == "offload_optimizer" or k == "offload_param" then
        if type(v) == "table" and v.device and v.device ~= "none" then note(key) end
      elseif IGNORED[key] then
        note(key)
      else
        note(key)
      end
    end
  end
  if ds.optimizer ~= nil then
    local o = ds.optimizer
    local types = {adam = "Adam", adamw = "AdamW", sgd = "SGD"}
    if type(o) ~= "table" or type(o.type) ~= "string" or not types[o.type:lower()] then
      bad("optimizer.type", "Adam, AdamW or SGD", type(o) == "table" and o.type or o)
    end
    out.optimizer = {type = types[o.type:lower()], params = o.params or {}}
  end
  if ds.scheduler ~= nil then
    local s = ds.scheduler
    local types = {WarmupLR = true, WarmupDecayLR = true, WarmupCosineLR = true}
    if type(s) ~= "table" or not types[s.type] then
      bad("scheduler.type", "WarmupLR, WarmupDecayLR or WarmupCosineLR", type(s) == "table" and s.type or s)
    end
    out.scheduler = {type = s.type, params = s.params or {}}
  end
  if ds.steps_per_print ~= nil then out.steps_per_print = posint("steps_per_print", ds.steps_per_print) end
  local known = {train_batch_size = 1, train_micro_batch_size_per_gpu = 1, gradient_accumulation_steps = 1,
                 gradient_clipping = 1, bf16 = 1, fp16 = 1, zero_optimization = 1, optimizer = 1, scheduler = 1,
                 steps_per_print = 1}
  for k in pairs(ds) do if not known[k] then note(k) end end
  table.sort(unimplemented)
  return out, unimplemented
end

-- DeepSpeed's learning-rate schedules (their documented formulas), stepping the
-- optimizer's lr after every optimizer step. Warm-up is "log" unless
-- warmup_type is "linear".
local function warm(p, step)
  local n = p.warmup_num_steps or 1000
  if step >= n then return 1 end
  if (p.warmup_type or "log") == "linear" then return step / n end
  return math.log(step + 1) / math.log(n)
end

function zorch._make_scheduler(spec, opt)
  local p, base = spec.params, opt.lr
  local s = {optimizer = opt, last_step = 0}
  if spec.type == "WarmupLR" then
    local lo, hi = p.warmup_min_lr or 0, p.warmup_max_lr or 0.001
    function s.lr_at(n) return lo + (hi - lo) * warm(p, n) end
  elseif spec.type == "WarmupDecayLR" then
    local lo, hi, total = p.warmup_min_lr or 0, p.warmup_max_lr or 0.001, p.total_num_steps
    if math.type(total) ~= "integer" then error("Engine: scheduler WarmupDecayLR needs params.total_num_steps", 0) end
    local n = p.warmup_num_steps or 1000
    function s.lr_at(k)
      if k < n then return lo + (hi - lo) * warm(p, k) end
      return lo + (hi - lo) * math.max(0, (total - k) / math.max(1, total - n))
    end
  else -- WarmupCosineLR: ratios of the optimizer's lr
    local total = p.total_num_steps
    if math.type(total) ~= "integer" then error("Engine: scheduler WarmupCosineLR needs params.total_num_steps", 0) end
    local n, wmin, cmin = p.warmup_num_steps or 1000, p.warmup_min_ratio or 0, p.cos_min_ratio or 0.0001
    function s.lr_at(k)
      if k < n then return base * (wmin + (1 - wmin) * warm(p, k)) end
      local t = math.min(1, (k - n) / math.max(1, total - n))
      return base * (cmin + (1 - cmin) * 0.5 * (1 + math.cos(math.pi * t)))
    end
  end
  function s.step()
    s.last_step = s.last_step + 1
    opt.lr = s.lr_at(s.last_step)
  end
  opt.lr = s.lr_at(0)
  return s
end

return nil
