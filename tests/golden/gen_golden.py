#!/usr/bin/env python3
"""Writes tests/golden/ops.txt: inputs, outputs and input gradients of zorch's ops
computed by PyTorch, read by tests/test_golden.c.

Each case is a line `case NAME [P0 [P1]]` (P: the op's scalar parameters), then
one line per tensor: `tensor ROLE DTYPE NDIM D1..Dn V1..Vk` with ROLE in0.., out,
gout (the gradient fed to backward) and grad0.. (the gradients PyTorch computed
for the inputs). Dimensions and indices are 0-based, as in zorch's C API.

Every elementwise op of zorch's registry (ops/backend/pointwise_ops.h) needs a case
under its registry name: test_golden fails for a registered op without one.
Each case draws its numbers from a generator seeded by its name, so adding a
case leaves the others' numbers as they were.

Usage: python3 tests/golden/gen_golden.py [CASE...]  (needs torch); with names,
only those cases are written (new ones, or ones that changed), the others kept
as they are, so another torch version does not move their last bits.
"""
import os
import sys
import zlib

import torch
import torch.nn.functional as F

DT = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.bool: "bool"}
lines = []


def emit(role, t):
    t = t.detach().cpu()
    vals = t.reshape(-1).tolist()
    if t.dtype == torch.bool:
        vals = [int(v) for v in vals]
    if t.dtype.is_floating_point:
        vs = " ".join(repr(float(v)) for v in vals)
    else:
        vs = " ".join(str(int(v)) for v in vals)
    lines.append(f"tensor {role} {DT[t.dtype]} {t.dim()} {' '.join(map(str, t.shape))} {vs}".strip())


def seed(name):
    torch.manual_seed(zlib.crc32(name.encode()))


def case(name, fn, *inputs, grad=True, params=()):
    """fn(*inputs, *params); an input is a tensor or a function making one (called
    after seeding, so its numbers depend on the case's name only)."""
    seed(name)
    lines.append(" ".join(["case", name] + [repr(float(p)) for p in params]))
    leaves = []
    for i, x in enumerate(inputs):
        x = x() if callable(x) else x
        emit(f"in{i}", x)
        if grad and x.dtype.is_floating_point:
            x = x.clone().requires_grad_(True)
        leaves.append(x)
    out = fn(*leaves, *params)
    emit("out", out)
    if grad and out.dtype.is_floating_point:
        gout = torch.randn(out.shape)
        emit("gout", gout)
        out.backward(gout)
        for i, x in enumerate(leaves):
            if x.dtype.is_floating_point and x.grad is not None:
                emit(f"grad{i}", x.grad)


def r(*shape):
    return lambda: torch.randn(*shape)


def pos(*shape):
    return lambda: torch.rand(*shape) + 0.5


def small_ints(*shape):  # floats with ties, for the comparisons
    return lambda: torch.randint(-2, 3, shape).float()


def mask(*shape):
    return lambda: torch.randn(*shape) > 0


# the registry's elementwise ops, under their registry names
case("neg", torch.neg, r(5))
case("exp", torch.exp, r(2, 3))
case("log", torch.log, pos(2, 3))
case("sqrt", torch.sqrt, pos(2, 3))
case("abs", torch.abs, r(2, 3))
case("relu", torch.relu, r(3, 4))
case("gelu", F.gelu, r(3, 4))
case("gelu_tanh", lambda x: F.gelu(x, approximate="tanh"), r(3, 4))
case("tanh", torch.tanh, r(3, 4))
case("sigmoid", torch.sigmoid, r(3, 4))
case("silu", F.silu, r(3, 4))
case("sin", torch.sin, r(3, 4))
case("cos", torch.cos, r(3, 4))
case("add_scalar", lambda x, s: x + s, r(3, 4), params=(3,))
case("mul_scalar", lambda x, s: x * s, r(3, 4), params=(-2.5,))
case("rsub_scalar", lambda x, s: s - x, r(3, 4), params=(1,))
case("rdiv_scalar", lambda x, s: s / x, pos(3, 4), params=(2,))
case("pow_scalar", lambda x, e: x ** e, pos(5), params=(2.5,))
case("clamp", lambda x, lo, hi: x.clamp(lo, hi), r(4, 4), params=(-0.5, 0.7))
# unary math, rounding and activations: the kinks, +-inf and NaN first, then
# normal numbers (the gradients there are PyTorch's own choices)
SPECIAL = [-float("inf"), -6.0, -3.0, -2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.5, 3.0, 6.0,
           float("inf"), float("nan")]


def special(n, scale=1.0, shift=0.0):
    return lambda: torch.cat([torch.tensor(SPECIAL), torch.randn(n) * scale + shift])


