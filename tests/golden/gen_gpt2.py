#!/usr/bin/env python3
"""PyTorch's side of the GPT-2 parity test, with Transformers' GPT2LMHeadModel as
the reference model: a small GPT-2 (2 layers, 4 heads, width 64, context 32,
byte vocabulary) initialised by Transformers, and the losses of its first 10
training steps on the Debian book, read in order as llm.c reads it.

  gpt2_init.safetensors  the initial weights, Hugging Face names and layouts
                         (transformer.h.0.attn.c_attn.weight as (in, out), ...)
  gpt2_losses.txt        "step loss" for steps 1..10

Training: batch 4 x 32, AdamW (betas 0.9, 0.99, eps 1e-8, weight decay 1.0 on
the 2-d parameters), lr 3e-3 with 3 warm-up steps then cosine to 3e-4 at step
10, gradient clipping at norm 1. tests/lua/test_gpt2.lua runs models/gpt2.lua
from the same weights and compares. Usage: python3 tests/golden/gen_gpt2.py
(needs torch, safetensors and transformers)
"""
import math
import os

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel

here = os.path.dirname(os.path.abspath(__file__))
TEXT = "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt"
B, T, STEPS = 4, 32, 10
LR, MIN_LR, WARMUP, WD, CLIP = 3e-3, 3e-4, 3, 1.0, 1.0  # a large decay, so its placement shows in the losses

torch.manual_seed(0)
config = GPT2Config(vocab_size=256, n_positions=32, n_embd=64, n_layer=2, n_head=4,
                    activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=255, eos_token_id=255,
                    resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
config._attn_implementation = "eager"
model = GPT2LMHeadModel(config)
model.train()

# the tied head is left out, as Transformers' own files leave it out
init = {k: v.detach().clone().contiguous() for k, v in model.named_parameters() if k != "lm_head.weight"}
save_file(init, os.path.join(here, "gpt2_init.safetensors"))

with open(TEXT, "rb") as f:
    tokens = torch.tensor(list(f.read()), dtype=torch.long)
n = tokens.numel()
train = tokens[: n - int(n * 0.1)]

decay = [p for p in model.parameters() if p.dim() >= 2]
no_decay = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                        lr=LR, betas=(0.9, 0.99), eps=1e-8, foreach=False)


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    ratio = min((s - WARMUP) / max(STEPS - WARMUP, 1), 1)
    return MIN_LR + 0.5 * (1 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


lines = []
for step in range(STEPS):
    for g in opt.param_groups:
        g["lr"] = lr_at(step)
    chunk = train[step * B * T: step * B * T + B * T + 1]
    x, y = chunk[:-1].view(B, T), chunk[1:].view(B, T)
    logits = model(x).logits
    loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    lines.append("%d %.8f" % (step + 1, loss.item()))
with open(os.path.join(here, "gpt2_losses.txt"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
