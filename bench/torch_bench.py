#!/usr/bin/env python3
"""The figures of bench/bench.c, measured on PyTorch on the same machine and
threads, as JSON lines named torch/... . Exits quietly when torch is missing.
With a CUDA device it adds the cuda_* cases; --gpu runs only those, --attention
only the CPU attention cases, --conv only the convolution cases, --adam only
the optimizer cases, --block only the transformer block, --kernels only the 1-
and 2-thread kernel cases; --serve answers one case at a time for
scripts/bench-compare.py (bench.c --serve has the same cases)."""
import json
import os
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(1)

torch.set_num_threads(2)


SYNC = [lambda: None]


# wall time; process CPU time with BENCH_CPU_TIME=1 (bench.c's rule)
clock = time.process_time if os.environ.get("BENCH_CPU_TIME") == "1" else time.perf_counter


def time_it(f, min_s):
    f()
    SYNC[0]()
    reps = 1
    while True:
        t0 = clock()
        for _ in range(reps):
            f()
        SYNC[0]()
        dt = clock() - t0
        if dt >= min_s:
            break
        reps = reps * 10 if dt == 0 else int(reps * min_s / dt * 1.2) + 1
    best = 1e30
    for _ in range(5):
        t0 = clock()
        for _ in range(reps):
            f()
        SYNC[0]()
        best = min(best, (clock() - t0) / reps)
    return best


def emit(name, value, unit):
    print(json.dumps({"name": "torch/" + name, "value": float(f"{value:.4g}"), "unit": unit}), flush=True)


def mlp(batch, i, h, o, adam, dtype=torch.float32, device="cpu", autocast=False):
    """One training step of Linear-ReLU-Linear with MSE; autocast: float32
    tensors, the step under bf16 autocast (as a mixed-precision script runs it)."""
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
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
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
    attention_benches("cuda_", "cuda")
    SYNC[0] = lambda: None


def attention(t, fused, backward, device="cpu"):
    """Causal attention at (4, 12, t, 64): scaled_dot_product_attention, or composed
    of matmul, scale, masked_fill, softmax and matmul; the backward of the sum."""
    q, k, v = (torch.randn(4, 12, t, 64, device=device, requires_grad=backward) for _ in range(3))
    mask = torch.ones(t, t, dtype=torch.bool, device=device).triu(1)

    def step():
        if fused:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) * (1 / 8)
            o = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v
        if backward:
            for x in (q, k, v):
                x.grad = None
            o.sum().backward()
    return step


def llama_attention(mode):
    """bench.c's Llama attention cases at (B 4, H 8, Hkv 2, T 512, D 64), causal,
    forward and backward: grouped heads (enable_gqa) or repeated; packed rows
    (4 sequences each, bench.c's lengths) through a (B, 1, T, T) bool mask, as
    PyTorch has no segment ids (so both packed cases run the same call)."""
    b, h, hkv, t, d = 4, 8, 2, 512, 64
    q = torch.randn(b, h, t, d, requires_grad=True)
    k, v = (torch.randn(b, hkv, t, d, requires_grad=True) for _ in range(2))
    lens, ids = (100, 156, 90, 166), torch.empty(b, t, dtype=torch.int64)
    for r in range(b):
        s, end = 0, lens[r % 4]
        for i in range(t):
            if i == end:
                s += 1
                end += lens[(r + s) % 4]
            ids[r, i] = s
    keep = (ids.view(b, 1, t, 1) == ids.view(b, 1, 1, t)) & torch.ones(t, t, dtype=torch.bool).tril()

    def step():
        for x in (q, k, v):
            x.grad = None
        if mode == "native":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        elif mode == "repeat":
            o = F.scaled_dot_product_attention(q, k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1),
                                               is_causal=True)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, enable_gqa=True)
        o.sum().backward()
    return step


def attention_benches(prefix="", device="cpu"):
    for t in (64, 1024):
        for bwd in (False, True):
            for fused in (True, False):
                name = f"{prefix}attention_causal_b4h12t{t}_d64_{'fused' if fused else 'composed'}_" \
                       f"{'fwd_bwd' if bwd else 'fwd'}_ms"
                emit(name, time_it(attention(t, fused, bwd, device), 0.5 if t > 64 else 0.2) * 1e3, "ms")