def unit(n):  # inside (-1, 1), for asin, acos, atanh, tan
    return lambda: torch.cat([torch.tensor(SPECIAL), torch.rand(n) * 1.8 - 0.9])


case("sign", torch.sign, special(9))
case("floor", torch.floor, special(9, 3))
case("ceil", torch.ceil, special(9, 3))
case("round", lambda x, d: torch.round(x, decimals=int(d)), special(9, 3), params=(0,))
case("round_decimals", lambda x, d: torch.round(x, decimals=int(d)), special(9, 10), params=(2,))
case("round_decimals_neg", lambda x, d: torch.round(x, decimals=int(d)), special(9, 300), params=(-2,))
case("trunc", torch.trunc, special(9, 3))
case("frac", torch.frac, special(9, 3))
case("reciprocal", torch.reciprocal, special(9))
case("rsqrt", torch.rsqrt, special(9, 1, 2))
case("square", torch.square, special(9))
case("log1p", torch.log1p, special(9, 0.5, 0.5))
case("expm1", torch.expm1, special(9))
case("log2", torch.log2, special(9, 1, 2))
case("log10", torch.log10, special(9, 1, 2))
case("exp2", torch.exp2, special(9))
case("erf", torch.erf, special(9))
case("erfc", torch.erfc, special(9))
case("asin", torch.asin, unit(9))
case("acos", torch.acos, unit(9))
case("atan", torch.atan, special(9))
case("sinh", torch.sinh, special(9))
case("cosh", torch.cosh, special(9))
case("tan", torch.tan, unit(9))
case("asinh", torch.asinh, special(9))
case("acosh", torch.acosh, special(9, 1, 3))
case("atanh", torch.atanh, unit(9))
case("leaky_relu", lambda x, s: F.leaky_relu(x, s), special(9), params=(0.2,))
case("elu", lambda x, a: F.elu(x, a), special(9), params=(1.5,))
case("selu", F.selu, special(9))
case("celu", lambda x, a: F.celu(x, a), special(9), params=(0.7,))
case("softplus", lambda x, b, t: F.softplus(x, b, t), special(9, 2), params=(2.0, 3.0))
case("hardtanh", lambda x, lo, hi: F.hardtanh(x, lo, hi), special(9, 2), params=(-1.0, 2.5))
case("relu6", F.relu6, special(9, 4))
case("hardsigmoid", F.hardsigmoid, special(9, 3))
case("hardswish", F.hardswish, special(9, 3))
case("mish", F.mish, special(9, 2))
case("logsigmoid", F.logsigmoid, special(9, 2))
case("softsign", F.softsign, special(9, 2))
case("tanhshrink", F.tanhshrink, special(9, 2))
case("isnan", torch.isnan, special(3), grad=False)
case("isinf", torch.isinf, special(3), grad=False)
case("isposinf", torch.isposinf, special(3), grad=False)
case("isneginf", torch.isneginf, special(3), grad=False)
case("isfinite", torch.isfinite, special(3), grad=False)
case("nan_to_num", torch.nan_to_num, special(5))
case("nan_to_num_values", lambda x: torch.nan_to_num(x, 1.5, 100.0, -7.0), special(5))
case("add", torch.add, r(3, 4), r(4))
case("sub", torch.sub, r(3, 1), r(1, 4))
case("mul", torch.mul, r(2, 3, 4), r(3, 1))
case("div", torch.div, r(3, 4), pos(4))
case("pow", torch.pow, pos(3, 4), r(3, 4))
case("eq", torch.eq, small_ints(3, 4), small_ints(4))
case("lt", torch.lt, small_ints(3, 4), small_ints(3, 1))
case("gt", torch.gt, small_ints(3, 4), small_ints(4))
case("ne", torch.ne, small_ints(3, 4), small_ints(4))
case("le", torch.le, small_ints(3, 4), small_ints(3, 1))
case("ge", torch.ge, small_ints(3, 4), small_ints(4))
case("maximum", torch.maximum, r(3, 4), r(4))
case("minimum", torch.minimum, r(3, 1), r(1, 4))
case("fmax", torch.fmax, r(3, 4), r(4))
case("fmin", torch.fmin, r(2, 3, 4), r(3, 1))
case("atan2", torch.atan2, r(3, 4), r(4))
case("hypot", torch.hypot, r(3, 4), r(3, 1))
case("logaddexp", torch.logaddexp, r(3, 4), r(4))
case("copysign", torch.copysign, r(3, 4), r(4))
case("fmod", torch.fmod, lambda: 3 * torch.randn(3, 4), lambda: torch.randn(4).sign() * (torch.rand(4) + 0.5))
case("remainder", torch.remainder, lambda: 3 * torch.randn(3, 4), lambda: torch.randn(4).sign() * (torch.rand(4) + 0.5))
case("floor_divide", torch.floor_divide, lambda: 3 * torch.randn(3, 4), lambda: torch.randn(4).sign() * (torch.rand(4) + 0.5), grad=False)

