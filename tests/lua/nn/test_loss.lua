-- The losses of lua/zorch/nn/loss.lua: values and gradients against PyTorch's
-- (lua/nn/loss.txt, from lua/nn/gen_loss.py), bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local nn = zorch.nn

local G = require("golden")("lua/nn/loss.txt")
local want, fixed, leaf, flat, check = G.want, G.fixed, G.leaf, G.flat, G.check

-- ---- losses ---------------------------------------------------------------------------------
local x, y = leaf(fixed({3, 4}, 1) * 2), leaf(fixed({3, 4}, 2) * 2)
for _, r in ipairs({"mean", "sum", "none"}) do
  check("smooth_l1_" .. r, function(a, b) return zorch.smooth_l1_loss(a, b, {reduction = r}) end, {x, y})
  check("huber_" .. r, function(a, b) return nn.HuberLoss{reduction = r}(a, b) end, {x, y})
end
check("smooth_l1_beta", function(a, b) return nn.SmoothL1Loss{beta = 0.5}(a, b) end, {x, y})
check("smooth_l1_beta0", function(a, b) return zorch.smooth_l1_loss(a, b, {beta = 0, reduction = "sum"}) end, {x, y})
check("huber_delta", function(a, b) return zorch.huber_loss(a, b, {delta = 0.7, reduction = "sum"}) end, {x, y})

local logp = leaf(zorch.log_softmax(fixed({3, 4}, 3), 2))
local q = leaf(zorch.softmax(fixed({3, 4}, 4), 2))
local logq = leaf(zorch.log_softmax(fixed({3, 4}, 4), 2))
for _, r in ipairs({"mean", "sum", "none", "batchmean"}) do
  check("kl_div_" .. r, function(a, b) return nn.KLDivLoss{reduction = r}(a, b) end, {logp, q})
end
check("kl_div_log_target", function(a, b) return zorch.kl_div(a, b, {reduction = "batchmean", log_target = true}) end,
  {logp, logq})
