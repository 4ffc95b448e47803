#!/usr/bin/env python3
"""The figures of bench/bench.c, measured on PyTorch on the same machine and
threads, as JSON lines named torch/... . Exits quietly when torch is missing."""
import json
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(1)

torch.set_num_threads(2)


def time_it(f, min_s):
    f()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            break
        reps = reps * 10 if dt == 0 else int(reps * min_s / dt * 1.2) + 1
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def emit(name, value, unit):
    print(json.dumps({"name": "torch/" + name, "value": float(f"{value:.4g}"), "unit": unit}), flush=True)


a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
t = time_it(lambda: a @ b, 0.5)
emit("sgemm_1024", 2 * 1024**3 / t / 1e9, "GFLOP/s")
s1, s2 = torch.randn(64), torch.randn(64)
emit("add_64", time_it(lambda: s1 + s2, 0.2) * 1e9, "ns")
emit("relu_64", time_it(lambda: torch.relu(s1), 0.2) * 1e9, "ns")
b1, b2 = torch.randn(1000000), torch.randn(1000000)
emit("add_1m", time_it(lambda: b1 + b2, 0.3) * 1e6, "us")


def mlp(batch, i, h, o, adam):
    x, y = torch.randn(batch, i), torch.randn(batch, o)
    w1 = torch.randn(h, i, requires_grad=True)
    c1 = torch.zeros(h, requires_grad=True)
    w2 = torch.randn(o, h, requires_grad=True)
    c2 = torch.zeros(o, requires_grad=True)
    ps = [w1, c1, w2, c2]
    opt = torch.optim.Adam(ps, lr=1.5e-4) if adam else None

    def step():
        for p in ps:
            p.grad = None
        loss = F.mse_loss(F.linear(torch.relu(F.linear(x, w1, c1)), w2, c2), y)
        loss.backward()
        if opt:
            opt.step()
    return step


t = time_it(mlp(256, 1024, 4096, 1024, False), 1.0)
emit("mlp_1024_4096_1024_b256_fwd_bwd", 5 * 2 * 256 * 1024 * 4096 / t / 1e9, "GFLOP/s")
emit("simplenet_step", time_it(mlp(64, 10, 20, 2, True), 0.3) * 1e6, "us")
