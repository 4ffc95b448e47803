#!/usr/bin/env python3
"""Loads a folder written by `models/llama.lua --save-hf DIR` with Transformers'
AutoModelForCausalLM.from_pretrained and compares its logits with zorch's,
written by the same run's `--logits FILE` (the tokens, from 0, and the logits).

Usage: python3 tests/lua/llama/check_hf.py DIR FILE [tolerance]  (default 1e-4)
Prints the largest difference relative to the largest logit; exits 1 above the tolerance.
"""
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

folder, path = sys.argv[1], sys.argv[2]
tol = float(sys.argv[3]) if len(sys.argv) > 3 else 1e-4
model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager")
model.eval()
z = load_file(path)
with torch.no_grad():
    logits = model(z["tokens"]).logits
want = z["logits"]
rel = ((logits - want).abs().max() / want.abs().max()).item()
print("transformers vs zorch logits %s (%s): max relative diff %.3g" % (tuple(want.shape), type(model).__name__, rel))
sys.exit(0 if rel <= tol else 1)