# the other ops
case("softmax", lambda x: torch.softmax(x, 1), r(2, 5, 3))
case("log_softmax", lambda x: torch.log_softmax(x, 0), r(4, 3))
case("sum_dims", lambda x: x.sum((0, 2), keepdim=True), r(2, 3, 4))
case("sum_all", lambda x: x.sum(), r(5, 7))
case("mean_dim", lambda x: x.mean(1), r(2, 3, 4))
case("max_dim", lambda x: x.max(-1).values, r(3, 5))
case("min_dim", lambda x: x.min(-1).values, r(3, 5))
case("min_indices", lambda x: x.min(0, keepdim=True).indices, r(4, 3), grad=False)
case("argmax_dim", lambda x: x.argmax(1), r(3, 5, 2), grad=False)
case("argmin_all", lambda x: x.argmin(), r(4, 5), grad=False)
case("var_dim", lambda x: x.var(1), r(3, 5, 2))
case("std_dims", lambda x: x.std((0, 2), keepdim=True), r(2, 3, 4))
case("var_all_corr0", lambda x: x.var(correction=0), r(4, 5))
case("cumsum", lambda x: x.cumsum(1), r(3, 6))
case("cumsum_int", lambda x: x.cumsum(0), lambda: torch.randint(-5, 6, (4, 3)), grad=False)
case("sort_desc", lambda x: x.sort(1, descending=True).values, r(3, 7))
case("sort_stable_indices", lambda x: x.sort(stable=True, dim=-1).indices, small_ints(3, 8),
     grad=False)
case("topk", lambda x: x.topk(3, 1).values, r(4, 6))
case("topk_smallest", lambda x: x.topk(2, 0, largest=False).values, r(5, 3))
case("topk_indices", lambda x: x.topk(3, -1).indices, r(2, 3, 6), grad=False)
case("gather", lambda x, i: torch.gather(x, 1, i), r(3, 5), lambda: torch.randint(0, 5, (2, 7)))
case("scatter", lambda x, i, s: x.scatter(1, i, s), r(3, 5),
     lambda: torch.argsort(torch.rand(3, 5), 1)[:, :3], r(3, 3))
case("scatter_add", lambda x, i, s: x.scatter_add(0, i, s), r(3, 4),
     lambda: torch.randint(0, 3, (5, 4)), r(5, 4))
case("matmul", torch.matmul, r(2, 1, 3, 4), r(3, 4, 2))
case("matmul_vec", torch.matmul, r(4), r(2, 4, 3))
case("linear", F.linear, r(2, 5, 3), r(4, 3), r(4))
case("mse_loss", F.mse_loss, r(8, 2), r(8, 2))
case("cross_entropy", lambda x, t: F.cross_entropy(x, t, ignore_index=1),
     r(6, 5), torch.tensor([0, 1, 4, 2, 1, 3]))
case("embedding", lambda w, i: F.embedding(i, w), r(5, 3), torch.tensor([[0, 4, 4], [1, 0, 2]]))
case("nll_loss", lambda x, t: F.nll_loss(x, t, ignore_index=1), r(6, 5), torch.tensor([0, 1, 4, 2, 1, 3]))
case("nll_loss_sum", lambda x, t: F.nll_loss(x, t, reduction="sum"), r(4, 3), torch.tensor([2, 0, 1, 2]))
case("linear_relu", lambda x, w, b: F.relu(F.linear(x, w, b)), r(2, 5, 3), r(4, 3), r(4))
case("linear_gelu", lambda x, w, b: F.gelu(F.linear(x, w, b)), r(5, 3), r(4, 3), r(4))
case("linear_gelu_tanh", lambda x, w: F.gelu(F.linear(x, w), approximate="tanh"), r(5, 3), r(4, 3))
case("lerp", torch.lerp, r(3, 4), r(4), r(3, 1))
case("lerp_scalar", torch.lerp, r(3, 4), r(4), params=(0.7,))
case("lerp_scalar_small", torch.lerp, r(3, 4), r(4), params=(0.3,))
case("addcmul", lambda t, a, b, v: torch.addcmul(t, a, b, value=v), r(3, 4), r(4), r(3, 1), params=(0.5,))
case("addcdiv", lambda t, a, b, v: torch.addcdiv(t, a, b, value=v), r(3, 4), r(3, 1), pos(4), params=(-2.0,))
case("clamp_min", torch.clamp_min, r(3, 4), params=(0.2,))
case("clamp_max", torch.clamp_max, r(3, 4), params=(-0.3,))
near = lambda: torch.randint(-2, 3, (3, 4)).float() + 1e-3 * torch.randn(3, 4)  # ties, some within atol
case("isclose", lambda a, b, rt, at: torch.isclose(a, b, rt, at), small_ints(3, 4), near, grad=False,
     params=(0.0, 2e-3))
