"""PyTorch's values and gradients after in-place writes into views, for
tests/lua/test_view_writes_torch.lua:
    python3 tests/lua/gen_view_writes.py > tests/lua/view_writes.txt

Each case is a program over a base tensor, run here in PyTorch and replayed
by the Lua test in zorch: chains of views (narrow, select, transpose, view,
indexing, permute, diagonal, unsqueeze) of the base or of earlier views, and
in-place writes into them (copy_, add_, mul_, fill_, zero_, masked_fill_,
x[i] = v, x[a:b] = v) with values that are leaves, constants or computed,
full or broadcast. Some views are read before a later write (kept by an op
that may save them), some are made under no_grad. The loss is
sum(term * c) over the base, the views marked as terms (their values at the
end) and the reads, c = 1 + 0.1 i over each term's flattened index.

Lines (tests/lua/golden.lua reads them): `caseN base kind dtype ndim shape...`,
`caseN prog tokens...` (the steps below, in order), and either
`caseN raise K` (PyTorch raised at step K, 0 for the backward) or
`caseN out loss` and `caseN gKEY values...` for each leaf: KEY 1 is the
base's source x, any other the seed of a value's leaf. Values are
fixed(shape, seed), as in fixed_cases.py; indices and dims are 0-based."""
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixed_cases import emit, fixed  # noqa: E402

# steps: VIEW new parent nograd op a b c | WRITE vid op value seed bcast p q | READ vid kind seed | TERM vid
VIEW, WRITE, READ, TERM = 1, 2, 3, 4
NARROW, SELECT, TRANSPOSE, FLAT, INDEX, VIEW2, PERMUTE, DIAGONAL, UNSQUEEZE = range(1, 10)
COPY, ADD, MUL, FILL, ZERO, MASKED, SETITEM, SETRANGE = range(1, 9)
SCALAR, LEAF, CONST, COMPUTED = range(4)   # the value written
B_CONST, B_HIST, B_LEAF, B_EXP = range(4)  # the base: a constant, x * 1.5, the leaf x, x.exp()
DTYPES = {64: torch.float64, 32: torch.float32}


def view_op(t, op, a, b, c):
    if op == NARROW:
        return t.narrow(a, b, c)
    if op == SELECT:
        return t.select(a, b)
    if op == TRANSPOSE:
        return t.transpose(a, b)
    if op == FLAT:
        return t.view(-1)
    if op == INDEX:
        return t[a]
    if op == VIEW2:
        return t.view(a, -1)
    if op == PERMUTE:
        return t.permute(a, b, c)
    if op == DIAGONAL:
        return torch.diagonal(t, a, b, c)
    return t.unsqueeze(a)


