-- zorch.nn's attention modules: MultiheadAttention and the Transformer
-- encoder and decoder layers, built from the ops (linear, matmul, softmax,
-- layer_norm, dropout; zorch.attention, the masks added to its scores, where
-- no weights and no dropout are asked for). Names, defaults, shapes and
-- state-dict names follow PyTorch's.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local Module = zorch._require("zorch.nn.module").Module
local check_options = zorch._check_options

local function shape_str(t) return "(" .. table.concat(t.shape, ", ") .. ")" end

-- (level: as error() counts it from the caller of these checks, 3 by default)
local function check_int(fn, name, v, level)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), (level or 3) + 1)
  end
end
local function check_bool(fn, name, v, level)
  if v ~= nil and type(v) ~= "boolean" then
    error(("%s: %s must be true or false, got %s"):format(fn, name, tostring(v)), (level or 3) + 1)
  end
end
local function check_p(fn, v, level)
  if type(v) ~= "number" or not (v >= 0 and v <= 1) then
    error(("%s: dropout must be a number in [0, 1], got %s"):format(fn, tostring(v)), (level or 3) + 1)
  end
end
local function need_tensor(fn, name, t, level)
  if not zorch.is_tensor(t) then error(("%s: %s must be a tensor, got %s"):format(fn, name, type(t)), (level or 3) + 1) end
end
local function default(v, d) if v == nil then return d end return v end
-- A forward's options; a tensor where they go is a mask passed by position.
local function forward_options(fn, opts, allowed)
  if zorch.is_tensor(opts) then
    error(("%s: masks go in the options table by name ({%s = mask, ...}), got a tensor %s"):format(fn, allowed[1],
      shape_str(opts)), 3)
  end
  return check_options(fn, opts, allowed, 3) -- (a tail call: the forward is level 2)
end

-- ---- MultiheadAttention ------------------------------------------------------------------------

local MHA = Module:extend "nn.MultiheadAttention"
nn.MultiheadAttention = MHA
local MHA_OPTS = {"dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first"}

