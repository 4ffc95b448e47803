-- zorch.nn.norm: the normalisations: LayerNorm, BatchNorm (1d, 2d, 3d), GroupNorm, RMSNorm,
-- InstanceNorm and LocalResponseNorm, with their functions, PyTorch's names,
-- defaults and state-dict names.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local check_options = zorch._require("zorch.util").check_options
local M = zorch._require "zorch.nn.module"
local Module, as_fn, check_int, is_bool, list_str = M.Module, M.as_fn, M.check_int, M.is_bool, M.list_str
local need_number, need_tensor, num_ge0, num_gt0 = M.need_number, M.need_tensor, M.num_ge0, M.num_gt0
local pos_int, py_bool, py_num, read_opts = M.pos_int, M.py_bool, M.py_num, M.read_opts
local shape_str = M.shape_str

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
    -- (N, C, D, H, W) as (N, C, D H, W): the same statistics per channel
    local s = x.shape
    local x4 = x:dim() == 5 and x:reshape({s[1], s[2], s[3] * s[4], s[5]}) or x
    local ok, y = pcall(zorch.batch_norm, x4, rm, rv, rawget(self, "weight"), rawget(self, "bias"), use_batch,
      factor, self.eps)
    if not ok then error(("%s: %s"):format(name, tostring(y):gsub("^[^:]*:%d+: ", "")), 2) end
    return x4 == x and y or y:reshape(s)
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
nn.BatchNorm3d = batch_norm_class("nn.BatchNorm3d", {[5] = true}, "5D (N, C, D, H, W)")

-- group_norm(x, num_groups, weight?, bias?, eps = 1e-5): x (N, C, ...) normalised
-- over each group of C / num_groups channels and the rest of the dims (biased
-- variance), then weight and bias (C,) per channel.
local function channel_shape(x, c)
  local s = {1, c}
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  return s
end
local function affine(y, x, weight, bias)
  local c = x.shape[2]
  if weight then y = y * weight:reshape(channel_shape(x, c)) end
  if bias then y = y + bias:reshape(channel_shape(x, c)) end
  return y
end
-- Each named tensor, where given, must be a vector of the c channels (the
-- error is at level 3: the caller of the function that checks).
local function check_per_channel(fn, x, c, named)
  for _, e in ipairs(named) do
    local t = e[2]
    if t ~= nil and (not zorch.is_tensor(t) or t:dim() ~= 1 or t.shape[1] ~= c) then
      error(("%s: %s must be a tensor of shape (%d) for input %s, got %s"):format(fn, e[1], c, shape_str(x),
        zorch.is_tensor(t) and shape_str(t) or type(t)), 3)
    end
  end
end
local function check_affine(fn, x, c, weight, bias) -- (a tail call: the same levels)
  return check_per_channel(fn, x, c, {{"weight", weight}, {"bias", bias}})
end
function zorch.group_norm(x, num_groups, weight, bias, eps)
  local fn = "group_norm"
  need_tensor(fn, "input", x)
  if x:dim() < 2 then error(("%s: expected input (N, C, ...), got %s"):format(fn, shape_str(x)), 2) end
  local c = x.shape[2]
  if math.type(num_groups) ~= "integer" or num_groups < 1 or c % num_groups ~= 0 then
    error(("%s: num_groups must be a positive integer dividing the %d channels of input %s, got %s"):format(fn, c,
      shape_str(x), tostring(num_groups)), 2)
  end
  eps = eps or 1e-5
  if type(eps) ~= "number" or not (eps >= 0) then error(("%s: eps must be a number >= 0, got %s"):format(fn, tostring(eps)), 2) end
  check_affine(fn, x, c, weight, bias)
  if x:numel() == 0 then return affine(x * 1, x, weight, bias) end
  local y = zorch.layer_norm(x:reshape({x.shape[1], num_groups, -1}), 1, nil, nil, eps):reshape(x.shape)
  return affine(y, x, weight, bias)
end

