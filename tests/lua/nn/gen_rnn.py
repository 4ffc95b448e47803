"""PyTorch's recurrent layers and cells, for tests/lua/nn/test_rnn.lua:
    python3 tests/lua/nn/gen_rnn.py      (writes tests/lua/nn/rnn.safetensors)

Each case builds a module under a fixed seed in float64 (PyTorch's own
initialisation gives the weights), runs it on a random input (and initial
state, where the case gives one), and keeps the outputs, the final state, and
the gradients of the scalar loss
    sum(out * w_out) + sum(h_n * w_h) [+ sum(c_n * w_c)]
(w_* fixed random tensors) w.r.t. the input, the initial state and every
parameter.

The file is safetensors with zorch's "zorch.values" metadata (docs/api.md,
"Saving"), so zorch.load gives the structure back:
    {cases = {{name, kind, args, opts, eval, names, params, x, h0, c0, out, hn,
               cn, w_out, w_h, w_c, grads = {x, h0, c0, params = {...}}}, ...}}
`kind` is the zorch.nn class ("LSTM"), `args` the constructor's positional
arguments, `opts` its options table, `names` the state dict's names in
PyTorch's order; cells have `out` (h') and, for LSTMCell, `cn` (c'), no `hn`.
Without the safetensors package the same bytes are written by hand."""
import json
import os
import struct
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float64)
HERE = os.path.dirname(os.path.abspath(__file__))

# name, class, positional args, options (PyTorch keywords), input shape,
# state: None, or the shapes of h0 (and c0), eval mode
CASES = [
    ("rnn_cell", "RNNCell", (4, 5), {}, (3, 4), [(3, 5)], False),
    ("rnn_cell_relu_nobias", "RNNCell", (4, 5), {"bias": False, "nonlinearity": "relu"}, (3, 4), None, False),
    ("rnn_cell_unbatched", "RNNCell", (4, 5), {}, (4,), [(5,)], False),
    ("lstm_cell", "LSTMCell", (4, 5), {}, (3, 4), [(3, 5), (3, 5)], False),
    ("lstm_cell_unbatched", "LSTMCell", (4, 5), {}, (4,), None, False),
    ("lstm_cell_nobias", "LSTMCell", (4, 5), {"bias": False}, (3, 4), [(3, 5), (3, 5)], False),
    ("gru_cell", "GRUCell", (4, 5), {}, (3, 4), [(3, 5)], False),
    ("gru_cell_unbatched_nobias", "GRUCell", (4, 5), {"bias": False}, (4,), None, False),
    ("gru_cell_unbatched_h0", "GRUCell", (4, 5), {}, (4,), [(5,)], False),
    ("rnn", "RNN", (4, 5), {}, (6, 3, 4), None, False),
    ("rnn_2l_h0", "RNN", (4, 5), {"num_layers": 2}, (6, 3, 4), [(2, 3, 5)], False),
    ("rnn_relu_2l_bi_h0", "RNN", (4, 5), {"num_layers": 2, "nonlinearity": "relu", "bidirectional": True},
     (6, 3, 4), [(4, 3, 5)], False),
    ("rnn_batch_first", "RNN", (4, 5), {"batch_first": True}, (3, 6, 4), [(1, 3, 5)], False),
    ("rnn_unbatched_2l", "RNN", (4, 5), {"num_layers": 2}, (6, 4), [(2, 5)], False),
    ("rnn_nobias_bi", "RNN", (4, 5), {"bias": False, "bidirectional": True}, (6, 3, 4), None, False),
    ("rnn_dropout_eval", "RNN", (4, 5), {"num_layers": 3, "dropout": 0.5}, (6, 3, 4), None, True),
    ("lstm", "LSTM", (4, 5), {}, (6, 3, 4), None, False),
    ("lstm_2l_bi_h0", "LSTM", (4, 5), {"num_layers": 2, "bidirectional": True}, (6, 3, 4),
     [(4, 3, 5), (4, 3, 5)], False),
    ("lstm_batch_first_nobias", "LSTM", (4, 5), {"batch_first": True, "bias": False}, (3, 6, 4),
     [(1, 3, 5), (1, 3, 5)], False),
    ("lstm_unbatched_bi", "LSTM", (4, 5), {"bidirectional": True}, (6, 4), [(2, 5), (2, 5)], False),
    ("lstm_proj_2l_bi", "LSTM", (4, 5), {"num_layers": 2, "bidirectional": True, "proj_size": 3}, (6, 3, 4),
     [(4, 3, 3), (4, 3, 5)], False),
    ("lstm_proj_batch_first", "LSTM", (4, 5), {"proj_size": 2, "batch_first": True}, (3, 6, 4), None, False),
    ("lstm_dropout_eval", "LSTM", (4, 5), {"num_layers": 2, "dropout": 0.3}, (6, 3, 4), None, True),
    ("gru", "GRU", (4, 5), {}, (6, 3, 4), None, False),
    ("gru_2l_bi_h0", "GRU", (4, 5), {"num_layers": 2, "bidirectional": True}, (6, 3, 4), [(4, 3, 5)], False),
    ("gru_batch_first_nobias", "GRU", (4, 5), {"batch_first": True, "bias": False}, (3, 6, 4), [(1, 3, 5)], False),
    ("gru_unbatched_batch_first", "GRU", (4, 5), {"batch_first": True, "num_layers": 2}, (6, 4), [(2, 5)], False),
    ("gru_long", "GRU", (3, 7), {"num_layers": 2}, (17, 2, 3), None, False),
]

