-- zorch.nn.dropout: Dropout, the channel dropouts (Dropout1d/2d/3d) and
-- AlphaDropout, with their functions.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, as_fn, need_tensor, py_num = M.Module, M.as_fn, M.need_tensor, M.py_num
local shape_str = M.shape_str

nn.Dropout = Module:extend "nn.Dropout"
function nn.Dropout:init(p)
  p = p or 0.5
  if type(p) ~= "number" or p < 0 or p > 1 then error("nn.Dropout: p must be in [0, 1]", 3) end
  self.p = p
end
function nn.Dropout:forward(x) return zorch.dropout(x, self.p, self.training) end

-- Dropout1d(p = 0.5), Dropout2d(p): in training each channel of each sample is
-- zeroed whole with probability p, the rest scaled by 1 / (1 - p); identity
-- in eval. Dropout1d takes (N, C, L) or (C, L), Dropout2d (N, C, H, W) or
-- (C, H, W); a 3-d input to Dropout2d is (N, C, L), as PyTorch reads it.
local function channel_dropout_class(name, dims)
  local cls = Module:extend(name)
  function cls:init(p)
    if p == nil then p = 0.5 end
    if type(p) ~= "number" or not (p >= 0 and p <= 1) then
      error(("%s: p must be a number in [0, 1], got %s"):format(name, tostring(p)), 3)
    end
    self.p = p
  end
  function cls:forward(x)
    if not zorch.is_tensor(x) then error(("%s: expected a tensor, got %s"):format(name, type(x)), 2) end
    if not dims[x:dim()] then error(("%s: expected %s input, got %s"):format(name, dims.want, shape_str(x)), 2) end
    if not self.training or self.p == 0 then return x end
    local batched = x:dim() ~= dims.unbatched
    local shape = {}
    for i = 1, x:dim() do shape[i] = (i <= (batched and 2 or 1)) and x.shape[i] or 1 end
    if self.p == 1 then return x * zorch.zeros(shape, {dtype = x:dtype(), device = x:device()}) end
    local keep = zorch.rand(shape, {device = x:device()}):ge(self.p):to(x:dtype())
    return x * (keep * (1 / (1 - self.p)))
  end
  cls.__tostring = function(s) return ("%s(p=%g)"):format(name, s.p) end
  return cls
end
nn.Dropout1d = channel_dropout_class("nn.Dropout1d", {[2] = true, [3] = true, unbatched = 2, want = "(N, C, L) or (C, L)"})
nn.Dropout2d = channel_dropout_class("nn.Dropout2d", {[3] = true, [4] = true, unbatched = 0,
                                                want = "(N, C, H, W), (C, H, W) or (N, C, L)"})

-- dropout1d(x, p = 0.5, training = true), dropout2d, dropout3d: whole channels
-- zeroed with probability p, the rest scaled by 1 / (1 - p); x (N, C, ...) or
-- one sample (C, ...) with one spatial dim fewer (dropout2d reads a 3-D input
-- as (N, C, L), as PyTorch does).
local function channel_dropout(fn, x, p, training, k)
  need_tensor(fn, "input", x)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(("%s: p must be a number in [0, 1], got %s"):format(fn, tostring(p)), 3)
  end
  if training ~= nil and type(training) ~= "boolean" then
    error(("%s: training must be true or false, got %s"):format(fn, tostring(training)), 3)
  end
  if x:dim() ~= k + 1 and x:dim() ~= k + 2 then
    error(("%s: expected a %dD or %dD input, got %s"):format(fn, k + 1, k + 2, shape_str(x)), 3)
  end
  if training == false or p == 0 then return x end
  local batched = x:dim() == k + 2 or k == 2
  local shape = {}
  for i = 1, x:dim() do shape[i] = (i <= (batched and 2 or 1)) and x.shape[i] or 1 end
  if p == 1 then return x * zorch.zeros(shape, {dtype = x:dtype(), device = x:device()}) end
  local keep = zorch.rand(shape, {device = x:device()}):ge(p):to(x:dtype())
  return x * (keep * (1 / (1 - p)))
end
function zorch.dropout1d(x, p, training) return (channel_dropout("dropout1d", x, p, training, 1)) end
function zorch.dropout2d(x, p, training) return (channel_dropout("dropout2d", x, p, training, 2)) end
function zorch.dropout3d(x, p, training) return (channel_dropout("dropout3d", x, p, training, 3)) end

-- A dropout module over fn(x, p, training): Name(p = 0.5)
local function dropout_module(name, fn)
  local cls = Module:extend(name)
  function cls:init(p)
    if p == nil then p = 0.5 end
    if type(p) ~= "number" or not (p >= 0 and p <= 1) then
      error(("%s: p must be a number in [0, 1], got %s"):format(name, tostring(p)), 3)
    end
    self.p = p
  end
  function cls:forward(x) return as_fn(name, 2, fn, x, self.p, self.training) end
  cls.__tostring = function(s) return ("%s(p=%s)"):format(name, py_num(s.p)) end
  return cls
end

-- Dropout3d(p = 0.5): (N, C, D, H, W) or (C, D, H, W)
nn.Dropout3d = dropout_module("nn.Dropout3d", zorch.dropout3d)

-- alpha_dropout(x, p = 0.5, training = false): SELU's dropout; in training each
-- element is dropped with probability p to SELU's negative saturation, and
-- the result scaled and shifted so that a zero-mean unit-variance input keeps
-- its mean and variance: kept a x + a alpha p, dropped a alpha (p - 1), with
-- alpha = 1.7580993408473766 and a = ((1 - p) (1 + p alpha^2))^-1/2
local SELU_SAT = 1.7580993408473766
function zorch.alpha_dropout(x, p, training)
  local fn = "alpha_dropout"
  need_tensor(fn, "input", x)
  if p == nil then p = 0.5 end
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(("%s: p must be a number in [0, 1], got %s"):format(fn, tostring(p)), 2)
  end
  if training ~= nil and type(training) ~= "boolean" then
    error(("%s: training must be true or false, got %s"):format(fn, tostring(training)), 2)
  end
  if not training or p == 0 then return x end
  if p == 1 then return x * 0 end
  local a = 1 / math.sqrt((SELU_SAT * SELU_SAT * p + 1) * (1 - p))
  local keep = zorch.rand(x.shape, {device = x:device()}):ge(p):to(x:dtype())
  return x * (keep * a) + (keep - 1) * (SELU_SAT * a) + SELU_SAT * a * p
end

-- AlphaDropout(p = 0.5)
nn.AlphaDropout = dropout_module("nn.AlphaDropout", zorch.alpha_dropout)
