-- zorch.nn.loss: every loss and distance, as functions (zorch.cross_entropy,
-- zorch.smooth_l1_loss, ...) and modules. PyTorch's formulas, names and
-- defaults, composed from the tensor ops. Dims count from 1: PyTorch's
-- default dim=1 (the second) is dim = 2 here; class indices are 1-based.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local check_options = zorch._require("zorch.util").check_options
local M = zorch._require "zorch.nn.module"
local INT_DTYPES, Module, REDUCTION, is_bool = M.INT_DTYPES, M.Module, M.REDUCTION, M.is_bool
local is_num, is_p, is_reduction, need_float = M.is_num, M.is_p, M.is_reduction, M.need_float
local need_tensor, nonzero_int, num_ge0, num_gt0 = M.need_tensor, M.nonzero_int, M.num_ge0, M.num_gt0
local opt_tensor, read_opts, shape_str = M.opt_tensor, M.read_opts, M.shape_str

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
  if type(eps) ~= "number" or not (eps >= 0 and eps <= 1) then
    error("cross_entropy: label_smoothing must be a number from 0 to 1, got " .. tostring(eps), 2)
  end
  if zorch.is_tensor(targets) and zorch.is_tensor(logits) then
    local dt = targets:dtype()
    if dt == "int32" or dt == "uint8" or dt == "int8" or dt == "int16" then
      targets = targets:to("int64") -- class indices of any integer dtype, as torch widens them
    elseif (dt == "float32" or dt == "float64" or dt == "bfloat16" or dt == "float16")
        and targets:dim() == logits:dim() and logits:dim() >= 1 then
      -- probabilities per class (torch's soft targets): -sum_c p[c] log softmax[c]
      if w ~= nil or ii ~= nil then
        error("cross_entropy: weight and ignore_index need class-index targets, not probabilities", 2)
      end
      for i = 1, logits:dim() do
        if targets.shape[i] ~= logits.shape[i] then
          error(("cross_entropy: probability targets must have the logits' shape %s, got %s"):format(
            M.shape_str(logits), M.shape_str(targets)), 2)
        end
      end
      local cdim = logits:dim() == 1 and 1 or 2
      local p = targets:to(logits:dtype())
      if eps > 0 then p = p * (1 - eps) + eps / logits.shape[cdim] end
      local per = -(p * zorch.log_softmax(logits, cdim)):sum(cdim)
      if red == "sum" then return per:sum() elseif red == "none" then return per end
      return per:mean()
    end
  end
  local fused = {reduction = rawget(opts, "reduction"), ignore_index = rawget(opts, "ignore_index")}
  if w == nil and eps == 0 then return ce_fused(logits, targets, fused) end
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

-- dim (checked a non-zero integer) within n dims (a 0-d input has one), so
-- an error names fn rather than the sum inside.
local function check_dim_in(fn, dim, n, x)
  n = math.max(n, 1)
  if dim > n or dim < -n then error(("%s: dim %d out of range for input %s"):format(fn, dim, shape_str(x)), 3) end
end
local function zeros_of(t) return zorch.zeros_like(t) end
-- a and b must broadcast together (NumPy's rule, from the last dim), so an
-- error names fn and both arguments rather than the op inside.
local function check_broadcast(fn, an, a, bn, b)
  local na, nb = a:dim(), b:dim()
  for i = 0, math.min(na, nb) - 1 do
    local x, y = a:size(na - i), b:size(nb - i)
    if x ~= y and x ~= 1 and y ~= 1 then
      error(("%s: %s %s and %s %s cannot be broadcast together"):format(fn, an, shape_str(a), bn, shape_str(b)), 3)
    end
  end
end

-- smooth_l1_loss(x, y, {beta = 1, reduction}): 0.5 d^2 / beta where |d| < beta,
-- else |d| - 0.5 beta (beta 0: |d|)
local SMOOTH_L1 = {beta = {1.0, num_ge0, "a number >= 0"}, reduction = REDUCTION}
function zorch.smooth_l1_loss(x, y, opts)
  local o = read_opts("smooth_l1_loss", opts, SMOOTH_L1, 3)
  check_same_shape("smooth_l1_loss", x, y)
  local d = x - y
  local ad = d:abs()
  if o.beta == 0 then return reduce(ad, o.reduction) end
  return reduce(zorch.where(ad:lt(o.beta), d * d * (0.5 / o.beta), ad - 0.5 * o.beta), o.reduction)
end
-- huber_loss(x, y, {delta = 1, reduction}): 0.5 d^2 where |d| < delta, else delta (|d| - 0.5 delta)
local HUBER = {delta = {1.0, num_gt0, "a number > 0"}, reduction = REDUCTION}
function zorch.huber_loss(x, y, opts)
  local o = read_opts("huber_loss", opts, HUBER, 3)
  check_same_shape("huber_loss", x, y)
  local d = x - y
  local ad = d:abs()
  return reduce(zorch.where(ad:lt(o.delta), d * d * 0.5, (ad - 0.5 * o.delta) * o.delta), o.reduction)
end

-- kl_div(input, target, {reduction, log_target = false}) on log-probabilities:
-- target (log target - input), 0 where the target is 0 (exp(t) (t - input) with
-- log_target); "batchmean" divides the sum by the size of dim 1.
local KL = {reduction = {"mean", function(v) return is_reduction(v) or v == "batchmean" end,
                         "'mean', 'batchmean', 'sum' or 'none'"}, log_target = {false, is_bool, "true or false"}}
function zorch.kl_div(input, target, opts)
  local o = read_opts("kl_div", opts, KL, 3)
  need_tensor("kl_div", "input", input)
  need_tensor("kl_div", "target", target)
  check_broadcast("kl_div", "input", input, "target", target)
  local loss
  if o.log_target then
    loss = target:exp() * (target - input)
  else
    -- log(1) where the target is 0: the term is then -0 * input, as xlogy's 0
    local pos = target:gt(0)
    loss = target * (zorch.where(pos, target, zorch.ones_like(target)):log() - input)
  end
  if o.reduction == "batchmean" then
    local n = loss:dim() > 0 and loss:size(1) or 1
    return loss:sum() / n
  end
  return reduce(loss, o.reduction)
end

-- binary_cross_entropy(x, y, {weight, reduction}) on probabilities: -w (y log x
-- + (1 - y) log(1 - x)), each log clamped at -100; its gradient is PyTorch's,
-- w (x - y) / max(x (1 - x), 1e-12), finite at x = 0 and 1.
local bce_elems -- (made at the first call)
local function bce_function() return zorch.Function{name = "binary_cross_entropy",
  forward = function(ctx, x, y)
    ctx:save_for_backward(x, y)
    return -(y * zorch.clamp(x:log(), -100) + (1 - y) * zorch.clamp((1 - x):log(), -100))
  end,
  backward = function(ctx, g)
    local x, y = ctx.saved_tensors[1], ctx.saved_tensors[2]
    local gx = g * (x - y) / zorch.clamp(x * (1 - x), 1e-12)
    -- the target's gradient (rarely wanted): the logs again rather than kept
    local gy = y.requires_grad and g * (zorch.clamp((1 - x):log(), -100) - zorch.clamp(x:log(), -100)) or nil
    return gx, gy
  end}
end
local BCE = {weight = {nil, opt_tensor, "a tensor"}, reduction = REDUCTION}
function zorch.binary_cross_entropy(x, y, opts)
  local o = read_opts("binary_cross_entropy", opts, BCE, 3)
  check_same_shape("binary_cross_entropy", x, y)
  bce_elems = bce_elems or bce_function()
  local loss = bce_elems(x, y)
  if o.weight then loss = loss * o.weight end
  return reduce(loss, o.reduction)
end

-- binary_cross_entropy_with_logits(x, y, {weight, pos_weight, reduction}):
-- (1 - y) x + (1 + (pos_weight - 1) y) log(1 + exp(-x)), without overflow for
-- any logit; pos_weight broadcasts over the last dim, weight to the input.
local BCEL = {weight = {nil, opt_tensor, "a tensor"}, pos_weight = {nil, opt_tensor, "a tensor"}, reduction = REDUCTION}
function zorch.binary_cross_entropy_with_logits(x, y, opts)
  local o = read_opts("binary_cross_entropy_with_logits", opts, BCEL, 3)
  check_same_shape("binary_cross_entropy_with_logits", x, y)
  local sp = softplus(-x)
  if o.pos_weight then sp = sp * ((o.pos_weight - 1) * y + 1) end
  local loss = (1 - y) * x + sp
  if o.weight then loss = loss * o.weight end
  return reduce(loss, o.reduction)
end

-- cosine_similarity(a, b, {dim = 2, eps = 1e-8}): sum(a b) / (max(|a|, eps) max(|b|, eps)) along dim
local COSSIM = {dim = {2, nonzero_int, "a non-zero integer"}, eps = {1e-8, num_ge0, "a number >= 0"}}
function zorch.cosine_similarity(a, b, opts)
  local o = read_opts("cosine_similarity", opts, COSSIM, 3)
  need_tensor("cosine_similarity", "x1", a)
  need_tensor("cosine_similarity", "x2", b)
  check_broadcast("cosine_similarity", "x1", a, "x2", b)
  check_dim_in("cosine_similarity", o.dim, math.max(a:dim(), b:dim()), a:dim() >= b:dim() and a or b)
  local na = zorch.clamp(zorch.norm(a, 2, o.dim), o.eps)
  local nb = zorch.clamp(zorch.norm(b, 2, o.dim), o.eps)
  return (a * b):sum(o.dim) / (na * nb)
end

-- normalize(x, {p = 2, dim = 2, eps = 1e-12}): x / max(||x||_p, eps) along dim (F.normalize)
local NORMALIZE = {p = {2.0, is_p, "a number > 0"}, dim = {2, nonzero_int, "a non-zero integer"},
                   eps = {1e-12, num_ge0, "a number >= 0"}}
function zorch.normalize(x, opts)
  local o = read_opts("normalize", opts, NORMALIZE, 3)
  need_tensor("normalize", "input", x)
  check_dim_in("normalize", o.dim, x:dim(), x)
  return x / zorch.clamp(zorch.norm(x, o.p, o.dim, true), o.eps)
end

-- pairwise_distance(x1, x2, {p = 2, eps = 1e-6, keepdim = false}): ||x1 - x2 + eps||_p over the last dim
local PDIST = {p = {2.0, is_p, "a number > 0"}, eps = {1e-6, num_ge0, "a number >= 0"},
               keepdim = {false, is_bool, "true or false"}}
local function pairwise(x1, x2, o) return zorch.norm(x1 - x2 + o.eps, o.p, -1, o.keepdim) end
function zorch.pairwise_distance(x1, x2, opts)
  local o = read_opts("pairwise_distance", opts, PDIST, 3)
  need_tensor("pairwise_distance", "x1", x1)
  need_tensor("pairwise_distance", "x2", x2)
  check_broadcast("pairwise_distance", "x1", x1, "x2", x2)
  return pairwise(x1, x2, o)
end

-- margin_ranking_loss(x1, x2, y, {margin = 0, reduction}): max(0, -y (x1 - x2) + margin)
local MARGIN = {margin = {0.0, is_num, "a number"}, reduction = REDUCTION}
function zorch.margin_ranking_loss(x1, x2, y, opts)
  local o = read_opts("margin_ranking_loss", opts, MARGIN, 3)
  check_same_shape("margin_ranking_loss", x1, x2)
  check_same_shape("margin_ranking_loss", x1, y)
  return reduce(zorch.relu(-y * (x1 - x2) + o.margin), o.reduction)
end

-- hinge_embedding_loss(x, y, {margin = 1, reduction}): x where y = 1,
-- max(0, margin - x) where y = -1 (both terms where y is neither)
local HINGE = {margin = {1.0, is_num, "a number"}, reduction = REDUCTION}
function zorch.hinge_embedding_loss(x, y, opts)
  local o = read_opts("hinge_embedding_loss", opts, HINGE, 3)
  check_same_shape("hinge_embedding_loss", x, y)
  local z = zeros_of(x)
  local loss = zorch.where(y:ne(1), zorch.relu(o.margin - x), z) + zorch.where(y:ne(-1), x, z)
  return reduce(loss, o.reduction)
end

-- cosine_embedding_loss(x1, x2, y, {margin = 0, reduction}) over the last dim:
-- 1 - cos where y = 1, max(0, cos - margin) where y = -1, with cos =
-- sum(x1 x2) / sqrt((|x1|^2 + 1e-12) (|x2|^2 + 1e-12)) as PyTorch's
function zorch.cosine_embedding_loss(x1, x2, y, opts)
  local o = read_opts("cosine_embedding_loss", opts, MARGIN, 3)
  check_same_shape("cosine_embedding_loss", x1, x2)
  need_tensor("cosine_embedding_loss", "target", y)
  local cos = (x1 * x2):sum(-1) / (((x1 * x1):sum(-1) + 1e-12) * ((x2 * x2):sum(-1) + 1e-12)):sqrt()
  if shape_str(cos) ~= shape_str(y) then
    error(("cosine_embedding_loss: target %s must have the shape %s of the inputs without their last dim"):format(
      shape_str(y), shape_str(cos)), 2)
  end
  local z = zeros_of(cos)
  local loss = zorch.where(y:eq(1), 1 - cos, z) + zorch.where(y:eq(-1), zorch.relu(cos - o.margin), z)
  return reduce(loss, o.reduction)
end

-- triplet_margin_loss(a, p, n, {margin = 1, p = 2, eps = 1e-6, swap = false, reduction}):
-- max(0, margin + d(a, p) - d(a, n)) with pairwise_distance; swap takes the
-- smaller of d(a, n) and d(p, n)
local TRIPLET = {margin = {1.0, num_gt0, "a number > 0"}, p = {2.0, is_p, "a number > 0"},
                 eps = {1e-6, num_ge0, "a number >= 0"}, swap = {false, is_bool, "true or false"}, reduction = REDUCTION}
function zorch.triplet_margin_loss(a, pos, neg, opts)
  local o = read_opts("triplet_margin_loss", opts, TRIPLET, 3)
  check_same_shape("triplet_margin_loss", a, pos)
  check_same_shape("triplet_margin_loss", a, neg)
  local d = {p = o.p, eps = o.eps, keepdim = false}
  local dap, dan = pairwise(a, pos, d), pairwise(a, neg, d)
  if o.swap then
    local dpn = pairwise(pos, neg, d)
    dan = zorch.where(dpn:lt(dan), dpn, dan)
  end
  return reduce(zorch.relu(dap - dan + o.margin), o.reduction)
end

-- poisson_nll_loss(input, target, {log_input = true, full = false, eps = 1e-8, reduction}):
-- exp(input) - target input, or input - target log(input + eps); full adds
-- Stirling's target log(target) - target + 0.5 log(2 pi target) where target > 1
local POISSON = {log_input = {true, is_bool, "true or false"}, full = {false, is_bool, "true or false"},
                 eps = {1e-8, num_ge0, "a number >= 0"}, reduction = REDUCTION}
function zorch.poisson_nll_loss(input, target, opts)
  local o = read_opts("poisson_nll_loss", opts, POISSON, 3)
  check_same_shape("poisson_nll_loss", input, target)
  local loss
  if o.log_input then loss = input:exp() - target * input
  else loss = input - target * (input + o.eps):log() end
  if o.full then
    local big = target:gt(1)
    local t = zorch.where(big, target, zorch.ones_like(target))
    local stirling = t * t:log() - t + (t * (2 * math.pi)):log() * 0.5
    loss = loss + zorch.where(big, stirling, zeros_of(stirling))
  end
  return reduce(loss, o.reduction)
end

-- gaussian_nll_loss(input, target, var, {full = false, eps = 1e-6, reduction}):
-- 0.5 (log v + (input - target)^2 / v) (+ 0.5 log(2 pi) with full), v = var
-- clamped at eps with the gradient of var itself, as PyTorch's; var has the
-- input's shape, or it without the last dim, or with the last dim 1.
local GAUSS = {full = {false, is_bool, "true or false"}, eps = {1e-6, num_ge0, "a number >= 0"}, reduction = REDUCTION}
function zorch.gaussian_nll_loss(input, target, var, opts)
  local fn = "gaussian_nll_loss"
  local o = read_opts(fn, opts, GAUSS, 3)
  check_same_shape(fn, input, target)
  need_tensor(fn, "var", var)
  if shape_str(var) ~= shape_str(input) then
    local n, vs, is = var:dim(), var.shape, input.shape
    local lead = n == input:dim() - 1 or (n == input:dim() and vs[n] == 1)
    for d = 1, math.min(n, input:dim() - 1) do lead = lead and vs[d] == is[d] end
    if not lead then
      error(("%s: var %s must have the input's shape %s, or it without the last dim or with the last dim 1"):format(
        fn, shape_str(var), shape_str(input)), 2)
    end
    if n == input:dim() - 1 then var = var:unsqueeze(-1) end
  end
  if var:lt(0):sum():item() > 0 then error(("%s: var has negative entries"):format(fn), 2) end
  local vd = var:detach()
  local v = var + (zorch.clamp(vd, o.eps) - vd) -- clamped values, var's gradient
  local loss = (v:log() + (input - target) ^ 2 / v) * 0.5
  if o.full then loss = loss + 0.5 * math.log(2 * math.pi) end
  return reduce(loss, o.reduction)
end

-- Loss modules over the functions: Name(opts) checks the options (an unknown
-- key or a bad value is an error naming the module); forward(...) passes its
-- `nargs` tensors and the options.
local function fn_module(name, fn, spec, nargs)
  local cls = Module:extend(name)
  function cls:init(opts)
    local o = read_opts(name, opts, spec, 4)
    for k, v in pairs(o) do rawset(self, k, v) end
    rawset(self, "_opts", o)
  end
  if nargs == 3 then
    function cls:forward(a, b, c) return fn(a, b, c, self._opts) end
  elseif nargs == 2 then
    function cls:forward(a, b) return fn(a, b, self._opts) end
  else
    function cls:forward(a) return fn(a, self._opts) end
  end
  return cls
end
nn.SmoothL1Loss = fn_module("nn.SmoothL1Loss", zorch.smooth_l1_loss, SMOOTH_L1, 2)
nn.HuberLoss = fn_module("nn.HuberLoss", zorch.huber_loss, HUBER, 2)
nn.KLDivLoss = fn_module("nn.KLDivLoss", zorch.kl_div, KL, 2)
nn.CosineSimilarity = fn_module("nn.CosineSimilarity", zorch.cosine_similarity, COSSIM, 2)
nn.PairwiseDistance = fn_module("nn.PairwiseDistance", zorch.pairwise_distance, PDIST, 2)
nn.MarginRankingLoss = fn_module("nn.MarginRankingLoss", zorch.margin_ranking_loss, MARGIN, 3)
nn.HingeEmbeddingLoss = fn_module("nn.HingeEmbeddingLoss", zorch.hinge_embedding_loss, HINGE, 2)
nn.CosineEmbeddingLoss = fn_module("nn.CosineEmbeddingLoss", zorch.cosine_embedding_loss, MARGIN, 3)
nn.TripletMarginLoss = fn_module("nn.TripletMarginLoss", zorch.triplet_margin_loss, TRIPLET, 3)
nn.PoissonNLLLoss = fn_module("nn.PoissonNLLLoss", zorch.poisson_nll_loss, POISSON, 2)
nn.GaussianNLLLoss = fn_module("nn.GaussianNLLLoss", zorch.gaussian_nll_loss, GAUSS, 3)

local function same_shape(fn, x, y)
  need_tensor(fn, "input", x)
  need_tensor(fn, "target", y)
  if shape_str(x) ~= shape_str(y) then
    error(("%s: input %s and target %s must have the same shape"):format(fn, shape_str(x), shape_str(y)), 3)
  end
end

-- soft_margin_loss(x, y, {reduction}): log(1 + exp(-y x)), y in {1, -1}
local SOFT_MARGIN = {reduction = REDUCTION}
function zorch.soft_margin_loss(x, y, opts)
  local o = read_opts("soft_margin_loss", opts, SOFT_MARGIN, 3)
  same_shape("soft_margin_loss", x, y)
  return reduce(softplus(-y * x), o.reduction)
end

-- multilabel_soft_margin_loss(x, y, {weight, reduction}): over the last dim
-- (the C classes), the mean of -(y log sigmoid(x) + (1 - y) log sigmoid(-x)),
-- each class's term times weight (C,) when given
local MULTILABEL_SOFT = {weight = {nil, opt_tensor, "a tensor"}, reduction = REDUCTION}
function zorch.multilabel_soft_margin_loss(x, y, opts)
  local fn = "multilabel_soft_margin_loss"
  local o = read_opts(fn, opts, MULTILABEL_SOFT, 3)
  same_shape(fn, x, y)
  if x:dim() == 0 then error(("%s: expected input (N, C) or (C,), got %s"):format(fn, shape_str(x)), 2) end
  local loss = y * softplus(-x) + (1 - y) * softplus(x)
  if o.weight then
    local c = x.shape[x:dim()]
    if o.weight:dim() > 1 or (o.weight:numel() ~= c and o.weight:numel() ~= 1) then
      error(("%s: weight %s must hold one weight per class (%d) of input %s"):format(fn, shape_str(o.weight), c,
        shape_str(x)), 2)
    end
    loss = loss * o.weight
  end
  return reduce(loss:mean(-1), o.reduction)
end

-- Class targets for fn: an integer tensor of 1-based classes in 1..c.
local function check_classes(fn, t, c, lo, level)
  if not INT_DTYPES[t:dtype()] then
    error(("%s: target must hold integer classes (1-based), got dtype %s"):format(fn, t:dtype()), level + 1)
  end
  if t:numel() == 0 then return end
  local mn, mx = t:min():item(), t:max():item()
  if mn < lo or mx > c then
    error(("%s: target %d is out of range 1..%d (targets are 1-based, as Lua counts; add 1 to 0-based labels)"):format(
      fn, (mn < lo) and mn or mx, c), level + 1)
  end
end

-- multi_margin_loss(x, y, {p = 1, margin = 1, weight, reduction}): x (N, C) or
-- (C,), y the 1-based classes (N,) (or () for one sample); per sample
-- sum over i ~= y of max(0, margin - x[y] + x[i])^p / C, times weight[y]
local MULTI_MARGIN = {p = {1, function(v) return v == 1 or v == 2 end, "1 or 2"}, margin = {1.0, is_num, "a number"},
                      weight = {nil, opt_tensor, "a tensor"}, reduction = REDUCTION}
function zorch.multi_margin_loss(x, y, opts)
  local fn = "multi_margin_loss"
  local o = read_opts(fn, opts, MULTI_MARGIN, 3)
  need_tensor(fn, "input", x)
  need_tensor(fn, "target", y)
  local one = x:dim() == 1
  if not (x:dim() == 2 or one) or (x:dim() == 2 and shape_str(y) ~= ("(%d)"):format(x.shape[1]))
      or (one and y:numel() ~= 1) or y:dim() > 1 or x:numel() == 0 then
    error(("%s: expected input (N, C) with target (N), or input (C) with one target, got input %s and target %s"):format(
      fn, shape_str(x), shape_str(y)), 2)
  end
  local c = x.shape[x:dim()]
  need_float(fn, "input", x, 2)
  check_classes(fn, y, c, 1, 2)
  if o.weight and (o.weight:dim() ~= 1 or o.weight.shape[1] ~= c) then
    error(("%s: weight must be a tensor of shape (%d) for input %s, got %s"):format(fn, c, shape_str(x),
      shape_str(o.weight)), 2)
  end
  local x2 = one and x:reshape({1, c}) or x
  local yi = y:reshape({-1, 1}):to("int64")
  local z = zorch.relu(x2 - zorch.gather(x2, 2, yi) + o.margin)
  if o.p == 2 then z = z * z end
  if o.weight then z = z * zorch.index_select(o.weight, 1, yi:reshape({-1})):reshape({-1, 1}) end
  -- the target's own term (always margin) is left out
  local other = 1 - zorch.one_hot(yi:reshape({-1}), c):to(x:dtype())
  local per = (z * other):sum(2) / c
  return reduce(per:reshape(y.shape), o.reduction)
end

-- multilabel_margin_loss(x, y, {reduction}): x (N, C) or (C,), y of its shape
-- listing each sample's 1-based target classes, the list ending at the first
-- entry below 1 (PyTorch's -1 padding plus 1 is 0); per sample sum over the
-- targets j and the non-targets i of max(0, 1 - (x[j] - x[i])) / C.
local MULTILABEL_MARGIN = {reduction = REDUCTION}
function zorch.multilabel_margin_loss(x, y, opts)
  local fn = "multilabel_margin_loss"
  local o = read_opts(fn, opts, MULTILABEL_MARGIN, 3)
  same_shape(fn, x, y)
  if (x:dim() ~= 1 and x:dim() ~= 2) or x:numel() == 0 then
    error(("%s: expected input (N, C) or (C), got %s"):format(fn, shape_str(x)), 2)
  end
  local c = x.shape[x:dim()]
  need_float(fn, "input", x, 2)
  if not INT_DTYPES[y:dtype()] then
    error(("%s: target must hold integer classes (1-based), got dtype %s"):format(fn, y:dtype()), 2)
  end
  local rows = y:reshape({-1, c}):totable()
  -- pairs[n][j][i]: how often target j faces non-target i in sample n
  local pairs_ = {}
  for n, row in ipairs(rows) do
    local count, is_t = {}, {}
    for _, j in ipairs(row) do
      if j < 1 then break end
      if j > c then error(("%s: target %d is out of range 1..%d (targets are 1-based, 0 ends a list)"):format(fn,
        j, c), 2) end
      count[j], is_t[j] = (count[j] or 0) + 1, true
    end
    local m = {}
    for j = 1, c do
      local r = {}
      for i = 1, c do r[i] = (count[j] and not is_t[i]) and count[j] or 0 end
      m[j] = r
    end
    pairs_[n] = m
  end
  local x2 = x:reshape({-1, c})
  local mask = zorch.tensor(pairs_, {dtype = x:dtype(), device = x:device()})
  local per = (zorch.relu(1 - x2:unsqueeze(3) + x2:unsqueeze(2)) * mask):sum(3):sum(2) / c
  if x:dim() == 1 then per = per:reshape({}) end
  return reduce(per, o.reduction)
end

-- the loss modules: Name(opts) with the function's options (lua/losses.lua's factory)
nn.SoftMarginLoss = fn_module("nn.SoftMarginLoss", zorch.soft_margin_loss, SOFT_MARGIN, 2)
nn.MultiLabelSoftMarginLoss = fn_module("nn.MultiLabelSoftMarginLoss", zorch.multilabel_soft_margin_loss,
  MULTILABEL_SOFT, 2)
nn.MultiMarginLoss = fn_module("nn.MultiMarginLoss", zorch.multi_margin_loss, MULTI_MARGIN, 2)
nn.MultiLabelMarginLoss = fn_module("nn.MultiLabelMarginLoss", zorch.multilabel_margin_loss, MULTILABEL_MARGIN, 2)
