"""Golden values for parameter groups (tests/lua/test_groups.lua).

torch.optim.AdamW and torch.optim.SGD with two parameter groups whose options
differ, a StepLR on top, five steps. Parameters start from a formula and the
loss is one the test rebuilds, so only the parameters after each step are
stored: groups.txt, one line per (case, step, parameter) with its values.

    python3 tests/golden/gen_groups.py   (writes tests/golden/groups.txt)
"""
import math
import os
import torch

torch.set_default_dtype(torch.float64)  # the reference in double; the test compares float32 with a tolerance

SHAPES = {"A": (3, 4), "b": (4,), "C": (4, 3), "d": (3,)}
ORDER = ["A", "b", "C", "d"]


def initial(name):
    """p[i] = sin(0.37 i + k) for the k-th parameter (i from 0, row-major)."""
    k = ORDER.index(name) + 1
    n = math.prod(SHAPES[name])
    return torch.tensor([math.sin(0.37 * i + k) for i in range(n)]).reshape(SHAPES[name])


def loss_of(params):
    """sum over parameters of 0.5 w p^2 + c p, w = 0.5 + 0.25 (i mod 3), c = cos(0.11 i + k)."""
    total = 0
    for k, name in enumerate(ORDER, start=1):
        p = params[name].reshape(-1)
        n = p.numel()
        w = torch.tensor([0.5 + 0.25 * (i % 3) for i in range(n)])
        c = torch.tensor([math.cos(0.11 * i + k) for i in range(n)])
        total = total + (0.5 * w * p * p + c * p).sum()
    return total


def run(case, make_opt, out):
    params = {n: initial(n).requires_grad_(True) for n in ORDER}
    opt = make_opt(params)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    for step in range(1, 6):
        opt.zero_grad()
        loss_of(params).backward()
        opt.step()
        sched.step()
        for n in ORDER:
            vals = " ".join("%.17g" % v for v in params[n].detach().reshape(-1).tolist())
            out.write("%s %d %s %s\n" % (case, step, n, vals))


def adamw(p):
    return torch.optim.AdamW([{"params": [p["A"], p["C"]], "weight_decay": 0.1},
                              {"params": [p["b"], p["d"]], "weight_decay": 0.0, "lr": 0.03, "betas": (0.8, 0.99)}],
                             lr=0.01, betas=(0.9, 0.95), eps=1e-8)


def sgd(p):
    return torch.optim.SGD([{"params": [p["A"], p["C"]], "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
                            {"params": [p["b"], p["d"]], "lr": 0.2}],
                           lr=0.05, momentum=0.0)


if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "groups.txt")
    with open(path, "w") as out:
        out.write("# case step parameter values (gen_groups.py, torch %s)\n" % torch.__version__)
        run("adamw", adamw, out)
        run("sgd", sgd, out)
    print("wrote", path)
