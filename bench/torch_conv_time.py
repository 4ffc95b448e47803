#!/usr/bin/env python3
"""bench/conv_time.c's measurement on PyTorch: CPU seconds (all threads) and
wall seconds per conv2d forward and backward step, best of 5 rounds of 10.
Usage: torch_conv_time.py N C HW OUT K THREADS INPUT_GRAD"""
import sys
import time

import torch
import torch.nn.functional as F

n, c, hw, o, k, threads, ig = (int(a) for a in sys.argv[1:8])
torch.set_num_threads(threads)
x = torch.randn(n, c, hw, hw, requires_grad=bool(ig))
w = torch.randn(o, c, k, k, requires_grad=True)
b = torch.randn(o, requires_grad=True)
best_cpu = best_wall = 1e30
for _ in range(5):
    c0, w0 = time.process_time(), time.perf_counter()
    for _ in range(10):
        for p in (x, w, b):
            p.grad = None
        F.conv2d(x, w, b, padding=k // 2).sum().backward()
    best_cpu = min(best_cpu, (time.process_time() - c0) / 10)
    best_wall = min(best_wall, (time.perf_counter() - w0) / 10)
print(f"torch {threads} threads: n={n} c={c} hw={hw} o={o} k={k}: {best_cpu * 1e3:.2f} ms CPU, "
      f"{best_wall * 1e3:.2f} ms wall per step")
