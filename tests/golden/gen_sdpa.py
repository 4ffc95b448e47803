"""PyTorch's F.scaled_dot_product_attention, for tests/lua/test_sdpa.lua:
    python3 tests/golden/gen_sdpa.py     # writes tests/golden/sdpa.safetensors

Every case is float64 and names its tensors `case.NAME`: case.q, case.k,
case.v (inputs), case.mask (when the case has one), case.c (the weights of
the scalar loss sum(out * c)), case.out, and case.gq, case.gk, case.gv (the
loss's gradients). The options live in the Lua test, beside each case's name."""
import os
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(0)
out = {}


def case(name, qs, ks, vs, mask=None, **kw):
    q, k, v = (torch.randn(s, dtype=torch.float64, requires_grad=True) for s in (qs, ks, vs))
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **kw)
    c = torch.randn(y.shape, dtype=torch.float64)
    (y * c).sum().backward()
    for key, t in (("q", q), ("k", k), ("v", v), ("c", c), ("out", y), ("gq", q.grad), ("gk", k.grad),
                   ("gv", v.grad)):
        out["%s.%s" % (name, key)] = t.detach().clone().contiguous()
    if mask is not None:
        out[name + ".mask"] = mask.clone().contiguous()


case("plain", (2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8))
case("causal", (2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 4), is_causal=True)
case("causal_short_q", (1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4), is_causal=True)  # top-left aligned
case("scale", (2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 8), scale=0.3)
case("three_d", (3, 4, 6), (3, 7, 6), (3, 7, 6))
case("value_dim", (2, 4, 6), (2, 5, 6), (2, 5, 3))
case("broadcast_batch", (2, 3, 4, 8), (1, 3, 5, 8), (1, 3, 5, 8))
case("bool_mask", (2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 4),
     mask=(torch.rand(4, 6) > 0.3) | torch.eye(4, 6, dtype=torch.bool))
case("float_mask", (2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 4), mask=torch.randn(2, 1, 4, 6, dtype=torch.float64))
case("two_d", (4, 5), (6, 5), (6, 2))

save_file(out, os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdpa.safetensors"))
