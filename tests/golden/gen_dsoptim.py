"""Learning-rate trajectories of DeepSpeed's schedulers, for tests/lua/test_dsoptim.lua.

Written from DeepSpeed's documented formulas (deepspeed/runtime/lr_schedules.py,
the WarmupLR, WarmupDecayLR, WarmupCosineLR, LRRangeTest and OneCycle classes
and their docstrings):
each scheduler starts with last_batch_iteration = -1 and sets the lr at
construction (get_lr with a negative iteration: warmup_min_lr for WarmupLR and
WarmupDecayLR, 0 for WarmupCosineLR); step() increments last_batch_iteration
and sets lr = get_lr(). warmup_num_steps is clamped to max(2, warmup_num_steps).

Writes tests/golden/dsoptim_lr.txt: per case one line with the JSON scheduler
section, the optimizer's lr, then the lr at construction and after steps 1..40,
and for OneCycle with cycle_momentum the first beta likewise.
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
        real_last = it - n + 1  # WarmupCosineLR.get_lr_ratio (DeepSpeed 0.19.8: progress clamped at 1)
        real_total = max(1, total - n)
        r = (1 + math.cos(math.pi * min(1.0, real_last / real_total))) / 2
        return base * max(0.0, cmin + (1.0 - cmin) * r)
    return lr


def lr_range_test(p, base):
    # LRRangeTest: _continuous_interval / _staircase_interval are
    # (last_batch_iteration + 1) / step_size (floored for the staircase);
    # get_lr = min_lr * (1 + step_rate * interval). At construction the lr is min_lr.
    lo, size = p.get("lr_range_test_min_lr", 1e-3), p.get("lr_range_test_step_size", 2000)
    rate, stair = p.get("lr_range_test_step_rate", 1.0), p.get("lr_range_test_staircase", False)

    def lr(it):
        interval = float(it + 1) / size
        if stair:
            interval = math.floor(interval)
        return lo * (1 + rate * interval)
    return lr


def one_cycle(p, base, mom=False):
    # OneCycle: _initialize_cycle (total_size, step_ratio), _get_scale_factor,
    # _get_cycle_lr / _get_cycle_mom inside the cycle, _get_decay_lr / _get_decay_mom
    # after it (skipped when decay_step_size or the rate is 0). At construction the
    # lr is cycle_min_lr and beta1 is cycle_min_mom.
    first = float(p.get("cycle_first_step_size", 2000))
    second = float(p["cycle_second_step_size"]) if "cycle_second_step_size" in p else first
    total = first + second
    ratio = first / total
    lo, hi, lrate = p["cycle_min_lr"], p["cycle_max_lr"], p.get("decay_lr_rate", 0.0)
    mlo, mhi, mrate = p.get("cycle_min_mom", 0.8), p.get("cycle_max_mom", 0.9), p.get("decay_mom_rate", 0.0)
    dsize = p.get("decay_step_size", 0)

    def scale(it):
        batch_iteration = it + 1
        cycle = math.floor(1 + batch_iteration / total)
        x = 1.0 + batch_iteration / total - cycle
        return x / ratio if x <= ratio else (x - 1) / (ratio - 1)

    def lr(it):
        if it < total:
            return lo + (hi - lo) * scale(it)
        if math.isclose(dsize, 0) or math.isclose(lrate, 0):
            return lo
        return lo / (1 + lrate * ((it - total + 1) / dsize))

    def momentum(it):
        if it < 0:
            return mlo
        if it < total:
            return mhi - (mhi - mlo) * scale(it)
        if math.isclose(dsize, 0) or math.isclose(mrate, 0):
            return mhi
        return mhi * (1 + mrate * ((it - total + 1) / dsize))
    return momentum if mom else lr


KINDS = {"WarmupLR": warmup_lr, "WarmupDecayLR": warmup_decay_lr, "WarmupCosineLR": warmup_cosine_lr,
         "LRRangeTest": lr_range_test, "OneCycle": one_cycle}

CASES = [
    ({"type": "WarmupLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.01, "warmup_num_steps": 10}}, 0.001),
    ({"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 15,
                                      "warmup_type": "linear"}}, 0.001),
    ({"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 1}}, 0.001),
    ({"type": "WarmupLR", "params": {"warmup_max_lr": 0.01, "warmup_num_steps": 2, "warmup_type": "linear"}}, 0.001),
    ({"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0.0, "warmup_max_lr": 0.02, "warmup_num_steps": 8,
                                           "total_num_steps": 30}}, 0.001),
    ({"type": "WarmupDecayLR", "params": {"warmup_max_lr": 0.02, "warmup_num_steps": 5, "warmup_type": "linear",
                                           "total_num_steps": 5}}, 0.001),
    ({"type": "WarmupCosineLR", "params": {"total_num_steps": 30, "warmup_num_steps": 6, "warmup_min_ratio": 0.1,
                                            "cos_min_ratio": 0.05}}, 0.02),
    ({"type": "WarmupCosineLR", "params": {"total_num_steps": 25, "warmup_num_steps": 1,
                                            "warmup_type": "linear"}}, 0.01),
    ({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.001, "lr_range_test_step_size": 5,
                                         "lr_range_test_step_rate": 2.0}}, 0.01),
    ({"type": "LRRangeTest", "params": {"lr_range_test_min_lr": 0.002, "lr_range_test_step_size": 4,
                                         "lr_range_test_step_rate": 0.5, "lr_range_test_staircase": True}}, 0.01),
    ({"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.01, "cycle_first_step_size": 10,
                                      "cycle_second_step_size": 6, "decay_lr_rate": 0.5, "decay_step_size": 4,
                                      "cycle_min_mom": 0.85, "cycle_max_mom": 0.95, "decay_mom_rate": 0.01}}, 0.01),
    ({"type": "OneCycle", "params": {"cycle_min_lr": 0.0005, "cycle_max_lr": 0.005, "cycle_first_step_size": 7,
                                      "cycle_first_stair_count": 2}}, 0.01),
    ({"type": "OneCycle", "params": {"cycle_min_lr": 0.001, "cycle_max_lr": 0.004, "cycle_first_step_size": 8,
                                      "cycle_second_step_size": 12, "decay_lr_rate": 0.1, "decay_step_size": 3,
                                      "cycle_momentum": False}}, 0.01),
]


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dsoptim_lr.txt")
    with open(out, "w") as f:
        for spec, base in CASES:
            lr = KINDS[spec["type"]](spec["params"], base)
            vals = [lr(it) for it in range(-1, STEPS)]
            line = json.dumps(spec) + "\t" + repr(base) + "\t" + " ".join(repr(v) for v in vals)
            if spec["type"] == "OneCycle" and spec["params"].get("cycle_momentum", True):
                mom = one_cycle(spec["params"], base, mom=True)
                line += "\t" + " ".join(repr(mom(it)) for it in range(-1, STEPS))
            f.write(line + "\n")


if __name__ == "__main__":
    main()
