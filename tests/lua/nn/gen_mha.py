"""PyTorch's nn.MultiheadAttention, TransformerEncoderLayer/Encoder,
TransformerDecoderLayer/Decoder and Transformer, for tests/lua/nn/test_mha.lua:
    python3 tests/lua/nn/gen_mha.py     # writes tests/lua/nn/mha.safetensors

Every case is float64, dropout 0, and names its tensors `case.NAME`:
    case.p.<param>   the module's state dict (random values, biases included)
    case.in.<name>   inputs (query/key/value, src, tgt, memory) and masks
    case.c.out, case.c.w   the weights of the scalar loss
                     sum(out * c.out) + sum(attn_weights * c.w)
    case.out, case.w the output and attention weights (w when returned)
    case.g.<name>    the loss's gradient w.r.t. each input and parameter
The module's options live in the Lua test, beside each case's name."""
import os
import torch
import torch.nn as nn
from safetensors.torch import save_file

torch.set_default_dtype(torch.float64)
torch.manual_seed(0)
E, H, L, S, N = 8, 2, 4, 5, 3
out = {}


def randomize(m):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape) * 0.4)
        for name, p in m.named_parameters():
            if name.endswith("norm1.weight") or name.endswith("norm2.weight") or name.endswith("norm3.weight") \
               or name == "norm.weight":
                p.add_(1.0)


def run(name, m, fwd, inputs, masks=None):
    """fwd(m, inputs, masks) gives the output, or (output, weights)."""
    m.eval()
    randomize(m)
    for k, v in m.state_dict().items():
        out["%s.p.%s" % (name, k)] = v.clone()
    inputs = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    masks = masks or {}
    for k, v in list(inputs.items()) + list(masks.items()):
        out["%s.in.%s" % (name, k)] = v.detach().clone()
    r = fwd(m, inputs, masks)
    o, w = (r if isinstance(r, tuple) else (r, None))
    c = torch.randn(o.shape)
    out[name + ".out"], out[name + ".c.out"] = o.detach().clone(), c
    loss = (o * c).sum()
    if w is not None:
        cw = torch.randn(w.shape)
        out[name + ".w"], out[name + ".c.w"] = w.detach().clone(), cw
        loss = loss + (w * cw).sum()
    params = dict(m.named_parameters())
    leaves = list(inputs.items()) + list(params.items())
    gs = torch.autograd.grad(loss, [t for _, t in leaves], allow_unused=True)
    for (k, t), g in zip(leaves, gs):
        out["%s.g.%s" % (name, k)] = g if g is not None else torch.zeros_like(t)


def kpm(n, s):
    """a bool key padding mask (n, s): row i hides its last i keys (row 0 none)"""
    m = torch.zeros(n, s, dtype=torch.bool)
    for i in range(n):
        if i > 0:
            m[i, s - i:] = True
    return m


def causal(n):
    return torch.triu(torch.ones(n, n, dtype=torch.bool), 1)


def mha(q, k, v, **kw):
    return lambda m, i, msk: m(i[q], i[k], i[v], **{a: msk[b] for a, b in kw.get("masks", {}).items()},
                               **kw.get("opts", {}))


x = torch.randn(L, N, E)
q, k, v = torch.randn(L, N, E), torch.randn(S, N, E), torch.randn(S, N, E)

# self-attention: one tensor as query, key and value
run("self", nn.MultiheadAttention(E, H), lambda m, i, _: m(i["x"], i["x"], i["x"]), {"x": x})
# cross-attention with kdim/vdim: separate projection weights, per-head weights
run("cross_kv", nn.MultiheadAttention(E, H, kdim=6, vdim=7),
    mha("query", "key", "value", opts={"average_attn_weights": False}),
    {"query": q, "key": torch.randn(S, N, 6), "value": torch.randn(S, N, 7)})
# batch_first with a bool key padding mask
run("batch_first", nn.MultiheadAttention(E, H, batch_first=True),
    mha("query", "key", "value", masks={"key_padding_mask": "key_padding_mask"}),
    {"query": q.transpose(0, 1), "key": k.transpose(0, 1), "value": v.transpose(0, 1)},
    {"key_padding_mask": kpm(N, S)})
# float key padding mask and float 2-d attn_mask (additive)
run("float_masks", nn.MultiheadAttention(E, H),
    mha("query", "key", "value", masks={"key_padding_mask": "key_padding_mask", "attn_mask": "attn_mask"}),
    {"query": q, "key": k, "value": v},
    {"key_padding_mask": torch.randn(N, S), "attn_mask": torch.randn(L, S)})
# bool 2-d attn_mask with a bool key padding mask
am = torch.zeros(L, S, dtype=torch.bool)
am[0, 1] = am[2, 3] = am[3, 0] = True
run("bool_masks", nn.MultiheadAttention(E, H),
    mha("query", "key", "value", masks={"key_padding_mask": "key_padding_mask", "attn_mask": "attn_mask"}),
    {"query": q, "key": k, "value": v},
    {"key_padding_mask": kpm(N, S), "attn_mask": am})
# 3-d float attn_mask (N * H, L, S), per-head weights
run("mask3d", nn.MultiheadAttention(E, H),
    mha("query", "key", "value", masks={"attn_mask": "attn_mask"}, opts={"average_attn_weights": False}),
    {"query": q, "key": k, "value": v}, {"attn_mask": torch.randn(N * H, L, S)})
