"""PyTorch's gradients at the edges that tests/lua/test_loop.lua checks (std of
a constant row, pow at a base of 0, ties in max over several dims, relu of
NaN, clamp at its bounds, a product read before its operand is written):
python3 tests/golden/gen_edge_grads.py > tests/golden/edge_grads.txt
Each line: a case name, then values (float64; nan as nan)."""
import torch


def rg(v):
    return torch.tensor(v, dtype=torch.float64, requires_grad=True)


def line(name, t):
    print(name, " ".join(repr(float(v)) for v in t.detach().reshape(-1).tolist()))


x = rg([1.0, 1.0, 1.0]); x.std().backward(); line("std_const", x.grad)
x = rg([[1.0, 1, 1], [1, 2, 3]]); x.std(1).sum().backward(); line("std_rows", x.grad)
x = rg([[1.0, 1, 1], [1, 2, 3]]); x.var(1).sum().backward(); line("var_rows", x.grad)
x = rg([0.0, 2.0]); (x ** 0).sum().backward(); line("pow_s0", x.grad)
x = rg([0.0, 2.0]); (x ** 2).sum().backward(); line("pow_s2", x.grad)
a, e = rg([0.0, 0.0]), rg([2.0, 0.0]); (a ** e).sum().backward(); line("pow_a", a.grad); line("pow_e", e.grad)
a, e = rg([0.0, 2.0]), rg([-1.0, 3.0]); (a ** e).sum().backward(); line("pow_neg_a", a.grad); line("pow_neg_e", e.grad)
x = rg([[5.0, 5], [1, 5]]); x.max().backward(); line("max_all", x.grad)
x = rg([[5.0, 5], [1, 5]]); x.min().backward(); line("min_all", x.grad)
x = rg([[[3.0, 3], [1, 2]], [[0, 3], [3, 1]]]); x.amax((0, 2)).sum().backward(); line("amax_02", x.grad)
x = rg([[5.0, 5], [1, 5]]); x.max(1).values.sum().backward(); line("max_dim", x.grad)
line("relu_nan", torch.relu(torch.tensor([float("nan"), -1.0, 2.0])))
x = rg([-1.0, 1.0, 0.5]); torch.clamp(x, -1, 1).sum().backward(); line("clamp_bounds", x.grad)
x = rg([1.0, 2.0, 3.0]); c = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
y = x * 2; s = (y * c).sum()
y[0] = 100; s.backward(); line("mul_read_then_write", x.grad)
x = rg([[1.0, 2, 3], [4, 5, 6], [0, float("-inf"), 2]]); lse = torch.logsumexp(x, 1)
line("logsumexp_rows", lse); lse.sum().backward(); line("logsumexp_grad", x.grad)
line("logsumexp_neginf", torch.logsumexp(torch.tensor([float("-inf")] * 2, dtype=torch.float64), 0).reshape(1))
m = torch.arange(1.0, 13.0, dtype=torch.float64).reshape(3, 4)
line("tril", torch.tril(m)); line("triu_1", torch.triu(m, 1)); line("tril_m1", torch.tril(m, -1))
line("chunk_sizes", torch.tensor([float(len(p)) for p in torch.arange(1, 11).chunk(3)]))
