#!/usr/bin/env python3
"""Loads a safetensors file written by zorch with Python's safetensors and
checks the values tests/lua/test_api.lua put in it. Exit 0 when they match."""
import sys

import torch
from safetensors.torch import load_file

d = load_file(sys.argv[1])
ok = (torch.equal(d["w"], torch.arange(6, dtype=torch.float32).reshape(2, 3))
      and d["h"].dtype == torch.bfloat16 and d["h"].tolist() == [1.5, -2.0]
      and d["i"].dtype == torch.int64 and d["i"].tolist() == [7, -8])
sys.exit(0 if ok else 1)
