-- nn.MultiheadAttention and the Transformer encoder/decoder layers: outputs,
-- attention weights and gradients against PyTorch's (golden/mha.safetensors,
-- from golden/gen_mha.py), state-dict names and shapes, dropout in training,
-- and the errors for bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises, close = tap.ok, tap.raises, tap.close
local nn = zorch.nn

local G = zorch.load("golden/mha.safetensors")
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
