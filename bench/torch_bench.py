#!/usr/bin/env python3
"""The figures of bench/bench.c, measured on PyTorch on the same machine and
threads, as JSON lines named torch/... . Exits quietly when torch is missing.
With a CUDA device it adds the cuda_* cases; --gpu runs only those."""
import json
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(1)

torch.set_num_threads(2)


SYNC = [lambda: None]


def time_it(f, min_s):
    f()
    SYNC[0]()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        SYNC[0]()
        dt = time.perf_counter() - t0
        if dt >= min_s:
            break
        reps = reps * 10 if dt == 0 else int(reps * min_s / dt * 1.2) + 1
    best = 1e30
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        SYNC[0]()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def emit(name, value, unit):
    print(json.dumps({"name": "torch/" + name, "value": float(f"{value:.4g}"), "unit": unit}), flush=True)


def mlp(batch, i, h, o, adam, dtype=torch.float32, device="cpu"):
    kw = {"dtype": dtype, "device": device}
    x, y = torch.randn(batch, i, **kw), torch.randn(batch, o, **kw)
    w1 = (torch.randn(h, i, **kw) / i**0.5).requires_grad_()
    c1 = torch.zeros(h, requires_grad=True, **kw)
    w2 = (torch.randn(o, h, **kw) / h**0.5).requires_grad_()
    c2 = torch.zeros(o, requires_grad=True, **kw)
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


def gpu_benches():
    torch.backends.cuda.matmul.allow_tf32 = False
    SYNC[0] = torch.cuda.synchronize
    for n in (4096, 8192):
        for dt, label in ((torch.float32, "sgemm"), (torch.bfloat16, "bf16_gemm")):
            a, b = torch.randn(n, n, dtype=dt, device="cuda"), torch.randn(n, n, dtype=dt, device="cuda")
            emit(f"cuda_{label}_{n}", 2 * n**3 / time_it(lambda: a @ b, 0.5) / 1e12, "TFLOP/s")
            if dt == torch.float32 and n == 8192:
                torch.backends.cuda.matmul.allow_tf32 = True
                emit("cuda_sgemm_tf32_8192", 2 * n**3 / time_it(lambda: a @ b, 0.5) / 1e12, "TFLOP/s")
                torch.backends.cuda.matmul.allow_tf32 = False
            del a, b
    for dt, label in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        t = time_it(mlp(8192, 4096, 16384, 4096, False, dt, "cuda"), 1.0)
        emit(f"cuda_mlp_4096_16384_4096_b8192_{label}_ms", t * 1e3, "ms")
        emit(f"cuda_mlp_4096_16384_4096_b8192_{label}", 5 * 2 * 8192 * 4096 * 16384 / t / 1e12, "TFLOP/s")
    emit("cuda_simplenet_step", time_it(mlp(64, 10, 20, 2, True, torch.float32, "cuda"), 0.3) * 1e6, "us")
    SYNC[0] = lambda: None


def adam_benches():
    """AdamW over one flat fp32 shard of 8M parameters (bench.c's adamw_8m):
    PyTorch's foreach and fused CPU implementations at 1 and 2 threads."""
    n = 8 << 20
    for impl in ("foreach", "fused"):
        p = torch.randn(n, requires_grad=True)
        p.grad = torch.randn(n)
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **{impl: True})
        for threads in (1, 2):
            torch.set_num_threads(threads)
            with torch.no_grad():
                emit(f"adamw_8m_{impl}_t{threads}", n / time_it(opt.step, 0.5) / 1e6, "Mparams/s")
    torch.set_num_threads(2)


gpu_only = "--gpu" in sys.argv[1:]
if "--adam" in sys.argv[1:]:
    adam_benches()
    sys.exit(0)
if torch.cuda.is_available():
    gpu_benches()
if gpu_only:
    sys.exit(0)
a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
t = time_it(lambda: a @ b, 0.5)
emit("sgemm_1024", 2 * 1024**3 / t / 1e9, "GFLOP/s")
s1, s2 = torch.randn(64), torch.randn(64)
emit("add_64", time_it(lambda: s1 + s2, 0.2) * 1e9, "ns")
emit("relu_64", time_it(lambda: torch.relu(s1), 0.2) * 1e9, "ns")
b1, b2 = torch.randn(1000000), torch.randn(1000000)
emit("add_1m", time_it(lambda: b1 + b2, 0.3) * 1e6, "us")


t = time_it(mlp(256, 1024, 4096, 1024, False), 1.0)
emit("mlp_1024_4096_1024_b256_fwd_bwd", 5 * 2 * 256 * 1024 * 4096 / t / 1e9, "GFLOP/s")
emit("simplenet_step", time_it(mlp(64, 10, 20, 2, True), 0.3) * 1e6, "us")
adam_benches()
