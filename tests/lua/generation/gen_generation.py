#!/usr/bin/env python3
"""Transformers' side of tests/lua/generation/test_generate.lua: greedy
generate() of the tiny folders of tests/lua/llama (Llama with GQA, Mistral with
a sliding window shorter than the sequences, Qwen2 with biases), each of 8
prompts of different lengths on its own (no padding), up to NEW tokens,
stopping at eos_token_id 2.

golden.safetensors holds, per model NAME and prompt i (1..8): NAME.prompt.i
(the 0-based prompt ids) and NAME.out.i (the generated ids, eos included).

Usage: python3 tests/lua/generation/gen_generation.py (needs torch, safetensors, transformers)
"""
import os

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
models = os.path.join(here, "..", "llama")
NAMES = ["llama_gqa", "mistral", "qwen2"]
LENGTHS = [1, 3, 5, 8, 13, 17, 24, 30]
NEW, EOS = 12, 2

g = torch.Generator().manual_seed(7)
out = {}
for name in NAMES:
    model = AutoModelForCausalLM.from_pretrained(os.path.join(models, name), dtype=torch.float32).eval()
    V = model.config.vocab_size
    for i, n in enumerate(LENGTHS, 1):
        prompt = torch.randint(3, V, (n,), generator=g)  # (no eos in the prompt)
        with torch.no_grad():
            ids = model.generate(prompt.view(1, n), attention_mask=torch.ones(1, n, dtype=torch.long), do_sample=False,
                                 max_new_tokens=NEW, eos_token_id=EOS, pad_token_id=0)
        out[f"{name}.prompt.{i}"] = prompt.clone()
        out[f"{name}.out.{i}"] = ids[0, n:].clone()
save_file(out, os.path.join(here, "golden.safetensors"))
print("wrote", len(out), "tensors")
