#!/usr/bin/env python3
"""Writes tests/golden/hostile.txt: what PyTorch gives at the edges that
tests/lua/test_hostile_ops.lua checks against it (atan2's gradients at the
origin and at signed zeros; fills of integer tensors with values their dtype
cannot hold, and integer scalars beside small integer tensors).

Each line is `KEY V1..Vk`, the values of a float64 tensor flattened (nan, inf
and -inf as Python writes them). A case KEY writes KEY.a, KEY.b (inputs),
KEY.ga and KEY.gb (the gradients of out.sum()). A fill case writes
`fill.DTYPE.LABEL.OP V..` with the values stored, or `... error` where
PyTorch refuses the value; an arithmetic case `arith.NAME V..`; a
conversion between integer dtypes `cast.FROM_TO V..`; an integer matmul
`matmul.NAME.a|b|out V..` (flattened) and `matmul.NAME.shapes` (a, b, out as
2x3 ...).

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

# The labels and values are mirrored in test_hostile_ops.lua.
FILL_VALUES = {
    "int64": {"p2_63": 2.0**63, "inf": float("inf"), "nan": float("nan"), "m2_63": -2.0**63, "frac": 1.5,
              "p2_62": 2**62 + 1},
    "int32": {"p2_31": 2**31, "m2_31m1": -2**31 - 1, "max": 2**31 - 1, "m1": -1, "big_float": 1e10},
    "uint8": {"p300": 300, "m1": -1, "m255": -255, "m256": -256, "p255": 255, "frac": 2.5, "nan": float("nan"),
              "mfrac": -1.5},
}
DTYPES = {"int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8}


def fill_ops(dt, v):
    def assign():
        t = torch.zeros(2, dtype=dt)
        t[0] = v
        return t
    return {"fill_": lambda: torch.zeros(2, dtype=dt).fill_(v),
            "full": lambda: torch.full((2,), v, dtype=dt),
            "masked_fill": lambda: torch.zeros(2, dtype=dt).masked_fill(torch.tensor([True, False]), v),
            "tensor": lambda: torch.tensor([v], dtype=dt),
            "index": assign}


for dname, values in FILL_VALUES.items():
    for label, v in values.items():
        for op, f in fill_ops(DTYPES[dname], v).items():
            key = "fill.%s.%s.%s" % (dname, label, op)
            try:
                r = f()
                lines.append(key + " " + " ".join(str(int(x)) for x in r.tolist()))
            except RuntimeError:
                lines.append(key + " error")

u8, i32 = torch.tensor([1, 200], dtype=torch.uint8), torch.tensor([1, -7], dtype=torch.int32)
for name, r in (("u8_add_300", u8 + 300), ("u8_sub_1", u8 - 1), ("u8_mul_257", u8 * 257),
                ("i32_add_2_40", i32 + 2**40), ("i32_mul_2_32p3", i32 * (2**32 + 3))):
    assert r.dtype in (torch.uint8, torch.int32)
    lines.append("arith.%s %s" % (name, " ".join(str(int(x)) for x in r.tolist())))

# conversions between integer dtypes: exact, narrowing wraps around
I64 = [300, -1, 70000, 2**40 + 5, 3000000000, 2**63 - 1, -2**63, -129]
I32 = [300, -1, 70000, -2**31, 2**31 - 1, -129]
for name, src, dt in (("i64_u8", I64, torch.uint8), ("i64_i32", I64, torch.int32), ("i32_u8", I32, torch.uint8)):
    t = torch.tensor(src, dtype=torch.int64 if name.startswith("i64") else torch.int32)
    lines.append("cast.%s %s" % (name, " ".join(str(int(x)) for x in t.to(dt).tolist())))

# integer matmul: exact, wrapping around in the operands' dtype
g = torch.Generator().manual_seed(5)
MM = {"i64_2d": (torch.randint(-9, 9, (3, 4), generator=g), torch.randint(-9, 9, (4, 5), generator=g)),
      "i64_wrap": (torch.tensor([[2**40, 3], [1, 2]]), torch.tensor([[2**40, 3], [1, 2]])),
      "i32_batched": (torch.randint(-99, 99, (2, 1, 3, 4), generator=g).int(),
                      torch.randint(-99, 99, (3, 4, 2), generator=g).int()),
      "i32_wrap": (torch.tensor([[2**31 - 1, 5]], dtype=torch.int32), torch.tensor([[2], [1]], dtype=torch.int32)),
      "u8_wrap": (torch.full((2, 3), 200, dtype=torch.uint8), torch.arange(6, dtype=torch.uint8).view(3, 2)),
      "vec_mat": (torch.randint(-9, 9, (4,), generator=g), torch.randint(-9, 9, (4, 3), generator=g)),
      "mat_vec": (torch.randint(-9, 9, (2, 3, 4), generator=g), torch.randint(-9, 9, (4,), generator=g))}
for name, (a, b) in MM.items():
    r = torch.matmul(a, b)
    for key, t in (("a", a), ("b", b), ("out", r)):
        lines.append("matmul.%s.%s %s" % (name, key, " ".join(str(int(x)) for x in t.reshape(-1).tolist())))
    lines.append("matmul.%s.shapes %s" % (name, " ".join("x".join(str(d) for d in t.shape) or "0"
                                                         for t in (a, b, r))))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hostile.txt")
with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