nan, inf = float("nan"), float("inf")
case("isclose_nan", lambda a, b, rt, at: torch.isclose(a, b, rt, at, equal_nan=True),
     torch.tensor([nan, inf, -inf, 1.0, nan, 1.0, 100.0, inf]),
     torch.tensor([nan, inf, inf, 1.000001, 1.0, nan, 100.01, 1e38]), grad=False, params=(1e-5, 1e-8))
case("allclose", lambda a, b, rt, at: torch.tensor(torch.allclose(a, b, rt, at)), small_ints(3, 4), near,
     grad=False, params=(0.0, 2e-3))
seed("allclose_true")
ac = torch.randn(3, 4)
case("allclose_true", lambda a, b, rt, at: torch.tensor(torch.allclose(a, b, rt, at)), ac,
     ac + 1e-4 * torch.randn(4), grad=False, params=(0.0, 1e-3))
case("equal", lambda a, b: torch.tensor(torch.equal(a, b)), torch.tensor([[1.0, -2.0, 3.5]]),
     torch.tensor([[1.0, -2.0, 3.5]]), grad=False)
case("equal_values", lambda a, b: torch.tensor(torch.equal(a, b)), torch.tensor([[1.0, -2.0, 3.5]]),
     torch.tensor([[1.0, -2.0, 3.25]]), grad=False)
case("equal_shapes", lambda a, b: torch.tensor(torch.equal(a, b)), torch.tensor([[1.0, -2.0, 3.5]]),
     torch.tensor([1.0, -2.0, 3.5]), grad=False)
case("empty_shape", lambda: torch.tensor(torch.empty(2, 0, 3).shape), grad=False)
case("zeros", lambda: torch.zeros(2, 3), grad=False)
case("ones", lambda: torch.ones(3, 1, 2, dtype=torch.float64), grad=False)
case("full", lambda v: torch.full((2, 3), v), grad=False, params=(-1.5,))
case("arange", lambda: torch.arange(-1, 2, 0.25), grad=False)
case("full_i64", lambda: torch.full((4,), -(2 ** 40) - 3, dtype=torch.int64), grad=False)
case("arange_i64", lambda: torch.arange(10, -3, -4), grad=False)
case("eye", lambda: torch.eye(3, 4), grad=False)
case("eye_square", lambda: torch.eye(3), grad=False)
case("linspace", lambda: torch.linspace(-1, 2, 7), grad=False)
case("logspace", lambda: torch.logspace(-1, 2, 5, base=2), grad=False)
case("layer_norm", lambda x, w, b: F.layer_norm(x, (5,), w, b, 1e-5), r(3, 5), r(5), r(5))


def rms_norm(x, w, eps):  # Hugging Face's LlamaRMSNorm, in float32
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return h.to(x.dtype) * w if w is not None else h.to(x.dtype)


case("fused_rms_norm", lambda x, w: rms_norm(x, w, 1e-5), r(3, 5), r(5))
case("fused_rms_norm_noweight", lambda x: rms_norm(x, None, 1e-6), r(2, 3, 4))
# batch norm: the running stats are fixed numbers (test_golden.c makes the same)
def bn_stats(c):
    k = torch.arange(c, dtype=torch.float32)
    return 0.1 * k - 0.2, 0.5 + 0.25 * k


def bn(x, w, b, training):
    rm, rv = bn_stats(x.shape[1])
    return F.batch_norm(x, rm, rv, w, b, training, 0.1, 1e-5)


def bn_running(x):
    rm, rv = bn_stats(x.shape[1])
    F.batch_norm(x, rm, rv, None, None, True, 0.3, 1e-5)
    return torch.cat([rm, rv])


