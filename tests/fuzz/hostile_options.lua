-- Options tables of the losses, layers, attention and recurrent modules,
-- optimizers and schedulers, each key crossed with hostile values (numbers near
-- 2^31 and 2^63, NaN, infinities, -0, wrong strings, booleans, tables, a file,
-- a function), then random mixtures; sizes are capped so that no call builds
-- millions of layers. Same arguments and variables as hostile_ops.lua.
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local NAN, INF = 0/0, math.huge
local vals = {0, 1, -1, 2.5, -0.0, NAN, INF, -INF, 2^31|0, math.maxinteger, math.mininteger, 2^63, 1e300, "x", "mean", "sum", "none", "batchmean", true, false, {}, {1,2}, io.stdout, function() end}
local vnames = {}
for i, v in ipairs(vals) do vnames[i] = type(v) == "number" and tostring(v) or type(v) == "string" and ("'" .. v .. "'") or type(v) end
local function R(n, ...) local a = {...}; return function() return zorch.randn(table.unpack(a)) end end
local cases = {}
local function C(name, keys, f) cases[#cases+1] = {name, keys, f} end
local x23, v3 = R(0, 2, 3), R(0, 3)
C("smooth_l1_loss", {"beta", "reduction"}, function(o) return zorch.smooth_l1_loss(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), o) end)
C("huber_loss", {"delta", "reduction"}, function(o) return zorch.huber_loss(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), o) end)
C("kl_div", {"reduction", "log_target"}, function(o) return zorch.kl_div(zorch.randn(2, 3, {requires_grad=true}), zorch.rand(2, 3), o) end)
C("bce", {"weight", "reduction"}, function(o) return zorch.binary_cross_entropy(zorch.rand(2, 3, {requires_grad=true}), zorch.rand(2, 3), o) end)
C("bce_logits", {"weight", "pos_weight", "reduction"}, function(o) return zorch.binary_cross_entropy_with_logits(zorch.randn(2, 3, {requires_grad=true}), zorch.rand(2, 3), o) end)
C("cosine_similarity", {"dim", "eps"}, function(o) return zorch.cosine_similarity(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), o) end)
C("normalize", {"p", "dim", "eps"}, function(o) return zorch.normalize(zorch.randn(2, 3, {requires_grad=true}), o) end)
C("pairwise_distance", {"p", "eps", "keepdim"}, function(o) return zorch.pairwise_distance(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), o) end)
C("margin_ranking", {"margin", "reduction"}, function(o) return zorch.margin_ranking_loss(zorch.randn(3, {requires_grad=true}), zorch.randn(3), zorch.tensor({1.0, -1, 1}), o) end)
C("hinge_embedding", {"margin", "reduction"}, function(o) return zorch.hinge_embedding_loss(zorch.randn(3, {requires_grad=true}), zorch.tensor({1.0, -1, 1}), o) end)
C("cosine_embedding", {"margin", "reduction"}, function(o) return zorch.cosine_embedding_loss(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), zorch.tensor({1.0, -1}), o) end)
C("triplet", {"margin", "p", "eps", "swap"}, function(o) return zorch.triplet_margin_loss(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), zorch.randn(2, 3), o) end)
C("poisson_nll", {"log_input", "full", "eps", "reduction"}, function(o) return zorch.poisson_nll_loss(zorch.randn(2, 3, {requires_grad=true}), zorch.rand(2, 3), o) end)
C("gaussian_nll", {"full", "eps", "reduction"}, function(o) return zorch.gaussian_nll_loss(zorch.randn(2, 3, {requires_grad=true}), zorch.randn(2, 3), zorch.rand(2, 3), o) end)
C("conv1d", {"stride", "padding", "dilation", "groups"}, function(o) return zorch.conv1d(zorch.randn(2, 4, 5, {requires_grad=true}), zorch.randn(2, 2, 3), nil, o) end)
C("cross_entropy", {"reduction", "ignore_index", "label_smoothing", "weight"}, function(o) return zorch.cross_entropy(zorch.randn(2, 3, {requires_grad=true}), zorch.tensor({1, 3}), o) end)
C("nn.GroupNorm", {"eps", "affine"}, function(o) return nn.GroupNorm(1, 3, o)(zorch.randn(2, 3, 4)) end)
C("nn.RMSNorm", {"eps", "elementwise_affine"}, function(o) return nn.RMSNorm(3, o)(zorch.randn(2, 3)) end)
C("nn.InstanceNorm1d", {"eps", "momentum", "affine", "track_running_stats"}, function(o) local m = nn.InstanceNorm1d(3, o); m(zorch.randn(2, 3, 4)); m:eval(); return m(zorch.randn(2, 3, 4)) end)
C("nn.Conv1d", {"stride", "padding", "dilation", "groups", "bias", "padding_mode"}, function(o) return nn.Conv1d(4, 2, 3, o)(zorch.randn(2, 4, 5)) end)
C("nn.MaxPool1d", {"stride", "padding", "dilation", "ceil_mode"}, function(o) return nn.MaxPool1d(2, o)(zorch.randn(2, 3, 5)) end)
C("nn.AvgPool1d", {"stride", "padding", "ceil_mode", "count_include_pad"}, function(o) return nn.AvgPool1d(2, o)(zorch.randn(2, 3, 5)) end)
C("nn.RNN", {"num_layers", "nonlinearity", "bias", "batch_first", "dropout", "bidirectional"}, function(o) return nn.RNN(3, 2, o)(zorch.randn(4, 2, 3)) end)
C("nn.LSTM", {"num_layers", "bias", "batch_first", "dropout", "bidirectional", "proj_size"}, function(o) return nn.LSTM(3, 2, o)(zorch.randn(4, 2, 3)) end)
C("nn.GRU", {"num_layers", "bias", "batch_first", "dropout", "bidirectional"}, function(o) return nn.GRU(3, 2, o)(zorch.randn(4, 2, 3)) end)
C("nn.MHA", {"dropout", "bias", "add_bias_kv", "add_zero_attn", "kdim", "vdim", "batch_first"}, function(o) local m = nn.MultiheadAttention(4, 2, o); local x = zorch.randn(3, 2, 4); return m(x, x, x) end)
C("MHA.fwd", {"need_weights", "attn_mask", "key_padding_mask", "average_attn_weights", "is_causal"}, function(o) local m = nn.MultiheadAttention(4, 2); local x = zorch.randn(3, 2, 4); return m(x, x, x, o) end)
C("nn.TEL", {"dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first", "norm_first", "bias"}, function(o) return nn.TransformerEncoderLayer(4, 2, o)(zorch.randn(3, 2, 4)) end)
C("nn.TDL", {"dim_feedforward", "dropout", "activation", "layer_norm_eps", "batch_first", "norm_first"}, function(o) return nn.TransformerDecoderLayer(4, 2, o)(zorch.randn(3, 2, 4), zorch.randn(3, 2, 4)) end)
C("nn.Transformer", {"num_encoder_layers", "num_decoder_layers", "dim_feedforward", "dropout"}, function(o) o.d_model = 4; o.nhead = 2; return nn.Transformer(o)(zorch.randn(3, 2, 4), zorch.randn(3, 2, 4)) end)
local function OPT(n, keys) C("optim." .. n, keys, function(o)
  local p = zorch.randn(3, {requires_grad = true}); o.lr = o.lr or 0.01
  local opt = optim[n]({p}, o)
  for _ = 1, 3 do opt:zero_grad(); (p * p):sum():backward(); opt:step() end
  return p end) end