# causal: is_causal with its mask, without weights (PyTorch's fused path) and with
run("causal", nn.MultiheadAttention(E, H),
    lambda m, i, msk: m(i["x"], i["x"], i["x"], attn_mask=msk["attn_mask"], is_causal=True, need_weights=False)[0],
    {"x": x}, {"attn_mask": causal(L)})
run("causal_w", nn.MultiheadAttention(E, H),
    mha("x", "x", "x", masks={"attn_mask": "attn_mask"}, opts={"is_causal": True}),
    {"x": x}, {"attn_mask": causal(L)})
# need_weights false: the output only
run("no_weights", nn.MultiheadAttention(E, H),
    lambda m, i, _: m(i["query"], i["key"], i["value"], need_weights=False)[0],
    {"query": q, "key": k, "value": v})
# unbatched input: (L, E), key padding mask (S), 3-d attn_mask (H, L, S)
run("unbatched", nn.MultiheadAttention(E, H),
    mha("query", "key", "value", masks={"key_padding_mask": "key_padding_mask", "attn_mask": "attn_mask"}),
    {"query": q[:, 0], "key": k[:, 0], "value": v[:, 0]},
    {"key_padding_mask": torch.tensor([False, False, True, False, True]), "attn_mask": torch.randn(H, L, S)})
# no biases; four heads
run("no_bias", nn.MultiheadAttention(E, 4, bias=False), mha("query", "key", "value"),
    {"query": q, "key": k, "value": v})
# bias_k/bias_v and a zero attention slot, with both masks
run("bias_kv", nn.MultiheadAttention(E, H, add_bias_kv=True, add_zero_attn=True),
    mha("query", "key", "value", masks={"key_padding_mask": "key_padding_mask", "attn_mask": "attn_mask"}),
    {"query": q, "key": k, "value": v},
    {"key_padding_mask": kpm(N, S), "attn_mask": torch.randn(L, S)})

# ---- encoder layers ----
def enc(masks):
    return lambda m, i, msk: m(i["src"], **{a: msk[a] for a in masks})


run("enc_post_relu", nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0),
    enc(["src_key_padding_mask"]), {"src": x}, {"src_key_padding_mask": kpm(N, L)})
run("enc_pre_gelu", nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True, layer_norm_eps=1e-6),
    enc(["src_mask"]), {"src": x.transpose(0, 1)}, {"src_mask": torch.randn(L, L)})
run("enc_post_gelu_nobias", nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0, activation="gelu",
                                                       bias=False), enc([]), {"src": x})
run("enc_pre_relu_causal", nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0, norm_first=True),
    lambda m, i, msk: m(i["src"], src_mask=msk["src_mask"], is_causal=True), {"src": x}, {"src_mask": causal(L)})
layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=16, dropout=0.0)
run("encoder2", nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E), enable_nested_tensor=False),
    lambda m, i, msk: m(i["src"], mask=msk["mask"], src_key_padding_mask=msk["src_key_padding_mask"]),
    {"src": x}, {"mask": causal(L), "src_key_padding_mask": kpm(N, L)})

# ---- decoder layers ----
mem = torch.randn(S, N, E)
run("dec_post_relu", nn.TransformerDecoderLayer(E, H, dim_feedforward=16, dropout=0.0),
    lambda m, i, msk: m(i["tgt"], i["memory"], tgt_mask=msk["tgt_mask"],
                        memory_key_padding_mask=msk["memory_key_padding_mask"]),
    {"tgt": x, "memory": mem}, {"tgt_mask": causal(L), "memory_key_padding_mask": kpm(N, S)})
run("dec_pre_gelu", nn.TransformerDecoderLayer(E, H, dim_feedforward=16, dropout=0.0, activation="gelu",
                                               batch_first=True, norm_first=True),
    lambda m, i, msk: m(i["tgt"], i["memory"], tgt_key_padding_mask=msk["tgt_key_padding_mask"],
                        memory_mask=msk["memory_mask"]),
    {"tgt": x.transpose(0, 1), "memory": mem.transpose(0, 1)},
    {"tgt_key_padding_mask": kpm(N, L), "memory_mask": torch.randn(L, S)})
dlayer = nn.TransformerDecoderLayer(E, H, dim_feedforward=16, dropout=0.0, norm_first=True)
run("decoder2", nn.TransformerDecoder(dlayer, 2, norm=nn.LayerNorm(E)),
    lambda m, i, msk: m(i["tgt"], i["memory"], tgt_mask=msk["tgt_mask"], tgt_is_causal=True),
    {"tgt": x, "memory": mem}, {"tgt_mask": causal(L)})

# ---- the whole Transformer ----
run("transformer", nn.Transformer(d_model=E, nhead=H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=16,
                                  dropout=0.0, batch_first=True),
    lambda m, i, msk: m(i["src"], i["tgt"], tgt_mask=msk["tgt_mask"], src_key_padding_mask=msk["src_key_padding_mask"],
                        memory_key_padding_mask=msk["memory_key_padding_mask"], tgt_is_causal=True),
    {"src": mem.transpose(0, 1), "tgt": x.transpose(0, 1)},
    {"tgt_mask": causal(L), "src_key_padding_mask": kpm(N, S), "memory_key_padding_mask": kpm(N, S)})

save_file({k: v.contiguous() for k, v in out.items()},
          os.path.join(os.path.dirname(os.path.abspath(__file__)), "mha.safetensors"))
