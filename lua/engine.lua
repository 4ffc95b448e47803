-- zorch.Engine: one object, configured by one validated table, that prepares a
-- model, loader and optimizer and trains them across ranks with ZeRO:
--   stage 0  everything replicated; gradients all-reduced (plain data parallel)
--   stage 1  optimizer state partitioned: each rank updates its slice of the flat
--            parameters; gradients reduce-scattered, parameters all-gathered
--   stage 2  gradients partitioned too: reduced in buckets from the
--            gradient-ready hooks during backward, each rank keeping its slice
--   stage 3  parameters partitioned too: between steps a rank holds only its
--            slice; the model's parameters are all-gathered before its forward
--            and released after the optimizer step
-- Every stage gives the parameters of one process with the same global batch.
local zorch = ...

-- Every option with its default: the one place defaults live.
local DEFAULTS = {
  zero_stage = 0,                  -- 0..3: what is partitioned across ranks
  gradient_clipping = 0,           -- max global L2 norm of the gradients; 0 is off
  gradient_accumulation_steps = 1, -- micro-steps per optimizer step
  reduce_bucket_size = 500000000,  -- elements per gradient reduction (stages 2-3)
  seed = false,                    -- an integer seeds zorch's default generator
  precision = "fp32",              -- "fp32", or "bf16": bf16 parameters and gradients,
                                   -- fp32 master weights and moments in the shards
}

local CHECKS = {
  zero_stage = {function(v) return v == 0 or v == 1 or v == 2 or v == 3 end, "0, 1, 2 or 3"},
  gradient_clipping = {function(v) return type(v) == "number" and v >= 0 end, "a number >= 0 (0 turns it off)"},
  gradient_accumulation_steps = {function(v) return math.type(v) == "integer" and v >= 1 end, "an integer >= 1"},
  reduce_bucket_size = {function(v) return math.type(v) == "integer" and v >= 1 end, "an integer >= 1"},
  seed = {function(v) return v == false or math.type(v) == "integer" end, "an integer"},
  precision = {function(v) return v == "fp32" or v == "bf16" end, "\"fp32\" or \"bf16\""},
}

local ALIGN = 16 -- elements: every rank's shard is a multiple of this

local Engine = {}
Engine.__index = Engine

local function allowed_keys()
  local ks = {}
  for k in pairs(DEFAULTS) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ", ")
end

function zorch.Engine(cfg)
  cfg = cfg or {}
  if type(cfg) ~= "table" then error("Engine: expected a configuration table", 2) end
  local c = {}
  for k, v in pairs(DEFAULTS) do c[k] = v end
  for k, v in pairs(cfg) do
    if DEFAULTS[k] == nil then
      error(("Engine: unknown option '%s' (allowed: %s)"):format(tostring(k), allowed_keys()), 2)
    end
    c[k] = v
  end
  for k, chk in pairs(CHECKS) do
    if not chk[1](c[k]) then
      error(("Engine: %s must be %s, got %s"):format(k, chk[2], tostring(c[k])), 2)
    end
  end
  if c.seed then zorch.manual_seed(c.seed) end
  local rank, world, backend = zorch._comm()
  return setmetatable({cfg = c, rank = rank, world_size = world, backend = backend, micro = 0}, Engine)
end

function Engine:config()
  local c = {}
  for k, v in pairs(self.cfg) do c[k] = v end
  return c
end

