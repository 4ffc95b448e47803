-- zorch.optim.adamax: Adamax.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local betas, class, new, nonneg, zeros_like = B.betas, B.class, B.new, B.nonneg, B.zeros_like

-- Adamax: g += weight_decay p; m = b1 m + (1 - b1) g; u = max(b2 u, |g| + eps);
-- p -= lr / (1 - b1^step) * m / u. State: step, exp_avg, exp_inf.
optim.Adamax = class("optim.Adamax")
getmetatable(optim.Adamax).__call = function(_, params, opts)
  return new(optim.Adamax, "optim.Adamax", params, opts,
             {lr = 2e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0},
             {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg})
end
function optim.Adamax:_begin(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_inf = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.Adamax:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    local a, b = s.exp_inf * b2, g:abs() + o.eps
    s.exp_inf:copy_(zorch.where(a:gt(b), a, b))
    p:copy_(p - s.exp_avg / s.exp_inf * (o.lr / (1 - b1 ^ s.step)))
  end)
end