-- Parameters as PyTorch makes them: one packed in_proj_weight (3E, E) when
-- kdim and vdim are E, else q/k/v_proj_weight; in_proj_bias (3E) zeros;
-- out_proj a Linear with a zero bias; bias_k, bias_v (1, 1, E).
function MHA:init(embed_dim, num_heads, opts)
  local fn = "nn.MultiheadAttention"
  check_int(fn, "embed_dim", embed_dim)
  check_int(fn, "num_heads", num_heads)
  opts = check_options(fn, opts, MHA_OPTS, 4)
  local kdim, vdim = default(opts.kdim, embed_dim), default(opts.vdim, embed_dim)
  check_int(fn, "kdim", kdim)
  check_int(fn, "vdim", vdim)
  local p = default(opts.dropout, 0.0)
  check_p(fn, p)
  for _, k in ipairs({"bias", "add_bias_kv", "add_zero_attn", "batch_first"}) do check_bool(fn, k, opts[k]) end
  if embed_dim % num_heads ~= 0 then
    error(("%s: embed_dim %d must be divisible by num_heads %d"):format(fn, embed_dim, num_heads), 3)
  end
  local bias = opts.bias ~= false
  rawset(self, "embed_dim", embed_dim)
  rawset(self, "num_heads", num_heads)
  rawset(self, "head_dim", embed_dim // num_heads)
  rawset(self, "kdim", kdim)
  rawset(self, "vdim", vdim)
  rawset(self, "dropout", p)
  rawset(self, "batch_first", opts.batch_first == true)
  rawset(self, "add_zero_attn", opts.add_zero_attn == true)
  rawset(self, "_qkv_same_embed_dim", kdim == embed_dim and vdim == embed_dim)
  local xavier = nn.init.xavier_uniform_
  if self._qkv_same_embed_dim then
    self.in_proj_weight = nn.Parameter(xavier(zorch.empty({3 * embed_dim, embed_dim})))
  else
    self.q_proj_weight = nn.Parameter(xavier(zorch.empty({embed_dim, embed_dim})))
    self.k_proj_weight = nn.Parameter(xavier(zorch.empty({embed_dim, kdim})))
    self.v_proj_weight = nn.Parameter(xavier(zorch.empty({embed_dim, vdim})))
  end
  if bias then self.in_proj_bias = nn.Parameter(zorch.zeros({3 * embed_dim})) end
  if opts.add_bias_kv then
    self.bias_k = nn.Parameter(nn.init.xavier_normal_(zorch.empty({1, 1, embed_dim})))
    self.bias_v = nn.Parameter(nn.init.xavier_normal_(zorch.empty({1, 1, embed_dim})))
  end
  self.out_proj = nn.Linear(embed_dim, embed_dim, {bias = bias})
  if bias then zorch.no_grad(function() self.out_proj.bias:zero_() end) end
end

MHA.__tostring = function(s)
  return ("nn.MultiheadAttention(embed_dim=%d, num_heads=%d%s%s%s)\n  (out_proj): %s"):format(s.embed_dim,
    s.num_heads, s._qkv_same_embed_dim and "" or (", kdim=%d, vdim=%d"):format(s.kdim, s.vdim),
    s.dropout > 0 and (", dropout=%s"):format(s.dropout) or "", s.batch_first and ", batch_first=True" or "",
    tostring(s.out_proj))
end

-- A mask as an additive float mask of dtype dt: bool true is -inf (not
-- allowed); a float mask is added as it is; other dtypes are refused.
local function float_mask(fn, name, m, dt)
  local mdt = m:dtype()
  if mdt == "bool" then return zorch.zeros(m.shape, {dtype = dt, device = m:device()}):masked_fill(m, -math.huge) end
  if not mdt:match("float") then
    error(("%s: only bool and floating-point %s are supported, got %s %s"):format(fn, name, mdt, shape_str(m)), 3)
  end
  return mdt == dt and m or m:to(dt)
end

-- ---- scaled_dot_product_attention --------------------------------------------------------------

-- zorch.scaled_dot_product_attention(q, k, v, {attn_mask, dropout_p = 0,
-- is_causal = false, scale}): PyTorch's F.scaled_dot_product_attention,
-- softmax(scale q kᵀ + mask) v over the last two dims, batch dims broadcast.
-- A bool attn_mask is true where a query may see a key (the opposite of
-- MultiheadAttention's masks); is_causal lets query i see keys j <= i, counted
-- from the top left as PyTorch's. Without a mask and dropout, and with one
-- head size and batch shape, it runs zorch.attention (memory O(T), not O(T²)).
local SDPA = "scaled_dot_product_attention"
function zorch.scaled_dot_product_attention(q, k, v, opts)
  opts = check_options(SDPA, opts, {"attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"}, 3)
  need_tensor(SDPA, "query", q, 2)
  need_tensor(SDPA, "key", k, 2)
  need_tensor(SDPA, "value", v, 2)
  local mask, p, causal, scale = opts.attn_mask, default(opts.dropout_p, 0), default(opts.is_causal, false), opts.scale
  check_bool(SDPA, "is_causal", causal, 2)
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    error(("%s: dropout_p must be a number in [0, 1], got %s"):format(SDPA, tostring(p)), 2)
  end
  if scale ~= nil and type(scale) ~= "number" then error(("%s: scale must be a number, got %s"):format(SDPA, type(scale)), 2) end
  if mask ~= nil then need_tensor(SDPA, "attn_mask", mask, 2) end
  if mask ~= nil and causal then error(SDPA .. ": attn_mask and is_causal cannot both be given", 2) end
  if opts.enable_gqa then error(SDPA .. ": enable_gqa is not supported", 2) end
  if q:dim() < 2 or k:dim() < 2 or v:dim() < 2 or q:size(-1) ~= k:size(-1) or k:size(-2) ~= v:size(-2) then
    error(("%s: query %s, key %s and value %s must be (..., L, E), (..., S, E) and (..., S, Ev)"):format(SDPA,
      shape_str(q), shape_str(k), shape_str(v)), 2)
  end
  local L, S = q:size(-2), k:size(-2)
  local same = (q:dim() == 3 or q:dim() == 4) and k:dim() == q:dim() and v:dim() == q:dim() and
    v:size(-1) == q:size(-1) and (not causal or L == S)
  for i = 1, q:dim() - 2 do same = same and k:size(i) == q:size(i) and v:size(i) == q:size(i) end
  if same and mask == nil and p == 0 and q:dtype() == k:dtype() and q:dtype() == v:dtype() then
    return zorch.attention(q, k, v, {causal = causal, scale = scale})
  end
  local s = zorch.matmul(q, k:transpose(-2, -1)) * (scale or 1 / math.sqrt(q:size(-1)))
  if causal then
    s = s:masked_fill(zorch.triu(zorch.ones({L, S}, {dtype = "bool", device = q:device()}), 1), -math.huge)
  elseif mask ~= nil and mask:dtype() == "bool" then
    s = s:masked_fill(zorch.eq(mask, 0), -math.huge)
  elseif mask ~= nil then
    s = s + float_mask(SDPA, "attn_mask", mask, s:dtype())
  end
  local w = zorch.softmax(s, -1)
  if p > 0 then w = zorch.dropout(w, p, true) end
  return zorch.matmul(w, v)
end

-- Checks the inputs' ranks and sizes as PyTorch does, with the module and
-- the shapes in the message; returns whether the input is batched.
local function check_inputs(self, fn, query, key, value, kpm, attn_mask)
  need_tensor(fn, "query", query)
  need_tensor(fn, "key", key)
  need_tensor(fn, "value", value)
  if kpm ~= nil then need_tensor(fn, "key_padding_mask", kpm) end
  if attn_mask ~= nil then need_tensor(fn, "attn_mask", attn_mask) end
  local qd = query:dim()
  if qd ~= 2 and qd ~= 3 then
    error(("%s: query must be unbatched 2-d or batched 3-d, got %s"):format(fn, shape_str(query)), 3)
  end
  local batched = qd == 3
  local kind = batched and "batched (3-d)" or "unbatched (2-d)"
  if key:dim() ~= qd or value:dim() ~= qd then
    error(("%s: for %s query %s, key and value must be %d-d, got key %s and value %s"):format(fn, kind,
      shape_str(query), qd, shape_str(key), shape_str(value)), 3)
  end
  if kpm ~= nil and kpm:dim() ~= qd - 1 then
    error(("%s: for %s query %s, key_padding_mask must be %d-d, got %s"):format(fn, kind, shape_str(query),
      qd - 1, shape_str(kpm)), 3)
  end
  if attn_mask ~= nil and attn_mask:dim() ~= 2 and attn_mask:dim() ~= 3 then
    error(("%s: attn_mask must be 2-d or 3-d, got %s"):format(fn, shape_str(attn_mask)), 3)
  end
  local last = qd
  for _, c in ipairs({{"query", query, self.embed_dim, "embed_dim"}, {"key", key, self.kdim, "kdim"},
                      {"value", value, self.vdim, "vdim"}}) do
    if c[2]:size(last) ~= c[3] then
      error(("%s: %s %s must have %s = %d as its last size"):format(fn, c[1], shape_str(c[2]), c[4], c[3]), 3)
    end
  end
  -- the sequence (and batch) sizes of key and value agree; the batch of query too
  local seq = (batched and self.batch_first) and 2 or 1
  if key:size(seq) ~= value:size(seq) or (batched and key:size(3 - seq) ~= value:size(3 - seq)) then
    error(("%s: key %s and value %s must have the same sequence and batch sizes"):format(fn, shape_str(key),
      shape_str(value)), 3)
  end
  if batched and query:size(3 - seq) ~= key:size(3 - seq) then
    error(("%s: query %s and key %s must have the same batch size"):format(fn, shape_str(query), shape_str(key)), 3)
  end
  return batched
end

-- The query, key and value projections.
function MHA:_in_proj(q, k, v)
  local E, b = self.embed_dim, rawget(self, "in_proj_bias")
  local wq, wk, wv
  if self._qkv_same_embed_dim then
    local w = self.in_proj_weight
    wq, wk, wv = w:narrow(1, 1, E), w:narrow(1, E + 1, E), w:narrow(1, 2 * E + 1, E)
  else
    wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
  end
  local bq, bk, bv
  if b then bq, bk, bv = b:narrow(1, 1, E), b:narrow(1, E + 1, E), b:narrow(1, 2 * E + 1, E) end
  return zorch.linear(q, wq, bq), zorch.linear(k, wk, bk), zorch.linear(v, wv, bv)
end

local MHA_FORWARD = {"attn_mask", "key_padding_mask", "need_weights", "average_attn_weights", "is_causal"}

-- forward(query, key, value, {key_padding_mask, need_weights = true,
-- attn_mask, average_attn_weights = true, is_causal = false}) -> output,
-- weights (nil without need_weights). Inputs (L, N, E) ((N, L, E) with
-- batch_first) or unbatched (L, E); masks bool (true: not allowed) or float
-- (added to the scores); attn_mask (L, S) or (N * num_heads, L, S).
function MHA:forward(query, key, value, opts)
  local fn = "nn.MultiheadAttention"
  opts = forward_options(fn, opts, MHA_FORWARD)
  for _, k in ipairs({"need_weights", "average_attn_weights", "is_causal"}) do check_bool(fn, k, opts[k], 2) end
  local kpm, attn_mask = opts.key_padding_mask, opts.attn_mask
  local need_weights = opts.need_weights ~= false
  local batched = check_inputs(self, fn, query, key, value, kpm, attn_mask)
  -- work in (N, L, E)
  if not batched then
    query, key, value = query:unsqueeze(1), key:unsqueeze(1), value:unsqueeze(1)
    if kpm ~= nil then kpm = kpm:unsqueeze(1) end
  elseif not self.batch_first then
    query, key, value = query:transpose(1, 2), key:transpose(1, 2), value:transpose(1, 2)
  end
  local N, L, S = query:size(1), query:size(2), key:size(2)
  local H, hd, E = self.num_heads, self.head_dim, self.embed_dim
  local dt = query:dtype()
  if opts.is_causal and attn_mask == nil then
    error(("%s: is_causal needs attn_mask (the causal mask it describes), e.g. from " ..
      "nn.Transformer.generate_square_subsequent_mask(%d)"):format(fn, L), 3)
  end
  if kpm ~= nil then
    if kpm:size(1) ~= N or kpm:size(2) ~= S then
      error(("%s: key_padding_mask %s must be (batch, source length) = (%d, %d)"):format(fn,
        shape_str(opts.key_padding_mask), N, S), 3)
    end
    kpm = float_mask(fn, "key_padding_mask", kpm, dt):view({N, 1, 1, S})
  end
  -- is_causal is PyTorch's hint: with no key padding mask and no weights the
  -- causal pattern replaces attn_mask; otherwise attn_mask is used as given
  local causal = opts.is_causal and kpm == nil and not need_weights
  if causal then
    attn_mask = nil
  elseif attn_mask ~= nil then
    local want = attn_mask:dim() == 2 and {L, S} or {N * H, L, S}
    if table.concat(attn_mask.shape, ",") ~= table.concat(want, ",") then
      error(("%s: the %d-d attn_mask is %s but should be (%s)"):format(fn, attn_mask:dim(), shape_str(attn_mask),
        table.concat(want, ", ")), 3)
    end
    attn_mask = float_mask(fn, "attn_mask", attn_mask, dt)
    attn_mask = attn_mask:dim() == 2 and attn_mask:view({1, 1, L, S}) or attn_mask:reshape({N, H, L, S})
  end
  local q, k, v = self:_in_proj(query, key, value)
  -- bias_k/bias_v and add_zero_attn add key/value slots the masks allow
  local function widen_masks()
    if attn_mask ~= nil then
      attn_mask = zorch.cat({attn_mask, zorch.zeros({attn_mask:size(1), attn_mask:size(2), L, 1}, {dtype = dt,
        device = attn_mask:device()})}, 4)
    end
    if kpm ~= nil then kpm = zorch.cat({kpm, zorch.zeros({N, 1, 1, 1}, {dtype = dt, device = kpm:device()})}, 4) end
  end
  local bias_k = rawget(self, "bias_k")
  if bias_k then
    k = zorch.cat({k, bias_k:expand({N, 1, E})}, 2)
    v = zorch.cat({v, self.bias_v:expand({N, 1, E})}, 2)
    widen_masks()
  end
  q = q:reshape({N, L, H, hd}):transpose(2, 3)
  k = k:reshape({N, k:size(2), H, hd}):transpose(2, 3)
  v = v:reshape({N, v:size(2), H, hd}):transpose(2, 3)
  if self.add_zero_attn then
    local z = zorch.zeros({N, H, 1, hd}, {dtype = dt, device = k:device()})
    k, v = zorch.cat({k, z}, 3), zorch.cat({v, z}, 3)
    widen_masks()
  end
  local Sk = k:size(3)
  local p = self.training and self.dropout or 0.0
  local out, w
  if not need_weights and p == 0 and (not causal or L == Sk) then
    -- the fused kernel, the masks added to its scores: memory O(L) per query, no
    -- weights kept (causal: PyTorch's hint that attn_mask is the causal one)
    local mask = not causal and attn_mask or nil
    if kpm ~= nil then mask = mask and mask + kpm or kpm end
    out = zorch.attention(q:contiguous(), k:contiguous(), v:contiguous(), {causal = causal, mask = mask})
  else
    if causal then -- PyTorch's causal pattern: query i sees keys 1..i (top left)
      local blocked = zorch.triu(zorch.ones({L, Sk}, {dtype = "bool", device = q:device()}), 1)
      attn_mask = float_mask(fn, "attn_mask", blocked, dt):view({1, 1, L, Sk})
    end
    local scores = zorch.matmul(q * math.sqrt(1.0 / hd), k:transpose(3, 4))
    if attn_mask ~= nil then scores = scores + attn_mask end
    if kpm ~= nil then scores = scores + kpm end
    w = zorch.softmax(scores, -1)
    if p > 0 then w = zorch.dropout(w, p, true) end
    out = zorch.matmul(w, v)
  end
  out = self.out_proj(out:transpose(2, 3):reshape({N, L, E}))
  if not batched then
    out = out:squeeze(1)
  elseif not self.batch_first then
    out = out:transpose(1, 2)
  end
  if not need_weights then return out, nil end
  if opts.average_attn_weights ~= false then w = w:mean(2) end
  if not batched then w = w:squeeze(1) end
  return out, w
end

-- ---- Transformer layers ----------------------------------------------------------------------

local ACTIVATIONS = {relu = zorch.relu, gelu = function(x) return zorch.gelu(x) end}

-- activation: "relu", "gelu", a function or a module (a child, as PyTorch's)
local function set_activation(self, fn, act)
  act = default(act, "relu")
  if type(act) == "string" then
    if not ACTIVATIONS[act] then
      error(("%s: activation must be \"relu\", \"gelu\", a function or a module, got \"%s\""):format(fn, act), 4)
    end
    rawset(self, "activation_name", act)
    rawset(self, "activation", ACTIVATIONS[act])
  elseif type(act) == "function" or (type(act) == "table" and rawget(act, "_order")) then
    self.activation = act
  else
    error(("%s: activation must be \"relu\", \"gelu\", a function or a module, got %s"):format(fn, type(act)), 4)
  end
end

-- The options of both layers, checked; returns them with PyTorch's defaults.
local LAYER_OPTS = {"dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first", "norm_first", "bias"}
local function layer_options(fn, d_model, nhead, opts)
  check_int(fn, "d_model", d_model, 4)
  check_int(fn, "nhead", nhead, 4)
  opts = check_options(fn, opts, LAYER_OPTS, 5)
  local o = {dim_feedforward = default(opts.dim_feedforward, 2048), dropout = default(opts.dropout, 0.1),
             layer_norm_eps = default(opts.layer_norm_eps, 1e-5), activation = opts.activation}
  check_int(fn, "dim_feedforward", o.dim_feedforward, 4)
  check_p(fn, o.dropout, 4)
  if type(o.layer_norm_eps) ~= "number" or not (o.layer_norm_eps >= 0) then
    error(("%s: layer_norm_eps must be a number >= 0, got %s"):format(fn, tostring(o.layer_norm_eps)), 4)
  end
  for _, k in ipairs({"batch_first", "norm_first", "bias"}) do check_bool(fn, k, opts[k], 4) end
  if d_model % nhead ~= 0 then
    error(("%s: d_model %d must be divisible by nhead %d"):format(fn, d_model, nhead), 4)
  end
  o.batch_first, o.norm_first, o.bias = opts.batch_first == true, opts.norm_first == true, opts.bias ~= false
  return o
end

-- The feed-forward block both layers end with: linear2(dropout(act(linear1(x)))).
local function ff_block(self, x)
  local h = self.activation(self.linear1(x))
  return self.dropout2(self.linear2(self.dropout(h)))
end
local function attn_block(mha, drop, x, mem, mask, kpm, is_causal)
  mem = mem or x
  return drop(mha(x, mem, mem, {attn_mask = mask, key_padding_mask = kpm, need_weights = false,
    is_causal = is_causal}))
end

local ENC = Module:extend "nn.TransformerEncoderLayer"
nn.TransformerEncoderLayer = ENC

-- TransformerEncoderLayer(d_model, nhead, {dim_feedforward = 2048, dropout =
-- 0.1, activation = "relu", layer_norm_eps = 1e-5, batch_first = false,
-- norm_first = false, bias = true}): self-attention then a feed-forward block,
-- each with a residual and a LayerNorm (after it, or before with norm_first).
function ENC:init(d_model, nhead, opts)
  local fn = "nn.TransformerEncoderLayer"
  local o = layer_options(fn, d_model, nhead, opts)
  self.self_attn = MHA(d_model, nhead, {dropout = o.dropout, bias = o.bias, batch_first = o.batch_first})
  self.linear1 = nn.Linear(d_model, o.dim_feedforward, {bias = o.bias})
  self.dropout = nn.Dropout(o.dropout)
  self.linear2 = nn.Linear(o.dim_feedforward, d_model, {bias = o.bias})
  rawset(self, "norm_first", o.norm_first)
  self.norm1 = nn.LayerNorm(d_model, {eps = o.layer_norm_eps, bias = o.bias})
  self.norm2 = nn.LayerNorm(d_model, {eps = o.layer_norm_eps, bias = o.bias})
  self.dropout1 = nn.Dropout(o.dropout)
  self.dropout2 = nn.Dropout(o.dropout)
  set_activation(self, fn, o.activation)
end

-- forward(src, {src_mask, src_key_padding_mask, is_causal})
function ENC:forward(src, opts)
  local fn = "nn.TransformerEncoderLayer"
  opts = forward_options(fn, opts, {"src_mask", "src_key_padding_mask", "is_causal"})
  need_tensor(fn, "src", src, 2)
  local mask, kpm, causal = opts.src_mask, opts.src_key_padding_mask, opts.is_causal
  local x = src
  if self.norm_first then
    x = x + attn_block(self.self_attn, self.dropout1, self.norm1(x), nil, mask, kpm, causal)
    x = x + ff_block(self, self.norm2(x))
  else
    x = self.norm1(x + attn_block(self.self_attn, self.dropout1, x, nil, mask, kpm, causal))
    x = self.norm2(x + ff_block(self, x))
  end
  return x
end

local DEC = Module:extend "nn.TransformerDecoderLayer"
nn.TransformerDecoderLayer = DEC

-- TransformerDecoderLayer(d_model, nhead, opts as the encoder layer's):
-- self-attention, attention over the memory, then a feed-forward block.
function DEC:init(d_model, nhead, opts)
  local fn = "nn.TransformerDecoderLayer"
  local o = layer_options(fn, d_model, nhead, opts)
  local mha_opts = {dropout = o.dropout, bias = o.bias, batch_first = o.batch_first}
  self.self_attn = MHA(d_model, nhead, mha_opts)
  self.multihead_attn = MHA(d_model, nhead, mha_opts)
  self.linear1 = nn.Linear(d_model, o.dim_feedforward, {bias = o.bias})
  self.dropout = nn.Dropout(o.dropout)
  self.linear2 = nn.Linear(o.dim_feedforward, d_model, {bias = o.bias})
  rawset(self, "norm_first", o.norm_first)
  for i = 1, 3 do self["norm" .. i] = nn.LayerNorm(d_model, {eps = o.layer_norm_eps, bias = o.bias}) end
  for i = 1, 3 do self["dropout" .. i] = nn.Dropout(o.dropout) end
  set_activation(self, fn, o.activation)
end

local DEC_FORWARD = {"tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask", "tgt_is_causal",
                     "memory_is_causal"}
local function dec_ff(self, x) return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x))))) end

