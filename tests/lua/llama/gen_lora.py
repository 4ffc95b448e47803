#!/usr/bin/env python3
"""PEFT's side of the LoRA parity test (tests/lua/llama/test_lora.lua).

On the committed llama_gqa folder (gen_llama.py), a PEFT LoRA adapter
LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
lora_dropout=0.0) with lora_B set to seeded nonzero values (so the adapter
changes the logits from the start) is saved into lora_gqa/ (PEFT's
adapter_config.json and adapter_model.safetensors). lora_golden.safetensors
holds:

  tokens (2, 12)         llama_gqa.tokens of golden.safetensors
  logits (2, 12, V)      the model with the adapter on them
  merged_logits          the same after PEFT's merge_adapter()
  losses (STEPS,)        STEPS AdamW steps on the adapter only (betas 0.9, 0.95,
                         eps 1e-8, weight decay WD, constant lr LR, clipping at
                         CLIP), on the batches of gen_llama.py (tokens.bin in
                         order, B x T), as `models/llama.lua --no-shuffle
                         --val-fraction 0 --lr-schedule constant` reads them

Usage: python3 tests/lua/llama/gen_lora.py          (needs torch, safetensors, transformers, peft)
       python3 tests/lua/llama/gen_lora.py --check ADAPTER_DIR LOGITS_FILE TOL
         loads zorch's adapter folder with peft.PeftModel.from_pretrained on
         llama_gqa and compares its logits with zorch's (models/llama.lua --logits FILE)
"""
import json
import os
import shutil
import sys

import torch
import torch.nn.functional as F
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
base_dir = os.path.join(here, "llama_gqa")
V, B, T, STEPS = 96, 2, 12, 10
LR, WD, CLIP = 1e-2, 0.1, 1.0


def base():
    return AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager")


if len(sys.argv) > 1 and sys.argv[1] == "--check":
    adapter, logits_file, tol = sys.argv[2], sys.argv[3], float(sys.argv[4])
    z = load_file(logits_file)
    model = PeftModel.from_pretrained(base(), adapter)
    model.eval()
    with torch.no_grad():
        got = model(z["tokens"].long()).logits.float()
    rel = ((got - z["logits"]).abs().max() / z["logits"].abs().max()).item()
    print("peft vs zorch: largest logit difference %.3g of the largest logit" % rel)
    sys.exit(0 if rel <= tol else 1)

tokens = torch.from_numpy(__import__("numpy").fromfile(os.path.join(here, "tokens.bin"), dtype="<u2").astype("int64"))
n = tokens.numel()


def batch(m):
    chunk = B * T
    start = (m % ((n - 1) // chunk)) * chunk
    return tokens[start:start + B * T].view(B, T), tokens[start + 1:start + 1 + B * T].view(B, T)


torch.manual_seed(11)
model = get_peft_model(base(), LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"],
                                          lora_dropout=0.0, task_type="CAUSAL_LM"))
with torch.no_grad():
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.copy_(torch.randn_like(p) * 0.2)
folder = os.path.join(here, "lora_gqa")
shutil.rmtree(folder, ignore_errors=True)
model.save_pretrained(folder)
os.remove(os.path.join(folder, "README.md"))  # (PEFT's model card)
cfg_path = os.path.join(folder, "adapter_config.json")
with open(cfg_path) as f:
    cfg = json.load(f)
cfg["base_model_name_or_path"] = "llama_gqa"  # (not this machine's path)
with open(cfg_path, "w") as f:
    json.dump(cfg, f, indent=2, sort_keys=True)
    f.write("\n")

ids = load_file(os.path.join(here, "golden.safetensors"))["llama_gqa.tokens"]
golden = {"tokens": ids.clone()}
model.eval()
with torch.no_grad():
    golden["logits"] = model(ids).logits.float().contiguous()
    model.merge_adapter()
    golden["merged_logits"] = model(ids).logits.float().contiguous()
    model.unmerge_adapter()
model.train()
params = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), eps=1e-8, weight_decay=WD)
losses = []
for s in range(STEPS):
    x, y = batch(s)
    opt.zero_grad()
    loss = F.cross_entropy(model(x).logits.reshape(B * T, V), y.reshape(B * T))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, CLIP)
    opt.step()
    losses.append(loss.item())
golden["losses"] = torch.tensor(losses, dtype=torch.float64)
save_file(golden, os.path.join(here, "lora_golden.safetensors"))
print(sorted(os.listdir(folder)), ["%.6f" % l for l in losses])
