#!/usr/bin/env python3
"""Writes tests/golden/unary.lua, read by tests/lua/test_unary.lua: PyTorch's
results for the unary ops and activations called from Lua with their default
parameters, on float32 inputs (values and the gradient of a sum), on integer
and bool inputs (the result's dtype and values, or that PyTorch refuses), and
the nn modules' defaults.

Usage: python3 tests/golden/gen_unary.py  (needs torch)
"""
import math
import os

import torch
import torch.nn.functional as F

torch.manual_seed(20)
SPECIAL = [-float("inf"), -6.0, -3.0, -2.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.5, 3.0, 6.0,
           float("inf"), float("nan")]
X = torch.cat([torch.tensor(SPECIAL), torch.randn(17) * 2])
INTS = torch.tensor([-7, -2, -1, 0, 1, 2, 3, 9])
BOOLS = torch.tensor([True, False, True])

T = torch
FNS = {
    "sign": T.sign, "floor": T.floor, "ceil": T.ceil, "round": T.round, "trunc": T.trunc,
    "frac": T.frac, "reciprocal": T.reciprocal, "rsqrt": T.rsqrt, "square": T.square,
    "log1p": T.log1p, "expm1": T.expm1, "log2": T.log2, "log10": T.log10, "exp2": T.exp2,
    "erf": T.erf, "erfc": T.erfc, "asin": T.asin, "acos": T.acos, "atan": T.atan,
    "sinh": T.sinh, "cosh": T.cosh, "tan": T.tan, "asinh": T.asinh, "acosh": T.acosh,
    "atanh": T.atanh, "leaky_relu": F.leaky_relu, "elu": F.elu, "selu": F.selu,
    "celu": F.celu, "softplus": F.softplus, "hardtanh": F.hardtanh, "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid, "hardswish": F.hardswish, "mish": F.mish,
    "logsigmoid": F.logsigmoid, "softsign": F.softsign, "tanhshrink": F.tanhshrink,
    "isnan": T.isnan, "isinf": T.isinf, "isposinf": T.isposinf, "isneginf": T.isneginf,
    "isfinite": T.isfinite, "nan_to_num": T.nan_to_num,
}
MODULES = {  # nn module name: the function its default forward matches
    "LeakyReLU": torch.nn.LeakyReLU(), "ELU": torch.nn.ELU(), "SELU": torch.nn.SELU(),
    "CELU": torch.nn.CELU(), "Softplus": torch.nn.Softplus(), "Hardtanh": torch.nn.Hardtanh(),
    "ReLU6": torch.nn.ReLU6(), "Hardsigmoid": torch.nn.Hardsigmoid(),
    "Hardswish": torch.nn.Hardswish(), "Mish": torch.nn.Mish(),
    "LogSigmoid": torch.nn.LogSigmoid(), "Softsign": torch.nn.Softsign(),
    "Tanhshrink": torch.nn.Tanhshrink(), "Identity": torch.nn.Identity(),
}
DTYPES = {torch.float32: "float32", torch.int64: "int64", torch.bool: "bool",
          torch.bfloat16: "bfloat16", torch.float16: "float16"}


def num(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        return "0/0"
    if math.isinf(v):
        return "math.huge" if v > 0 else "-math.huge"
    return repr(float(v))


def vec(t):
    return "{" + ", ".join(num(v) for v in t.detach().reshape(-1).tolist()) + "}"


def result(f, x):
    """{dtype =, values =} of f(x), or {error = true}."""
    try:
        y = f(x)
    except Exception:
        return "{error = true}"
    return "{dtype = %r, values = %s}" % (DTYPES[y.dtype], vec(y))


out = ["-- written by tests/golden/gen_unary.py from PyTorch " + torch.__version__ + "; do not edit",
       "return {", "  x = " + vec(X) + ",", "  ints = " + vec(INTS) + ",",
       "  bools = " + vec(BOOLS) + ",", "  ops = {"]
for name, f in FNS.items():
    x = X.clone().requires_grad_(True)
    y = f(x)
    grad = "nil"
    if y.dtype.is_floating_point:
        y.sum().backward()
        grad = vec(x.grad)
    out.append("    %s = {out = %s, grad = %s, int64 = %s, bool = %s}," %
               (name, vec(y), grad, result(f, INTS), result(f, BOOLS)))
out.append("  },")
out.append("  modules = {")
for name, m in MODULES.items():
    x = X.clone().requires_grad_(True)
    y = m(x)
    y.sum().backward()
    out.append("    %s = {out = %s, grad = %s}," % (name, vec(y), vec(x.grad)))
out.append("  },")
out.append("  nan_to_num = {")
NT = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.0])
for dt in (torch.bfloat16, torch.float16, torch.float32):
    out.append("    %s = %s," % (DTYPES[dt], vec(torch.nan_to_num(NT.to(dt)).float())))
out.append("    given = %s," % vec(torch.nan_to_num(NT, 1.5, 100.0, -7.0)))
out.append("  },")
out.append("}")
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "unary.lua")
with open(path, "w") as fh:
    fh.write("\n".join(out) + "\n")
print("wrote", path)
