-- zorch.nn.autograd: autograd written in Lua: zorch.Function (an op with its
-- own gradient) and activation checkpointing (zorch.checkpoint, nn.Checkpoint),
-- which share the check that a saved tensor was not written in place.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, is_module = M.Module, M.is_module

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

-- nn.Checkpoint(module): the module, recomputed in backward (its parameters
-- are named under "module.", as PyTorch's checkpoint wrapper adds a prefix).
nn.Checkpoint = Module:extend "nn.Checkpoint"
function nn.Checkpoint:init(m)
  if not is_module(m) then error("nn.Checkpoint: argument 1 must be a module", 3) end
  self.module = m
end
function nn.Checkpoint:forward(...) return checkpoint(self.module, ...) end
