#!/usr/bin/env python3
"""Test vectors written by PyTorch and NumPy, read by tests/lua/test_api.lua:
from_torch.safetensors (a float32 weight and a bfloat16 tensor) and small.npy.
Usage: python3 tests/golden/gen_files.py  (needs torch, safetensors, numpy)"""
import os

import numpy as np
import torch
from safetensors.torch import save_file

here = os.path.dirname(os.path.abspath(__file__))
save_file({"layer.weight": torch.arange(6, dtype=torch.float32).reshape(2, 3),
           "half": torch.tensor([1.5, -2.0], dtype=torch.bfloat16)},
          os.path.join(here, "from_torch.safetensors"))
np.save(os.path.join(here, "small.npy"), np.arange(6, dtype=np.float32).reshape(2, 3))
