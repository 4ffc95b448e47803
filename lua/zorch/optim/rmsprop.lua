-- zorch.optim.rmsprop: RMSprop.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local any, bool, class, new, nonneg, zeros_like = B.any, B.bool, B.class, B.new, B.nonneg, B.zeros_like

-- RMSprop, PyTorch's formulas: g += weight_decay * p; v = alpha * v + (1 - alpha) g^2;
-- centered: the denominator sqrt(v - mean(g)^2) + eps, else sqrt(v) + eps; with
-- momentum a buffer of g / denominator, else p -= lr * g / denominator. Composed
-- from the tensor ops (no kernel of its own), in place under no_grad.
optim.RMSprop = class("optim.RMSprop")
getmetatable(optim.RMSprop).__call = function(_, params, opts)
  return new(optim.RMSprop, "optim.RMSprop", params, opts,
             {lr = 1e-2, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0, centered = false},
             {lr = nonneg, alpha = nonneg, eps = nonneg, weight_decay = nonneg, momentum = nonneg, centered = bool})
end
function optim.RMSprop:_begin(s, p, groups)
  if not s.step then s.step, s.square_avg = 0, zeros_like(p) end
  if not s.grad_avg and any(groups, function(g) return g.centered end) then s.grad_avg = zeros_like(p) end
  if not s.momentum_buffer and any(groups, function(g) return g.momentum > 0 end) then
    s.momentum_buffer = zeros_like(p)
  end
  s.step = s.step + 1
end
function optim.RMSprop:_apply(p, g, s, o)
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    s.square_avg:copy_(s.square_avg * o.alpha + g * g * (1 - o.alpha))
    local avg
    if o.centered then
      s.grad_avg:copy_(s.grad_avg * o.alpha + g * (1 - o.alpha))
      avg = (s.square_avg - s.grad_avg * s.grad_avg):sqrt() + o.eps
    else
      avg = s.square_avg:sqrt() + o.eps
    end
    if o.momentum > 0 then
      s.momentum_buffer:copy_(s.momentum_buffer * o.momentum + g / avg)
      p:copy_(p - s.momentum_buffer * o.lr)
    else
      p:copy_(p - (g / avg) * o.lr)
    end
  end)
end
