"""PyTorch's activations, shape layers, interpolation, pooling, losses and
other layers of lua/zorch/nn/activation.lua, for tests/lua/nn/test_activation.lua:
    python3 tests/lua/nn/gen_activation.py     # writes tests/lua/nn/activation.safetensors

Every case is float64 and names its tensors `case.NAME`: case.in1, case.in2,
... (the inputs, in the call's order; parameters such as PReLU's weight are
inputs too), case.c (the weights of the scalar loss sum(out * c)), case.out,
and case.g1, case.g2, ... (the loss's gradients of the inputs that require
grad), case.idx for pooling indices. Class targets and indices are PyTorch's,
0-based: the Lua test adds 1. The options live in the Lua test too, beside
each case's name."""
import os
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)
out = {}


def leaf(*shape, scale=1.0):
    return (torch.randn(shape) * scale).requires_grad_(True)


def pos_leaf(*shape):
    return (torch.randn(shape).abs() + 0.1).requires_grad_(True)


def case(name, fn, *inputs):
    y = fn(*inputs)
    idx = None
    if isinstance(y, tuple):
        y, idx = y
    c = torch.randn(y.shape)
    grads = [t for t in inputs if t.requires_grad]
    gs = torch.autograd.grad((y * c).sum(), grads, allow_unused=True) if grads and y.requires_grad else []
    k = 0
    for i, t in enumerate(inputs):
        out["%s.in%d" % (name, i + 1)] = t.detach().clone().contiguous()
        if t.requires_grad and y.requires_grad:
            g = gs[k]
            k += 1
            out["%s.g%d" % (name, i + 1)] = (g if g is not None else torch.zeros_like(t)).contiguous()
    out[name + ".out"] = y.detach().clone().contiguous()
    out[name + ".c"] = c
    if idx is not None:
        out[name + ".idx"] = idx.contiguous()


# ---- activations ----
case("glu", lambda x: F.glu(x), leaf(2, 3, 6))
case("glu_dim1", lambda x: F.glu(x, dim=1), leaf(2, 4, 3))
case("softmin", lambda x: F.softmin(x, dim=1), leaf(2, 5, 3))
case("threshold", lambda x: F.threshold(x, 0.1, 20.0), leaf(3, 7))
case("hardshrink", lambda x: F.hardshrink(x), leaf(3, 7))
case("hardshrink_l", lambda x: F.hardshrink(x, 1.1), leaf(3, 7))
case("softshrink", lambda x: F.softshrink(x), leaf(3, 7))
case("softshrink_l", lambda x: F.softshrink(x, 0.8), leaf(3, 7))
case("prelu", lambda x, w: F.prelu(x, w), leaf(2, 3, 4), (torch.rand(3) * 0.5).requires_grad_(True))
case("prelu_one", lambda x, w: F.prelu(x, w), leaf(2, 3, 4), torch.tensor([0.2]).requires_grad_(True))
case("prelu_1d", lambda x, w: F.prelu(x, w), leaf(5), torch.tensor([0.3]).requires_grad_(True))
case("rrelu_eval", lambda x: F.rrelu(x, 0.1, 0.3, training=False), leaf(3, 7))
case("softmax2d", lambda x: nn.Softmax2d()(x), leaf(2, 3, 2, 2))
case("softmax2d_3d", lambda x: nn.Softmax2d()(x), leaf(3, 2, 4))

