#!/usr/bin/env python3
"""Loads a folder written by `models/gpt2.lua --save-hf DIR` with Transformers'
GPT2LMHeadModel.from_pretrained and compares its logits with zorch's, written by
the same run's `--logits FILE` (the tokens and zorch's logits on them).

Usage: python3 tests/golden/check_hf.py DIR FILE [tolerance]  (default 1e-4)
Prints the largest absolute and relative differences; exits 1 above the tolerance
(relative to max(|logit|, 1)).
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import GPT2LMHeadModel

folder, path = sys.argv[1], sys.argv[2]
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
model = GPT2LMHeadModel.from_pretrained(folder)
model.eval()
z = load_file(path)
with torch.no_grad():
    logits = model(z["tokens"]).logits
want = z["logits"]
diff = (logits - want).abs()
rel = (diff / want.abs().clamp(min=1.0)).max().item()
print("transformers vs zorch logits %s: max abs diff %.3g, max rel diff %.3g" % (tuple(want.shape), diff.max().item(), rel))
sys.exit(0 if rel <= tol else 1)
