"""PyTorch's transposed and 3-d convolutions and 3-d pools, for tests/lua/nn/test_volume.lua:
    python3 tests/lua/nn/gen_volume.py > tests/lua/nn/volume.txt

Inputs and lines as in gen_norm.py (fixed_cases: `case out ...`, `case gN ...`,
`sd_NAME key shape...`)."""
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixed_cases import case, fixed, leaf  # noqa: E402

torch.set_default_dtype(torch.float64)

xt = leaf(fixed((2, 4, 5, 6), 40))
wt, bt = leaf(fixed((4, 3, 3, 2), 41) * 0.5), leaf(fixed((6,), 42))
case("conv_transpose2d", lambda u, ww, bb: F.conv_transpose2d(u, ww, bb, stride=(2, 3), padding=(1, 2),
     output_padding=(1, 0), dilation=(2, 1), groups=2), xt, wt, bt)
case("conv_transpose2d_plain", lambda u, ww: F.conv_transpose2d(u, ww), leaf(fixed((1, 2, 3, 4), 43)),
     leaf(fixed((2, 3, 2, 2), 44)))
case("conv_transpose2d_crop", lambda u, ww: F.conv_transpose2d(u, ww, stride=2, padding=3),
     leaf(fixed((1, 2, 4, 4), 45)), leaf(fixed((2, 1, 3, 3), 46)))

xv = leaf(fixed((2, 4, 5, 6, 7), 47))
case("conv3d", lambda u, ww, bb: F.conv3d(u, ww, bb, stride=(2, 1, 2), padding=(1, 1, 0), dilation=(2, 1, 1),
     groups=2), xv, leaf(fixed((6, 2, 2, 3, 2), 48) * 0.5), leaf(fixed((6,), 49)))
case("conv3d_plain", lambda u, ww: F.conv3d(u, ww), leaf(fixed((1, 2, 3, 4, 4), 50)),
     leaf(fixed((3, 2, 2, 2, 3), 51)))
case("max_pool3d", lambda u: F.max_pool3d(u, 2), xv)
case("max_pool3d_pad", lambda u: F.max_pool3d(u, (3, 2, 3), stride=2, padding=1, dilation=(1, 2, 1), ceil_mode=True), xv)
case("avg_pool3d", lambda u: F.avg_pool3d(u, 3, stride=2, padding=1), xv)
case("avg_pool3d_excl_ceil", lambda u: F.avg_pool3d(u, (2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 0), ceil_mode=True,
     count_include_pad=False), xv)


def shapes(name, m):
    for k, v in m.state_dict().items():
        print("sd_" + name, k, " ".join(str(s) for s in v.shape))


shapes("conv_transpose2d", torch.nn.ConvTranspose2d(4, 6, (3, 2), groups=2))
shapes("conv3d", torch.nn.Conv3d(4, 6, (2, 3, 2), groups=2, bias=False))
