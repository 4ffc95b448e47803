"""PyTorch's normalisation and 1-d layers, for tests/lua/nn/test_norm.lua:
    python3 tests/lua/nn/gen_norm.py > tests/lua/nn/norm.txt

Inputs are fixed formulas the Lua test computes too: fixed(shape, k) is
sin(0.37 k i + k) over the flattened index i = 0, 1, ... (float64).
Lines: `case out values...` (the output, flattened), `case gN values...` (the
gradient of input N of sum(out * c), c = 1 + 0.1 i over the output's flattened
index), `sd_NAME key shape...` (state-dict names and shapes)."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixed_cases import case, emit, fixed, leaf  # noqa: E402

torch.set_default_dtype(torch.float64)


# ---- normalisation and 1-d layers ----
xn = leaf(fixed((2, 6, 5), 22) * 3 + 1)
gw, gb = leaf(fixed((6,), 23) + 1), leaf(fixed((6,), 24))
case("group_norm", lambda u, ww, bb: F.group_norm(u, 3, ww, bb), xn, gw, gb)
x4 = leaf(fixed((2, 4, 3, 2), 25) * 2)
case("group_norm_4d", lambda u: F.group_norm(u, 2, eps=1e-3), x4)
rw = leaf(fixed((5,), 26) + 1)
case("rms_norm", lambda u, ww: F.rms_norm(u, [5], ww), xn, rw)
case("rms_norm_eps", lambda u: F.rms_norm(u, [6, 5], eps=1e-3), xn)
case("instance_norm1d", lambda u: F.instance_norm(u), xn)
case("instance_norm2d_affine", lambda u, ww, bb: F.instance_norm(u, weight=ww, bias=bb),
     x4, leaf(fixed((4,), 27) + 1), leaf(fixed((4,), 28)))
cw, cb = leaf(fixed((4, 3, 3), 29) * 0.5), leaf(fixed((4,), 30))
xc = leaf(fixed((2, 6, 7), 31))
case("conv1d", lambda u, ww, bb: F.conv1d(u, ww, bb, stride=2, padding=1, dilation=1, groups=2), xc, cw, cb)
case("conv1d_dil", lambda u, ww: F.conv1d(u, ww, None, padding=2, dilation=2), leaf(fixed((2, 3, 7), 32)),
     leaf(fixed((4, 3, 3), 33)))
case("max_pool1d", lambda u: F.max_pool1d(u, 3, stride=2, padding=1), xc)
case("avg_pool1d", lambda u: F.avg_pool1d(u, 3, stride=2, padding=1, count_include_pad=False), xc)
case("avg_pool1d_ceil", lambda u: F.avg_pool1d(u, 2, ceil_mode=True), xc)
case("adaptive_avg_pool1d", lambda u: F.adaptive_avg_pool1d(u, 3), xc)

xs = (fixed((2, 3, 4), 34) * 1e-4).float().requires_grad_(True)
case("rms_norm_f32", lambda u: F.rms_norm(u, [4]), xs)  # eps: float32's machine epsilon

inorm = torch.nn.InstanceNorm1d(6, momentum=0.3, track_running_stats=True, affine=True)
for _ in range(2):
    inorm(xn)
emit("instance_norm_running", "mean", inorm.running_mean)
emit("instance_norm_running", "var", inorm.running_var)
inorm.eval()
case("instance_norm_eval", lambda u: inorm(u), xn)


# state dicts: `sd_NAME param sizes...` (each tensor's shape in PyTorch's module)
def shapes(name, m):
    for k, v in m.state_dict().items():
        print("sd_" + name, k, " ".join(str(s) for s in v.shape))


shapes("conv1d", torch.nn.Conv1d(6, 4, 3, groups=2))
shapes("conv1d_nobias", torch.nn.Conv1d(3, 5, 2, bias=False))
shapes("group_norm", torch.nn.GroupNorm(3, 6))
shapes("rms_norm", torch.nn.RMSNorm([4, 5]))
shapes("instance_norm", torch.nn.InstanceNorm2d(4, affine=True, track_running_stats=True))
shapes("parameter_list", torch.nn.ParameterList([torch.zeros(2, 3), torch.zeros(4)]))

# BatchNorm3d: a training step (output, input gradient, running statistics), then eval
bn3 = torch.nn.BatchNorm3d(3)
with torch.no_grad():
    bn3.weight.copy_(fixed((3,), 31) + 1)
    bn3.bias.copy_(fixed((3,), 32))
case("batch_norm3d", bn3, leaf(fixed((2, 3, 2, 3, 2), 30) * 2 + 0.5))
emit("batch_norm3d", "running_mean", bn3.running_mean)
emit("batch_norm3d", "running_var", bn3.running_var)
bn3.eval()
case("batch_norm3d_eval", bn3, leaf(fixed((2, 3, 2, 2, 2), 33)))
