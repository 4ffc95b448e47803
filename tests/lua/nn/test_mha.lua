-- nn.MultiheadAttention and the Transformer encoder/decoder layers: outputs,
-- attention weights and gradients against PyTorch's (lua/nn/mha.safetensors,
-- from lua/nn/gen_mha.py), state-dict names and shapes, dropout in training,
-- and the errors for bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises, close = tap.ok, tap.raises, tap.close
local nn = zorch.nn

local G = zorch.load("lua/nn/mha.safetensors")
local TOL = 1e-9 -- float64 throughout

local function same_shape(a, b) return table.concat(a.shape, ",") == table.concat(b.shape, ",") end

-- Loads case `name`'s state dict into m, runs fwd(m, inputs, masks) in eval
-- mode, and checks the output, the weights and the gradients of
-- sum(out * c.out) + sum(w * c.w) w.r.t. every input and parameter.
local function check(name, m, fwd)
  local prefix = name .. "."
  local sd, inputs, masks, n_golden = {}, {}, {}, 0
  for k, t in pairs(G) do
    if k:sub(1, #prefix) == prefix then
      local kind, rest = k:sub(#prefix + 1):match("^(%a+)%.(.+)$")
      if kind == "p" then sd[rest] = t; n_golden = n_golden + 1
      elseif kind == "in" then
        if t:dtype() == "bool" or rest:match("mask") then masks[rest] = t
        else inputs[rest] = t:clone():requires_grad_(true) end
      end
    end
  end
  m:to("float64")
  -- the state dict has PyTorch's names and shapes, no more, no fewer
  local mine, n_mine, names_ok = m:state_dict(), 0, true
  for k, t in pairs(mine) do
    n_mine = n_mine + 1
    if not (sd[k] and same_shape(t, sd[k])) then names_ok = false; print("#   unexpected " .. k) end
  end
  ok(names_ok and n_mine == n_golden, name .. ": state-dict names and shapes are PyTorch's")
  m:load_state_dict(sd)
  m:eval()
  local out, w = fwd(m, inputs, masks)
  close(out, G[prefix .. "out"], TOL, name .. ": output")
  local loss = (out * G[prefix .. "c.out"]):sum()
  if G[prefix .. "w"] then
    if ok(w ~= nil, name .. ": attention weights returned") then
      close(w, G[prefix .. "w"], TOL, name .. ": attention weights")
      loss = loss + (w * G[prefix .. "c.w"]):sum()
    end
  else
    ok(w == nil, name .. ": no attention weights")
  end
  loss:backward()
  local names = {}
  for k in pairs(inputs) do names[#names + 1] = k end
  table.sort(names)
  for _, k in ipairs(names) do close(inputs[k].grad, G[prefix .. "g." .. k], TOL, name .. ": gradient of " .. k) end
  for k, p in m:named_parameters() do
    if p.grad then close(p.grad, G[prefix .. "g." .. k], TOL, name .. ": gradient of " .. k)
    else ok(false, name .. ": no gradient for " .. k) end
  end
end

local E, H = 8, 2
local function mha(opts, fwd_opts, q, k, v, masks)
  return function(m, i, msk)
    local o = {}
    for a, b in pairs(fwd_opts or {}) do o[a] = b end
    for a, b in pairs(masks or {}) do o[a] = msk[b] end
    return m(i[q], i[k], i[v], o)
  end
end

-- ---- MultiheadAttention ----
check("self", nn.MultiheadAttention(E, H), mha(nil, nil, "x", "x", "x"))
check("cross_kv", nn.MultiheadAttention(E, H, {kdim = 6, vdim = 7}),
  mha(nil, {average_attn_weights = false}, "query", "key", "value"))
check("batch_first", nn.MultiheadAttention(E, H, {batch_first = true}),
  mha(nil, nil, "query", "key", "value", {key_padding_mask = "key_padding_mask"}))
check("float_masks", nn.MultiheadAttention(E, H),
  mha(nil, nil, "query", "key", "value", {key_padding_mask = "key_padding_mask", attn_mask = "attn_mask"}))
check("bool_masks", nn.MultiheadAttention(E, H),
  mha(nil, nil, "query", "key", "value", {key_padding_mask = "key_padding_mask", attn_mask = "attn_mask"}))
check("mask3d", nn.MultiheadAttention(E, H),
  mha(nil, {average_attn_weights = false}, "query", "key", "value", {attn_mask = "attn_mask"}))
check("causal", nn.MultiheadAttention(E, H),
  mha(nil, {is_causal = true, need_weights = false}, "x", "x", "x", {attn_mask = "attn_mask"}))
check("causal_w", nn.MultiheadAttention(E, H), mha(nil, {is_causal = true}, "x", "x", "x", {attn_mask = "attn_mask"}))
check("no_weights", nn.MultiheadAttention(E, H), mha(nil, {need_weights = false}, "query", "key", "value"))
check("unbatched", nn.MultiheadAttention(E, H),
  mha(nil, nil, "query", "key", "value", {key_padding_mask = "key_padding_mask", attn_mask = "attn_mask"}))
check("no_bias", nn.MultiheadAttention(E, 4, {bias = false}), mha(nil, nil, "query", "key", "value"))
check("bias_kv", nn.MultiheadAttention(E, H, {add_bias_kv = true, add_zero_attn = true}),
  mha(nil, nil, "query", "key", "value", {key_padding_mask = "key_padding_mask", attn_mask = "attn_mask"}))

-- ---- encoder and decoder layers ----
local FF = {dim_feedforward = 16, dropout = 0.0}
local function with(extra)
  local o = {}
  for k, v in pairs(FF) do o[k] = v end
  for k, v in pairs(extra or {}) do o[k] = v end
  return o
end
local function enc(names, extra)
  return function(m, i, msk)
    local o = {}
    for _, k in ipairs(names) do o[k] = msk[k] end
    for k, v in pairs(extra or {}) do o[k] = v end
    return m(i.src, o)
  end
end
check("enc_post_relu", nn.TransformerEncoderLayer(E, H, with()), enc({"src_key_padding_mask"}))
check("enc_pre_gelu", nn.TransformerEncoderLayer(E, H, with{activation = "gelu", batch_first = true,
  norm_first = true, layer_norm_eps = 1e-6}), enc({"src_mask"}))
check("enc_post_gelu_nobias", nn.TransformerEncoderLayer(E, H, with{activation = "gelu", bias = false}), enc({}))
check("enc_pre_relu_causal", nn.TransformerEncoderLayer(E, H, with{norm_first = true}),
  enc({"src_mask"}, {is_causal = true}))
check("encoder2", nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, with()), 2, {norm = nn.LayerNorm(E)}),
  enc({"mask", "src_key_padding_mask"}))

local function dec(names, extra)
  return function(m, i, msk)
    local o = {}
    for _, k in ipairs(names) do o[k] = msk[k] end
    for k, v in pairs(extra or {}) do o[k] = v end
    return m(i.tgt, i.memory, o)
  end
end
check("dec_post_relu", nn.TransformerDecoderLayer(E, H, with()), dec({"tgt_mask", "memory_key_padding_mask"}))
check("dec_pre_gelu", nn.TransformerDecoderLayer(E, H, with{activation = "gelu", batch_first = true,
  norm_first = true}), dec({"tgt_key_padding_mask", "memory_mask"}))
check("decoder2", nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, with{norm_first = true}), 2,
  {norm = nn.LayerNorm(E)}), dec({"tgt_mask"}, {tgt_is_causal = true}))