-- forward(tgt, memory, {tgt_mask, memory_mask, tgt_key_padding_mask,
-- memory_key_padding_mask, tgt_is_causal, memory_is_causal})
function DEC:forward(tgt, memory, opts)
  local fn = "nn.TransformerDecoderLayer"
  opts = forward_options(fn, opts, DEC_FORWARD)
  need_tensor(fn, "tgt", tgt, 2)
  need_tensor(fn, "memory", memory, 2)
  local o = opts
  local x = tgt
  if self.norm_first then
    x = x + attn_block(self.self_attn, self.dropout1, self.norm1(x), nil, o.tgt_mask, o.tgt_key_padding_mask,
      o.tgt_is_causal)
    x = x + attn_block(self.multihead_attn, self.dropout2, self.norm2(x), memory, o.memory_mask,
      o.memory_key_padding_mask, o.memory_is_causal)
    x = x + dec_ff(self, self.norm3(x))
  else
    x = self.norm1(x + attn_block(self.self_attn, self.dropout1, x, nil, o.tgt_mask, o.tgt_key_padding_mask,
      o.tgt_is_causal))
    x = self.norm2(x + attn_block(self.multihead_attn, self.dropout2, x, memory, o.memory_mask,
      o.memory_key_padding_mask, o.memory_is_causal))
    x = self.norm3(x + dec_ff(self, x))
  end
  return x
