"""What the generators of text goldens share (tests/lua/golden.lua reads them):
fixed(shape, k) is sin(0.37 k i + k) over the flattened index i = 0, 1, ...
(float64), a formula the Lua test computes too; case() prints
`name out values...` and `name gN values...`, the gradient of input N of
sum(out * c), c = 1 + 0.1 i over the output's flattened index."""
import math
import torch


def fixed(shape, k):
    n = math.prod(shape)
    return torch.sin(torch.arange(n, dtype=torch.float64) * (0.37 * k) + k).reshape(shape)


def emit(name, key, t):
    vals = t.detach().reshape(-1).tolist() if torch.is_tensor(t) else list(t)
    print(name, key, " ".join(repr(float(v)) for v in vals))


def case(name, fn, *inputs):
    """inputs: tensors; those that require grad get a gN line (N their position from 1)."""
    out = fn(*inputs)
    emit(name, "out", out)
    c = 1 + 0.1 * torch.arange(out.numel(), dtype=torch.float64).reshape(out.shape)
    grads = [t for t in inputs if torch.is_tensor(t) and t.requires_grad]
    if grads:
        gs = torch.autograd.grad((out * c).sum(), grads, allow_unused=True)
        for i, t in enumerate(inputs):
            if torch.is_tensor(t) and t.requires_grad:
                g = gs[[id(u) for u in grads].index(id(t))]
                emit(name, "g%d" % (i + 1), g if g is not None else torch.zeros_like(t))


def leaf(t):
    return t.clone().requires_grad_(True)
