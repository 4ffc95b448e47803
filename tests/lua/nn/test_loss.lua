-- The losses of lua/zorch/nn/loss.lua, with the norms and 1-d layers, optimizers and schedulers
-- tested beside them:
-- values, gradients and trajectories against PyTorch's (lua/nn/loss.txt,
-- from lua/nn/gen_loss.py), state dicts, bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local nn, optim = zorch.nn, zorch.optim

local want, sd_order = {}, {}
for line in io.lines("lua/nn/loss.txt") do
  local name, key, rest = line:match("^(%S+) (%S+) ?(.*)$")
  local v = {}
  for x in rest:gmatch("%S+") do
    v[#v + 1] = tonumber(x) or ({nan = 0 / 0, inf = math.huge, ["-inf"] = -math.huge})[x]
  end
  want[name] = want[name] or {}
  if name:match("^sd_") then sd_order[name] = sd_order[name] or {}; table.insert(sd_order[name], key) end
  want[name][name:match("^sd_") and key or tonumber(key) or key] = v
end

-- fixed(shape, k): sin(0.37 k i + k) over the flattened index i, float64 (as the generator)
local function fixed(shape, k)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return (zorch.arange(n, {dtype = "float64"}) * (0.37 * k) + k):sin():reshape(shape)
end
local function leaf(t) return t:detach():clone():requires_grad_(true) end
local function flat(t)
  local out = {}
  local function walk(v) if type(v) == "table" then for _, x in ipairs(v) do walk(x) end else out[#out + 1] = v end end
  walk(zorch.is_tensor(t) and t:totable() or t)
  return out
end
-- worst relative error of got (a tensor or list) against the golden list; NaN
-- in both counts as equal; skip: indices (1-based) not compared
local function worst(got, exp, skip)
  local g, w = flat(got), 0
  if #g ~= #exp then return math.huge end
  for i = 1, #g do
    if not (skip and skip[i]) then
      local a, b = g[i], exp[i]
      local e = (a ~= a and b ~= b) and 0 or math.abs(a - b) / math.max(math.abs(b), 1e-6)
      if e ~= e then e = math.huge end
      w = math.max(w, e)
    end
  end
  return w
end

-- Checks fn(inputs...) and the gradients of sum(out * c) against the golden case.
local function check(name, fn, inputs, tol, skip)
  tol = tol or 1e-10
  local exp = want[name]
  if not exp then return ok(false, name .. ": golden case missing") end
  local out = fn(table.unpack(inputs))
  local e = worst(out, exp.out)
  local n = out:numel()
  local c = (zorch.arange(n, {dtype = "float64"}) * 0.1 + 1):reshape(out.shape)
  for _, t in ipairs(inputs) do if zorch.is_tensor(t) then t.grad = nil end end
  ;(out * c):sum():backward()
  local ge = 0
  for i, t in ipairs(inputs) do
    local g = exp["g" .. i]
    if g then
      if t.grad == nil then ge = math.huge else ge = math.max(ge, worst(t.grad, g, skip and skip[i])) end
    end
  end
  ok(e <= tol and ge <= tol, ("%s: PyTorch's values (worst %.2g) and gradients (worst %.2g)"):format(name, e, ge))
end

-- ---- losses ---------------------------------------------------------------------------------
local x, y = leaf(fixed({3, 4}, 1) * 2), leaf(fixed({3, 4}, 2) * 2)
for _, r in ipairs({"mean", "sum", "none"}) do
  check("smooth_l1_" .. r, function(a, b) return zorch.smooth_l1_loss(a, b, {reduction = r}) end, {x, y})
  check("huber_" .. r, function(a, b) return nn.HuberLoss{reduction = r}(a, b) end, {x, y})
end
check("smooth_l1_beta", function(a, b) return nn.SmoothL1Loss{beta = 0.5}(a, b) end, {x, y})
check("smooth_l1_beta0", function(a, b) return zorch.smooth_l1_loss(a, b, {beta = 0, reduction = "sum"}) end, {x, y})
check("huber_delta", function(a, b) return zorch.huber_loss(a, b, {delta = 0.7, reduction = "sum"}) end, {x, y})

local logp = leaf(zorch.log_softmax(fixed({3, 4}, 3), 2))
local q = leaf(zorch.softmax(fixed({3, 4}, 4), 2))
local logq = leaf(zorch.log_softmax(fixed({3, 4}, 4), 2))
for _, r in ipairs({"mean", "sum", "none", "batchmean"}) do
  check("kl_div_" .. r, function(a, b) return nn.KLDivLoss{reduction = r}(a, b) end, {logp, q})
end
check("kl_div_log_target", function(a, b) return zorch.kl_div(a, b, {reduction = "batchmean", log_target = true}) end,
  {logp, logq})
local q0 = q:detach():clone()
q0[2][3] = 0
-- (a target of 0 gets the gradient -input; PyTorch's is NaN there: element 7 not compared)
check("kl_div_zero", function(a, b) return zorch.kl_div(a, b, {reduction = "sum"}) end, {logp, leaf(q0)}, nil,
  {[2] = {[7] = true}})

local p = leaf((fixed({3, 4}, 5) * 3):sigmoid())
local t01 = fixed({3, 4}, 6):gt(0):to("float64")
local tsoft = leaf(fixed({3, 4}, 7):sigmoid())
local w = fixed({3, 4}, 8):abs() + 0.5
for _, r in ipairs({"mean", "sum", "none"}) do
  check("bce_" .. r, function(a, b) return zorch.binary_cross_entropy(a, b, {reduction = r}) end, {p, tsoft})
end
check("bce_weight", function(a, b) return nn.BCELoss{weight = w}(a, b) end, {p, t01})
do
  local l = zorch.no_grad(function() return zorch.binary_cross_entropy(p, tsoft) end)
  ok(not l.requires_grad and math.abs(l:item() - want.bce_mean.out[1]) < 1e-12, "binary_cross_entropy under no_grad")
end
local edge = leaf(zorch.tensor({0.0, 1.0, 0.0, 1.0, 1e-7, 1 - 1e-7}, {dtype = "float64"}))
local tedge = zorch.tensor({0.0, 1.0, 1.0, 0.0, 0.0, 1.0}, {dtype = "float64"})
check("bce_edge", function(a, b) return nn.BCELoss{reduction = "none"}(a, b) end, {edge, tedge}, 1e-8)
local z = leaf(fixed({3, 4}, 9) * 4)
local pw = fixed({4}, 10):abs() + 0.5
for _, r in ipairs({"mean", "sum", "none"}) do
  check("bcel_" .. r, function(a, b) return zorch.binary_cross_entropy_with_logits(a, b, {reduction = r}) end, {z, tsoft})
end
check("bcel_weights", function(a, b) return nn.BCEWithLogitsLoss{weight = w, pos_weight = pw}(a, b) end, {z, t01})

local a, b = leaf(fixed({3, 4}, 11)), leaf(fixed({3, 4}, 12))
check("cosine_similarity", function(u, v) return nn.CosineSimilarity()(u, v) end, {a, b})
check("cosine_similarity_dim0", function(u, v) return zorch.cosine_similarity(u, v, {dim = 1, eps = 1e-3}) end, {a, b})
check("normalize", function(u) return zorch.normalize(u) end, {a})
check("normalize_p1_dim0", function(u) return zorch.normalize(u, {p = 1, dim = 1}) end, {a})
local az = fixed({3, 4}, 11)
az[2] = 0
check("normalize_zero_row", function(u) return zorch.normalize(u) end, {leaf(az)})
check("cosine_similarity_zero_row", function(u, v) return zorch.cosine_similarity(u, v) end, {leaf(az), b})
check("pairwise_distance", function(u, v) return nn.PairwiseDistance()(u, v) end, {a, b})
check("pairwise_distance_p1", function(u, v) return zorch.pairwise_distance(u, v, {p = 1, eps = 1e-3, keepdim = true}) end,
  {a, b})
local x1, x2 = leaf(fixed({6}, 13)), leaf(fixed({6}, 14))
local ypm = zorch.where(fixed({6}, 15):gt(0), zorch.ones(6, {dtype = "float64"}), -zorch.ones(6, {dtype = "float64"}))
for _, r in ipairs({"mean", "sum", "none"}) do
  check("margin_ranking_" .. r, function(u, v) return nn.MarginRankingLoss{margin = 0.2, reduction = r}(u, v, ypm) end,
    {x1, x2})
  check("hinge_embedding_" .. r, function(u) return zorch.hinge_embedding_loss(u, ypm, {margin = 0.5, reduction = r}) end,
    {x1})
end
local y3 = zorch.where(fixed({3}, 16):gt(0), zorch.ones(3, {dtype = "float64"}), -zorch.ones(3, {dtype = "float64"}))
for _, r in ipairs({"mean", "sum", "none"}) do
  check("cosine_embedding_" .. r, function(u, v)
    return nn.CosineEmbeddingLoss{margin = 0.1, reduction = r}(u, v, y3) end, {a, b})
end
local n_ = leaf(fixed({3, 4}, 17))
for _, r in ipairs({"mean", "none"}) do
  check("triplet_" .. r, function(u, v, m) return nn.TripletMarginLoss{margin = 1.5, reduction = r}(u, v, m) end,
    {a, b, n_})
end
check("triplet_swap_p1", function(u, v, m)
  return zorch.triplet_margin_loss(u, v, m, {p = 1, swap = true, reduction = "sum"}) end, {a, b, n_})
local cnt = {}
for i, v in ipairs(flat(fixed({3, 4}, 18))) do cnt[i] = math.floor(math.abs(v) * 4) + 0.0 end
cnt = zorch.tensor(cnt, {dtype = "float64"}):reshape({3, 4})
for _, r in ipairs({"mean", "sum", "none"}) do
  check("poisson_" .. r, function(u) return nn.PoissonNLLLoss{reduction = r}(u, cnt) end, {a})
end
local rate = leaf(fixed({3, 4}, 19):abs() + 0.1)
check("poisson_rate_full", function(u)
  return zorch.poisson_nll_loss(u, cnt, {log_input = false, full = true, reduction = "none"}) end, {rate})
local var = leaf(fixed({3, 4}, 20):abs() + 0.05)
local var1 = leaf(fixed({3}, 21):abs() + 0.05)
for _, r in ipairs({"mean", "sum", "none"}) do
  check("gaussian_" .. r, function(u, v, s) return nn.GaussianNLLLoss{reduction = r}(u, v, s) end, {a, b, var})
end
check("gaussian_full_var1", function(u, v, s) return zorch.gaussian_nll_loss(u, v, s, {full = true, eps = 0.1}) end,
  {a, b, var1})

-- bad arguments name the function and the option
raises("smooth_l1_loss: an unknown option", function() zorch.smooth_l1_loss(x, y, {betta = 1}) end,
  "smooth_l1_loss", "unknown option 'betta'")
raises("smooth_l1_loss: a negative beta", function() zorch.smooth_l1_loss(x, y, {beta = -1}) end,
  "smooth_l1_loss: beta must be a number >= 0")
raises("nn.HuberLoss: delta 0", function() nn.HuberLoss{delta = 0} end, "nn.HuberLoss: delta must be a number > 0")
raises("nn.KLDivLoss: a bad reduction", function() nn.KLDivLoss{reduction = "avg"} end, "nn.KLDivLoss: reduction", "avg")
raises("binary_cross_entropy: shapes", function() zorch.binary_cross_entropy(p, zorch.ones(3)) end,
  "binary_cross_entropy", "(3, 4)", "(3)")
raises("binary_cross_entropy_with_logits: weight not a tensor", function()
  zorch.binary_cross_entropy_with_logits(z, t01, {weight = 2}) end, "binary_cross_entropy_with_logits: weight must be a tensor")
raises("cosine_similarity: dim 0", function() zorch.cosine_similarity(a, b, {dim = 0}) end,
  "cosine_similarity: dim must be a non-zero integer")
raises("normalize: an input that is not a tensor", function() zorch.normalize(3) end, "normalize: input must be a tensor")
raises("nn.TripletMarginLoss: margin 0", function() nn.TripletMarginLoss{margin = 0} end, "nn.TripletMarginLoss: margin")
raises("cosine_embedding_loss: a target of the wrong shape", function()
  zorch.cosine_embedding_loss(a, b, zorch.ones(4)) end, "cosine_embedding_loss: target (4)", "(3)")
raises("gaussian_nll_loss: var of a bad shape", function() zorch.gaussian_nll_loss(a, b, zorch.ones(4)) end,
  "gaussian_nll_loss: var (4)", "(3, 4)")
raises("gaussian_nll_loss: a negative var", function() zorch.gaussian_nll_loss(a, b, -var:detach()) end,
  "gaussian_nll_loss: var has negative entries")
raises("nn.PoissonNLLLoss: an unknown option", function() nn.PoissonNLLLoss{log = true} end,
  "nn.PoissonNLLLoss: unknown option 'log'")

-- ---- normalisation and 1-d layers ----------------------------------------------------------------
local xn = leaf(fixed({2, 6, 5}, 22) * 3 + 1)
local gw, gb = leaf(fixed({6}, 23) + 1), leaf(fixed({6}, 24))
check("group_norm", function(u, ww, bb) return zorch.group_norm(u, 3, ww, bb) end, {xn, gw, gb})
local x4 = leaf(fixed({2, 4, 3, 2}, 25) * 2)
check("group_norm_4d", function(u) return zorch.group_norm(u, 2, nil, nil, 1e-3) end, {x4})
local rw = leaf(fixed({5}, 26) + 1)
check("rms_norm", function(u, ww) return zorch.rms_norm(u, {5}, ww) end, {xn, rw})
check("rms_norm_eps", function(u) return nn.RMSNorm({6, 5}, {eps = 1e-3, elementwise_affine = false})(u) end, {xn})
local xs = (fixed({2, 3, 4}, 34) * 1e-4):float():requires_grad_(true)
check("rms_norm_f32", function(u) return nn.RMSNorm(4)(u) end, {xs}, 2e-5)
check("instance_norm1d", function(u) return nn.InstanceNorm1d(6)(u) end, {xn})
check("instance_norm2d_affine", function(u, ww, bb) return zorch.group_norm(u, 4, ww, bb) end,
  {x4, leaf(fixed({4}, 27) + 1), leaf(fixed({4}, 28))})
do
  local m = nn.InstanceNorm1d(6, {momentum = 0.3, track_running_stats = true, affine = true}):to("float64")
  for _ = 1, 2 do m(xn) end
  ok(worst(m.running_mean, want.instance_norm_running.mean) < 1e-10 and
     worst(m.running_var, want.instance_norm_running.var) < 1e-10 and m.num_batches_tracked:item() == 2,
     "InstanceNorm1d: PyTorch's running statistics after two training steps")
  m:eval()
  check("instance_norm_eval", function(u) return m(u) end, {xn})
  local u = m(xn[1])
  ok(table.concat(u.shape, ",") == "6,5" and worst(u, flat(m(xn)[1])) < 1e-12, "InstanceNorm1d: an unbatched input (C, L)")
end
local cw, cb = leaf(fixed({4, 3, 3}, 29) * 0.5), leaf(fixed({4}, 30))
local xc = leaf(fixed({2, 6, 7}, 31))
check("conv1d", function(u, ww, bb) return zorch.conv1d(u, ww, bb, {stride = 2, padding = 1, groups = 2}) end,
  {xc, cw, cb})
check("conv1d_dil", function(u, ww) return zorch.conv1d(u, ww, nil, {padding = 2, dilation = 2}) end,
  {leaf(fixed({2, 3, 7}, 32)), leaf(fixed({4, 3, 3}, 33))})
check("max_pool1d", function(u) return nn.MaxPool1d(3, {stride = 2, padding = 1})(u) end, {xc})
check("avg_pool1d", function(u) return nn.AvgPool1d(3, {stride = 2, padding = 1, count_include_pad = false})(u) end, {xc})
check("avg_pool1d_ceil", function(u) return nn.AvgPool1d(2, {ceil_mode = true})(u) end, {xc})
check("adaptive_avg_pool1d", function(u) return nn.AdaptiveAvgPool1d(3)(u) end, {xc})

-- state dicts: PyTorch's names and shapes, loaded back
local function sd_matches(name, m)
  local sd, keys = m:state_dict(), {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  local good = #keys == #sd_order[name]
  local load = {}
  for _, k in ipairs(sd_order[name]) do
    local shape = want[name][k]
    good = good and sd[k] ~= nil and table.concat(sd[k].shape, " ") == table.concat(shape, " ")
    load[k] = zorch.zeros(shape, {dtype = sd[k] and sd[k]:dtype() or "float32"}) + (k == "num_batches_tracked" and 3 or 0.5)
  end
  local okload = pcall(m.load_state_dict, m, load)
  ok(good and okload, name .. ": PyTorch's state-dict names and shapes, and they load")
  return m
end
local conv = sd_matches("sd_conv1d", nn.Conv1d(6, 4, 3, {groups = 2}))
ok(worst(conv(xc:float()), flat(zorch.conv1d(xc:float(), conv.weight, conv.bias, {groups = 2}))) == 0
   and conv.weight:max():item() == 0.5, "nn.Conv1d: the loaded weights give conv1d's output")
do
  zorch.manual_seed(3)
  local c = nn.Conv1d(3, 5, 2)
  local bound = 1 / math.sqrt(3 * 2)
  ok(c.weight:abs():max():item() <= bound and c.bias:abs():max():item() <= bound and c.weight:abs():max():item() > bound / 2,
     "nn.Conv1d: weights and bias within PyTorch's bound 1/sqrt(fan_in)")
  ok(tostring(c) == "nn.Conv1d(3, 5, kernel_size=(2,), stride=(1,))", "nn.Conv1d prints as PyTorch's repr: " .. tostring(c))
  local y = c(zorch.ones(3, 6))
  ok(table.concat(y.shape, ",") == "5,5", "nn.Conv1d: an unbatched input (C, L)")
end
sd_matches("sd_conv1d_nobias", nn.Conv1d(3, 5, 2, {bias = false}))
sd_matches("sd_group_norm", nn.GroupNorm(3, 6))
sd_matches("sd_rms_norm", nn.RMSNorm({4, 5}))
local inn = sd_matches("sd_instance_norm", nn.InstanceNorm2d(4, {affine = true, track_running_stats = true}))
ok(inn.num_batches_tracked:item() == 3 and inn.num_batches_tracked:dtype() == "int64", "InstanceNorm2d: num_batches_tracked loads (int64)")
ok(#nn.InstanceNorm2d(4):parameters() == 0 and next(nn.InstanceNorm2d(4):state_dict()) == nil,
   "InstanceNorm2d: no parameters or buffers by default (affine and running stats off, as PyTorch)")
do
  local pl = nn.ParameterList{zorch.zeros(2, 3), zorch.zeros(4)}
  sd_matches("sd_parameter_list", pl)
  ok(#pl == 2 and pl[1].shape[2] == 3 and pl[-1].shape[1] == 4 and pl[1].requires_grad and #pl:parameters() == 2,
     "ParameterList: read from 1, #, parameters that require grad")
  pl:append(zorch.ones(1))
  local names = {}
  for n in pl:named_parameters() do names[#names + 1] = n end
  ok(table.concat(names, " ") == "0 1 2", "ParameterList: append names the next one")
  raises("ParameterList: an item that is not a tensor", function() nn.ParameterList{1} end, "nn.ParameterList: item 1")
end
do
  local u = nn.Unflatten(2, {2, -1})(zorch.zeros(3, 12, 5))
  ok(table.concat(u.shape, ",") == "3,2,6,5", "Unflatten(2, {2, -1}): (3, 12, 5) -> (3, 2, 6, 5)")
  u = nn.Unflatten(-1, {5, 1})(zorch.zeros(3, 5))
  ok(table.concat(u.shape, ",") == "3,5,1", "Unflatten(-1, {5, 1})")
  raises("Unflatten: sizes that do not fit", function() nn.Unflatten(2, {5, 2})(zorch.zeros(3, 12)) end,
    "nn.Unflatten: sizes {5, 2}", "12")
  raises("Unflatten: two -1", function() nn.Unflatten(2, {-1, -1}) end, "nn.Unflatten: sizes")
end
do
  zorch.manual_seed(1)
  for _, case in ipairs({{nn.Dropout1d, {8, 16, 10}}, {nn.Dropout2d, {8, 16, 3, 4}}, {nn.Dropout1d, {16, 10}}}) do
    local d = case[1](0.25)
    local xx = zorch.ones(case[2])
    local y = d(xx)
    local name = getmetatable(d).__name
    -- each channel all 0 or all 1 / 0.75
    local batched = #case[2] ~= 2
    local per = y:reshape({batched and case[2][1] * case[2][2] or case[2][1], -1})
    local mx, mn = per:max(2), per:min(2)
    local whole, zeros = true, 0
    for i, v in ipairs(mx:totable()) do
      local lo = mn:totable()[i]
      whole = whole and v == lo and (v == 0 or math.abs(v - 1 / 0.75) < 1e-6)
      if v == 0 then zeros = zeros + 1 end
    end
    ok(whole and zeros > 0 and zeros < per.shape[1] / 2, ("%s: whole channels zeroed (%d of %d), the rest scaled by 1/(1-p)"):format(
      name, zeros, per.shape[1]))
    d:eval()
    ok(worst(d(xx), flat(xx)) == 0, name .. ": identity in eval")
  end
  raises("Dropout2d: a 2-d input", function() nn.Dropout2d()(zorch.ones(2, 3)) end, "nn.Dropout2d: expected")
  raises("Dropout1d: p above 1", function() nn.Dropout1d(1.5) end, "nn.Dropout1d: p must be")
end
raises("group_norm: groups that do not divide the channels", function() zorch.group_norm(xn, 4) end,
  "group_norm: num_groups", "6 channels", "(2, 6, 5)")
raises("nn.GroupNorm: an unknown option", function() nn.GroupNorm(2, 4, {momentum = 1}) end,
  "nn.GroupNorm: unknown option 'momentum'")
raises("rms_norm: a shape that is not the last dims", function() zorch.rms_norm(xn, {6}) end,
  "rms_norm: normalized_shape (6)", "(2, 6, 5)")
raises("InstanceNorm1d: a 4-d input", function() nn.InstanceNorm1d(6)(zorch.ones(1, 6, 2, 2)) end,
  "nn.InstanceNorm1d: expected 2D or 3D input")
raises("conv1d: a 4-d input", function() zorch.conv1d(zorch.ones(1, 3, 2, 2), zorch.ones(4, 3, 1)) end,
  "conv1d: expected input (N, C, L) or (C, L)")
raises("conv1d: channels that do not match, in 1-d shapes", function()
  zorch.conv1d(zorch.ones(1, 2, 5), zorch.ones(4, 3, 1)) end, "conv1d: weight (4, 3, 1)", "input (1, 2, 5)")
raises("MaxPool1d: an input shorter than the kernel", function() nn.MaxPool1d(3)(zorch.ones(1, 2, 2)) end,
  "nn.MaxPool1d", "input (1, 2, 2)", "kernel 3")
raises("nn.Conv1d: a pair as kernel_size", function() nn.Conv1d(3, 4, {2, 2}) end, "nn.Conv1d: kernel_size")
raises("nn.Conv1d: an unknown option", function() nn.Conv1d(3, 4, 2, {padding_mode = "zeros"}) end,
  "nn.Conv1d: unknown option 'padding_mode'")
raises("nn.MaxPool1d: stride 0", function() nn.MaxPool1d(2, {stride = 0}) end, "nn.MaxPool1d: stride")

-- ---- optimizers ---------------------------------------------------------------------------------
do
  local W = zorch.tensor({1, 3, 0.5}, {dtype = "float64"})
  local function loss(p) return (p * p * W):sum() + p:sum() end
  -- five steps as PyTorch's; the state dict after two loaded into a new
  -- optimizer continues the same trajectory
  local function run(name, make)
    local p = zorch.tensor({0.5, -1, 2}, {dtype = "float64", requires_grad = true})
    local opt, e = make({p}), 0
    local q, sd
    for step = 1, 5 do
      opt:zero_grad()
      loss(p):backward()
      opt:step()
      e = math.max(e, worst(p, want[name][step]))
      if step == 2 then sd, q = opt:state_dict(), p:detach():clone():requires_grad_(true) end
    end
    ok(e < 1e-12, ("%s: PyTorch's parameters over 5 steps (worst relative error %.2g)"):format(name, e))
    local opt2 = make({q})
    opt2:load_state_dict(sd)
    for _ = 3, 5 do opt2:zero_grad(); loss(q):backward(); opt2:step() end
    ok(worst(q, want[name][5]) < 1e-12, name .. ": the state dict after 2 steps, loaded, continues PyTorch's trajectory")
    return sd
  end
  local sd = run("adamax", function(ps) return optim.Adamax(ps) end)
  ok(sd.state[1].step == 2 and zorch.is_tensor(sd.state[1].exp_avg) and zorch.is_tensor(sd.state[1].exp_inf),
     "Adamax: state names step, exp_avg, exp_inf (PyTorch's)")
  run("adamax_wd", function(ps) return optim.Adamax(ps, {lr = 0.05, betas = {0.8, 0.9}, eps = 1e-6, weight_decay = 0.1}) end)
  sd = run("nadam", function(ps) return optim.NAdam(ps) end)
  ok(sd.state[1].step == 2 and type(sd.state[1].mu_product) == "number" and zorch.is_tensor(sd.state[1].exp_avg_sq),
     "NAdam: state names step, mu_product, exp_avg, exp_avg_sq (PyTorch's)")
  run("nadam_wd", function(ps) return optim.NAdam(ps, {lr = 0.05, weight_decay = 0.1, momentum_decay = 0.01}) end)
  run("nadam_dwd", function(ps) return optim.NAdam(ps, {lr = 0.05, weight_decay = 0.1, decoupled_weight_decay = true}) end)
  run("radam", function(ps) return optim.RAdam(ps, {lr = 0.1}) end)
  run("radam_wd", function(ps) return optim.RAdam(ps, {lr = 0.1, weight_decay = 0.1, betas = {0.5, 0.6}}) end)
  run("radam_dwd", function(ps)
    return optim.RAdam(ps, {lr = 0.1, weight_decay = 0.1, betas = {0.5, 0.6}, decoupled_weight_decay = true}) end)
  sd = run("adadelta", function(ps) return optim.Adadelta(ps) end)
  ok(zorch.is_tensor(sd.state[1].square_avg) and zorch.is_tensor(sd.state[1].acc_delta),
     "Adadelta: state names square_avg, acc_delta (PyTorch's)")
  run("adadelta_wd", function(ps) return optim.Adadelta(ps, {lr = 0.5, rho = 0.8, eps = 1e-4, weight_decay = 0.1}) end)
  ok(sd.param_groups[1].lr == 1.0 and sd.param_groups[1].rho == 0.9 and sd.param_groups[1].eps == 1e-6,
     "Adadelta: PyTorch's defaults lr 1, rho 0.9, eps 1e-6")
  local d = optim.NAdam({zorch.zeros(1, {requires_grad = true})}).param_groups[1]
  ok(d.lr == 2e-3 and d.momentum_decay == 4e-3 and d.decoupled_weight_decay == false, "NAdam: PyTorch's defaults")

  local p1 = {zorch.zeros(1, {requires_grad = true})}
  raises("NAdam: an unknown option", function() optim.NAdam(p1, {momentum = 0.9}) end, "optim.NAdam: unknown option 'momentum'")
  raises("RAdam: bad betas", function() optim.RAdam(p1, {betas = {1.5, 0.9}}) end, "optim.RAdam: invalid betas")
  raises("Adamax: a negative lr", function() optim.Adamax(p1, {lr = -1}) end, "optim.Adamax: invalid lr")
  raises("Adadelta: rho above 1", function() optim.Adadelta(p1, {rho = 2}) end, "optim.Adadelta: invalid rho",
    "a number in [0, 1]")
  raises("NAdam: decoupled_weight_decay not a boolean", function() optim.NAdam(p1, {decoupled_weight_decay = 1}) end,
    "optim.NAdam: invalid decoupled_weight_decay")

  -- the Engine steps them as the optimizer alone
  local X = fixed({8, 4}, 40):float()
  local function net()
    zorch.manual_seed(7)
    return nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 2))
  end
  for _, make in ipairs({function(ps) return optim.Adamax(ps, {lr = 0.01}) end,
                         function(ps) return optim.NAdam(ps, {lr = 0.01, weight_decay = 0.1}) end,
                         function(ps) return optim.RAdam(ps, {lr = 0.01, decoupled_weight_decay = true, weight_decay = 0.1}) end,
                         function(ps) return optim.Adadelta(ps) end}) do
    local m1, m2 = net(), net()
    local o1 = make(m1:parameters())
    for _ = 1, 8 do o1:zero_grad(); m1(X):pow(2):mean():backward(); o1:step() end
    local e = zorch.Engine{zero_stage = 2}
    local mb, _, ob = e:prepare(m2, nil, make(m2:parameters()))
    for _ = 1, 8 do ob:zero_grad(); e:backward(mb(X):pow(2):mean()); ob:step() end
    tap.close(m2[1].weight, m1[1].weight, 1e-5, getmetatable(o1).__name .. ": the Engine at stage 2 steps as the optimizer alone")
  end
end

-- ---- schedulers ---------------------------------------------------------------------------------
do
  local S = optim.lr_scheduler
  local function sgd() return optim.SGD({zorch.zeros(1, {requires_grad = true})}, {lr = 0.1, momentum = 0.5}) end
  -- the lr at steps 0..n-1 as PyTorch's; a state dict saved halfway and loaded
  -- into a fresh scheduler continues it
  local function lrs(name, make, n, moms)
    local exp = want[name].lrs
    n = n or #exp
    local opt = sgd()
    local sched, e, me = make(opt), 0, 0
    local half, sd = n // 2, nil
    for i = 1, n do
      e = math.max(e, math.abs(opt.lr - exp[i]))
      if moms then me = math.max(me, math.abs(opt.param_groups[1].momentum - want[name].moms[i])) end
      if i == half then sd = sched:state_dict() end
      sched:step()
    end
    ok(e < 1e-15 and me < 1e-15, ("%s: PyTorch's lr%s over %d steps (worst %.2g)"):format(name,
      moms and " and momentum" or "", n, math.max(e, me)))
    local opt2 = sgd()
    local s2 = make(opt2)
    s2:load_state_dict(sd)
    e = 0
    for i = half, n do
      e = math.max(e, math.abs(opt2.lr - exp[i]))
      s2:step()
    end
    ok(e < 1e-15, ("%s: the state dict at step %d, loaded, continues it (worst %.2g)"):format(name, half - 1, e))
  end
  lrs("exponential", function(o) return S.ExponentialLR(o, {gamma = 0.8}) end)
  lrs("constant", function(o) return S.ConstantLR(o, {factor = 0.25, total_iters = 3}) end)
  lrs("polynomial", function(o) return S.PolynomialLR(o, {total_iters = 6, power = 2.0}) end)
  lrs("multiplicative", function(o)
    return S.MultiplicativeLR(o, {lr_lambda = function(e) return e % 2 == 0 and 0.9 or 0.5 end}) end)
  lrs("warm_restarts", function(o) return S.CosineAnnealingWarmRestarts(o, {T_0 = 3, T_mult = 2, eta_min = 0.01}) end)
  lrs("sequential", function(o)
    return S.SequentialLR(o, {schedulers = {S.LinearLR(o, {start_factor = 0.2, total_iters = 3}),
                                            S.ExponentialLR(o, {gamma = 0.7})}, milestones = {4}}) end)
  lrs("chained", function(o)
    return S.ChainedScheduler({S.ConstantLR(o, {factor = 0.5, total_iters = 4}), S.ExponentialLR(o, {gamma = 0.9})}) end)
  lrs("cyclic", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 3, cycle_momentum = false}) end)
  lrs("cyclic2", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 2, step_size_down = 3,
                                                   mode = "triangular2", cycle_momentum = false}) end)
  lrs("cyclic_exp", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 3, mode = "exp_range",
                                                      gamma = 0.9, cycle_momentum = false}) end)
  lrs("cyclic_mom", function(o) return S.CyclicLR(o, {base_lr = 0.01, max_lr = 0.1, step_size_up = 2, step_size_down = 4,
                                                      mode = "triangular2"}) end, nil, true)
  do -- each group follows the schedule from its own lr
    local a, b = zorch.zeros(1, {requires_grad = true}), zorch.zeros(1, {requires_grad = true})
    local opt = optim.SGD({{params = {a}, lr = 0.1}, {params = {b}, lr = 1.0}})
    local sch = S.ExponentialLR(opt, {gamma = 0.8})
    for _ = 1, 3 do sch:step() end
    ok(math.abs(opt.param_groups[1].lr - want.exponential.lrs[4]) < 1e-15 and
       math.abs(opt.param_groups[2].lr - 10 * want.exponential.lrs[4]) < 1e-14, "ExponentialLR: each group from its own lr")
    local c = S.CyclicLR(opt, {base_lr = {0.01, 0.02}, max_lr = {0.1, 0.2}, step_size_up = 3, cycle_momentum = false})
    c:step()
    ok(math.abs(opt.param_groups[2].lr - 2 * want.cyclic.lrs[2]) < 1e-15, "CyclicLR: base_lr and max_lr per group")
  end
  local o = sgd()
  raises("ExponentialLR without gamma", function() S.ExponentialLR(o, {}) end, "ExponentialLR: option 'gamma' is required")
  raises("ConstantLR: factor above 1", function() S.ConstantLR(o, {factor = 2}) end, "ConstantLR: invalid factor")
  raises("PolynomialLR: an unknown option", function() S.PolynomialLR(o, {steps = 3}) end,
    "PolynomialLR: unknown option 'steps'")
  raises("CosineAnnealingWarmRestarts: T_0 0", function() S.CosineAnnealingWarmRestarts(o, {T_0 = 0}) end,
    "CosineAnnealingWarmRestarts: invalid T_0")
  raises("SequentialLR: milestones that do not fit", function()
    S.SequentialLR(o, {schedulers = {S.ExponentialLR(o, {gamma = 0.5})}, milestones = {3}}) end,
    "SequentialLR: expected 0 milestones")
  raises("SequentialLR: a plateau scheduler", function()
    S.SequentialLR(o, {schedulers = {S.ReduceLROnPlateau(o), S.ExponentialLR(o, {gamma = 0.5})}, milestones = {3}}) end,
    "SequentialLR: scheduler 1 is not a closed-form scheduler")
  raises("ChainedScheduler: a CyclicLR", function()
    S.ChainedScheduler({S.CyclicLR(o, {base_lr = 0.1, max_lr = 1}), S.ExponentialLR(o, {gamma = 0.5})}) end,
    "ChainedScheduler: scheduler 1 is not a closed-form scheduler")
  raises("ChainedScheduler: an empty list", function() S.ChainedScheduler({}) end, "ChainedScheduler: schedulers")
  raises("CyclicLR without max_lr", function() S.CyclicLR(o, {base_lr = 0.1}) end, "CyclicLR: option 'max_lr' is required")
  raises("CyclicLR: a bad mode", function() S.CyclicLR(o, {base_lr = 0.1, max_lr = 1, mode = "sine"}) end,
    "CyclicLR: invalid mode")
  raises("CyclicLR: momentum on an optimizer without it", function()
    S.CyclicLR(optim.Adagrad({zorch.zeros(1, {requires_grad = true})}), {base_lr = 0.1, max_lr = 1}) end,
    "CyclicLR: cycle_momentum needs")
end

tap.done()
