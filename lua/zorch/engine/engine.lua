-- zorch.Engine: one object, configured by one validated table, that prepares a
-- model, loader and optimizer and trains them across ranks with ZeRO. The
-- partition manager itself is C (zero/engine.c); this file validates, checks
-- that ranks agree, and drives the sequence of a step:
--   stage 0  everything replicated; gradients all-reduced (plain data parallel)
--   stage 1  optimizer state partitioned: each rank updates its slice of the flat
--            parameters; gradients reduce-scattered, parameters all-gathered
--   stage 2  gradients partitioned too: reduced in buckets from the
--            gradient-ready hooks during backward, each rank keeping its slice
--   stage 3  parameters partitioned too: between steps a rank holds only its
--            slice; each module's parameters are gathered before its forward
--            and again before its backward, and released after each
-- Every stage gives the parameters of one process with the same global batch.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local function is_group(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "zorch.Group" or false
end

-- Every option's default and check come from the schema (options.lua).
local OPTIONS = zorch._require("zorch.engine.options")
local ckpt = zorch._require("zorch.engine.checkpoint") -- the folder format
local frozen = zorch._require("zorch.engine.frozen") -- frozen parameters outside the buffers
local DEFAULTS = {}
for _, r in ipairs(OPTIONS.rows) do if r.name then DEFAULTS[r.name] = r.default end end

-- This process's rank among those on its machine (one GPU each).
function zorch.local_rank()
  -- (torchrun's LOCAL_RANK before Slurm's: torchrun may run inside a Slurm task)
  for _, k in ipairs({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "LOCAL_RANK", "SLURM_LOCALID"}) do
    local v = tonumber(os.getenv(k) or "")
    if v then return math.tointeger(v) end
  end
  return 0
end

local Engine = {}
-- engine.steps: the optimizer steps taken, as the C engine counts them
-- (0 before prepare); every other key is a field or a method
Engine.__index = function(e, k)
  if k == "steps" then return select(2, e:counts()) end
  return Engine[k]
end

-- Whether x is a zorch.Engine (what zorch.Engine{...} returns).
function zorch.is_engine(x) return getmetatable(x) == Engine end

Engine.__tostring = function(e)
  local c = e.cfg
  return ("zorch.Engine(zero_stage=%d, precision=%s, gradient_clipping=%s, gradient_accumulation_steps=%d, "
    .. "world_size=%d, device=%s%s)"):format(c.zero_stage, c.precision,
    c.gradient_clipping > 0 and ("%g"):format(c.gradient_clipping) or "off", c.gradient_accumulation_steps,
    e.world_size, e.device, e.params and (", prepared: %d parameters"):format(#e.params) or "")
end

-- zorch.Engine(cfg [, overrides]): cfg a table or a DeepSpeed JSON file;
-- overrides (a table) win over it (e.g. {device = "cuda"} with a JSON file).
function zorch.Engine(cfg, overrides)
  cfg = cfg or os.getenv("ZORCH_CONFIG") or {}
  local unimplemented, autos = {}, {}
  if type(cfg) == "string" then -- a DeepSpeed JSON file
    local g = type(overrides) == "table" and overrides.data_group
    local world = is_group(g) and g:size() or select(2, zorch._comm())
    cfg, unimplemented, autos = zorch._from_deepspeed(cfg, world)
  end
  if type(cfg) ~= "table" then error("Engine: expected a configuration table or a DeepSpeed JSON file", 2) end
  if overrides ~= nil and type(overrides) ~= "table" then error("Engine: overrides must be a table", 2) end
  if overrides then
    local merged = {}
    for k, v in pairs(cfg) do merged[k] = v end
    for k, v in pairs(overrides) do merged[k] = v end
    cfg = merged
  end
  local c = {}
  for k, v in pairs(DEFAULTS) do c[k] = v end
  zorch._check_options("Engine", cfg, DEFAULTS, 3) -- (an unknown key: "did you mean" the nearest)
  for k, v in pairs(cfg) do c[k] = v end
  for _, r in ipairs(OPTIONS.rows) do
    if r.name and not OPTIONS.valid(r, c[r.name]) then
      error(("Engine: %s must be %s, got %s"):format(r.name, OPTIONS.want(r), zorch._readable(c[r.name])), 2)
    end
  end
  -- Where the files of the offloaded state go: offload_param "nvme" keeps the
  -- shard and its gradients in a file under nvme_path, offload_optimizer
  -- "nvme" the moments. offload_param "cpu" on a GPU rank keeps the shard in
  -- host memory through the same machinery, its files (and the moments',
  -- with offload_optimizer "cpu") in a memory filesystem (host_dir); on a CPU
  -- rank the shard is in host memory already.
  local op, oo = c.offload_param, c.offload_optimizer
  local on_gpu = c.device ~= "cpu" or zorch._test_hook("offload_host") ~= nil
  local param_dir, opt_dir, host_param
  if op and op.device == "nvme" then
    param_dir = op.nvme_path
  elseif op and op.device == "cpu" and on_gpu then
    param_dir, host_param = zorch._host_dir(), true
  end
  if oo and oo.device == "nvme" then opt_dir = oo.nvme_path
  elseif host_param and oo and oo.device == "cpu" then opt_dir = param_dir end
  local what = host_param and "offload_param device \"cpu\" on a GPU rank" or "offload_param device \"nvme\""
  if param_dir then -- what the parameters' file needs
    if c.zero_stage ~= 3 then
      error(("Engine: %s needs zero_stage 3 (the parameters partitioned), got %d"):format(what, c.zero_stage), 2)
    end
    if not opt_dir then
      error(("Engine: %s needs offload_optimizer device %s too (the step streams the parameters with Adam's " ..
             "moments)"):format(what, host_param and "\"cpu\" or \"nvme\"" or "\"nvme\""), 2)
    end
    if c.precision ~= "fp32" then -- (GPU ranks too: gathers copy the slices read from the file to the device)
      error(("Engine: %s runs float32 parameters, got precision %s"):format(what, c.precision), 2)
    end
  end
  if c.seed then zorch.manual_seed(c.seed) end
  -- wall_clock_breakdown prints with the step lines: every steps_per_print steps, DeepSpeed's default 10
  if (c.wall_clock_breakdown or c.comms_logger) and not c.steps_per_print then c.steps_per_print = 10 end
  local _, _, backend = zorch._comm()
  if c.layout and c.data_group and c.data_group ~= c.layout.data then
    error("Engine: data_group and layout disagree: give layout alone (its data group is the engine's)", 2)
  end
  local group = c.data_group or (c.layout and c.layout.data) or zorch._group_world()
  local rank, world = group:rank(), group:size()
  zorch._comm_timeout(c.comm_timeout)
  local device = c.device == "cuda" and ("cuda:" .. zorch.local_rank()) or c.device
  -- (the counts are the C engine's: Engine:counts, engine.steps)
  local e = setmetatable({cfg = c, rank = rank, world_size = world, backend = backend, device = device,
                          group = group, layout = c.layout or nil,
                          param_dir = param_dir, opt_dir = opt_dir, host_param = host_param,
                          first = zorch._group_world():rank() == 0,
                          printer = zorch._group_world():rank() == 0}, Engine)
  e:read_scaler()
  if #unimplemented > 0 and rank == 0 then
    for _, g in ipairs(zorch._unimplemented_groups(unimplemented)) do
      io.stderr:write(("zorch: warning: DeepSpeed config keys %s: %s\n"):format(g.title, table.concat(g.keys, ", ")))
    end
  end
  e.unimplemented = unimplemented
  e.autos, e.overrides = autos or {}, overrides -- "auto" values: resolved at prepare
  return e
end

-- fp16 loss scaling, DeepSpeed's DynamicLossScaler, runs in the C engine's
-- step (zorch_zero_step): self.scaler is what Lua reads of it (printing,
-- checkpoints): the scale, the overflows it may still absorb (hysteresis),
-- the optimizer steps tried (attempts, skipped ones too) and the last one
-- that overflowed. Without fp16 the scale stays 1. Before prepare (no
-- engine yet) the scale the engine will start from.
function Engine:read_scaler()
  local c = self.cfg
  local fp16 = c.precision == "fp16"
  local s = self.zero and self.zero:scaler() or
    {scale = fp16 and (c.loss_scale > 0 and c.loss_scale or 2.0 ^ c.initial_scale_power) or 1,
     hysteresis = c.hysteresis, attempts = 0, last_overflow = -1, skipped = 0}
  s.dynamic = fp16 and c.loss_scale == 0
  self.scaler = s
  return s
end

-- The scaler back to its start; with a saved state (a checkpoint's) that one.
function Engine:reset_scaler(saved)
  if self.zero then self.zero:set_scaler(saved) end
  return self:read_scaler()
end

-- The loss scale now (1 without fp16).
function Engine:loss_scale() return self.scaler.scale end

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
  zorch._comm_label("the agreement check at prepare")
  self.group:allgather(zorch.tensor(mine, {dtype = "float64"}), all)
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

-- A batch larger than the data set: with drop_last no batch is ever made (an
-- error); otherwise every batch is short, or an optimizer step spans epochs (a
-- warning). Both name the sizes.
function Engine:check_batch(loader)
  local n = loader.num_samples and loader:num_samples()
  if math.type(n) ~= "integer" then return end
  local b, w, k = loader.batch_size, self.world_size, self.cfg.gradient_accumulation_steps
  local global, train = (b + 0.0) * w, (b + 0.0) * w * k -- floats: no overflow
  if loader:num_batches() == 0 then -- the data's or the flags' mistake: a usage error, one message, status 2
    local msg = n < w and ("Engine:prepare: the data set has %d samples, fewer than the %d ranks: a rank would get " ..
      "none, so no step would run"):format(n, w) or
      ("Engine:prepare: the global batch of %.0f samples (%d per rank x %d ranks) is larger than the data set " ..
      "(%d samples)%s: the loader makes no batch, so no step would run"):format(global, b, w, n,
      loader.drop_last and " and drop_last is set" or "")
    local e = zorch.flags.usage_error(msg)
    e.every_rank = true
    error(e, 0)
  end
  if train > n and self.first then
    io.stderr:write(("zorch: warning: the train batch of %.0f samples (%d per rank x %d accumulation x %d ranks) is " ..
      "larger than the data set (%d samples): %s\n"):format(train, b, k, w, n,
      global > n and "every batch is the data set's short last batch" or "an optimizer step spans epochs"))
  end
end

-- Returns the model, loader and an optimizer whose step() runs once per
-- accumulation window: reduce, clip, update this rank's slice, gather.
-- script (optional): the script's own settings, where a DeepSpeed file's "auto"
-- values come from: its schedule's params (warmup_num_steps, total_num_steps,
-- ...) and gradient_clipping.
function Engine:prepare(model, loader, opt, script)
  if type(model) ~= "table" or not model.parameters then error("Engine:prepare: argument 1 must be a module", 2) end
  if self.prepared then error("Engine:prepare: this engine already prepared a model (one engine per model)", 2) end
  if opt ~= nil and (type(opt) ~= "table" or not opt.step) then error("Engine:prepare: argument 3 must be an optimizer", 2) end
  self.auto_lines = {}
  if #self.autos > 0 then self.auto_lines = self:set_autos(zorch._resolve_autos(self, model, loader, opt, script)) end
  self.model, self.loader = model, loader
  if loader then loader.rank, loader.world_size = self.rank, self.world_size end
  if loader then loader.accumulation = self.cfg.gradient_accumulation_steps end -- (checkpoints: samples per step)
  if loader and self.device ~= "cpu" then loader.device = self.device end -- batches arrive on the device
  if loader and self.cfg.train_micro_batch_size then loader.batch_size = self.cfg.train_micro_batch_size end
  if loader then self:check_batch(loader) end
  -- a config's optimizer section names the optimizer; the script's gives its groups and "auto" values
  if self.cfg.optimizer then
    self.script_opt = opt
    opt = zorch._config_optimizer(self.cfg.optimizer, model, opt)
  end
  local group_of = opt and self:group_indices(model, opt) -- (before a move replaces the tensors)
  local pfile = self.param_dir ~= nil
  -- deferred parameters (nn.deferred) are filled in place, or with the
  -- parameters on nvme once they live in the file (below)
  if not pfile then zorch.nn.materialize(model) end
  if self.device ~= "cpu" then
    local ok, err = pcall(model.to, model, self.device)
    if not ok then error(("Engine:prepare: cannot move the model to %s: %s"):format(self.device, err), 2) end
  end
  if #model:parameters() == 0 then error("Engine:prepare: the model has no parameters", 2) end
  -- (frozen parameters in no group stay plain tensors of the model: engine/frozen.lua)
  local params, names
  params, names, group_of, self.frozen = frozen.split(self, model, group_of, opt)
  local numel = 0
  for _, p in ipairs(params) do numel = numel + p:numel() end
  self.params, self.param_names = params, names
  self:check_agreement(#params, numel)
  self.group:bytes(true)
  local stage = self.cfg.zero_stage
  -- stage 3 gathers a module's own parameters around its forward and backward:
  -- groups are runs of consecutive parameters with one owner
  -- (a tied parameter is owned where it comes first, and gathered with that
  -- owner's group by every module that holds it)
  local groups, owner_groups, owners = nil, {}, {}
  if stage == 3 then
    local index, holders, group_of, mine = {}, {}, {}, {}
    for _, p in ipairs(params) do mine[p] = true end
    local function walk(m, path)
      path[m] = true
      for _, k in ipairs(m._order) do
        local v = rawget(m, k)
        if m._params[k] and v ~= nil and mine[v] then
          if index[v] then holders[#holders + 1] = {m, index[v]}
          else owners[#owners + 1] = m; index[v] = #owners end
        elseif m._children[k] and v ~= nil and not path[v] then walk(v, path) end
      end
      path[m] = nil
    end
    walk(model, {})
    groups = {}
    for i, m in ipairs(owners) do
      if i == 1 or owners[i - 1] ~= m then
        groups[#groups + 1] = 0
        owner_groups[m] = owner_groups[m] or {}
        table.insert(owner_groups[m], #groups - 1)
      end
      groups[#groups] = groups[#groups] + 1
      group_of[i] = #groups - 1
    end
    for _, h in ipairs(holders) do
      local m, gid = h[1], group_of[h[2]]
      owner_groups[m] = owner_groups[m] or {}
      local has = false
      for _, g in ipairs(owner_groups[m]) do has = has or g == gid end
      if not has then table.insert(owner_groups[m], gid) end
    end
  end
  -- parameters become views of the engine's buffers, padded so shards are equal
  local zo = {group = self.group, groups = groups, param_dir = self.param_dir} -- (and the options C reads)
  for k, v in pairs(self.cfg) do zo[k] = v end
  self.zero = zorch._zero_engine(params, zo)
  self:read_scaler()
  if pfile then -- deferred parameters: each group gathered, filled, written to its shards, released
    for i, p in ipairs(params) do
      local fill = zorch._deferred_init(p)
      if fill then
        self.zero:gather_param(i - 1)
        zorch.no_grad(function() fill(p) end)
        zorch._deferred_done(p)
        collectgarbage() -- (the fill's temporaries, as large as the parameter: Lua sees only their handles)
        self.zero:sync_shard()
        self.zero:release()
      end
    end
  end
  if stage == 3 then
    rawset(model, "_engine", self) -- state dicts gather first
    local zero = self.zero
    for m, gids in pairs(owner_groups) do
      local id = zero:module_register(gids)
      local forward = m.forward
      rawset(m, "forward", function(mod, ...)
        zero:module_begin(id)
        local r = table.pack(forward(mod, ...))
        local armed = false
        for i = 1, r.n do
          if zorch.is_tensor(r[i]) then zero:module_end(id, r[i]); armed = true end
        end
        if not armed then zero:module_end(id, nil) end
        return table.unpack(r, 1, r.n)
      end)
    end
  end
  if self.cfg.precision ~= "fp32" and self.cfg.auto_cast then
    -- 16-bit compute for float inputs: without the cast, a float32 batch meets
    -- 16-bit weights and every layer promotes them back to float32
    local dt = self.cfg.precision == "bf16" and "bfloat16" or "float16"
    local wide = {float32 = true, float64 = true}
    local forward = model.forward
    rawset(model, "forward", function(mod, ...)
      local a = table.pack(...)
      for i = 1, a.n do
        if zorch.is_tensor(a[i]) and wide[a[i]:dtype()] then a[i] = a[i]:to(dt) end
      end
      return forward(mod, table.unpack(a, 1, a.n))
    end)
  end
  if self.cfg.wall_clock_breakdown then
    -- forward time: the model's own forward, timed on a monotonic clock
    self.wall = {forward = 0, backward = 0, reduction = 0, step = 0}
    local wall, forward = self.wall, model.forward
    rawset(model, "forward", function(...)
      local t0 = zorch.clock()
      local r = table.pack(forward(...))
      wall.forward = wall.forward + (zorch.clock() - t0)
      return table.unpack(r, 1, r.n)
    end)
  end
  if not opt then
    self.prepared = true
    return model, loader
  end
  -- the same optimizer, over this rank's slice (the whole buffer at stage 0)
  local target = self.zero:target()
  local cls = getmetatable(opt)
  -- offload on a GPU rank: the optimizer steps a float32 copy of the shard in
  -- host memory (lua/offload.lua); self.target is what the optimizer steps
  self.host = zorch._offload_host(self, target)
  if self.host then target = self.host.target end
  self.inner = cls({target}, opt.defaults)
  if self.inner._attach then self.inner:_attach(self, opt) end -- (the 1-bit optimizers reduce for themselves)
  self.target = target
  self.user_opt = opt
  -- offload_optimizer: the moments in a file (bound: the parameter file's
  -- stream too; disk: the bandwidth measured at prepare, or nil)
  self.offload, self.offload_bound, self.disk = zorch._offload_optimizer(self)
  self.io_start = zorch.clock()
  self.group_base = group_of
  self.runs = self:group_runs(self:stepped_groups(), params, opt)
  self.norm_model = model
  self:set_norm()
  local engine = self
  local wrapped = setmetatable({}, {__index = opt, __newindex = function(_, k, v) opt[k] = v end,
                                    __tostring = function() return tostring(opt) end})
  function wrapped.step()
    local micro, _, pending = engine:counts()
    if pending == 0 then
      error("step: no engine:backward(loss) since the last step: call engine:backward(loss), not " ..
            "loss:backward(), so that the engine scales, accumulates and reduces the gradients", 2)
    end
    if micro % engine.cfg.gradient_accumulation_steps ~= 0 then return false end
    return engine:optimizer_step() ~= false -- (false: an fp16 overflow skipped the update)
  end
  function wrapped.zero_grad()
    if engine:counts() % engine.cfg.gradient_accumulation_steps == 0 then engine:zero_grad() end
  end
  -- the state of this rank's slice, with the options of the optimizer's groups
  function wrapped.state_dict()
    local sd = engine.inner:state_dict()
    if opt.group_options then sd.param_groups = opt:group_options() end
    return sd
  end
  function wrapped.load_state_dict(_, sd)
    if type(sd) ~= "table" then error("load_state_dict: expected {state=, param_groups=}", 2) end
    engine.inner:load_state_dict({state = sd.state})
    if opt._load_groups and sd.param_groups ~= nil then
      -- the options only: the state is the slice's, not indexed by the groups' parameters
      local gs = sd.param_groups
      if type(gs) == "table" then
        gs = {}
        for i, g in ipairs(sd.param_groups) do
          gs[i] = g
          if type(g) == "table" then
            gs[i] = {}
            for k, v in pairs(g) do if k ~= "params" then gs[i][k] = v end end
          end
        end
      end
      opt:_load_groups(gs, "load_state_dict", 3)
    end
  end
  self.optimizer = wrapped
  if self.cfg.scheduler then self.lr_scheduler = zorch._make_scheduler(self.cfg.scheduler, opt) end
  self.monitor = zorch._monitors(self) -- (tensorboard, csv_monitor: rank 0)
  if self.cfg.flops_profiler then
    self.flops = zorch._flops_profiler(model, self.device, self.cfg.flops_profiler)
    if (self.cfg.flops_profiler.profile_step or 1) == 1 then self.flops:start() end
  end
  if self.cfg.comms_logger then zorch._comm_kinds(true) end -- (counted from here)
  if self.first and os.getenv("ZORCH_QUIET") == nil then self:print_summary() end
  self.prepared = true -- (set once prepare has succeeded)
  return model, loader, wrapped
end

-- The "auto" values a DeepSpeed file left to prepare, as engine/dsauto.lua
-- resolved them, into the configuration; returns the summary lines.
function Engine:set_autos(lines, fill)
  local c = self.cfg
  if fill.gradient_clipping then c.gradient_clipping = fill.gradient_clipping end
  if fill.reduce_bucket_size then c.reduce_bucket_size = fill.reduce_bucket_size end
  if fill.prefetch_bucket_size then c.prefetch_bucket_size = fill.prefetch_bucket_size end
  for k, v in pairs(fill.optimizer) do c.optimizer.params[k] = v end
  for k, v in pairs(fill.scheduler) do c.scheduler.params[k] = v end
  return lines
end

-- Parameter groups: the group (an index into opt.param_groups, or false for
-- a parameter in none) of each of the model's parameters; nil for an
-- optimizer without groups. Every parameter of a group must be the model's.
function Engine:group_indices(model, opt)
  local gs = opt.param_groups
  if type(gs) ~= "table" then return nil end
  local gi_of = {}
  for gi, g in ipairs(gs) do for _, p in ipairs(g.params) do gi_of[p] = gi end end
  local of, seen = {}, {}
  for i, p in ipairs(model:parameters()) do of[i], seen[p] = gi_of[p] or false, true end
  for gi, g in ipairs(gs) do
    for pi, p in ipairs(g.params) do
      if not seen[p] then
        error(("Engine:prepare: parameter %d of the optimizer's group %d is not a parameter of the model"):format(
          pi, gi), 3)
      end
    end
  end
  return of
end

-- The groups stepped now: a frozen parameter (requires_grad false) in none,
-- as PyTorch's optimizers skip a parameter without a gradient. nil where
-- one group takes every parameter (the whole slice).
-- self.missed: the parameters not stepped now (their count of missed steps,
-- self.behind, grows at each step; see group_runs).
function Engine:stepped_groups()
  local base = self.group_base
  if not base then return nil end
  local of, whole = {}, #self.user_opt.param_groups == 1
  self.trainable, self.missed, self.behind = {}, {}, self.behind or {}
  for i, p in ipairs(self.params) do
    self.trainable[i] = p.requires_grad
    of[i] = p.requires_grad and base[i]
    whole = whole and of[i] == 1 and (self.behind[i] or 0) == 0
    if not of[i] then self.missed[#self.missed + 1] = i end
  end
  return not whole and of or nil
end

-- After a step: the parameters it did not step missed one more.
function Engine:note_missed()
  for _, i in ipairs(self.missed or {}) do self.behind[i] = (self.behind[i] or 0) + 1 end
end

-- The runs again when a parameter was frozen or unfrozen since they were made.
function Engine:update_runs()
  if not self.group_base then return end
  for i, p in ipairs(self.params) do
    if p.requires_grad ~= self.trainable[i] then
      self.runs = self:group_runs(self:stepped_groups(), self.params, self.user_opt)
      return
    end
  end
end

-- For an optimizer whose update depends on each tensor's norms (Lamb): one run
-- per piece of a parameter in this rank's slice, {first, count, group, index}.
function Engine:tensor_runs(group_of, params, gs)
  local g = self.zero:geometry()
  local lo, len = g.lo, g.len
  local runs, off = {}, 0
  for i, p in ipairs(params) do
    local n, gi = p:numel(), 1
    if group_of then gi = group_of[i] end -- (false: frozen or in no group, not stepped)
    local a, b = math.max(off, lo), math.min(off + n, lo + len)
    if gi and a < b then
      local bh = self.behind and self.behind[i] or 0
      runs[#runs + 1] = {a - lo + 1, b - a, gs[gi], i, behind = bh > 0 and bh or nil}
    end
    off = off + n
  end
  self.ntensors = #params
  return runs
end

-- The runs of this rank's slice (the whole buffer at stage 0) that each group
-- fills: {{first (from 1), count, group}, ...}, neighbours of one group merged.
-- The flat buffer holds the parameters in order, so a group's elements are runs
-- of it, possibly split across shards. One group: the whole slice. A
-- parameter that missed steps while frozen is a run of its own with `behind`
-- set to their number: its step counter (Adam's bias correction) counts only
-- the steps it took, as PyTorch's per-parameter state does.
function Engine:group_runs(group_of, params, opt)
  local gs = opt.param_groups
  if type(gs) ~= "table" or not self.inner._step_runs then return nil end
  if self.inner._per_tensor then return self:tensor_runs(group_of, params, gs) end
  local g = self.zero:geometry()
  if not group_of then return {{1, g.len, gs[1]}} end
  local lo, len = g.lo, g.len
  local runs, off = {}, 0
  local behind = self.behind or {}
  for i, p in ipairs(params) do
    local n, gi, bh = p:numel(), group_of[i], behind[i] or 0
    local a, b = math.max(off, lo), math.min(off + n, lo + len)
    if gi and a < b then
      local last = runs[#runs]
      if last and last[3] == gs[gi] and last[1] + last[2] == a - lo + 1 and (last.behind or 0) == bh then
        last[2] = last[2] + b - a
      else runs[#runs + 1] = {a - lo + 1, b - a, gs[gi], behind = bh > 0 and bh or nil} end
    end
    off = off + n
  end
  return runs
end

-- One screen at prepare: what this run will do.
function Engine:print_summary()
  local c = self.cfg
  local mb = self.loader and self.loader.batch_size
  local lines = {
    ("zorch engine: %d rank%s (%s), ZeRO stage %d, %s, DeepSpeed %s semantics"):format(self.world_size,
      self.world_size == 1 and "" or "s", self.backend, c.zero_stage, c.precision, OPTIONS.deepspeed_version),
    ("  batch: %s per rank x %d accumulation x %d ranks = %s per step"):format(tostring(mb or "?"),
      c.gradient_accumulation_steps, self.world_size, mb and tostring(mb * c.gradient_accumulation_steps * self.world_size) or "?"),
    ("  gradient clipping %s, reduce bucket %d elements, comm timeout %gs"):format(
      c.gradient_clipping > 0 and tostring(c.gradient_clipping) or "off", c.reduce_bucket_size, c.comm_timeout),
    ("  optimizer %s%s%s%s"):format(getmetatable(self.user_opt or {}).__name or "none",
      self.script_opt and (" (the config's; the script's %s gave its groups and \"auto\" values)"):format(
        getmetatable(self.script_opt).__name or "optimizer") or "",
      self.user_opt and self.user_opt.param_groups and #self.user_opt.param_groups > 1
        and (" (%d parameter groups)"):format(#self.user_opt.param_groups) or "",
      c.scheduler and (", scheduler " .. c.scheduler.type) or ""),
  }
  if #self.frozen > 0 then
    local b, n = frozen.size(self.frozen)
    lines[#lines + 1] = ("  frozen: %d parameters (%d elements, %.1f MB) held by the model, no optimizer state"):format(
      #self.frozen, n, b / 1e6)
  end
  if self.offload then
    lines[#lines + 1] = ("  offload to %s: optimizer state%s in %s, I/O by %s%s"):format(
      self.host_param and "host memory" or "nvme", self.param_dir and ", parameters and gradients" or "", self.opt_dir,
      self.offload:stats().io, self.disk and ("; %s measured: write %.0f MB/s, read %.0f MB/s%s"):format(
        self.host_param and "its folder" or "the disk", self.disk.write, self.disk.read, self.disk.direct and " (direct I/O)" or " (page cache)") or "")
  end
  local mons = {}
  for _, k in ipairs({"tensorboard", "csv_monitor"}) do
    local m = c[k]
    if m then mons[#mons + 1] = ("%s in %s/%s"):format(k, m.output_path == "" and "." or m.output_path, m.job_name) end
  end
  if c.comms_logger then mons[#mons + 1] = ("comms_logger every %d steps"):format(c.steps_per_print) end
  if c.flops_profiler then mons[#mons + 1] = ("flops_profiler at step %d"):format(c.flops_profiler.profile_step or 1) end
  if #mons > 0 then lines[#lines + 1] = "  monitors: " .. table.concat(mons, ", ") end
  for _, l in ipairs(self.auto_lines or {}) do lines[#lines + 1] = "  " .. l end
  for _, g in ipairs(zorch._unimplemented_groups(self.unimplemented)) do
    lines[#lines + 1] = ("  %s: %s"):format(g.title, table.concat(g.keys, ", "))
  end
  io.stderr:write(table.concat(lines, "\n") .. "\n")
end

-- Stage 3: the full parameters (for a forward or a state dict), their release,
-- and keeping this rank's slice after they were written.
function Engine:gather() if self.zero then self.zero:gather() end end
function Engine:release() if self.zero then self.zero:release() end end
function Engine:sync_shard()
  if self.zero then self.zero:sync_shard() end
  if self.host then self.target:copy_(self.host.device_target) end -- (offload on a GPU rank)
end

-- The C engine's counts: micro-steps (backward calls) so far, optimizer steps
-- taken (a skipped step does not count: checkpoint tags step<N> and resuming
-- use it) and backward calls since the last step; zeros before prepare.
function Engine:counts()
  if self.zero then return self.zero:counts() end
  return 0, 0, 0
end

-- The counts a checkpoint restores: micro-steps so far and optimizer steps
-- taken (the next backward opens a window).
function Engine:set_counts(micro, steps)
  self.zero:set_counts(micro, steps)
end

-- Clears the gradients of the next accumulation window.
function Engine:zero_grad()
  if self.zero then self.zero:zero_grad() end
end

-- One micro-step: the engine scales the loss (1 / accumulation steps, the
-- loss scale), runs backward and reduces buckets (stages 2-3), in one call.
function Engine:backward(loss)
  if not zorch.is_tensor(loss) then error("Engine:backward: expected a loss tensor", 2) end
  if not self.zero then error("Engine:backward: prepare the model first (engine:prepare(model, loader, opt))", 2) end
  if self.cfg.steps_per_print then -- the step line's mean loss (added where the loss is, read when printed)
    self.print_loss, self.print_micro = loss:detach() + (self.print_loss or 0), (self.print_micro or 0) + 1
    self.print_t0 = self.print_t0 or zorch.clock()
  end
  if self.monitor then self.mon_loss, self.mon_micro = loss:detach() + (self.mon_loss or 0), (self.mon_micro or 0) + 1 end
  if self.rank == 0 and self:inject_overflow(self.scaler.attempts + 1) then loss = loss * math.huge end
  local t0 = self.wall and zorch.clock()
  self.zero:backward(loss)
  if self.wall then self.wall.backward = self.wall.backward + (zorch.clock() - t0) end
end

-- Testing overflows: ZORCH_TEST_HOOKS=overflow=3,7,8 makes rank 0's gradients inf
-- or nan (the loss times inf) in those optimizer step attempts (1-based,
-- skipped steps included).
function Engine:inject_overflow(attempt)
  if self.overflow_steps == nil then
    self.overflow_steps = {}
    for n in (zorch._test_hook("overflow") or ""):gmatch("%d+") do self.overflow_steps[tonumber(n)] = true end
  end
  return self.overflow_steps[attempt] == true
end

-- The update the engine's step runs (zorch_zero_step's callback): the
-- inner optimizer over the target with the reduced, unscaled and clipped
-- gradient; grad_scale, with the gradient in the parameter file, the factor
-- the optimizer's stream still applies as it reads it.
function Engine:update(target, grad, grad_scale)
  if self.offload and self.offload_bound then self.offload:grad_scale(grad_scale) end
  target = self.target -- (the tensor the inner optimizer holds)
  if self.runs and self.inner._per_tensor then -- norms per tensor, over the ranks holding its pieces
    local group, sharded = self.group, self.cfg.zero_stage > 0
    self.inner:_step_tensors(target, grad, self.runs, self.ntensors,
                             function(t) if sharded then group:allreduce(t) end end)
  elseif self.runs then -- each run of the slice with its group's options (as they are now)
    local steps = self.steps
    for _, r in ipairs(self.runs) do if r.behind then r.fresh = r.behind == steps end end
    self.inner:_step_runs(target, grad, self.runs)
  else
    self.inner.lr = self.user_opt.lr
    target.grad = grad
    self.inner:step()
    target.grad = nil
  end
end

-- One call into the engine: reduce, the global norm (over the data ranks and
-- the model's), overflow and the loss scaler, unscale and clip by one factor,
-- the host copy, the update (Engine:update), then gather or release. With
-- fp16 an inf or nan in any rank's gradients skips the step: no update, no
-- scheduler step, the step count stays; the loss scale falls.
function Engine:optimizer_step()
  self:update_runs()
  if not self.update_fn then
    self.update_fn = function(target, grad, grad_scale) self:update(target, grad, grad_scale) end
  end
  local info = self.zero:step(self.update_fn)
  self:read_scaler()
  self.last_norm = info.norm
  if self.wall then
    self.wall.reduction = self.wall.reduction + info.reduce_s
    self.wall.step = self.wall.step + info.update_s
  end
  if info.overflow then
    self.last_skipped = true
    if self.first and os.getenv("ZORCH_QUIET") == nil then
      io.stderr:write(("zorch: step %d overflowed (gradient norm %s): skipped, loss scale now %g\n"):format(
        self.steps + 1, tostring(self.last_norm), self.scaler.scale))
    end
    self:note_comm()
    return false
  end
  self.last_skipped = false
  if self.runs then self:note_missed() end
  if self.offload then self:note_io() end
  if self.lr_scheduler then self.lr_scheduler.step() end
  self:note_comm()
  if self.cfg.steps_per_print then self:print_step() end
  if self.monitor then
    local loss = self.mon_loss and self.mon_loss:item() / self.mon_micro
    self.mon_loss, self.mon_micro = nil, nil
    zorch._monitor_step(self.monitor, self, (self.loader and self.loader.batch_size or 1) *
      self.cfg.gradient_accumulation_steps * self.world_size, loss)
  end
  if self.flops then self:flops_step() end
end

-- The FLOPs profiler (engine/flops.lua): counting over optimizer step
-- profile_step, its report printed by rank 0 (and written to output_file).
function Engine:flops_step()
  local at = self.cfg.flops_profiler.profile_step or 1
  if self.steps == at - 1 then self.flops:start()
  elseif self.steps == at and self.flops.t0 then
    self.flops_report = self.flops:stop()
    local lines = zorch._flops_lines(self.flops_report, at)
    for _, l in ipairs(lines) do self:print(l) end
    local file = self.cfg.flops_profiler.output_file
    if file and self.first then
      local f = io.open(file, "w")
      if not f then error(("Engine: flops_profiler.output_file %s cannot be written"):format(file), 0) end
      f:write(table.concat(lines, "\n"), "\n")
      f:close()
    end
  end
end

-- comms_logger: per kind of collective, the calls, bytes this rank sent and
-- time from start to completion (DeepSpeed's latency; algbw = bytes / time)
-- since the last summary, with the reductions' and gathers' time in flight
-- and waited (the communication report's); printed with the step lines.
function Engine:comms_summary()
  local t = self.comm_time or {}
  self.comm_time = nil
  local lines = {}
  for _, k in ipairs(zorch._comm_kinds(true)) do
    if k.calls > 0 then
      lines[#lines + 1] = ("comms: %-16s %6d calls  %12.4g MB sent  %10.4g MB/call  %10.3f ms  %8.3f ms/call  %9.4g GB/s"):format(
        k.name, k.calls, k.bytes / 1e6, k.bytes / 1e6 / k.calls, 1000 * k.seconds, 1000 * k.seconds / k.calls,
        k.seconds > 0 and k.bytes / 1e9 / k.seconds or 0)
    end
  end
  lines[#lines + 1] = ("comms: reductions %.3f ms in flight, %.3f ms waited; gathers %.3f ms in flight, %.3f ms waited"):format(
    1000 * (t.in_flight_s or 0), 1000 * (t.waited_s or 0), 1000 * (t.gather_in_flight_s or 0),
    1000 * (t.gather_waited_s or 0))
  return lines
end

-- What this step moved, from the end of the previous one (stage 3 gathers in
-- forward), and (stages 2-3) how long the gradient reductions were in flight
-- and how long backward was blocked in them.
function Engine:note_comm()
  local sent, recv = self.group:bytes(true)
  local flight, waited = self.zero:comm_times(true)
  local gflight, gwaited = self.zero:gather_times(true)
  self.last_comm = {sent = sent, received = recv, in_flight_s = flight, waited_s = waited,
                    gather_in_flight_s = gflight, gather_waited_s = gwaited}
  if self.cfg.comms_logger then -- (summed until the next summary)
    local t = self.comm_time or {}
    for k, v in pairs(self.last_comm) do t[k] = (t[k] or 0) + v end
    self.comm_time = t
  end
end

-- Every steps_per_print steps, as DeepSpeed reports them: the step, the mean loss
-- of the micro-batches since the last line (over every rank), the learning
-- rate, the global gradient norm, samples/s over those steps (samples: the
-- loader's batch size x accumulation x ranks) and the step time.
function Engine:print_step()
  local now = zorch.clock()
  self.print_t0 = self.print_t0 or now
  if self.steps % self.cfg.steps_per_print ~= 0 then return end
  local n = self.steps - (self.print_step_n or 0)
  local dt = math.max(now - self.print_t0, 1e-9)
  local loss = self.print_loss and self:mean(self.print_loss:item() / self.print_micro)
  local batch = self.loader and self.loader.batch_size
  local rate = batch and ("  %.0f samples/s"):format(n * batch * self.cfg.gradient_accumulation_steps * self.world_size / dt)
               or ("  %.2f steps/s"):format(n / dt)
  local scale = self.cfg.precision == "fp16" and ("  loss scale %g"):format(self.scaler.scale) or ""
  self:print(("step %d  loss %s  lr %.3g  grad norm %.4f%s%s  %.2f ms/step"):format(self.steps,
    loss and ("%.6f"):format(loss) or "?", self.user_opt.lr, self.last_norm or 0, scale, rate, 1000 * dt / n))
  if self.last_io then -- offload to nvme: the last step's traffic and the bandwidth it reached (rank 0)
    local io = self.last_io
    self:print(("step %d  offload: read %.4g MB, wrote %.4g MB in %.3g s: %.0f MB/s (optimizer stream (%s) %.4g/%.4g MB in %.3g s, " ..
                "I/O thread reading %.3g s, writing %.3g s, the update waited %.3g s; parameter file %.4g/%.4g MB in %.3g s, " ..
                "%.3g s of it on the calling thread)"):format(
      self.steps, io.read / 1e6, io.written / 1e6, io.step_s, (io.read + io.written) / 1e6 / math.max(io.step_s, 1e-9),
      io.opt.io, io.opt.read_bytes / 1e6, io.opt.write_bytes / 1e6, io.opt.step_s, io.opt.read_s, io.opt.write_s, io.opt.wait_s,
      io.param.read_bytes / 1e6, io.param.write_bytes / 1e6, io.param.io_s, io.param.sync_s or 0) .. (self.disk and
      ("; the disk: write %.0f MB/s, read %.0f MB/s%s"):format(self.disk.write, self.disk.read,
        self.disk.direct and " (direct I/O, at prepare)" or " (through the page cache: no direct I/O there)") or ""))
  end
  if self.cfg.comms_logger then for _, l in ipairs(self:comms_summary()) do self:print(l) end end
  if self.wall then -- wall_clock_breakdown: rank 0's times, per optimizer step over those steps
    local w = self.wall
    self:print(("step %d  time (ms/step)  forward %.3f  backward %.3f  reduction %.3f  step %.3f"):format(self.steps,
      1000 * w.forward / n, 1000 * w.backward / n, 1000 * w.reduction / n, 1000 * w.step / n))
    w.forward, w.backward, w.reduction, w.step = 0, 0, 0, 0
  end
  self.print_t0, self.print_step_n, self.print_loss, self.print_micro = now, self.steps, nil, nil
end

-- Offload to nvme: what the step just taken moved to and from the disk, from
-- the end of the previous step (gathers in forward and backward, gradients
-- written as their buckets were reduced, the optimizer's stream).
function Engine:note_io()
  local now = zorch.clock()
  local opt, param = self.offload:stats(), self.zero:io(true)
  self.last_io = {opt = opt, param = param, step_s = now - (self.io_t0 or self.io_start or now),
                  read = opt.read_bytes + param.read_bytes, written = opt.write_bytes + param.write_bytes}
  self.io_t0 = now
end

-- ---- the norm over a model split across ranks (layout with tensor or pipeline > 1) ----

-- The weight of each parameter's squares in the model's norm, so that the sum
-- over the ranks holding the model counts every element once: a parameter
-- split across the tensor group (module.tp_split) counts whole on each rank, a
-- replicated one 1/T on each of its T copies, and a tied copy a pipeline stage
-- holds besides the first (engine:add_norm_group's duplicates) not at all.
-- nil when the model is not split (no layout splitting it, no norm group).
function Engine:model_norm_weights(model, params)
  local L = self.layout
  local split_model = L and L.model:size() > 1
  if not split_model and not self.norm_groups then return nil end
  local T = L and L.sizes.tensor or 1
  local split = T > 1 and zorch.nn.tp_splits(model) or {}
  local weight = {}
  for i, name in ipairs(self.param_names) do weight[i] = (T == 1 or split[name] ~= nil) and 1 or 1 / T end
  for k, p in ipairs(params) do
    if self.norm_duplicates and self.norm_duplicates[p] then weight[k] = 0 end
  end
  return weight
end

-- The engine's norm over a split model: each parameter's weight, and the
-- groups the sum of squares is summed over besides the data ranks (the
-- layout's model group, or the norm groups without one).
function Engine:set_norm()
  local weight = self:model_norm_weights(self.norm_model, self.params)
  if not weight then return end
  self.zero:set_norm_weights(weight)
  if self.layout and self.layout.model:size() > 1 then
    self.zero:add_norm_comm(self.layout.model)
  else
    for _, g in ipairs(self.norm_groups or {}) do self.zero:add_norm_comm(g) end
  end
end

-- With a prepared optimizer the engine clips inside its step, from the shards:
-- this returns the global norm that step measured (nil before the first).
-- Otherwise: the norm of the parameters' .grad, scaled down to max_norm.
function Engine:clip_grad_norm(max_norm, params)
  if self.inner then return self.last_norm end
  max_norm = max_norm or self.cfg.gradient_clipping
  params = params or (self.model and self.model:parameters())
  if not params then
    error("Engine:clip_grad_norm: no model prepared: pass the parameters (clip_grad_norm(max, params)), " ..
          "or use nn.utils.clip_grad_norm_(params, max)", 2)
  end
  -- (a max of 0 or none, the config's "no clipping": the norm only)
  self.last_norm = zorch.nn.utils.clip_grad_norm_(params, (max_norm and max_norm > 0) and max_norm or math.huge)
  return self.last_norm
end

local bytes = frozen.bytes

-- zorch.checkpoint(fn, ...) with the config's activation checkpointing options.
function Engine:checkpoint(fn, ...)
  return zorch._checkpoint({cpu = self.cfg.cpu_checkpointing}, fn, ...)
end

-- Bytes this rank holds, by category, from the tensors it actually keeps.
function Engine:memory_report()
  if not self.zero then error("Engine:memory_report: call prepare first", 2) end
  local opt_bytes = 0
  for _, s in pairs(self.inner and self.inner.state or {}) do -- moments (of the master weights)
    for _, v in pairs(s) do if zorch.is_tensor(v) then opt_bytes = opt_bytes + bytes(v) end end
  end
  local m = self.zero:memory()
  local frozen_bytes, frozen_numel = frozen.size(self.frozen)
  local st = self.offload and self.offload:stats()
  local pio = self.zero:io(false)
  local on_nvme = not self.host_param -- (offload_param "cpu" on a GPU rank: the files are in host memory)
  local files = (st and st.file_bytes or 0) + pio.file_bytes
  return {
    nvme = on_nvme and files or 0, -- the files: moments, and parameters with gradients
    nvme_optimizer = on_nvme and st and st.file_bytes or 0, -- the optimizer state's file (offload_optimizer nvme)
    nvme_parameters = on_nvme and pio.file_bytes or 0, -- the shard and its gradients (offload_param nvme)
    host_files = on_nvme and 0 or files, -- the same files in host memory (offload_param "cpu" on a GPU rank)
    host_copy = self.host and bytes(self.host.target) + bytes(self.host.grad) or 0, -- GPU ranks' offload: the shard and gradient in host memory
    host_pinned = self.host and self.host.pinned and bytes(self.host.target) + bytes(self.host.grad) or 0, -- of it, page-locked (pin_memory)
    offload_buffers = st and st.buffer_bytes or 0, -- its chunk buffers in host memory
    parameters = m.parameters,
    gradients = m.gradients,
    optimizer_state = opt_bytes,
    master_weights = m.master_weights,
    buffers = m.buffers, -- bucket staging exists only while a bucket fills
    numel = m.numel,
    frozen = frozen_bytes, -- frozen parameters outside the engine: the model's plain tensors
    frozen_numel = frozen_numel,
    world_size = self.world_size,
    stage = self.cfg.zero_stage,
  }
end

-- Bytes this rank sent and received in the last optimizer step (ring volumes),
-- and (stages 2-3) the seconds its gradient reductions were in flight and the
-- seconds backward was blocked in them: overlap_comm hides the difference
-- between the blocked time without it and with it. At stage 3 the same for the
-- parameter gathers (gather_in_flight_s, gather_waited_s): the difference is
-- what prefetching hid.
function Engine:comm_report()
  return self.last_comm or {sent = 0, received = 0, in_flight_s = 0, waited_s = 0, gather_in_flight_s = 0,
                            gather_waited_s = 0}
end

-- The mean of a number over ranks (for logging a loss every rank computed).
function Engine:mean(x)
  if zorch.is_tensor(x) and x:numel() == 1 then x = x:item() end
  if type(x) ~= "number" then
    error("Engine:mean: expected a number or a one-element tensor, got " ..
          (zorch.is_tensor(x) and ("a tensor of shape (" .. table.concat(x.shape, ", ") .. ")") or type(x)), 2)
  end
  if self.world_size == 1 then return x end
  local t = zorch.tensor({x}, {dtype = "float64"})
  zorch._comm_label("a logged value")
  self.group:allreduce(t)
  return t:item() / self.world_size
end

function Engine:print(...)
  if self.printer then print(...) end
end

-- Whether engine:print prints on this rank (world rank 0's by default; a
-- pipeline sets it so that one rank of the world prints).
function Engine:set_printer(on) self.printer = on and true or false end

-- Whether prepare ran with this model.
function Engine:prepared_with(model) return self.zero ~= nil and self.model == model end

-- (rank 0 writes; a state dict taken under stage 3 was gathered by the model)
function Engine:save(tbl, path)
  if self.first then zorch.save(tbl, path) end
end

-- ---- model parallelism: backward from a stage's output, the norm over the whole model ----

-- A backward pass from a tensor and its gradient (a pipeline stage's output
-- and the gradient the next stage sent back), counted as one micro-step of
-- the accumulation window like backward(loss).
function Engine:backward_from(t, grad)
  if not zorch.is_tensor(t) or not zorch.is_tensor(grad) then
    error("Engine:backward_from: expected a tensor and its gradient", 2)
  end
  if not self.zero then error("Engine:backward_from: prepare the model first", 2) end
  self.zero:backward_from(t, grad)
end

-- The mean loss of micro-batches whose loss was taken on another rank (a
-- pipeline's last stage), for the step line.
function Engine:note_loss(mean, count)
  if not self.cfg.steps_per_print then return end
  self.print_loss = zorch.tensor({mean * count}, {dtype = "float64"}) + (self.print_loss or 0)
  self.print_micro = (self.print_micro or 0) + count
  self.print_t0 = self.print_t0 or zorch.clock()
end

-- engine:add_norm_group(group, duplicates): the model is split across the
-- ranks of group (pipeline stages, tensor shards), so the gradient norm that
-- clipping uses sums the squares over that group too; duplicates lists this
-- rank's parameters that another rank of the group also holds (a tied
-- parameter's copy, a replicated one), left out here so each counts once.
-- Groups add up: a norm over pipeline stages and tensor shards takes both;
-- an engine given a layout sums over its model group instead, which holds them.
function Engine:add_norm_group(group, duplicates)
  if not is_group(group) then error("Engine:add_norm_group: argument 1 must be a zorch.Group", 2) end
  self.norm_groups = self.norm_groups or {}
  local known = false
  for _, g in ipairs(self.norm_groups) do known = known or g == group end
  if not known then self.norm_groups[#self.norm_groups + 1] = group end
  self.norm_duplicates = self.norm_duplicates or {}
  for _, t in ipairs(duplicates or {}) do self.norm_duplicates[t] = true end
  if self.zero and self.norm_model then self:set_norm() end -- (else at prepare)
end

-- ---- checkpoints (engine/checkpoint.lua: the folder format) ----
-- The checkpoint module reaches the engine only through the four methods below.

-- engine:save_checkpoint(dir, {tag?, extra?, keep_last?}) -> tag: this rank's
-- slice and (rank 0) the manifest, published through dir/latest; keep_last
-- defaults to the Engine's option.
function Engine:save_checkpoint(dir, opts)
  if not self.inner then error("save_checkpoint: call prepare with an optimizer first", 2) end
  if opts ~= nil and type(opts) ~= "table" then error("save_checkpoint: argument 2 must be a table of options", 2) end
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if o.keep_last == nil then o.keep_last = self.cfg.keep_last end
  return ckpt.save(self, dir, o)
end

-- engine:load_checkpoint(dir) -> manifest: resumes from dir/latest (or dir
-- itself when it holds a manifest), resharding to this run's layout.
function Engine:load_checkpoint(dir)
  if not self.inner then error("load_checkpoint: call prepare with an optimizer first", 2) end
  return ckpt.load(self, dir)
end

-- What a checkpoint reads of the engine's layout: the model, the engine's
-- parameters in its flat order ({{name, tensor}, ...}), what rank 0 writes
-- whole (the model's buffers, then the frozen parameters outside the engine)
-- and those frozen parameters alone ({{name, tensor}, ...}), the data rank,
-- the ZeRO stage and precision, the shard size, the flat optimizer target (a
-- load writes it in place), the optimizer's name and the layout splitting
-- the model (nil without one).
function Engine:checkpoint_layout()
  local params, whole = {}, {}
  for i, p in ipairs(self.params) do params[i] = {self.param_names[i], p} end
  for name, b in self.model:named_buffers() do whole[#whole + 1] = {name, b} end
  for _, f in ipairs(self.frozen) do whole[#whole + 1] = f end
  return {model = self.model, params = params, buffers = whole, frozen = self.frozen, rank = self.rank,
          stage = self.cfg.zero_stage, precision = self.cfg.precision,
          shard = self.zero:memory().shard, target = self.zero:target(),
          optimizer = getmetatable(self.inner).__name or "optimizer", layout = self.layout}
end

-- What a save writes besides the pieces: the optimizer state of this rank's
-- slice (tensors and scalars), the counts, the learning rate and the groups'
-- options, the scheduler's step, the loss scaler (fp16), the loader's state
-- and the steps each parameter missed while frozen (by name, those > 0).
function Engine:checkpoint_state()
  local micro, steps = self:counts()
  local missed = {}
  for i, name in ipairs(self.param_names) do
    local n = self.behind and self.behind[i]
    if n and n > 0 then missed[name] = n end
  end
  local s, opt = self.scaler, self.user_opt
  return {
    optimizer_state = self.inner:full_state(1) or {}, steps = steps, micro = micro, lr = opt.lr,
    param_groups = opt.group_options and opt:group_options() or nil,
    scheduler_step = self.lr_scheduler and self.lr_scheduler.last_step or nil,
    loss_scale = self.cfg.precision == "fp16" and {scale = s.scale, hysteresis = s.hysteresis, attempts = s.attempts,
      last_overflow = s.last_overflow, skipped = s.skipped} or nil,
    loader = self.loader and self.loader:state() or nil, missed = missed,
  }
end

-- After a load wrote the target: the optimizer state of this rank's slice,
-- and (offload on a GPU rank) the host copy the optimizer steps.
function Engine:restore_optimizer_state(state)
  if self.host then self.target:copy_(self.host.device_target) end
  self.inner.state[1] = state
end

-- A checkpoint's counters {lr, param_groups?, steps, scheduler_step?, missed
-- (by name), loss_scale?, loader?, rng_offset}, after its parameters and state
-- are in place. Returns its further arguments (load tail-calls it: the
-- groups' errors are the caller's, level 3).
function Engine:restore_counters(c, ...)
  if c.param_groups and self.user_opt._load_groups then -- every group's options, as saved
    self.user_opt:_load_groups(c.param_groups, "load_checkpoint", 3)
  else
    self.user_opt.lr = c.lr
  end
  self.inner.lr = c.lr
  -- saved between optimizer steps: the next micro-batch opens a window, whatever the accumulation now
  self:set_counts(0, c.steps)
  self.zero:publish() -- master weights into the parameters, then gather or release
  if self.lr_scheduler and c.scheduler_step then
    self.lr_scheduler.last_step = c.scheduler_step
    if self.lr_scheduler.set_lr then self.lr_scheduler.set_lr(c.scheduler_step)
    else self.user_opt.lr = self.lr_scheduler.lr_at(c.scheduler_step) end
  end
  -- the steps each parameter missed while frozen, and the runs they shape
  if self.group_base then
    local index = {}
    for i, name in ipairs(self.param_names) do index[name] = i end
    self.behind = {}
    for name, n in pairs(c.missed or {}) do
      if index[name] then self.behind[index[name]] = n end
    end
    self.runs = self:group_runs(self:stepped_groups(), self.params, self.user_opt)
  end
  local s = self:reset_scaler()
  if self.cfg.precision == "fp16" and c.loss_scale then
    local ls = c.loss_scale
    if s.dynamic then s.scale, s.hysteresis = ls.scale, math.min(ls.hysteresis, self.cfg.hysteresis) end
    s.attempts, s.last_overflow, s.skipped = ls.attempts, ls.last_overflow, ls.skipped
    self:reset_scaler(s)
  end
  if self.loader and c.loader then self.loader:load_state(c.loader) end
  zorch._rng_set_offset(c.rng_offset)
  return ...
end

return nil
