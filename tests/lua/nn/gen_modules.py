#!/usr/bin/env python3
"""Golden values for tests/lua/nn/test_modules.lua, computed by PyTorch and written
as a Lua table to modules.lua: loss values and input gradients (BCEWithLogitsLoss,
BCELoss, NLLLoss), Softmax/LogSoftmax, Flatten shapes, state-dict names of a
model with ModuleLists, and learning-rate trajectories of MultiStepLR, LambdaLR,
OneCycleLR and ReduceLROnPlateau. Lua counts dims and classes from 1: the file
holds them as Lua sees them.
Usage: python3 tests/lua/nn/gen_modules.py  (needs torch)"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
torch.manual_seed(1234)
f64 = torch.float64


def lua(v, indent=""):
    """The Lua literal of v (dicts with string keys, lists, numbers, strings, bools)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        assert math.isfinite(v), v
        return repr(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, torch.Tensor):
        return lua(v.tolist(), indent)
    if isinstance(v, (list, tuple)):
        if all(not isinstance(x, (list, tuple, dict, torch.Tensor)) for x in v):
            return "{" + ", ".join(lua(x) for x in v) + "}"
        inner = indent + "  "
        return "{\n" + "".join(inner + lua(x, inner) + ",\n" for x in v) + indent + "}"
    if isinstance(v, dict):
        inner = indent + "  "
        return "{\n" + "".join(f"{inner}{k} = {lua(x, inner)},\n" for k, x in v.items()) + indent + "}"
    raise TypeError(type(v))


# ---- losses -----------------------------------------------------------------------------------
def loss_case(name, module, x, target, opts, lua_target=None):
    x = x.clone().requires_grad_(True)
    out = module(x, target)
    g = torch.randn_like(out) if out.dim() > 0 else torch.tensor(1.0, dtype=f64)
    out.backward(g)
    return {"loss": name, "opts": opts, "input": x.detach(),
            "target": target if lua_target is None else lua_target,
            "grad_output": g, "output": out.detach(), "grad": x.grad}


cases = []
# logits with exact zeros (the gradient there is sigmoid(0) - y) and large magnitudes
x = torch.randn(4, 3, dtype=f64)
x[0, 0], x[1, 1], x[2, 2], x[3, 0], x[3, 1] = 0.0, 0.0, 40.0, -40.0, 25.0
y = torch.tensor([[1, 0, 1], [0, 1, 0.25], [1, 0, 0], [1, 1, 0.5]], dtype=f64)
pos_weight = torch.tensor([2.0, 0.5, 3.0], dtype=f64)
weight = torch.tensor([1.0, 2.0, 0.25], dtype=f64)
for r in ["none", "mean", "sum"]:
    cases.append(loss_case("BCEWithLogitsLoss", nn.BCEWithLogitsLoss(reduction=r), x, y, {"reduction": r}))
    cases.append(loss_case("BCEWithLogitsLoss", nn.BCEWithLogitsLoss(reduction=r, pos_weight=pos_weight), x, y,
                           {"reduction": r, "pos_weight": pos_weight}))
    cases.append(loss_case("BCEWithLogitsLoss",
                           nn.BCEWithLogitsLoss(reduction=r, pos_weight=pos_weight, weight=weight), x, y,
                           {"reduction": r, "pos_weight": pos_weight, "weight": weight}))

p = torch.sigmoid(torch.randn(4, 3, dtype=f64))
for r in ["none", "mean", "sum"]:
    cases.append(loss_case("BCELoss", nn.BCELoss(reduction=r), p, y, {"reduction": r}))
    cases.append(loss_case("BCELoss", nn.BCELoss(reduction=r, weight=weight), p, y,
                           {"reduction": r, "weight": weight}))

logp = F.log_softmax(torch.randn(6, 5, dtype=f64), dim=1)
t = torch.tensor([0, 4, 2, 2, 1, 3])
cw = torch.tensor([1.0, 2.0, 0.5, 3.0, 1.5], dtype=f64)
for r in ["none", "mean", "sum"]:
    for ignore in [None, 2]:
        for w in [None, cw]:
            kw, opts = {"reduction": r}, {"reduction": r}
            if ignore is not None:
                kw["ignore_index"], opts["ignore_index"] = ignore, ignore + 1
            if w is not None:
                kw["weight"], opts["weight"] = w, w
            cases.append(loss_case("NLLLoss", nn.NLLLoss(**kw), logp, t, opts, lua_target=t + 1))
# one sample: input (C,), target ()
for r in ["none", "mean"]:
    cases.append(loss_case("NLLLoss", nn.NLLLoss(reduction=r, weight=cw), logp[1], t[1], {"reduction": r,
                           "weight": cw}, lua_target=int(t[1]) + 1))
    cases.append(loss_case("NLLLoss", nn.NLLLoss(reduction=r), logp[1], t[1], {"reduction": r},
                           lua_target=int(t[1]) + 1))

# ---- softmax modules ----------------------------------------------------------------------------
sx = torch.randn(3, 4, dtype=f64)
softmax = []
for name, cls in [("Softmax", nn.Softmax), ("LogSoftmax", nn.LogSoftmax)]:
    for dim in [0, 1, -1]:
        softmax.append({"module": name, "dim": dim + 1 if dim >= 0 else dim, "input": sx,
                        "output": cls(dim=dim)(sx)})

