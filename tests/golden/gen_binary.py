#!/usr/bin/env python3
"""Writes tests/golden/binary.txt: what PyTorch gives for the two-input
elementwise ops and the integer and bool promotion rules that
tests/lua/test_binary.lua checks (edges: NaN, ties, infinities, signed zeros,
negative operands, integer dtypes, numbers on either side of // and %).

Each line is `KEY DTYPE NDIM D1..Dn V1..Vk` (nan, inf and -inf as Python
writes them; bool as 0 and 1). A case KEY writes KEY.a, KEY.b (inputs),
KEY.out and, for float cases, KEY.gout (the gradient fed to backward) and
KEY.ga, KEY.gb (the gradients PyTorch computed).

Usage: python3 tests/golden/gen_binary.py  (needs torch)
"""
import os

import torch

NAMES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
         torch.int32: "int32", torch.uint8: "uint8", torch.bool: "bool"}
lines = []
nan, inf = float("nan"), float("inf")


def emit(key, t):
    t = t.detach()
    vals = t.reshape(-1).tolist()
    if t.dtype.is_floating_point:
        vs = " ".join(repr(float(v)) for v in vals)
    else:
        vs = " ".join(str(int(v)) for v in vals)
    lines.append(f"{key} {NAMES[t.dtype]} {t.dim()} {' '.join(map(str, t.shape))} {vs}".strip())


def f64(v):
    return torch.tensor(v, dtype=torch.float64)


def grad_case(key, fn, *inputs):
    """fn of float64 inputs; the output, and the inputs' gradients for a fixed gout."""
    leaves = [x.clone().requires_grad_(True) for x in inputs]
    for name, x in zip("abw", inputs):
        emit(f"{key}.{name}", x)
    out = fn(*leaves)
    emit(f"{key}.out", out)
    if not out.requires_grad:
        return
    g = torch.linspace(0.5, 1.5, out.numel(), dtype=torch.float64).reshape(out.shape)
    emit(f"{key}.gout", g)
    out.backward(g)
    for name, x in zip("abw", leaves):
        emit(f"{key}.g{name}", x.grad if x.grad is not None else torch.zeros_like(x))


def value_case(key, fn, *inputs):
    for name, x in zip("abw", inputs):
        emit(f"{key}.{name}", x)
    emit(f"{key}.out", fn(*inputs))


# ---- float ops: broadcasting (2, 4) with (4,), ties, signs, zeros --------------------------
A = f64([[1.5, -2.5, 3.0, -0.0], [-7.0, 2.0, -4.0, 5.5]])
B = f64([2.0, -1.5, 3.0, 0.0])
NA = f64([nan, 1.0, nan, 2.0, -inf, inf])  # NaN on either side, ties, infinities
NB = f64([1.0, nan, nan, 2.0, -inf, 3.0])
for name in ["maximum", "minimum", "fmax", "fmin"]:
    fn = getattr(torch, name)
    grad_case(name, fn, A, B)
    grad_case(name + "_nan", fn, NA, NB)
for name in ["atan2", "hypot", "logaddexp", "copysign"]:
    grad_case(name, getattr(torch, name), A, B + f64([0, 0, 0, 0.5]))
grad_case("atan2_edges", torch.atan2, f64([0.0, -0.0, 1.0, -1.0, inf]), f64([-1.0, -1.0, 0.0, -0.0, inf]))
grad_case("logaddexp_inf", torch.logaddexp, f64([inf, -inf, -inf, 1.0, 1000.0]), f64([inf, -inf, 1.0, -inf, 1000.0]))
grad_case("copysign_zero", torch.copysign, f64([0.0, 2.0, -3.0, 1.0]), f64([-1.0, -0.0, 0.0, nan]))
# fmod and remainder: every sign pair, a zero dividend, a divisor of 0 (NaN), exact multiples
DA = f64([[5.0, -5.0, 5.0, -5.0, 0.0, 6.0], [7.5, -7.5, 1.0, -1.0, 3.0, -6.0]])
DB = f64([3.0, 3.0, -3.0, -3.0, -2.0, 3.0])
for name in ["fmod", "remainder", "floor_divide"]:
    # floor_divide has no derivative in PyTorch (its backward raises)
    (value_case if name == "floor_divide" else grad_case)(name, getattr(torch, name), DA, DB)
    value_case(name + "_edges", getattr(torch, name), f64([1.0, -1.0, 0.0, 5.0, -0.0, 1.0, inf]),
               f64([0.1, 0.0, -3.0, 0.0, 2.0, inf, 2.0]))
