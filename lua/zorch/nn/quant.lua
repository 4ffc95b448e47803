-- zorch.nn.quant: weight-only quantisation for inference (docs/quantization.md).
--   zorch.quantize(w, {bits = 8 | 4, group = 32})  q, scales of a weight (out, in)
--   zorch.dequantize(q, scales)                     the float32 weight back (the C op)
--   nn.QuantLinear(in, out, {bits, group, bias})    a linear layer over q and scales
--   nn.QuantLinear.from(linear, {bits, group})      one made from an nn.Linear
--   nn.quantize(model, {bits, group, skip})         every nn.Linear replaced, names kept
--   nn.quantization_config(model)                   the config.json entry of a quantised model
-- A QuantLinear's state is the buffers `qweight` (int8 (out, in), or uint8
-- (out, in / 2) for 4 bits), `scales` (float16 (out) or (out, in / group)) and
-- `bias`: `q_proj.weight` becomes `q_proj.qweight` and `q_proj.scales`.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, check_int, read_opts = M.Module, M.check_int, M.read_opts

local function is_bits(v) return v == 8 or v == 4 end
local function is_group(v) return v == nil or (math.type(v) == "integer" and v > 0 and v % 32 == 0) end
local QSPEC = {bits = {8, is_bits, "8 or 4"}, group = {nil, is_group, "nil or a positive multiple of 32"}}

-- the options read once: bits, and the group (nil for 8 bits, 32 by default for 4)
local function qopts(fn, opts, level)
  local o = read_opts(fn, opts, QSPEC, level + 1)
  if o.bits == 8 and o.group ~= nil then
    error(("%s: int8 has one scale per output row: group must be nil, got %d"):format(fn, o.group), level)
  end
  if o.bits == 4 then o.group = o.group or 32 end
  return o
end

function zorch.quantize(w, opts)
  if not zorch.is_tensor(w) then error("quantize: w must be a tensor, got " .. type(w), 2) end
  local o = qopts("quantize", opts, 2)
  return zorch._quantize(w, o.bits, o.group or 0)
end