class Case:
    def __init__(self, kind, dtype, shape):
        self.kind, self.dtype, self.shape = kind, dtype, shape
        self.tokens, self.leaves, self.terms, self.raised = [], {}, [], None
        x = fixed(shape, 1).to(DTYPES[dtype]).clone()  # not a view of the formula's result
        if kind != B_CONST:
            x.requires_grad_(True)
            self.leaves[1] = x
        self.views = {0: x if kind in (B_CONST, B_LEAF) else x * 1.5 if kind == B_HIST else x.exp()}
        self.steps = 0

    def value(self, kind, seed, shape):
        v = fixed(shape, seed).to(DTYPES[self.dtype])
        if kind in (LEAF, COMPUTED):
            v.requires_grad_(True)
            self.leaves[seed] = v
        return v * 2 - 1 if kind == COMPUTED else v

    def step(self, tokens, run):
        """Runs one step; False (nothing recorded) when its view is invalid."""
        if self.raised is not None:
            return True
        try:
            run()
        except RuntimeError:
            if tokens[0] == VIEW:
                return False
            self.raised = self.steps + 1
        self.steps += 1
        self.tokens += tokens
        return True

    def view(self, parent, op, a=0, b=0, c=0, nograd=False):
        new = max(self.views) + 1

        def run():
            with torch.set_grad_enabled(not nograd):
                self.views[new] = view_op(self.views[parent], op, a, b, c)
        return new if self.step([VIEW, new, parent, int(nograd), op, a, b, c], run) else None

    def write(self, vid, op, value=SCALAR, seed=0, bcast=0, p=0, q=0):
        def run():
            t = self.views[vid]
            if op in (SETITEM, SETRANGE):
                rest = list(t.shape[1:])
                shape = (rest[-1:] if bcast else rest) if op == SETITEM else [q - p] + rest
                if bcast and op == SETRANGE:
                    shape = rest[-1:]
                v = self.value(value, seed, shape)
                if op == SETITEM:
                    t[p] = v
                else:
                    t[p:q] = v
            elif op in (COPY, ADD, MUL):
                v = self.value(value, seed, list(t.shape[-1:]) if bcast else list(t.shape))
                (t.copy_ if op == COPY else t.add_ if op == ADD else t.mul_)(v)
            elif op == FILL:
                t.fill_(p)
            elif op == ZERO:
                t.zero_()
            else:
                t.masked_fill_(fixed(list(t.shape), seed) > 0, p)
        self.step([WRITE, vid, op, value, seed, bcast, p, q], run)

    def read(self, vid, kind, seed=0):
        def run():
            t = self.views[vid]
            self.terms.append(t * 2 if kind == 0 else t * self.value(LEAF, seed, list(t.shape)) if kind == 1 else t.exp())
        self.step([READ, vid, kind, seed], run)

    def term(self, vid):
        self.tokens += [TERM, vid]

    def emit(self, name):
        emit(name, "base", [self.kind, self.dtype, len(self.shape)] + list(self.shape))
        emit(name, "prog", self.tokens)
        if self.raised is not None:
            emit(name, "raise", [self.raised])
            return
        terms = [self.views[0]] + [self.views[v] for v in self.tokens_terms()] + self.terms
        keys = sorted(self.leaves)
        try:  # the loss and its backward are step 0
            loss = sum((t * (1 + 0.1 * torch.arange(t.numel(), dtype=t.dtype).reshape(t.shape))).sum() for t in terms)
            gs = torch.autograd.grad(loss, [self.leaves[k] for k in keys], allow_unused=True)
        except RuntimeError:
            emit(name, "raise", [0])
            return
        emit(name, "out", [loss.detach()])
        for k, g in zip(keys, gs):
            emit(name, "g%d" % k, g if g is not None else torch.zeros_like(self.leaves[k]))

    def tokens_terms(self):
        out, i = [], 0
        sizes = {VIEW: 8, WRITE: 8, READ: 4, TERM: 2}
        while i < len(self.tokens):
            if self.tokens[i] == TERM:
                out.append(self.tokens[i + 1])
            i += sizes[self.tokens[i]]
        return out


def random_view(c, rng, nograd=False):
    """A random valid view of a random earlier view (None after tries that fail)."""
    for _ in range(20):
        parent = rng.choice(sorted(c.views))
        t = c.views[parent]
        nd = t.dim()
        if nd == 0:
            continue
        op = rng.choice([NARROW, NARROW, SELECT, TRANSPOSE, FLAT, INDEX, VIEW2, PERMUTE, DIAGONAL, UNSQUEEZE])
        d = rng.randrange(nd)
        n = t.shape[d]
        if op == NARROW:
            ln = rng.randint(1, n)
            args = (d, rng.randint(0, n - ln), ln)
        elif op == SELECT:
            args = (d, rng.randrange(n), 0)
        elif op == TRANSPOSE and nd >= 2:
            args = (d, (d + 1 + rng.randrange(nd - 1)) % nd, 0)
        elif op == INDEX:
            args = (rng.randrange(t.shape[0]), 0, 0)
        elif op == VIEW2 and t.numel() > 1:
            divs = [k for k in range(1, t.numel() + 1) if t.numel() % k == 0]
            args = (rng.choice(divs), 0, 0)
        elif op == PERMUTE and nd == 3:
            args = tuple(rng.sample(range(3), 3))
        elif op == DIAGONAL and nd >= 2:
            args = (rng.randint(-1, 1), 0, 1)
        elif op == UNSQUEEZE and nd < 4:
            args = (rng.randint(0, nd), 0, 0)
        elif op == FLAT:
            args = (0, 0, 0)
        else:
            continue
        if (op == DIAGONAL and min(t.shape[0] + min(args[0], 0), t.shape[1] - max(args[0], 0)) <= 0):
            continue
        v = c.view(parent, op, *args, nograd=nograd)
        if v is not None:
            return v
    return None