-- ---- the whole Transformer ----
check("transformer", nn.Transformer{d_model = E, nhead = H, num_encoder_layers = 2, num_decoder_layers = 1,
  dim_feedforward = 16, dropout = 0.0, batch_first = true}, function(m, i, msk)
    return m(i.src, i.tgt, {tgt_mask = msk.tgt_mask, src_key_padding_mask = msk.src_key_padding_mask,
      memory_key_padding_mask = msk.memory_key_padding_mask, tgt_is_causal = true})
  end)

-- ---- state dicts: PyTorch's order, and a stack's deep copies ----
local function order(m) return table.concat(getmetatable(m:state_dict()).order, " ") end
ok(order(nn.MultiheadAttention(E, H, {kdim = 6, vdim = 7, add_bias_kv = true})) ==
  "q_proj_weight k_proj_weight v_proj_weight in_proj_bias bias_k bias_v out_proj.weight out_proj.bias",
  "MultiheadAttention: state-dict order is PyTorch's (separate projections, bias_k/bias_v)")
ok(order(nn.MultiheadAttention(E, H, {bias = false})) == "in_proj_weight out_proj.weight",
  "MultiheadAttention: bias = false has no in_proj_bias and no out_proj.bias")
ok(order(nn.TransformerDecoderLayer(E, H, {dim_feedforward = 16})) == table.concat({
  "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
  "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight",
  "multihead_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
  "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"}, " "),
  "TransformerDecoderLayer: state-dict order is PyTorch's")
