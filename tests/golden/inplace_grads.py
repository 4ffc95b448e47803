"""PyTorch's gradients for the in-place writes that tests/lua/test_silent.lua
checks ("in-place writes and autograd"): run `python3 tests/golden/inplace_grads.py`
and compare with the values written there."""
import torch


def show(label, t):
    print(f"{label}: {t.tolist()}")


x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
y = x * 2
y[1] = 5
y.sum().backward()
show("y[2] = 5 after y = x * 2, x.grad", x.grad)

x.grad = None
y2 = x * 2
y2.fill_(5)
y2.sum().backward()
show("fill_ of all of y, x.grad", x.grad)

x.grad = None
w = torch.tensor([1.0, 1.0, 1.0], requires_grad=True)
y3 = x * 2
y3.copy_(w * 3)
(y3 * y3).sum().backward()
show("copy_ of w * 3, w.grad", w.grad)
show("copy_ of w * 3, x.grad", x.grad)

x.grad, w.grad = None, None
out = torch.zeros(2, 3)
out[0] = x * 2
out[1] = x.pow(2)
(out * torch.tensor([[1.0, 2, 3], [4, 5, 6]])).sum().backward()
show("rows assigned, x.grad", x.grad)

x.grad = None
b = torch.zeros(2, 3)
b[0] = 7
b[-1] = w
b.sum().backward()
show("negative index, w.grad", w.grad)

w.grad = None
y4 = x * 2
early = y4 * 3
y4[0] = 0
early.sum().backward()
show("reader from before the write, x.grad", x.grad)
