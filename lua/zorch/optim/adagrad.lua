-- zorch.optim.adagrad: Adagrad.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local class, new, nonneg = B.class, B.new, B.nonneg

-- Adagrad, PyTorch's formulas: g += weight_decay * p; sum += g^2;
-- p -= lr / (1 + (step - 1) * lr_decay) * g / (sqrt(sum) + eps).
optim.Adagrad = class("optim.Adagrad")
getmetatable(optim.Adagrad).__call = function(_, params, opts)
  return new(optim.Adagrad, "optim.Adagrad", params, opts,
             {lr = 1e-2, lr_decay = 0, weight_decay = 0, initial_accumulator_value = 0, eps = 1e-10},
             {lr = nonneg, lr_decay = nonneg, weight_decay = nonneg, initial_accumulator_value = nonneg, eps = nonneg})
end
function optim.Adagrad:_begin(s, p, groups)
  if not s.step then
    s.step = 0
    s.sum = zorch.full_like(p, groups[1].initial_accumulator_value)
  end
  s.step = s.step + 1
end
function optim.Adagrad:_apply(p, g, s, o)
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    local clr = o.lr / (1 + (s.step - 1) * o.lr_decay)
    s.sum:copy_(s.sum + g * g)
    p:copy_(p - (g / (s.sum:sqrt() + o.eps)) * clr)
  end)
end
