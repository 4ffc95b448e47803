"""PyTorch's extra losses, normalisation and 1-d layers, optimizers and
schedulers, for tests/lua/nn/test_loss.lua:
    python3 tests/lua/nn/gen_loss.py > tests/lua/nn/loss.txt

Inputs are fixed formulas the Lua test computes too: fixed(shape, k) is
sin(0.37 k i + k) over the flattened index i = 0, 1, ... (float64).
Lines: `case out values...` (the output, flattened), `case gN values...` (the
gradient of input N of sum(out * c), c = 1 + 0.1 i over the output's flattened
index), `case step values...` (an optimizer's parameters after each step),
`case lrs values...` (a scheduler's lr at steps 0..N)."""
import math
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def fixed(shape, k):
    n = math.prod(shape)
    return torch.sin(torch.arange(n, dtype=torch.float64) * (0.37 * k) + k).reshape(shape)


def emit(name, key, t):
    vals = t.detach().reshape(-1).tolist() if torch.is_tensor(t) else list(t)
    print(name, key, " ".join(repr(float(v)) for v in vals))


def case(name, fn, *inputs):
    """inputs: tensors; those that require grad get a gN line (N their position from 1)."""
    out = fn(*inputs)
    emit(name, "out", out)
    c = 1 + 0.1 * torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape)
    grads = [t for t in inputs if torch.is_tensor(t) and t.requires_grad]
    if grads:
        gs = torch.autograd.grad((out * c).sum(), grads, allow_unused=True)
        for i, t in enumerate(inputs):
            if torch.is_tensor(t) and t.requires_grad:
                g = gs[[id(u) for u in grads].index(id(t))]
                emit(name, "g%d" % (i + 1), g if g is not None else torch.zeros_like(t))


def leaf(t):
    return t.clone().requires_grad_(True)


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

# ---- normalisation and 1-d layers ----
xn = leaf(fixed((2, 6, 5), 22) * 3 + 1)
gw, gb = leaf(fixed((6,), 23) + 1), leaf(fixed((6,), 24))
case("group_norm", lambda u, ww, bb: F.group_norm(u, 3, ww, bb), xn, gw, gb)
x4 = leaf(fixed((2, 4, 3, 2), 25) * 2)
case("group_norm_4d", lambda u: F.group_norm(u, 2, eps=1e-3), x4)
rw = leaf(fixed((5,), 26) + 1)
case("rms_norm", lambda u, ww: F.rms_norm(u, [5], ww), xn, rw)
case("rms_norm_eps", lambda u: F.rms_norm(u, [6, 5], eps=1e-3), xn)
case("instance_norm1d", lambda u: F.instance_norm(u), xn)
case("instance_norm2d_affine", lambda u, ww, bb: F.instance_norm(u, weight=ww, bias=bb),
     x4, leaf(fixed((4,), 27) + 1), leaf(fixed((4,), 28)))
cw, cb = leaf(fixed((4, 3, 3), 29) * 0.5), leaf(fixed((4,), 30))
xc = leaf(fixed((2, 6, 7), 31))
case("conv1d", lambda u, ww, bb: F.conv1d(u, ww, bb, stride=2, padding=1, dilation=1, groups=2), xc, cw, cb)
case("conv1d_dil", lambda u, ww: F.conv1d(u, ww, None, padding=2, dilation=2), leaf(fixed((2, 3, 7), 32)),
     leaf(fixed((4, 3, 3), 33)))
case("max_pool1d", lambda u: F.max_pool1d(u, 3, stride=2, padding=1), xc)
case("avg_pool1d", lambda u: F.avg_pool1d(u, 3, stride=2, padding=1, count_include_pad=False), xc)
case("avg_pool1d_ceil", lambda u: F.avg_pool1d(u, 2, ceil_mode=True), xc)
case("adaptive_avg_pool1d", lambda u: F.adaptive_avg_pool1d(u, 3), xc)

xs = (fixed((2, 3, 4), 34) * 1e-4).float().requires_grad_(True)
case("rms_norm_f32", lambda u: F.rms_norm(u, [4]), xs)  # eps: float32's machine epsilon

