-- zorch.nn.lora: low-rank adapters as PEFT makes them (LoRA, Hu et al. 2021).
--   nn.LoRALinear(linear, {r, alpha, dropout, init, rslora})  a frozen Linear plus B A
--   nn.lora.apply(model, {r, alpha, dropout, target_modules, init, rslora})
--   nn.lora.parameters(model)          the adapters' tensors (what the optimizer steps)
--   nn.lora.merge(model) / unmerge     fold B A into the base weights and back
--   nn.lora.state_dict(model)          the adapters under PEFT's names
--   nn.lora.merged_state_dict(model)   the base model's state dict with B A folded in
--   nn.lora.save(model, dir, {base_model_name_or_path})  adapter_config.json + adapter_model.safetensors
--   nn.lora.load(model, dir)           PEFT's folder into the model (applying it first if needed)
-- The wrapped Linear keeps its parameter names (`q_proj.weight`), so the base
-- model still loads and saves name for name; the adapter adds `q_proj.lora_A`
-- (r, in) and `q_proj.lora_B` (out, r), saved as PEFT's
-- `base_model.model.<path>.lora_A.weight`.
-- Other layers take adapters through lora.register(layer class, adapter class),
-- the adapter class a subclass of nn.LoRALinear (the tensor-parallel layers'
-- are in zorch/parallel/tplora.lua): lora_A and lora_B are then this rank's
-- parts, and the adapter's _whole(name) and _slice(name, full) turn them into
-- the whole layer's and back, so the files hold the whole model's adapters.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_int, shape_str = M.Module, M.check_int, M.shape_str

local lora = {}
nn.lora = lora

local function fail(fmt, ...) error("lora: " .. fmt:format(...), 0) end

-- the options of an adapter, checked; fn names the caller in messages
local function read_adapter_opts(fn, o)
  if o ~= nil and type(o) ~= "table" then error(("%s: options must be a table, got %s"):format(fn, type(o)), 3) end
  o = o or {}
  local r = o.r or 8
  check_int(fn, "r", r)
  local alpha = o.alpha or 8
  if type(alpha) ~= "number" or alpha <= 0 then error(("%s: alpha must be a positive number, got %s"):format(fn, tostring(alpha)), 3) end
  local p = o.dropout or 0
  if type(p) ~= "number" or not (p >= 0 and p < 1) then
    error(("%s: dropout must be a number in [0, 1), got %s"):format(fn, tostring(p)), 3)
  end
  local init = o.init
  if init == nil or init == true then init = "default" end
  if init ~= "default" and init ~= "gaussian" then
    error(("%s: init must be \"default\" or \"gaussian\", got %s"):format(fn, tostring(init)), 3)
  end
  if o.rslora ~= nil and type(o.rslora) ~= "boolean" then
    error(("%s: rslora must be a boolean, got %s"):format(fn, type(o.rslora)), 3)
  end
  return {r = r, alpha = alpha, dropout = p, init = init, rslora = o.rslora == true}
end

-- LoRALinear(linear, opts): y = linear(x) + B (A (dropout(x))) * scaling, the
-- linear's weight and bias frozen (requires_grad false, the same tensors),
-- scaling alpha / r (rslora: alpha / sqrt(r)). PEFT's default init: A as
-- nn.Linear's weight (kaiming-uniform, a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in))),
-- B zero, so the adapter starts as the identity; "gaussian": A ~ N(0, 1/r).
nn.LoRALinear = Module:extend "nn.LoRALinear"
local base_of = {} -- adapter class -> the layer class it wraps
local adapter_for = {} -- layer class -> its adapter class

-- lora.register(layer_class, adapter_class): apply wraps the layers of that
-- class in the adapter (a subclass of nn.LoRALinear, whose init takes the layer).
function lora.register(layer_class, adapter_class)
  if type(layer_class) ~= "table" or type(adapter_class) ~= "table" then
    error("nn.lora.register: expected (layer class, adapter class)", 2)
  end
  adapter_for[layer_class], base_of[adapter_class] = adapter_class, layer_class
end
lora.register(nn.Linear, nn.LoRALinear)