# ---- shape layers ----
case("pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), leaf(2, 8, 2, 3))
case("pixel_shuffle_3d", lambda x: F.pixel_shuffle(x, 3), leaf(9, 2, 1))
case("pixel_unshuffle", lambda x: F.pixel_unshuffle(x, 2), leaf(2, 2, 4, 6))
case("channel_shuffle", lambda x: nn.ChannelShuffle(3)(x), leaf(2, 6, 2, 2))
case("zero_pad1d", lambda x: nn.ZeroPad1d((1, 2))(x), leaf(2, 3, 4))
case("zero_pad2d", lambda x: nn.ZeroPad2d((1, 0, 2, 1))(x), leaf(1, 2, 3, 3))
case("zero_pad3d", lambda x: nn.ZeroPad3d(1)(x), leaf(1, 2, 2, 2, 2))
case("constant_pad1d", lambda x: nn.ConstantPad1d(2, 3.5)(x), leaf(2, 4))
case("constant_pad2d", lambda x: nn.ConstantPad2d((1, 1, 0, 2), -1.0)(x), leaf(2, 3, 3))
case("constant_pad3d", lambda x: nn.ConstantPad3d((0, 1, 1, 0, 1, 1), 2.0)(x), leaf(1, 2, 2, 2))
case("reflection_pad1d", lambda x: nn.ReflectionPad1d((2, 1))(x), leaf(2, 3, 4))
case("reflection_pad2d", lambda x: nn.ReflectionPad2d(2)(x), leaf(1, 2, 3, 4))
case("replication_pad1d", lambda x: nn.ReplicationPad1d((3, 1))(x), leaf(2, 3, 4))
case("replication_pad2d", lambda x: nn.ReplicationPad2d((1, 2, 2, 0))(x), leaf(1, 2, 3, 3))
case("replication_pad3d", lambda x: nn.ReplicationPad3d(1)(x), leaf(1, 1, 2, 3, 2))
case("circular_pad1d", lambda x: nn.CircularPad1d((1, 2))(x), leaf(2, 3, 4))
case("circular_pad2d", lambda x: nn.CircularPad2d(1)(x), leaf(1, 2, 3, 3))

# ---- interpolation ----
x1d = leaf(2, 3, 5)
x2d = leaf(2, 2, 4, 5)
case("nearest_1d_size", lambda x: F.interpolate(x, size=8), x1d)
case("nearest_1d_scale", lambda x: F.interpolate(x, scale_factor=1.7), x1d)
case("nearest_1d_down", lambda x: F.interpolate(x, size=3), x1d)
case("nearest_2d_scale", lambda x: F.interpolate(x, scale_factor=2), x2d)
case("nearest_2d_size", lambda x: F.interpolate(x, size=(3, 7)), x2d)
case("nearest_exact_1d", lambda x: F.interpolate(x, size=8, mode="nearest-exact"), x1d)
case("nearest_exact_2d", lambda x: F.interpolate(x, scale_factor=(1.5, 0.6), mode="nearest-exact"), x2d)
case("linear_size", lambda x: F.interpolate(x, size=8, mode="linear"), x1d)
case("linear_size_ac", lambda x: F.interpolate(x, size=8, mode="linear", align_corners=True), x1d)
case("linear_scale", lambda x: F.interpolate(x, scale_factor=1.7, mode="linear"), x1d)
case("linear_down", lambda x: F.interpolate(x, size=3, mode="linear"), x1d)
case("bilinear_size", lambda x: F.interpolate(x, size=(6, 7), mode="bilinear"), x2d)
case("bilinear_size_ac", lambda x: F.interpolate(x, size=(6, 7), mode="bilinear", align_corners=True), x2d)
case("bilinear_scale", lambda x: F.interpolate(x, scale_factor=(1.5, 2.3), mode="bilinear"), x2d)
case("bilinear_scale_recompute", lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear",
                                                         recompute_scale_factor=True), x2d)
case("bicubic_size", lambda x: F.interpolate(x, size=(7, 6), mode="bicubic"), x2d)
case("bicubic_size_ac", lambda x: F.interpolate(x, size=(7, 6), mode="bicubic", align_corners=True), x2d)
case("bicubic_down", lambda x: F.interpolate(x, size=(3, 2), mode="bicubic"), x2d)
case("upsample_nearest2d", lambda x: nn.UpsamplingNearest2d(scale_factor=2)(x), x2d)
case("upsample_bilinear2d", lambda x: nn.UpsamplingBilinear2d(size=(5, 8))(x), x2d)
case("upsample_module", lambda x: nn.Upsample(scale_factor=1.5, mode="bilinear")(x), x2d)