value_case("floor_divide_f32", torch.floor_divide, torch.tensor([1.0, 7.0, -7.0, 0.3]), torch.tensor([0.1, 2.0, 2.0, 0.1]))

# ---- integer dtypes: negative operands, the most negative value over -1 -------------------
IA = [7, -7, 7, -7, 0, 6, -6, 1]
IB = [2, 2, -2, -2, 3, -4, 4, -1]
for dt in [torch.int64, torch.int32]:
    a, b = torch.tensor(IA, dtype=dt), torch.tensor(IB, dtype=dt)
    for name in ["maximum", "minimum", "fmax", "fmin", "fmod", "remainder", "floor_divide"]:
        value_case(f"{name}_{NAMES[dt]}", getattr(torch, name), a, b)
    lo = torch.iinfo(dt).min
    for name in ["fmod", "remainder", "floor_divide"]:
        value_case(f"{name}_{NAMES[dt]}_min", getattr(torch, name), torch.tensor([lo, lo, 5], dtype=dt),
                   torch.tensor([-1, 1, -1], dtype=dt))
ua, ub = torch.tensor([7, 200, 0, 255], dtype=torch.uint8), torch.tensor([2, 7, 3, 16], dtype=torch.uint8)
for name in ["maximum", "minimum", "fmod", "remainder", "floor_divide"]:
    value_case(f"{name}_uint8", getattr(torch, name), ua, ub)