def conv_step(n, ci, hw, co, k, input_grad):
    x = torch.randn(n, ci, hw, hw, requires_grad=input_grad)
    w = torch.randn(co, ci, k, k, requires_grad=True)
    b = torch.randn(co, requires_grad=True)

    def step():
        for p in (x, w, b):
            p.grad = None
        F.conv2d(x, w, b, padding=k // 2).sum().backward()
    return step


def cnn_step(n):
    x, y = torch.randn(n, 1, 28, 28), torch.randint(0, 10, (n,))
    ps = [torch.randn(32, 1, 3, 3) / 3, torch.randn(32) / 3, torch.randn(64, 32, 3, 3) / 288**0.5,
          torch.randn(64) / 288**0.5, torch.randn(10, 3136) / 3136**0.5, torch.randn(10) / 3136**0.5]
    ps = [p.requires_grad_() for p in ps]

    def step():
        for p in ps:
            p.grad = None
        h = F.max_pool2d(torch.relu(F.conv2d(x, ps[0], ps[1], padding=1)), 2)
        h = F.max_pool2d(torch.relu(F.conv2d(h, ps[2], ps[3], padding=1)), 2)
        F.cross_entropy(F.linear(h.reshape(n, -1), ps[4], ps[5]), y).backward()
    return step


def conv_benches():
    emit("conv2d_64x1x28x28_32c3_fwd_bwd", 64 / time_it(conv_step(64, 1, 28, 32, 3, False), 0.5), "images/s")
    emit("conv2d_64x32x14x14_64c3_fwd_bwd", 64 / time_it(conv_step(64, 32, 14, 64, 3, True), 0.5), "images/s")
    emit("conv2d_64x1x28x28_32c5_fwd_bwd", 64 / time_it(conv_step(64, 1, 28, 32, 5, False), 0.5), "images/s")
    emit("cnn_fashion_mnist_b64_fwd_bwd", 64 / time_it(cnn_step(64), 1.0), "images/s")


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


# the transformer kernels and bf16 GEMMs on 1 and 2 threads (bench.c's thread_benches)
def thread_benches():
    for th in (1, 2):
        torch.set_num_threads(th)
        for dt, sfx in ((torch.float32, ""), (torch.bfloat16, "_bf16")):
            x = torch.randn(10000, 1000).to(dt)
            xr = torch.randn(9766, 1024).to(dt)
            w, c = torch.ones(1024, dtype=dt), torch.zeros(1024, dtype=dt)
            cases = [("gelu", lambda: F.gelu(x)), ("gelu_tanh", lambda: F.gelu(x, approximate="tanh")),
                     ("softmax", lambda: torch.softmax(xr, -1)), ("log_softmax", lambda: torch.log_softmax(xr, -1)),
                     ("sum", lambda: x.sum()), ("layer_norm", lambda: F.layer_norm(xr, (1024,), w, c, 1e-5))]
            for name, f in cases:
                emit(f"{name}_1e7{sfx}_t{th}", time_it(f, 0.3) * 1e3, "ms")
        for m, k, n in ((1024, 1024, 1024), (256, 1024, 4096)):
            a, b = torch.randn(m, k).bfloat16(), torch.randn(k, n).bfloat16()
            name = "bf16_gemm_1024" if m == 1024 else f"bf16_gemm_{m}x{k}x{n}"
            emit(f"{name}_t{th}", 2 * m * n * k / time_it(lambda: a @ b, 0.5) / 1e9, "GFLOP/s")
        for dt, sfx in ((torch.float32, ""), (torch.bfloat16, "_bf16")):
            t = time_it(mlp(256, 1024, 4096, 1024, False, dt), 1.0)
            emit(f"mlp_1024_4096_1024_b256_fwd_bwd{sfx}_t{th}", 5 * 2 * 256 * 1024 * 4096 / t / 1e9, "GFLOP/s")
    torch.set_num_threads(2)


def block_step(dtype):
    """One GPT-2 block (bench.c's run_block): C 256, T 128, B 16, 4 heads."""
    b, t, c, nh = 16, 128, 256, 4
    x = torch.randn(b, t, c, dtype=dtype).requires_grad_()
    def lin(o, i):
        return ((torch.randn(o, i) * 0.02).to(dtype).requires_grad_(),
                torch.zeros(o, dtype=dtype, requires_grad=True))
    ln1 = (torch.ones(c, dtype=dtype, requires_grad=True), torch.zeros(c, dtype=dtype, requires_grad=True))
    ln2 = (torch.ones(c, dtype=dtype, requires_grad=True), torch.zeros(c, dtype=dtype, requires_grad=True))
    attn, proj, fc, mproj = lin(3 * c, c), lin(c, c), lin(4 * c, c), lin(c, 4 * c)
    ps = [x, *ln1, *attn, *proj, *ln2, *fc, *mproj]

    def step():
        for p in ps:
            p.grad = None
        h = F.layer_norm(x, (c,), *ln1, 1e-5)
        q, k, v = F.linear(h, *attn).split(c, dim=2)
        q, k, v = (z.reshape(b, t, nh, c // nh).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x1 = x + F.linear(y, *proj)
        h2 = F.layer_norm(x1, (c,), *ln2, 1e-5)
        x2 = x1 + F.linear(F.gelu(F.linear(h2, *fc), approximate="tanh"), *mproj)
        x2.sum().backward()
    return step


def block_benches():
    for th in (1, 2):
        torch.set_num_threads(th)
        for dt, sfx in ((torch.float32, ""), (torch.bfloat16, "_bf16")):
            emit(f"transformer_block_c256_t128_b16_fwd_bwd{sfx}_t{th}", time_it(block_step(dt), 1.0) * 1e3, "ms")
    torch.set_num_threads(2)


def time_best3(f):
    """Seconds per call: the best of 3 repetitions of at least 0.1 s (bench.c's time_best3)."""
    f()
    reps = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        dt = time.perf_counter() - t0
        if dt >= 0.1:
            best = dt / reps
            break
        reps = reps * 10 if dt == 0 else int(reps * 0.1 / dt * 1.2) + 1
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best


def script_add_64():
    """`c = a + b` on two 64-float tensors from a Python loop: bench.c runs the
    same loop in Lua."""
    a, b = torch.randn(64), torch.randn(64)

    def loop():
        c = None
        for _ in range(100000):
            c = a + b
        return c
    return lambda: time_best3(loop) / 100000


def serve_case(name):
    """Seconds per call of one of bench.c's --serve cases, or None."""
    unary = {"gelu": lambda x, w, c: F.gelu(x), "gelu_tanh": lambda x, w, c: F.gelu(x, approximate="tanh"),
             "softmax": lambda x, w, c: torch.softmax(x, -1), "log_softmax": lambda x, w, c: torch.log_softmax(x, -1),
             "sum": lambda x, w, c: x.sum(), "layer_norm": lambda x, w, c: F.layer_norm(x, (1024,), w, c, 1e-5)}
    if name in ("sgemm_1024", "bf16_gemm_1024"):
        dt = torch.bfloat16 if name[0] == "b" else torch.float32
        a, b = torch.randn(1024, 1024).to(dt), torch.randn(1024, 1024).to(dt)
        return time_best3(lambda: a @ b)
    if name in ("add_64", "relu_64", "add_1m"):
        n = 1000000 if name == "add_1m" else 64
        a, b = torch.randn(n), torch.randn(n)
        return time_best3((lambda: torch.relu(a)) if name[0] == "r" else (lambda: a + b))
    if name in ("transpose_4096x1024", "transpose_4096x1024_bf16"):
        a = torch.randn(4096, 1024).to(torch.bfloat16 if name.endswith("bf16") else torch.float32)
        return time_best3(lambda: a.t().contiguous())
    if name == "script_add_64":
        return script_add_64()()
    if name == "mlp_1024_4096_1024_b256_fwd_bwd_bf16_autocast":
        return time_best3(mlp(256, 1024, 4096, 1024, False, autocast=True))
    if name.startswith("mlp_1024_4096_1024_b256_fwd_bwd"):
        return time_best3(mlp(256, 1024, 4096, 1024, False, torch.bfloat16 if "bf16" in name else torch.float32))
    if name == "simplenet_step":
        return time_best3(mlp(64, 10, 20, 2, True))
    if name.startswith("transformer_block_c256_t128_b16_fwd_bwd"):
        return time_best3(block_step(torch.bfloat16 if "bf16" in name else torch.float32))
    for k, f in unary.items():
        if name in (f"{k}_1e7", f"{k}_1e7_bf16"):
            dt = torch.bfloat16 if name.endswith("bf16") else torch.float32
            rows = k in ("softmax", "log_softmax", "layer_norm")
            x = (torch.randn(9766, 1024) if rows else torch.randn(10000, 1000)).to(dt)
            w, c = torch.ones(1024, dtype=dt), torch.zeros(1024, dtype=dt)
            return time_best3(lambda: f(x, w, c))
    if name in ("adamw_8m", "adamw_8m_foreach"):
        n = 8 << 20
        p = torch.randn(n, requires_grad=True)
        p.grad = torch.randn(n)
        form = {"foreach": True} if name.endswith("foreach") else {"fused": True}
        opt = torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01, **form)
        with torch.no_grad():
            return time_best3(opt.step)
    if name == "attention_causal_b4h12t1024_d64_fused_fwd":
        return time_best3(attention(1024, True, False))
    if name == "attention_causal_b4h12t64_d64_fused_fwd_bwd":
        return time_best3(attention(64, True, True))
    for mode in ("native", "repeat", "segments", "mask"):
        group = "gqa" if mode in ("native", "repeat") else "packed"
        if name == f"attention_{group}_b4h8kv2t512_d64_{mode}_fwd_bwd":
            return time_best3(llama_attention(mode))
    if name == "cnn_fashion_mnist_b64_fwd_bwd":
        return time_best3(cnn_step(64))
    if name.startswith("gemv_4096x") and name.endswith(("_f32", "_int8")):  # (no int4 CPU kernel for float32 x)
        out = int(name.split("x")[1].split("_")[0])
        x, w = torch.randn(1, 4096), torch.randn(out, 4096)
        if name.endswith("_f32"):
            return time_best3(lambda: F.linear(x, w))
        if not hasattr(torch, "_weight_int8pack_mm"):  # (older PyTorch)
            return None
        q, sc = torch.randint(-127, 128, (out, 4096), dtype=torch.int8), torch.rand(out)
        return time_best3(lambda: torch._weight_int8pack_mm(x, q, sc))
    return None


def serve():
    """Answers "CASE THREADS" lines with {"case", "threads", "s"} (bench.c --serve)."""
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 2:
            continue
        name, threads = parts[0], int(parts[1])
        torch.set_num_threads(threads)
        t = serve_case(name)
        out = {"case": name, "threads": threads}
        if t is None:
            out["error"] = "unknown case"
        else:
            out["s"] = float(f"{t:.6g}")
        print(json.dumps(out), flush=True)


if "--serve" in sys.argv[1:]:
    serve()
    sys.exit(0)

gpu_only = "--gpu" in sys.argv[1:]
if "--attention" in sys.argv[1:]:  # only the CPU attention cases
    attention_benches()
    sys.exit(0)
if "--block" in sys.argv[1:]:  # only the transformer block
    block_benches()
    sys.exit(0)
if "--kernels" in sys.argv[1:]:  # only the 1- and 2-thread kernel cases
    thread_benches()
    sys.exit(0)
if "--adam" in sys.argv[1:]:
    adam_benches()
    sys.exit(0)
if torch.cuda.is_available():
    gpu_benches()
if gpu_only:
    sys.exit(0)
if "--conv" in sys.argv[1:]:
    conv_benches()
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
attention_benches()
conv_benches()


thread_benches()
block_benches()
adam_benches()