do
  local m = nn.MultiheadAttention(E, H)
  ok(m.in_proj_bias:abs():sum():item() == 0 and m.out_proj.bias:abs():sum():item() == 0,
    "MultiheadAttention: in_proj_bias and out_proj.bias start at zero")
  local layer = nn.TransformerEncoderLayer(E, H, {dim_feedforward = 16})
  local enc2 = nn.TransformerEncoder(layer, 2)
  ok(enc2.layers[1].linear1.weight ~= layer.linear1.weight and enc2.layers[1].linear1.weight ~=
    enc2.layers[2].linear1.weight and zorch.equal(enc2.layers[2].linear1.weight, layer.linear1.weight),
    "TransformerEncoder: the layers are separate copies of the layer")
  ok(#enc2:parameters() == 2 * #layer:parameters(), "TransformerEncoder: each copy has its own parameters")
  ok(getmetatable(enc2:state_dict()).order[1] == "layers.0.self_attn.in_proj_weight",
    "TransformerEncoder: layers named layers.0, layers.1, ...")
end

-- ---- dropout: training draws, eval does not ----
do
  local x = zorch.randn(4, 3, E)
  local m = nn.MultiheadAttention(E, H, {dropout = 0.5})
  local a, wa = m(x, x, x)
  local b, wb = m(x, x, x)
  ok(not zorch.allclose(a, b) and not zorch.allclose(wa, wb), "MultiheadAttention: training with dropout > 0 varies")
  local c = m(x, x, x, {need_weights = false})
  ok(not zorch.allclose(c, a), "MultiheadAttention: training dropout without weights varies too")
  m:eval()
  local e1, we1 = m(x, x, x)
  local e2 = m(x, x, x, {need_weights = false})
  ok(zorch.allclose(e1, (m(x, x, x))) and zorch.allclose(e1, e2, 1e-5, 1e-6),
    "MultiheadAttention: eval ignores dropout (with and without weights)")
  ok(zorch.allclose(we1:sum(-1), zorch.ones({3, 4}), 1e-5, 1e-6), "MultiheadAttention: eval weights sum to 1")
  for _, cls in ipairs({"TransformerEncoderLayer", "TransformerDecoderLayer"}) do
    local l = nn[cls](E, H, {dim_feedforward = 16}) -- dropout 0.1 by default
    local run = cls == "TransformerEncoderLayer" and function() return l(x) end or function() return l(x, x) end
    ok(not zorch.allclose(run(), run()), cls .. ": training with the default dropout varies")
    l:eval()
    ok(zorch.equal(run(), run()), cls .. ": eval gives the same output twice")
  end
end

-- ---- unbatched and batch_first agree with the batched layout ----
do
  local m = nn.MultiheadAttention(E, H):to("float64")
  local q, k = zorch.randn({4, 1, E}, {dtype = "float64"}), zorch.randn({5, 1, E}, {dtype = "float64"})
  local o, w = m(q, k, k)
  local ou, wu = m(q:squeeze(2), k:squeeze(2), k:squeeze(2))
  ok(same_shape(ou, q:squeeze(2)) and same_shape(wu, zorch.zeros(4, 5)) and zorch.allclose(ou, o:squeeze(2)) and
    zorch.allclose(wu, w:squeeze(1)), "MultiheadAttention: unbatched (L, E) input gives (L, E) and (L, S)")
  local mask = nn.Transformer.generate_square_subsequent_mask(3)
  ok(mask:dtype() == "float32" and mask[1][2]:item() == -math.huge and mask[2][1]:item() == 0 and
    mask[3][3]:item() == 0, "Transformer.generate_square_subsequent_mask: -inf above the diagonal, 0 elsewhere")
end

-- ---- errors ----
local x = zorch.randn(4, 3, E)
local m = nn.MultiheadAttention(E, H)
raises("MultiheadAttention: embed_dim not divisible by num_heads", function() nn.MultiheadAttention(8, 3) end,
  "nn.MultiheadAttention", "embed_dim 8", "num_heads 3")
raises("MultiheadAttention: num_heads must be a positive integer", function() nn.MultiheadAttention(8, 0) end,
  "nn.MultiheadAttention: num_heads must be a positive integer, got 0")
raises("MultiheadAttention: unknown option", function() nn.MultiheadAttention(8, 2, {add_bias = true}) end,
  "nn.MultiheadAttention: unknown option 'add_bias'", "add_bias_kv")
raises("MultiheadAttention: dropout out of range", function() nn.MultiheadAttention(8, 2, {dropout = 1.5}) end,
  "nn.MultiheadAttention: dropout must be a number in [0, 1], got 1.5")
raises("MultiheadAttention: kdim must be an integer", function() nn.MultiheadAttention(8, 2, {kdim = "6"}) end,
  "nn.MultiheadAttention: kdim must be a positive integer")
raises("MultiheadAttention: unknown forward option", function() m(x, x, x, {mask = x}) end,
  "nn.MultiheadAttention: unknown option 'mask'", "key_padding_mask")
raises("MultiheadAttention: value missing", function() m(x, x) end,
  "nn.MultiheadAttention: value must be a tensor, got nil")
raises("MultiheadAttention: 4-d query", function() m(x:unsqueeze(1), x, x) end,
  "nn.MultiheadAttention", "query", "(1, 4, 3, 8)")
raises("MultiheadAttention: key of another rank", function() m(x, x[1], x) end,
  "nn.MultiheadAttention", "query (4, 3, 8)", "key (3, 8)")
raises("MultiheadAttention: query's last size", function() m(zorch.randn(4, 3, 7), x, x) end,
  "nn.MultiheadAttention: query (4, 3, 7) must have embed_dim = 8 as its last size")
raises("MultiheadAttention: value's last size with vdim", function()
  nn.MultiheadAttention(E, H, {vdim = 5})(x, x, x) end, "nn.MultiheadAttention: value (4, 3, 8) must have vdim = 5")
raises("MultiheadAttention: key and value lengths differ", function() m(x, x, zorch.randn(6, 3, E)) end,
  "nn.MultiheadAttention: key (4, 3, 8) and value (6, 3, 8) must have the same sequence and batch sizes")
raises("MultiheadAttention: batch sizes differ", function()
  local kv = zorch.randn(5, 2, E); m(x, kv, kv) end,
  "nn.MultiheadAttention: query (4, 3, 8) and key (5, 2, 8) must have the same batch size")
raises("MultiheadAttention: 2-d attn_mask of the wrong shape", function() m(x, x, x, {attn_mask = zorch.zeros(4, 5)}) end,
  "nn.MultiheadAttention: the 2-d attn_mask is (4, 5) but should be (4, 4)")
raises("MultiheadAttention: 3-d attn_mask of the wrong shape", function()
  m(x, x, x, {attn_mask = zorch.zeros(2, 4, 4)}) end,
  "nn.MultiheadAttention: the 3-d attn_mask is (2, 4, 4) but should be (6, 4, 4)")
raises("MultiheadAttention: 1-d attn_mask", function() m(x, x, x, {attn_mask = zorch.zeros(4)}) end,
  "nn.MultiheadAttention: attn_mask must be 2-d or 3-d, got (4)")
raises("MultiheadAttention: key_padding_mask of the wrong shape", function()
  m(x, x, x, {key_padding_mask = zorch.zeros({4, 3}, {dtype = "bool"})}) end,
  "nn.MultiheadAttention: key_padding_mask (4, 3) must be (batch, source length) = (3, 4)")
raises("MultiheadAttention: integer masks", function()
  m(x, x, x, {attn_mask = zorch.zeros({4, 4}, {dtype = "int64"})}) end,
  "nn.MultiheadAttention: only bool and floating-point attn_mask are supported, got int64 (4, 4)")
raises("MultiheadAttention: is_causal without attn_mask", function() m(x, x, x, {is_causal = true}) end,
  "nn.MultiheadAttention: is_causal needs attn_mask")
raises("MultiheadAttention: need_weights must be a boolean", function() m(x, x, x, {need_weights = 0}) end,
  "nn.MultiheadAttention: need_weights must be true or false, got 0")
raises("TransformerEncoderLayer: unknown option", function() nn.TransformerEncoderLayer(E, H, {nheads = 2}) end,
  "nn.TransformerEncoderLayer: unknown option 'nheads'", "dim_feedforward")
raises("TransformerEncoderLayer: unknown activation", function()
  nn.TransformerEncoderLayer(E, H, {activation = "tanh"}) end,
  "nn.TransformerEncoderLayer: activation must be \"relu\", \"gelu\", a function or a module, got \"tanh\"")
raises("TransformerEncoderLayer: d_model not divisible by nhead", function() nn.TransformerEncoderLayer(E, 3) end,
  "nn.TransformerEncoderLayer: d_model 8 must be divisible by nhead 3")
local layer = nn.TransformerEncoderLayer(E, H, {dim_feedforward = 16})
raises("TransformerEncoderLayer: a mask by position", function() layer(x, zorch.zeros(4, 4)) end,
  "nn.TransformerEncoderLayer: masks go in the options table by name", "src_mask", "(4, 4)")
raises("TransformerEncoderLayer: unknown forward option", function() layer(x, {mask = zorch.zeros(4, 4)}) end,
  "nn.TransformerEncoderLayer: unknown option 'mask'", "src_mask")
raises("TransformerEncoderLayer: src's last size", function() layer(zorch.randn(4, 3, 6)) end,
  "nn.MultiheadAttention: query (4, 3, 6) must have embed_dim = 8")
raises("TransformerEncoder: not a layer", function() nn.TransformerEncoder(3, 2) end,
  "nn.TransformerEncoder: argument 1 must be a nn.TransformerEncoderLayer")
raises("TransformerEncoder: num_layers", function() nn.TransformerEncoder(layer, 0) end,
  "nn.TransformerEncoder: num_layers must be a positive integer, got 0")
raises("TransformerEncoder: unknown option", function() nn.TransformerEncoder(layer, 2, {norms = 1}) end,
  "nn.TransformerEncoder: unknown option 'norms'")
raises("TransformerEncoder: norm not a module", function() nn.TransformerEncoder(layer, 2, {norm = 1}) end,
  "nn.TransformerEncoder: norm must be a module")
raises("TransformerDecoderLayer: memory missing", function()
  nn.TransformerDecoderLayer(E, H, {dim_feedforward = 16})(x) end,
  "nn.TransformerDecoderLayer: memory must be a tensor, got nil")
raises("TransformerDecoder: unknown forward option", function()
  nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, {dim_feedforward = 16}), 1)(x, x, {src_mask = 1}) end,
  "nn.TransformerDecoder: unknown option 'src_mask'", "tgt_mask")