case("batch_norm_train", lambda x, w, b: bn(x, w, b, True), r(4, 3, 5), r(3), r(3))
case("batch_norm_train_2d", lambda x, w, b: bn(x, w, b, True), r(3, 2, 3, 4), r(2), r(2))
case("batch_norm_eval", lambda x, w, b: bn(x, w, b, False), r(5, 3), r(3), r(3))
case("batch_norm_eval_4d", lambda x, w, b: bn(x, w, b, False), r(2, 3, 2, 2), r(3), r(3))
case("batch_norm_running", bn_running, r(6, 3, 2), grad=False)
case("where", lambda a, b, c: torch.where(c, a, b), r(3, 4), r(4), mask(3, 4))
case("masked_fill", lambda a, m: a.masked_fill(m, 2.0), r(3, 4), mask(3, 4))
case("cat", lambda a, b: torch.cat([a, b], 1), r(2, 1, 3), r(2, 4, 3))
case("stack", lambda a, b: torch.stack([a, b], 1), r(2, 3), r(2, 3))
case("index_select", lambda a, i: a.index_select(1, i), r(2, 4, 3), torch.tensor([3, 0, 3, 1]))
# the op table's reductions, products, triangles and shape ops
case("amax_dims", lambda x: x.amax((0, 2), keepdim=True), small_ints(2, 3, 4))
case("amin_dim", lambda x: x.amin(1), small_ints(3, 5))
case("logsumexp_dim", lambda x: torch.logsumexp(x, 1), r(2, 3, 4))
case("prod_dim", lambda x: x.prod(1), r(3, 4))
case("prod_all", lambda x: x.prod(), r(2, 3))
case("cumprod", lambda x: x.cumprod(1), r(3, 5))
case("norm_dim", lambda x: torch.linalg.vector_norm(x, 2, dim=1), r(3, 4))
case("norm_p3_all", lambda x: torch.linalg.vector_norm(x, 3), r(2, 5))
case("norm_inf", lambda x: torch.linalg.vector_norm(x, float("inf"), dim=-1, keepdim=True), r(3, 4))
case("any_dim", lambda x: x.any(1), lambda: torch.randint(0, 2, (4, 3)).float() * torch.randint(0, 2, (4, 1)), grad=False)
case("all_dims", lambda x: x.all(0), lambda: torch.randint(0, 4, (3, 5)).float(), grad=False)
case("count_nonzero_dims", lambda x: torch.count_nonzero(x, (0, 2)), lambda: torch.randint(0, 2, (2, 3, 4)).float(), grad=False)
case("mm", torch.mm, r(3, 4), r(4, 2))
case("bmm", torch.bmm, r(2, 3, 4), r(2, 4, 5))
case("mv", torch.mv, r(3, 4), r(4))
case("dot", torch.dot, r(5), r(5))
case("outer", torch.outer, r(3), r(4))
case("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), r(3), r(2, 4), r(4, 3))
case("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=1, alpha=-1), r(2, 1, 3), r(2, 2, 4), r(2, 4, 3))
case("diagonal", lambda x: torch.diagonal(x, 1, 0, 2), r(3, 2, 4))
case("diag_embed", lambda x: torch.diag(x, -1), r(3))
case("diag_mat", lambda x: torch.diag(x, 1), r(3, 4))
case("trace", torch.trace, r(3, 3))
case("tril", lambda x: torch.tril(x, -1), r(4, 5))
case("triu", lambda x: torch.triu(x, 1), r(2, 3, 4))
case("flip", lambda x: x.flip((0, 2)), r(2, 3, 4))
case("roll", lambda x: torch.roll(x, (1, -2), (0, 1)), r(3, 4))
case("roll_flat", lambda x: torch.roll(x, 2), r(2, 3))
case("repeat", lambda x: x.repeat(2, 1, 3), r(2, 3))
case("tile", lambda x: x.tile((2,)), r(2, 3))
case("repeat_interleave", lambda x: x.repeat_interleave(2, 1), r(2, 3))
case("repeat_interleave_tensor", lambda x, n: x.repeat_interleave(n, 0), r(3, 2), torch.tensor([1, 0, 3]))
case("movedim", lambda x: torch.movedim(x, (0, 1), (2, 0)), r(2, 3, 4))
case("unflatten", lambda x: x.unflatten(1, (2, -1)), r(2, 6, 2))
case("pad_const", lambda x: F.pad(x, (1, -1, 2, 0), value=0.5), r(3, 4))
case("pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect"), r(2, 4))
case("pad_replicate", lambda x: F.pad(x, (1, 2), mode="replicate"), r(2, 3))
case("pad_circular", lambda x: F.pad(x, (2, 1), mode="circular"), r(1, 2, 3))
case("one_hot", lambda i: F.one_hot(i, 5), torch.tensor([[0, 4], [2, 2]]), grad=False)
case("view", lambda x: x.view(4, 3), r(2, 6))
case("reshape", lambda x: x.reshape(3, -1), r(2, 3, 2))
case("transpose", lambda x: x.transpose(0, 2), r(2, 3, 4))
case("permute", lambda x: x.permute(2, 0, 1), r(2, 3, 4))
case("narrow", lambda x: x.narrow(1, 1, 2), r(3, 4))
case("select", lambda x: x.select(0, -1), r(3, 4))
case("expand", lambda x: x.expand(2, 3, 4), r(3, 1))
case("unsqueeze", lambda x: x.unsqueeze(1), r(3, 4))
case("squeeze", lambda x: x.squeeze(1), r(3, 1, 4))
case("flatten", lambda x: x.flatten(), r(2, 3, 2))
case("contiguous", lambda x: x.t().contiguous(), r(3, 4))
case("clone", lambda x: x.clone(), r(3, 4))
case("mlp", lambda x, w1, b1, w2, b2: F.linear(torch.relu(F.linear(x, w1, b1)), w2, b2),
     r(64, 10), r(20, 10), r(20), r(2, 20), r(2))


# attention: params (causal, scale; scale 0 means 1/sqrt(D)). zorch's causal mask
# is aligned to the bottom right (query i sees keys j <= i + Tk - Tq), which is
# PyTorch's is_causal for Tq == Tk and an explicit mask otherwise.
def attention(q, k, v, causal, scale):
    tq, tk = q.shape[-2], k.shape[-2]
    mask = torch.ones(tq, tk, dtype=torch.bool).tril(tk - tq) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale or None)


