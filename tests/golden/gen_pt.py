#!/usr/bin/env python3
"""torch.save files for tests/lua/test_ptload.lua, in tests/golden/pt/:

- state_fp32.pt: a model's state_dict (an OrderedDict with _metadata);
- dtypes.pt: one tensor of each dtype torch.load(weights_only=True) reads;
- views.pt: a transposed tensor, a narrowed one (a storage offset), two
  views of one storage, a 0-dim tensor and an empty one;
- nested.pt: dicts (string and integer keys), lists, tuples, ints, floats,
  strings, booleans and None around tensors;
- root_tensor.pt: a tensor alone; legacy.pt: the format before the zip one
  (_use_new_zipfile_serialization=False); proto4.pt: pickle protocol 4;
- hostile files, which torch.load(weights_only=False) would act on:
  evil_system.pt (calls os.system to create the file ./pt_pwned; checked here
  to do so when Python unpickles it), evil_eval.pt (builtins.eval through
  STACK_GLOBAL), whole_module.pt (torch.save of an nn.Module: its class is a
  global outside the allowed set);
- expect.json: what each loadable file holds, as Lua sees it: a dict is
  {"map": {...}} (string keys) or {"pairs": [[key, value], ...]}, a list or
  tuple a JSON array, None {"none": true}, a float {"float": x}, a tensor
  {"tensor": {"dtype", "shape", "values" (flattened, bools as 0/1)}}; and
  "shares": the pairs of top-level keys whose tensors share a storage.

Usage: python3 tests/golden/gen_pt.py  (needs torch)"""
import collections
import io
import json
import os
import pickle
import subprocess
import sys
import tempfile
import zipfile

import torch

here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pt")
os.makedirs(here, exist_ok=True)
torch.manual_seed(0)

ZDTYPE = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16", torch.float16: "float16",
          torch.int64: "int64", torch.int32: "int32", torch.int16: "int32", torch.int8: "int8",
          torch.uint8: "uint8", torch.bool: "bool"}


def describe(v):
    if isinstance(v, torch.Tensor):
        vals = v.detach().flatten().tolist()
        vals = [float(x) if v.is_floating_point() else int(x) for x in vals]
        return {"tensor": {"dtype": ZDTYPE[v.dtype], "shape": list(v.shape), "values": vals}}
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {"map": {k: describe(x) for k, x in v.items()}}
        return {"pairs": [[describe(k), describe(x)] for k, x in v.items()]}
    if isinstance(v, (list, tuple)):
        return [describe(x) for x in v]
    if v is None:
        return {"none": True}
    if isinstance(v, bool) or isinstance(v, int) or isinstance(v, str):
        return v
    if isinstance(v, float):
        return {"float": v}
    raise TypeError(type(v))


expect = {}


def save(name, obj, **kw):
    path = os.path.join(here, name)
    torch.save(obj, path, **kw)
    # what PyTorch itself reads back (its weights_only reader refuses protocol 4's FRAME)
    back = torch.load(path, weights_only="pickle_protocol" not in kw)
    entry = {"value": describe(back)}
    if isinstance(back, dict):
        keys = [k for k, t in back.items() if isinstance(t, torch.Tensor)]
        entry["shares"] = [[a, b] for i, a in enumerate(keys) for b in keys[i + 1:]
                           if back[a].untyped_storage().data_ptr() == back[b].untyped_storage().data_ptr()]
    expect[name] = entry


model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3), torch.nn.Linear(3, 2))
save("state_fp32.pt", model.state_dict())

save("dtypes.pt", {
    "f32": torch.randn(2, 3),
    "f64": torch.randn(3, dtype=torch.float64),
    "bf16": torch.randn(2, 2).to(torch.bfloat16),
    "f16": torch.randn(5).to(torch.float16),
    "i64": torch.tensor([-(2 ** 40), 0, 7, 2 ** 50]),
    "i32": torch.tensor([-5, 3], dtype=torch.int32),
    "i16": torch.tensor([-32768, -1, 32767], dtype=torch.int16),
    "i8": torch.tensor([-128, 5, 127], dtype=torch.int8),
    "u8": torch.tensor([0, 200, 255], dtype=torch.uint8),
    "b": torch.tensor([True, False, True]),
})

base = torch.arange(24, dtype=torch.float32).view(4, 6)
save("views.pt", {
    "t": base.t(),                       # strides (1, 6)
    "narrow": base[1:3, 2:5],            # an offset and a row stride of 6
    "row": base[2],                      # another view of base's storage
    "whole": base,
    "scalar": torch.tensor(3.5),
    "empty": torch.zeros(0, 3),
    "other": torch.arange(3),
})

save("nested.pt", {
    "model": {"w": torch.ones(2, 2), "layers": [torch.tensor([1.0, 2.0]), torch.tensor([3])]},
    "step": 12, "lr": 1e-3, "name": "run1", "flag": True, "off": False, "big": 2 ** 62, "neg": -7,
    "nothing": None,
    "state": {0: {"step": 3, "exp_avg": torch.full((2,), 0.5)}, 1: {"step": 4}},
    "betas": (0.9, 0.999),
    "holes": [1, None, 3],
    "empty_list": [], "empty_dict": {},
    "deep": [[[{"x": [1, 2]}]]],
})

save("root_tensor.pt", torch.arange(6, dtype=torch.float64).view(2, 3))
save("legacy.pt", {"a": torch.arange(4, dtype=torch.int16), "b": torch.arange(6.0).view(2, 3)[:, 1:],
                   "c": [torch.ones(2, dtype=torch.bfloat16), 5]}, _use_new_zipfile_serialization=False)
save("proto4.pt", {"w": torch.randn(3), "s": "x" * 300}, pickle_protocol=4)

with open(os.path.join(here, "expect.json"), "w") as f:
    json.dump(expect, f, indent=1, sort_keys=True)
    f.write("\n")


# ---- hostile files ----------------------------------------------------------------------
def zip_with(name, pkl):
    """A torch.save-shaped zip whose data.pkl is pkl."""
    with zipfile.ZipFile(os.path.join(here, name), "w", zipfile.ZIP_STORED) as z:
        z.writestr(name[:-3] + "/data.pkl", pkl)
        z.writestr(name[:-3] + "/byteorder", "little")
        z.writestr(name[:-3] + "/version", "3\n")


class System:
    def __reduce__(self):
        return (os.system, ("touch pt_pwned",))


class Eval:
    def __reduce__(self):
        return (eval, ("print('pwned')",))


zip_with("evil_system.pt", pickle.dumps({"w": System()}, protocol=2))
zip_with("evil_eval.pt", pickle.dumps([Eval()], protocol=4))
torch.save(model, os.path.join(here, "whole_module.pt"))

# the os.system file is real: Python's own unpickler runs it
with tempfile.TemporaryDirectory() as d:
    code = "import torch,sys; torch.load(sys.argv[1], weights_only=False)"
    subprocess.run([sys.executable, "-c", code, os.path.join(here, "evil_system.pt")], cwd=d, check=True)
    assert os.path.exists(os.path.join(d, "pt_pwned")), "evil_system.pt did not act"
print("wrote", here)