-- Ranks must agree on the model and the configuration; the first rank that
-- differs from rank 0 is named.
function Engine:check_agreement(nparams, numel)
  local c = self.cfg
  local mine = {nparams, numel, c.zero_stage, c.gradient_accumulation_steps, c.gradient_clipping,
                c.reduce_bucket_size}
  local fields = {"parameter count", "parameter elements", "zero_stage", "gradient_accumulation_steps",
                  "gradient_clipping", "reduce_bucket_size"}
  local all = zorch.zeros(#mine * self.world_size, {dtype = "float64"})
  zorch._allgather(zorch.tensor(mine, {dtype = "float64"}), all)
  local v = all:totable()
  for r = 1, self.world_size - 1 do
    for i = 1, #mine do
      if v[r * #mine + i] ~= v[i] then
        error(("Engine:prepare: rank %d has %s = %s but rank 0 has %s"):format(
          r, fields[i], tostring(v[r * #mine + i]), tostring(v[i])), 0)
      end
    end
  end
end

-- The elements of [lo, hi) that fall in each rank's shard, in rank order.
function Engine:counts(lo, hi)
  local out, S = {}, self.shard
  for r = 0, self.world_size - 1 do
    out[r + 1] = math.max(0, math.min(hi, (r + 1) * S) - math.max(lo, r * S))
  end
  return out
end

-- Stages 2-3: buckets are runs of parameters in reverse order (the order their
-- gradients become ready), each at most reduce_bucket_size elements.
function Engine:make_buckets()
  local buckets, cur, maxlen = {}, nil, 0
  for i = #self.params, 1, -1 do
    local n = self.params[i]:numel()
    local lo = self.offsets[i]
    if not cur or cur.hi - lo > self.cfg.reduce_bucket_size then
      cur = {lo = lo, hi = lo + n, members = {}, pending = 0}
      buckets[#buckets + 1] = cur
    end
    cur.lo = lo
    cur.members[#cur.members + 1] = i
    cur.size = #cur.members
    self.bucket_of[i] = cur
    maxlen = math.max(maxlen, cur.hi - cur.lo)
  end
  self.buckets = buckets
  -- each bucket stages its gradients in a buffer of its own while it fills (buckets
  -- can fill interleaved); only the receive buffer stays
  self.recv = zorch.zeros(math.max(maxlen, 1))
end

-- Reduces one bucket: every rank receives the sum of its slice and adds it to
-- its gradient shard.
function Engine:reduce_bucket(b)
  local len = b.hi - b.lo
  local counts = self:counts(b.lo, b.hi)
  local mine = counts[self.rank + 1]
  local send = b.buf or zorch.zeros(len)
  if mine > 0 then
    local recv = self.recv:narrow(1, 1, mine)
    zorch._reduce_scatter(send, recv, counts)
    local start = math.max(b.lo, self.rank * self.shard) - self.rank * self.shard
    local dst = self.grad_shard:narrow(1, start + 1, mine)
    dst:copy_(dst + recv)
  else
    zorch._reduce_scatter(send, zorch.zeros(0), counts)
  end
  b.buf = nil
  b.pending = b.size
end

function Engine:on_grad(i, p)
  local b = self.bucket_of[i]
  local g = p.grad
  if g then
    b.buf = b.buf or zorch.zeros(b.hi - b.lo)
    b.buf:narrow(1, self.offsets[i] - b.lo + 1, p:numel()):copy_(g:reshape(-1))
    p.grad = nil
  end
  b.pending = b.pending - 1
  if b.pending == 0 then self:reduce_bucket(b) end
end

-- Returns the model, loader and an optimizer whose step() runs once per
-- accumulation window: reduce, clip, update this rank's slice, gather.
function Engine:prepare(model, loader, opt)
  if type(model) ~= "table" or not model.parameters then error("Engine:prepare: argument 1 must be a module", 2) end
  if opt ~= nil and (type(opt) ~= "table" or not opt.step) then error("Engine:prepare: argument 3 must be an optimizer", 2) end
  self.model = model
  if loader then loader.rank, loader.world_size = self.rank, self.world_size end
  local params = model:parameters()
  if #params == 0 then error("Engine:prepare: the model has no parameters", 2) end
  local offsets, numel = {}, 0
  for i, p in ipairs(params) do offsets[i], numel = numel, numel + p:numel() end
  local S = (numel + self.world_size - 1) // self.world_size
  S = (S + ALIGN - 1) // ALIGN * ALIGN
  self.params, self.offsets, self.numel, self.shard = params, offsets, numel, S
  self:check_agreement(#params, numel)
  -- parameters become views of one flat buffer, padded so shards are equal
  zorch._comm_bytes(true)
  local bf16 = self.cfg.precision == "bf16"
  self.flat = zorch._flatten(params, S * self.world_size, bf16 and "bfloat16" or nil)
  self.param_shard = self.flat:narrow(1, self.rank * S + 1, S)
  local stage = self.cfg.zero_stage
  if bf16 then -- the optimizer updates fp32 master weights: all of them at stage 0, a slice above
    self.master = (stage == 0 and self.flat or self.param_shard):to("float32")
  end
  if stage == 3 then
    -- the slice gets its own storage; the full buffer comes and goes
    self.param_shard = self.param_shard:clone()
    rawset(model, "_engine", self)
    local forward = model.forward
    rawset(model, "forward", function(m, ...)
      self:gather()
      return forward(m, ...)
    end)
    self:release()
  end
  local gdt = {dtype = bf16 and "bfloat16" or "float32"}
  if stage <= 1 then
    self.flat_grad = zorch.zeros(S * self.world_size, gdt)
  end
  -- stage 1 reduces in place: the gradient slice is a view of the full buffer
  if stage == 1 then self.grad_shard = self.flat_grad:narrow(1, self.rank * S + 1, S) end
  if stage >= 2 then self.grad_shard = zorch.zeros(S, gdt) end
  if stage >= 2 then
    self.bucket_of = {}
    self:make_buckets()
    for _, b in ipairs(self.buckets) do b.pending = b.size end
    for i, p in ipairs(params) do
      p:register_hook(function(t) self:on_grad(i, t) end)
    end
  end
  if not opt then return model, loader end
  -- the same optimizer, over this rank's slice (the whole buffer at stage 0)
  local target = self.master or (stage == 0 and self.flat or self.param_shard)
  local cls = getmetatable(opt)
  self.inner = cls({target}, opt.defaults)
  self.target = target
  self.user_opt = opt
  local engine = self
  local wrapped = setmetatable({}, {__index = opt, __newindex = function(_, k, v) opt[k] = v end})
  function wrapped.step()
    if engine.micro % engine.cfg.gradient_accumulation_steps ~= 0 then return false end
    engine:optimizer_step()
    return true
  end
  function wrapped.zero_grad()
    if engine.micro % engine.cfg.gradient_accumulation_steps == 0 then engine:zero_grad() end
  end
  function wrapped.state_dict() return engine.inner:state_dict() end
  function wrapped.load_state_dict(_, sd) return engine.inner:load_state_dict(sd) end
  self.optimizer = wrapped
  return model, loader, wrapped
end

-- Stage 3: all-gathers the slices into a full buffer the parameters view.
function Engine:gather()
  if self.cfg.zero_stage ~= 3 or self.flat then return end
  self.flat = zorch.zeros(self.shard * self.world_size, {dtype = self.param_shard:dtype()})
  zorch._allgather(self.param_shard, self.flat)
  zorch._rebind(self.params, self.flat)
end

-- Stage 3: drops the full buffer; parameters wait for the next gather.
function Engine:release()
  if self.cfg.zero_stage ~= 3 then return end
  zorch._rebind(self.params, nil)
  self.flat = nil
end

-- Stage 3: after parameters were written (load_state_dict), keeps this rank's slice.
function Engine:sync_shard()
  if self.cfg.zero_stage == 3 and self.flat then
    self.param_shard:copy_(self.flat:narrow(1, self.rank * self.shard + 1, self.shard))
  end
end

-- Clears the gradients of the next accumulation window.
function Engine:zero_grad()
  if self.flat_grad then self.flat_grad:zero_() end
  if self.grad_shard then self.grad_shard:zero_() end
  for _, p in ipairs(self.params or {}) do p.grad = nil end
end

-- Stages 0-1 accumulate into views of the flat gradient buffer.
function Engine:bind_grads()
  for i, p in ipairs(self.params) do
    if p.grad == nil then
      p.grad = self.flat_grad:narrow(1, self.offsets[i] + 1, p:numel()):view(p.shape)
    end
  end
end

-- loss / accumulation steps, then backward (which reduces buckets at stages 2-3).
function Engine:backward(loss)
  if not zorch.is_tensor(loss) then error("Engine:backward: expected a loss tensor", 2) end
  local k = self.cfg.gradient_accumulation_steps
  self.micro = self.micro + 1
  if self.flat_grad then self:bind_grads() end
  if k > 1 then loss = loss * (1 / k) end
  loss:backward()
  if self.buckets then -- parameters the graph did not reach: their buckets still reduce
    for _, b in ipairs(self.buckets) do
      if b.pending ~= b.size then
        for _ = 1, b.pending do b.pending = b.pending - 1 end
        self:reduce_bucket(b)
      end
    end
  end
end

-- The gradient this rank updates with, summed over ranks and averaged.
-- With bf16 the collectives and the update run on float32 copies.
function Engine:reduced_grad()
  local stage, N = self.cfg.zero_stage, self.world_size
  local bf16 = self.cfg.precision == "bf16"
  if stage == 0 then
    local g = bf16 and self.flat_grad:to("float32") or self.flat_grad
    zorch._allreduce(g)
    if N > 1 then g:copy_(g * (1 / N)) end
    return g, false
  end
  if stage == 1 then
    if bf16 then
      local g = self.flat_grad:to("float32")
      zorch._reduce_scatter_inplace(g)
      local shard = g:narrow(1, self.rank * self.shard + 1, self.shard)
      if N > 1 then shard:copy_(shard * (1 / N)) end
      return shard, true
    end
    zorch._reduce_scatter_inplace(self.flat_grad)
  end
  local g = bf16 and self.grad_shard:to("float32") or self.grad_shard
  if N > 1 then g:copy_(g * (1 / N)) end
  return g, true
end

-- Global L2 norm from this rank's gradients (sums of squares in double, one
-- all-reduce when sharded), and one combined scale when above max_norm.
function Engine:clip(grad, sharded, max_norm)
  local sq = zorch._sumsq(grad)
  if sharded and self.world_size > 1 then
    local t = zorch.tensor({sq}, {dtype = "float64"})
    zorch._allreduce(t)
    sq = t:item()
  end
  local norm = math.sqrt(sq)
  if max_norm and max_norm > 0 then
    local coef = max_norm / (norm + 1e-6)
    if coef < 1 then grad:copy_(grad * coef) end
  end
  self.last_norm = norm
  return norm
end

function Engine:optimizer_step()
  local grad, sharded = self:reduced_grad()
  self:clip(grad, sharded, self.cfg.gradient_clipping)
  self.inner.lr = self.user_opt.lr
  self.target.grad = grad
  self.inner:step()
  self.target.grad = nil
  local stage = self.cfg.zero_stage
  if self.master then -- round the fp32 master weights into the bf16 parameters
    (stage == 0 and self.flat or self.param_shard):copy_(self.master)
  end
  if stage == 1 or stage == 2 then zorch._allgather(self.param_shard, self.flat) end
  if stage == 3 then self:release() end
  -- what this step moved, from the end of the previous one (stage 3 gathers in forward)
  local sent, recv = zorch._comm_bytes(true)
  self.last_comm = {sent = sent, received = recv}
end

-- Before prepare (or without an optimizer): the norm of the parameters' .grad.
function Engine:clip_grad_norm(max_norm)
  max_norm = max_norm or self.cfg.gradient_clipping
  if self.inner then
    local g = self.cfg.zero_stage == 0 and self.flat_grad or self.grad_shard
    return self:clip(g, self.cfg.zero_stage ~= 0, max_norm)
  end
  local params = self.model and self.model:parameters() or {}
  local sq = 0
  for _, p in ipairs(params) do if p.grad then sq = sq + zorch._sumsq(p.grad) end end
  local norm = math.sqrt(sq)
  if max_norm and max_norm > 0 and max_norm / (norm + 1e-6) < 1 then
    local coef = max_norm / (norm + 1e-6)
    for _, p in ipairs(params) do if p.grad then p.grad:copy_(p.grad * coef) end end
  end
  self.last_norm = norm
  return norm
end

local SIZES = {float64 = 8, float32 = 4, bfloat16 = 2, float16 = 2}
local function bytes(t) return t and t:numel() * SIZES[t:dtype()] or 0 end

-- Bytes this rank holds, by category, from the tensors it actually keeps.
function Engine:memory_report()
  if not self.params then error("Engine:memory_report: call prepare first", 2) end
  local opt_bytes = 0
  for _, s in pairs(self.inner and self.inner.state or {}) do -- moments (of the master weights)
    for _, v in pairs(s) do if zorch.is_tensor(v) then opt_bytes = opt_bytes + bytes(v) end end
  end
  return {
    parameters = self.cfg.zero_stage == 3 and bytes(self.param_shard) + bytes(self.flat) or bytes(self.flat),
    gradients = self.flat_grad and bytes(self.flat_grad) or bytes(self.grad_shard),
    optimizer_state = opt_bytes,
    master_weights = bytes(self.master),
    buffers = bytes(self.recv), -- staging buffers live only while their bucket fills
    numel = self.numel,
    world_size = self.world_size,
    stage = self.cfg.zero_stage,
  }
end

-- Bytes this rank sent and received in the last optimizer step (ring volumes).
function Engine:comm_report()
  return self.last_comm or {sent = 0, received = 0}
end

-- The mean of a number over ranks (for logging a loss every rank computed).
function Engine:mean(x)
  if self.world_size == 1 then return x end
  local t = zorch.tensor({x}, {dtype = "float64"})
  zorch._allreduce(t)
  return t:item() / self.world_size
end

function Engine:print(...)
  if self.rank == 0 then print(...) end
end

-- (rank 0 writes; a state dict taken under stage 3 was gathered by the model)
function Engine:save(tbl, path)
  if self.rank == 0 then zorch.save(tbl, path) end
end

return nil