# ---- Flatten -----------------------------------------------------------------------------------
fx = torch.zeros(2, 3, 4, 5)
flatten = []
for s, e in [(1, -1), (0, -1), (1, 2), (2, 3), (0, 0), (-3, -2), (3, 3), (0, 2)]:
    flatten.append({"start_dim": s + 1 if s >= 0 else s, "end_dim": e + 1 if e >= 0 else e,
                    "input_shape": list(fx.shape), "shape": list(nn.Flatten(s, e)(fx).shape)})


# ---- state-dict names of ModuleLists (the same structure is built in the Lua test) -------------
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.blocks = nn.ModuleList([nn.Linear(4, 4),
                                     nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)),
                                     nn.ModuleList([nn.Linear(4, 4, bias=False), nn.Tanh()])])
        self.blocks.append(nn.Linear(4, 2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2, 1))


net = Net()
names = {"state_dict": list(net.state_dict().keys()),
         "num_parameters": sum(q.numel() for q in net.parameters())}


# ---- schedulers --------------------------------------------------------------------------------
STEPS = 30
lambdas = {"exp": lambda e: 0.95 ** e, "warmup": lambda e: min(1.0, (e + 1) / 5), "step": lambda e: 0.5 ** (e // 7)}


def make_opt(kind):
    w = [torch.zeros(2, requires_grad=True)]
    if kind == "sgd":
        return torch.optim.SGD(w, lr=0.1, momentum=0.9)
    if kind == "sgd0":
        return torch.optim.SGD(w, lr=0.1)
    return torch.optim.Adam(w, lr=1e-3)


def momentum(o):
    g = o.param_groups[0]
    return g["betas"][0] if "betas" in g else g["momentum"]


schedulers = []


def trajectory(name, opt_kind, opts, make, steps=STEPS, metrics=None):
    o = make_opt(opt_kind)
    s = make(o)
    lrs, moms = [o.param_groups[0]["lr"]], [momentum(o)]
    for i in range(steps):
        o.step()
        if metrics is None:
            s.step()
        else:
            s.step(metrics[i])
        lrs.append(o.param_groups[0]["lr"])
        moms.append(momentum(o))
    case = {"scheduler": name, "optimizer": opt_kind, "opts": opts, "lr": lrs, "momentum": moms}
    if metrics is not None:
        case["metrics"] = metrics
    schedulers.append(case)


S = torch.optim.lr_scheduler
for ms, gamma in [([5, 10, 20], 0.1), ([3, 3, 12, 25], 0.5), ([0, 15], 0.3)]:
    trajectory("MultiStepLR", "sgd", {"milestones": ms, "gamma": gamma},
               lambda o, ms=ms, gamma=gamma: S.MultiStepLR(o, milestones=ms, gamma=gamma))
for name in lambdas:
    trajectory("LambdaLR", "adam", {"lr_lambda": name}, lambda o, name=name: S.LambdaLR(o, lambdas[name]))
onecycle = [
    ("sgd", {"max_lr": 0.5, "total_steps": 30}),
    ("sgd", {"max_lr": 0.5, "epochs": 3, "steps_per_epoch": 10, "anneal_strategy": "linear"}),
    ("adam", {"max_lr": 0.01, "total_steps": 30, "pct_start": 0.25, "div_factor": 10.0,
              "final_div_factor": 100.0}),
    ("adam", {"max_lr": 0.01, "total_steps": 30, "three_phase": True}),
    ("sgd", {"max_lr": 0.2, "total_steps": 30, "three_phase": True, "anneal_strategy": "linear",
             "base_momentum": 0.8, "max_momentum": 0.9}),
    ("sgd0", {"max_lr": 0.2, "total_steps": 40, "cycle_momentum": False}),
]
for kind, opts in onecycle:
    trajectory("OneCycleLR", kind, opts, lambda o, opts=opts: S.OneCycleLR(o, **opts))
# a metric that improves, stalls, improves a little (under and over the threshold), stalls
metrics = [1.0, 0.9, 0.85, 0.85, 0.86, 0.849, 0.85, 0.85, 0.85, 0.84, 0.8399, 0.84, 0.84, 0.84, 0.84,
           0.7, 0.71, 0.72, 0.73, 0.74, 0.75, 0.69, 0.69, 0.69, 0.69, 0.69, 0.69, 0.69, 0.69, 0.69]
plateau = [
    {"patience": 2},
    {"patience": 1, "factor": 0.5, "cooldown": 2},
    {"patience": 0, "factor": 0.5, "threshold": 0.01, "threshold_mode": "abs", "min_lr": 0.02},
    {"mode": "max", "patience": 1, "factor": 0.3},
    {"mode": "max", "patience": 2, "threshold": 0.05, "threshold_mode": "abs", "eps": 0.05},
    {"patience": 1, "factor": 0.5, "min_lr": 0.0124, "eps": 1e-3},
]
for opts in plateau:
    trajectory("ReduceLROnPlateau", "sgd", opts, lambda o, opts=opts: S.ReduceLROnPlateau(o, **opts),
               metrics=metrics)

out = os.path.join(here, "modules.lua")
with open(out, "w") as f:
    f.write("-- Generated by tests/lua/nn/gen_modules.py with PyTorch " + torch.__version__ +
            "; do not edit.\n")
    f.write("return " + lua({"losses": cases, "softmax": softmax, "flatten": flatten, "names": names,
                             "schedulers": schedulers}) + "\n")
print("wrote", out)