do
  local t = nn.Transformer{d_model = E, nhead = H, num_encoder_layers = 1, num_decoder_layers = 1, dim_feedforward = 16}
  raises("Transformer: batch sizes differ", function() t(zorch.randn(5, 3, E), zorch.randn(4, 2, E)) end,
    "nn.Transformer: the batch sizes of src (5, 3, 8) and tgt (4, 2, 8) (dim 2) must be equal")
  raises("Transformer: feature sizes", function() t(zorch.randn(5, 3, E), zorch.randn(4, 3, 6)) end,
    "nn.Transformer: src (5, 3, 8) and tgt (4, 3, 6) must have d_model = 8 as their last size")
  raises("Transformer: unknown option", function() nn.Transformer{d_model = E, nheads = 2} end,
    "nn.Transformer: unknown option 'nheads'", "num_encoder_layers")
  raises("Transformer: custom_encoder not a module", function() nn.Transformer{d_model = E, nhead = H,
    dim_feedforward = 16, custom_encoder = 1} end, "nn.Transformer: custom_encoder must be a module, got number")
  ok(#t.encoder.layers == 1 and t.encoder.norm ~= nil and t.decoder.norm ~= nil and
    t.encoder.layers[1].self_attn.in_proj_bias:abs():sum():item() == 0,
    "Transformer: encoder and decoder stacks with final norms; biases stay zero")
end

tap.done()
