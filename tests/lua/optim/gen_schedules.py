"""PyTorch's RMSprop, Adagrad, CosineAnnealingLR and LinearLR, for
tests/lua/optim/test_schedules.lua:
    python3 tests/lua/optim/gen_schedules.py > tests/lua/optim/schedules.txt
Lines: `case step values...` (the parameters after each step, float64), and
`case lrs values...` (the lr at steps 0..9)."""
import torch

W = torch.tensor([1.0, 3.0, 0.5], dtype=torch.float64)


def run(name, cls, **kw):
    p = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    opt = cls([p], **kw)
    for step in range(1, 6):
        opt.zero_grad()
        ((p * p * W).sum() + p.sum()).backward()
        opt.step()
        print(name, step, " ".join(repr(v) for v in p.detach().tolist()))


run("rmsprop", torch.optim.RMSprop)
run("rmsprop_mcw", torch.optim.RMSprop, lr=0.05, momentum=0.9, centered=True, weight_decay=0.1, alpha=0.9)
run("adagrad", torch.optim.Adagrad)
run("adagrad_dw", torch.optim.Adagrad, lr=0.1, lr_decay=0.05, weight_decay=0.2, initial_accumulator_value=0.5)


def lrs(name, make):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make(opt)
    out = []
    for _ in range(10):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    print(name, "lrs", " ".join(repr(v) for v in out))


lrs("cosine", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=0.01))
lrs("linear", lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=4))