local q0 = q:detach():clone()
q0[2][3] = 0
-- (a target of 0 gets the gradient -input; PyTorch's is NaN there: element 7 not compared)
check("kl_div_zero", function(a, b) return zorch.kl_div(a, b, {reduction = "sum"}) end, {logp, leaf(q0)}, nil,
  {[2] = {[7] = true}})

local p = leaf((fixed({3, 4}, 5) * 3):sigmoid())
local t01 = fixed({3, 4}, 6):gt(0):to("float64")
local tsoft = leaf(fixed({3, 4}, 7):sigmoid())
local w = fixed({3, 4}, 8):abs() + 0.5
for _, r in ipairs({"mean", "sum", "none"}) do
  check("bce_" .. r, function(a, b) return zorch.binary_cross_entropy(a, b, {reduction = r}) end, {p, tsoft})
end
check("bce_weight", function(a, b) return nn.BCELoss{weight = w}(a, b) end, {p, t01})
do
  local l = zorch.no_grad(function() return zorch.binary_cross_entropy(p, tsoft) end)
  ok(not l.requires_grad and math.abs(l:item() - want.bce_mean.out[1]) < 1e-12, "binary_cross_entropy under no_grad")
end
local edge = leaf(zorch.tensor({0.0, 1.0, 0.0, 1.0, 1e-7, 1 - 1e-7}, {dtype = "float64"}))
local tedge = zorch.tensor({0.0, 1.0, 1.0, 0.0, 0.0, 1.0}, {dtype = "float64"})
check("bce_edge", function(a, b) return nn.BCELoss{reduction = "none"}(a, b) end, {edge, tedge}, 1e-8)
local z = leaf(fixed({3, 4}, 9) * 4)
local pw = fixed({4}, 10):abs() + 0.5
for _, r in ipairs({"mean", "sum", "none"}) do
  check("bcel_" .. r, function(a, b) return zorch.binary_cross_entropy_with_logits(a, b, {reduction = r}) end, {z, tsoft})
end
check("bcel_weights", function(a, b) return nn.BCEWithLogitsLoss{weight = w, pos_weight = pw}(a, b) end, {z, t01})

local a, b = leaf(fixed({3, 4}, 11)), leaf(fixed({3, 4}, 12))
check("cosine_similarity", function(u, v) return nn.CosineSimilarity()(u, v) end, {a, b})
check("cosine_similarity_dim0", function(u, v) return zorch.cosine_similarity(u, v, {dim = 1, eps = 1e-3}) end, {a, b})
check("normalize", function(u) return zorch.normalize(u) end, {a})
check("normalize_p1_dim0", function(u) return zorch.normalize(u, {p = 1, dim = 1}) end, {a})
local az = fixed({3, 4}, 11)
az[2] = 0
check("normalize_zero_row", function(u) return zorch.normalize(u) end, {leaf(az)})
check("cosine_similarity_zero_row", function(u, v) return zorch.cosine_similarity(u, v) end, {leaf(az), b})
check("pairwise_distance", function(u, v) return nn.PairwiseDistance()(u, v) end, {a, b})
check("pairwise_distance_p1", function(u, v) return zorch.pairwise_distance(u, v, {p = 1, eps = 1e-3, keepdim = true}) end,
  {a, b})
local x1, x2 = leaf(fixed({6}, 13)), leaf(fixed({6}, 14))
local ypm = zorch.where(fixed({6}, 15):gt(0), zorch.ones(6, {dtype = "float64"}), -zorch.ones(6, {dtype = "float64"}))
for _, r in ipairs({"mean", "sum", "none"}) do
  check("margin_ranking_" .. r, function(u, v) return nn.MarginRankingLoss{margin = 0.2, reduction = r}(u, v, ypm) end,
    {x1, x2})
  check("hinge_embedding_" .. r, function(u) return zorch.hinge_embedding_loss(u, ypm, {margin = 0.5, reduction = r}) end,
    {x1})
end
local y3 = zorch.where(fixed({3}, 16):gt(0), zorch.ones(3, {dtype = "float64"}), -zorch.ones(3, {dtype = "float64"}))
for _, r in ipairs({"mean", "sum", "none"}) do
  check("cosine_embedding_" .. r, function(u, v)
    return nn.CosineEmbeddingLoss{margin = 0.1, reduction = r}(u, v, y3) end, {a, b})
end
local n_ = leaf(fixed({3, 4}, 17))
for _, r in ipairs({"mean", "none"}) do
  check("triplet_" .. r, function(u, v, m) return nn.TripletMarginLoss{margin = 1.5, reduction = r}(u, v, m) end,
    {a, b, n_})
end
check("triplet_swap_p1", function(u, v, m)
  return zorch.triplet_margin_loss(u, v, m, {p = 1, swap = true, reduction = "sum"}) end, {a, b, n_})
local cnt = {}
for i, v in ipairs(flat(fixed({3, 4}, 18))) do cnt[i] = math.floor(math.abs(v) * 4) + 0.0 end
cnt = zorch.tensor(cnt, {dtype = "float64"}):reshape({3, 4})
for _, r in ipairs({"mean", "sum", "none"}) do
  check("poisson_" .. r, function(u) return nn.PoissonNLLLoss{reduction = r}(u, cnt) end, {a})
end
local rate = leaf(fixed({3, 4}, 19):abs() + 0.1)
check("poisson_rate_full", function(u)
  return zorch.poisson_nll_loss(u, cnt, {log_input = false, full = true, reduction = "none"}) end, {rate})
local var = leaf(fixed({3, 4}, 20):abs() + 0.05)
local var1 = leaf(fixed({3}, 21):abs() + 0.05)
for _, r in ipairs({"mean", "sum", "none"}) do
  check("gaussian_" .. r, function(u, v, s) return nn.GaussianNLLLoss{reduction = r}(u, v, s) end, {a, b, var})
end
check("gaussian_full_var1", function(u, v, s) return zorch.gaussian_nll_loss(u, v, s, {full = true, eps = 0.1}) end,
  {a, b, var1})

-- bad arguments name the function and the option
raises("smooth_l1_loss: an unknown option", function() zorch.smooth_l1_loss(x, y, {betta = 1}) end,
  "smooth_l1_loss", "unknown option 'betta'")
raises("smooth_l1_loss: a negative beta", function() zorch.smooth_l1_loss(x, y, {beta = -1}) end,
  "smooth_l1_loss: beta must be a number >= 0")
raises("nn.HuberLoss: delta 0", function() nn.HuberLoss{delta = 0} end, "nn.HuberLoss: delta must be a number > 0")
raises("nn.KLDivLoss: a bad reduction", function() nn.KLDivLoss{reduction = "avg"} end, "nn.KLDivLoss: reduction", "avg")
raises("binary_cross_entropy: shapes", function() zorch.binary_cross_entropy(p, zorch.ones(3)) end,
  "binary_cross_entropy", "(3, 4)", "(3)")
raises("binary_cross_entropy_with_logits: weight not a tensor", function()
  zorch.binary_cross_entropy_with_logits(z, t01, {weight = 2}) end, "binary_cross_entropy_with_logits: weight must be a tensor")
raises("cosine_similarity: dim 0", function() zorch.cosine_similarity(a, b, {dim = 0}) end,
  "cosine_similarity: dim must be a non-zero integer")
raises("normalize: an input that is not a tensor", function() zorch.normalize(3) end, "normalize: input must be a tensor")
raises("nn.TripletMarginLoss: margin 0", function() nn.TripletMarginLoss{margin = 0} end, "nn.TripletMarginLoss: margin")
raises("cosine_embedding_loss: a target of the wrong shape", function()
  zorch.cosine_embedding_loss(a, b, zorch.ones(4)) end, "cosine_embedding_loss: target (4)", "(3)")
raises("gaussian_nll_loss: var of a bad shape", function() zorch.gaussian_nll_loss(a, b, zorch.ones(4)) end,
  "gaussian_nll_loss: var (4)", "(3, 4)")
raises("gaussian_nll_loss: a negative var", function() zorch.gaussian_nll_loss(a, b, -var:detach()) end,
  "gaussian_nll_loss: var has negative entries")
raises("nn.PoissonNLLLoss: an unknown option", function() nn.PoissonNLLLoss{log = true} end,
  "nn.PoissonNLLLoss: unknown option 'log'")

tap.done()
