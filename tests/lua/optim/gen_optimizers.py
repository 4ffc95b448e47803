"""PyTorch's optimizers and schedulers, for tests/lua/optim/test_optimizers.lua:
    python3 tests/lua/optim/gen_optimizers.py > tests/lua/optim/optimizers.txt

Inputs are fixed formulas the Lua test computes too: fixed(shape, k) is
sin(0.37 k i + k) over the flattened index i = 0, 1, ... (float64).
Lines: `case out values...` (the output, flattened), `case gN values...` (the
gradient of input N of sum(out * c), c = 1 + 0.1 i over the output's flattened
index), `case step values...` (an optimizer's parameters after each step),
`case lrs values...` (a scheduler's lr at steps 0..N)."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixed_cases import case, emit, fixed, leaf  # noqa: E402

torch.set_default_dtype(torch.float64)


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