nn.QuantLinear = Module:extend "nn.QuantLinear"
-- QuantLinear(in_features, out_features, {bits = 8, group = nil | 32, bias = true}):
-- zero buffers of the format, to load a quantised state dict into.
function nn.QuantLinear:init(in_features, out_features, opts)
  local fn = "nn.QuantLinear"
  check_int(fn, "in_features", in_features)
  check_int(fn, "out_features", out_features)
  local bias = opts and opts.bias
  local o = qopts(fn, opts and {bits = opts.bits, group = opts.group}, 3)
  if bias ~= nil and type(bias) ~= "boolean" then error(fn .. ": bias must be true or false, got " .. type(bias), 3) end
  if o.bits == 4 and in_features % o.group ~= 0 then
    error(("%s: in_features %d is not a multiple of the group %d"):format(fn, in_features, o.group), 3)
  end
  self.in_features, self.out_features, self.bits, self.group = in_features, out_features, o.bits, o.group
  if o.bits == 8 then
    self:register_buffer("qweight", zorch.zeros({out_features, in_features}, {dtype = "int8"}))
    self:register_buffer("scales", zorch.zeros({out_features}, {dtype = "float16"}))
  else
    self:register_buffer("qweight", zorch.zeros({out_features, in_features // 2}, {dtype = "uint8"}))
    self:register_buffer("scales", zorch.zeros({out_features, in_features // o.group}, {dtype = "float16"}))
  end
  if bias ~= false then self:register_buffer("bias", zorch.zeros(out_features)) end
end

-- from(linear, {bits, group}): linear's weight quantised, its bias kept (float32)
function nn.QuantLinear.from(linear, opts)
  local fn = "nn.QuantLinear.from"
  M.need_plain_linear(fn, linear, "cannot be quantised", 2)
  local o = qopts(fn, opts, 2)
  local w, b = linear.weight, rawget(linear, "bias")
  if o.bits == 4 and w.shape[2] % o.group ~= 0 then
    error(("%s: in_features %d is not a multiple of the group %d"):format(fn, w.shape[2], o.group), 2)
  end
  local q = nn.QuantLinear(w.shape[2], w.shape[1], {bits = o.bits, group = o.group, bias = b ~= nil})
  local qw, s = zorch.no_grad(function() return zorch.quantize(w:detach(), o) end)
  rawset(q, "qweight", qw)
  rawset(q, "scales", s)
  if b then rawset(q, "bias", b:detach():float()) end
  return q
end

function nn.QuantLinear:forward(x)
  return zorch.qlinear(x, self.qweight, self.scales, rawget(self, "bias"))
end
-- the float32 weight it computes with
function nn.QuantLinear:dequantized_weight() return zorch.dequantize(self.qweight, self.scales) end
nn.QuantLinear.__tostring = function(s)
  return ("nn.QuantLinear(in_features=%d, out_features=%d, bits=%d%s)"):format(s.in_features, s.out_features, s.bits,
    s.group and (", group=" .. s.group) or "")
end

-- the module name matches a skip pattern (Lua patterns, anchored by the caller's choice)
local function skipped(name, skip)
  for _, p in ipairs(skip) do if name:match(p) then return true end end
  return false
end

-- quantize(model, {bits = 8, group = nil | 32, skip = {patterns}, weights = true}):
-- every nn.Linear whose name matches no pattern of skip becomes an
-- nn.QuantLinear in its place (its names kept); weights = false makes zero
-- buffers instead, for a quantised state dict or folder to load into. A
-- model's tied head is quantised as its own tensor. Returns the model and the
-- names replaced; the settings are kept for nn.quantization_config.
function nn.quantize(model, opts)
  local fn = "nn.quantize"
  if type(model) ~= "table" or not model.named_modules then error(fn .. ": argument 1 must be a module", 2) end
  if opts ~= nil and type(opts) ~= "table" then error(fn .. ": options must be a table, got " .. type(opts), 2) end
  local skip = (opts or {}).skip or {}
  if type(skip) ~= "table" then error(fn .. ": skip must be a list of name patterns, got " .. type(skip), 2) end
  for i, p in ipairs(skip) do
    if type(p) ~= "string" then error(("%s: skip[%d] must be a pattern (string), got %s"):format(fn, i, type(p)), 2) end
  end
  local o = qopts(fn, opts and {bits = opts.bits, group = opts.group}, 2)
  local weights = (opts or {}).weights
  if weights ~= nil and type(weights) ~= "boolean" then error(fn .. ": weights must be true or false, got " .. type(weights), 2) end
  if rawget(model, "_quantization") then error(fn .. ": the model is already quantised", 2) end
  local todo = {}
  for name, m in model:named_modules() do
    for _, k in ipairs(m._order) do
      local child = rawget(m, k)
      local full = name == "" and k or (name .. "." .. k)
      if m._children[k] and getmetatable(child) == nn.Linear and not skipped(full, skip) then
        todo[#todo + 1] = {m, k, child, full}
      end
    end
  end
  local made = {} -- (all made before any is put in: a failure leaves the model as it was)
  for i, t in ipairs(todo) do
    local l = t[3]
    local ok, q
    if weights == false then
      ok, q = pcall(nn.QuantLinear, l.in_features, l.out_features, {bits = o.bits, group = o.group,
                    bias = rawget(l, "bias") ~= nil})
    else
      ok, q = pcall(nn.QuantLinear.from, l, o)
    end
    if not ok then error(("%s: %s: %s (skip it, or choose another group)"):format(fn, t[4],
      tostring(q):gsub("^[^:]*:%d+: ", "")), 2) end
    made[i] = q
  end
  local names = {}
  for i, t in ipairs(todo) do
    t[1][t[2]] = made[i] -- (the key exists: a plain assignment keeps the child's place)
    names[#names + 1] = t[4]
  end
  rawset(model, "_quantization", {bits = o.bits, group = o.group, skip = skip, modules = names})
  return model, names
end

-- The config.json entry of a model nn.quantize made (docs/quantization.md), or nil.
function nn.quantization_config(model)
  local q = type(model) == "table" and rawget(model, "_quantization")
  if not q then return nil end
  local skip = {}
  for i, p in ipairs(q.skip) do skip[i] = p end
  return {quant_method = "zorch", bits = q.bits, group_size = q.group or -1, sym = true, scale_dtype = "float16",
          skip = #skip > 0 and skip or nil, version = 1}
end

-- The options of nn.quantize from a config.json entry (checked), for loading.
function nn.quantization_options(cfg, where)
  where = where or "quantization_config"
  if type(cfg) ~= "table" or cfg.quant_method ~= "zorch" then
    error(("%s: quant_method must be \"zorch\", got %s"):format(where, tostring(type(cfg) == "table" and cfg.quant_method or cfg)), 2)
  end
  if cfg.version ~= 1 then error(("%s: version %s is not 1"):format(where, tostring(cfg.version)), 2) end
  local group = cfg.group_size
  if group == -1 then group = nil end
  local ok, err = pcall(qopts, where, {bits = cfg.bits, group = group}, 1)
  if not ok then error(tostring(err), 2) end
  if cfg.skip ~= nil and type(cfg.skip) ~= "table" then error(where .. ": skip must be a list of patterns", 2) end
  return {bits = cfg.bits, group = group, skip = cfg.skip or {}}
end