tensors = {}


def node(v, path):
    """zorch's metadata node for v (docs/api.md, "Saving"); tensors are stored under `path`."""
    if torch.is_tensor(v):
        tensors[path] = v.detach().contiguous()
        return {"tensor": path}
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if isinstance(v, float):
        return {"float": repr(v)}
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return [node(x, "%s.%d" % (path, i + 1)) for i, x in enumerate(v)]
    if isinstance(v, dict):
        return {"map": {k: node(v[k], "%s.%s" % (path, k)) for k in sorted(v)}}
    raise TypeError(type(v))


def run(name, kind, args, opts, xshape, state, eval_mode, seed):
    torch.manual_seed(seed)
    m = getattr(nn, kind)(*args, **opts)
    if eval_mode:
        m.eval()
    params = dict(m.named_parameters())
    x = torch.randn(xshape, requires_grad=True)
    st = [torch.randn(s, requires_grad=True) for s in state] if state else None
    cell = kind.endswith("Cell")
    if kind.startswith("LSTM"):
        res = m(x, tuple(st)) if st else m(x)
        if cell:
            (out, cn), hn = res, None
        else:
            out, (hn, cn) = res
    else:
        res = m(x, st[0]) if st else m(x)
        out, hn = (res, None) if cell else res
        cn = None
    case = {"name": name, "kind": kind, "args": list(args), "opts": dict(opts), "eval": eval_mode,
            "names": list(m.state_dict().keys()), "params": params, "x": x, "out": out}
    # the weights of the loss, drawn after the forward pass
    torch.manual_seed(seed + 1000)
    case["w_out"] = torch.randn(out.shape)
    loss = (out * case["w_out"]).sum()
    if hn is not None:
        case["hn"], case["w_h"] = hn, torch.randn(hn.shape)
        loss = loss + (hn * case["w_h"]).sum()
    if cn is not None:
        case["cn"], case["w_c"] = cn, torch.randn(cn.shape)
        loss = loss + (cn * case["w_c"]).sum()
    inputs = [x] + (st or []) + list(params.values())
    gs = torch.autograd.grad(loss, inputs)
    grads = {"x": gs[0], "params": {k: g for k, g in zip(params, gs[1 + len(st or []):])}}
    if st:
        case["h0"] = st[0]
        grads["h0"] = gs[1]
        if len(st) > 1:
            case["c0"] = st[1]
            grads["c0"] = gs[2]
    case["grads"] = grads
    return case


def save(path, value):
    meta = {"zorch.values": json.dumps({"version": 1, "value": node(value, "v")}, separators=(",", ":"))}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata=meta)
        return
    except ImportError:
        pass
    # the format by hand: 8 bytes of header length, the JSON header, the data
    header, data, at = {"__metadata__": meta}, [], 0
    for k in sorted(tensors):
        b = tensors[k].numpy().tobytes()
        header[k] = {"dtype": "F64", "shape": list(tensors[k].shape), "data_offsets": [at, at + len(b)]}
        data.append(b)
        at += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(data))


cases = [run(*c, seed=i + 1) for i, c in enumerate(CASES)]
save(os.path.join(HERE, "rnn.safetensors"), {"cases": cases})
