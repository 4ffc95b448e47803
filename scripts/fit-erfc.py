"""The coefficients of ops/cpu/vec512.h's erfc: R(t), a polynomial of degree 9
in t = 1 / (1 + a/2), fitted to erfc(a) e^{a^2} on [0, 10.54] by iteratively
reweighted least squares toward the smallest relative error (Lawson's
weights), then rounded to float32 and checked by a float32 Horner evaluation.
    python3 scripts/fit-erfc.py   (needs numpy)
prints the coefficients, highest degree first, as vec512.h lists them."""
import math

import numpy as np


def fit(deg=9, beta=0.5, amax=10.54, iters=200):
    a = np.linspace(0, amax, 20000)
    t = 1 / (1 + beta * a)
    target = np.array([math.erfc(v) * math.exp(v * v) for v in a])
    w = np.ones_like(t)
    V = np.vander(t, deg + 1, increasing=True)
    for _ in range(iters):
        s = np.sqrt(w) / target
        c, *_ = np.linalg.lstsq(V * s[:, None], target * s, rcond=None)
        err = np.abs(V @ c - target) / target
        w = w * (err / err.max() + 1e-3)
        w /= w.sum()
    c32 = c.astype(np.float32)
    t32 = t.astype(np.float32).astype(np.float64)
    p = np.float64(c32[-1])
    for k in range(deg - 1, -1, -1):  # each step one fused multiply-add, rounded to float32
        p = (p * t32 + np.float64(c32[k])).astype(np.float32).astype(np.float64)
    return np.max(err), np.max(np.abs(p - target) / target), c32


if __name__ == "__main__":
    e, e32, c = fit()
    print("relative error: %.2e (double), %.2e (float32 Horner)" % (e, e32))
    print(", ".join("%.9ef" % float(v) for v in c[::-1]))
