#!/usr/bin/env python3
"""Transformers' side of the Llama/Mistral/Qwen2 parity test
(tests/lua/llama/test_llama.lua runs models/llama.lua and compares).

Builds four tiny random models with fixed seeds and saves each with
save_pretrained into a folder here:

  llama_gqa/    LlamaConfig, 4 heads over 2 key/value heads (GQA), Llama-3
                rope_scaling (every branch of its frequency rule), an untied
                head; fp32, several shards and model.safetensors.index.json
  llama_tied/   LlamaConfig, MHA, tied embeddings, attention_bias; bf16, one file
  mistral/      MistralConfig, sliding_window 4 (shorter than the sequence), GQA;
                fp16, sharded
  qwen2/        Qwen2Config, biases on q/k/v, GQA, tied embeddings; fp32, sharded

tokens.bin holds random uint16 token ids (the training data). golden.safetensors
holds, per model NAME: NAME.tokens (2, 12), NAME.logits (2, 12, vocab) of the
model reloaded from its folder in fp32, NAME.inv_freq the rotary frequencies,
and NAME.losses (STEPS,): the losses of
the first training steps, read as `models/llama.lua --no-shuffle
--val-fraction 0` reads the file (batch B x T in order), AdamW (betas 0.9, 0.95,
eps 1e-8, weight decay WD on the 2-d parameters), lr LR after WARMUP linear
warm-up steps then cosine to LR / 10 at step STEPS, clipping at norm CLIP.

Usage: python3 tests/lua/llama/gen_llama.py (needs torch, safetensors, transformers)
"""
import math
import os
import shutil

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig, MistralConfig, Qwen2Config

here = os.path.dirname(os.path.abspath(__file__))
V, B, T, STEPS = 96, 2, 12, 4
LR, WARMUP, WD, CLIP = 1e-2, 2, 0.1, 1.0
SMALL = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64, rms_norm_eps=1e-5, initializer_range=0.25, attention_dropout=0.0, bos_token_id=1, eos_token_id=2)

MODELS = [
    ("llama_gqa", LlamaConfig, dict(num_key_value_heads=2, tie_word_embeddings=False, rope_theta=100.0,
                                    rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                  "high_freq_factor": 4.0, "original_max_position_embeddings": 32}),
     torch.float32, "40KB"),
    ("llama_tied", LlamaConfig, dict(num_key_value_heads=4, tie_word_embeddings=True, rope_theta=10000.0,
                                     attention_bias=True), torch.bfloat16, None),
    ("mistral", MistralConfig, dict(num_key_value_heads=2, sliding_window=4, tie_word_embeddings=False,
                                    rope_theta=10000.0), torch.float16, "30KB"),
    ("qwen2", Qwen2Config, dict(num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0,
                                use_sliding_window=False), torch.float32, "40KB"),
]

torch.manual_seed(0)
tokens = torch.randint(0, V, (600,), dtype=torch.int64)
tokens.numpy().astype("<u2").tofile(os.path.join(here, "tokens.bin"))
n = tokens.numel()


def batch(m):
    chunk = B * T
    start = (m % ((n - 1) // chunk)) * chunk
    return tokens[start:start + B * T].view(B, T), tokens[start + 1:start + 1 + B * T].view(B, T)


def lr_at(s):
    if s < WARMUP:
        return LR * (s + 1) / WARMUP
    ratio = min((s - WARMUP) / max(STEPS - WARMUP, 1), 1)
    return LR / 10 + 0.5 * (1 + math.cos(math.pi * ratio)) * (LR - LR / 10)


golden = {}
for i, (name, cls, extra, dtype, shard) in enumerate(MODELS):
    torch.manual_seed(100 + i)
    config = cls(**SMALL, **extra)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():  # random biases and norm weights, so that a missed one shows
        for pname, p in model.named_parameters():
            if pname.endswith("bias") or "norm" in pname:
                p.copy_(torch.randn_like(p) * 0.1 + (1.0 if "norm" in pname else 0.0))
    folder = os.path.join(here, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.to(dtype).save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    # the reference: the folder as Transformers reads it, in fp32
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    g = torch.Generator().manual_seed(7 + i)
    ids = torch.randint(0, V, (B, T), generator=g)
    with torch.no_grad():
        golden[name + ".tokens"] = ids.clone()
        golden[name + ".logits"] = model(ids).logits.float().contiguous()
        golden[name + ".inv_freq"] = model.model.rotary_emb.inv_freq.float().contiguous()
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for s in range(STEPS):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(s)
        x, y = batch(s)
        opt.zero_grad()
        loss = F.cross_entropy(model(x).logits.reshape(B * T, V), y.reshape(B * T))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
    golden[name + ".losses"] = torch.tensor(losses, dtype=torch.float64)
    print(name, sorted(os.listdir(folder)), ["%.6f" % l for l in losses])
save_file(golden, os.path.join(here, "golden.safetensors"))