case("attention", attention, r(2, 3, 4, 8), r(2, 3, 6, 8), r(2, 3, 6, 8), params=(0, 0))
case("attention_causal", attention, r(1, 2, 5, 4), r(1, 2, 5, 4), r(1, 2, 5, 4), params=(1, 0))
case("attention_causal_kv", attention, r(2, 1, 3, 5), r(2, 1, 7, 5), r(2, 1, 7, 5), params=(1, 0))
case("attention_long", attention, r(2, 70, 5), r(2, 70, 5), r(2, 70, 5), params=(1, 0.3))


# the rules of zorch's attention as one explicit (B, H, Tq, Tk) bool mask: causal
# (bottom right), the window (query i sees key j when i + Tk - Tq - window < j),
# segments (equal ids; the queries' the last Tq of the keys' unless given)
def attention_rules(q, k, causal=False, window=0, segments=None, q_segments=None):
    tq, tk = q.shape[-2], k.shape[-2]
    i = torch.arange(tq).view(tq, 1) + (tk - tq)
    j = torch.arange(tk).view(1, tk)
    keep = torch.ones(tq, tk, dtype=torch.bool)
    if causal:
        keep = keep & (j <= i)
    if window:
        keep = keep & (j > i - window)
    keep = keep.view(1, 1, tq, tk)
    if segments is not None:
        qs = q_segments if q_segments is not None else segments[:, tk - tq:]
        keep = keep & (qs.view(-1, 1, tq, 1) == segments.view(-1, 1, 1, tk))
    return keep


# PyTorch gives NaN to a query that sees no key; zorch gives zeros (the cases
# below have none, so the two agree)
def sdpa(q, k, v, keep, extra=None, scale=None):
    mask = torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))
    if extra is not None:
        mask = mask + extra
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)


def attention_gqa(q, k, v, causal, scale):
    return sdpa(q, k, v, attention_rules(q, k, causal=bool(causal)), scale=scale or None)


def attention_bool_mask(q, k, v, mask, causal):
    return sdpa(q, k, v, attention_rules(q, k, causal=bool(causal)) & mask)


def attention_add_mask(q, k, v, mask, causal):  # the mask is no leaf: zorch's has no gradient
    return sdpa(q, k, v, attention_rules(q, k, causal=bool(causal)), extra=mask.detach())


def attention_segments(q, k, v, segments, causal):
    return sdpa(q, k, v, attention_rules(q, k, causal=bool(causal), segments=segments))


def attention_q_segments(q, k, v, segments, q_segments, causal):
    return sdpa(q, k, v, attention_rules(q, k, causal=bool(causal), segments=segments, q_segments=q_segments))


def attention_window(q, k, v, causal, window):
    return sdpa(q, k, v, attention_rules(q, k, causal=bool(causal), window=int(window)))


def packed_ids(b, t, seed_ids):  # runs of ids, as packed sequences have
    return lambda: torch.tensor(seed_ids, dtype=torch.int64).view(b, t)


case("attention_gqa", attention_gqa, r(2, 6, 5, 8), r(2, 2, 7, 8), r(2, 2, 7, 8), params=(1, 0))
case("attention_bool_mask", attention_bool_mask, r(2, 4, 5, 8), r(2, 2, 7, 8), r(2, 2, 7, 8),
     lambda: torch.tensor([[1, 1, 0, 1, 1, 1, 0], [1, 0, 1, 1, 1, 1, 1]], dtype=torch.bool).view(2, 1, 1, 7),
     params=(1,))
case("attention_add_mask", attention_add_mask, r(2, 2, 5, 4), r(2, 2, 5, 4), r(2, 2, 5, 4), r(2, 1, 5, 5),
     params=(1,))
case("attention_segments", attention_segments, r(2, 4, 6, 8), r(2, 2, 6, 8), r(2, 2, 6, 8),
     packed_ids(2, 6, [0, 0, 0, 1, 1, 2, 5, 5, 5, 5, 7, 7]), params=(1,))
