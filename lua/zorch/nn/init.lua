-- zorch.nn: modules written in Lua over the C ops. A module defines `init` and
-- `forward`; autograd does the rest. Parameter names follow PyTorch
-- (`fc1.weight`), so state dicts move through safetensors files both ways.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = {}

local check_options = zorch._require("zorch.util").check_options

local function class_call(cls, ...)
  local self = setmetatable({_order = {}, _children = {}, _params = {}, _buffers = {}, training = true}, cls)
  self:init(...)
  return self
end

-- Base of every module.
local Module = {__name = "nn.Module"}
Module.__index = Module
nn.Module = Module

-- nn.Module:extend "Name" makes a subclass; calling it makes an instance.
function Module:extend(name)
  if type(name) ~= "string" then error("Module:extend: expected a class name (string)", 2) end
  local cls = {__name = name}
  cls.__index = cls
  -- metamethods are not inherited through __index: copy them down
  for _, k in ipairs({"__call", "__newindex", "__tostring"}) do cls[k] = self[k] end
  return setmetatable(cls, {__index = self, __call = class_call})
end

function Module:init() end

function Module:forward()
  error(("%s: forward is not defined"):format(getmetatable(self).__name), 2)
end

Module.__call = function(self, ...) return self:forward(...) end

-- nn.Parameter(t, false): parameters made without requires_grad (weak keys).
local FROZEN_PARAM = setmetatable({}, {__mode = "k"})

-- Assigning a module, or a leaf tensor that requires grad (an nn.Parameter),
-- registers it, in order; a computed tensor (an activation kept in forward)
-- is a plain field.
Module.__newindex = function(self, k, v)
  if type(k) == "string" then
    if type(v) == "table" and getmetatable(v) and rawget(v, "_order") then
      self._children[k] = true
      table.insert(self._order, k)
    elseif zorch.is_tensor(v) and v.is_leaf and (v.requires_grad or FROZEN_PARAM[v]) then
      self._params[k] = true
      table.insert(self._order, k)
    end
  end
  rawset(self, k, v)
end

