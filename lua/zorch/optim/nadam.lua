-- zorch.optim.nadam: NAdam.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local betas, bool, class, new, nonneg, weight_decay = B.betas, B.bool, B.class, B.new, B.nonneg, B.weight_decay
local zeros_like = B.zeros_like

-- NAdam: mu_t = b1 (1 - 0.5 * 0.96^(step momentum_decay)); mu_product the
-- product of the mu_t so far; with Adam's moments m and v,
-- p -= lr (1 - mu_t) / (1 - mu_product) g / d + lr mu_{t+1} / (1 - mu_product mu_{t+1}) m / d,
-- d = sqrt(v / (1 - b2^step)) + eps. State: step, mu_product (a number), exp_avg, exp_avg_sq.
optim.NAdam = class("optim.NAdam")
getmetatable(optim.NAdam).__call = function(_, params, opts)
  return new(optim.NAdam, "optim.NAdam", params, opts,
             {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, momentum_decay = 4e-3,
              decoupled_weight_decay = false},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, momentum_decay = nonneg,
              decoupled_weight_decay = bool})
end
local function nadam_mu(o, step) return o.betas[1] * (1 - 0.5 * 0.96 ^ (step * o.momentum_decay)) end
-- mu_product advances here, once a step (a flat shard's runs share it: the first group's options)
function optim.NAdam:_begin(s, p, groups)
  if not s.step then s.step, s.mu_product, s.exp_avg, s.exp_avg_sq = 0, 1.0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
  s.mu_product = s.mu_product * nadam_mu(groups[1], s.step)
end
-- A run whose parameters missed steps while frozen (Optimizer:_step_runs):
-- the product over their own steps, with the run's options.
function optim.NAdam:_own_steps(s, o)
  local prod = 1.0
  for k = 1, s.step do prod = prod * nadam_mu(o, k) end
  s.mu_product = prod
end
function optim.NAdam:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  local mu, mu_next = nadam_mu(o, s.step), nadam_mu(o, s.step + 1)
  zorch.no_grad(function()
    g = weight_decay(p, g, o)
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
    local denom = (s.exp_avg_sq * (1 / (1 - b2 ^ s.step))):sqrt() + o.eps
    p:copy_(p - g / denom * (o.lr * (1 - mu) / (1 - s.mu_product))
              - s.exp_avg / denom * (o.lr * mu_next / (1 - s.mu_product * mu_next)))
  end)
end
