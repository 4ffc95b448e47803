-- zorch.nn: modules written in Lua over the C ops. A module defines `init` and
-- `forward`; autograd does the rest. Parameter names follow PyTorch
-- (`fc1.weight`), so state dicts move through safetensors files both ways.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = {}

local function class_call(cls, ...)
  local self = setmetatable({_order = {}, _children = {}, _params = {}, training = true}, cls)
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

-- Assigning a module or a tensor that requires grad registers it, in order.
Module.__newindex = function(self, k, v)
  if type(k) == "string" then
    if type(v) == "table" and getmetatable(v) and rawget(v, "_order") then
      self._children[k] = true
      table.insert(self._order, k)
    elseif zorch.is_tensor(v) and v.requires_grad then
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

-- Marks a tensor as a parameter (a leaf that requires grad).
function nn.Parameter(t)
  if not zorch.is_tensor(t) then error("nn.Parameter: expected a tensor", 2) end
  if not t.requires_grad then t:requires_grad_(true) end
  return t
end

-- Visits (name, tensor) for every parameter, depth first in registration order.
local function each_param(m, prefix, out)
  for _, k in ipairs(m._order) do
    local v = rawget(m, k)
    if m._params[k] and v ~= nil then
      out[#out + 1] = {prefix .. k, v}
    elseif m._children[k] and v ~= nil then
      each_param(v, prefix .. k .. ".", out)
    end
  end
  return out
end

function Module:named_parameters()
  local list = each_param(self, "", {})
  local i = 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end

function Module:parameters()
  local ps = {}
  for _, p in ipairs(each_param(self, "", {})) do ps[#ps + 1] = p[2] end
  return ps
end

-- Moves (or converts) every parameter: m:to("cuda"), m:to("bfloat16"). The
-- parameters are new leaves, so build the optimizer after moving the model.
function Module:to(where)
  if type(where) ~= "string" then
    error(("%s:to: expected a device or dtype name (string), got %s"):format(getmetatable(self).__name,
      type(where)), 2)
  end
  local function move(m)
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._params[k] and v ~= nil then
        rawset(m, k, v:detach():to(where):requires_grad_(true))
      elseif m._children[k] and v ~= nil then
        move(v)
      end
    end
  end
  local ok, err = pcall(move, self)
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

function Module:train(on)
  if on == nil then on = true end
  rawset(self, "training", on)
  for _, c in ipairs(self:children()) do c:train(on) end
  return self
end

function Module:eval() return self:train(false) end

function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end

function Module:state_dict()
  local engine = rawget(self, "_engine") -- ZeRO stage 3 holds slices: gather first
  if engine then engine:gather() end
  local sd = {}
  for _, p in ipairs(each_param(self, "", {})) do
    -- under stage 3 the gathered pages go back after this: keep copies
    sd[p[1]] = engine and p[2]:detach():clone() or p[2]:detach()
  end
  if engine then engine:release() end
  return sd
end

-- Copies tensors into the parameters; every missing or unexpected name, and
-- every shape mismatch, is an error unless strict is false.
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" then error("load_state_dict: expected a table of tensors", 2) end
  if strict == nil then strict = true end
  local engine = rawget(self, "_engine")
  if engine then engine:gather() end
  local seen, missing = {}, {}
  for _, p in ipairs(each_param(self, "", {})) do
    local name, param = p[1], p[2]
    local t = sd[name]
    if t == nil then
      missing[#missing + 1] = name
    else
      seen[name] = true
      local a, b = table.concat(param.shape, ", "), table.concat(t.shape, ", ")
      if a ~= b then
        error(("load_state_dict: '%s' has shape (%s) in the model but (%s) in the state dict"):format(name, a, b), 2)
      end
      zorch.no_grad(function() param:copy_(t) end)
    end
  end
  if strict then
    local unexpected = {}
    for k in pairs(sd) do if not seen[k] then unexpected[#unexpected + 1] = k end end
    table.sort(unexpected)
    if #missing > 0 or #unexpected > 0 then
      error(("load_state_dict: missing keys {%s}, unexpected keys {%s}"):format(
        table.concat(missing, ", "), table.concat(unexpected, ", ")), 2)
    end
  end
  if engine then
    engine:sync_shard()
    engine:release()
  end
  return self
end

local function check_int(fn, name, v)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), 3)
  end
end

-- U(-bound, bound), as torch.nn.init.kaiming_uniform_(a = sqrt(5)) gives Linear.
local function uniform(shape, bound)
  return nn.Parameter(zorch.rand(shape) * (2 * bound) - bound)
end

nn.Linear = Module:extend "nn.Linear"
-- opts: bias = false; activation = "relu" fuses a ReLU into the layer (one GEMM
-- with a bias and relu epilogue on the GPU).
function nn.Linear:init(in_features, out_features, opts)
  check_int("nn.Linear", "in_features", in_features)
  check_int("nn.Linear", "out_features", out_features)
  local act = opts and opts.activation
  if act ~= nil and act ~= "relu" then
    error(("nn.Linear: activation must be \"relu\" or nil, got %s"):format(tostring(act)), 3)
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
function nn.Embedding:init(num, dim)
  check_int("nn.Embedding", "num_embeddings", num)
  check_int("nn.Embedding", "embedding_dim", dim)
  self.weight = nn.Parameter(zorch.randn(num, dim))
end
function nn.Embedding:forward(idx) return zorch.embedding(self.weight, idx) end

nn.LayerNorm = Module:extend "nn.LayerNorm"
function nn.LayerNorm:init(shape, opts)
  if type(shape) == "number" then shape = {shape} end
  self.normalized_shape = shape
  self.eps = opts and opts.eps or 1e-5
  self.weight = nn.Parameter(zorch.ones(shape))
  self.bias = nn.Parameter(zorch.zeros(shape))
end
function nn.LayerNorm:forward(x)
  return zorch.layer_norm(x, #self.normalized_shape, self.weight, self.bias, self.eps)
end

-- Children are named "0", "1", ... as in PyTorch, so state dicts match; errors
-- count modules from 1, as Lua does.
nn.Sequential = Module:extend "nn.Sequential"
function nn.Sequential:init(...)
  self.n = 0
  for i, m in ipairs({...}) do self:add(m) end
end
function nn.Sequential:add(m)
  if type(m) ~= "table" or not rawget(m, "_order") then
    error(("nn.Sequential: module %d is not a module"):format(self.n + 1), 2)
  end
  self[tostring(self.n)] = m
  rawset(self, "n", self.n + 1)
  return self
end
function nn.Sequential:forward(x)
  for i = 1, self.n do
    local m = rawget(self, tostring(i - 1))
    local ok, res = pcall(m, x)
    if not ok then
      error(("%s\n  in module %d (%s) of nn.Sequential"):format(tostring(res), i, getmetatable(m).__name), 0)
    end
    x = res
  end
  return x
end

local function loss(name, fn)
  local cls = Module:extend(name)
  function cls:init(opts)
    local r = opts and opts.reduction or "mean"
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
  return zorch.cross_entropy(x, t, {reduction = s.reduction, ignore_index = s.opts.ignore_index})
end)

return nn
