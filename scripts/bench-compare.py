#!/usr/bin/env python3
"""zorch beside PyTorch, case by case (what `make bench` runs).

Starts `bench --serve` (bench/bench.c) and `bench/torch_bench.py --serve`, both
with OMP_WAIT_POLICY=PASSIVE, and asks them for the same case on the same
number of threads one after the other (which one goes first alternates from
round to round), for every case at every thread count, for a few rounds. Each
answer is the best of 3 repetitions; the figures printed are the medians over
the rounds. The machine's limits are measured the same way (and the best
round is kept, since they are ceilings): the AVX-512 FMA
peak (fp32 FMA, the bf16 dot product where the CPU has AVX512-BF16, and the
AMX tile multiply where it has AMX, which then bounds the bf16 GEMMs) and
the memory bandwidth (STREAM-like sum, copy and triad), so that each case also
reads as a fraction of the limit it is bound by.

Output: JSON lines. {"name": "machine", ...} first, then one line per limit
({"name": "limit/...", "threads", "value", "unit"}) and per case
({"name", "threads", "unit", "zorch", "torch", "time_ratio", "limit",
"zorch_of_limit", "torch_of_limit"}; time_ratio is zorch's time over
PyTorch's, below 1 when zorch is faster). Without torch the torch fields are
null and the machine line says why. scripts/bench-table.py turns the lines
into the table of docs/performance.md.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GF = 1e9
# name -> (unit, seconds -> value, work per call, limit it is measured against)
# work is flops for the FMA limits and bytes (the least a kernel must move) for
# the bandwidth ones (a reduction against the read-only sum, an op that reads
# one tensor and writes one against copy, Adam's 4 reads and 3 writes against
# triad); None: latency cases, bound by no limit here.
MLP_FLOPS = 5 * 2 * 256 * 1024 * 4096  # 2 forward GEMMs and 3 backward ones
CASES = {
    "sgemm_1024": ("GFLOP/s", lambda s: 2 * 1024**3 / s / GF, 2 * 1024**3, "peak_fma_fp32"),
    "bf16_gemm_1024": ("GFLOP/s", lambda s: 2 * 1024**3 / s / GF, 2 * 1024**3, "peak_dot_bf16"),
    "mlp_1024_4096_1024_b256_fwd_bwd": ("GFLOP/s", lambda s: MLP_FLOPS / s / GF, MLP_FLOPS, "peak_fma_fp32"),
    "mlp_1024_4096_1024_b256_fwd_bwd_bf16": ("GFLOP/s", lambda s: MLP_FLOPS / s / GF, MLP_FLOPS, "peak_dot_bf16"),
    # zorch's same bf16 MLP beside PyTorch's float32 one under bf16 autocast
    "mlp_1024_4096_1024_b256_fwd_bwd_bf16_autocast": ("GFLOP/s", lambda s: MLP_FLOPS / s / GF, MLP_FLOPS,
                                                      "peak_dot_bf16"),
    "attention_causal_b4h12t1024_d64_fused_fwd": ("ms", lambda s: s * 1e3, 2 * 2 * 1024 * 1024 * 64 * 48 / 2,
                                                  "peak_fma_fp32"),
    "attention_causal_b4h12t64_d64_fused_fwd_bwd": ("ms", lambda s: s * 1e3, None, None),
    # a Llama's attention (bench.c's llama_attn): grouped heads in place or
    # repeated; packed rows by segment ids or by a (B, 1, T, T) mask
    "attention_gqa_b4h8kv2t512_d64_native_fwd_bwd": ("ms", lambda s: s * 1e3, None, None),
    "attention_gqa_b4h8kv2t512_d64_repeat_fwd_bwd": ("ms", lambda s: s * 1e3, None, None),
    "attention_packed_b4h8kv2t512_d64_segments_fwd_bwd": ("ms", lambda s: s * 1e3, None, None),
    "attention_packed_b4h8kv2t512_d64_mask_fwd_bwd": ("ms", lambda s: s * 1e3, None, None),
    "cnn_fashion_mnist_b64_fwd_bwd": ("images/s", lambda s: 64 / s, None, None),
    "simplenet_step": ("us", lambda s: s * 1e6, None, None),
    "transformer_block_c256_t128_b16_fwd_bwd": ("ms", lambda s: s * 1e3, None, None),
    "transformer_block_c256_t128_b16_fwd_bwd_bf16": ("ms", lambda s: s * 1e3, None, None),
    "add_64": ("ns", lambda s: s * 1e9, None, None),
    "relu_64": ("ns", lambda s: s * 1e9, None, None),
    "script_add_64": ("ns", lambda s: s * 1e9, None, None),
    "add_1m": ("us", lambda s: s * 1e6, None, None),  # 12 MB: stays in a large L3, no DRAM limit
    # a transposed matrix made contiguous: reads and writes 4096 x 1024 elements
    "transpose_4096x1024": ("ms", lambda s: s * 1e3, 2 * 4 * 4096 * 1024, "stream_copy"),
    "transpose_4096x1024_bf16": ("ms", lambda s: s * 1e3, 2 * 2 * 4096 * 1024, "stream_copy"),
    "adamw_8m": ("Mparams/s", lambda s: (8 << 20) / s / 1e6, 7 * 4 * (8 << 20), "stream_triad"),
    # zorch's same step beside PyTorch's foreach AdamW (adamw_8m: its fused one)
    "adamw_8m_foreach": ("Mparams/s", lambda s: (8 << 20) / s / 1e6, 7 * 4 * (8 << 20), "stream_triad"),
}
# decode's GEMV (1 x 4096 by the weight), float32 against the quantised
# weights: the weight's bytes (int4: the nibbles and the float16 scales of groups of 32) against stream_read
for out in (4096, 11008):
    for dt, size in (("f32", 4), ("int8", 1 + 2 / 4096), ("int4", 0.5 + 2 / 32)):
        moved = out * 4096 * size
        CASES[f"gemv_4096x{out}_{dt}"] = ("GB/s", lambda s, m=moved: m / s / GF, moved, "stream_read")
for k in ("gelu", "softmax", "sum", "layer_norm"):
    for dt, size in (("", 4), ("_bf16", 2)):
        n = 10000 * 1000 if k in ("gelu", "sum") else 9766 * 1024
        moved = n * size * (1 if k == "sum" else 2)  # read, and write the result
        CASES[f"{k}_1e7{dt}"] = ("ms", lambda s: s * 1e3, moved, "stream_read" if k == "sum" else "stream_copy")

LIMITS = {  # name -> (unit, work per call per thread)
    "peak_fma_fp32": ("GFLOP/s", 4000000 * 12 * 16 * 2),
    "peak_dot_bf16": ("GFLOP/s", 4000000 * 12 * 64),
    "peak_amx_bf16": ("GFLOP/s", 1000000 * 4 * 16 * 16 * 32 * 2),  # CPUs with AMX only
    "stream_read": ("GB/s", 4 * (1 << 24)),
    "stream_copy": ("GB/s", 2 * 4 * (1 << 24)),
    "stream_triad": ("GB/s", 3 * 4 * (1 << 24)),
}
PER_THREAD = ("peak_fma_fp32", "peak_dot_bf16", "peak_amx_bf16")
# a bf16 GEMM's limit is the tile units' peak where the CPU has them
BF16_GEMM_LIMITS = ("peak_amx_bf16", "peak_dot_bf16")  # the bandwidth kernels share their arrays


class Worker:
    """A --serve process: one request line, one JSON answer."""

    def __init__(self, argv, env):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True,
                                  cwd=ROOT)

    def ask(self, case, threads):
        self.p.stdin.write(f"{case} {threads}\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.p.args[0]} ended while running {case} on {threads} threads")
        r = json.loads(line)
        return r.get("s")

    def close(self):
        self.p.stdin.close()
        self.p.wait()


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def torch_worker(env):
    """PyTorch's worker, or (None, why)."""
    probe = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                           text=True, env=env)
    if probe.returncode != 0:
        return None, None, "torch is not importable: zorch alone"
    return Worker([sys.executable, os.path.join(ROOT, "bench", "torch_bench.py"), "--serve"], env), \
        probe.stdout.strip(), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bench", default="build/cpu/bench/bench", help="bench.c's program")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--cases", default="", help="only the cases whose name contains one of these (comma-separated)")
    ap.add_argument("--no-torch", action="store_true", help="zorch alone")
    ap.add_argument("--out", help="also write the lines to this file")
    args = ap.parse_args()
    if args.out:
        OUT.append(open(args.out, "w"))
    threads = [int(t) for t in args.threads.split(",")]
    cases = [c for c in CASES if not args.cases or any(w in c for w in args.cases.split(","))]
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", ZORCH_QUIET="1")

    zorch = Worker([os.path.abspath(args.bench), "--serve"], env)
    torch, torch_version, why = (None, None, "not asked (--no-torch)") if args.no_torch else torch_worker(env)
    try:  # which libraries run zorch's GEMMs (oneDNN 2.x or 3.x, OpenBLAS)
        blas = subprocess.run([os.path.abspath(args.bench), "--blas"], env=env, capture_output=True,
                              text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        blas = None
    emit({"name": "machine", "date": datetime.date.today().isoformat(), "cpu": cpu_model(),
          "cpus": os.cpu_count(), "threads": threads, "rounds": args.rounds, "omp_wait_policy": "PASSIVE",
          "torch": torch_version, "torch_note": why, "zorch_blas": blas})

    limit_s = {}  # (limit, threads) -> [seconds]
    zs, ts = {}, {}  # (case, threads) -> [seconds]
    over_c = {}  # threads -> [the Lua op's time over the C op's, timed back to back]
    for r in range(args.rounds):
        for th in threads:
            for lim in LIMITS:
                s = zorch.ask(lim, th)
                if s is not None:
                    limit_s.setdefault((lim, th), []).append(s)
            if "script_add_64" in cases and "add_64" in cases:
                q = zorch.ask("script_add_64_over_c", th)
                if q is not None:
                    over_c.setdefault(th, []).append(q)
            for case in cases:
                order = [(zorch, zs), (torch, ts)] if r % 2 == 0 else [(torch, ts), (zorch, zs)]
                for w, into in order:
                    if w is None:
                        continue
                    s = w.ask(case, th)
                    if s is not None:
                        into.setdefault((case, th), []).append(s)
        print(f"bench-compare: round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    zorch.close()
    if torch:
        torch.close()

    limits = {}
    for (lim, th), ss in limit_s.items():
        unit, work = LIMITS[lim]
        rate = work * (th if lim in PER_THREAD else 1) / min(ss)  # a limit: the best round
        limits[(lim, th)] = rate
        emit({"name": f"limit/{lim}", "threads": th, "value": sig(rate / 1e9), "unit": unit})
    for case in cases:
        unit, value, work, lim = CASES[case]
        for th in threads:
            z, t = med(zs.get((case, th))), med(ts.get((case, th)))
            if lim == "peak_dot_bf16":
                lim = next((l for l in BF16_GEMM_LIMITS if (l, th) in limits), lim)
            peak = limits.get((lim, th)) if lim else None
            emit({"name": case, "threads": th, "unit": unit,
                  "zorch": sig(value(z)) if z else None, "torch": sig(value(t)) if t else None,
                  "time_ratio": sig(z / t) if z and t else None, "limit": lim if peak else None,
                  "zorch_of_limit": sig(work / z / peak) if z and peak and work else None,
                  "torch_of_limit": sig(work / t / peak) if t and peak and work else None})
    for th in threads:  # the script-level op against the same op from C
        q = med(over_c.get(th))
        if q:
            emit({"name": "script_add_64_over_c", "threads": th, "value": sig(q), "unit": "x",
                  "note": "zorch: c = a + b on 64 floats, a Lua loop's time over a C loop's, "
                          "timed back to back (median of the rounds' medians of 5 pairs)"})


def med(xs):
    return statistics.median(xs) if xs else None


def sig(x):
    return float(f"{x:.4g}")


OUT = [sys.stdout]


def emit(obj):
    for f in OUT:
        print(json.dumps(obj), file=f, flush=True)


if __name__ == "__main__":
    main()
