-- zorch.scaled_dot_product_attention (nn.functional's name): outputs and the
-- gradients of q, k and v against PyTorch's F.scaled_dot_product_attention
-- (golden/sdpa.safetensors, from golden/gen_sdpa.py), the fused path beside
-- the composed one, dropout, nn.functional, and the errors for bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises, close = tap.ok, tap.raises, tap.close
local F = zorch.nn.functional

local G = zorch.load("golden/sdpa.safetensors")
local TOL = 1e-10 -- float64 throughout

local CASES = { -- name -> options (the mask comes from the golden file)
  plain = {}, causal = {is_causal = true}, causal_short_q = {is_causal = true}, scale = {scale = 0.3},
  three_d = {}, value_dim = {}, broadcast_batch = {}, bool_mask = {}, float_mask = {}, two_d = {},
}
for name, opts in pairs(CASES) do
  local q, k, v = G[name .. ".q"]:clone():requires_grad_(), G[name .. ".k"]:clone():requires_grad_(),
    G[name .. ".v"]:clone():requires_grad_()
  local o = {attn_mask = G[name .. ".mask"]}
  for key, val in pairs(opts) do o[key] = val end
  local y = F.scaled_dot_product_attention(q, k, v, o)
  close(y, G[name .. ".out"], TOL, name .. ": the output is PyTorch's")
  ;(y * G[name .. ".c"]):sum():backward()
  close(q.grad, G[name .. ".gq"], TOL, name .. ": q's gradient is PyTorch's")
  close(k.grad, G[name .. ".gk"], TOL, name .. ": k's gradient is PyTorch's")
  close(v.grad, G[name .. ".gv"], TOL, name .. ": v's gradient is PyTorch's")
end

-- the fused kernel (no mask) and the composed path (an all-true mask) agree
do
  zorch.manual_seed(1)
  local q, k, v = zorch.randn(2, 3, 7, 16), zorch.randn(2, 3, 9, 16), zorch.randn(2, 3, 9, 16)
  local fused = zorch.scaled_dot_product_attention(q, k, v)
  local composed = zorch.scaled_dot_product_attention(q, k, v, {attn_mask = zorch.ones({7, 9}, {dtype = "bool"})})
  close(fused, composed, 1e-4, "the fused path equals the composed one in float32")
  close(zorch.scaled_dot_product_attention(q, q, q, {is_causal = true}), zorch.attention(q, q, q, {causal = true}), 0,
        "is_causal over one length is zorch.attention's causal")
end

-- dropout_p: some weights dropped, the rest scaled by 1 / (1 - p); dropout_p 1 gives zeros
do
  zorch.manual_seed(2)
  local q, k, v = zorch.randn(1, 1, 64, 8), zorch.randn(1, 1, 64, 8), zorch.ones(1, 1, 64, 8)
  local y0 = zorch.scaled_dot_product_attention(q, k, v)
  local y = zorch.scaled_dot_product_attention(q, k, v, {dropout_p = 0.5})
  local differs = (y - y0):abs():max():item() > 1e-3
  ok(differs and y:min():item() >= 0, "dropout_p 0.5 changes the rows' sums (" .. y:mean():item() .. ")")
  close(zorch.scaled_dot_product_attention(q, k, v, {dropout_p = 1}), zorch.zeros(1, 1, 64, 8), 0,
        "dropout_p 1 gives zeros")
end

-- nn.functional is zorch's functions under PyTorch's names
ok(F.relu == zorch.relu and F.cross_entropy == zorch.cross_entropy and F.softmax == zorch.softmax,
   "nn.functional's names are zorch's functions")
ok(F.nn == nil and F.optim == nil and F.no_such_function == nil, "nn.functional holds only functions")
raises("nn.functional is read-only", function() F.relu = print end, "nn.functional: read-only")

-- errors name the function, the argument and the shapes
local q, k, v = zorch.randn(2, 4, 8), zorch.randn(2, 5, 8), zorch.randn(2, 5, 8)
raises("key's head size differs", function() F.scaled_dot_product_attention(q, zorch.randn(2, 5, 7), v) end,
       "scaled_dot_product_attention: query (2, 4, 8), key (2, 5, 7) and value (2, 5, 8)")
raises("value's length differs", function() F.scaled_dot_product_attention(q, k, zorch.randn(2, 6, 8)) end,
       "scaled_dot_product_attention: query (2, 4, 8)")
raises("a mask and is_causal", function()
  F.scaled_dot_product_attention(q, k, v, {attn_mask = zorch.ones(4, 5), is_causal = true})
end, "scaled_dot_product_attention: attn_mask and is_causal cannot both be given")
raises("dropout_p above 1", function() F.scaled_dot_product_attention(q, k, v, {dropout_p = 2}) end,
       "scaled_dot_product_attention: dropout_p must be a number in [0, 1], got 2")
raises("an unknown option", function() F.scaled_dot_product_attention(q, k, v, {causal = true}) end,
       "scaled_dot_product_attention", "causal")
raises("a key that is not a tensor", function() F.scaled_dot_product_attention(q, {}, v) end,
       "scaled_dot_product_attention: key must be a tensor")
raises("an int64 mask", function()
  F.scaled_dot_product_attention(q, k, v, {attn_mask = zorch.ones({4, 5}, {dtype = "int64"})})
end, "scaled_dot_product_attention: only bool and floating-point attn_mask are supported")
raises("a mask that does not broadcast", function()
  F.scaled_dot_product_attention(q, k, v, {attn_mask = zorch.ones(3, 5)})
end, "(3, 5)")

tap.done()
