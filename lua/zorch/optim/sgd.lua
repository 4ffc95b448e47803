-- zorch.optim.sgd: SGD (momentum, dampening, Nesterov).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local any, bool, class, new, nonneg, zeros_like = B.any, B.bool, B.class, B.new, B.nonneg, B.zeros_like

optim.SGD = class("optim.SGD")
getmetatable(optim.SGD).__call = function(_, params, opts)
  return new(optim.SGD, "optim.SGD", params, opts,
             {lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = false},
             {lr = nonneg, momentum = nonneg, dampening = nonneg, weight_decay = nonneg, nesterov = bool},
             function(o, where, level)
               if o.nesterov and (o.momentum <= 0 or o.dampening ~= 0) then
                 error(("optim.SGD: nesterov needs momentum > 0 and dampening 0%s"):format(
                   where and (" (" .. where .. ")") or ""), level)
               end
             end)
end
-- the momentum buffer is made at the first step with momentum (a scheduler may
-- turn momentum on later); `first` tells the kernel to start it from the gradient
function optim.SGD:_begin(s, p, groups)
  if not s.momentum_buffer and any(groups, function(g) return g.momentum ~= 0 end) then
    s.momentum_buffer = zeros_like(p)
    return true
  end
  return false
end
function optim.SGD:_apply(p, g, s, o, first)
  local k = {lr = o.lr, momentum = o.momentum, dampening = o.dampening, weight_decay = o.weight_decay,
             nesterov = o.nesterov}
  zorch._sgd_step(p, g, s.momentum_buffer, first, k)
end
