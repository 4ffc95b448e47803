#!/usr/bin/env python3
"""Transformers' side of tests/lua/generation/test_generate.lua: greedy
generate() of the tiny folders of tests/lua/llama (Llama with GQA, Mistral with
a sliding window shorter than the sequences, Qwen2 with biases) and of a tiny
random GPT-2 saved here (gpt2_tiny/: 2 layers, 4 heads, width 32), each of 8
prompts of different lengths on its own (no padding), up to NEW tokens,
stopping at eos_token_id 2.

golden.safetensors holds, per model NAME and prompt i (1..8): NAME.prompt.i
(the 0-based prompt ids) and NAME.out.i (the generated ids, eos included); and
for the sampler, proc.logits (V,) random logits, proc.history the 0-based ids
so far (proc.n_prompt of them the prompt's) and, per case k of CASES,
proc.out.k: the logits after Transformers' processors in generate()'s order
(repetition penalty, temperature, top-k, top-p, min-p) with OpenAI's presence
and frequency penalties (over the output ids) after the repetition penalty.

Usage: python3 tests/lua/generation/gen_generation.py (needs torch, safetensors, transformers)
"""
import os

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
from transformers.generation.logits_process import (MinPLogitsWarper, RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

here = os.path.dirname(os.path.abspath(__file__))
models = os.path.join(here, "..", "llama")
NAMES = ["llama_gqa", "mistral", "qwen2", "gpt2_tiny"]
LENGTHS = [1, 3, 5, 8, 13, 17, 24, 30]
NEW, EOS = 12, 2

torch.manual_seed(11)
tiny = GPT2LMHeadModel(GPT2Config(vocab_size=96, n_positions=64, n_embd=32, n_layer=2, n_head=4, initializer_range=0.2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=1, eos_token_id=EOS))
tiny.save_pretrained(os.path.join(here, "gpt2_tiny"), safe_serialization=True)
FOLDERS = {name: os.path.join(models, name) for name in NAMES}
FOLDERS["gpt2_tiny"] = os.path.join(here, "gpt2_tiny")

g = torch.Generator().manual_seed(7)
out = {}
for name in NAMES:
    model = AutoModelForCausalLM.from_pretrained(FOLDERS[name], dtype=torch.float32).eval()
    V = model.config.vocab_size
    for i, n in enumerate(LENGTHS, 1):
        prompt = torch.randint(3, V, (n,), generator=g)  # (no eos in the prompt)
        with torch.no_grad():
            ids = model.generate(prompt.view(1, n), attention_mask=torch.ones(1, n, dtype=torch.long), do_sample=False,
                                 max_new_tokens=NEW, eos_token_id=EOS, pad_token_id=0)
        out[f"{name}.prompt.{i}"] = prompt.clone()
        out[f"{name}.out.{i}"] = ids[0, n:].clone()
# the sampler's processors, case by case (the options of test_generate.lua's CASES)
CASES = [dict(repetition_penalty=1.3), dict(presence_penalty=0.5, frequency_penalty=0.25), dict(temperature=0.7),
         dict(top_k=10), dict(top_p=0.8), dict(min_p=0.2),
         dict(repetition_penalty=1.2, frequency_penalty=0.3, temperature=0.8, top_k=40, top_p=0.9, min_p=0.05)]
V, NP = 96, 6
logits = torch.randn(V, generator=g) * 3
history = torch.randint(0, V, (14,), generator=g)
history[10:] = history[:4]  # (repeats in the output)
out["proc.logits"], out["proc.history"], out["proc.n_prompt"] = logits, history, torch.tensor([NP])
for k, c in enumerate(CASES, 1):
    s = logits.view(1, V).clone()
    ids = history.view(1, -1)
    if "repetition_penalty" in c:
        s = RepetitionPenaltyLogitsProcessor(c["repetition_penalty"])(ids, s)
    if "presence_penalty" in c or "frequency_penalty" in c:
        cnt = torch.bincount(history[NP:], minlength=V).float()
        s = s - cnt * c.get("frequency_penalty", 0) - (cnt > 0).float() * c.get("presence_penalty", 0)
    if "temperature" in c:
        s = TemperatureLogitsWarper(c["temperature"])(ids, s)
    if "top_k" in c:
        s = TopKLogitsWarper(c["top_k"])(ids, s)
    if "top_p" in c:
        s = TopPLogitsWarper(c["top_p"])(ids, s)
    if "min_p" in c:
        s = MinPLogitsWarper(c["min_p"])(ids, s)
    out[f"proc.out.{k}"] = s[0].clone()
save_file(out, os.path.join(here, "golden.safetensors"))
print("wrote", len(out), "tensors")