function nn.LoRALinear:init(linear, opts)
  local cls = getmetatable(self)
  local fn, base = cls.__name, base_of[cls]
  if type(linear) ~= "table" or getmetatable(linear) ~= base then
    error(("%s: argument 1 must be an %s, got %s"):format(fn, base.__name,
      type(linear) == "table" and tostring(getmetatable(linear) and getmetatable(linear).__name) or type(linear)), 3)
  end
  if rawget(linear, "activation") then
    error(("%s: a Linear with a fused activation (%s) cannot take an adapter"):format(fn, linear.activation), 3)
  end
  local o = read_adapter_opts(fn, opts)
  self.in_features, self.out_features = linear.in_features, linear.out_features
  self.weight = nn.Parameter(linear.weight, false)
  if rawget(linear, "bias") then self.bias = nn.Parameter(linear.bias, false) end
  rawset(self, "r", o.r)
  rawset(self, "alpha", o.alpha)
  rawset(self, "dropout", o.dropout)
  rawset(self, "rslora", o.rslora)
  rawset(self, "scaling", o.rslora and o.alpha / math.sqrt(o.r) or o.alpha / o.r)
  rawset(self, "merged", false)
  local w = linear.weight
  local like = {dtype = w:dtype(), device = w:device()}
  local a
  if o.init == "gaussian" then a = zorch.randn({o.r, self.in_features}) * (1 / o.r)
  else
    local bound = 1 / math.sqrt(self.in_features)
    a = zorch.rand({o.r, self.in_features}) * (2 * bound) - bound
  end
  -- (the whole layer's A and B, drawn as one process draws them; a split layer keeps its part)
  self.lora_A = nn.Parameter(self:_slice("lora_A", a:to(like.dtype):to(like.device)))
  self.lora_B = nn.Parameter(self:_slice("lora_B", zorch.zeros({self.out_features, o.r}, like)))
end
-- This rank's part of the whole layer's lora_A or lora_B (all of it here).
function nn.LoRALinear:_slice(_, full) return full end
-- The whole layer's lora_A or lora_B (detached); collective for a split layer.
function nn.LoRALinear:_whole(name) return self[name]:detach() end
function nn.LoRALinear:forward(x)
  local y = zorch.linear(x, self.weight, rawget(self, "bias"))
  if rawget(self, "merged") then return y end
  local h = x
  if self.dropout > 0 and self.training then h = zorch.dropout(h, self.dropout, true) end
  return y + zorch.linear(zorch.linear(h, self.lora_A), self.lora_B) * self.scaling
end
-- B A * scaling, the weight's shape, computed the one way merge and the merged
-- state dict share (a and b: copies of lora_A and lora_B, say a state dict's)
function nn.LoRALinear:delta(a, b)
  a, b = a or self.lora_A, b or self.lora_B
  return zorch.no_grad(function() return zorch.matmul(b, a) * self.scaling end)
end
function nn.LoRALinear:merge()
  if not rawget(self, "merged") then
    local d = self:delta()
    zorch.no_grad(function() self.weight:add_(d:to(self.weight:dtype())) end)
    rawset(self, "merged", true)
  end
  return self
end
function nn.LoRALinear:unmerge()
  if rawget(self, "merged") then
    local d = self:delta()
    zorch.no_grad(function() self.weight:sub_(d:to(self.weight:dtype())) end)
    rawset(self, "merged", false)
  end
  return self
end
nn.LoRALinear.__tostring = function(s)
  return ("nn.LoRALinear(in_features=%d, out_features=%d, r=%d, alpha=%s, dropout=%s%s%s)"):format(s.in_features,
    s.out_features, s.r, tostring(s.alpha), tostring(s.dropout), s.rslora and ", rslora" or "",
    s.merged and ", merged" or "")
end

-- PEFT's match of target_modules (a list): the module's name is a target or
-- ends with "." .. target.
local function matches(name, targets)
  for _, t in ipairs(targets) do
    if name == t or name:sub(-#t - 1) == "." .. t then return true end
  end
  return false
end

-- every (name, adapter) of the model, in module order
local function adapters(model)
  local out = {}
  for name, m in model:named_modules() do
    if base_of[getmetatable(m)] then out[#out + 1] = {name, m} end
  end
  return out
end
function lora.modules(model)
  if type(model) ~= "table" or not model.named_modules then error("nn.lora.modules: argument 1 must be a module", 2) end
  local list, i = adapters(model), 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end

-- apply(model, {r = 8, alpha = 8, dropout = 0, target_modules = {"q_proj", "v_proj"},
-- init = "default", rslora = false}): replaces each nn.Linear whose name matches
-- a target by an nn.LoRALinear around it (a registered layer by its adapter)
-- and freezes every other parameter of the model (PEFT's bias "none").
-- Returns the model and the names wrapped.
function lora.apply(model, opts)
  local fn = "nn.lora.apply"
  if type(model) ~= "table" or not model.named_modules then error(fn .. ": argument 1 must be a module", 2) end
  local o = read_adapter_opts(fn, opts)
  local targets = (opts or {}).target_modules or {"q_proj", "v_proj"}
  if type(targets) ~= "table" or #targets == 0 then
    error(fn .. ": target_modules must be a non-empty list of module names", 2)
  end
  for i, t in ipairs(targets) do
    if type(t) ~= "string" or t == "" then error(("%s: target_modules[%d] must be a name, got %s"):format(fn, i, tostring(t)), 2) end
  end
  if #adapters(model) > 0 then error(fn .. ": the model already has adapters", 2) end
  local todo = {}
  for name, m in model:named_modules() do
    for _, k in ipairs(m._order) do
      local child = rawget(m, k)
      local full = name == "" and k or (name .. "." .. k)
      if m._children[k] and adapter_for[getmetatable(child)] and matches(full, targets) then
        todo[#todo + 1] = {m, k, child, full}
      end
    end
  end
  if #todo == 0 then
    error(("%s: no nn.Linear of the model matches target_modules {%s}"):format(fn, table.concat(targets, ", ")), 2)
  end
  for _, p in ipairs(model:parameters()) do nn.Parameter(p, false) end
  local names = {}
  for _, t in ipairs(todo) do
    local ok, w = pcall(adapter_for[getmetatable(t[3])], t[3], o)
    if not ok then error(("%s: %s: %s"):format(fn, t[4], tostring(w):gsub("^[^:]*:%d+: ", "")), 2) end
    t[1][t[2]] = w -- (the key exists: a plain assignment keeps the child's place)
    names[#names + 1] = t[4]
  end
  rawset(model, "_lora", {r = o.r, alpha = o.alpha, dropout = o.dropout, rslora = o.rslora, target_modules = targets})
  return model, names
end

local function need_adapters(fn, model)
  if type(model) ~= "table" or not model.named_modules then error(fn .. ": argument 1 must be a module", 3) end
  local list = adapters(model)
  if #list == 0 then error(fn .. ": the model has no adapters (nn.lora.apply first)", 3) end
  return list
end

-- the adapters' tensors, A then B of each, in module order
function lora.parameters(model)
  local ps = {}
  for _, e in ipairs(need_adapters("nn.lora.parameters", model)) do
    ps[#ps + 1] = e[2].lora_A
    ps[#ps + 1] = e[2].lora_B
  end
  return ps
end

function lora.merge(model)
  for _, e in ipairs(need_adapters("nn.lora.merge", model)) do e[2]:merge() end
  return model
end
function lora.unmerge(model)
  for _, e in ipairs(need_adapters("nn.lora.unmerge", model)) do e[2]:unmerge() end
  return model
end

local PREFIX = "base_model.model."
-- {PEFT name = tensor (detached, on the CPU, contiguous)}: the whole layers'
-- adapters (a tensor-parallel model's gathered: every rank of its group calls it)
function lora.state_dict(model)
  local sd = {}
  for _, e in ipairs(need_adapters("nn.lora.state_dict", model)) do
    for _, k in ipairs({"lora_A", "lora_B"}) do
      sd[PREFIX .. e[1] .. "." .. k .. ".weight"] = e[2]:_whole(k):to("cpu"):contiguous()
    end
  end
  return sd
end

-- The model's state dict as the base model's, each adapter folded into its
-- weight (W + B A * scaling) and the lora_A/lora_B entries left out: what
-- Transformers loads as the fine-tuned model. The model is not changed.
function lora.merged_state_dict(model, sd)
  local list = need_adapters("nn.lora.merged_state_dict", model)
  sd = sd or model:state_dict()
  local out = {}
  for k, v in pairs(sd) do out[k] = v end
  for _, e in ipairs(list) do
    local m, w, a, b = e[2], e[1] .. ".weight", sd[e[1] .. ".lora_A"], sd[e[1] .. ".lora_B"]
    out[e[1] .. ".lora_A"], out[e[1] .. ".lora_B"] = nil, nil
    if not m.merged then out[w] = (sd[w] + m:delta(a, b):to(sd[w]:dtype()):to(sd[w]:device())) end
  end
  return out
end

-- save(model, dir, {base_model_name_or_path = "", state_dict =}): PEFT's adapter
-- folder, adapter_config.json and adapter_model.safetensors (fp32), of
-- lora.state_dict(model) or the state_dict given (a split model's, gathered by
-- every rank before one of them saves). Returns the file names.
function lora.save(model, dir, opts)
  local fn = "nn.lora.save"
  local list = need_adapters(fn, model)
  if type(dir) ~= "string" then error(fn .. ": dir must be a folder name, got " .. type(dir), 2) end
  opts = opts or {}
  local c = rawget(model, "_lora")
  if not c then -- adapters made one by one: the config from the first
    local m = list[1][2]
    c = {r = m.r, alpha = m.alpha, dropout = m.dropout, rslora = m.rslora, target_modules = {}}
  end
  local targets, seen = {}, {}
  for _, e in ipairs(list) do
    local m = e[2]
    if m.r ~= c.r or m.alpha ~= c.alpha or m.rslora ~= c.rslora then
      error(("%s: %s has r %d alpha %s, the others r %d alpha %s: PEFT's file takes one (rank_pattern is not implemented)"):format(
        fn, e[1], m.r, tostring(m.alpha), c.r, tostring(c.alpha)), 2)
    end
    local last = e[1]:match("[^.]+$")
    if not seen[last] then seen[last] = true; targets[#targets + 1] = last end
  end
  table.sort(targets)
  local ok, err = pcall(zorch.fs.mkdir, dir)
  if not ok then fail("%s: cannot make the folder (%s)", dir, tostring(err)) end
  local sd = {}
  for k, v in pairs(opts.state_dict or lora.state_dict(model)) do sd[k] = v:dtype() ~= "float32" and v:float() or v end
  zorch.save(sd, dir .. "/adapter_model.safetensors")
  local config = {
    peft_type = "LORA", task_type = opts.task_type or "CAUSAL_LM", r = c.r, lora_alpha = c.alpha,
    lora_dropout = c.dropout, target_modules = targets, bias = "none", fan_in_fan_out = false,
    use_rslora = c.rslora, use_dora = false, init_lora_weights = true, inference_mode = true,
    base_model_name_or_path = opts.base_model_name_or_path, rank_pattern = {}, alpha_pattern = {},
  }
  zorch.fs.write_atomic(dir .. "/adapter_config.json", zorch.json.encode(config) .. "\n")
  return {"adapter_model.safetensors", "adapter_config.json"}
end

local read_file = zorch._require("zorch.util").read_file

-- adapter_config.json of dir, checked: {r, alpha, dropout, rslora, target_modules};
-- what zorch cannot honour is refused naming the file and the key.
function lora.config(dir)
  if type(dir) ~= "string" then error("nn.lora.config: dir must be a folder name, got " .. type(dir), 2) end
  local path = dir .. "/adapter_config.json"
  local s, err = read_file(path)
  if not s then fail("%s: cannot open (%s)", path, err) end
  local ok, c = pcall(zorch.json.decode, s)
  if not ok or type(c) ~= "table" then fail("%s: not a JSON object (%s)", path, tostring(c):gsub("\n", " ")) end
  local function refuse(key, v) fail("%s: %s %s is not implemented", path, key, zorch.json.encode(v):gsub("%s+", " ")) end
  if c.peft_type ~= "LORA" then refuse("peft_type", c.peft_type or "(missing)") end
  if c.use_dora then refuse("use_dora", c.use_dora) end
  if (c.bias or "none") ~= "none" then refuse("bias", c.bias) end
  if c.fan_in_fan_out then refuse("fan_in_fan_out", c.fan_in_fan_out) end
  if c.lora_bias then refuse("lora_bias", c.lora_bias) end
  for _, k in ipairs({"rank_pattern", "alpha_pattern"}) do
    if type(c[k]) == "table" and next(c[k]) ~= nil then refuse(k, c[k]) end
  end
  if type(c.modules_to_save) == "table" and #c.modules_to_save > 0 then refuse("modules_to_save", c.modules_to_save) end
  for _, k in ipairs({"layers_to_transform", "layer_replication", "exclude_modules", "target_parameters",
                      "trainable_token_indices", "alora_invocation_tokens"}) do
    if c[k] ~= nil and not (type(c[k]) == "table" and next(c[k]) == nil) then refuse(k, c[k]) end
  end
  if c.use_qalora then refuse("use_qalora", c.use_qalora) end
  if type(c.target_modules) == "string" then refuse("target_modules (a regular expression)", c.target_modules) end
  if type(c.target_modules) ~= "table" or #c.target_modules == 0 then
    fail("%s: target_modules must be a non-empty list of names", path)
  end
  if math.type(c.r) ~= "integer" or c.r < 1 then fail("%s: r must be a positive integer, got %s", path, tostring(c.r)) end
  local alpha = c.lora_alpha or 8
  if type(alpha) ~= "number" or alpha <= 0 then fail("%s: lora_alpha must be a positive number, got %s", path, tostring(alpha)) end
  local p = c.lora_dropout or 0
  if type(p) ~= "number" or not (p >= 0 and p < 1) then fail("%s: lora_dropout must be in [0, 1), got %s", path, tostring(p)) end
  return {r = c.r, alpha = alpha, dropout = p, rslora = c.use_rslora == true, target_modules = c.target_modules,
          base_model_name_or_path = c.base_model_name_or_path}
end

-- load(model, dir): PEFT's adapter folder into the model. A model without
-- adapters gets them first (nn.lora.apply with the file's r, alpha, dropout and
-- target_modules); every adapter must come from the file and every tensor of
-- the file must be an adapter's. Returns the model and the config.
function lora.load(model, dir)
  local fn = "nn.lora.load"
  if type(model) ~= "table" or not model.named_modules then error(fn .. ": argument 1 must be a module", 2) end
  if type(dir) ~= "string" then error(fn .. ": dir must be a folder name, got " .. type(dir), 2) end
  local c = lora.config(dir)
  local path = dir .. "/adapter_model.safetensors"
  local f = io.open(path, "rb")
  if not f then
    local bin = io.open(dir .. "/adapter_model.bin", "rb")
    if bin then bin:close(); fail("%s: missing (adapter_model.bin, a pickle, is not read: save with safe_serialization)", path) end
    fail("%s: missing", path)
  end
  f:close()
  local ok, ts = pcall(zorch.load, path)
  if not ok then fail("%s: %s", path, tostring(ts):gsub("\n", " ")) end
  if #adapters(model) == 0 then
    local ok2, e = pcall(lora.apply, model, {r = c.r, alpha = c.alpha, dropout = c.dropout, rslora = c.rslora,
                                             target_modules = c.target_modules})
    if not ok2 then fail("%s: %s", dir .. "/adapter_config.json", tostring(e):gsub("^[^:]*:%d+: ", "")) end
  end
  local dst = {} -- PEFT name -> {adapter, "lora_A" or "lora_B", the whole layer's shape}
  for _, e in ipairs(adapters(model)) do
    local m = e[2]
    if m.r ~= c.r then fail("%s: r %d, the model's adapter %s has r %d", dir .. "/adapter_config.json", c.r, e[1], m.r) end
    dst[PREFIX .. e[1] .. ".lora_A.weight"] = {m, "lora_A", ("(%d, %d)"):format(m.r, m.in_features)}
    dst[PREFIX .. e[1] .. ".lora_B.weight"] = {m, "lora_B", ("(%d, %d)"):format(m.out_features, m.r)}
  end
  local names = {}
  for k in pairs(ts) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do
    local t, d = ts[k], dst[k:gsub("%.default%.weight$", ".weight")]
    if not d then fail("%s: %s is no adapter of the model", path, k) end
    if not zorch.is_tensor(t) then fail("%s: %s is not a tensor", path, k) end
    if shape_str(t) ~= d[3] then fail("%s: %s has shape %s, the model's is %s", path, k, shape_str(t), d[3]) end
  end
  local provided = {}
  for _, k in ipairs(names) do provided[(k:gsub("%.default%.weight$", ".weight"))] = true end
  local missing = {}
  for k in pairs(dst) do if not provided[k] then missing[#missing + 1] = k end end
  table.sort(missing)
  if #missing > 0 then
    fail("%s: no tensor %s%s", path, missing[1], #missing > 1 and (" (nor %d more)"):format(#missing - 1) or "")
  end
  zorch.no_grad(function()
    for _, k in ipairs(names) do
      local d = dst[k:gsub("%.default%.weight$", ".weight")]
      local p = d[1][d[2]]
      p:copy_(d[1]:_slice(d[2], ts[k]):to(p:dtype()):to(p:device()))
    end
  end)
  return model, c
end

return lora
