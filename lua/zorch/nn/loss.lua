-- zorch's losses and distances beyond those of lua/nn.lua: smooth L1, Huber,
-- KL divergence, binary cross entropy as functions, cosine similarity,
-- normalize, pairwise distance, the margin and embedding losses, Poisson and
-- Gaussian NLL, and their nn modules. PyTorch's formulas, names and defaults,
-- composed from the tensor ops. Dims count from 1: PyTorch's default dim=1
-- (the second) is dim = 2 here.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local lib = zorch._nn_lib
local Module, check_same_shape, reduce, shape_str = lib.Module, lib.check_same_shape, lib.reduce, lib.shape_str
local softplus, read_opts, is_reduction, REDUCTION = lib.softplus, lib.read_opts, lib.is_reduction, lib.REDUCTION
local num_ge0, num_gt0, is_num, is_bool = lib.num_ge0, lib.num_gt0, lib.is_num, lib.is_bool
local opt_tensor, nonzero_int, is_p, need_tensor = lib.opt_tensor, lib.nonzero_int, lib.is_p, lib.need_tensor

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
lib.fn_module = fn_module -- (lua/layers2.lua's losses too)
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