OPT("Adamax", {"lr", "betas", "eps", "weight_decay"})
OPT("NAdam", {"lr", "betas", "eps", "weight_decay", "momentum_decay", "decoupled_weight_decay"})
OPT("RAdam", {"lr", "betas", "eps", "weight_decay", "decoupled_weight_decay"})
OPT("Adadelta", {"lr", "rho", "eps", "weight_decay"})
OPT("RMSprop", {"lr", "alpha", "eps", "weight_decay", "momentum", "centered"})
OPT("Adagrad", {"lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"})
local function SCH(n, keys, extra) C("sched." .. n, keys, function(o)
  local p = zorch.randn(3, {requires_grad = true})
  local opt = optim.SGD({p}, {lr = 0.1})
  for k, v in pairs(extra or {}) do if o[k] == nil then o[k] = v end end
  local s = optim.lr_scheduler[n](opt, o)
  for _ = 1, 7 do opt:step(); s:step() end
  return opt.lr end) end
SCH("ExponentialLR", {"gamma"})
SCH("ConstantLR", {"factor", "total_iters"})
SCH("PolynomialLR", {"total_iters", "power"})
SCH("MultiplicativeLR", {"lr_lambda"}, {lr_lambda = function() return 0.9 end})
SCH("CosineAnnealingWarmRestarts", {"T_0", "T_mult", "eta_min"}, {T_0 = 2})
SCH("CosineAnnealingLR", {"T_max", "eta_min"}, {T_max = 3})
SCH("LinearLR", {"start_factor", "end_factor", "total_iters"})
SCH("CyclicLR", {"base_lr", "max_lr", "step_size_up", "step_size_down", "mode", "gamma", "cycle_momentum"}, {base_lr = 0.01, max_lr = 0.1})
SCH("OneCycleLR", {"max_lr", "total_steps", "pct_start", "anneal_strategy", "div_factor", "final_div_factor", "three_phase"}, {max_lr = 0.1, total_steps = 10})
SCH("MultiStepLR", {"milestones", "gamma"}, {milestones = {2}})
SCH("ReduceLROnPlateau", {"mode", "factor", "patience", "threshold", "cooldown", "min_lr", "eps"})
-- enumerate: each key x each value (others default), plus random pairs
local calls = {}
math.randomseed(11)
for _, c in ipairs(cases) do
  calls[#calls+1] = {c, {}}
  for _, k in ipairs(c[2]) do for vi = 1, #vals do calls[#calls+1] = {c, {{k, vi}}} end end
  for _ = 1, 40 do
    local kv = {}
    for _, k in ipairs(c[2]) do if math.random() < 0.5 then kv[#kv+1] = {k, math.random(#vals)} end end
    calls[#calls+1] = {c, kv}
  end
end
local START, STOP = tonumber(arg[1] or 1), tonumber(arg[2] or 1e9)
if arg[3] == "count" then print(#calls) return end
local log = io.open(os.getenv("HZ_LOG") or "hostile_options.cur", "w")
local errs = io.open(os.getenv("HZ_ERRS") or "hostile_options.errs", "a")
for i = START, math.min(STOP, #calls) do
  local c = calls[i]
  local o, d = {}, {}
  local SIZE = {num_layers = 1, num_encoder_layers = 1, num_decoder_layers = 1, dim_feedforward = 1, kdim = 1, vdim = 1, proj_size = 1, total_steps = 1, step_size_up = 1, step_size_down = 1, total_iters = 1, T_0 = 1, T_max = 1}
  for _, kv in ipairs(c[2]) do
    local v = vals[kv[2]]
    if SIZE[kv[1]] and type(v) == "number" and v > 1e6 then v = v > 0 and 1e6 // 1 | 0 or v end
    if SIZE[kv[1]] and kv[1]:match("layers") and type(v) == "number" and v > 64 then v = 64 end
    if SIZE[kv[1]] and (kv[1]:match("dim") or kv[1] == "proj_size") and type(v) == "number" and v > 64 then v = 2 ^ 40 | 0 end
    o[kv[1]] = v; d[#d+1] = kv[1] .. "=" .. (v == vals[kv[2]] and vnames[kv[2]] or tostring(v)) end
  local desc = c[1][1] .. "{" .. table.concat(d, ", ") .. "}"
  log:seek("set"); log:write(i, " ", desc, "\n                                                            \n"); log:flush()
  local ok, r = pcall(c[1][3], o)
  if not ok then errs:write(i, "\t", desc, "\t", (tostring(r):gsub("\n", " | ")), "\n")
  elseif zorch.is_tensor(r) and r.requires_grad then
    local okb, e = pcall(function() r:sum():backward() end)
    if not okb then errs:write(i, "\tBACKWARD ", desc, "\t", tostring(e), "\n") end
  end
end
print("done")
