-- zorch.optim.adam: Adam and AdamW.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local any, betas, bool, class, new, nonneg, zeros_like = B.any, B.betas, B.bool, B.class, B.new, B.nonneg, B.zeros_like

-- Adam and AdamW (decoupled weight decay). bias_correction = false (DeepSpeed's
-- option) steps by lr * m / (sqrt(v) + eps).
local function adam_class(name, decoupled, wd_default)
  local cls = class(name)
  getmetatable(cls).__call = function(_, params, opts)
    return new(cls, name, params, opts, {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = wd_default,
                                         amsgrad = false, bias_correction = true},
               {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, amsgrad = bool,
                bias_correction = bool})
  end
  local function kopts(o)
    return {lr = o.lr, beta1 = o.betas[1], beta2 = o.betas[2], eps = o.eps,
            weight_decay = o.weight_decay, decoupled = decoupled, amsgrad = o.amsgrad,
            no_bias_correction = not o.bias_correction}
  end
  function cls:_begin(s, p, groups, i)
    local store = self:_store(i)
    if store then -- the moments are the store's
      if any(groups, function(g) return g.amsgrad end) then
        error(("%s: amsgrad needs its state in memory, not in a state store"):format(name), 3)
      end
      if zorch.is_tensor(s.exp_avg) then -- set from a state dict or checkpoint: into the store
        store:put(s.exp_avg, s.exp_avg_sq)
        s.exp_avg, s.exp_avg_sq = nil, nil
      elseif not s.step then
        store:zero()
      end
      s.step = (s.step or 0) + 1
      return
    end
    if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
    if not s.max_exp_avg_sq and any(groups, function(g) return g.amsgrad end) then s.max_exp_avg_sq = zeros_like(p) end
    s.step = s.step + 1
  end
  function cls:_apply(p, g, s, o, _, i)
    local store = self:_store(i)
    if store then return store:adam(p, g, s.step, {{0, p:numel(), kopts(o)}}) end
    zorch._adam_step(p, g, s.exp_avg, s.exp_avg_sq, o.amsgrad and s.max_exp_avg_sq or nil, s.step, kopts(o))
  end
  -- the runs of a flat parameter with a store: one pass over the store
  function cls:_apply_runs(p, g, s, runs)
    local rs = {}
    for k, r in ipairs(runs) do
      rs[k] = {r[1] - 1, r[2], kopts(r[3]), (r.behind or 0) > 0 and s.step - r.behind or nil}
    end
    self:_store(1):adam(p, g, s.step, rs)
  end
  -- store: zorch.offload's (adam, get, put, zero) for parameter i
  function cls:_set_store(i, store)
    local p = self.params[i]
    if not p then error(("%s: no parameter %d for a state store"):format(name, i), 2) end
    local st = rawget(self, "_stores") or {}
    rawset(self, "_stores", st)
    st[i] = store
  end
  return cls
end
optim.Adam = adam_class("optim.Adam", false, 0)
optim.AdamW = adam_class("optim.AdamW", true, 1e-2)
