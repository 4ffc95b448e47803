#!/usr/bin/env python3
"""zorch's decode beside llama.cpp's and Transformers' on the same weights.

    python3 scripts/bench-llamacpp.py [--zorch build/cpu/zorch] [--rounds 3]
        [--threads 1,2] [--precisions fp32,bf16,int8,int4] [--cache DIR]

1. llama.cpp from source: the `llama-cpp-python` source distribution on PyPI
   vendors llama.cpp (vendor/llama.cpp); llama-bench and llama-quantize are
   built with cmake (CPU, -DGGML_NATIVE=ON) under the cache dir
   (~/.cache/zorch-llamacpp), once.
2. One random Llama (seed 0) saved by Transformers as a Hugging Face folder in
   the cache; the same tensors written as an f32 GGUF (the `gguf` package),
   then bf16, q8_0 and q4_0 by llama-quantize --pure (every matrix in the one
   type, as zorch's nn.quantize does; the embedding too, which zorch keeps in
   float32).
3. Per round, per thread count and precision, interleaved: llama-bench (pp and
   tg at batch 1), bench/generate.lua (batch 1, 8, 32) and Transformers'
   generate() (fp32, bf16), all with OMP_WAIT_POLICY=PASSIVE.

Prints JSON lines (medians over the rounds): {"name": "machine"...}, the read
bandwidth (bench/bench's stream_read), then one line per engine, precision,
threads and batch with prompt_tokens_per_s, decode_tokens_per_s, the weights'
bytes a decode step reads and of_bandwidth = decode steps/s x those bytes /
stream_read. Exits 0 with a "skipped" line when pip or cmake is missing.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LLAMA = dict(vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=12,
             num_attention_heads=12, num_key_value_heads=12, max_position_embeddings=1024,
             rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
PROMPT, NEW = 64, 32
GGUF_TYPE = {"fp32": None, "bf16": "BF16", "int8": "Q8_0", "int4": "Q4_0"}


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def skip(why):
    print(json.dumps({"name": "skipped", "why": why}))
    sys.exit(0)


def run(cmd, env=None, **kw):
    e = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", ZORCH_QUIET="1")
    e.update(env or {})
    return subprocess.run(cmd, env=e, check=True, capture_output=True, text=True, **kw).stdout


def build_llamacpp(cache):
    bins = os.path.join(cache, "build", "bin")
    if all(os.path.exists(os.path.join(bins, b)) for b in ("llama-bench", "llama-quantize")):
        return bins
    if not shutil.which("cmake"):
        skip("cmake not found")
    sdist = glob.glob(os.path.join(cache, "llama_cpp_python-*.tar.gz"))
    if not sdist:
        log("downloading the llama-cpp-python source distribution")
        try:
            run([sys.executable, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps", "llama-cpp-python",
                 "-d", cache])
        except (subprocess.CalledProcessError, FileNotFoundError) as e:
            skip(f"pip download llama-cpp-python failed: {e}")
        sdist = glob.glob(os.path.join(cache, "llama_cpp_python-*.tar.gz"))
    src = sdist[0][:-len(".tar.gz")]
    if not os.path.isdir(src):
        with tarfile.open(sdist[0]) as t:
            t.extractall(cache, filter="data")
    log("building llama-bench and llama-quantize (CPU, native)")
    run(["cmake", "-S", os.path.join(src, "vendor", "llama.cpp"), "-B", os.path.join(cache, "build"),
         "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF", "-DLLAMA_CURL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF"])
    run(["cmake", "--build", os.path.join(cache, "build"), "-j", str(os.cpu_count() or 2),
         "--target", "llama-bench", "llama-quantize"])
    return bins


def make_hf(cache):
    d = os.path.join(cache, "llama-12x768")
    if os.path.exists(os.path.join(d, "config.json")):
        return d
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    m = LlamaForCausalLM(LlamaConfig(**LLAMA))
    m.save_pretrained(d, safe_serialization=True)
    return d


def permute(w, heads):
    # llama.cpp's rotary layout for q and k (pairs interleaved), as its converter writes them
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def make_gguf(hf_dir, cache, bins):
    f32 = os.path.join(cache, "llama-12x768-f32.gguf")
    if not os.path.exists(f32):
        import gguf
        from safetensors.numpy import load_file
        t = {}
        for f in sorted(glob.glob(os.path.join(hf_dir, "*.safetensors"))):
            t.update(load_file(f))
        c = LLAMA
        w = gguf.GGUFWriter(f32, "llama")
        w.add_context_length(c["max_position_embeddings"])
        w.add_embedding_length(c["hidden_size"])
        w.add_block_count(c["num_hidden_layers"])
        w.add_feed_forward_length(c["intermediate_size"])
        w.add_head_count(c["num_attention_heads"])
        w.add_head_count_kv(c["num_key_value_heads"])
        w.add_layer_norm_rms_eps(c["rms_norm_eps"])
        w.add_rope_freq_base(c["rope_theta"])
        w.add_rope_dimension_count(c["hidden_size"] // c["num_attention_heads"])
        w.add_vocab_size(c["vocab_size"])
        w.add_file_type(gguf.LlamaFileType.ALL_F32)
        # a placeholder SentencePiece vocabulary: llama-bench feeds token ids, never text
        w.add_tokenizer_model("llama")
        w.add_token_list([f"<t{i}>".encode() for i in range(c["vocab_size"])])
        w.add_token_scores([0.0] * c["vocab_size"])
        w.add_token_types([gguf.TokenType.NORMAL] * c["vocab_size"])
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        names = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
                 "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
        w.add_tensor("token_embd.weight", t["model.embed_tokens.weight"])
        for i in range(c["num_hidden_layers"]):
            for hf, g in names.items():
                a = t[f"model.layers.{i}.{hf}.weight"]
                if g == "attn_q":
                    a = permute(a, c["num_attention_heads"])
                elif g == "attn_k":
                    a = permute(a, c["num_key_value_heads"])
                w.add_tensor(f"blk.{i}.{g}.weight", a.copy())
        w.add_tensor("output_norm.weight", t["model.norm.weight"])
        w.add_tensor("output.weight", t["lm_head.weight"])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    out = {"fp32": f32}
    for p, ty in GGUF_TYPE.items():
        if ty:
            f = f32.replace("-f32.", f"-{ty.lower()}.")
            if not os.path.exists(f):
                run([os.path.join(bins, "llama-quantize"), "--pure", f32, f, ty])
            out[p] = f
    return out


def weight_bytes(engine, precision):
    """Bytes of the matrices one decode step reads (every Linear and the head; the
    embedding row is negligible): zorch's int8 has a float16 scale a row, q8_0 one
    per 32 weights; int4 and q4_0 both a float16 scale per 32."""
    c = LLAMA
    h, f, v, n = c["hidden_size"], c["intermediate_size"], c["vocab_size"], c["num_hidden_layers"]
    kv = h * c["num_key_value_heads"] // c["num_attention_heads"]
    params = n * (2 * h * h + 2 * h * kv + 3 * h * f) + v * h
    per = {"fp32": 4, "bf16": 2, "int8": 1 + 2 / (32 if engine == "llama.cpp" else h), "int4": 0.5 + 2 / 32}[precision]
    return params * per


def stream_read(bench, threads):
    if not os.path.exists(bench):
        return None
    out = run([bench, "--serve"], input=f"stream_read {threads}\n")
    s = json.loads(out.splitlines()[-1])["s"]
    return (1 << 24) * 4 / s / 1e9


def llamacpp(bins, f, threads):
    out = run([os.path.join(bins, "llama-bench"), "-m", f, "-t", str(threads), "-p", str(PROMPT), "-n", str(NEW),
               "-r", "3", "-o", "jsonl"])
    r = {}
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            r["prompt" if j["n_prompt"] else "decode"] = j["avg_ts"]
    return r


def zorch_gen(zorch, hf_dir, precision, threads, batches):
    out = run([zorch, os.path.join(ROOT, "bench", "generate.lua"), str(NEW), "--model", hf_dir, "--precision",
               precision, "--threads", str(threads), "--batches", ",".join(map(str, batches)),
               "--prompt", str(PROMPT)])
    return {j["batch"]: j for j in map(json.loads, (l for l in out.splitlines() if l.startswith("{")))}


TORCH_SRC = r"""
import json, sys, time, torch
from transformers import LlamaForCausalLM
d, prec, threads, P, N = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
m = LlamaForCausalLM.from_pretrained(d, dtype=torch.bfloat16 if prec == "bf16" else torch.float32).eval()
ids = (torch.arange(P) * 17 + 131) % m.config.vocab_size
ids = ids[None]
def gen(n):
    t = time.perf_counter()
    with torch.no_grad():
        m.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False)
    return time.perf_counter() - t
