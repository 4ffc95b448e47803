#!/usr/bin/env python3
"""Writes tests/golden/hostile.txt: what PyTorch gives at the edges that
tests/lua/test_hostile_ops.lua checks against it (atan2's gradients at the
origin and at signed zeros).

Each line is `KEY V1..Vk`, the values of a float64 tensor flattened (nan, inf
and -inf as Python writes them). A case KEY writes KEY.a, KEY.b (inputs),
KEY.ga and KEY.gb (the gradients of out.sum()).

Usage: python3 tests/golden/gen_hostile.py  (needs torch)
"""
import os

import torch

lines = []


def emit(key, t):
    lines.append(key + " " + " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist()))


def atan2_case(key, a, b):
    a = torch.tensor(a, dtype=torch.float64, requires_grad=True)
    b = torch.tensor(b, dtype=torch.float64, requires_grad=True)
    torch.atan2(a, b).sum().backward()
    emit(key + ".a", a)
    emit(key + ".b", b)
    emit(key + ".ga", a.grad)
    emit(key + ".gb", b.grad)


atan2_case("atan2_origin", [0.0, -0.0, 0.0, -0.0, 1.0, 1e-200], [0.0, 0.0, -0.0, -0.0, 0.0, 1e-200])

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile.txt")
with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
