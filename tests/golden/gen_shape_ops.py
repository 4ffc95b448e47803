"""PyTorch's values and gradients for the reductions, shape ops, creation ops
and matrix products that tests/lua/test_shape_ops.lua checks:
python3 tests/golden/gen_shape_ops.py > tests/golden/shape_ops.txt
Each line: a case name, a field, a shape ("-" for a scalar), then the values
(float64 repr; nan, inf). Fields: x1, x2, ... the inputs; y the output; w the
weights of the loss sum(y * w); g1, g2, ... the inputs' gradients."""
import math

import torch
import torch.nn.functional as F

torch.set_printoptions(precision=17)


def emit(name, field, t):
    t = t.detach()
    shape = "x".join(str(s) for s in t.shape) if t.dim() else "-"
    if t.numel() == 0:
        shape = shape or "0"
    vals = " ".join(repr(float(v)) for v in t.reshape(-1).tolist())
    print(name, field, shape, vals)


def inputs(name, *specs):
    """Float64 inputs: a shape (random values, seeded by the case's name) or a
    list of values."""
    g = torch.Generator().manual_seed(sum(ord(c) * (i + 1) for i, c in enumerate(name)))
    out = []
    for s in specs:
        if isinstance(s, tuple):
            t = (torch.rand(s, generator=g, dtype=torch.float64) * 4 - 2).round(decimals=2)
        else:
            t = torch.tensor(s, dtype=torch.float64)
        out.append(t.requires_grad_())
    return out


def case(name, fn, *specs, grad=True):
    xs = inputs(name, *specs)
    for i, x in enumerate(xs):
        emit(name, "x%d" % (i + 1), x)
    y = fn(*xs)
    emit(name, "y", y)
    if grad and y.dtype.is_floating_point and y.requires_grad:
        n = y.numel()
        w = (torch.arange(n, dtype=torch.float64) % 5 - 1.5).reshape(y.shape)
        emit(name, "w", w)
        (y * w).sum().backward()
        for i, x in enumerate(xs):
            emit(name, "g%d" % (i + 1), x.grad if x.grad is not None else torch.zeros_like(x))


# ---- reductions
case("prod_all", lambda x: x.prod(), (3, 4))
case("prod_d1", lambda x: x.prod(1), (3, 4))
case("prod_dm2_keep", lambda x: x.prod(-2, keepdim=True), (3, 4))
case("prod_zero1", lambda x: x.prod(1), [[1.5, 0.0, 2.0, -1.0], [0.5, 2.0, -3.0, 1.0]])
case("prod_zero2", lambda x: x.prod(1), [[1.5, 0.0, 2.0, 0.0], [0.0, 2.0, -3.0, 1.0]])
case("prod_all_zero1", lambda x: x.prod(), [2.0, 3.0, 0.0, -1.0, 0.5])
case("prod_all_zero2", lambda x: x.prod(), [2.0, 0.0, 0.0, -1.0, 0.5])
case("prod_odd", lambda x: x.prod(0), (7, 2))
case("prod_empty", lambda x: x.prod(1), (2, 0))
case("amax_ties_d1", lambda x: x.amax(1), [[3.0, 1.0, 3.0], [2.0, 2.0, 2.0]])
case("amax_dims", lambda x: x.amax((0, 2)), [[[3.0, 3.0], [1.0, 2.0]], [[0.0, 3.0], [3.0, 1.0]]])
case("amin_keep", lambda x: x.amin(-1, keepdim=True), [[3.0, 1.0, 1.0], [2.0, 0.0, 5.0]])
case("amax_all", lambda x: x.amax(), [[3.0, 1.0, 3.0], [2.0, 3.0, 2.0]])
case("norm_2", lambda x: torch.norm(x), (3, 4))
case("norm_2_d1", lambda x: torch.linalg.vector_norm(x, 2, dim=1), (3, 4))
case("norm_1_dm1_keep", lambda x: torch.linalg.vector_norm(x, 1, dim=-1, keepdim=True), (3, 4))
case("norm_inf", lambda x: torch.linalg.vector_norm(x, math.inf, dim=1), [[1.0, -3.0, 3.0], [2.0, 0.5, -1.0]])
case("norm_ninf", lambda x: torch.linalg.vector_norm(x, -math.inf, dim=1), [[1.0, -3.0, -1.0], [2.0, 0.5, -1.0]])
case("norm_0", lambda x: torch.linalg.vector_norm(x, 0, dim=1), [[1.0, 0.0, 3.0], [0.0, 0.0, -1.0]])
case("norm_3", lambda x: torch.linalg.vector_norm(x, 3), (3, 4))
case("norm_1p5_d0", lambda x: torch.linalg.vector_norm(x, 1.5, dim=0), (3, 4))
case("norm_fro_dims", lambda x: torch.norm(x, "fro", dim=(0, 1)), (2, 3, 2))
case("norm_2_zero", lambda x: torch.linalg.vector_norm(x, 2, dim=1), [[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]])
case("norm_3_zero", lambda x: torch.linalg.vector_norm(x, 3, dim=1), [[0.0, 0.0, 0.0], [3.0, 0.0, 4.0]])
case("any_all", lambda x: x.any(), [[0.0, 0.0], [0.0, 1.0]], grad=False)
case("any_d1", lambda x: x.any(1), [[0.0, 0.0], [0.0, -2.0]], grad=False)
case("all_all", lambda x: x.all(), [[1.0, 2.0], [0.0, 1.0]], grad=False)
case("all_dm2_keep", lambda x: x.all(-2, keepdim=True), [[1.0, 2.0], [0.0, 1.0]], grad=False)
case("all_empty", lambda x: x.all(1), (2, 0), grad=False)
case("count_nonzero", lambda x: torch.count_nonzero(x), [[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]], grad=False)
case("count_nonzero_d1", lambda x: torch.count_nonzero(x, 1), [[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]], grad=False)
case("cumprod_d1", lambda x: x.cumprod(1), (3, 4))
case("cumprod_d0", lambda x: x.cumprod(-2), (3, 4))
case("cumprod_zero1", lambda x: x.cumprod(1), [[1.5, 0.0, 2.0, -1.0], [0.5, 2.0, 0.0, 1.0]])
case("cumprod_zero2", lambda x: x.cumprod(0), [2.0, 0.0, 3.0, 0.0, 1.5])

