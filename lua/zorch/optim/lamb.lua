-- zorch.optim.lamb: Lamb (layer-wise trust ratios, as DeepSpeed's FusedLamb).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local betas, bool, class, new, nonneg, zeros_like = B.betas, B.bool, B.class, B.new, B.nonneg, B.zeros_like

-- Lamb (layer-wise adaptive moments): Adam's moments give u = m_hat / (sqrt(v_hat)
-- + eps) + weight_decay * p per parameter tensor; p -= lr * ratio * u with ratio =
-- ||p|| / ||u|| clamped to [min_coeff, max_coeff], and 1 (then clamped) when either
-- norm is 0, as DeepSpeed's FusedLamb.
optim.Lamb = class("optim.Lamb")
getmetatable(optim.Lamb).__call = function(_, params, opts)
  return new(optim.Lamb, "optim.Lamb", params, opts,
             {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0,
              bias_correction = true, max_coeff = 10.0, min_coeff = 0.01},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, bias_correction = bool,
              max_coeff = nonneg, min_coeff = nonneg})
end
function optim.Lamb:_begin(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.Lamb:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  zorch.no_grad(function()
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
    local c1, c2 = 1, 1
    if o.bias_correction then c1, c2 = 1 - b1 ^ s.step, 1 - b2 ^ s.step end
    local u = (s.exp_avg * (1 / c1)) / ((s.exp_avg_sq * (1 / c2)):sqrt() + o.eps)
    if o.weight_decay ~= 0 then u = u + p * o.weight_decay end
    local pn, un = math.sqrt((p * p):sum():item()), math.sqrt((u * u):sum():item())
    local ratio = 1
    if pn ~= 0 and un ~= 0 then ratio = pn / un end
    ratio = math.min(math.max(ratio, o.min_coeff), o.max_coeff)
    p:copy_(p - u * (o.lr * ratio))
  end)
end

-- The Engine steps a flat shard: Lamb's trust ratio is still per parameter
-- tensor. runs = {{first, count, group, tensor}, ...}, one per piece of a
-- parameter in this shard; reduce(sums) adds a float64 tensor over the ranks
-- holding the other pieces (the squared norms of each tensor's weights and
-- update, two entries a tensor), so every piece of a tensor takes one ratio.
optim.Lamb._per_tensor = true
function optim.Lamb:_step_tensors(p, g, runs, ntensors, reduce)
  local s = self.state[1]
  if not s then s = {}; self.state[1] = s end
  self:_begin(s, p)
  local sums, us = {}, {}
  for i = 1, 2 * ntensors do sums[i] = 0 end
  zorch.no_grad(function()
    for k, r in ipairs(runs) do
      local a, n, o, t = r[1], r[2], r[3], r[4]
      local pv, gv = p:narrow(1, a, n), g:narrow(1, a, n)
      local m, v = s.exp_avg:narrow(1, a, n), s.exp_avg_sq:narrow(1, a, n)
      local b1, b2 = o.betas[1], o.betas[2]
      m:copy_(m * b1 + gv * (1 - b1))
      v:copy_(v * b2 + gv * gv * (1 - b2))
      local c1, c2, step = 1, 1, s.step - (r.behind or 0) -- (the tensor's own steps: see _step_runs)
      if o.bias_correction then c1, c2 = 1 - b1 ^ step, 1 - b2 ^ step end
      local u = (m * (1 / c1)) / ((v * (1 / c2)):sqrt() + o.eps)
      if o.weight_decay ~= 0 then u = u + pv * o.weight_decay end
      us[k] = u
      sums[2 * t - 1] = sums[2 * t - 1] + (pv * pv):sum():item()
      sums[2 * t] = sums[2 * t] + (u * u):sum():item()
    end
    local all = zorch.tensor(sums, {dtype = "float64"})
    reduce(all)
    sums = all:totable()
    for k, r in ipairs(runs) do
      local a, n, o, t = r[1], r[2], r[3], r[4]
      local pn, un = math.sqrt(sums[2 * t - 1]), math.sqrt(sums[2 * t])
      local ratio = (pn ~= 0 and un ~= 0) and pn / un or 1
      ratio = math.min(math.max(ratio, o.min_coeff), o.max_coeff)
      local pv = p:narrow(1, a, n)
      pv:copy_(pv - us[k] * (o.lr * ratio))
    end
  end)
end

-- PyTorch's formulas and state names, composed from the tensor ops in place
-- under no_grad as RMSprop is (so the Engine steps them on its flat shards too).
