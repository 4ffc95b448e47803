"""PyTorch's losses and distances, for tests/lua/nn/test_loss.lua:
    python3 tests/lua/nn/gen_loss.py > tests/lua/nn/loss.txt

Inputs are fixed formulas the Lua test computes too: fixed(shape, k) is
sin(0.37 k i + k) over the flattened index i = 0, 1, ... (float64).
Lines: `case out values...` (the output, flattened), `case gN values...` (the
gradient of input N of sum(out * c), c = 1 + 0.1 i over the output's flattened
index)."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixed_cases import case, emit, fixed, leaf  # noqa: E402

torch.set_default_dtype(torch.float64)


# ---- losses ----
x, y = leaf(fixed((3, 4), 1) * 2), leaf(fixed((3, 4), 2) * 2)
for r in ("mean", "sum", "none"):
    case("smooth_l1_" + r, lambda a, b: F.smooth_l1_loss(a, b, reduction=r), x, y)
    case("huber_" + r, lambda a, b: F.huber_loss(a, b, reduction=r), x, y)
case("smooth_l1_beta", lambda a, b: F.smooth_l1_loss(a, b, beta=0.5), x, y)
case("smooth_l1_beta0", lambda a, b: F.smooth_l1_loss(a, b, beta=0.0, reduction="sum"), x, y)
case("huber_delta", lambda a, b: F.huber_loss(a, b, delta=0.7, reduction="sum"), x, y)

logp = leaf(F.log_softmax(fixed((3, 4), 3), dim=1))
q = leaf(F.softmax(fixed((3, 4), 4), dim=1))
logq = leaf(F.log_softmax(fixed((3, 4), 4), dim=1))
for r in ("mean", "sum", "none", "batchmean"):
    case("kl_div_" + r, lambda a, b: F.kl_div(a, b, reduction=r), logp, q)
case("kl_div_log_target", lambda a, b: F.kl_div(a, b, reduction="batchmean", log_target=True), logp, logq)
q0 = q.detach().clone()
q0[1, 2] = 0.0
case("kl_div_zero", lambda a, b: F.kl_div(a, b, reduction="sum"), logp, leaf(q0))

p = leaf(torch.sigmoid(fixed((3, 4), 5) * 3))
t01 = (fixed((3, 4), 6) > 0).double()
tsoft = leaf(torch.sigmoid(fixed((3, 4), 7)))
w = fixed((3, 4), 8).abs() + 0.5
for r in ("mean", "sum", "none"):
    case("bce_" + r, lambda a, b: F.binary_cross_entropy(a, b, reduction=r), p, tsoft)
case("bce_weight", lambda a, b: F.binary_cross_entropy(a, b, weight=w), p, t01)
edge = leaf(torch.tensor([0.0, 1.0, 0.0, 1.0, 1e-7, 1 - 1e-7]))
tedge = torch.tensor([0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
case("bce_edge", lambda a, b: F.binary_cross_entropy(a, b, reduction="none"), edge, tedge)
z = leaf(fixed((3, 4), 9) * 4)
pw = fixed((4,), 10).abs() + 0.5
for r in ("mean", "sum", "none"):
    case("bcel_" + r, lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=r), z, tsoft)
case("bcel_weights", lambda a, b: F.binary_cross_entropy_with_logits(a, b, weight=w, pos_weight=pw), z, t01)

a, b = leaf(fixed((3, 4), 11)), leaf(fixed((3, 4), 12))
case("cosine_similarity", lambda u, v: F.cosine_similarity(u, v), a, b)
case("cosine_similarity_dim0", lambda u, v: F.cosine_similarity(u, v, dim=0, eps=1e-3), a, b)
case("normalize", lambda u: F.normalize(u), a)
case("normalize_p1_dim0", lambda u: F.normalize(u, p=1.0, dim=0), a)
az = fixed((3, 4), 11)
az[1] = 0.0  # a zero row: the norm's gradient is 0 there
case("normalize_zero_row", lambda u: F.normalize(u), leaf(az))
case("cosine_similarity_zero_row", lambda u, v: F.cosine_similarity(u, v), leaf(az), b)
case("pairwise_distance", lambda u, v: F.pairwise_distance(u, v), a, b)
case("pairwise_distance_p1", lambda u, v: F.pairwise_distance(u, v, p=1.0, eps=1e-3, keepdim=True), a, b)
x1, x2 = leaf(fixed((6,), 13)), leaf(fixed((6,), 14))
ypm = torch.where(fixed((6,), 15) > 0, 1.0, -1.0)
for r in ("mean", "sum", "none"):
    case("margin_ranking_" + r, lambda u, v: F.margin_ranking_loss(u, v, ypm, margin=0.2, reduction=r), x1, x2)
    case("hinge_embedding_" + r, lambda u: F.hinge_embedding_loss(u, ypm, margin=0.5, reduction=r), x1)
y3 = torch.where(fixed((3,), 16) > 0, 1.0, -1.0)
for r in ("mean", "sum", "none"):
    case("cosine_embedding_" + r, lambda u, v: F.cosine_embedding_loss(u, v, y3, margin=0.1, reduction=r), a, b)
n_ = leaf(fixed((3, 4), 17))
for r in ("mean", "none"):
    case("triplet_" + r, lambda u, v, m: F.triplet_margin_loss(u, v, m, margin=1.5, reduction=r), a, b, n_)
case("triplet_swap_p1", lambda u, v, m: F.triplet_margin_loss(u, v, m, p=1.0, swap=True, reduction="sum"), a, b, n_)
cnt = torch.floor(fixed((3, 4), 18).abs() * 4)
for r in ("mean", "sum", "none"):
    case("poisson_" + r, lambda u: F.poisson_nll_loss(u, cnt, reduction=r), a)
rate = leaf(fixed((3, 4), 19).abs() + 0.1)
case("poisson_rate_full", lambda u: F.poisson_nll_loss(u, cnt, log_input=False, full=True, reduction="none"), rate)
var = leaf(fixed((3, 4), 20).abs() + 0.05)
var1 = leaf(fixed((3,), 21).abs() + 0.05)
for r in ("mean", "sum", "none"):
    case("gaussian_" + r, lambda u, v, s: F.gaussian_nll_loss(u, v, s, reduction=r), a, b, var)
case("gaussian_full_var1", lambda u, v, s: F.gaussian_nll_loss(u, v, s, full=True, eps=0.1), a, b, var1)