# ---- shape ops
case("flip_d0", lambda x: x.flip(0), (3, 4))
case("flip_dims", lambda x: x.flip((0, -1)), (2, 3, 4))
case("roll_flat", lambda x: x.roll(2), (3, 4))
case("roll_dims", lambda x: x.roll((1, -5), (0, 1)), (3, 4))
case("repeat", lambda x: x.repeat(2, 1, 3), (2, 3))
case("tile_short", lambda x: x.tile((2,)), (2, 3))
case("repeat_interleave_d1", lambda x: x.repeat_interleave(2, dim=1), (2, 3))
case("repeat_interleave_flat", lambda x: x.repeat_interleave(3), (2, 2))
case("repeat_interleave_counts", lambda x: x.repeat_interleave(torch.tensor([1, 0, 2]), dim=0), (3, 2))
case("repeat_interleave_count1", lambda x: x.repeat_interleave(torch.tensor([2]), dim=-1), (2, 3))
case("movedim", lambda x: torch.movedim(x, 0, -1), (2, 3, 4))
case("movedim_list", lambda x: torch.movedim(x, (0, 1), (2, 0)), (2, 3, 4))
case("unflatten", lambda x: x.unflatten(1, (2, -1)), (2, 6))
case("swapaxes", lambda x: x.swapaxes(0, 2), (2, 3, 4))

# ---- pad
case("pad_const", lambda x: F.pad(x, (1, 2, 0, 1), value=0.5), (2, 3))
case("pad_crop", lambda x: F.pad(x, (-1, 2, 1, -1)), (3, 4))
case("pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect"), (2, 4))
case("pad_reflect2", lambda x: F.pad(x, (2, 1, 1, 2), mode="reflect"), (1, 3, 4))
case("pad_replicate", lambda x: F.pad(x, (2, 1, 1, 0), mode="replicate"), (1, 3, 4))
case("pad_circular", lambda x: F.pad(x, (2, 1), mode="circular"), (2, 2, 4))
case("pad_circular_crop", lambda x: F.pad(x, (-1, 2, 1, -1), mode="circular"), (1, 3, 4))

# ---- creation
emit("eye_3", "y", torch.eye(3))
emit("eye_2x4", "y", torch.eye(2, 4))
emit("linspace", "y", torch.linspace(-1, 2, 7, dtype=torch.float64))
emit("linspace_1", "y", torch.linspace(3, 5, 1, dtype=torch.float64))
emit("linspace_f32", "y", torch.linspace(-3.3, 7.1, 101))
emit("linspace_f32b", "y", torch.linspace(0, 1, 1000))
emit("logspace", "y", torch.logspace(-1, 2, 5, dtype=torch.float64))
emit("logspace_b2", "y", torch.logspace(0, 4, 5, base=2, dtype=torch.float64))
emit("one_hot", "y", F.one_hot(torch.tensor([0, 2, 1, 2])))
emit("one_hot_5", "y", F.one_hot(torch.tensor([[0, 3], [1, 1]]), 5))

# ---- matrix products
case("mm", torch.mm, (3, 4), (4, 2))
case("bmm", torch.bmm, (2, 3, 4), (2, 4, 2))
case("mv", torch.mv, (3, 4), (4,))
case("dot", torch.dot, (5,), (5,))
case("outer", torch.outer, (3,), (4,))
case("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), (3, 2), (3, 4), (4, 2))
case("addmm_beta0", lambda c, a, b: torch.addmm(c, a, b, beta=0.0), [[float("nan"), 1.0], [2.0, 3.0]], (2, 3), (3, 2))
case("addmm_bcast", lambda c, a, b: torch.addmm(c, a, b), (2,), (3, 4), (4, 2))
case("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, beta=1.5, alpha=-1.0), (2, 3, 2), (2, 3, 4), (2, 4, 2))
case("diag_vec", lambda x: torch.diag(x), (3,))
case("diag_vec_k1", lambda x: torch.diag(x, 1), (3,))
case("diag_vec_km2", lambda x: torch.diag(x, -2), (2,))
case("diag_mat", lambda x: torch.diag(x), (3, 4))
case("diag_mat_k1", lambda x: torch.diag(x, 1), (3, 4))
case("diag_mat_km1", lambda x: torch.diag(x, -1), (3, 4))
case("diagonal_3d", lambda x: torch.diagonal(x, 1, 0, 2), (3, 2, 4))
case("diagonal_neg", lambda x: torch.diagonal(x, -1, -1, -2), (2, 3, 3))
case("trace", torch.trace, (3, 4))