def random_write(c, rng, vid, seed):
    t = c.views[vid]
    ops = [COPY, COPY, ADD, MUL, FILL, ZERO, MASKED] + ([SETITEM, SETRANGE] if t.dim() >= 1 else [])
    op = rng.choice(ops)
    value = rng.choice([LEAF, LEAF, CONST, COMPUTED])
    bcast = int(t.dim() >= 2 and rng.random() < 0.25)
    if op in (FILL, MASKED):
        c.write(vid, op, SCALAR, seed, 0, rng.choice([0.5, -1.25, 2.0]))
    elif op == ZERO:
        c.write(vid, op)
    elif op == SETITEM:
        c.write(vid, op, value, seed, bcast if t.dim() >= 2 else 0, rng.randrange(t.shape[0]))
    elif op == SETRANGE:
        p = rng.randrange(t.shape[0])
        c.write(vid, op, value, seed, bcast if t.dim() >= 2 else 0, p, rng.randint(p + 1, t.shape[0]))
    else:
        c.write(vid, op, value, seed, bcast)


def random_case(rng):
    kind = rng.choice([B_CONST] * 4 + [B_HIST] * 4 + [B_LEAF, B_EXP])
    shape = rng.choice([(4, 5), (3, 4), (2, 3, 4), (6,), (3, 2, 2)])
    c = Case(kind, rng.choice([64, 64, 64, 32]), shape)
    seed = 10
    for _ in range(rng.randint(1, 3)):
        if c.raised is not None:
            break
        for _ in range(rng.randint(0, 2)):
            v = random_view(c, rng, nograd=rng.random() < 0.04)
            if v is not None and rng.random() < 0.4:
                c.read(v, rng.choice([0, 0, 1, 2, 2]), seed)
                seed += 1
        vid = random_view(c, rng) if rng.random() < 0.85 or kind == B_LEAF else 0
        if vid is None:
            continue
        random_write(c, rng, vid, seed)
        seed += 1
    for v in sorted(c.views)[1:]:
        if rng.random() < 0.35:
            c.term(v)
    if not c.leaves and c.raised is None:  # something to take a gradient
        c.read(0, 1, seed)
    return c


def fixed_cases():
    """The cases of docs/architecture.md's examples, by hand."""
    out = []
    for op, args, vshape in [(NARROW, (0, 1, 2), None), (SELECT, (0, 1), None), (INDEX, (1,), None),
                             (TRANSPOSE, (0, 1), "t-select")]:
        c = Case(B_CONST, 64, (3, 3))
        v = c.view(0, op, *args)
        if vshape == "t-select":
            v = c.view(v, SELECT, 0, 1)
        c.write(v, COPY, LEAF, 10)
        out.append(c)
    c = Case(B_CONST, 64, (3, 3))  # select():add_
    c.write(c.view(0, SELECT, 0, 1), ADD, LEAF, 10)
    out.append(c)
    c = Case(B_CONST, 64, (3, 3))  # view(-1):narrow():copy_
    c.write(c.view(c.view(0, FLAT), NARROW, 0, 2, 4), COPY, LEAF, 10)
    out.append(c)
    c = Case(B_HIST, 64, (2, 3, 4))  # a chain: narrow of transpose of view, then an older view read
    old = c.view(0, SELECT, 2, 1)
    c.write(c.view(c.view(c.view(0, VIEW2, 6), TRANSPOSE, 0, 1), NARROW, 0, 1, 2), MUL, COMPUTED, 11)
    c.write(c.view(0, INDEX, 1), ADD, CONST, 12)  # a value without grad
    c.write(old, SETITEM, LEAF, 13, 0, 1)
    c.term(old)
    out.append(c)
    c = Case(B_LEAF, 64, (3, 3))  # a view of a leaf: refused
    c.write(c.view(0, NARROW, 0, 0, 2), FILL, SCALAR, 0, 0, 1.0)
    out.append(c)
    c = Case(B_HIST, 64, (4,))  # a saved view written after: refused at backward
    v = c.view(0, NARROW, 0, 0, 2)
    c.read(v, 1, 10)
    c.write(c.view(0, NARROW, 0, 2, 2), COPY, LEAF, 11)
    out.append(c)
    c = Case(B_CONST, 64, (4,))  # a view made under no_grad, written with grad mode on: refused
    c.write(c.view(0, NARROW, 0, 0, 2, nograd=True), COPY, LEAF, 10)
    out.append(c)
    return out


def main():
    rng = random.Random(20261202)
    cases = fixed_cases() + [random_case(rng) for _ in range(250)]
    for i, c in enumerate(cases):
        c.emit("case%d" % (i + 1))


main()