case("attention_q_segments", attention_q_segments, r(2, 2, 3, 8), r(2, 2, 6, 8), r(2, 2, 6, 8),
     packed_ids(2, 6, [0, 0, 0, 1, 1, 2, 5, 5, 5, 5, 7, 7]), packed_ids(2, 3, [0, 1, 2, 5, 7, 7]), params=(0,))
case("attention_window", attention_window, r(1, 4, 70, 8), r(1, 2, 70, 8), r(1, 2, 70, 8), params=(1, 9))
case("attention_window_kv", attention_window, r(2, 2, 4, 8), r(2, 1, 9, 8), r(2, 1, 9, 8), params=(1, 3))


# convolution and pooling (tests/test_golden.c passes the same options)
case("conv2d", F.conv2d, r(2, 3, 7, 6), r(4, 3, 3, 3), r(4))
case("conv2d_stride_pad", lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)),
     r(2, 2, 9, 8), r(3, 2, 3, 2), r(3))
case("conv2d_dilation", lambda x, w: F.conv2d(x, w, None, padding=1, dilation=(2, 1)),
     r(1, 2, 9, 9), r(2, 2, 3, 3))
case("conv2d_groups", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1, groups=2),
     r(2, 4, 6, 6), r(6, 2, 3, 3), r(6))
case("conv2d_3d", F.conv2d, r(3, 5, 5), r(2, 3, 2, 2), r(2))
case("conv2d_batch", lambda x, w, b: F.conv2d(x, w, b, padding=1), r(11, 2, 5, 4), r(3, 2, 3, 3), r(3))
case("max_pool2d", lambda x: F.max_pool2d(x, 2), r(2, 3, 6, 7))
case("max_pool2d_pad", lambda x: F.max_pool2d(x, 3, stride=2, padding=1), r(2, 2, 7, 7))
case("max_pool2d_ceil_dil", lambda x: F.max_pool2d(x, (3, 2), stride=2, padding=(1, 0),
                                                   dilation=(2, 1), ceil_mode=True), r(1, 2, 8, 9))
case("max_pool2d_indices", lambda x: F.max_pool2d(x, 3, stride=2, padding=1,
                                                  return_indices=True)[1], r(2, 2, 7, 7), grad=False)
case("avg_pool2d", lambda x: F.avg_pool2d(x, 2), r(2, 3, 6, 6))
case("avg_pool2d_pad", lambda x: F.avg_pool2d(x, 3, stride=2, padding=1), r(2, 2, 7, 5))
case("avg_pool2d_excl_ceil", lambda x: F.avg_pool2d(x, (3, 2), stride=2, padding=1, ceil_mode=True,
                                                    count_include_pad=False), r(1, 2, 7, 8))
case("avg_pool2d_ceil", lambda x: F.avg_pool2d(x, 2, stride=2, padding=1, ceil_mode=True),
     r(1, 1, 6, 5))
case("adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (3, 4)), r(2, 3, 7, 9))
case("adaptive_avg_pool2d_1", lambda x: F.adaptive_avg_pool2d(x, 1), r(2, 3, 5, 5))
case("adaptive_avg_pool2d_up", lambda x: F.adaptive_avg_pool2d(x, (5, 4)), r(2, 3, 3))


# Llama's rotary embedding, as Hugging Face's transformers computes it
# (modeling_llama's rotate_half and apply_rotary_pos_emb; the tables from
# LlamaRotaryEmbedding with _compute_default_rope_parameters, in float32)
def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):  # x (batch, heads, seq, head_dim), tables (seq, d) or (batch, seq, d)
    if cos.dim() == 3:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return x * cos + rotate_half(x) * sin


def rope_inv_freq(d, theta):
    return 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))


def rope_tables(pos, d, theta):  # pos (seq) or (batch, seq), int64
    freqs = pos.float().unsqueeze(-1) * rope_inv_freq(d, theta)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


case("rope", apply_rope, r(2, 3, 5, 8), *rope_tables(torch.arange(5), 8, 10000.0))
case("rope_positions", apply_rope, r(2, 2, 4, 6),
     *rope_tables(torch.tensor([[0, 1, 2, 3], [7, 8, 9, 10]]), 6, 500000.0))
# Llama's MLP gate: down(silu(gate(x)) * up(x))
case("swiglu", lambda a, b: F.silu(a) * b, r(3, 4, 5), r(3, 4, 5))

# quantised weights (docs/quantization.md), in float32 step for step as zorch
# quantises: int8 rows scale = max|w| / 127, int4 groups scale = m / -8 (m the
# weight of largest magnitude), float16 scales, round half to even; 4-bit
# blocks of 32 inputs pack input j and j + 16 into byte j (low, high nibble)
def quant8(w):
    s = (w.abs().amax(1) / 127).half().float()[:, None]
    q = torch.where(s > 0, torch.round(w / torch.where(s > 0, s, 1)), 0).clamp(-127, 127)
    return q, s


