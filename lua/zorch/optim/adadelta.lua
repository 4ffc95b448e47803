-- zorch.optim.adadelta: Adadelta.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local class, new, nonneg, zeros_like = B.class, B.new, B.nonneg, B.zeros_like

-- Adadelta: g += weight_decay p; v = rho v + (1 - rho) g^2; delta = sqrt(u + eps)
-- / sqrt(v + eps) g; u = rho u + (1 - rho) delta^2; p -= lr delta.
-- State: step, square_avg, acc_delta.
local unit_closed = function(v) return type(v) == "number" and v >= 0 and v <= 1 end
zorch._checks_want[unit_closed] = "a number in [0, 1]"
optim.Adadelta = class("optim.Adadelta")
getmetatable(optim.Adadelta).__call = function(_, params, opts)
  return new(optim.Adadelta, "optim.Adadelta", params, opts,
             {lr = 1.0, rho = 0.9, eps = 1e-6, weight_decay = 0},
             {lr = nonneg, rho = unit_closed, eps = nonneg, weight_decay = nonneg})
end
function optim.Adadelta:_begin(s, p)
  if not s.step then s.step, s.square_avg, s.acc_delta = 0, zeros_like(p), zeros_like(p) end
  s.step = s.step + 1
end
function optim.Adadelta:_apply(p, g, s, o)
  zorch.no_grad(function()
    if o.weight_decay ~= 0 then g = g + p * o.weight_decay end
    s.square_avg:copy_(s.square_avg * o.rho + g * g * (1 - o.rho))
    local delta = (s.acc_delta + o.eps):sqrt() / (s.square_avg + o.eps):sqrt() * g
    s.acc_delta:copy_(s.acc_delta * o.rho + delta * delta * (1 - o.rho))
    p:copy_(p - delta * o.lr)
  end)
end
