-- zorch.optim.radam: RAdam.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local betas, bool, class, new, nonneg, weight_decay = B.betas, B.bool, B.class, B.new, B.nonneg, B.weight_decay
local zeros_like = B.zeros_like

-- RAdam: Adam's moments; with rho_inf = 2 / (1 - b2) - 1 and rho_t = rho_inf -
-- 2 step b2^step / (1 - b2^step), p -= lr m_hat r sqrt(1 - b2^step) / (sqrt(v) + eps)
-- where rho_t > 5 (r the rectification term), else p -= lr m_hat.
-- State: step, exp_avg, exp_avg_sq.
optim.RAdam = class("optim.RAdam")
getmetatable(optim.RAdam).__call = function(_, params, opts)
  return new(optim.RAdam, "optim.RAdam", params, opts,
             {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, decoupled_weight_decay = false},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, decoupled_weight_decay = bool})
end
function optim.RAdam:_begin(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.RAdam:_apply(p, g, s, o)
  local b1, b2, t = o.betas[1], o.betas[2], s.step
  zorch.no_grad(function()
    g = weight_decay(p, g, o)
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
    local c1, c2 = 1 - b1 ^ t, 1 - b2 ^ t
    local m_hat = s.exp_avg * (1 / c1)
    local rho_inf = 2 / (1 - b2) - 1
    local rho_t = rho_inf - 2 * t * b2 ^ t / c2
    if rho_t > 5 then
      local rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
      p:copy_(p - m_hat * o.lr * (c2 ^ 0.5 / (s.exp_avg_sq:sqrt() + o.eps)) * rect)
    else
      p:copy_(p - m_hat * o.lr)
    end
  end)
end
