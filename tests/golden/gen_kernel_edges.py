"""PyTorch's values at the kernel edges that tests/lua/test_kernel_edges.lua
checks, each an input that once gave zorch a wrong value, a NaN or a wrong
gradient (tests/fuzz/kernels.py found them):
    python3 tests/golden/gen_kernel_edges.py   # writes tests/golden/kernel_edges.safetensors

Tensors are named CASE.NAME: the inputs (in the dtype the test uses), the
cotangent `c` of the output (the test calls y:backward(c)), the output `y`
and the gradients `g<input>`.

- ln_big_*: layer norm of rows whose values are near 1e20 or 1e30 (squares
  past float32's range). PyTorch's float32 kernel gives 0 or NaN there, so the
  expected values are PyTorch's in float64 on the same inputs.
- div_tiny: a / b with b = 1e-25, whose square is 0 in float32; div_f16:
  float16 divisors whose square overflows or is subnormal. PyTorch's results
  in the inputs' dtype.
- relu_nan_*: relu's gradient at NaN, infinities and zeros.
- ce_ignored_*: cross entropy with label smoothing, where the ignored sample's
  logits hold -inf or NaN.
- attn_nan: fused attention whose scores hold NaN and +inf (rows of NaN, not 0).
"""
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from safetensors.torch import save_file

torch.manual_seed(0)
out = {}


def put(case, **tensors):
    for k, v in tensors.items():
        out["%s.%s" % (case, k)] = v.detach().clone()


def run(case, fn, inputs, compute_dtype=None):
    """Stores inputs, a cotangent, fn's output and the inputs' gradients;
    compute_dtype: run on copies in that dtype (the stored values stay)."""
    leaves = {k: (v.to(compute_dtype) if compute_dtype else v).clone().requires_grad_(v.is_floating_point())
              for k, v in inputs.items()}
    y = fn(**leaves)
    c = torch.randn(y.shape).to(inputs[next(iter(inputs))].dtype)
    y.backward(c.to(y.dtype))
    put(case, c=c, y=y, **inputs)
    put(case, **{"g" + k: v.grad for k, v in leaves.items() if v.grad is not None})


# ---- layer norm with squares past float32's range ------------------------------------------
def ln(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, 1e-5)


for cols in (16, 64, 1000):
    for mag in (1e20, 1e30):
        x = torch.randn(3, cols) * mag
        x[1] = x[1] * 1e-25  # an ordinary row beside them
        w, b = torch.randn(cols), torch.randn(cols)
        run("ln_big_f32_%d_%g" % (cols, mag), ln, {"x": x, "w": w, "b": b}, torch.float64)
for cols in (100, 5000):  # 16-bit rows up to 4096 values are widened on the stack, longer ones are not
    x = (torch.randn(2, cols) * 1e30).bfloat16()
    run("ln_big_bf16_%d" % cols, ln, {"x": x, "w": torch.randn(cols).bfloat16(), "b": torch.randn(cols).bfloat16()},
        torch.float64)

# ---- division's gradient for the divisor -------------------------------------------------------
run("div_tiny", lambda a, b: a / b, {"a": torch.randn(1024) * 1e-38, "b": torch.tensor(1e-25)})
run("div_f16", lambda a, b: a / b,
    {"a": torch.randn(8).half(), "b": torch.tensor([300, -500, 0.0073, -0.005, 1000, 2, 0.5, 255]).half()})
run("div_bf16", lambda a, b: a / b,
    {"a": (torch.randn(4, 33) * 1e-30).bfloat16(), "b": (torch.rand(33) * 1e-20 + 1e-20).bfloat16()})

# ---- relu's gradient at NaN --------------------------------------------------------------------
v = [float("nan"), -1.0, 2.0, 0.0, -0.0, float("inf"), float("-inf")] * 5
for dt in (torch.float32, torch.bfloat16, torch.float16):
    run("relu_nan_" + str(dt).split(".")[1], torch.relu, {"x": torch.tensor(v).to(dt)})

# ---- cross entropy with label smoothing, an ignored sample holding -inf or NaN ------------------
logits = torch.randn(4, 5)
logits[1, 2] = float("-inf")
logits[3, 0] = float("nan")
targets = torch.tensor([0, 2, 4, 1])  # samples 2 and 4 (1-based) are ignored (class 3, 0-based 2)
logits_inf = logits.clone()
logits_inf[3, 0] = float("-inf")
for red in ("none", "mean", "sum"):
    for name, lg in (("inf", logits_inf), ("nan", logits)):
        t = targets.clone()
        t[3] = 2
        run("ce_ignored_%s_%s" % (name, red),
            lambda x: F.cross_entropy(x, t, reduction=red, ignore_index=2, label_smoothing=0.1), {"x": lg})
        out["ce_ignored_%s_%s.t" % (name, red)] = t + 1  # 1-based for zorch

# ---- attention: a NaN or infinite score makes its row NaN -----------------------------------
q, k, v = torch.randn(1, 2, 5, 8), torch.randn(1, 2, 7, 8), torch.randn(1, 2, 7, 8)
q[0, 0, 1, 3] = float("nan")  # one query of head 1: every score NaN
k[0, 1, 4] = float("inf")  # one key of head 2: scores of +-inf
q[0, 1, 2] = q[0, 1, 2].abs()  # (this query's score on it is +inf)
# PyTorch's math backend (its fused CPU kernel gives 0, not NaN, for a query whose scores are all NaN)
with sdpa_kernel(SDPBackend.MATH):
    run("attn_nan", F.scaled_dot_product_attention, {"query": q, "key": k, "value": v})
q[0, 0, 1, 3] = 0.5
run("attn_inf", F.scaled_dot_product_attention, {"query": q, "key": k, "value": v})  # head 1 only

save_file(out, os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel_edges.safetensors"))