inorm = torch.nn.InstanceNorm1d(6, momentum=0.3, track_running_stats=True, affine=True)
for _ in range(2):
    inorm(xn)
emit("instance_norm_running", "mean", inorm.running_mean)
emit("instance_norm_running", "var", inorm.running_var)
inorm.eval()
case("instance_norm_eval", lambda u: inorm(u), xn)


# state dicts: `sd_NAME param sizes...` (each tensor's shape in PyTorch's module)
def shapes(name, m):
    for k, v in m.state_dict().items():
        print("sd_" + name, k, " ".join(str(s) for s in v.shape))


shapes("conv1d", torch.nn.Conv1d(6, 4, 3, groups=2))
shapes("conv1d_nobias", torch.nn.Conv1d(3, 5, 2, bias=False))
shapes("group_norm", torch.nn.GroupNorm(3, 6))
shapes("rms_norm", torch.nn.RMSNorm([4, 5]))
shapes("instance_norm", torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True))
shapes("parameter_list", torch.nn.ParameterList([torch.zeros(2, 3), torch.zeros(4)]))

# ---- optimizers ----
W = torch.tensor([1.0, 3.0, 0.5])


def run(name, cls, **kw):
    p = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
    opt = cls([p], **kw)
    for step in range(1, 6):
        opt.zero_grad()
        ((p * p * W).sum() + p.sum()).backward()
        opt.step()
        emit(name, step, p)


run("adamax", torch.optim.Adamax)
run("adamax_wd", torch.optim.Adamax, lr=0.05, betas=(0.8, 0.9), eps=1e-6, weight_decay=0.1)
run("nadam", torch.optim.NAdam)
run("nadam_wd", torch.optim.NAdam, lr=0.05, weight_decay=0.1, momentum_decay=0.01)
run("nadam_dwd", torch.optim.NAdam, lr=0.05, weight_decay=0.1, decoupled_weight_decay=True)
run("radam", torch.optim.RAdam, lr=0.1)
run("radam_wd", torch.optim.RAdam, lr=0.1, weight_decay=0.1, betas=(0.5, 0.6))
run("radam_dwd", torch.optim.RAdam, lr=0.1, weight_decay=0.1, betas=(0.5, 0.6), decoupled_weight_decay=True)
run("adadelta", torch.optim.Adadelta)
run("adadelta_wd", torch.optim.Adadelta, lr=0.5, rho=0.8, eps=1e-4, weight_decay=0.1)


# ---- schedulers ----
def lrs(name, make, n=12):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = make(opt)
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    emit(name, "lrs", out)


S = torch.optim.lr_scheduler
lrs("exponential", lambda o: S.ExponentialLR(o, gamma=0.8))
lrs("constant", lambda o: S.ConstantLR(o, factor=0.25, total_iters=3))
lrs("polynomial", lambda o: S.PolynomialLR(o, total_iters=6, power=2.0))
lrs("multiplicative", lambda o: S.MultiplicativeLR(o, lr_lambda=lambda e: 0.9 if e % 2 == 0 else 0.5))
lrs("warm_restarts", lambda o: S.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2, eta_min=0.01), 16)
lrs("sequential", lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.2, total_iters=3),
                                                S.ExponentialLR(o, gamma=0.7)], milestones=[4]))
lrs("chained", lambda o: S.ChainedScheduler([S.ConstantLR(o, factor=0.5, total_iters=4),
                                              S.ExponentialLR(o, gamma=0.9)]))
lrs("cyclic", lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3, cycle_momentum=False), 16)
lrs("cyclic2", lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=3,
                                     mode="triangular2", cycle_momentum=False), 16)
lrs("cyclic_exp", lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=3, mode="exp_range",
                                        gamma=0.9, cycle_momentum=False), 16)


def lrs_mom(name, make, n=14):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.5)
    sched = make(opt)
    lr, mom = [], []
    for _ in range(n):
        lr.append(opt.param_groups[0]["lr"])
        mom.append(opt.param_groups[0]["momentum"])
        opt.step()
        sched.step()
    emit(name, "lrs", lr)
    emit(name, "moms", mom)


lrs_mom("cyclic_mom", lambda o: S.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=4,
                                            mode="triangular2"))
