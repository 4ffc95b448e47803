"""Learning-rate trajectories of DeepSpeed's schedulers, for tests/lua/test_dsoptim.lua.

Written from DeepSpeed's documented formulas (deepspeed/runtime/lr_schedules.py,
the WarmupLR, WarmupDecayLR and WarmupCosineLR classes and their docstrings):
each scheduler starts with last_batch_iteration = -1 and sets the lr at
construction (get_lr with a negative iteration: warmup_min_lr for WarmupLR and
WarmupDecayLR, 0 for WarmupCosineLR); step() increments last_batch_iteration
and sets lr = get_lr(). warmup_num_steps is clamped to max(2, warmup_num_steps).

Writes tests/golden/dsoptim_lr.txt: per case one line with the JSON scheduler
section, the optimizer's lr, then the lr at construction and after steps 1..40.
Run: python3 tests/golden/gen_dsoptim.py
"""
import json
import math
import os

STEPS = 40


def warm_gamma(it, n, kind):
    # WarmupLR._get_gamma (the warm-up part), shared by WarmupDecayLR
    if kind == "log":
        return (1.0 / math.log(n)) * math.log(it + 1)
    return it / n


def warmup_lr(p, base):
    lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", 0.001)
    n, kind = max(2, p.get("warmup_num_steps", 1000)), p.get("warmup_type", "log")

    def lr(it):
        if it < 0:
            return lo  # get_lr before the first step: min_lrs
        gamma = warm_gamma(it, n, kind) if it < n else 1.0
        return lo + (hi - lo) * gamma
    return lr


def warmup_decay_lr(p, base):
    lo, hi = p.get("warmup_min_lr", 0.0), p.get("warmup_max_lr", 0.001)
    n, kind, total = max(2, p.get("warmup_num_steps", 1000)), p.get("warmup_type", "log"), p["total_num_steps"]

    def lr(it):
        if it < 0:
            return lo
        if it < n:
            gamma = warm_gamma(it, n, kind)
        else:  # WarmupDecayLR._get_gamma
            gamma = max(0.0, float(total - it) / float(max(1.0, total - n)))
        return lo + (hi - lo) * gamma
    return lr


def warmup_cosine_lr(p, base):
    total, wmin = p["total_num_steps"], p.get("warmup_min_ratio", 0.0)
    n, cmin, kind = max(2, p.get("warmup_num_steps", 1000)), p.get("cos_min_ratio", 0.0001), p.get("warmup_type", "log")

    def lr(it):
        if it < 0:
            return 0.0  # get_lr_ratio before the first step
        if it < n:
            r = warm_gamma(it, n, kind)
            return base * (wmin + r * (1.0 - wmin))
        real_last = it - n + 1  # WarmupCosineLR.get_lr_ratio
        real_total = total - n
        r = (1 + math.cos(math.pi * real_last / real_total)) / 2
        return base * max(0.0, cmin + (1.0 - cmin) * r)
    return lr


KINDS = {"WarmupLR": warmup_lr, "WarmupDecayLR": warmup_decay_lr, "WarmupCosineLR": warmup_cosine_lr}

CASES = [
    ({"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 10}}, 0.001),
    ({"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 15,
                                      "warmup_type": "linear"}}, 0.001),
    ({"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 1}}, 0.001),
    ({"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 0, "warmup_type": "linear"}}, 0.001),
    ({"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.02, "warmup_num_steps": 8,
                                           "total_num_steps": 30}}, 0.001),
    ({"type": "WarmupDecayLR", "params": {"warmup_max_lr": 0.02, "warmup_num_steps": 5, "warmup_type": "linear",
                                           "total_num_steps": 5}}, 0.001),
    ({"type": "WarmupCosineLR", "params": {"total_num_steps": 30, "warmup_num_steps": 6, "warmup_min_ratio": 0.1,
                                            "cos_min_ratio": 0.05}}, 0.02),
    ({"type": "WarmupCosineLR", "params": {"total_num_steps": 25, "warmup_num_steps": 1,
                                            "warmup_type": "linear"}}, 0.01),
]


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dsoptim_lr.txt")
    with open(out, "w") as f:
        for spec, base in CASES:
            lr = KINDS[spec["type"]](spec["params"], base)
            vals = [lr(it) for it in range(-1, STEPS)]
            f.write(json.dumps(spec) + "\t" + repr(base) + "\t" + " ".join(repr(v) for v in vals) + "\n")


if __name__ == "__main__":
    main()
