-- zorch.optim.onebit: DeepSpeed's communication-compressed optimizers, 1-bit
-- Adam (Tang et al. 2021), 0/1 Adam (Lu et al. 2022) and 1-bit LAMB (Li et
-- al. 2021). Under the Engine (ZeRO stage 0) they reduce what they need
-- themselves through the group's 1-bit compressed all-reduce (sign bits and
-- one scale per rank's chunk, with error feedback), after telling the
-- engine to leave each rank's gradient unreduced; alone, or on one rank,
-- nothing is compressed and they are the plain algorithms. docs/onebit.md.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local optim = zorch.optim
local B = zorch._require "zorch.optim.optimizer"
local betas, bool, class, new, nonneg, zeros_like = B.betas, B.bool, B.class, B.new, B.nonneg, B.zeros_like

local count = function(v) return type(v) == "number" and v >= 0 and v == math.floor(v) and v < 2^53 end
local positive = function(v) return count(v) and v >= 1 end
local word = function(v) return type(v) == "string" end
local off = function(v) return v == false end
zorch._checks_want[count] = "a whole number >= 0"
zorch._checks_want[positive] = "a whole number >= 1"
zorch._checks_want[word] = "a string (\"nccl\", \"mpi\", ...; the tensors' device picks the transport)"
zorch._checks_want[off] = "false (the 1-bit optimizers have no AMSGrad variant)"

-- DeepSpeed's options and defaults, common to the three.
local function common(extra)
  local d = {lr = 1e-3, betas = {0.9, 0.999}, eps = 1e-8, weight_decay = 0, bias_correction = true,
             eps_inside_sqrt = false, max_grad_norm = 0, amsgrad = false, cuda_aware = false,
             comm_backend_name = "nccl"}
  local c = {lr = nonneg, betas = betas, eps = nonneg, weight_decay = nonneg, bias_correction = bool,
             eps_inside_sqrt = bool, max_grad_norm = nonneg, amsgrad = off, cuda_aware = bool, comm_backend_name = word}
  for k, v in pairs(extra) do d[k], c[k] = v[1], v[2] end
  return d, c
end

