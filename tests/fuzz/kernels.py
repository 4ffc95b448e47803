"""Differential fuzzing of zorch's vectorised CPU kernels against PyTorch.

    python3 tests/fuzz/kernels.py --zorch build/cpu/zorch --seeds 1:50 --cases 200 [--op softmax]

For each seed, `zorch tests/fuzz/kernels.lua SEED CASES FILE` draws the cases
and writes their inputs, outputs and gradients (on 1 and on 2 threads); this
script recomputes every case with PyTorch and prints each mismatch with its
case's description. Exit status 1 when something did not match or zorch crashed.

The rule for a value (forward or gradient), with r the float64 result of the
same op on the same inputs (16-bit inputs widened exactly), t PyTorch's result
in the case's dtype and z zorch's (each on both thread counts):
  |z - r| <= 2 |t - r| + K_REL eps |r| + K_ABS eps S + tiny
eps the dtype's machine epsilon (2^-23, 2^-7 for bfloat16, 2^-10 for float16),
S a scale of the problem (0 for elementwise results; the largest |r| of the
tensor for gradients and normalised outputs; sum |x| over the reduced values
for sums and means, |a| |b| for products), tiny the dtype's smallest normal
number. zorch may be as far from the exact result as PyTorch is, twice over,
plus a few roundings of the result. NaN and infinities must be where r (rounded
to the dtype) or t has them, of the same sign, unless S is past the dtype's
largest value (terms that overflow, as the parts of a gradient summed over an
expanded dim). The two thread counts must give
the same bits, except for matmul and attention, whose reductions oneDNN or the
kernel split by thread count (those are reported as notes).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors import safe_open

HERE = os.path.dirname(os.path.abspath(__file__))
DT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64,
      "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool}
EPS = {"float32": 2.0 ** -23, "bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float64": 2.0 ** -52}
TINY = {"float32": 1.1754944e-38, "bfloat16": 1.1754944e-38, "float16": 6.1035156e-05, "float64": 2.2e-308}
# (K_REL, K_ABS) for forward values and for gradients
K = {"float32": ((16, 64), (16, 64)), "bfloat16": ((1, 2), (2, 4)), "float16": ((1, 2), (2, 4))}
# ops whose two thread counts may differ by rounding
THREAD_FREE = {"matmul", "attention", "linear"}


def decode(node):
    if isinstance(node, list):
        return [decode(v) for v in node]
    if isinstance(node, dict):
        if "map" in node:
            return {k: decode(v) for k, v in node["map"].items()}
        if "float" in node:
            return float(node["float"])
        if "int" in node:
            return int(node["int"])
        if "tensor" in node:
            return node["tensor"]
        if "pairs" in node:
            return {decode(k): decode(v) for k, v in node["pairs"]}
    return node


def apply_layout(x, layout):
    for l in layout or []:
        if l[0] == "t":
            x = x.transpose(l[1], l[2])
        elif l[0] == "step":
            d = l[1]
            x = x.unflatten(d, (x.shape[d] // 2, 2)).select(d + 1, 0)
        elif l[0] == "narrow":
            x = x.narrow(l[1], l[2], l[3])
        elif l[0] == "expand":
            s = list(x.shape)
            s[l[1]] = l[2]
            x = x.expand(s)
    return x


def attention_mask(tq, tk, causal):
    if not causal:
        return None
    i = torch.arange(tq).unsqueeze(1)
    j = torch.arange(tk).unsqueeze(0)
    return j <= i + (tk - tq)  # zorch's alignment (docs/api.md): the last query sees every key


def compute(case, T, dtype, with_scale=False):
    """Runs case on the tensors T (names to tensors of `dtype` for the float
    inputs) and returns (outputs {name: tensor}, scales {name: tensor or float})."""
    op, a = case["op"], case["args"]
    grads = op != "contiguous" or case["dtype"] in ("float32", "bfloat16", "float16")
    leaves = {n: T[n].clone().requires_grad_(grads and T[n].is_floating_point()) for n in case["ins"]}
    v = {n: apply_layout(leaves[n], case["ins"][n].get("layout")) for n in case["ins"]}
    if with_scale:
        for t in v.values():
            if t.requires_grad:
                t.retain_grad()
    x = v.get("x")
    scale = {}
    if op == "softmax":
        y = torch.softmax(x, a["dim"])
    elif op == "log_softmax":
        y = torch.log_softmax(x, a["dim"])
    elif op == "layer_norm":
        y = F.layer_norm(x, a["shape"], v.get("w"), v.get("b"), a["eps"])
    elif op == "gelu" and dtype == torch.float64:
        # forms without the cancellation of 1 + erf (or 1 + tanh) at x << 0,
        # which would make the reference worse than float32 there
        if a["approximate"] == "tanh":
            u = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
            y = x / (1 + torch.exp(-2 * u))
        else:
            y = 0.5 * x * torch.erfc(-x / math.sqrt(2))
    elif op == "gelu":
        y = F.gelu(x, approximate=a["approximate"])
    elif op in ("sum", "mean"):
        dims = a["dims"]
        if dims == "all":
            y = getattr(x, op)()
            if with_scale:
                scale["y"] = x.detach().abs().sum()
        else:
            y = getattr(x, op)(dims, keepdim=a["keepdim"])
            if with_scale:
                scale["y"] = getattr(x.detach().abs(), op)(dims, keepdim=a["keepdim"])
    elif op in ("add", "sub", "mul", "div"):
        y = getattr(torch, op)(x, v["y"])
    elif op == "neg":
        y = -x
    elif op == "relu":
        y = torch.relu(x)
    elif op == "add_s":
        y = x + a["p0"]
    elif op == "mul_s":
        y = x * a["p0"]
    elif op == "rsub_s":
        y = a["p0"] - x
    elif op == "clamp":
        y = torch.clamp(x, a["p0"], a["p0"] + a["p1"])
    elif op == "cross_entropy":
        y = F.cross_entropy(x, T["targets"], weight=T["cw"].to(x.dtype) if "weight" in a else None,
                            reduction=a["reduction"], ignore_index=a.get("ignore_index", -100),
                            label_smoothing=a.get("label_smoothing", 0.0))
    elif op == "contiguous":
        y = x.contiguous()
    elif op == "attention":
        q, k, vv = v["q"], v["k"], v["v"]
        sc = None if a["scale"] == "default" else a["scale"]
        m = attention_mask(q.shape[-2], k.shape[-2], a["causal"])
        if dtype == torch.float64:
            f = sc if sc is not None else 1 / math.sqrt(q.shape[-1])
            if m is None:
                y = torch.softmax((q @ k.transpose(-1, -2)) * f, -1) @ vv
            else:  # a masked key is left out, not multiplied by 0 (its k or v may be NaN)
                mm = m.unsqueeze(-1)
                km = torch.where(mm, k.unsqueeze(-3), 0.0)  # (.., Tq, Tk, D)
                s = (q.unsqueeze(-2) * km).sum(-1) * f
                p = torch.where(m, torch.softmax(s.masked_fill(~m, -math.inf), -1), 0.0)  # no key: 0
                y = (p.unsqueeze(-1) * torch.where(mm, vv.unsqueeze(-3), 0.0)).sum(-2)
        else:
            y = F.scaled_dot_product_attention(q, k, vv, attn_mask=m, scale=sc)
        if with_scale:
            # a score s is rounded to eps |s|, which e^s turns into a relative error
            qd, kd = q.detach(), k.detach()
            smax = fmax(qd @ kd.transpose(-1, -2)) * (sc or 1 / math.sqrt(q.shape[-1]))
            case["smax"] = smax
            scale["y"] = fmax(vv) * (1 + smax)
    elif op == "linear":
        y = F.linear(x, v["w"], v.get("b"))
        if with_scale:
            scale["y"] = F.linear(x.detach().abs(), v["w"].detach().abs(),
                                  v["b"].detach().abs() if "b" in v else None)
        act = a["act"]
        if act == "relu":
            y = torch.relu(y)
        elif act in ("gelu", "gelu_tanh"):
            approx = "tanh" if act == "gelu_tanh" else "none"
            if dtype == torch.float64 and approx == "tanh":
                u = math.sqrt(2 / math.pi) * (y + 0.044715 * y ** 3)
                y = y / (1 + torch.exp(-2 * u))
            elif dtype == torch.float64:
                y = 0.5 * y * torch.erfc(-y / math.sqrt(2))
            else:
                y = F.gelu(y, approximate=approx)
    elif op == "matmul":
        y = torch.matmul(v["a"], v["b"])
        if with_scale:
            scale["y"] = torch.matmul(v["a"].detach().abs(), v["b"].detach().abs())
    else:
        raise ValueError("unknown op " + op)
    out = {"y": y.detach()}
    if y.requires_grad:
        y.backward(T["cot"].to(y.dtype))
        for n, l in leaves.items():
            if l.grad is not None:
                out["g" + n] = l.grad
                if with_scale:
                    scale["g" + n] = grad_scale(case, n, l, v[n], op, v, T["cot"])
    return out, scale


def fmax(t):
    """The largest finite |value| of t (0 for none)."""
    t = t.detach().abs()
    t = t[torch.isfinite(t)]
    return float(t.max()) if t.numel() else 0.0


def grad_scale(case, n, leaf, view, op, v, cot):
    """The size of the terms that add up to each element of the gradient of
    leaf: |gradient of the view| summed back through the layout (an expanded
    dim adds its elements), and for attention the size of dO v k (or q)."""
    g = view.grad.abs()
    if op == "attention":
        q, k, vv = (v[m].detach().abs() for m in ("q", "k", "v"))
        d = q.shape[-1]
        sc = 1 / math.sqrt(d) if case["args"]["scale"] == "default" else case["args"]["scale"]
        other = k if n == "q" else q
        big = fmax(cot) * fmax(vv) * fmax(other) * sc * d
        g = (g + big * (d if n != "v" else 0)) * (1 + case["smax"])
    if op == "linear" and case["args"]["act"] in ("gelu", "gelu_tanh") and v["x"].numel() and v["w"].numel():
        # gelu' moves by up to 0.4 times the rounding of its argument, eps |x| |w|
        xa, wa = v["x"].detach().abs(), v["w"].detach().abs()
        pre = F.linear(xa, wa, v["b"].detach().abs() if "b" in v else None)
        m = cot.abs() * (1 + 0.4 * pre)
        if n == "x":
            g = g + m @ wa
        elif n == "w":
            g = g + m.reshape(-1, m.shape[-1]).T @ xa.reshape(-1, xa.shape[-1])
        else:
            g = g + m.reshape(-1, m.shape[-1]).sum(0)
    if op == "cross_entropy" and view.numel():
        # g (p - onehot): p near 1 cancels against the 1
        n_rows = view.shape[0] if case["args"]["reduction"] == "mean" else 1
        g = g + fmax(cot) / max(n_rows, 1)
    if op in ("softmax", "log_softmax") and view.numel():
        # y (g - sum(g y)) and g - e^y sum(g): the terms' size, not the
        # result's, which cancels where one probability is near 1
        d = case["args"]["dim"]
        p = torch.softmax(view.detach(), d)
        gs = (cot.abs() * (p if op == "softmax" else 1)).sum(d, keepdim=True)
        g = g + torch.nan_to_num(cot.abs() * (p if op == "softmax" else 1) + p * gs, nan=0.0)
    if op == "layer_norm" and n in ("x", "w") and v["x"].numel():
        # gx adds rstd |g w| over the row, gw g xhat over the rows; xhat is
        # (x - mean) rstd with the mean rounded to the dtype, an error of
        # eps |x| rstd
        ns = len(case["args"]["shape"])
        xd = v["x"].detach()
        dims = tuple(range(xd.dim() - ns, xd.dim()))
        var = xd.var(dims, unbiased=False, keepdim=True)
        rs = 1 / torch.sqrt(var + case["args"]["eps"])
        xs = xd.abs() * rs
        if n == "x":
            gw = cot.abs() * (v["w"].detach().abs() if "w" in v else 1)
            g = g + rs * gw.amax(dims, keepdim=True) * (4 + xs.amax(dims, keepdim=True))
        else:
            g = g + (cot.abs() * xs).sum(tuple(range(xd.dim() - ns)))
    (back,) = torch.autograd.grad(apply_layout(leaf, case["ins"][n].get("layout")), leaf, g, allow_unused=True)
    return back


def compute_adamw(case, T, dtype):
    a = case["args"]
    p = T["p0"].to(dtype).clone().requires_grad_(True)
    opt = torch.optim.AdamW([p], lr=a["lr"], betas=tuple(a["betas"]), eps=a["eps"],
                            weight_decay=a["weight_decay"], amsgrad=a["amsgrad"], foreach=False)
    for s in (1, 2, 3):
        p.grad = T["grad%d" % s].to(dtype).clone()
        opt.step()
    return {"y": p.detach()}, {"y": a["lr"] * 3}


def nonfinite_class(x):
    return torch.where(torch.isnan(x), 3, torch.where(x == math.inf, 1, torch.where(x == -math.inf, 2, 0)))


def check_value(z, t, r, dtype_name, grad, scale, outdt):
    """Returns None or a short text of the worst mismatch."""
    if z.shape != r.shape:
        return "shape %s, PyTorch's %s" % (tuple(z.shape), tuple(r.shape))
    if z.numel() == 0:
        return None
    if not z.is_floating_point():
        return None if torch.equal(z, r.to(z.dtype)) else "values differ"
    z64, t64, r64 = z.double(), t.double(), r.double()
    rd = r.to(outdt).double()  # r rounded to the dtype
    cz, ct, cr = nonfinite_class(z64), nonfinite_class(t64), nonfinite_class(rd)
    bad_nf = (cz != 0) & (cz != ct) & (cz != cr)
    # NaN where the references have an infinity (or the reverse) is a note
    kind = bad_nf & (cr != 0)
    bad_nf &= cr == 0
    bad_nf |= (cz == 0) & (ct != 0) & (cr != 0)
    kr, ka = K.get(dtype_name, K["float32"])[1 if grad else 0]
    eps = EPS.get(dtype_name, EPS["float32"])
    fin = (cz == 0) & (cr == 0) & torch.isfinite(r64)
    sc = scale.double() if isinstance(scale, torch.Tensor) else float(scale)
    # terms past the dtype's range (a gradient summed over an expanded dim
    # from parts that overflow) may give an infinity or NaN
    over = torch.as_tensor(sc) > torch.finfo(outdt).max
    bad_nf &= ~over
    terr = torch.where(torch.isfinite(t64), (t64 - r64).abs(), torch.zeros_like(r64))
    allowed = 2 * terr + kr * eps * r64.abs() + ka * eps * sc + TINY.get(dtype_name, 1e-38)
    err = torch.where(fin, (z64 - r64).abs(), torch.zeros_like(r64))
    bad = fin & (err > allowed)
    msgs = []
    if kind.any():
        i = int(kind.flatten().nonzero()[0])
        msgs.append("note: %d values NaN where the result is infinite or the reverse, first at flat %d: "
                    "zorch %g PyTorch %g exact %g" % (int(kind.sum()), i, z64.flatten()[i], t64.flatten()[i],
                                                      r64.flatten()[i]))
    if bad_nf.any():
        i = int(bad_nf.flatten().nonzero()[0])
        msgs.append("%d non-finite mismatches, first at flat %d: zorch %g PyTorch %g exact %g" % (
            int(bad_nf.sum()), i, z64.flatten()[i], t64.flatten()[i], r64.flatten()[i]))
    if bad.any():
        ratio = torch.where(bad, err / allowed, torch.zeros_like(err))
        i = int(ratio.flatten().argmax())
        msgs.append("%d values off, worst at flat %d: zorch %.9g PyTorch %.9g exact %.9g (err %.3g, allowed %.3g)" % (
            int(bad.sum()), i, z64.flatten()[i], t64.flatten()[i], r64.flatten()[i], err.flatten()[i],
            allowed.flatten()[i]))
    return "; ".join(msgs) or None


def same_bits(a, b):
    if a.shape != b.shape:
        return False
    if a.is_floating_point():
        an, bn = torch.isnan(a), torch.isnan(b)
        return bool(torch.equal(an, bn)) and bool(torch.equal(torch.where(an, 0, a.float()).view(-1).view(torch.int32)
                                                              if a.dtype == torch.float32 else torch.where(an, 0, a),
                                                              torch.where(bn, 0, b.float()).view(-1).view(torch.int32)
                                                              if b.dtype == torch.float32 else torch.where(bn, 0, b)))
    return bool(torch.equal(a, b))


def check_file(path):
    """Returns a list of (severity, case description, text)."""
    found = []
    with safe_open(path, "pt") as f:
        meta = decode(json.loads(f.metadata()["zorch.values"])["value"])
        names = set(f.keys())

        def tensors(key):
            pre = "tensors.%s." % key
            return {n[len(pre):]: f.get_tensor(n) for n in names if n.startswith(pre)}

        for case in meta["cases"]:
            T = tensors(case["key"])
            desc, op, dtn = case["desc"], case["op"], case["dtype"]
            case.setdefault("ins", {})
            if isinstance(case["ins"], list):
                case["ins"] = {}
            for n in case["ins"]:
                if isinstance(case["ins"][n].get("layout"), dict):
                    case["ins"][n]["layout"] = []
            if isinstance(case.get("args"), list):
                case["args"] = {}
            try:
                if op == "adamw":
                    ref, scale = compute_adamw(case, T, torch.float64)
                    tor, _ = compute_adamw(case, T, torch.float32)
                else:
                    T64 = {n: (t.double() if t.is_floating_point() else t) for n, t in T.items()}
                    ref, scale = compute(case, T64, torch.float64, with_scale=True)
                    tor, _ = compute(case, T, DT[dtn])
                terr = None
            except Exception as e:  # PyTorch refuses the case
                terr = str(e).split("\n")[0]
            if "error" in case:
                if terr is None:
                    found.append(("error", desc, "zorch raised, PyTorch did not: " + case["error"]))
                continue
            if terr is not None:
                found.append(("error", desc, "PyTorch raised, zorch did not: " + terr))
                continue
            outs = {}
            for th in (1, 2):
                outs[th] = {n[len("out%d." % th):]: t for n, t in T.items() if n.startswith("out%d." % th)}
            for name, r in ref.items():
                for th in (1, 2):
                    z = outs[th].get(name)
                    if z is None:
                        found.append(("bug", desc, "%s missing on %d threads" % (name, th)))
                        continue
                    t = tor[name]
                    if op == "contiguous" and name == "y":
                        msg = None if same_bits(z, t) else "contiguous() differs from the view's values"
                    else:
                        sc = scale.get(name, 0.0)
                        if name != "y" or op in ("log_softmax", "layer_norm", "cross_entropy"):
                            fin = torch.isfinite(r)
                            m = float(r.abs()[fin].max()) if r.numel() and fin.any() else 0.0
                            sc = torch.nan_to_num(sc.abs(), posinf=0.0) + m if isinstance(sc, torch.Tensor) else sc + m
                        msg = check_value(z, t, r, dtn, name != "y", sc, t.dtype)
                    if msg:
                        sev = "note" if msg.startswith("note: ") and ";" not in msg else "bug"
                        found.append((sev, desc, "%s (%d threads): %s" % (name, th, msg)))
                        break
                if name in outs[1] and name in outs[2] and not same_bits(outs[1][name], outs[2][name]):
                    found.append(("note" if op in THREAD_FREE else "bug", desc,
                                  "%s differs between 1 and 2 threads" % name))
            for name in outs[1]:
                if name not in ref:
                    found.append(("bug", desc, "zorch gave %s, PyTorch has none" % name))
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zorch", default="build/cpu/zorch")
    ap.add_argument("--seeds", default="1:20", help="FIRST:LAST, both included")
    ap.add_argument("--cases", type=int, default=200, help="cases per seed")
    ap.add_argument("--op", default=None, help="one op family of kernels.lua")
    ap.add_argument("--notes", action="store_true", help="print the notes too")
    ap.add_argument("--timeout", type=int, default=600)
    args = ap.parse_args()
    first, last = (int(s) for s in args.seeds.split(":"))
    tmp = tempfile.mkdtemp(prefix="zorch-kfuzz-")
    nbad = ncases = 0
    for seed in range(first, last + 1):
        path = os.path.join(tmp, "s%d.safetensors" % seed)
        cmd = [args.zorch, os.path.join(HERE, "kernels.lua"), str(seed), str(args.cases), path]
        if args.op:
            cmd.append(args.op)
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            last_case = [l for l in out.splitlines() if l.startswith("case ")][-1:]
            print("seed %d: timeout in %s" % (seed, last_case))
            nbad += 1
            continue
        if p.returncode != 0:
            last_case = [l for l in p.stdout.splitlines() if l.startswith("case ")][-1:]
            print("seed %d: zorch exited %d in %s\n%s" % (seed, p.returncode, last_case, p.stderr[-3000:]))
            nbad += 1
            continue
        found = check_file(path)
        ncases += args.cases
        for sev, desc, text in found:
            if sev == "note" and not args.notes:
                continue
            print("seed %d: %s: %s: %s" % (seed, sev, desc, text))
            nbad += sev != "note"
        os.remove(path)
        sys.stdout.flush()
    print("%d cases over seeds %d..%d: %d mismatches or crashes" % (ncases, first, last, nbad))
    os.rmdir(tmp)
    return 1 if nbad else 0


if __name__ == "__main__":
    sys.exit(main())