gen(2)
t1, tn = gen(1), gen(N)
print(json.dumps({"prompt": P / t1, "decode": (N - 1) / (tn - t1)}))
"""


def transformers_gen(hf_dir, precision, threads):
    out = run([sys.executable, "-c", TORCH_SRC, hf_dir, precision, str(threads), str(PROMPT), str(NEW)])
    return json.loads(out.splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zorch", default=os.path.join(ROOT, "build", "cpu", "zorch"))
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "cpu", "bench", "bench"))
    ap.add_argument("--cache", default=os.path.expanduser("~/.cache/zorch-llamacpp"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--precisions", default="fp32,bf16,int8,int4")
    ap.add_argument("--batches", default="1,8,32")
    ap.add_argument("--no-transformers", action="store_true")
    a = ap.parse_args()
    if not shutil.which("pip") and not shutil.which("pip3"):
        skip("pip not found")
    os.makedirs(a.cache, exist_ok=True)
    bins = build_llamacpp(a.cache)
    hf_dir = make_hf(a.cache)
    ggufs = make_gguf(hf_dir, a.cache, bins)
    threads = [int(t) for t in a.threads.split(",")]
    precs = a.precisions.split(",")
    batches = [int(b) for b in a.batches.split(",")]
    print(json.dumps({"name": "machine", "model": "llama-12x768 (random, seed 0)", "prompt": PROMPT, "new": NEW,
                      "cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": "),
                      "date": time.strftime("%Y-%m-%d %H:%M")}), flush=True)
    bw = {}
    samples = {}  # (engine, precision, threads, batch) -> {"prompt": [], "decode": []}

    def add(key, prompt, decode):
        s = samples.setdefault(key, {"prompt": [], "decode": []})
        if prompt is not None:
            s["prompt"].append(prompt)
        s["decode"].append(decode)

    for r in range(a.rounds):
        for t in threads:
            bw.setdefault(t, []).append(stream_read(a.bench, t))
            for p in precs:
                order = ["llama.cpp", "zorch", "transformers"]
                if r % 2:
                    order.reverse()
                for eng in order:
                    log(f"round {r + 1}: {eng} {p} {t} threads")
                    if eng == "llama.cpp":
                        j = llamacpp(bins, ggufs[p], t)
                        add((eng, p, t, 1), j["prompt"], j["decode"])
                    elif eng == "zorch":
                        for b, j in zorch_gen(a.zorch, hf_dir, p, t, batches).items():
                            add((eng, p, t, b), j["prompt_tokens_per_s"] if b == 1 else None,
                                j["decode_tokens_per_s"])
                    elif not a.no_transformers and p in ("fp32", "bf16"):
                        j = transformers_gen(hf_dir, p, t)
                        add((eng, p, t, 1), j["prompt"], j["decode"])
    for t in threads:
        vals = [v for v in bw[t] if v]
        bw[t] = max(vals) if vals else None
        print(json.dumps({"name": "limit/stream_read", "threads": t, "value": bw[t], "unit": "GB/s"}))
    for (eng, p, t, b), s in sorted(samples.items()):
        wb = weight_bytes(eng, p)
        dec = statistics.median(s["decode"])
        steps = dec / b
        print(json.dumps({"name": "decode", "engine": eng, "precision": p, "threads": t, "batch": b,
                          "prompt_tokens_per_s": round(statistics.median(s["prompt"]), 1) if s["prompt"] else None,
                          "decode_tokens_per_s": round(dec, 1), "decode_runs": [round(x, 1) for x in s["decode"]],
                          "weight_bytes_per_step": int(wb),
                          "of_bandwidth": round(steps * wb / 1e9 / bw[t], 3) if bw[t] else None}), flush=True)


if __name__ == "__main__":
    main()