local function make(name, extra)
  local cls = class(name)
  local d, c = common(extra)
  getmetatable(cls).__call = function(_, params, opts) return new(cls, name, params, opts, d, c) end
  -- Under the Engine: its data group and its switch for unreduced gradients.
  -- DeepSpeed refuses the 1-bit optimizers with ZeRO partitioning.
  function cls:_attach(engine, user)
    local cfg = engine.cfg
    if cfg.zero_stage ~= 0 then
      error(("Engine:prepare: %s runs at zero_stage 0 only (DeepSpeed refuses its 1-bit optimizers with " ..
             "ZeRO partitioning), got zero_stage %d"):format(name:gsub("^optim%.", ""), cfg.zero_stage), 3)
    end
    if cfg.offload_optimizer then
      error(("Engine:prepare: %s keeps its state in memory: offload_optimizer is not available with it"):format(
        name:gsub("^optim%.", "")), 3)
    end
    if not cls._per_tensor and #user.param_groups > 1 then
      error(("Engine:prepare: %s steps the engine's one flat buffer with one set of options: give it one " ..
             "parameter group, not %d"):format(name:gsub("^optim%.", ""), #user.param_groups), 3)
    end
    rawset(self, "_group", engine.group)
    rawset(self, "_zero", engine.zero)
  end
  -- the engine's gradient at the next step: each rank's own (true) or the mean
  function cls:_local_grads(on)
    local z = rawget(self, "_zero")
    if z and rawget(self, "_local") ~= on then z:set_local_grads(on); rawset(self, "_local", on) end
  end
  return cls
end

-- buf (contiguous float32) to the mean over the group through the compressed
-- all-reduce; the error feedback buffers belong to `s` (a state) and `key`,
-- outside the state dict: like DeepSpeed, a restored state starts them again.
local function compress(self, s, key, buf)
  local g = rawget(self, "_group")
  if not g or g:size() == 1 then return buf end
  local errs = rawget(self, "_errors")
  if not errs then errs = setmetatable({}, {__mode = "k"}); rawset(self, "_errors", errs) end
  errs[s] = errs[s] or {}
  local e = errs[s][key]
  if not e then
    local wn, sn = g:onebit_sizes(buf:numel())
    e = {zorch.zeros(wn), zorch.zeros(sn)}
    errs[s][key] = e
  end
  return g:compressed_allreduce(buf, e[1], e[2])
end

local function reset_errors(self)
  local errs = rawget(self, "_errors")
  for _, per in pairs(errs or {}) do for _, e in pairs(per) do e[1]:zero_(); e[2]:zero_() end end
end

local function adam_update(p, m, v, o)
  local u = m / (v:sqrt() + o.eps)
  if o.weight_decay > 0 then u = u + p * o.weight_decay end
  return u
end

local function init_moments(s, p)
  if not s.step then s.step, s.exp_avg, s.exp_avg_sq = 0, zeros_like(p), zeros_like(p) end
end

-- 1-bit Adam: Adam for freeze_step steps (gradients averaged by the engine),
-- then the variance stays frozen and each rank's momentum, updated from its
-- own gradient, is averaged through the compressed all-reduce. As DeepSpeed's,
-- no bias correction (bias_correction is accepted and changes nothing) and
-- weight decay added to the update.
optim.OneBitAdam = make("optim.OneBitAdam", {freeze_step = {100000, count}})
optim.OneBitAdam._step_runs = false -- (the Engine steps its one flat buffer whole)
function optim.OneBitAdam:_begin(s, p)
  init_moments(s, p)
  s.step = s.step + 1
end
function optim.OneBitAdam:_apply(p, g, s, o)
  local b1, b2 = o.betas[1], o.betas[2]
  zorch.no_grad(function()
    s.exp_avg:copy_(s.exp_avg * b1 + g * (1 - b1))
    if s.step <= self.defaults.freeze_step then
      s.exp_avg_sq:copy_(s.exp_avg_sq * b2 + g * g * (1 - b2))
    else
      compress(self, s, "m", s.exp_avg)
    end
    p:copy_(p - adam_update(p, s.exp_avg, s.exp_avg_sq, o) * o.lr)
  end)
end
function optim.OneBitAdam:step()
  B.Optimizer.step(self)
  local s = self.state[1]
  if s and s.step >= self.defaults.freeze_step then self:_local_grads(true) end
end

-- 0/1 Adam: the variance is updated only at steps on an interval that
-- doubles every var_update_scaler updates (those steps take the averaged
-- gradient; the others a compressed mean of each rank's), and after
-- var_freeze_step not at all; then ranks step on their own and sync every
-- local_step_interval steps (doubling every local_step_scaler steps up to
-- local_step_clipper) by a compressed mean of the accumulated update.
optim.ZeroOneAdam = make("optim.ZeroOneAdam", {var_freeze_step = {100000, count}, var_update_scaler = {16, positive},
                                               local_step_scaler = {32678, positive},
                                               local_step_clipper = {16, positive}})
optim.ZeroOneAdam._step_runs = false
function optim.ZeroOneAdam:_begin(s, p)
  init_moments(s, p)
  if not s.var_interval then
    s.var_interval, s.var_counter, s.local_step_interval, s.local_step_counter, s.lrs = 1, 0, 1, 0, 0
    s.momentum_accumulator = zeros_like(p)
  end
  s.step = s.step + 1
end
function optim.ZeroOneAdam:_apply(p, g, s, o)
  local b1, b2, d = o.betas[1], o.betas[2], self.defaults
  local frozen, m, v, u = s.frozen, s.exp_avg, s.exp_avg_sq, s.momentum_accumulator
  zorch.no_grad(function()
    if frozen then
      m:copy_(m * b1 + g * (1 - b1))
      s.lrs = s.lrs + o.lr
    elseif s.step % s.var_interval == 0 then -- (the engine averaged this gradient)
      v:copy_(v * b2 + g * g * (1 - b2))
      m:copy_(m * b1 + g * (1 - b1))
    else
      m:copy_(m * b1 + compress(self, s, "e", g:clone()) * (1 - b1))
    end
    local upd = adam_update(p, m, v, o) * o.lr
    p:copy_(p - upd)
    if frozen then
      u:copy_(u - upd)
      if s.step % s.local_step_interval == 0 then -- sync: the ranks' accumulated moves, averaged
        local denom = v:sqrt() + o.eps
        p:copy_(p - u)
        u:copy_(u * denom)
        compress(self, s, "e", u)
        m:copy_(u * (-1 / s.lrs))
        p:copy_(p + u / denom)
        u:zero_()
        s.lrs = 0
      end
    end
  end)
  if frozen then
    s.local_step_counter = s.local_step_counter + 1
    if s.local_step_counter == d.local_step_scaler then
      s.local_step_counter, s.local_step_interval = 0, math.min(d.local_step_clipper, s.local_step_interval * 2)
    end
  elseif s.step % s.var_interval == 0 then
    s.var_counter = s.var_counter + 1
    if s.var_counter == d.var_update_scaler then s.var_counter, s.var_interval = 0, s.var_interval * 2 end
  end
end
function optim.ZeroOneAdam:step()
  B.Optimizer.step(self)
  local s = self.state[1]
  if not s then return end
  if not s.frozen and s.step > self.defaults.var_freeze_step then
    for _, st in pairs(self.state) do st.frozen = true end
    reset_errors(self) -- (they held gradient errors; from now on the accumulated updates')
  end
  -- the next step's gradient: averaged when it updates the variance
  self:_local_grads(s.frozen or (s.step + 1) % s.var_interval ~= 0)
end

-- 1-bit LAMB: LAMB (without bias correction, as DeepSpeed's) for freeze_step
-- steps, keeping a running mean of each tensor's trust ratio (coeff_beta);
-- then the variance stays frozen, the momenta of all tensors, scaled to one
-- common RMS, are averaged through one compressed all-reduce, and each
-- tensor's ratio is the frozen one times a factor from a fresh variance
-- rebuilt from the momenta (bounded by factor_min/max and by factor_threshold
-- from one step to the next).
optim.OneBitLamb = make("optim.OneBitLamb", {freeze_step = {100000, count}, max_coeff = {10.0, nonneg},
                                             min_coeff = {0.01, nonneg}, coeff_beta = {0.9, nonneg},
                                             factor_max = {4.0, nonneg}, factor_min = {0.5, nonneg},
                                             factor_threshold = {0.1, nonneg}})
optim.OneBitLamb._per_tensor = true
local function norm(t) return math.sqrt((t * t):sum():item()) end
-- Per-tensor numbers live in the state as fields of their own ("coeff_freeze_3"),
-- which checkpoints keep as they keep the step.
local function get(s, what, t, default) local v = s[what .. "_" .. t]; if v == nil then return default end return v end
local function put(s, what, t, v) s[what .. "_" .. t] = v end

-- One step of state s over the flat p (gradient g): runs = {{first, count,
-- group, tensor}, ...}, one per tensor.
local function lamb_flat(self, s, p, g, runs)
  local d = self.defaults
  if not s.step then
    init_moments(s, p)
    s.exp_avg_sq_fresh = zeros_like(p)
  end
  s.step = s.step + 1
  local m, v, vf = s.exp_avg, s.exp_avg_sq, s.exp_avg_sq_fresh
  local function views(r) return p:narrow(1, r[1], r[2]), m:narrow(1, r[1], r[2]), v:narrow(1, r[1], r[2]) end
  zorch.no_grad(function()
    if not s.frozen then
      for _, r in ipairs(runs) do
        local o, t = r[3], r[4]
        local b1, b2 = o.betas[1], o.betas[2]
        local pv, mv, vv = views(r)
        local gv = g:narrow(1, r[1], r[2])
        mv:copy_(mv * b1 + gv * (1 - b1))
        vv:copy_(vv * b2 + gv * gv * (1 - b2))
        local upd = adam_update(pv, mv, vv, o)
        local wn, un, coeff = norm(pv), norm(upd), 1
        if wn ~= 0 and un ~= 0 then coeff = math.min(math.max(wn / un, o.min_coeff), o.max_coeff) end
        if coeff ~= 1 then put(s, "coeff_freeze", t, d.coeff_beta * get(s, "coeff_freeze", t, 0) + (1 - d.coeff_beta) * coeff) end
        pv:copy_(pv - upd * (o.lr * coeff))
      end
      if s.step == d.freeze_step then vf:copy_(v) end
      if s.step >= d.freeze_step then s.frozen = true end
      return
    end
    if not s.scaled then -- each tensor's momentum scaled to the tensors' mean RMS
      local rms, mean = {}, 0
      for k, r in ipairs(runs) do rms[k] = norm(m:narrow(1, r[1], r[2])) / math.sqrt(r[2]); mean = mean + rms[k] end
      mean = mean / #runs
      for k, r in ipairs(runs) do put(s, "scaling", r[4], rms[k] > 0 and mean / rms[k] or 1) end
      s.scaled = true
    end
    local last = m:clone()
    for _, r in ipairs(runs) do
      local o = r[3]
      local mv, gv = m:narrow(1, r[1], r[2]), g:narrow(1, r[1], r[2])
      mv:copy_((mv * o.betas[1] + gv * (1 - o.betas[1])) * get(s, "scaling", r[4], 1))
    end
    compress(self, s, "m", m)
    for _, r in ipairs(runs) do
      local o, t = r[3], r[4]
      local b1, b2 = o.betas[1], o.betas[2]
      local pv, mv, vv = views(r)
      mv:copy_(mv * (1 / get(s, "scaling", t, 1)))
      local rebuilt = (mv - last:narrow(1, r[1], r[2]) * b1) * (1 / (1 - b1)) -- the mean gradient, from the momenta
      local fv = vf:narrow(1, r[1], r[2])
      fv:copy_(fv * b2 + rebuilt * rebuilt * (1 - b2))
      local denom = vv:sqrt() + o.eps
      local prelim = mv / denom
      local upd = o.weight_decay > 0 and prelim + pv * o.weight_decay or prelim
      local factor = (denom / (fv:sqrt() + o.eps)):max():item()
      if o.weight_decay > 0 then
        local ratio = math.min(1, norm(prelim) / norm(upd))
        factor = factor * ratio + (1 - ratio)
      end
      factor = math.min(math.max(factor, d.factor_min), d.factor_max)
      local lf = get(s, "last_factor", t, 1)
      factor = math.min(math.max(factor, lf * (1 - d.factor_threshold)), lf * (1 + d.factor_threshold))
      put(s, "last_factor", t, factor)
      pv:copy_(pv - upd * (o.lr * get(s, "coeff_freeze", t, 0) * factor))
    end
  end)
end

-- Under the Engine: its flat buffer, one run per tensor (stage 0: whole tensors).
function optim.OneBitLamb:_step_tensors(p, g, runs)
  local s = self.state[1]
  if not s then s = {}; self.state[1] = s end
  lamb_flat(self, s, p, g, runs)
  if s.frozen then self:_local_grads(true) end
end
-- Alone: each parameter a flat tensor of its own.
function optim.OneBitLamb:step()
  for _, group in ipairs(self.param_groups) do
    for _, p in ipairs(group.params) do
      if p.grad then
        local i = self.index[p]
        self.state[i] = self.state[i] or {}
        local n = p:numel()
        lamb_flat(self, self.state[i], p:view(n), p.grad:contiguous():view(n), {{1, n, group, 1}})
      end
    end
  end
end
