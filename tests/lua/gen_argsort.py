"""PyTorch's argsort for tests/lua/test_argsort.lua (0-based indices; the test adds 1):
    python3 tests/lua/gen_argsort.py > tests/lua/argsort.txt"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixed_cases import emit, fixed  # noqa: E402

x = fixed((3, 5), 2)
emit("last", "out", torch.argsort(x, dim=-1, stable=True))
emit("dim0_desc", "out", torch.argsort(x, dim=0, descending=True, stable=True))
ties = torch.round(fixed((4, 6), 3) * 2)  # repeated values: the stable order counts
emit("ties", "out", torch.argsort(ties, dim=1, stable=True))
emit("ties_desc", "out", torch.argsort(ties, dim=1, descending=True, stable=True))