Module.__tostring = function(self)
  local lines = {getmetatable(self).__name .. "("}
  for _, k in ipairs(self._order) do
    if self._children[k] then
      lines[#lines + 1] = "  (" .. k .. "): " .. tostring(self[k]):gsub("\n", "\n  ")
    end
  end
  if #lines == 1 then return lines[1] .. ")" end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- Marks a tensor as a parameter (a leaf that requires grad); with
-- requires_grad false, a parameter that is not trained (PyTorch's
-- Parameter(t, requires_grad=False)): registered, saved and loaded.
function nn.Parameter(t, requires_grad)
  if not zorch.is_tensor(t) then error("nn.Parameter: expected a tensor", 2) end
  if requires_grad ~= nil and type(requires_grad) ~= "boolean" then
    error("nn.Parameter: requires_grad must be a boolean, got " .. type(requires_grad), 2)
  end
  if not t.is_leaf then error("nn.Parameter: the tensor must be a leaf (made by " .. tostring(t.grad_fn) ..
    "); pass its detach()", 2) end
  if requires_grad == false then
    if t.requires_grad then t:requires_grad_(false) end
    FROZEN_PARAM[t] = true
  elseif not t.requires_grad then
    t:requires_grad_(true)
  end
  return t
end

-- Visits (name, tensor) for every parameter, depth first in registration order.
-- A module is not entered again below itself (a child holding its parent), so
-- cycles end; with `seen`, a tensor met before (a tied weight) is skipped, as
-- PyTorch's named_parameters does; without it every name is listed (state dicts).
local function each_param(m, prefix, out, seen, path, kinds)
  path = path or {}
  kinds = kinds or "_params"
  path[m] = true
  for _, k in ipairs(m._order) do
    local v = rawget(m, k)
    if (m._params[k] and kinds ~= "_buffers" or rawget(m, "_buffers") and m._buffers[k] and kinds ~= "_params")
       and v ~= nil then
      if not (seen and seen[v]) then
        if seen then seen[v] = true end
        out[#out + 1] = {prefix .. k, v}
      end
    elseif m._children[k] and v ~= nil and not path[v] then
      each_param(v, prefix .. k .. ".", out, seen, path, kinds)
    end
  end
  path[m] = nil
  return out
end
-- The buffers (kinds "_buffers") or parameters and buffers together ("both"),
-- in registration order, every name listed.
local function each_buffer(m, kinds) return each_param(m, "", {}, nil, nil, kinds or "_buffers") end

-- Calls fn(module) once for m and each module below it, parents first; a
-- module reached twice (shared, or a reference back to a parent) is visited once.
local function each_module(m, fn, seen)
  seen = seen or {}
  if seen[m] then return end
  seen[m] = true
  fn(m)
  for _, k in ipairs(m._order) do
    local v = rawget(m, k)
    if m._children[k] and v ~= nil then each_module(v, fn, seen) end
  end
end

-- Each parameter once (the first name of a tied one).
-- an iterator over a list of {name, tensor}, and the list of its tensors
local function iter_named(list)
  local i = 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end
local function tensors_of(list)
  local ts = {}
  for _, e in ipairs(list) do ts[#ts + 1] = e[2] end
  return ts
end

function Module:named_parameters() return iter_named(each_param(self, "", {}, {})) end
function Module:parameters() return tensors_of(each_param(self, "", {}, {})) end

-- Buffers: tensors a module keeps in its state dict that are not parameters
-- (BatchNorm's running statistics): they never get gradients, and neither
-- optimizers nor the ZeRO engine see them (parameters() leaves them out).
-- register_buffer(name, nil) reserves the name, as PyTorch's None buffer.
function Module:register_buffer(name, t)
  local cls = getmetatable(self).__name
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error(("%s:register_buffer: name must be a non-empty string without '.', got %s"):format(cls, tostring(name)), 2)
  end
  if t ~= nil and not zorch.is_tensor(t) then
    error(("%s:register_buffer: '%s' must be a tensor or nil, got %s"):format(cls, name, type(t)), 2)
  end
  if self._params[name] or self._children[name] then
    error(("%s:register_buffer: '%s' is already a parameter or a module"):format(cls, name), 2)
  end
  if t ~= nil and t.requires_grad then t = t:detach() end
  if not rawget(self, "_buffers") then rawset(self, "_buffers", {}) end
  if not self._buffers[name] then
    self._buffers[name] = true
    table.insert(self._order, name)
  end
  rawset(self, name, t)
  return t
end

function Module:named_buffers() return iter_named(each_buffer(self)) end
function Module:buffers() return tensors_of(each_buffer(self)) end

local function is_device(where) return where == "cpu" or where:match("^cuda") ~= nil end

-- Moves (or converts) every parameter: m:to("cuda"), m:to("bfloat16"). The
-- parameters are new leaves, so build the optimizer after moving the model.
function Module:to(where)
  if type(where) ~= "string" then
    error(("%s:to: expected a device or dtype name (string), got %s"):format(getmetatable(self).__name,
      type(where)), 2)
  end
  local moved = {} -- a tied parameter stays one tensor
  local device = is_device(where)
  local function move(m)
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._params[k] and v ~= nil then
        moved[v] = moved[v] or v:detach():to(where):requires_grad_(true)
        rawset(m, k, moved[v])
      elseif rawget(m, "_buffers") and m._buffers[k] and v ~= nil then
        -- buffers follow a device; a dtype converts only the floating-point
        -- ones (num_batches_tracked stays int64), as in PyTorch
        local dt = v:dtype()
        if device or dt:match("^b?float") then
          moved[v] = moved[v] or v:to(where)
          rawset(m, k, moved[v])
        end
      end
    end
  end
  local ok, err = pcall(each_module, self, move)
  if not ok then
    error(("%s:to: %s"):format(getmetatable(self).__name, tostring(err):gsub("^[^:]*:%d+: ", "")), 2)
  end
  return self
end

function Module:children()
  local cs = {}
  for _, k in ipairs(self._order) do
    if self._children[k] then cs[#cs + 1] = rawget(self, k) end
  end
  return cs
end

-- Every module of the tree once, this one first (PyTorch's modules()), and
-- with their dotted names ("" for this one); apply(fn) calls fn on each.
local function each_named_module(self)
  local list = {}
  local function walk(m, prefix, seen)
    if seen[m] then return end
    seen[m] = true
    list[#list + 1] = {prefix, m}
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._children[k] and v ~= nil then walk(v, prefix == "" and k or (prefix .. "." .. k), seen) end
    end
  end
  walk(self, "", {})
  return list
end
function Module:named_modules() return iter_named(each_named_module(self)) end
function Module:modules() return tensors_of(each_named_module(self)) end
function Module:apply(fn)
  if type(fn) ~= "function" then error("Module:apply: expected a function, got " .. type(fn), 2) end
  for _, m in ipairs(self:modules()) do fn(m) end
  return self
end
-- requires_grad_(on = true) on every parameter: false freezes the module
function Module:requires_grad_(on)
  if on == nil then on = true end
  if type(on) ~= "boolean" then error("Module:requires_grad_: expected a boolean, got " .. type(on), 2) end
  for _, p in ipairs(self:parameters()) do p.requires_grad = on end
  return self
end

function Module:train(on)
  if on == nil then on = true end
  each_module(self, function(m) rawset(m, "training", on) end)
  return self
end

function Module:eval() return self:train(false) end

function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end

-- A state dict prints one tensor a line: name, shape, dtype (and device
-- when not the CPU), in the model's order; names added later come last.
local function state_dict_tostring(sd)
  local names, seen = {}, {}
  for _, k in ipairs(getmetatable(sd).order) do
    if sd[k] ~= nil then names[#names + 1], seen[k] = k, true end
  end
  local extra = {}
  for k in pairs(sd) do if not seen[k] then extra[#extra + 1] = tostring(k) end end
  table.sort(extra)
  table.move(extra, 1, #extra, #names + 1, names)
  local shapes, wn, ws, numel = {}, 0, 0, 0
  for i, k in ipairs(names) do
    local t = sd[k]
    shapes[i] = zorch.is_tensor(t) and tostring(t.shape) or tostring(t)
    wn, ws = math.max(wn, #k), math.max(ws, #shapes[i])
  end
  local lines = {}
  for i, k in ipairs(names) do
    local t, line = sd[k], ("  %-" .. wn .. "s  %s"):format(k, shapes[i])
    if zorch.is_tensor(t) then
      local dev = t:device()
      line = ("%-" .. (wn + ws + 4) .. "s  %s%s"):format(line, t:dtype(), dev == "cpu" and "" or " " .. dev)
      numel = numel + t:numel()
    end
    lines[i] = line
  end
  table.insert(lines, 1, ("state_dict (%d tensor%s, %d elements)%s"):format(#names, #names == 1 and "" or "s",
    numel, #names > 0 and ":" or ""))
  return table.concat(lines, "\n")
end

function Module:state_dict()
  local engine = rawget(self, "_engine") -- ZeRO stage 3 holds slices: gather first
  if engine then engine:gather() end
  local sd, order = {}, {}
  for _, p in ipairs(each_param(self, "", {}, nil, nil, "both")) do
    -- under stage 3 the gathered pages go back after this: keep copies
    sd[p[1]] = engine and p[2]:detach():clone() or p[2]:detach()
    order[#order + 1] = p[1]
  end
  if engine then engine:release() end
  return setmetatable(sd, {__tostring = state_dict_tostring, order = order})
end

-- Copies tensors into the parameters; every missing or unexpected name, and
-- every shape mismatch, is an error unless strict is false. Everything is
-- checked before anything is written (or gathered, under ZeRO stage 3).
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" then error("load_state_dict: expected a table of tensors, got " .. type(sd), 2) end
  if strict == nil then strict = true end
  local seen, missing, todo = {}, {}, {}
  for _, p in ipairs(each_param(self, "", {}, nil, nil, "both")) do
    local name, param = p[1], p[2]
    local t = sd[name]
    if t == nil then
      missing[#missing + 1] = name
    elseif not zorch.is_tensor(t) then
      error(("load_state_dict: '%s' is a %s in the state dict, not a tensor"):format(name, type(t)), 2)
    else
      seen[name] = true
      local a, b = table.concat(param.shape, ", "), table.concat(t.shape, ", ")
      if a ~= b then
        error(("load_state_dict: '%s' has shape (%s) in the model but (%s) in the state dict"):format(name, a, b), 2)
      end
      todo[#todo + 1] = name
    end
  end
  if strict then
    local unexpected = {}
    for k in pairs(sd) do if not seen[k] then unexpected[#unexpected + 1] = tostring(k) end end
    table.sort(unexpected)
    if #missing > 0 or #unexpected > 0 then
      error(("load_state_dict: missing keys {%s}, unexpected keys {%s}"):format(
        table.concat(missing, ", "), table.concat(unexpected, ", ")), 2)
    end
  end
  local engine = rawget(self, "_engine")
  if engine then engine:gather() end
  local params = {}
  for _, p in ipairs(each_param(self, "", {}, nil, nil, "both")) do params[p[1]] = p[2] end
  local ok, err = pcall(zorch.no_grad, function()
    for _, name in ipairs(todo) do
      params[name]:copy_(sd[name])
      zorch._deferred_done(params[name]) -- (a deferred parameter keeps the loaded values)
    end
  end)
  if engine then
    if ok then engine:sync_shard() end
    engine:release()
  end
  if not ok then error(err, 0) end
  return self
end

local function check_int(fn, name, v)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), 3)
  end
end

-- Deferred initialisation (DeepSpeed's zero.Init, for models larger than
-- memory): inside nn.deferred(fn), Linear's parameters are made without
-- their values (memory the system has not handed out yet) and remember how
-- to fill them; Engine:prepare fills each one where it then lives (at
-- stage 3 with offload_param on nvme, one group at a time, straight into the
-- file), and nn.materialize(module) fills them in place. Either way each one
-- draws from the generator in the order they were made, as without deferral.
local DEFERRED = setmetatable({}, {__mode = "k"}) -- parameter -> function(t) filling t
local deferring = 0
function nn.deferred(fn)
  if type(fn) ~= "function" then error("nn.deferred: expected a function that builds the model", 2) end
  deferring = deferring + 1
  local r = table.pack(pcall(fn))
  deferring = deferring - 1
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end
-- the fill of a deferred parameter (nil once filled, or for others)
function zorch._deferred_init(p) return DEFERRED[p] end
function zorch._deferred_done(p) DEFERRED[p] = nil end
function nn.materialize(module)
  for _, p in ipairs(module:parameters()) do
    local fill = DEFERRED[p]
    if fill then zorch.no_grad(function() fill(p) end); DEFERRED[p] = nil end
  end
  return module
end

-- U(-bound, bound), as torch.nn.init.kaiming_uniform_(a = sqrt(5)) gives Linear.
local function uniform(shape, bound)
  if deferring > 0 then
    local p = nn.Parameter(zorch.empty(shape))
    DEFERRED[p] = function(t) t:copy_(zorch.rand(shape) * (2 * bound) - bound) end
    return p
  end
  return nn.Parameter(zorch.rand(shape) * (2 * bound) - bound)
end

nn.Linear = Module:extend "nn.Linear"
-- opts: bias = false; activation = "relu" fuses a ReLU into the layer (one GEMM
-- with a bias and relu epilogue on the GPU), "gelu" or "gelu_tanh" a GELU (one
-- autograd node with the GEMM).
function nn.Linear:init(in_features, out_features, opts)
  check_int("nn.Linear", "in_features", in_features)
  check_int("nn.Linear", "out_features", out_features)
  local act = opts and opts.activation
  if act ~= nil and act ~= "relu" and act ~= "gelu" and act ~= "gelu_tanh" then
    error(("nn.Linear: activation must be \"relu\", \"gelu\", \"gelu_tanh\" or nil, got %s"):format(tostring(act)), 3)
  end
  local bound = 1 / math.sqrt(in_features)
  self.in_features, self.out_features = in_features, out_features
  rawset(self, "activation", act)
  self.weight = uniform({out_features, in_features}, bound)
  if not (opts and opts.bias == false) then self.bias = uniform({out_features}, bound) end
end
function nn.Linear:forward(x)
  return zorch.linear(x, self.weight, rawget(self, "bias"), rawget(self, "activation"))
end
nn.Linear.__tostring = function(s)
  return ("nn.Linear(in_features=%d, out_features=%d%s)"):format(s.in_features, s.out_features,
    rawget(s, "activation") and (", activation=" .. s.activation) or "")
end

local function activation(name, fn)
  local cls = Module:extend(name)
  cls.forward = function(_, x) return fn(x) end
  return cls
end
nn.ReLU = activation("nn.ReLU", zorch.relu)
nn.Tanh = activation("nn.Tanh", zorch.tanh)
nn.Sigmoid = activation("nn.Sigmoid", zorch.sigmoid)
nn.SiLU = activation("nn.SiLU", zorch.silu)
nn.SELU = activation("nn.SELU", zorch.selu)
nn.ReLU6 = activation("nn.ReLU6", zorch.relu6)
nn.Hardsigmoid = activation("nn.Hardsigmoid", zorch.hardsigmoid)
nn.Hardswish = activation("nn.Hardswish", zorch.hardswish)
nn.Mish = activation("nn.Mish", zorch.mish)
nn.LogSigmoid = activation("nn.LogSigmoid", zorch.logsigmoid)
nn.Softsign = activation("nn.Softsign", zorch.softsign)
nn.Tanhshrink = activation("nn.Tanhshrink", zorch.tanhshrink)

-- An activation with numeric parameters: `names` in the constructor's order,
-- `defaults` PyTorch's; forward calls fn(x, the parameters...).
local function activation_p(name, fn, names, defaults)
  local cls = Module:extend(name)
  cls.init = function(self, ...)
    local args = table.pack(...)
    for i, k in ipairs(names) do
      local v = args[i]
      if v == nil then v = defaults[i] end
      if type(v) ~= "number" then
        error(("%s: %s must be a number, got %s"):format(name, k, type(v)), 3)
      end
      self[k] = v
    end
  end
  cls.forward = function(self, x)
    local p = {}
    for i, k in ipairs(names) do p[i] = self[k] end
    return fn(x, table.unpack(p, 1, #names))
  end
  cls.__tostring = function(self)
    local parts = {}
    for _, k in ipairs(names) do parts[#parts + 1] = ("%s=%s"):format(k, tostring(self[k])) end
    return ("%s(%s)"):format(name, table.concat(parts, ", "))
  end
  return cls
end
nn.LeakyReLU = activation_p("nn.LeakyReLU", zorch.leaky_relu, {"negative_slope"}, {0.01})
nn.ELU = activation_p("nn.ELU", zorch.elu, {"alpha"}, {1.0})
nn.CELU = activation_p("nn.CELU", zorch.celu, {"alpha"}, {1.0})
nn.Softplus = activation_p("nn.Softplus", zorch.softplus, {"beta", "threshold"}, {1.0, 20.0})
nn.Hardtanh = activation_p("nn.Hardtanh", zorch.hardtanh, {"min_val", "max_val"}, {-1.0, 1.0})

-- Identity(...): returns its input; the constructor's arguments are ignored (as PyTorch's).
nn.Identity = Module:extend "nn.Identity"
function nn.Identity:init() end
function nn.Identity:forward(x) return x end

nn.GELU = Module:extend "nn.GELU"
function nn.GELU:init(approximate) self.approximate = approximate end
function nn.GELU:forward(x) return zorch.gelu(x, self.approximate) end

nn.Dropout = Module:extend "nn.Dropout"
function nn.Dropout:init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then error("nn.Dropout: p must be in [0, 1]", 3) end
  self.p = p
end
function nn.Dropout:forward(x) return zorch.dropout(x, self.p, self.training) end

nn.Embedding = Module:extend "nn.Embedding"
-- Embedding(num, dim, {padding_idx}): as PyTorch, the padding row (1-based)
-- starts at zeros and never gets a gradient.
function nn.Embedding:init(num, dim, opts)
  check_int("nn.Embedding", "num_embeddings", num)
  check_int("nn.Embedding", "embedding_dim", dim)
  opts = check_options("nn.Embedding", opts, {"padding_idx"}, 4)
  local pad = opts.padding_idx
  if pad ~= nil then
    if math.type(pad) ~= "integer" or pad == 0 or pad > num or pad < -num then
      error(("nn.Embedding: padding_idx must be an integer in 1..%d or -%d..-1, got %s"):format(num, num, tostring(pad)), 3)
    end
    if pad < 0 then pad = num + 1 + pad end
  end
  self.padding_idx = pad
  local w = zorch.randn(num, dim)
  if pad then w[pad] = 0 end
  self.weight = nn.Parameter(w)
end
function nn.Embedding:forward(idx)
  local pad = rawget(self, "padding_idx")
  local out = zorch.embedding(self.weight, idx)
  if not pad or not zorch.is_grad_enabled() or not self.weight.requires_grad then return out end
  -- the padding positions read a detached weight: same values, no gradient to its row
  local at = idx:eq(zorch.full_like(idx, pad)):unsqueeze(-1)
  return zorch.where(at, zorch.embedding(self.weight:detach(), idx), out)
end

-- LayerNorm(shape, {eps = 1e-5, elementwise_affine = true, bias = true})
nn.LayerNorm = Module:extend "nn.LayerNorm"
function nn.LayerNorm:init(shape, opts)
  if type(shape) == "number" then shape = {shape} end
  opts = check_options("nn.LayerNorm", opts, {"eps", "elementwise_affine", "bias"}, 4)
  self.normalized_shape = shape
  self.eps = opts.eps or 1e-5
  if opts.elementwise_affine ~= false then
    self.weight = nn.Parameter(zorch.ones(shape))
    if opts.bias ~= false then self.bias = nn.Parameter(zorch.zeros(shape)) end
  end
end
function nn.LayerNorm:forward(x)
  return zorch.layer_norm(x, self.normalized_shape, rawget(self, "weight"), rawget(self, "bias"), self.eps)
end

-- ---- BatchNorm1d, BatchNorm2d -----------------------------------------------------------------

-- Batch normalisation over dim 2 (the channels): in training the batch's
-- statistics, which also update the running ones (buffers running_mean,
-- running_var, num_batches_tracked); in eval the running ones. opts: eps
-- (1e-5), momentum (0.1; false is PyTorch's None: a cumulative average over
-- the batches seen), affine (true: weight ones and bias zeros, learned),
-- track_running_stats (true; false: batch statistics in eval too).
-- A normalisation's learned weight and bias (where self.affine) and running
-- statistics (where self.track_running_stats), as PyTorch names them.
local function norm_state(self, num_features)
  if self.affine then
    self.weight = nn.Parameter(zorch.ones(num_features))
    self.bias = nn.Parameter(zorch.zeros(num_features))
  end
  if self.track_running_stats then
    self:register_buffer("running_mean", zorch.zeros(num_features))
    self:register_buffer("running_var", zorch.ones(num_features))
    self:register_buffer("num_batches_tracked", zorch.tensor(0))
  end
end

local function batch_norm_class(name, dims, expected)
  local cls = Module:extend(name)
  function cls:init(num_features, opts)
    check_int(name, "num_features", num_features)
    opts = check_options(name, opts, {"affine", "eps", "momentum", "track_running_stats"}, 4)
    local eps, momentum = opts.eps or 1e-5, opts.momentum
    if momentum == nil then momentum = 0.1 end
    if type(eps) ~= "number" or not (eps > 0) then error(("%s: eps must be a number > 0, got %s"):format(name, tostring(eps)), 3) end
    if momentum ~= false and (type(momentum) ~= "number" or not (momentum >= 0 and momentum <= 1)) then
      error(("%s: momentum must be a number in [0, 1] or false (a cumulative average), got %s"):format(name,
        tostring(momentum)), 3)
    end
    rawset(self, "num_features", num_features)
    rawset(self, "eps", eps)
    rawset(self, "momentum", momentum)
    rawset(self, "affine", opts.affine ~= false)
    rawset(self, "track_running_stats", opts.track_running_stats ~= false)
    norm_state(self, num_features)
  end
  -- Zeroes the running statistics (mean 0, variance 1, no batches seen).
  function cls:reset_running_stats()
    local rm = rawget(self, "running_mean")
    if rm then
      rm:fill_(0)
      self.running_var:fill_(1)
      self.num_batches_tracked:fill_(0)
    end
  end
  function cls:forward(x)
    if not zorch.is_tensor(x) then error(("%s: expected a tensor, got %s"):format(name, type(x)), 2) end
    if not dims[x:dim()] then
      error(("%s: expected %s input, got shape (%s)"):format(name, expected, table.concat(x.shape, ", ")), 2)
    end
    local rm, rv = rawget(self, "running_mean"), rawget(self, "running_var")
    local factor = self.momentum or 0.0
    if self.training and rm then
      local nbt = self.num_batches_tracked
      nbt:copy_(nbt + 1)
      if not self.momentum then factor = 1 / nbt:item() end
    end
    -- eval without running stats normalises with the batch's, as PyTorch does
    local use_batch = self.training or not rm
    local ok, y = pcall(zorch.batch_norm, x, rm, rv, rawget(self, "weight"), rawget(self, "bias"), use_batch,
      factor, self.eps)
    if not ok then error(("%s: %s"):format(name, tostring(y):gsub("^[^:]*:%d+: ", "")), 2) end
    return y
  end
  cls.__tostring = function(m)
    return ("%s(%d, eps=%s, momentum=%s, affine=%s, track_running_stats=%s)"):format(name, m.num_features,
      ("%g"):format(m.eps), m.momentum and ("%g"):format(m.momentum) or "None", m.affine and "True" or "False",
      m.track_running_stats and "True" or "False")
  end
  return cls
end
nn.BatchNorm1d = batch_norm_class("nn.BatchNorm1d", {[2] = true, [3] = true}, "2D or 3D (N, C) or (N, C, L)")
nn.BatchNorm2d = batch_norm_class("nn.BatchNorm2d", {[4] = true}, "4D (N, C, H, W)")

-- Children are named "0", "1", ... as in PyTorch, so state dicts match; errors
-- and the printout count modules from 1, as Lua does.
nn.Sequential = Module:extend "nn.Sequential"
function nn.Sequential:init(...)
  self.n = 0
  for i, m in ipairs({...}) do self:add(m) end
end
-- seq[i] (1-based, negative from the end) and #seq, as for nn.ModuleList
nn.Sequential.__index = function(self, k)
  if math.type(k) == "integer" then
    local n = rawget(self, "n") or 0
    if k < 0 then k = n + 1 + k end
    if k < 1 or k > n then return nil end
    return rawget(self, tostring(k - 1))
  end
  return nn.Sequential[k]
end
nn.Sequential.__len = function(self) return rawget(self, "n") or 0 end
function nn.Sequential:add(m)
  if type(m) ~= "table" or not rawget(m, "_order") then
    error(("nn.Sequential: module %d is not a module"):format(self.n + 1), 2)
  end
  self[tostring(self.n)] = m
  rawset(self, "n", self.n + 1)
  return self
end
nn.Sequential.__tostring = function(self)
  if self.n == 0 then return "nn.Sequential()" end
  local lines = {"nn.Sequential("}
  for i = 1, self.n do
    lines[i + 1] = ("  (%d): %s"):format(i, (tostring(rawget(self, tostring(i - 1))):gsub("\n", "\n  ")))
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end
function nn.Sequential:forward(x)
  for i = 1, self.n do
    local m = rawget(self, tostring(i - 1))
    local ok, res = pcall(m, x)
    if not ok then
      -- an error object that is not a string goes up as it is
      if type(res) ~= "string" then error(res, 0) end
      error(("%s\n  in module %d (%s) of nn.Sequential"):format(res, i, getmetatable(m).__name), 0)
    end
    x = res
  end
  return x
end

local function loss(name, fn, allowed)
  local cls = Module:extend(name)
  function cls:init(opts)
    local keys = {reduction = true}
    for k in pairs(allowed or {}) do keys[k] = true end
    opts = check_options(name, opts, keys, 4)
    local r = opts.reduction or "mean"
    if r ~= "mean" and r ~= "sum" and r ~= "none" then
      error(("%s: reduction must be 'mean', 'sum' or 'none', got '%s'"):format(name, tostring(r)), 3)
    end
    self.reduction = r
    self.opts = opts or {}
  end
  function cls:forward(input, target) return fn(self, input, target) end
  return cls
end
nn.MSELoss = loss("nn.MSELoss", function(s, a, b) return zorch.mse_loss(a, b, s.reduction) end)
nn.L1Loss = loss("nn.L1Loss", function(s, a, b) return zorch.l1_loss(a, b, s.reduction) end)
nn.CrossEntropyLoss = loss("nn.CrossEntropyLoss", function(s, x, t)
  return zorch.cross_entropy(x, t, {reduction = s.reduction, ignore_index = s.opts.ignore_index,
                                    weight = s.opts.weight, label_smoothing = s.opts.label_smoothing})
end, {ignore_index = true, weight = true, label_smoothing = true})

-- cross_entropy(logits, targets, {reduction, ignore_index, weight, label_smoothing}):
-- the fused kernel, or with class weights (C,) or label smoothing PyTorch's
-- formula composed from log_softmax: per sample (1 - e) * w[t] * -logp[t]
-- + e / C * sum_c w[c] * -logp[c], the mean divided by the sum of w[t] over
-- the samples not ignored.
local ce_fused = zorch.cross_entropy
local CE_KEYS = {reduction = true, ignore_index = true, weight = true, label_smoothing = true}
function zorch.cross_entropy(logits, targets, opts)
  if opts ~= nil and type(opts) ~= "table" then error("cross_entropy: argument 3 must be a table of options", 2) end
  opts = opts or {}
  for k in pairs(opts) do
    if not CE_KEYS[k] then
      error(("cross_entropy: unknown option '%s' (expected ignore_index, label_smoothing, reduction, weight)"):format(
        tostring(k)), 2)
    end
  end
  -- checked here: the kernel's binding would name itself, not cross_entropy
  local red, ii = rawget(opts, "reduction"), rawget(opts, "ignore_index")
  if red ~= nil and red ~= "mean" and red ~= "sum" and red ~= "none" then
    error(("cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", got %s"):format(
      type(red) == "string" and ("\"" .. red .. "\"") or tostring(red)), 2)
  end
  if ii ~= nil and math.tointeger(ii) == nil then
    error("cross_entropy: ignore_index must be an integer, got " .. tostring(ii), 2)
  end
  local w, eps = rawget(opts, "weight"), rawget(opts, "label_smoothing") or 0
  local fused = {reduction = rawget(opts, "reduction"), ignore_index = rawget(opts, "ignore_index")}
  if w == nil and eps == 0 then return ce_fused(logits, targets, fused) end
  if type(eps) ~= "number" or not (eps >= 0 and eps <= 1) then
    error("cross_entropy: label_smoothing must be a number from 0 to 1, got " .. tostring(eps), 2)
  end
  -- the fused kernel checks the shapes, dtypes and targets first
  local okc, err = pcall(ce_fused, zorch.is_tensor(logits) and logits:detach() or logits, targets,
                         {reduction = "none", ignore_index = fused.ignore_index})
  if not okc then error(err, 2) end
  local unbatched = logits:dim() == 1
  local lg = unbatched and logits:unsqueeze(1) or logits
  local tg = unbatched and targets:reshape({1}) or targets
  local C = lg:size(2)
  if w ~= nil and (not zorch.is_tensor(w) or w:dim() ~= 1 or w:size(1) ~= C) then
    error(("cross_entropy: weight must be a tensor of shape (%d), got %s"):format(C,
      zorch.is_tensor(w) and ("(" .. table.concat(w.shape, ", ") .. ")") or type(w)), 2)
  end
  local ignored = tg:eq(zorch.full_like(tg, fused.ignore_index or -100))
  local valid = (1 - ignored:to(lg:dtype()))                                -- (N,)
  local safe = zorch.where(ignored, zorch.ones_like(tg), tg)                -- (N,), a class for the ignored
  local logp = zorch.log_softmax(lg, 2)                                      -- (N, C)
  local wt = w and w:to(lg:dtype()):index_select(1, safe) * valid or valid -- (N,)
  local per = -logp:gather(2, safe:unsqueeze(2)):squeeze(2) * wt * (1 - eps)
  if eps > 0 then
    local all = w and logp * w:to(lg:dtype()):unsqueeze(1) or logp
    per = per - all:sum(2) * valid * (eps / C)
  end
  -- an ignored sample gives 0 even when its logits hold an infinity or a NaN
  -- (0 * inf is NaN), as PyTorch masks it
  per = zorch.where(ignored, zorch.zeros_like(per), per)
  local r = fused.reduction or "mean"
  if r == "none" then return unbatched and per:reshape({}) or per end
  if r == "sum" then return per:sum() end
  return per:sum() / wt:sum()
end

-- ---- Flatten, Softmax, LogSoftmax ----------------------------------------------------------

-- A dim given to a module: a non-zero integer (1-based; negative counts from the end).
local function check_dim(fn, name, d)
  if math.type(d) ~= "integer" or d == 0 then
    error(("%s: %s must be a non-zero integer (dims count from 1, negative from the end), got %s"):format(
      fn, name, tostring(d)), 3)
  end
end

local function shape_str(t) return "(" .. table.concat(t.shape, ", ") .. ")" end

-- Flattens dims start_dim..end_dim into one (defaults 2 and -1: all but the batch dim).
nn.Flatten = Module:extend "nn.Flatten"
function nn.Flatten:init(start_dim, end_dim)
  start_dim, end_dim = start_dim or 2, end_dim or -1
  check_dim("nn.Flatten", "start_dim", start_dim)
  check_dim("nn.Flatten", "end_dim", end_dim)
  self.start_dim, self.end_dim = start_dim, end_dim
end
function nn.Flatten:forward(x)
  if not zorch.is_tensor(x) then error(("nn.Flatten: expected a tensor, got %s"):format(type(x)), 2) end
  local n = x:dim()
  local s = self.start_dim < 0 and n + 1 + self.start_dim or self.start_dim
  local e = self.end_dim < 0 and n + 1 + self.end_dim or self.end_dim
  if s < 1 or e > n or s > e then
    error(("nn.Flatten: start_dim %d and end_dim %d do not fit an input of shape %s"):format(
      self.start_dim, self.end_dim, shape_str(x)), 2)
  end
  local shape, m = {}, 1
  for d = 1, s - 1 do shape[#shape + 1] = x.shape[d] end
  for d = s, e do m = m * x.shape[d] end
  shape[#shape + 1] = m
  for d = e + 1, n do shape[#shape + 1] = x.shape[d] end
  return x:reshape(shape)
end
nn.Flatten.__tostring = function(s)
  return ("nn.Flatten(start_dim=%d, end_dim=%d)"):format(s.start_dim, s.end_dim)
end

-- ---- convolution and pooling -------------------------------------------------
-- Sizes are a number or a pair {h, w}; the modules print them as PyTorch's repr
-- does (a number as given, a pair as (h, w)).
local function size_str(v)
  if type(v) == "table" then return ("(%s, %s)"):format(tostring(v[1]), tostring(v[2])) end
  return tostring(v)
end
local function pair_of(v) return type(v) == "table" and v or {v, v} end
local function check_size(fn, name, v, lo)
  local ok = math.type(v) == "integer" and v >= lo
  if type(v) == "table" then
    ok = #v == 2 and math.type(v[1]) == "integer" and math.type(v[2]) == "integer" and v[1] >= lo and v[2] >= lo
  end
  if not ok then
    error(("%s: %s must be %s integer or a pair {h, w} of them, got %s"):format(fn, name,
      lo > 0 and "a positive" or "a non-negative", type(v) == "table" and size_str(v) or tostring(v)), 4)
  end
end
local function check_opts(fn, opts, allowed) return check_options(fn, opts, allowed, 4) end -- (a tail call)

nn.Conv2d = Module:extend "nn.Conv2d"
-- opts: stride, padding, dilation (numbers or pairs), groups, bias = false.
-- weight (out, in / groups, kh, kw) and bias (out) are U(-1/sqrt(fan_in),
-- 1/sqrt(fan_in)), fan_in = in / groups * kh * kw, as PyTorch initialises them.
function nn.Conv2d:init(in_channels, out_channels, kernel_size, opts)
  local fn = "nn.Conv2d"
  opts = check_opts(fn, opts, {"stride", "padding", "dilation", "groups", "bias"})
  check_int(fn, "in_channels", in_channels)
  check_int(fn, "out_channels", out_channels)
  check_size(fn, "kernel_size", kernel_size, 1)
  local stride, padding, dilation = opts.stride or 1, opts.padding or 0, opts.dilation or 1
  check_size(fn, "stride", stride, 1)
  check_size(fn, "padding", padding, 0)
  check_size(fn, "dilation", dilation, 1)
  local groups = opts.groups or 1
  check_int(fn, "groups", groups)
  if in_channels % groups ~= 0 or out_channels % groups ~= 0 then
    error(("%s: groups %d must divide in_channels %d and out_channels %d"):format(fn, groups,
      in_channels, out_channels), 3)
  end
  local k = pair_of(kernel_size)
  self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
  self.kernel_size, self.stride, self.padding, self.dilation = {k[1], k[2]}, pair_of(stride), pair_of(padding), pair_of(dilation)
  local bound = 1 / math.sqrt(in_channels // groups * k[1] * k[2])
  self.weight = uniform({out_channels, in_channels // groups, k[1], k[2]}, bound)
  if opts.bias ~= false then self.bias = uniform({out_channels}, bound) end
end
function nn.Conv2d:forward(x)
  return zorch.conv2d(x, self.weight, rawget(self, "bias"), {stride = self.stride,
    padding = self.padding, dilation = self.dilation, groups = self.groups})
end
nn.Conv2d.__tostring = function(s)
  local t = {("nn.Conv2d(%d, %d, kernel_size=%s, stride=%s"):format(s.in_channels, s.out_channels,
    size_str(s.kernel_size), size_str(s.stride))}
  if s.padding[1] ~= 0 or s.padding[2] ~= 0 then t[#t + 1] = ", padding=" .. size_str(s.padding) end
  if s.dilation[1] ~= 1 or s.dilation[2] ~= 1 then t[#t + 1] = ", dilation=" .. size_str(s.dilation) end
  if s.groups ~= 1 then t[#t + 1] = ", groups=" .. s.groups end
  if not rawget(s, "bias") then t[#t + 1] = ", bias=False" end
  return table.concat(t) .. ")"
end

local function py_bool(b) return b and "True" or "False" end

nn.MaxPool2d = Module:extend "nn.MaxPool2d"
-- opts: stride (default: the kernel), padding, dilation, ceil_mode.
-- The options of a max or average pooling module of any rank, each size
-- checked by `check` (check_size here, lua/layers.lua's for 1-d); called in
-- tail position from init, so that errors point at the caller's line.
local function max_pool_init(self, fn, kernel_size, opts, check)
  opts = check_opts(fn, opts, {"stride", "padding", "dilation", "ceil_mode"})
  check(fn, "kernel_size", kernel_size, 1)
  self.kernel_size, self.stride = kernel_size, opts.stride or kernel_size
  self.padding, self.dilation, self.ceil_mode = opts.padding or 0, opts.dilation or 1, opts.ceil_mode == true
  check(fn, "stride", self.stride, 1)
  check(fn, "padding", self.padding, 0)
  check(fn, "dilation", self.dilation, 1)
end
local function avg_pool_init(self, fn, kernel_size, opts, check)
  opts = check_opts(fn, opts, {"stride", "padding", "ceil_mode", "count_include_pad"})
  check(fn, "kernel_size", kernel_size, 1)
  self.kernel_size, self.stride, self.padding = kernel_size, opts.stride or kernel_size, opts.padding or 0
  self.ceil_mode, self.count_include_pad = opts.ceil_mode == true, opts.count_include_pad ~= false
  check(fn, "stride", self.stride, 1)
  check(fn, "padding", self.padding, 0)
end

function nn.MaxPool2d:init(kernel_size, opts)
  return max_pool_init(self, "nn.MaxPool2d", kernel_size, opts, check_size)
end
function nn.MaxPool2d:forward(x)
  return zorch.max_pool2d(x, self.kernel_size, {stride = self.stride, padding = self.padding,
    dilation = self.dilation, ceil_mode = self.ceil_mode})
end
nn.MaxPool2d.__tostring = function(s)
  return ("nn.MaxPool2d(kernel_size=%s, stride=%s, padding=%s, dilation=%s, ceil_mode=%s)"):format(
    size_str(s.kernel_size), size_str(s.stride), size_str(s.padding), size_str(s.dilation), py_bool(s.ceil_mode))
end

nn.AvgPool2d = Module:extend "nn.AvgPool2d"
-- opts: stride (default: the kernel), padding, ceil_mode, count_include_pad (default true).
function nn.AvgPool2d:init(kernel_size, opts)
  return avg_pool_init(self, "nn.AvgPool2d", kernel_size, opts, check_size)
end
function nn.AvgPool2d:forward(x)
  return zorch.avg_pool2d(x, self.kernel_size, {stride = self.stride, padding = self.padding,
    ceil_mode = self.ceil_mode, count_include_pad = self.count_include_pad})
end
nn.AvgPool2d.__tostring = function(s)
  return ("nn.AvgPool2d(kernel_size=%s, stride=%s, padding=%s)"):format(size_str(s.kernel_size),
    size_str(s.stride), size_str(s.padding))
end

nn.AdaptiveAvgPool2d = Module:extend "nn.AdaptiveAvgPool2d"
function nn.AdaptiveAvgPool2d:init(output_size)
  check_size("nn.AdaptiveAvgPool2d", "output_size", output_size, 1)
  self.output_size = output_size
end
function nn.AdaptiveAvgPool2d:forward(x) return zorch.adaptive_avg_pool2d(x, self.output_size) end
nn.AdaptiveAvgPool2d.__tostring = function(s)
  return ("nn.AdaptiveAvgPool2d(output_size=%s)"):format(size_str(s.output_size))
end

local function softmax_module(name, fn)
  local cls = Module:extend(name)
  function cls:init(dim)
    check_dim(name, "dim", dim)
    self.dim = dim
  end
  function cls:forward(x) return fn(x, self.dim) end
  cls.__tostring = function(s) return ("%s(dim=%d)"):format(name, s.dim) end
  return cls
end
nn.Softmax = softmax_module("nn.Softmax", zorch.softmax)
nn.LogSoftmax = softmax_module("nn.LogSoftmax", zorch.log_softmax)

-- ---- ModuleList ------------------------------------------------------------------------------

-- A list of modules, registered as children "0", "1", ... (PyTorch's names, so
-- state dicts match); indexed from 1 in Lua: list[1] is child "0". It has no
-- forward: iterate over it (ipairs, #list) in the owner's forward.
nn.ModuleList = Module:extend "nn.ModuleList"
local ModuleList = nn.ModuleList
local function is_module(m) return type(m) == "table" and rawget(m, "_order") ~= nil end

function ModuleList:init(modules)
  rawset(self, "n", 0)
  if modules == nil then return end
  if type(modules) ~= "table" or is_module(modules) then
    error("nn.ModuleList: expected a list of modules ({m1, m2, ...}) or nothing", 3)
  end
  for i, m in ipairs(modules) do
    if not is_module(m) then error(("nn.ModuleList: item %d is a %s, not a module"):format(i, type(m)), 3) end
    self:append(m)
  end
end
function ModuleList:append(m)
  if not is_module(m) then
    error(("nn.ModuleList:append: expected a module, got %s"):format(type(m)), 2)
  end
  self[tostring(self.n)] = m
  rawset(self, "n", self.n + 1)
  return self
end
function ModuleList:forward()
  error("nn.ModuleList: a module list has no forward; iterate over it (ipairs) in the owner's forward", 2)
end
-- The __index of a list kept under the keys "0", "1", ... with its length in
-- field n (ModuleList, ParameterList): list[i] (1-based, negative from the
-- end); methods and fields of cls otherwise.
local function list_index(cls)
  return function(self, k)
    if math.type(k) == "integer" then
      local n = rawget(self, "n")
      if k < 0 then k = n + 1 + k end
      if k < 1 or k > n then return nil end
      return rawget(self, tostring(k - 1))
    end
    return cls[k]
  end
end
ModuleList.__index = list_index(ModuleList)
-- list[i] = m replaces module i; list[#list + 1] = m appends
ModuleList.__newindex = function(self, k, v)
  if math.type(k) == "integer" then
    local n = rawget(self, "n")
    if not is_module(v) then error(("nn.ModuleList: item %d must be a module, got %s"):format(k, type(v)), 2) end
    if k == n + 1 then return self:append(v) end
    if k < 1 or k > n then
      error(("nn.ModuleList: index %d out of range for a list of %d modules (1-based)"):format(k, n), 2)
    end
    rawset(self, tostring(k - 1), v)
    return
  end
  Module.__newindex(self, k, v)
end
ModuleList.__len = function(self) return rawget(self, "n") end

-- nn.ModuleDict{name = module, ...}: children named by their keys (in sorted
-- order: a Lua table has none of its own), so state-dict names are
-- "name.weight" as PyTorch's; dict.name or dict["name"] reads one,
-- dict:set(name, m) adds or replaces one, dict:keys() lists them, and
-- dict:items() walks (name, module) pairs in order.
nn.ModuleDict = Module:extend "nn.ModuleDict"
local ModuleDict = nn.ModuleDict
local RESERVED = {training = true, n = true}
function ModuleDict:init(modules)
  if modules == nil then return end
  if type(modules) ~= "table" or is_module(modules) then
    error("nn.ModuleDict: expected a table of modules ({name = m, ...}) or nothing", 3)
  end
  local keys = {}
  for k in pairs(modules) do keys[#keys + 1] = k end
  for _, k in ipairs(keys) do
    if type(k) ~= "string" then error(("nn.ModuleDict: keys must be strings, got %s"):format(type(k)), 3) end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local ok, err = pcall(self.set, self, k, modules[k])
    if not ok then error(err, 3) end
  end
end
function ModuleDict:set(k, m)
  if type(k) ~= "string" or k == "" or k:find("%.") or k:sub(1, 1) == "_" or RESERVED[k] or ModuleDict[k] ~= nil then
    error(("nn.ModuleDict: '%s' cannot name a module (a string without dots, not a method or field name)"):format(
      tostring(k)), 2)
  end
  if not is_module(m) then error(("nn.ModuleDict: '%s' must be a module, got %s"):format(k, type(m)), 2) end
  if rawget(self, k) ~= nil then rawset(self, k, m) else self[k] = m end
  return self
end
function ModuleDict:keys()
  local ks = {}
  for _, k in ipairs(self._order) do if self._children[k] then ks[#ks + 1] = k end end
  return ks
end
function ModuleDict:items()
  local ks, i = self:keys(), 0
  return function()
    i = i + 1
    if ks[i] then return ks[i], rawget(self, ks[i]) end
  end
end
ModuleDict.__len = function(self) return #self:keys() end
function ModuleDict:forward()
  error("nn.ModuleDict: a module dict has no forward; call its modules in the owner's forward", 2)
end

-- ---- losses: NLL, BCE, BCE with logits --------------------------------------------------------

-- Checks a loss's options table: reduction and the allowed keys.
local function loss_options(fn, opts, allowed)
  local keys = {reduction = true}
  for k in pairs(allowed) do keys[k] = true end
  opts = check_options(fn, opts, keys, 5)
  local r = opts.reduction or "mean"
  if r ~= "mean" and r ~= "sum" and r ~= "none" then
    error(("%s: reduction must be 'mean', 'sum' or 'none', got '%s'"):format(fn, tostring(r)), 4)
  end
  for k in pairs(allowed) do
    local v = opts[k]
    if v ~= nil and allowed[k] == "tensor" and not zorch.is_tensor(v) then
      error(("%s: %s must be a tensor, got %s"):format(fn, k, type(v)), 4)
    elseif v ~= nil and allowed[k] == "integer" and math.type(v) ~= "integer" then
      error(("%s: %s must be an integer, got %s"):format(fn, k, tostring(v)), 4)
    end
  end
  return r, opts
end

local function reduce(loss, r)
  if r == "none" then return loss end
  if r == "sum" then return loss:sum() end
  return loss:mean()
end

local function check_same_shape(fn, input, target)
  if not zorch.is_tensor(input) then error(("%s: input must be a tensor, got %s"):format(fn, type(input)), 3) end
  if not zorch.is_tensor(target) then error(("%s: target must be a tensor, got %s"):format(fn, type(target)), 3) end
  if shape_str(input) ~= shape_str(target) then
    error(("%s: input %s and target %s must have the same shape"):format(fn, shape_str(input),
      shape_str(target)), 3)
  end
end

-- log(1 + exp(x)) without overflow, with the gradient sigmoid(x) everywhere (x = 0 included).
local function softplus(x)
  return zorch.relu(x) + zorch.log(zorch.exp(zorch.where(x:gt(0), -x, x)) + 1)
end

-- Negative log-likelihood of log-probabilities (N, C) or (C,) and 1-based class
-- targets (N,) or (); opts: reduction, ignore_index (1-based, default -100),
-- weight (C,) per class (the mean then divides by the targets' summed weights).
nn.NLLLoss = Module:extend "nn.NLLLoss"
function nn.NLLLoss:init(opts)
  self.reduction, opts = loss_options("nn.NLLLoss", opts, {ignore_index = "integer", weight = "tensor"})
  rawset(self, "ignore_index", opts.ignore_index or -100)
  rawset(self, "weight", opts.weight)
  if opts.weight and opts.weight:dim() ~= 1 then
    error(("nn.NLLLoss: weight must be 1-D (one per class), got shape %s"):format(shape_str(opts.weight)), 3)
  end
end
function nn.NLLLoss:forward(input, target)
  local w, ig = rawget(self, "weight"), rawget(self, "ignore_index")
  if not w then return zorch.nll_loss(input, target, {reduction = self.reduction, ignore_index = ig}) end
  local per = zorch.nll_loss(input, target, {reduction = "none", ignore_index = ig})
  local c = input.shape[input:dim()]
  if w.shape[1] ~= c then
    error(("nn.NLLLoss: weight %s does not fit input %s (one weight per class)"):format(shape_str(w),
      shape_str(input)), 2)
  end
  local ignored = target:eq(ig)
  local wt = zorch.index_select(w, 1, zorch.masked_fill(target, ignored, 1):reshape({-1}))
  wt = zorch.masked_fill(wt, ignored:reshape({-1}), 0):reshape(target.shape)
  local loss = per * wt
  if self.reduction == "none" then return loss end
  if self.reduction == "sum" then return loss:sum() end
  return loss:sum() / wt:sum()
end

-- -w * (y log x + (1 - y) log(1 - x)) on probabilities x, each log clamped at -100
-- as PyTorch does; opts: reduction, weight (broadcast to the input).
nn.BCELoss = Module:extend "nn.BCELoss"
function nn.BCELoss:init(opts)
  self.reduction, opts = loss_options("nn.BCELoss", opts, {weight = "tensor"})
  rawset(self, "weight", opts.weight)
end
function nn.BCELoss:forward(input, target)
  check_same_shape("nn.BCELoss", input, target)
  return zorch.binary_cross_entropy(input, target, {weight = rawget(self, "weight"), reduction = self.reduction})
end

-- Sigmoid and binary cross entropy in one, stable for any logit:
-- (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x)); opts: reduction,
-- pos_weight (per class, broadcast over the last dim), weight (broadcast to the input).
nn.BCEWithLogitsLoss = Module:extend "nn.BCEWithLogitsLoss"
function nn.BCEWithLogitsLoss:init(opts)
  self.reduction, opts = loss_options("nn.BCEWithLogitsLoss", opts, {weight = "tensor", pos_weight = "tensor"})
  rawset(self, "weight", opts.weight)
  rawset(self, "pos_weight", opts.pos_weight)
end
function nn.BCEWithLogitsLoss:forward(input, target)
  check_same_shape("nn.BCEWithLogitsLoss", input, target)
  return zorch.binary_cross_entropy_with_logits(input, target, {weight = rawget(self, "weight"),
    pos_weight = rawget(self, "pos_weight"), reduction = self.reduction})
end

-- ---- option readers for the losses and layers of lua/losses.lua and lua/layers.lua -------------
-- Reads options `opts` for fn against spec {name = {default, check, want}}: an
-- unknown key is check_options' error; a value failing check names fn, the
-- option and what it wants. `level` is where the error points, as error() counts from here.
local function read_opts(fn, opts, spec, level)
  opts = check_options(fn, opts, spec, level + 1)
  local o = {}
  for k, s in pairs(spec) do
    local v = opts[k]
    if v == nil then v = s[1] end
    if not s[2](v) then error(("%s: %s must be %s, got %s"):format(fn, k, s[3], tostring(v)), level) end
    o[k] = v
  end
  return o
end
local function is_reduction(v) return v == "mean" or v == "sum" or v == "none" end
local REDUCTION = {"mean", is_reduction, "'mean', 'sum' or 'none'"}
local function num_ge0(v) return type(v) == "number" and v >= 0 end
local function num_gt0(v) return type(v) == "number" and v > 0 end
local function is_num(v) return type(v) == "number" end
local function is_bool(v) return type(v) == "boolean" end
local function opt_tensor(v) return v == nil or zorch.is_tensor(v) end
local function nonzero_int(v) return math.type(v) == "integer" and v ~= 0 end
local function is_p(v) return type(v) == "number" and v > 0 end
local function spec_with(base, extra)
  local s = {}
  for k, v in pairs(base) do s[k] = v end
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

local function need_tensor(fn, what, t)
  if not zorch.is_tensor(t) then error(("%s: %s must be a tensor, got %s"):format(fn, what, type(t)), 3) end
end

-- ---- parameter counts and summaries ---------------------------------------------------------

local dtype_bytes = {float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2, int32 = 4, int64 = 8, uint8 = 1,
                     bool = 1}

-- Counts of the distinct parameters of m (a parameter shared by two modules
-- counts once): total, trainable (requires grad) and bytes.
local function count_params(m)
  local seen, total, trainable, bytes = {}, 0, 0, 0
  for _, p in ipairs(each_param(m, "", {})) do
    local t = p[2]
    if not seen[t] then
      seen[t] = true
      local n = t:numel()
      total = total + n
      if t.requires_grad then trainable = trainable + n end
      bytes = bytes + n * (dtype_bytes[t:dtype()] or 0)
    end
  end
  return total, trainable, bytes
end

-- Number of parameter elements; trainable_only counts those that require grad.
function Module:num_parameters(trainable_only)
  local total, trainable = count_params(self)
  return trainable_only and trainable or total
end

local function thousands(n)
  local s = tostring(math.tointeger(n) or n)
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

local function human_bytes(b)
  local units, i = {"B", "KiB", "MiB", "GiB", "TiB"}, 1
  while b >= 1024 and i < #units do b, i = b / 1024, i + 1 end
  return i == 1 and ("%d B"):format(b) or ("%.1f %s"):format(b, units[i])
end

local function out_shape(v)
  if zorch.is_tensor(v) then return shape_str(v) end
  if type(v) == "table" and not is_module(v) then
    local parts = {}
    for _, x in ipairs(v) do parts[#parts + 1] = zorch.is_tensor(x) and shape_str(x) or type(x) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return type(v)
end

-- Runs model(input) once in eval mode without grad, noting each module's output
-- shape; the modules' training flags are restored after it.
local function record_shapes(model, rows, input)
  local shapes, saved = {}, {}
  for i, r in ipairs(rows) do
    local m = r.module
    saved[i] = {training = rawget(m, "training"), forward = rawget(m, "forward")}
    local fwd = m.forward
    rawset(m, "forward", function(self, ...)
      local res = table.pack(fwd(self, ...))
      shapes[m] = out_shape(res[1])
      return table.unpack(res, 1, res.n)
    end)
  end
  model:eval()
  local args = (type(input) == "table" and not zorch.is_tensor(input)) and input or {input}
  local ok, err = pcall(zorch.no_grad, function() return model(table.unpack(args)) end)
  for i = #rows, 1, -1 do -- backwards: a module listed twice was wrapped twice
    rawset(rows[i].module, "forward", saved[i].forward)
    rawset(rows[i].module, "training", saved[i].training)
  end
  if not ok then
    error(("nn.summary: the forward pass on the example input failed: %s"):format(
      tostring(err):gsub("^[^:]*:%d+: ", "")), 3)
  end
  return shapes
end

-- A table of the modules (name, type, output shape for an example input, the
-- parameter count of the module and its children) and the totals. Prints it
-- unless opts.print is false; returns the text and {total, trainable, bytes}.
-- `input` is a tensor or a list of the forward's arguments.
function nn.summary(model, input, opts)
  if not is_module(model) then error(("nn.summary: expected a module, got %s"):format(type(model)), 2) end
  if opts ~= nil and type(opts) ~= "table" then error("nn.summary: options must be a table", 2) end
  local rows = {}
  local path = {}
  local function walk(m, name, depth)
    local total = count_params(m)
    rows[#rows + 1] = {module = m, name = name, depth = depth, type = getmetatable(m).__name, params = total}
    path[m] = true
    for _, k in ipairs(m._order) do
      local c = rawget(m, k)
      if m._children[k] and c ~= nil and not path[c] then walk(c, name == "" and k or (name .. "." .. k), depth + 1) end
    end
    path[m] = nil
  end
  walk(model, "", 0)
  local shapes = input ~= nil and record_shapes(model, rows, input) or nil
  local header = {"Module", "Type"}
  if shapes then header[#header + 1] = "Output shape" end
  header[#header + 1] = "Params"
  local cells = {}
  for _, r in ipairs(rows) do
    local name = r.depth == 0 and "(model)" or (("  "):rep(r.depth - 1) .. r.name:match("[^.]+$"))
    local row = {name, r.type}
    if shapes then row[#row + 1] = shapes[r.module] or "-" end
    row[#row + 1] = thousands(r.params)
    cells[#cells + 1] = row
  end
  local widths = {}
  for i, h in ipairs(header) do widths[i] = #h end
  for _, row in ipairs(cells) do
    for i, c in ipairs(row) do widths[i] = math.max(widths[i], #c) end
  end
  local function line(row)
    local parts = {}
    for i, c in ipairs(row) do
      parts[i] = i == #row and (" "):rep(widths[i] - #c) .. c or c .. (" "):rep(widths[i] - #c)
    end
    return table.concat(parts, "  ")
  end
  local rule = ("-"):rep(#line(header))
  local total, trainable, bytes = count_params(model)
  local out = {line(header), rule}
  for _, row in ipairs(cells) do out[#out + 1] = line(row) end
  out[#out + 1] = rule
  out[#out + 1] = "Total params: " .. thousands(total)
  out[#out + 1] = "Trainable params: " .. thousands(trainable)
  out[#out + 1] = "Non-trainable params: " .. thousands(total - trainable)
  out[#out + 1] = ("Parameter size: %s (%s bytes)"):format(human_bytes(bytes), thousands(bytes))
  local text = table.concat(out, "\n")
  if not (opts and opts.print == false) then print(text) end
  return text, {total = total, trainable = trainable, bytes = bytes}
end

function Module:summary(input, opts) return nn.summary(self, input, opts) end

-- ---- activation checkpointing ------------------------------------------------------
-- zorch.checkpoint(fn, ...) runs fn(...) without recording its graph and keeps
-- only its arguments; the backward pass runs fn again with grad mode on, from
-- the default generator's state of the first run (so dropout draws the same
-- mask), and backpropagates through that copy into the tensor arguments and
-- the parameters fn uses. fn returns one tensor. opts.cpu: the saved tensor
-- arguments wait in host memory (DeepSpeed's cpu_checkpointing).
-- Fails when t was written in place since the forward noted `version`
-- (zorch._version): checkpoint's arguments and Function's saved tensors,
-- as autograd refuses a saved tensor written since.
local function check_version(what, t, version, why)
  local v = zorch._version(t)
  if v ~= version then
    error(("%s of shape (%s) was modified by an inplace operation after the forward (version %d; expected " ..
           "version %d)%s"):format(what, table.concat(t.shape, ", "), v, version, why or ""), 0)
  end
end

local function checkpoint_with(opts, fn, ...)
  local mt = getmetatable(fn)
  if type(fn) ~= "function" and not (mt and mt.__call) then
    error(("zorch.checkpoint: argument 1 (fn) must be a function or a module, got %s"):format(type(fn)), 2)
  end
  local args = table.pack(...)
  if not zorch.is_grad_enabled() then return fn(...) end
  local seed, offset = zorch._rng_state()
  local out = zorch.no_grad(function() return fn(table.unpack(args, 1, args.n)) end)
  if not zorch.is_tensor(out) then
    error(("zorch.checkpoint: fn must return one tensor, got %s"):format(type(out)), 2)
  end
  local inputs, where = {}, {}
  for i = 1, args.n do
    if zorch.is_tensor(args[i]) then inputs[#inputs + 1] = args[i]; where[#where + 1] = i end
  end
  -- without an input that requires grad, the parameters still do: a constant
  -- anchor gives the node an edge so that the backward runs
  local anchor
  if #inputs == 0 or not (function() for _, t in ipairs(inputs) do if t.requires_grad then return true end end end)() then
    anchor = zorch.zeros({1}, {requires_grad = true})
    inputs[#inputs + 1] = anchor
  end
  local devices, needs, nin = {}, {}, #inputs
  for _, i in ipairs(where) do needs[i] = args[i].requires_grad end
  if opts.cpu then
    for _, i in ipairs(where) do
      devices[i] = args[i]:device()
      if devices[i] ~= "cpu" then args[i] = args[i]:detach():to("cpu") end
    end
  end
  -- an input written in place before the backward would be recomputed from
  -- its new values: refused, as autograd refuses a saved tensor written since
  local versions = {}
  for _, i in ipairs(where) do versions[i] = zorch._version(args[i]) end
  local function backward(g)
    for _, i in ipairs(where) do
      check_version("checkpoint: argument " .. i, args[i], versions[i], ": the recompute would use the new values")
    end
    local again = {}
    for i = 1, args.n do again[i] = args[i] end
    local leaves = {}
    for k, i in ipairs(where) do
      local d = args[i]:detach()
      if devices[i] and devices[i] ~= "cpu" then d = d:to(devices[i]) end
      if needs[i] then d:requires_grad_() end
      again[i], leaves[k] = d, d
    end
    local s, o = zorch._rng_state()
    zorch._set_rng_state(seed, offset)
    local prev = zorch.set_grad_enabled(true)
    local ok, res = pcall(fn, table.unpack(again, 1, args.n))
    zorch.set_grad_enabled(prev)
    zorch._set_rng_state(s, o)
    if not ok then error(res, 0) end
    if res.requires_grad then res:backward(g) end
    local grads = {}
    for k = 1, #leaves do grads[k] = leaves[k].grad end
    return table.unpack(grads, 1, nin)
  end
  return zorch._grad_fn(out, inputs, backward)
end
local function checkpoint(fn, ...) return checkpoint_with({}, fn, ...) end
zorch.checkpoint = checkpoint
nn.checkpoint = checkpoint
zorch._checkpoint = checkpoint_with -- engine:checkpoint

-- zorch.split(x, size | {sizes}, dim = 1) and zorch.chunk(x, n, dim = 1):
-- views along dim (narrow), as PyTorch's: split's pieces of `size` (the last
-- smaller), chunk's of ceil(len / n) (so possibly fewer than n).
function zorch.split(x, sizes, dim)
  if not zorch.is_tensor(x) then error("split: argument 1 must be a tensor, got " .. type(x), 2) end
  dim = dim or 1
  if math.type(dim) ~= "integer" or dim == 0 or dim > x:dim() or dim < -x:dim() then
    error(("split: dim %s out of range for a %d-d tensor"):format(math.type(dim) and tostring(dim) or type(dim), x:dim()), 2)
  end
  if dim < 0 then dim = x:dim() + 1 + dim end
  local len, out, at = x:size(dim), {}, 1
  if type(sizes) == "table" then
    local total = 0
    for i, n in ipairs(sizes) do
      if math.type(n) ~= "integer" or n < 0 then error(("split: size %d must be an integer >= 0"):format(i), 2) end
      total = total + n
    end
    if total ~= len then error(("split: sizes add up to %d, but dim %d has %d"):format(total, dim, len), 2) end
    for i, n in ipairs(sizes) do out[i] = x:narrow(dim, at, n); at = at + n end
    return out
  end
  if math.type(sizes) ~= "integer" or sizes < 1 then
    error("split: size must be an integer >= 1 or a list of sizes, got " .. tostring(sizes), 2)
  end
  while at <= len do
    local n = math.min(sizes, len - at + 1)
    out[#out + 1] = x:narrow(dim, at, n)
    at = at + n
  end
  return out
end
function zorch.chunk(x, n, dim)
  if math.type(n) ~= "integer" or n < 1 then error("chunk: chunks must be an integer >= 1, got " .. tostring(n), 2) end
  if not zorch.is_tensor(x) then error("chunk: argument 1 must be a tensor, got " .. type(x), 2) end
  local d = dim or 1
  if math.type(d) ~= "integer" or d == 0 or d > x:dim() or d < -x:dim() then
    error(("chunk: dim %s out of range for a %d-d tensor"):format(math.type(d) and tostring(d) or type(d), x:dim()), 2)
  end
  local len = x:size(d)
  return zorch.split(x, math.max(1, (len + n - 1) // n), dim)
end

-- zorch.Function{forward = f(ctx, ...), backward = b(ctx, g), name?}: an op
-- written in Lua with its own gradient (PyTorch's autograd.Function). forward
-- runs without recording, on the arguments as given, and returns one tensor;
-- backward gets its gradient and returns one gradient (or nil) per tensor
-- argument, in order. ctx:save_for_backward(...) keeps tensors for backward
-- (ctx.saved_tensors), refused there if written in place since.
local Ctx = {}
Ctx.__index = Ctx
function Ctx:save_for_backward(...)
  local ts = table.pack(...)
  self.saved_tensors, self._versions = {}, {}
  for i = 1, ts.n do
    if not zorch.is_tensor(ts[i]) then
      error(("save_for_backward: argument %d is a %s, not a tensor"):format(i, type(ts[i])), 2)
    end
    self.saved_tensors[i], self._versions[i] = ts[i], zorch._version(ts[i])
  end
end
function zorch.Function(def)
  if type(def) ~= "table" or type(def.forward) ~= "function" or type(def.backward) ~= "function" then
    error("zorch.Function: expected {forward = function(ctx, ...), backward = function(ctx, grad)}", 2)
  end
  local name = def.name or "Function"
  return function(...)
    local args, ctx = table.pack(...), setmetatable({}, Ctx)
    local inputs = {}
    for i = 1, args.n do if zorch.is_tensor(args[i]) then inputs[#inputs + 1] = args[i] end end
    local out = zorch.no_grad(function() return def.forward(ctx, table.unpack(args, 1, args.n)) end)
    if not zorch.is_tensor(out) then
      error(("%s: forward must return one tensor, got %s"):format(name, type(out)), 2)
    end
    return zorch._grad_fn(out, inputs, function(g)
      for i, t in ipairs(ctx.saved_tensors or {}) do
        check_version(("%s: saved tensor %d"):format(name, i), t, ctx._versions[i])
      end
      return def.backward(ctx, g)
    end)
  end
end

-- nn.utils.clip_grad_norm_(params, max_norm, norm_type = 2): scales the
-- parameters' .grad so that their global norm is at most max_norm (PyTorch's
-- factor max_norm / (norm + 1e-6), applied only below 1, so 0 zeroes them); returns the norm
-- before clipping. norm_type 2 (summed in double) or math.huge (the largest |g|).
nn.utils = nn.utils or {}
function nn.utils.clip_grad_norm_(params, max_norm, norm_type)
  local fn = "nn.utils.clip_grad_norm_"
  if zorch.is_tensor(params) then params = {params} end
  if type(params) ~= "table" then error(("%s: argument 1 must be a tensor or a list of tensors, got %s"):format(fn, type(params)), 2) end
  if type(max_norm) ~= "number" or not (max_norm >= 0) then
    error(("%s: max_norm must be a number >= 0, got %s"):format(fn, tostring(max_norm)), 2)
  end
  norm_type = norm_type or 2
  if norm_type ~= 2 and norm_type ~= math.huge then
    error(("%s: norm_type must be 2 or math.huge, got %s"):format(fn, tostring(norm_type)), 2)
  end
  local grads = {}
  for i, p in ipairs(params) do
    if not zorch.is_tensor(p) then error(("%s: parameter %d is a %s, not a tensor"):format(fn, i, type(p)), 2) end
    if p.grad then grads[#grads + 1] = p.grad end
  end
  local norm = 0
  for _, g in ipairs(grads) do
    if norm_type == 2 then norm = norm + zorch._sumsq(g)
    elseif g:numel() > 0 then norm = math.max(norm, g:abs():max():item()) end
  end
  if norm_type == 2 then norm = math.sqrt(norm) end
  local coef = max_norm / (norm + 1e-6)
  if coef < 1 then
    zorch.no_grad(function() for _, g in ipairs(grads) do g:copy_(g * coef) end end)
  end
  return norm
end

-- nn.Checkpoint(module): the module, recomputed in backward (its parameters
-- are named under "module.", as PyTorch's checkpoint wrapper adds a prefix).
nn.Checkpoint = Module:extend "nn.Checkpoint"
function nn.Checkpoint:init(m)
  if not is_module(m) then error("nn.Checkpoint: argument 1 must be a module", 3) end
  self.module = m
end
function nn.Checkpoint:forward(...) return checkpoint(self.module, ...) end

-- nn.functional (`local F = zorch.nn.functional`, as PyTorch scripts write
-- it): PyTorch's functional names are zorch's own functions, so F.relu is
-- zorch.relu and F.cross_entropy zorch.cross_entropy; anything else is nil.
nn.functional = setmetatable({}, {__index = function(_, k)
  local f = zorch[k]
  return type(f) == "function" and f or nil
end, __newindex = function(_, k) error("nn.functional: read-only (set zorch." .. tostring(k) .. " instead)", 2) end})

-- What lua/losses.lua and lua/layers.lua build on (private).
zorch._nn_lib = {Module = Module, check_dim = check_dim, check_int = check_int, check_opts = check_opts,
  check_same_shape = check_same_shape, is_module = is_module, py_bool = py_bool, reduce = reduce,
  shape_str = shape_str, softplus = softplus, uniform = uniform, read_opts = read_opts,
  is_reduction = is_reduction, REDUCTION = REDUCTION, num_ge0 = num_ge0, num_gt0 = num_gt0, is_num = is_num,
  is_bool = is_bool, opt_tensor = opt_tensor, nonzero_int = nonzero_int, is_p = is_p, spec_with = spec_with,
  need_tensor = need_tensor, max_pool_init = max_pool_init, avg_pool_init = avg_pool_init, norm_state = norm_state,
  list_index = list_index}

-- The parts (lua/zorch/nn/*.lua) add their layers to zorch.nn.
zorch.nn = nn
for _, part in ipairs(zorch._parts "zorch.nn") do zorch._require(part) end -- the folder's files

return nn
