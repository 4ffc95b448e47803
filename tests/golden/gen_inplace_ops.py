"""PyTorch's values and gradients for the in-place arithmetic that
tests/lua/test_inplace_ops.lua checks (x.add_(y, alpha=), mul_, clamp_, exp_,
sigmoid_ on tensors made by ops, an EMA update under no_grad, lerp_):
python3 tests/golden/gen_inplace_ops.py > tests/golden/inplace_ops.txt
Each line: a case name, then values (float64)."""
import torch


def rg(v):
    return torch.tensor(v, dtype=torch.float64, requires_grad=True)


def line(name, t):
    print(name, " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist()))


a, b = rg([1.0, -2.0, 3.0]), rg([0.5, 4.0, -1.0])
y = a * 1; y.add_(b, alpha=-2.5); y.mul_(a); line("add_mul_value", y)
y.sum().backward(); line("add_mul_ga", a.grad); line("add_mul_gb", b.grad)

a = rg([-2.0, 0.3, 1.5])
y = a * 2; y.clamp_(-1, 2); y.exp_(); line("clamp_exp_value", y)
y.sum().backward(); line("clamp_exp_ga", a.grad)

a = rg([-1.0, 0.0, 2.0])
y = a + 0; y.sigmoid_(); z = y - 0.25; z.div_(a * 0 + 3); line("sigmoid_value", z)
(z * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum().backward(); line("sigmoid_ga", a.grad)

ema = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
p = torch.tensor([0.0, 10.0, -4.0], dtype=torch.float64)
with torch.no_grad():
    for _ in range(3):
        ema.mul_(0.9).add_(p, alpha=0.1)
line("ema", ema)

a, b = rg([1.0, 2.0, 3.0]), rg([3.0, -1.0, 0.0])
y = a * 1; y.lerp_(b, 0.25); line("lerp_value", y)
(y * y).sum().backward(); line("lerp_ga", a.grad); line("lerp_gb", b.grad)

x = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float64)
x.pow_(2).sub_(torch.tensor([1.0, 0.5], dtype=torch.float64)); line("pow_sub_bcast", x)
i = torch.tensor([5, -7, 9])
i.mul_(3).add_(2); line("int_mul_add", i.double())
