"""PyTorch's cross_entropy with class weights and label smoothing, for
tests/lua/test_loop.lua: python3 tests/golden/gen_ce_options.py > tests/golden/ce_options.txt
Each line: case, what (loss or grad), then the values (float64)."""
import math
import torch
import torch.nn.functional as F

N, C = 5, 4
logits = torch.tensor([[math.sin(0.7 * i + j) * 2 for j in range(C)] for i in range(N)], dtype=torch.float64)
targets = torch.tensor([0, 3, 1, 2, 3])  # 0-based here; the Lua test adds 1
ignore = 2  # (class 3 in Lua's 1-based count)
weight = torch.tensor([0.5, 2.0, 1.0, 1.5], dtype=torch.float64)

cases = {
    "w": dict(weight=weight),
    "s": dict(label_smoothing=0.1),
    "ws": dict(weight=weight, label_smoothing=0.2),
    "wsi": dict(weight=weight, label_smoothing=0.2, ignore_index=ignore),
    "si": dict(label_smoothing=0.3, ignore_index=ignore),
}
for name, kw in cases.items():
    for red in ("mean", "sum", "none"):
        x = logits.clone().requires_grad_()
        loss = F.cross_entropy(x, targets, reduction=red, **kw)
        vals = loss.reshape(-1).tolist()
        print(name, red, "loss", " ".join(repr(v) for v in vals))
        loss.sum().backward()
        print(name, red, "grad", " ".join(repr(v) for v in x.grad.reshape(-1).tolist()))
x = logits[0].clone().requires_grad_()
loss = F.cross_entropy(x, targets[0], weight=weight, label_smoothing=0.1)
print("single", "mean", "loss", repr(loss.item()))