-- The machine epsilon of a float dtype (rms_norm's default eps, as PyTorch's).
local EPS_OF = {float32 = 2.0 ^ -23, float64 = 2.0 ^ -52, bfloat16 = 2.0 ^ -7, float16 = 2.0 ^ -10}
-- rms_norm(x, normalized_shape, weight?, eps?): x / sqrt(mean(x^2) + eps) over
-- the last #normalized_shape dims, times weight; eps nil: the dtype's machine epsilon.
function zorch.rms_norm(x, shape, weight, eps)
  local fn = "rms_norm"
  need_tensor(fn, "input", x)
  if math.type(shape) == "integer" then shape = {shape} end
  local k = type(shape) == "table" and #shape or 0
  local fits = k >= 1 and k <= x:dim()
  for i = 1, k do fits = fits and shape[i] == x.shape[x:dim() - k + i] end
  if not fits then
    error(("%s: normalized_shape %s must be the last dims of input %s"):format(fn,
      type(shape) == "table" and "(" .. list_str(shape) .. ")" or tostring(shape), shape_str(x)), 2)
  end
  if weight ~= nil and (not zorch.is_tensor(weight) or table.concat(weight.shape, ",") ~= table.concat(shape, ",")) then
    error(("%s: weight must be a tensor of shape (%s), got %s"):format(fn, table.concat(shape, ", "),
      zorch.is_tensor(weight) and shape_str(weight) or type(weight)), 2)
  end
  if eps == nil then eps = EPS_OF[x:dtype()] or 2.0 ^ -23 end
  if type(eps) ~= "number" or not (eps >= 0) then error(("%s: eps must be a number >= 0, got %s"):format(fn, tostring(eps)), 2) end
  local dims = {}
  for i = x:dim() - k + 1, x:dim() do dims[#dims + 1] = i end
  local y = x / ((x * x):mean(dims, true) + eps):sqrt()
  if weight then y = y * weight end
  return y
end

-- GroupNorm(num_groups, num_channels, {eps = 1e-5, affine = true}): weight ones, bias zeros (C,)
nn.GroupNorm = Module:extend "nn.GroupNorm"
function nn.GroupNorm:init(num_groups, num_channels, opts)
  local fn = "nn.GroupNorm"
  check_int(fn, "num_groups", num_groups)
  check_int(fn, "num_channels", num_channels)
  local o = read_opts(fn, opts, {eps = {1e-5, num_ge0, "a number >= 0"}, affine = {true, is_bool, "true or false"}}, 4)
  if num_channels % num_groups ~= 0 then
    error(("%s: num_groups %d must divide num_channels %d"):format(fn, num_groups, num_channels), 3)
  end
  rawset(self, "num_groups", num_groups)
  rawset(self, "num_channels", num_channels)
  rawset(self, "eps", o.eps)
  rawset(self, "affine", o.affine)
  if o.affine then
    self.weight = nn.Parameter(zorch.ones(num_channels))
    self.bias = nn.Parameter(zorch.zeros(num_channels))
  end
end
function nn.GroupNorm:forward(x)
  return zorch.group_norm(x, self.num_groups, rawget(self, "weight"), rawget(self, "bias"), self.eps)
end
nn.GroupNorm.__tostring = function(s)
  return ("nn.GroupNorm(%d, %d, eps=%g, affine=%s)"):format(s.num_groups, s.num_channels, s.eps, py_bool(s.affine))
end

-- RMSNorm(normalized_shape, {eps = nil (the dtype's epsilon), elementwise_affine = true}): weight ones
nn.RMSNorm = Module:extend "nn.RMSNorm"
function nn.RMSNorm:init(shape, opts)
  local fn = "nn.RMSNorm"
  if math.type(shape) == "integer" then shape = {shape} end
  local good = type(shape) == "table" and #shape > 0
  for _, s in ipairs(type(shape) == "table" and shape or {}) do good = good and math.type(s) == "integer" and s > 0 end
  if not good then error(("%s: normalized_shape must be a positive integer or a list of them, got %s"):format(fn,
    tostring(shape)), 3) end
  local o = read_opts(fn, opts, {eps = {nil, function(v) return v == nil or num_ge0(v) end, "a number >= 0 or nil"},
                                 elementwise_affine = {true, is_bool, "true or false"}}, 4)
  rawset(self, "normalized_shape", shape)
  rawset(self, "eps", o.eps)
  rawset(self, "elementwise_affine", o.elementwise_affine)
  if o.elementwise_affine then self.weight = nn.Parameter(zorch.ones(shape)) end
end
function nn.RMSNorm:forward(x)
  return zorch.rms_norm(x, self.normalized_shape, rawget(self, "weight"), self.eps)
end

-- InstanceNorm1d/2d(num_features, {eps = 1e-5, momentum = 0.1, affine = false,
-- track_running_stats = false}): each sample's channel normalised over its
-- length (1d, (N, C, L) or (C, L)) or image (2d, (N, C, H, W) or (C, H, W)).
-- With running stats, training also updates running_mean and running_var (the
-- unbiased variance) with the mean over the samples, and eval uses them.
local function instance_norm_class(name, spatial)
  local cls = Module:extend(name)
  function cls:init(num_features, opts)
    check_int(name, "num_features", num_features)
    local o = read_opts(name, opts, {eps = {1e-5, num_gt0, "a number > 0"},
      momentum = {0.1, function(v) return v == false or (type(v) == "number" and v >= 0 and v <= 1) end,
                  "a number in [0, 1] or false (a cumulative average)"},
      affine = {false, is_bool, "true or false"}, track_running_stats = {false, is_bool, "true or false"}}, 4)
    rawset(self, "num_features", num_features)
    for k, v in pairs(o) do rawset(self, k, v) end
    norm_state(self, num_features)
  end
  function cls:forward(x)
    if not zorch.is_tensor(x) then error(("%s: expected a tensor, got %s"):format(name, type(x)), 2) end
    local d = x:dim()
    if d ~= spatial + 1 and d ~= spatial + 2 then
      error(("%s: expected %dD or %dD input, got shape %s"):format(name, spatial + 1, spatial + 2, shape_str(x)), 2)
    end
    local unbatched = d == spatial + 1
    if unbatched then x = x:unsqueeze(1) end
    local c = x.shape[2]
    if c ~= self.num_features and (self.affine or self.track_running_stats) then
      error(("%s: expected %d channels, got input %s"):format(name, self.num_features, shape_str(x)), 2)
    end
    local rm = rawget(self, "running_mean")
    local y
    if rm and not self.training then
      local s = channel_shape(x, c)
      y = (x - rm:reshape(s)) / (self.running_var:reshape(s) + self.eps):sqrt()
      y = affine(y, x, rawget(self, "weight"), rawget(self, "bias"))
    else
      y = zorch.group_norm(x, c, rawget(self, "weight"), rawget(self, "bias"), self.eps)
      if rm then
        zorch.no_grad(function()
          local flatx = x:detach():reshape({x.shape[1], c, -1})
          local nbt = self.num_batches_tracked
          nbt:copy_(nbt + 1)
          local m = self.momentum or 1 / nbt:item()
          local mean = flatx:mean(3):mean(1)
          local var = flatx:var(3, false, 1):mean(1)
          rm:copy_(rm * (1 - m) + mean * m)
          self.running_var:copy_(self.running_var * (1 - m) + var * m)
        end)
      end
    end
    if unbatched then y = y:squeeze(1) end
    return y
  end
  cls.__tostring = function(m)
    return ("%s(%d, eps=%g, momentum=%s, affine=%s, track_running_stats=%s)"):format(name, m.num_features, m.eps,
      m.momentum and ("%g"):format(m.momentum) or "None", py_bool(m.affine), py_bool(m.track_running_stats))
  end
  return cls
end
nn.InstanceNorm1d = instance_norm_class("nn.InstanceNorm1d", 1)
nn.InstanceNorm2d = instance_norm_class("nn.InstanceNorm2d", 2)

-- instance_norm(x, running_mean?, running_var?, weight?, bias?, use_input_stats =
-- true, momentum = 0.1, eps = 1e-5): x (N, C, ...) normalised per sample and
-- channel; with use_input_stats and running stats, these move towards the
-- batch's mean of each sample's mean and unbiased variance; without
-- use_input_stats the running stats normalise.
function zorch.instance_norm(x, rm, rv, weight, bias, use_input_stats, momentum, eps)
  local fn = "instance_norm"
  need_tensor(fn, "input", x)
  if x:dim() < 3 then error(("%s: expected input (N, C, ...) with spatial dims, got %s"):format(fn, shape_str(x)), 2) end
  local c = x.shape[2]
  check_per_channel(fn, x, c, {{"running_mean", rm}, {"running_var", rv}, {"weight", weight}, {"bias", bias}})
  if (rm == nil) ~= (rv == nil) then error(("%s: give both running_mean and running_var, or neither"):format(fn), 2) end
  if use_input_stats == nil then use_input_stats = true end
  momentum, eps = momentum == nil and 0.1 or momentum, eps == nil and 1e-5 or eps
  if type(use_input_stats) ~= "boolean" then
    error(("%s: use_input_stats must be true or false, got %s"):format(fn, tostring(use_input_stats)), 2)
  end
  need_number(fn, "momentum", momentum, 2)
  if type(eps) ~= "number" or not (eps >= 0) then error(("%s: eps must be a number >= 0, got %s"):format(fn, tostring(eps)), 2) end
  local s = {1, c}
  for _ = 3, x:dim() do s[#s + 1] = 1 end
  local y
  if not use_input_stats then
    if not rm then error(("%s: use_input_stats = false needs running_mean and running_var"):format(fn), 2) end
    y = (x - rm:reshape(s)) / (rv:reshape(s) + eps):sqrt()
    if weight then y = y * weight:reshape(s) end
    if bias then y = y + bias:reshape(s) end
    return y
  end
  local spatial = 1
  for i = 3, x:dim() do spatial = spatial * x.shape[i] end
  if spatial == 1 then
    error(("%s: expected more than 1 spatial element when normalising by the input, got input %s"):format(fn,
      shape_str(x)), 2)
  end
  y = zorch.group_norm(x, c, weight, bias, eps)
  if rm then
    zorch.no_grad(function()
      local flatx = x:detach():reshape({x.shape[1], c, -1})
      rm:copy_(rm * (1 - momentum) + flatx:mean(3):mean(1) * momentum)
      rv:copy_(rv * (1 - momentum) + flatx:var(3, false, 1):mean(1) * momentum)
    end)
  end
  return y
end

-- local_response_norm(x, size, alpha = 1e-4, beta = 0.75, k = 1): x (N, C, ...)
-- divided by (k + alpha * mean of x^2 over a window of `size` channels)^beta,
-- the window from c - size // 2 to c + (size - 1) // 2, zeros beyond the ends
function zorch.local_response_norm(x, size, alpha, beta, k)
  local fn = "local_response_norm"
  need_tensor(fn, "input", x)
  pos_int(fn, "size", size, 2)
  alpha, beta, k = alpha == nil and 1e-4 or alpha, beta == nil and 0.75 or beta, k == nil and 1.0 or k
  need_number(fn, "alpha", alpha, 2)
  need_number(fn, "beta", beta, 2)
  need_number(fn, "k", k, 2)
  if x:dim() < 3 then error(("%s: expected input (N, C, ...) with 3 or more dims, got %s"):format(fn, shape_str(x)), 2) end
  if x:numel() == 0 then return x * 1 end
  local sq = x * x
  local c = x.shape[2]
  -- shifts of c or more channels meet only the zeros past the ends: left out
  local front, back = math.min(size // 2, c - 1), math.min((size - 1) // 2, c - 1)
  local function zeros_c(n)
    local s = {}
    for i = 1, x:dim() do s[i] = i == 2 and n or x.shape[i] end
    return zorch.zeros(s, {dtype = x:dtype(), device = x:device()})
  end
  local parts = {}
  if front > 0 then parts[#parts + 1] = zeros_c(front) end
  parts[#parts + 1] = sq
  if back > 0 then parts[#parts + 1] = zeros_c(back) end
  local padded = #parts > 1 and zorch.cat(parts, 2) or sq
  local sum = padded:narrow(2, 1, c)
  for i = 2, front + back + 1 do sum = sum + padded:narrow(2, i, c) end
  return x / (sum / size * alpha + k) ^ beta
end

-- LocalResponseNorm(size, alpha = 1e-4, beta = 0.75, k = 1)
nn.LocalResponseNorm = Module:extend "nn.LocalResponseNorm"
function nn.LocalResponseNorm:init(size, alpha, beta, k)
  local fn = "nn.LocalResponseNorm"
  pos_int(fn, "size", size, 3)
  alpha, beta, k = alpha == nil and 1e-4 or alpha, beta == nil and 0.75 or beta, k == nil and 1.0 or k
  need_number(fn, "alpha", alpha, 3)
  need_number(fn, "beta", beta, 3)
  need_number(fn, "k", k, 3)
  self.size, self.alpha, self.beta, self.k = size, alpha, beta, k
end
function nn.LocalResponseNorm:forward(x)
  return as_fn("nn.LocalResponseNorm", 2, zorch.local_response_norm, x, self.size, self.alpha, self.beta, self.k)
end
nn.LocalResponseNorm.__tostring = function(s)
  return ("nn.LocalResponseNorm(%d, alpha=%s, beta=%s, k=%s)"):format(s.size, py_num(s.alpha), py_num(s.beta),
    py_num(s.k))
end
