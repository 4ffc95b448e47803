#!/usr/bin/env python3
"""ds_compare.py [zorch binary]: DeepSpeed's own reading of every JSON file of the
configuration corpus (tests/configs/corpus), recorded in
tests/configs/deepspeed-reading.json, then compared with zorch's reading
by tests/lua/ds_reading.lua (which tests/lua/test_dsreading.lua runs against the
committed record where DeepSpeed is not installed).

Per file: the clipping, the batch sizes, the optimizer that runs (its type and
hyper-parameters, DeepSpeed's defaults filled in) and the scheduler's lr over
the first 2 x N steps (N: total_num_steps, else the warm-up or cycle length),
from DeepSpeedConfig and deepspeed.runtime.lr_schedules on one CPU rank. A file
DeepSpeed refuses, or one with "auto" values (filled by a trainer before
DeepSpeed reads it), is recorded with the reason and not compared.
Run from the repository root: DS_ACCELERATOR=cpu python3 scripts/ds_compare.py
"""
import glob
import inspect
import json
import os
import subprocess
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import deepspeed  # noqa: E402
import torch  # noqa: E402
from deepspeed.runtime import lr_schedules  # noqa: E402
from deepspeed.runtime.config import DeepSpeedConfig  # noqa: E402

CORPUS = "tests/configs/corpus"
RECORD = "tests/configs/deepspeed-reading.json"


def has_auto(v):
    if isinstance(v, dict):
        return any(has_auto(x) for x in v.values())
    if isinstance(v, list):
        return any(has_auto(x) for x in v)
    return v == "auto"


def defaults(fn):
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()
            if p.default is not inspect.Parameter.empty}


def optimizer(name, params):
    """The optimizer DeepSpeed's engine builds (_configure_basic_optimizer), with its defaults."""
    from deepspeed.ops.adam import FusedAdam
    from deepspeed.ops.lamb import FusedLamb
    p = dict(params or {})
    if name in ("adam", "adamw"):
        # "adam" decouples weight decay unless adam_w_mode is false; "adamw" always does
        wmode = p.pop("adam_w_mode", True) if name == "adam" else True
        p.pop("torch_adam", None)
        d = defaults(FusedAdam.__init__)
        out = {k: d[k] for k in ("lr", "betas", "eps", "weight_decay")}
        out.update({k: v for k, v in p.items() if k in out})
        return {"type": "AdamW" if wmode else "Adam", "params": out}
    if name == "lamb":
        d = defaults(FusedLamb.__init__)
        out = {k: d[k] for k in ("lr", "betas", "eps", "weight_decay")}
        out.update({k: v for k, v in p.items() if k in out})
        return {"type": "Lamb", "params": out}
    if name == "sgd":
        out = {"lr": p.get("lr", 1e-3), "momentum": p.get("momentum", 0), "weight_decay": p.get("weight_decay", 0)}
        return {"type": "SGD", "params": out}
    return {"type": name, "params": p}


def horizon(kind, p):
    if p.get("total_num_steps"):
        return int(p["total_num_steps"])
    if kind == "OneCycle":
        first = p.get("cycle_first_step_size", 2000)
        return first + p.get("cycle_second_step_size", first)
    if kind == "LRRangeTest":
        return p.get("lr_range_test_step_size", 2000)
    return max(2, p.get("warmup_num_steps", 1000))


def steps_of(n):
    """The steps compared: every one of the first 2n when few, else 200 spread over them and the boundaries."""
    if 2 * n <= 400:
        return list(range(2 * n))
    s = {round(i * (2 * n - 1) / 199) for i in range(200)}
    s |= {0, 1, n - 2, n - 1, n, n + 1, 2 * n - 1}
    return sorted(x for x in s if 0 <= x < 2 * n)


def lrs(kind, params, lr):
    """lr after k scheduler steps (k = 0: as constructed), DeepSpeed's schedule on a torch optimizer."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    p = {k: v for k, v in params.items() if k != "last_batch_iteration"}
    s = getattr(lr_schedules, kind)(opt, **p)
    n = horizon(kind, params)
    want = set(steps_of(n))
    out = []
    for k in range(2 * n):
        if k > 0:
            s.step()
        if k in want:
            out.append([k, opt.param_groups[0]["lr"]])
    return out


def reading(path):
    with open(path) as f:
        cfg = json.load(f)
    if has_auto(cfg):
        return {"skip": "\"auto\" values: a trainer fills them before DeepSpeed reads the file"}
    try:
        c = DeepSpeedConfig(json.loads(json.dumps(cfg)))
    except Exception as e:  # refused by DeepSpeed
        return {"skip": "DeepSpeed refuses it: " + str(e).splitlines()[0][:200]}
    r = {"gradient_clipping": c.gradient_clipping, "train_micro_batch_size_per_gpu": c.train_micro_batch_size_per_gpu,
         "gradient_accumulation_steps": c.gradient_accumulation_steps, "train_batch_size": c.train_batch_size}
    if c.optimizer_name:
        r["optimizer"] = optimizer(c.optimizer_name, c.optimizer_params)
    if c.scheduler_name:
        lr = r["optimizer"]["params"]["lr"] if "optimizer" in r else 1e-3
        try:
            r["scheduler"] = {"type": c.scheduler_name, "lr": lr, "lrs": lrs(c.scheduler_name, c.scheduler_params or {}, lr)}
        except Exception as e:
            return {"skip": "DeepSpeed's scheduler refuses it: " + str(e).splitlines()[0][:200]}
    return r


def main():
    files = sorted(glob.glob(os.path.join(CORPUS, "*.json")))
    rec = {"deepspeed": deepspeed.__version__, "files": {}}
    for path in files:
        rec["files"][os.path.basename(path)] = reading(path)
    with open(RECORD, "w") as f:
        json.dump(rec, f, indent=1, sort_keys=True)
        f.write("\n")
    compared = sum(1 for v in rec["files"].values() if "skip" not in v)
    print(f"DeepSpeed {deepspeed.__version__}: {compared} of {len(rec['files'])} files read, recorded in {RECORD}")
    zorch = sys.argv[1] if len(sys.argv) > 1 else "build/cpu/zorch"
    if os.path.exists(zorch):
        sys.exit(subprocess.call([zorch, "tests/lua/ds_reading.lua", RECORD, CORPUS]))


if __name__ == "__main__":
    main()