# ---- // and % with a number on either side (Python's operators on tensors) ----------------
I = torch.tensor([7, -7, 3, -3, 0])
F = f64([7.5, -7.5, 3.0, -3.0, 0.0])
value_case("idiv_int_2", lambda t: t // 2, I)
value_case("idiv_int_m2", lambda t: t // -2, I)
value_case("idiv_7_int", lambda t: 7 // t, torch.tensor([2, -2, 3, -3, 7]))
value_case("idiv_int_2.5", lambda t: t // 2.5, I)
value_case("idiv_f_2", lambda t: t // 2, F)
value_case("idiv_m7_f", lambda t: -7 // t, f64([2.0, -2.0, 0.5, -0.5, 0.0]))
value_case("mod_int_2", lambda t: t % 2, I)
value_case("mod_int_m2", lambda t: t % -2, I)
value_case("mod_7_int", lambda t: 7 % t, torch.tensor([2, -2, 3, -3, 7]))
value_case("mod_7.5_int", lambda t: 7.5 % t, torch.tensor([2, -2, 3, -3, 7]))
value_case("mod_f_2", lambda t: t % 2, F)
value_case("mod_f_m2", lambda t: t % -2, F)
value_case("mod_m7_f", lambda t: -7 % t, f64([2.0, -2.0, 0.5, -0.5, 0.0]))
value_case("idiv_tt", lambda a, b: a // b, I, torch.tensor([[2], [-3]]))
value_case("mod_tt", lambda a, b: a % b, I, torch.tensor([[2], [-3]]))

# ---- promotion: integer powers, bools ----------------------------------------------------
P = torch.tensor([3, -2, 0, 1, -1])
value_case("pow_int_int", lambda a, b: a ** b, P, torch.tensor([2, 3, 0, -1, -3]))
value_case("pow_int_2", lambda a: a ** 2, P)
value_case("pow_int_40", lambda a: a ** 40, P)
value_case("pow_2_int", lambda a: 2 ** a, torch.tensor([0, 1, 10, 62, 63, -1]))
value_case("pow_int32_3", lambda a: a ** 3, P.int())
value_case("pow_uint8_3", lambda a: a ** 3, torch.tensor([2, 7, 200], dtype=torch.uint8))
value_case("pow_int_2.5", lambda a: a ** 2.5, torch.tensor([4, 9]))
M1, M2 = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
value_case("bool_add", lambda a, b: a + b, M1, M2)
value_case("bool_mul", lambda a, b: a * b, M1, M2)
value_case("bool_maximum", torch.maximum, M1, M2)
value_case("bool_minimum", torch.minimum, M1, M2)
value_case("bool_div", lambda a, b: a / b, M1, M2)
value_case("bool_add_int", lambda a, b: a + b, M1, torch.tensor([1, 2, 3, 4]))
value_case("bool_add_1", lambda a: a + 1, M1)
value_case("bool_mul_3", lambda a: a * 3, M1)
value_case("bool_pow_2", lambda a: a ** 2, M1)
value_case("bool_clamp", lambda a: a.clamp(0, 1), M1)
# a float number with an integral value (2.0, a float in Python as in Lua) promotes
value_case("int_add_2.0", lambda a: a + 2.0, P)
value_case("int_mul_1.0", lambda a: a * 1.0, P)
value_case("int_pow_2.0", lambda a: a ** 2.0, P)
value_case("2.0_sub_int", lambda a: 2.0 - a, P)
value_case("bool_add_1.0", lambda a: a + 1.0, M1)

# ---- the composed ops -------------------------------------------------------------------
LA, LB = f64([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]]), f64([3.0, 5.0, -9.0])
grad_case("lerp_0.25", lambda a, b: torch.lerp(a, b, 0.25), LA, LB)
grad_case("lerp_0.75", lambda a, b: torch.lerp(a, b, 0.75), LA, LB)
grad_case("lerp_1", lambda a, b: torch.lerp(a, b, 1.0), LA, LB)
grad_case("lerp_w", torch.lerp, LA, LB, f64([[0.2, 0.7, 1.0], [-0.6, 0.5, 0.49]]))
grad_case("addcmul", lambda t, a, b: torch.addcmul(t, a, b, value=-1.5), LB, LA, f64([[2.0], [-0.5]]))
grad_case("addcdiv", lambda t, a, b: torch.addcdiv(t, a, b, value=0.5), LB, LA, f64([[2.0], [-0.5]]))
grad_case("clamp_min", lambda a: torch.clamp_min(a, 0.5), f64([-1.0, 0.5, 2.0, nan]))
grad_case("clamp_max", lambda a: torch.clamp_max(a, 0.5), f64([-1.0, 0.5, 2.0, nan]))
value_case("clamp_min_int", lambda a: torch.clamp_min(a, 2), torch.tensor([-5, 2, 9]))
value_case("clamp_max_int", lambda a: torch.clamp_max(a, 2), torch.tensor([-5, 2, 9]))
CA = f64([1.0, 1.0, nan, nan, inf, inf, -inf, 0.0, 1e-9, 100.0])
CB = f64([1.0 + 1e-6, 1.1, nan, 1.0, inf, -inf, -inf, 1e-9, 0.0, 100.001])
value_case("isclose", torch.isclose, CA, CB)
value_case("isclose_nan", lambda a, b: torch.isclose(a, b, equal_nan=True), CA, CB)
value_case("isclose_tol", lambda a, b: torch.isclose(a, b, rtol=0.2, atol=0.0), CA, CB)
value_case("isclose_atol", lambda a, b: torch.isclose(a, b, rtol=0.0, atol=0.2), CA, CB)
value_case("isclose_int", torch.isclose, torch.tensor([1, 2, 1000000]), torch.tensor([1, 3, 1000005]))
lines.append("allclose_exact %d" % torch.allclose(f64([1.0, 2.0]), f64([1.0, 2.0])))
lines.append("allclose_near %d" % torch.allclose(f64([1.0, 2.0]), f64([1.0 + 1e-7, 2.0])))
lines.append("allclose_far %d" % torch.allclose(f64([1.0, 2.0]), f64([1.0 + 1e-3, 2.0])))
lines.append("allclose_nan %d" % torch.allclose(f64([nan]), f64([nan])))
lines.append("allclose_nan_eq %d" % torch.allclose(f64([nan]), f64([nan]), equal_nan=True))
lines.append("equal_dtypes %d" % torch.equal(torch.tensor([1, 2]), f64([1.0, 2.0])))
lines.append("equal_shapes %d" % torch.equal(torch.tensor([1, 2]), torch.tensor([[1, 2]])))
lines.append("equal_nan %d" % torch.equal(f64([nan]), f64([nan])))
lines.append("equal_values %d" % torch.equal(f64([1.0, 2.0]), f64([1.0, 2.5])))

path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "binary.txt")
with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
print(f"wrote {path}: {len(lines)} lines")
