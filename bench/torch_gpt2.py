#!/usr/bin/env python3
"""PyTorch eager's figures for `zorch models/gpt2.lua --bench N`: one training
step of GPT-2 (Transformers' GPT2LMHeadModel, eager attention) timed in three
parts (forward with the loss, backward, AdamW step), the best of N rounds after a
warm-up one, as JSON lines named torch/gpt2_<model>_b<B>_t<T>_<precision>_... .

  python3 bench/torch_gpt2.py [--model small|gpt2] [--batch-size 4] [--context 64]
                              [--precision fp32|bf16] [--rounds 3] [--threads 2]

bf16 is autocast (bfloat16 matmuls, fp32 parameters and AdamW), PyTorch's usual
mixed precision; zorch's bf16 keeps 16-bit parameters with fp32 master weights.
Exits 1 without torch or transformers.
"""
import argparse
import sys
import time

try:
    import torch
    import torch.nn.functional as F
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError:
    sys.exit(1)

PRESETS = {"small": dict(n_layer=4, n_head=4, n_embd=128, n_positions=64, vocab_size=256),
           "gpt2": dict(n_layer=12, n_head=12, n_embd=768, n_positions=1024, vocab_size=50257)}

ap = argparse.ArgumentParser()
ap.add_argument("--model", default="small", choices=PRESETS)
ap.add_argument("--batch-size", type=int, default=16)
ap.add_argument("--context", type=int, default=None)
ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--threads", type=int, default=2)
a = ap.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)

p = dict(PRESETS[a.model])
B, T = a.batch_size, a.context or p["n_positions"]
config = GPT2Config(**p, bos_token_id=p["vocab_size"] - 1, eos_token_id=p["vocab_size"] - 1, activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
config._attn_implementation = "eager"
model = GPT2LMHeadModel(config)
model.train()
decay = [q for q in model.parameters() if q.dim() >= 2]
rest = [q for q in model.parameters() if q.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                        lr=1e-4, betas=(0.9, 0.99))
V = p["vocab_size"]
best = {"fwd": 1e30, "bwd": 1e30, "adamw": 1e30}
for r in range(a.rounds + 1):
    x = torch.randint(0, min(V, 256), (B, T))
    y = torch.randint(0, min(V, 256), (B, T))
    opt.zero_grad(set_to_none=True)
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
        logits = model(x).logits
        loss = F.cross_entropy(logits.float().reshape(-1, V), y.reshape(-1))
    loss.item()
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    t3 = time.perf_counter()
    if r > 0:
        best["fwd"] = min(best["fwd"], t1 - t0)
        best["bwd"] = min(best["bwd"], t2 - t1)
        best["adamw"] = min(best["adamw"], t3 - t2)
name = "gpt2_%s_b%d_t%d_%s" % (a.model, B, T, a.precision)
for k in ("fwd", "bwd", "adamw"):
    print('{"name": "torch/%s_%s", "value": %.4g, "unit": "ms"}' % (name, k, best[k] * 1e3))
print('{"name": "torch/%s_tok_per_s", "value": %.4g, "unit": "tok/s"}' % (name, B * T / sum(best.values())))