# ---- pooling ----
case("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 3, return_indices=True), leaf(2, 3, 7))
case("adaptive_max_pool1d_up", lambda x: F.adaptive_max_pool1d(x, 6), leaf(2, 4))
case("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (2, 3), return_indices=True), leaf(2, 3, 5, 7))
case("adaptive_max_pool2d_3d", lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True), leaf(2, 6, 4))
case("lp_pool1d", lambda x: F.lp_pool1d(x, 2.0, 3, 2), leaf(2, 3, 8))
case("lp_pool1d_p3", lambda x: F.lp_pool1d(x, 3.0, 2, ceil_mode=True), pos_leaf(2, 3, 7))
case("lp_pool2d", lambda x: F.lp_pool2d(x, 2.0, (2, 3), stride=(1, 2)), leaf(2, 2, 4, 7))
case("lp_pool2d_p1", lambda x: F.lp_pool2d(x, 1.0, 2), pos_leaf(1, 2, 4, 4))
case("max_pool1d", lambda x: F.max_pool1d(x, 3, 2, 1), leaf(2, 3, 8))
case("avg_pool1d", lambda x: F.avg_pool1d(x, 3, 2, 1, count_include_pad=False), leaf(2, 3, 8))
case("instance_norm", lambda x, w, b: F.instance_norm(x, weight=w, bias=b), leaf(2, 3, 5), leaf(3), leaf(3))
case("instance_norm_2d", lambda x: F.instance_norm(x, eps=1e-3), leaf(2, 3, 2, 3))

# ---- losses ----
xs = leaf(3, 5)
ys = torch.where(torch.randn(3, 5) > 0, 1.0, -1.0)
out["target.soft_margin"] = ys
for r in ("mean", "sum", "none"):
    case("soft_margin_" + r, lambda x: F.soft_margin_loss(x, ys, reduction=r), xs)
y01 = (torch.randn(3, 5) > 0).double()
wc = torch.rand(5) + 0.5
out["target.multilabel_soft_margin"] = y01
out["weight.classes"] = wc
for r in ("mean", "sum", "none"):
    case("multilabel_soft_margin_" + r, lambda x: F.multilabel_soft_margin_loss(x, y01, reduction=r), xs)
case("multilabel_soft_margin_weight", lambda x: F.multilabel_soft_margin_loss(x, y01, weight=wc), xs)
ym = torch.tensor([2, 0, 4])
out["target.multi_margin"] = ym
for r in ("mean", "sum", "none"):
    case("multi_margin_" + r, lambda x: F.multi_margin_loss(x, ym, reduction=r), xs)
case("multi_margin_p2", lambda x: F.multi_margin_loss(x, ym, p=2, margin=0.7, weight=wc), xs)
case("multi_margin_1d", lambda x: F.multi_margin_loss(x, torch.tensor(3)), leaf(5))
yml = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 2, 0, 0, 0]])
out["target.multilabel_margin"] = yml
for r in ("mean", "sum", "none"):
    case("multilabel_margin_" + r, lambda x: F.multilabel_margin_loss(x, yml, reduction=r), xs)
case("multilabel_margin_1d", lambda x: F.multilabel_margin_loss(x, torch.tensor([4, 1, -1, 0, 0])), leaf(5))

# ---- other layers ----
bw, bb = leaf(4, 3, 5, scale=0.5), leaf(4)
case("bilinear", lambda a, b, w, bias: F.bilinear(a, b, w, bias), leaf(6, 3), leaf(6, 5), bw, bb)
case("bilinear_nobias_3d", lambda a, b, w: F.bilinear(a, b, w), leaf(2, 3, 3), leaf(2, 3, 5), bw)
case("local_response_norm", lambda x: F.local_response_norm(x, 3), leaf(2, 5, 4, scale=3))
case("local_response_norm_4d", lambda x: F.local_response_norm(x, 2, alpha=0.1, beta=0.6, k=2.0),
     leaf(2, 5, 3, 2, scale=2))
case("local_response_norm_5d", lambda x: F.local_response_norm(x, 4, alpha=0.05), leaf(1, 6, 2, 2, 3, scale=2))
case("unfold", lambda x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=(2, 1)), leaf(2, 3, 5, 6))
case("unfold_3d", lambda x: F.unfold(x, 2), leaf(2, 3, 4))
case("fold", lambda x: F.fold(x, (4, 5), (2, 2), stride=(2, 1), padding=(1, 0)), leaf(2, 12, 12))
case("fold_dilation", lambda x: F.fold(x, (5, 5), 2, dilation=2), leaf(8, 9))
case("local_response_norm_wide", lambda x: F.local_response_norm(x, 9, k=0.5), leaf(2, 3, 4, scale=2))
x3d = leaf(1, 2, 3, 4, 2)
case("trilinear_size", lambda x: F.interpolate(x, size=(4, 3, 5), mode="trilinear"), x3d)
case("trilinear_scale_ac", lambda x: F.interpolate(x, scale_factor=1.5, mode="trilinear", align_corners=True), x3d)
case("nearest_3d_scale", lambda x: F.interpolate(x, scale_factor=(2, 0.5, 1.5)), x3d)
case("area_1d", lambda x: F.interpolate(x, size=3, mode="area"), leaf(2, 3, 7))
case("area_2d", lambda x: F.interpolate(x, size=(2, 3), mode="area"), leaf(1, 2, 5, 7))
case("reflection_pad3d", lambda x: nn.ReflectionPad3d((1, 0, 2, 1, 1, 1))(x), leaf(1, 2, 3, 3, 2))
case("circular_pad3d", lambda x: nn.CircularPad3d(1)(x), leaf(2, 2, 3, 2))

save_file(out, os.path.join(os.path.dirname(os.path.abspath(__file__)), "activation.safetensors"))
