-- "auto" in a DeepSpeed JSON configuration, as Hugging Face Accelerate resolves
-- it: zorch._ds_take_autos(ds) takes the "auto" values out of the decoded file
-- (before it is checked) and zorch._resolve_autos resolves them at prepare (the engine sets them) from
-- the script's loader, optimizer, scheduler, model and the Engine's options.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

-- The key paths whose value is "auto", removed from ds (sorted). A required
-- total_num_steps gets a placeholder until prepare resolves it.
function zorch._ds_take_autos(ds)
  local autos = {}
  local function walk(t, prefix)
    local keys = {}
    for k in pairs(t) do keys[#keys + 1] = k end
    for _, k in ipairs(keys) do
      local v, path = t[k], prefix .. tostring(k)
      if v == "auto" then
        autos[#autos + 1] = path
        t[k] = path == "scheduler.params.total_num_steps" and 1 or nil
      elseif type(v) == "table" and (next(v) == nil or #v == 0) then
        walk(v, path .. ".")
      end
    end
  end
  if type(ds) == "table" then walk(ds, "") end
  table.sort(autos)
  return autos
end

local OPT_KEYS = {lr = true, betas = true, eps = true, weight_decay = true}
local CLIP_DEFAULT = zorch._require("zorch.engine.options").by_name.gradient_clipping.ds_default

-- The model's hidden size: the Engine's hidden_size option, else
-- model.config.hidden_size, else the largest dimension of the first 2-D parameter.
local function hidden_size(engine, model)
  if engine.cfg.hidden_size then return engine.cfg.hidden_size, "the Engine's hidden_size option" end
  local conf = rawget(model, "config")
  if type(conf) == "table" and math.type(conf.hidden_size) == "integer" then
    return conf.hidden_size, "model.config.hidden_size"
  end
  for _, p in ipairs(model:parameters()) do
    local s = p.shape
    if #s == 2 then return math.max(s[1], s[2]), "the first 2-D parameter" end
  end
end

-- Resolves every "auto" (self.autos) or raises one error listing those it cannot.
-- Returns the summary lines ("auto: KEY = VALUE (from ...)") and the values
-- for the engine to set (Engine:set_autos): {gradient_clipping?, reduce_bucket_size?,
-- prefetch_bucket_size?, optimizer = {param = value}, scheduler = {param = value}}.
-- script: the script's own settings (prepare's fourth argument): its schedule's
-- params (warmup_num_steps, total_num_steps, ...) and gradient_clipping.
-- As Accelerate (must_match=False): a value the file gives explicitly wins, an
-- "auto" one takes the script's.
local function resolve_autos(self, model, loader, opt, script)
  local c, lines, missing = self.cfg, {}, {}
  local fill = {optimizer = {}, scheduler = {}}
  local given = self.overrides or {}
  local function set(key, value, from) lines[#lines + 1] = ("auto: %s = %s (%s)"):format(key, zorch._readable(value), from) end
  local function fail(key, why) missing[#missing + 1] = ("%s (%s)"):format(key, why) end
  local hidden, hidden_from
  for _, key in ipairs(self.autos) do
    local opt_key = key:match("^optimizer%.params%.(.+)$")
    local sched_key = key:match("^scheduler%.params%.(.+)$")
    if key == "train_micro_batch_size_per_gpu" then
      if loader and loader.batch_size then set(key, loader.batch_size, "from the loader")
      else fail(key, "no loader passed to prepare") end
    elseif key == "gradient_accumulation_steps" then
      set(key, c.gradient_accumulation_steps, given.gradient_accumulation_steps and "from the Engine's options" or "the default")
    elseif key == "train_batch_size" then
      local mb = c.train_micro_batch_size or (loader and loader.batch_size)
      if mb then
        set(key, mb * c.gradient_accumulation_steps * self.world_size,
            ("micro batch %d x accumulation %d x %d ranks"):format(mb, c.gradient_accumulation_steps, self.world_size))
      else fail(key, "no loader passed to prepare") end
    elseif key == "gradient_clipping" then
      -- the script's own clipping (Transformers' max_grad_norm), else the Engine's
      -- option, else Accelerate's fill: 1.0 (DeepSpeed's default)
      local v, from = CLIP_DEFAULT, "the default: neither the script nor the Engine's options give one"
      if script and script.gradient_clipping ~= nil then v, from = script.gradient_clipping, "from the script"
      elseif given.gradient_clipping ~= nil then v, from = given.gradient_clipping, "from the Engine's options" end
      if type(v) ~= "number" or v < 0 then fail(key, "the script's gradient_clipping must be a number >= 0")
      else fill.gradient_clipping = v; set(key, v, from) end
    elseif key == "fp16.enabled" or key == "bf16.enabled" then
      set(key, c.precision == key:sub(1, 4), "from the Engine's precision option")
    elseif opt_key and OPT_KEYS[opt_key] then
      if not opt then fail(key, "no optimizer passed to prepare")
      elseif (opt.defaults or {})[opt_key] == nil then fail(key, "the script's optimizer has no " .. opt_key)
      else
        if c.optimizer then fill.optimizer[opt_key] = opt.defaults[opt_key] end
        set(key, opt.defaults[opt_key], "from the script's optimizer")
      end
    elseif sched_key and c.scheduler then
      local v = type(script) == "table" and (script[sched_key] or (type(script.params) == "table" and script.params[sched_key]))
      if not script then fail(key, "no scheduler passed to prepare")
      elseif v == nil then fail(key, "the script's scheduler has no " .. sched_key)
      else fill.scheduler[sched_key] = v; set(key, v, "from the script's scheduler") end
    elseif key == "zero_optimization.reduce_bucket_size" or key == "zero_optimization.stage3_prefetch_bucket_size"
           or key == "zero_optimization.stage3_param_persistence_threshold" then
      if not hidden then hidden, hidden_from = hidden_size(self, model) end
      if not hidden then fail(key, "no hidden size: give the Engine a hidden_size option")
      elseif key == "zero_optimization.reduce_bucket_size" then
        fill.reduce_bucket_size = hidden * hidden
        set(key, hidden * hidden, ("hidden size %d squared, from %s"):format(hidden, hidden_from))
      elseif key == "zero_optimization.stage3_prefetch_bucket_size" then
        fill.prefetch_bucket_size = math.floor(0.9 * hidden * hidden)
        set(key, fill.prefetch_bucket_size, ("0.9 x hidden size %d squared, from %s"):format(hidden, hidden_from))
      else
        set(key, 10 * hidden, ("10 x hidden size %d, from %s; no effect in zorch"):format(hidden, hidden_from))
      end
    elseif key == "zero_optimization.stage3_gather_16bit_weights_on_model_save" or
           key == "zero_optimization.stage3_gather_fp16_weights_on_model_save" or
           key == "zero_optimization.gather_16bit_weights_on_model_save" then
      set(key, true, "zorch always saves the full weights")
    else
      fail(key, "zorch does not resolve this key")
    end
  end
  if #missing > 0 then
    -- a usage error (the file's, alike on every rank): its message, no traceback, exit status 2
    local e = zorch.flags.usage_error(("Engine:prepare: these DeepSpeed config values are \"auto\" and cannot be resolved, or disagree with the script's: %s"):format(
      table.concat(missing, "; ")))
    e.every_rank = true
    error(e, 0)
  end
  return lines, fill
end
zorch._resolve_autos = resolve_autos

-- The optimizer a config's "optimizer" section names, as Accelerate's DummyOptim
-- stands for it: the section's type and explicit params; the script's optimizer
-- (opt, or none) gives the parameter groups and the options a group sets apart
-- from its defaults (a group without weight decay stays so); its "auto" params
-- were filled in spec.params at resolve_autos.
function zorch._config_optimizer(spec, model, opt)
  local p = {}
  for k, v in pairs(spec.params or {}) do p[k] = v end
  local make = zorch._require("zorch.optim")[spec.type]
  if not opt or not opt.param_groups then return make(model:parameters(), p) end
  local readable, d, groups = zorch._readable, opt.defaults or {}, {}
  for i, g in ipairs(opt.param_groups) do
    groups[i] = {params = g.params}
    for k in pairs(OPT_KEYS) do
      if g[k] ~= nil and readable(g[k]) ~= readable(d[k]) then groups[i][k] = g[k] end
    end
  end
  return make(groups, p)
end

return nil