end

-- ---- stacks ------------------------------------------------------------------------------------

-- num_layers deep copies of layer under "layers.0", "layers.1", ..., and
-- an optional final norm (a module) under "norm".
local function stack_init(self, fn, cls, layer, num_layers, opts, extra)
  if not (type(layer) == "table" and getmetatable(layer) and rawget(layer, "_order")) then
    error(("%s: argument 1 must be a %s (a module), got %s"):format(fn, cls, type(layer)), 4)
  end
  check_int(fn, "num_layers", num_layers, 4)
  local allowed = {"norm"}
  for _, k in ipairs(extra) do allowed[#allowed + 1] = k end
  opts = check_options(fn, opts, allowed, 5)
  local norm = opts.norm
  if norm ~= nil and not (type(norm) == "table" and rawget(norm, "_order")) then
    error(("%s: norm must be a module (e.g. nn.LayerNorm), got %s"):format(fn, type(norm)), 4)
  end
  local copies = {}
  for i = 1, num_layers do copies[i] = zorch.deepcopy(layer) end
  self.layers = nn.ModuleList(copies)
  rawset(self, "num_layers", num_layers)
  if norm ~= nil then self.norm = norm end
end

local ENCODER = Module:extend "nn.TransformerEncoder"
nn.TransformerEncoder = ENCODER
-- TransformerEncoder(encoder_layer, num_layers, {norm}); enable_nested_tensor
-- and mask_check are accepted and change nothing (no nested-tensor path).
function ENCODER:init(layer, num_layers, opts)
  stack_init(self, "nn.TransformerEncoder", "nn.TransformerEncoderLayer", layer, num_layers, opts,
    {"enable_nested_tensor", "mask_check"})
end
-- forward(src, {mask, src_key_padding_mask, is_causal})
function ENCODER:forward(src, opts)
  opts = forward_options("nn.TransformerEncoder", opts, {"mask", "src_key_padding_mask", "is_causal"})
  local x = src
  for i = 1, #self.layers do
    x = self.layers[i](x, {src_mask = opts.mask, src_key_padding_mask = opts.src_key_padding_mask,
      is_causal = opts.is_causal})
  end
  local norm = rawget(self, "norm")
  if norm then x = norm(x) end
  return x
end

local DECODER = Module:extend "nn.TransformerDecoder"
nn.TransformerDecoder = DECODER
-- TransformerDecoder(decoder_layer, num_layers, {norm})
function DECODER:init(layer, num_layers, opts)
  stack_init(self, "nn.TransformerDecoder", "nn.TransformerDecoderLayer", layer, num_layers, opts, {})
end
-- forward(tgt, memory, opts as TransformerDecoderLayer's)
function DECODER:forward(tgt, memory, opts)
  opts = forward_options("nn.TransformerDecoder", opts, DEC_FORWARD)
  local x = tgt
  for i = 1, #self.layers do x = self.layers[i](x, memory, opts) end
  local norm = rawget(self, "norm")
  if norm then x = norm(x) end
  return x
end

-- ---- Transformer ------------------------------------------------------------------------------

local TRANSFORMER = Module:extend "nn.Transformer"
nn.Transformer = TRANSFORMER
local TRANSFORMER_OPTS = {"d_model", "nhead", "num_encoder_layers", "num_decoder_layers", "dim_feedforward", "dropout",
                          "activation", "custom_encoder", "custom_decoder", "layer_norm_eps", "batch_first",
                          "norm_first", "bias"}

-- Transformer({d_model = 512, nhead = 8, num_encoder_layers = 6,
-- num_decoder_layers = 6, custom_encoder, custom_decoder, and the layers'
-- options}): an encoder and a decoder stack, each ending in a LayerNorm;
-- every parameter of 2 dims or more Xavier-uniform, as PyTorch resets them.
function TRANSFORMER:init(opts)
  local fn = "nn.Transformer"
  opts = check_options(fn, opts, TRANSFORMER_OPTS, 4)
  local d_model, nhead = default(opts.d_model, 512), default(opts.nhead, 8)
  local nenc, ndec = default(opts.num_encoder_layers, 6), default(opts.num_decoder_layers, 6)
  check_int(fn, "num_encoder_layers", nenc)
  check_int(fn, "num_decoder_layers", ndec)
  local lopts = {}
  for _, k in ipairs(LAYER_OPTS) do lopts[k] = opts[k] end
  local o = layer_options(fn, d_model, nhead, lopts)
  local function norm() return nn.LayerNorm(d_model, {eps = o.layer_norm_eps, bias = o.bias}) end
  for _, k in ipairs({"custom_encoder", "custom_decoder"}) do
    local m = opts[k]
    if m ~= nil and not (type(m) == "table" and rawget(m, "_order")) then
      error(("%s: %s must be a module, got %s"):format(fn, k, type(m)), 3)
    end
  end
  self.encoder = opts.custom_encoder or ENCODER(ENC(d_model, nhead, lopts), nenc, {norm = norm()})
  self.decoder = opts.custom_decoder or DECODER(DEC(d_model, nhead, lopts), ndec, {norm = norm()})
  rawset(self, "d_model", d_model)
  rawset(self, "nhead", nhead)
  rawset(self, "batch_first", o.batch_first)
  for _, p in ipairs(self:parameters()) do
    if p:dim() > 1 then nn.init.xavier_uniform_(p) end
  end
end

local TRANSFORMER_FORWARD = {"src_mask", "tgt_mask", "memory_mask", "src_key_padding_mask", "tgt_key_padding_mask",
                             "memory_key_padding_mask", "src_is_causal", "tgt_is_causal", "memory_is_causal"}
-- forward(src, tgt, {src_mask, tgt_mask, memory_mask, src_key_padding_mask,
-- tgt_key_padding_mask, memory_key_padding_mask, src_is_causal,
-- tgt_is_causal, memory_is_causal}): the decoder's output over the encoded src
function TRANSFORMER:forward(src, tgt, opts)
  local fn = "nn.Transformer"
  opts = forward_options(fn, opts, TRANSFORMER_FORWARD)
  need_tensor(fn, "src", src, 2)
  need_tensor(fn, "tgt", tgt, 2)
  if src:dim() == 3 and tgt:dim() == 3 then
    local b = self.batch_first and 1 or 2
    if src:size(b) ~= tgt:size(b) then
      error(("%s: the batch sizes of src %s and tgt %s (dim %d) must be equal"):format(fn, shape_str(src),
        shape_str(tgt), b), 2)
    end
  end
  if src:dim() < 1 or tgt:dim() < 1 or src:size(-1) ~= self.d_model or tgt:size(-1) ~= self.d_model then
    error(("%s: src %s and tgt %s must have d_model = %d as their last size"):format(fn, shape_str(src),
      shape_str(tgt), self.d_model), 2)
  end
  local memory = self.encoder(src, {mask = opts.src_mask, src_key_padding_mask = opts.src_key_padding_mask,
    is_causal = opts.src_is_causal})
  return self.decoder(tgt, memory, {tgt_mask = opts.tgt_mask, memory_mask = opts.memory_mask,
    tgt_key_padding_mask = opts.tgt_key_padding_mask, memory_key_padding_mask = opts.memory_key_padding_mask,
    tgt_is_causal = opts.tgt_is_causal, memory_is_causal = opts.memory_is_causal})
end

-- nn.Transformer.generate_square_subsequent_mask(sz, {dtype, device}): the
-- float causal mask, -inf above the diagonal and 0 elsewhere (a function of
-- the class, as PyTorch's static method).
function nn.Transformer.generate_square_subsequent_mask(sz, opts)
  check_int("nn.Transformer.generate_square_subsequent_mask", "sz", sz, 2)
  opts = check_options("nn.Transformer.generate_square_subsequent_mask", opts, {"dtype", "device"}, 3)
  local blocked = zorch.triu(zorch.ones({sz, sz}, {dtype = "bool", device = opts.device}), 1)
  return zorch.zeros({sz, sz}, {dtype = opts.dtype or "float32", device = opts.device}):masked_fill(blocked, -math.huge)
end

-- nn.rope_tables(positions, head_dim, {theta = 10000, scaling, dtype = "float32",
-- device}): the cos and sin tables of zorch.rope, as Hugging Face's
-- LlamaRotaryEmbedding makes them (in float32): inv_freq = 1 / theta^(2i /
-- head_dim), freqs = position * inv_freq, emb = cat(freqs, freqs), cos(emb) and
-- sin(emb). positions: a count n (positions 0 .. n - 1: (n, head_dim) tables,
-- cached per n, head_dim, theta, scaling, dtype and device; callers must not
-- write into them) or an int64 tensor of positions, (seq) or (batch, seq).
-- scaling: nil, or transformers' rope_scaling {rope_type = "llama3", factor,
-- low_freq_factor, high_freq_factor, original_max_position_embeddings}
-- (_compute_llama3_parameters: wavelengths beyond original / low_freq_factor
-- slowed by factor, those below original / high_freq_factor kept, a blend
-- between); rope_type "default" is no scaling.
local rope_cache, rope_cached = {}, 0
local LLAMA3 = {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}

local function rope_scaling(fn, s)
  if s == nil then return nil end
  if type(s) ~= "table" then error(("%s: scaling must be a table, got %s"):format(fn, type(s)), 3) end
  check_options(fn .. " scaling", s, {"rope_type", "type", table.unpack(LLAMA3)}, 4)
  local kind = s.rope_type or s.type
  if kind == "default" then return nil end
  if kind ~= "llama3" then
    error(("%s: scaling.rope_type must be \"llama3\" or \"default\", got %s"):format(fn, tostring(kind)), 3)
  end
  for _, k in ipairs(LLAMA3) do
    if type(s[k]) ~= "number" or not (s[k] > 0) or s[k] == math.huge then
      error(("%s: scaling.%s must be a positive number, got %s"):format(fn, k, tostring(s[k])), 3)
    end
  end
  if not (s.high_freq_factor > s.low_freq_factor) then
    error(("%s: scaling.high_freq_factor %g must be above low_freq_factor %g"):format(fn, s.high_freq_factor,
      s.low_freq_factor), 3)
  end
  return s
end

local function rope_inv_freq(d, theta, s)
  local inv = {}
  for i = 0, d // 2 - 1 do inv[i + 1] = 1 / theta ^ (2 * i / d) end
  if s then
    local old = s.original_max_position_embeddings
    local lo_wl, hi_wl = old / s.low_freq_factor, old / s.high_freq_factor
    for i, f in ipairs(inv) do
      local wl = 2 * math.pi / f
      if wl > lo_wl then
        inv[i] = f / s.factor
      elseif wl >= hi_wl then
        local k = (old / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
        inv[i] = (1 - k) * f / s.factor + k * f
      end
    end
  end
  return inv
end

-- head_dim and opts.theta checked for fn (errors at fn's caller); the theta
local function rope_dims(fn, head_dim, opts)
  if math.type(head_dim) ~= "integer" or head_dim < 2 or head_dim % 2 ~= 0 then
    error(("%s: head_dim must be a positive even integer, got %s"):format(fn, tostring(head_dim)), 3)
  end
  local theta = default(opts.theta, 10000)
  if type(theta) ~= "number" or not (theta > 0) or theta == math.huge then
    error(("%s: theta must be a positive number, got %s"):format(fn, tostring(theta)), 3)
  end
  return theta
end

-- nn.rope_inv_freq(head_dim, {theta, scaling}): the head_dim / 2 inverse
-- frequencies (Lua numbers) the tables are made of, with the same checks.
function nn.rope_inv_freq(head_dim, opts)
  local fn = "nn.rope_inv_freq"
  opts = check_options(fn, opts, {"theta", "scaling"}, 3)
  local theta = rope_dims(fn, head_dim, opts)
  return rope_inv_freq(head_dim, theta, rope_scaling(fn, opts.scaling))
end

function nn.rope_tables(positions, head_dim, opts)
  local fn = "nn.rope_tables"
  opts = check_options(fn, opts, {"theta", "scaling", "dtype", "device"}, 3)
  local theta = rope_dims(fn, head_dim, opts)
  local s = rope_scaling(fn, opts.scaling)
  local dtype, key = opts.dtype or "float32", nil
  if math.type(positions) == "integer" then
    if positions < 1 then error(("%s: positions must be a count >= 1 or a tensor, got %d"):format(fn, positions), 2) end
    key = ("%d %d %.17g %s %s %s"):format(positions, head_dim, theta, dtype, tostring(opts.device),
      s and ("%.17g %.17g %.17g %.17g"):format(s.factor, s.low_freq_factor, s.high_freq_factor,
        s.original_max_position_embeddings) or "-")
    local hit = rope_cache[key]
    if hit then return hit[1], hit[2] end
  elseif not zorch.is_tensor(positions) or positions:dtype() ~= "int64" or positions:dim() < 1 or positions:dim() > 2 then
    error(("%s: positions must be a count or an int64 tensor (seq) or (batch, seq), got %s"):format(fn,
      zorch.is_tensor(positions) and (positions:dtype() .. " " .. shape_str(positions)) or type(positions)), 2)
  end
  local cos, sin
  zorch.no_grad(function()
    local inv = zorch.tensor(rope_inv_freq(head_dim, theta, s), {dtype = "float32"})
    local pos = key and zorch.arange(positions, {dtype = "float32"}) or positions:to("float32")
    if opts.device then inv, pos = inv:to(opts.device), pos:to(opts.device) end
    local freqs = pos:unsqueeze(-1) * inv
    local emb = zorch.cat({freqs, freqs}, -1)
    cos, sin = emb:cos():to(dtype), emb:sin():to(dtype)
  end)
  if key then
    if rope_cached >= 32 then rope_cache, rope_cached = {}, 0 end
    rope_cache[key], rope_cached = {cos, sin}, rope_cached + 1
  end
  return cos, sin
end
