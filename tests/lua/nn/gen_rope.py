"""Llama's rotary tables as Hugging Face's transformers makes them, for
tests/lua/nn/test_rope.lua:
    python3 tests/lua/nn/gen_rope.py > tests/lua/nn/rope.txt

LlamaRotaryEmbedding in float32: inv_freq from _compute_default_rope_parameters
or _compute_llama3_parameters, freqs = positions x inv_freq, emb = cat(freqs,
freqs), cos(emb) and sin(emb). Lines: `case key values...`, flattened."""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from fixed_cases import emit  # noqa: E402


def default_inv_freq(d, base):
    return 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.int64).to(dtype=torch.float) / d))


def llama3_inv_freq(d, base, factor, low_freq_factor, high_freq_factor, old_context_len):
    inv_freq = default_inv_freq(d, base)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)


def tables(inv_freq, position_ids):  # position_ids (batch, seq), as LlamaRotaryEmbedding.forward
    inv_freq_expanded = inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
    position_ids_expanded = position_ids[:, None, :].float()
    freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


inv = default_inv_freq(8, 10000.0)
cos, sin = tables(inv, torch.arange(7)[None])
emit("default", "inv_freq", inv)
emit("default", "cos", cos[0])
emit("default", "sin", sin[0])

inv = llama3_inv_freq(64, 500000.0, 8.0, 1.0, 4.0, 8192)
cos, sin = tables(inv, torch.tensor([[0, 1, 2, 40], [7, 9, 60, 100]]))
emit("llama3", "inv_freq", inv)
emit("llama3", "cos", cos)
emit("llama3", "sin", sin)