def quant4(w, group):
    out, n = w.shape
    wg = w.reshape(out, n // group, group)
    m = wg.gather(-1, wg.abs().argmax(-1, keepdim=True))
    d = (m / -8).half().float()
    q = torch.where(d != 0, torch.round(wg / torch.where(d != 0, d, 1)) + 8, 8).clamp(0, 15)
    return q.reshape(out, n), d.expand(out, n // group, group).reshape(out, n)


def pack4(q):
    b = q.reshape(q.shape[0], -1, 2, 16)
    return (b[:, :, 0] + 16 * b[:, :, 1]).reshape(q.shape[0], -1)


def dequant(w, bits, group):
    if bits == 8:
        q, s = quant8(w)
        return q * s
    q, s = quant4(w, group)
    return (q - 8) * s


def qlinear(x, w, b, bits, group):
    y = x.double() @ dequant(w, bits, group).double().T
    return (y if b is None else y + b.double()).float()


case("quantize_int8", lambda w: quant8(w)[0], r(7, 70), grad=False)
case("quantize_int4", lambda w: pack4(quant4(w, 32)[0]), r(5, 64), grad=False)
case("dequantize_int8", lambda w: dequant(w, 8, 0), r(6, 33), grad=False)
case("dequantize_int4_g128", lambda w: dequant(w, 4, 128), r(3, 256), grad=False)
case("qlinear_int8", lambda x, w, b: qlinear(x, w, b, 8, 0), r(3, 70), r(33, 70), r(33), grad=False)
case("qlinear_int8_rows", lambda x, w, b: qlinear(x, w, b, 8, 0), r(2, 9, 100), r(7, 100), r(7), grad=False)
case("qlinear_int4_g32", lambda x, w, b: qlinear(x, w, b, 4, 32), r(1, 64), r(1, 64), r(1), grad=False)
case("qlinear_int4_g128_rows", lambda x, w: qlinear(x, w, None, 4, 128), r(6, 128), r(9, 128), grad=False)

# 16-bit conversions: round trips through bfloat16 and float16, with edge values
edge = torch.tensor([0.0, -0.0, 1.0, 1.00390625, 1.005859375, 65504.0, 65520.0, 70000.0,
                     6.1e-5, 5.96e-8, 2.98e-8, 1e-40, -3.3895314e38, 3.4e38, 0.1, -2.5])
seed("16-bit")
mixed = torch.cat([edge, torch.randn(48) * 100])
case("to_bf16", lambda x: x.to(torch.bfloat16).float(), mixed, grad=False)
case("to_f16", lambda x: x.to(torch.float16).float(), mixed, grad=False)
case("to_int64", lambda x: x.to(torch.int64), lambda: 4 * torch.randn(3, 5), grad=False)  # toward zero
case("to_device", lambda x: x.to("cpu"), r(3, 4))


# optimizers: parameters after a few steps on fixed gradient sequences
def optim_case(name, make):
    seed(name)
    p0 = torch.randn(7)
    grads = [torch.randn(7) for _ in range(5)]
    p = p0.clone().requires_grad_(True)
    opt = make([p])
    for g in grads:
        p.grad = g.clone()
        opt.step()
    lines.append(f"case {name}")
    emit("in0", p0)
    for i, g in enumerate(grads):
        emit(f"in{i + 1}", g)
    emit("out", p)


optim_case("adam", lambda ps: torch.optim.Adam(ps, lr=0.01, betas=(0.9, 0.999), eps=1e-8))
optim_case("adam_wd", lambda ps: torch.optim.Adam(ps, lr=0.01, weight_decay=0.1))
optim_case("adam_amsgrad", lambda ps: torch.optim.Adam(ps, lr=0.01, amsgrad=True))
optim_case("adamw", lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1))
optim_case("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1))
optim_case("sgd_momentum", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1,
                                                      weight_decay=0.01))
optim_case("sgd_nesterov", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True))



def blocks(ls):
    """The lines of each case, by name, in order."""
    bs, name = {}, None
    for l in ls:
        if l.startswith("case "):
            name = l.split()[1]
            bs[name] = []
        if name:
            bs[name].append(l)
    return bs


out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ops.txt")
only = sys.argv[1:]  # names: rewrite only these cases, the others' values stay as they were
header = f"# generated by gen_golden.py with torch {torch.__version__}"
if only:
    with open(out) as f:
        old = f.read().split("\n")
    header = old[0]
    kept, new = blocks(old[1:]), blocks(lines)
    lines = [l for name in new for l in (new[name] if name in only or name not in kept else kept[name])
             if l]
with open(out, "w") as f:
    f.write(header + "\n")
    f.write("\n".join(lines) + "\n")
print(f"wrote {out}: {sum(l.startswith('case') for l in lines)} cases")
