-- pipeline.lua: nn.Pipeline, pipeline parallelism. A model given as a list of
-- layers is cut into P contiguous stages, one per rank of a pipeline group;
-- each rank builds and keeps only its own stage's layers, under the names they
-- have in the whole model. A training step (train_batch) runs M micro-batches
-- through the stages on a schedule, 1F1B or GPipe, sending activations forward
-- and their gradients back between neighbouring stages; the loss is taken on
-- the last stage. Parameters tied across stages (GPT-2's token embedding and
-- its output head) are kept as one copy per stage, equal at the start, with
-- their gradients summed between those stages before each step.
-- docs/distributed.md, "Pipeline parallelism", describes the schedules.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return nil end -- required as an installed file
local nn = zorch._require "zorch.nn"

local Pipeline = nn.Module:extend "nn.Pipeline"
nn.Pipeline = Pipeline

local function is_module(m) return type(m) == "table" and rawget(m, "_order") ~= nil end
local TIE -- the metatable of a tie (below)
local function is_group(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "zorch.Group" or false
end
local function fail(fmt, ...) error("nn.Pipeline: " .. fmt:format(...), 3) end

local OPTIONS = {layers = true, group = true, partition = true, loss = true, tied = true, schedule = true,
                 micro_batches = true, seed_layers = true}

-- A layer as {build, name, forward, numel, module}: a module, a function (no
-- parameters), or a table {build = fn() -> module, name = "h.3", forward = fn(module, x), numel = N}.
local function spec_of(l, i)
  local s = {name = tostring(i - 1)} -- nn.Sequential's names by default
  if is_module(l) then
    s.module = l
  elseif type(l) == "function" then
    s.fn = l
  elseif type(l) == "table" then
    for k in pairs(l) do
      if k ~= "build" and k ~= "name" and k ~= "forward" and k ~= "numel" and k ~= "module" then
        fail("layer %d: unknown key '%s' (allowed: build, forward, module, name, numel)", i, tostring(k))
      end
    end
    if l.build ~= nil and type(l.build) ~= "function" then fail("layer %d: build must be a function", i) end
    if l.module ~= nil and not is_module(l.module) then fail("layer %d: module must be a module", i) end
    if l.build == nil and l.module == nil and type(l.forward) ~= "function" then
      fail("layer %d: give build (a function making its module), module, or forward", i)
    end
    if l.forward ~= nil and type(l.forward) ~= "function" then fail("layer %d: forward must be a function", i) end
    if l.name ~= nil and type(l.name) ~= "string" then fail("layer %d: name must be a string", i) end
    if l.numel ~= nil and not (math.type(l.numel) == "integer" and l.numel >= 0) then
      fail("layer %d: numel must be an integer >= 0", i)
    end
    s.build, s.module, s.forward, s.numel = l.build, l.module, l.forward, l.numel
    if l.name then s.name = l.name end
    if not s.build and not s.module then s.fn = l.forward; s.forward = nil end
  else
    fail("layer %d is a %s: expected a module, a function or a table {build = ...}", i, type(l))
  end
  return s
end

local function count(m)
  local n = 0
  for _, p in ipairs(m:parameters()) do n = n + p:numel() end
  return n
end

-- The first layer of each stage (first[P + 1] = #layers + 1) for contiguous
-- stages of the given weights whose largest total is as small as it can be
-- (nn.Pipeline.balanced, for tests).
local function balanced(w, P)
  local n = #w
  local pre = {[0] = 0}
  for i = 1, n do pre[i] = pre[i - 1] + w[i] end
  -- best[p][i]: the smallest largest stage for the first i layers in p stages
  local best, cut = {}, {}
  best[0] = {[0] = 0}
  for p = 1, P do
    best[p], cut[p] = {}, {}
    for i = p, n - (P - p) do
      local b, c = math.huge, nil
      for j = p - 1, i - 1 do
        local prev = best[p - 1][j]
        if prev then
          local v = math.max(prev, pre[i] - pre[j])
          if v < b then b, c = v, j end
        end
      end
      best[p][i], cut[p][i] = b, c
    end
  end
  local first, i = {}, n
  first[P + 1] = n + 1
  for p = P, 1, -1 do
    local j = cut[p][i]
    first[p] = j + 1
    i = j
  end
  return first
end

Pipeline.balanced = balanced

-- nn.Pipeline{layers = {...}, group = G, partition = "parameters" | "uniform" | {first layers},
--             loss = fn(output, target), tied = {{name, name}, ...}, schedule = "1f1b" | "gpipe",
--             micro_batches = M, seed_layers = seed}
function Pipeline:init(opts)
  if type(opts) ~= "table" or is_module(opts) then fail("expected a table {layers = {...}, group = ...}") end
  for k in pairs(opts) do
    if not OPTIONS[k] then
      fail("unknown option '%s' (allowed: group, layers, loss, micro_batches, partition, schedule, seed_layers, tied)",
        tostring(k))
    end
  end
  if type(opts.layers) ~= "table" or #opts.layers == 0 then fail("layers must be a non-empty list") end
  local group = opts.group or zorch.dist.world()
  if not is_group(group) then fail("group must be a zorch.Group, got %s", zorch._readable(group)) end
  local schedule = opts.schedule or "1f1b"
  if schedule ~= "1f1b" and schedule ~= "gpipe" then fail("schedule must be \"1f1b\" or \"gpipe\", got %s", zorch._readable(schedule)) end
  if opts.loss ~= nil and type(opts.loss) ~= "function" then fail("loss must be a function(output, target)") end
  local M = opts.micro_batches
  if M ~= nil and not (math.type(M) == "integer" and M >= 1) then fail("micro_batches must be an integer >= 1") end
  local seed = opts.seed_layers
  if seed ~= nil and seed ~= false and math.type(seed) ~= "integer" then fail("seed_layers must be an integer or false") end
  local P, s = group:size(), group:rank()
  local specs = {}
  for i, l in ipairs(opts.layers) do specs[i] = spec_of(l, i) end
  local n = #specs
  if n < P then fail("%d layers cannot fill %d stages (one layer at least each)", n, P) end

  -- the partition: the first layer of each stage
  local rs, ro = zorch._rng_state()
  local function build(i)
    local sp = specs[i]
    if sp.module then return sp.module end
    if not sp.build then return nil end
    if seed then zorch.manual_seed(seed + i - 1) end
    local m = sp.build()
    if not is_module(m) then fail("layer %d: build returned a %s, not a module", i, type(m)) end
    return m
  end
  local part = opts.partition or "parameters"
  local first
  if part == "uniform" then
    first = {}
    for p = 1, P do first[p] = 1 + ((p - 1) * n) // P end
    first[P + 1] = n + 1
  elseif part == "parameters" then
    local w = {}
    for i, sp in ipairs(specs) do
      if sp.numel then w[i] = sp.numel
      elseif sp.module then w[i] = count(sp.module)
      elseif sp.build then w[i] = count(build(i)) -- (built to be counted, then dropped)
      else w[i] = 0 end
    end
    zorch._set_rng_state(rs, ro)
    collectgarbage() -- (the layers built to be counted)
    first = balanced(w, P)
  elseif type(part) == "table" then
    if #part ~= P then fail("partition lists %d first layers for %d stages", #part, P) end
    first = {}
    for p = 1, P do
      local f = part[p]
      if math.type(f) ~= "integer" or (p == 1 and f ~= 1) or (p > 1 and (f <= first[p - 1] or f > n)) then
        fail("partition must list the first layer of each stage, increasing from 1 to at most %d: %s", n,
          zorch._readable(part))
      end
      first[p] = f
    end
    first[P + 1] = n + 1
  else
    fail("partition must be \"parameters\", \"uniform\" or a list of each stage's first layer, got %s",
      zorch._readable(part))
  end

  rawset(self, "group", group)
  rawset(self, "num_stages", P)
  rawset(self, "stage_id", s)
  rawset(self, "bounds", first)
  rawset(self, "schedule", schedule)
  rawset(self, "loss_fn", opts.loss)
  rawset(self, "micro_batches", M)
  -- this stage's layers, registered under their names in the whole model; a
  -- layer named "" puts its own children and parameters at the top level
  local layers = {}
  for i = first[s + 1], first[s + 2] - 1 do
    local sp = specs[i]
    local m = build(i)
    layers[#layers + 1] = {module = m, forward = sp.forward, fn = sp.fn, index = i}
    if m then
      if sp.name == "" then
        for _, k in ipairs(m._order) do
          if rawget(self, k) ~= nil then fail("layer %d: the name '%s' is taken by an earlier layer", i, k) end
          -- (a parameter or buffer of its own would be two fields that Module:to moves apart)
          if not m._children[k] then
            fail("layer %d is named \"\": it may hold modules only, but '%s' is a tensor (put it in a child module)", i, k)
          end
          self[k] = rawget(m, k)
        end
      else
        if rawget(self, sp.name) ~= nil then fail("layer %d: the name '%s' is taken by an earlier layer", i, sp.name) end
        self[sp.name] = m
      end
    end
  end
  zorch._set_rng_state(rs, ro) -- (every stage draws the same numbers afterwards)
  rawset(self, "layers", layers)
  self:tie(opts.tied or {})
  rawset(self, "last", nil)
end

-- The module and key holding the parameter of a full name on this stage, or nil.
local function find_param(m, name, prefix)
  prefix = prefix or ""
  for _, k in ipairs(m._order) do
    local full = prefix .. k
    if m._params[k] and full == name then return m, k end
    if m._children[k] and name:sub(1, #full + 1) == full .. "." then
      local o, key = find_param(rawget(m, k), name, full .. ".")
      if o then return o, key end
    end
  end
  return nil
end

-- A tie's parameter on this stage: tie.param.
TIE = {__index = function(t, k) if k == "param" then return rawget(t.owner, t.key) end end}

-- Tied parameters: one tensor per stage for each list of names; across the
-- stages holding it, a group (of the pipeline group's ranks) that starts it
-- equal (a broadcast from the first) and sums its gradients.
function Pipeline:tie(tied)
  if type(tied) ~= "table" then fail("tied must be a list of lists of parameter names") end
  local ties = {}
  for ti, names in ipairs(tied) do
    if type(names) ~= "table" or #names < 2 then fail("tied[%d] must list two parameter names or more", ti) end
    local held = {}
    for _, nm in ipairs(names) do
      if type(nm) ~= "string" then fail("tied[%d] must list parameter names (strings)", ti) end
      local o, k = find_param(self, nm)
      if o then held[#held + 1] = {o, k, nm} end
    end
    local p = held[1] and rawget(held[1][1], held[1][2])
    for j = 2, #held do
      local q = rawget(held[j][1], held[j][2])
      if table.concat(q.shape, ",") ~= table.concat(p.shape, ",") then
        fail("tied parameters '%s' (%s) and '%s' (%s) differ in shape", held[1][3], table.concat(p.shape, ", "),
          held[j][3], table.concat(q.shape, ", "))
      end
      rawset(held[j][1], held[j][2], p)
    end
    -- (a split for every list on every rank: splits are collective)
    local g = self.group:split(p and 0 or 1, self.stage_id)
    if p then
      if g:size() > 1 then zorch.no_grad(function() g:broadcast(p, 0) end) end
      -- (found through its module when used: Module:to and the engine replace tensors)
      ties[#ties + 1] = setmetatable({owner = held[1][1], key = held[1][2], group = g, copy = g:rank() > 0,
                                      names = names}, TIE)
    end
  end
  rawset(self, "ties", ties)
end

function Pipeline:is_first_stage() return self.stage_id == 0 end
function Pipeline:is_last_stage() return self.stage_id == self.num_stages - 1 end

-- This stage's layers on x.
function Pipeline:forward(x)
  for _, l in ipairs(self.layers) do
    if l.fn then x = l.fn(x)
    elseif l.forward then x = l.forward(l.module, x)
    else x = l.module(x) end
  end
  return x
end

-- ---- messages between neighbouring stages ----------------------------------------------------

-- An activation travels after a header of its dtype and shape, so the
-- receiver can allocate it; its gradient comes back in the shape it has.
local DTYPES = {"float32", "bfloat16", "float16", "float64", "int64", "int32", "uint8", "int8"}
local CODE = {}
for i, d in ipairs(DTYPES) do CODE[d] = i end
local HDR = 10 -- dtype, dims, 8 sizes

local function header(t)
  local h = {CODE[t:dtype()] or 0, t:dim()}
  if h[1] == 0 or h[2] > 8 then error(("nn.Pipeline: cannot send a %s activation of %d dims"):format(t:dtype(), t:dim()), 0) end
  for i = 1, 8 do h[2 + i] = t.shape[i] or 0 end
  return zorch.tensor(h, {dtype = "int64", device = t:device()})
end

local function alloc(h, device)
  local v = h:to("cpu"):totable()
  local shape = {}
  for i = 1, v[2] do shape[i] = v[2 + i] end
  return zorch.zeros(shape, {dtype = DTYPES[v[1]], device = device})
end

local function like(t) return zorch.zeros(t.shape, {dtype = t:dtype(), device = t:device()}) end

-- ---- the schedules ----------------------------------------------------------------------------

-- pipe:train_batch(batches [, engine]): one training step's forwards and
-- backwards over M micro-batches. batches(m) -> input, target for m = 1..M; it
-- is called once per micro-batch on every stage, in order (so random draws stay
-- in step), the first stage using the input and the last the target. With an
-- engine (zorch.Engine over the data group, prepared with this module, stages 0
-- and 1) M is its gradient_accumulation_steps and the gradients land in its
-- buffers; call its optimizer's step() afterwards. Returns the mean loss over
-- the micro-batches (on every stage: the last stage's, broadcast).
function Pipeline:train_batch(batches, engine)
  if type(batches) ~= "function" then error("Pipeline:train_batch: argument 1 must be a function(m) -> input, target", 2) end
  if engine ~= nil and not zorch.is_engine(engine) then
    error("Pipeline:train_batch: argument 2 must be a zorch.Engine", 2)
  end
  local M = self.micro_batches
  if engine then
    local cfg = engine:config()
    local k = cfg.gradient_accumulation_steps
    if M and M ~= k then
      error(("Pipeline:train_batch: %d micro-batches but the engine accumulates %d (gradient_accumulation_steps)"):format(M, k), 2)
    end
    M = k
    if cfg.zero_stage > 1 then
      error(("Pipeline:train_batch: the engine runs ZeRO stage %d; a pipeline takes stage 0 or 1"):format(cfg.zero_stage), 2)
    end
    if not engine:prepared_with(self) then
      error("Pipeline:train_batch: prepare the engine with this pipeline first (engine:prepare(pipe, nil, optimizer))", 2)
    end
    self:attach(engine)
  end
  M = M or 1
  if self:is_last_stage() and not self.loss_fn then error("Pipeline:train_batch: the pipeline has no loss function", 2) end
  local G, s, P = self.group, self.stage_id, self.num_stages
  local first, last = s == 0, s == P - 1
  local device = engine and engine.device or "cpu"
  local ins, tgts = {}, {}
  for m = 1, M do ins[m], tgts[m] = batches(m) end

  local busy, tf, tb = 0, 0, 0
  local fifo, head, nf, peak = {}, 1, 0, 0 -- the micro-batches forwarded and not yet backwarded
  local losses = {}
  local function forward(x)
    nf = nf + 1
    local t0 = zorch.clock()
    if not first then x:requires_grad_(true) end
    local y = self:forward(x)
    if last then
      local l = self.loss_fn(y, tgts[nf])
      losses[nf] = l:detach()
      y = l
    end
    local dt = zorch.clock() - t0
    busy, tf = busy + dt, tf + dt
    fifo[nf] = {x = x, y = y}
    peak = math.max(peak, nf - head + 1)
    return y
  end
  local function backward(g)
    local e = fifo[head]
    fifo[head] = nil
    head = head + 1
    local t0 = zorch.clock()
    if last then
      if engine then engine:backward(e.y)
      else (e.y * (1 / M)):backward() end
    elseif engine then engine:backward_from(e.y, g)
    else e.y:backward(g) end
    local xg
    if not first then xg = e.x.grad or like(e.x) end
    local dt = zorch.clock() - t0
    busy, tb = busy + dt, tb + dt
    return xg
  end
  local nin = 0
  local function next_input() nin = nin + 1; return ins[nin] end
  local prev, nxt = s - 1, s + 1
  local function recv_forward()
    if first then return next_input() end
    local x = alloc(G:recv(zorch.zeros(HDR, {dtype = "int64", device = device}), prev), device)
    return G:recv(x, prev)
  end
  local function send_forward(y)
    if last then return end
    y = y:detach():contiguous()
    G:send(header(y), nxt)
    G:send(y, nxt)
  end
  local function recv_backward(y)
    if last then return nil end
    return G:recv(like(y), nxt)
  end
  local function send_backward(xg)
    if not first then G:send(xg:contiguous(), prev) end
  end
  -- both directions at once with one neighbour. The activation's header goes
  -- first (a small message that does not wait for the receiver), then the
  -- activation and the gradient cross in one exchange, so the activation does
  -- not wait for the gradient; the neighbour receives the header as it sends
  -- the gradient, then the activation.
  local function send_forward_recv_backward(y)
    if last then return nil end
    y = y:detach():contiguous()
    local g = like(fifo[head].y) -- (the gradient of the oldest micro-batch in flight)
    G:send(header(y), nxt)
    G:sendrecv(y, nxt, g, nxt)
    return g
  end
  local function send_backward_recv_forward(xg)
    if first then return next_input() end
    local h = G:sendrecv(xg:contiguous(), prev, zorch.zeros(HDR, {dtype = "int64", device = device}), prev)
    return G:recv(alloc(h, device), prev)
  end

  if P > 1 then G:barrier() end -- (the stages start the step together: the bubble is measured from here)
  local t0 = zorch.clock()
  if self.schedule == "gpipe" then
    -- every forward, then every backward
    for _ = 1, M do send_forward(forward(recv_forward())) end
    for _ = 1, M do send_backward(backward(recv_backward(fifo[head].y))) end
  else
    -- 1F1B: P - s - 1 forwards to fill the pipeline, then one forward and one
    -- backward in turn, then the backwards left
    local warm = math.min(P - s - 1, M)
    local rest = M - warm
    for _ = 1, warm do send_forward(forward(recv_forward())) end
    local x = rest > 0 and recv_forward() or nil
    for i = 1, rest do
      local y = forward(x)
      local g = send_forward_recv_backward(y)
      local xg = backward(g)
      if i == rest then send_backward(xg); x = nil
      else x = send_backward_recv_forward(xg) end
    end
    for _ = 1, warm do send_backward(backward(recv_backward(fifo[head].y))) end
  end
  if P > 1 then G:barrier() end
  local wall = zorch.clock() - t0

  -- the tied parameters' gradients: summed over the stages that hold them
  for _, t in ipairs(self.ties) do
    if t.group:size() > 1 then
      local g = t.param.grad
      if not g then g = like(t.param); t.param.grad = g end
      zorch._comm_label("the tied parameters' gradients")
      t.group:allreduce(g)
    end
  end
  -- the mean loss, from the last stage
  local sum = 0
  if last then for m = 1, M do sum = sum + losses[m]:item() end end
  local mean = self:from_last(sum / M)
  if engine and not last then engine:note_loss(mean, M) end
  rawset(self, "last", {step = wall, busy = busy, forward = tf, backward = tb, idle = wall - busy,
                        bubble = wall > 0 and (wall - busy) / wall or 0, micro_batches = M,
                        in_flight = peak})
  return mean
end

-- A number of the last stage, on every stage.
function Pipeline:from_last(x)
  if self.num_stages == 1 then return x end
  local t = zorch.tensor({self:is_last_stage() and x or 0}, {dtype = "float64"})
  self.group:broadcast(t, self.num_stages - 1)
  return t:item()
end

-- pipe:eval_batch(batches [, device]): the mean loss over micro-batches
-- batches(m) -> input, target, m = 1..M (M: micro_batches, or 1), forwards
-- only, without gradients; on every stage.
function Pipeline:eval_batch(batches, M, device)
  if type(batches) ~= "function" then error("Pipeline:eval_batch: argument 1 must be a function(m) -> input, target", 2) end
  M = M or self.micro_batches or 1
  device = device or (rawget(self, "engine") and self.engine.device) or "cpu"
  local G, s, P = self.group, self.stage_id, self.num_stages
  local first, last = s == 0, s == P - 1
  if last and not self.loss_fn then error("Pipeline:eval_batch: the pipeline has no loss function", 2) end
  local sum = 0
  zorch.no_grad(function()
    for m = 1, M do
      local x, y = batches(m)
      if not first then x = G:recv(alloc(G:recv(zorch.zeros(HDR, {dtype = "int64", device = device}), s - 1), device), s - 1) end
      local out = self:forward(x)
      if last then sum = sum + self.loss_fn(out, y):item()
      else
        out = out:contiguous()
        G:send(header(out), s + 1)
        G:send(out, s + 1)
      end
    end
  end)
  return self:from_last(sum / M)
end

-- The whole model's state dict on the first stage (nil on the others), each
-- stage's tensors sent there (collective over the pipeline group). A tied
-- parameter appears under each of its names.
function Pipeline:full_state_dict()
  local sd = self:state_dict()
  if self.num_stages == 1 then return sd end
  local G = self.group
  local function int(v) return zorch.tensor({v}, {dtype = "int64"}) end
  if self.stage_id > 0 then
    local order = getmetatable(sd).order
    G:send(int(#order), 0)
    for _, name in ipairs(order) do
      local t = sd[name]:to("cpu"):contiguous()
      G:send(int(#name), 0)
      G:send(zorch.tensor({name:byte(1, -1)}, {dtype = "uint8"}), 0)
      G:send(header(t), 0)
      G:send(t, 0)
    end
    return nil
  end
  local all = {}
  for k, v in pairs(sd) do all[k] = v end
  for p = 1, self.num_stages - 1 do
    local n = G:recv(zorch.zeros(1, {dtype = "int64"}), p):item()
    for _ = 1, n do
      local len = G:recv(zorch.zeros(1, {dtype = "int64"}), p):item()
      local name = string.char(table.unpack(G:recv(zorch.zeros(len, {dtype = "uint8"}), p):totable()))
      local h = G:recv(zorch.zeros(HDR, {dtype = "int64"}), p)
      all[name] = G:recv(alloc(h, "cpu"), p)
    end
  end
  return all
end

-- With an engine: the gradient norm it clips by is the whole model's (summed
-- over the stages, a tied parameter counted once), and it prints on world rank 0.
function Pipeline:attach(engine)
  if rawget(self, "engine") == engine then return end
  rawset(self, "engine", engine)
  if self.num_stages > 1 then
    local copies = {}
    for _, t in ipairs(self.ties) do if t.copy then copies[#copies + 1] = t.param end end
    engine:add_norm_group(self.group, copies)
  end
  engine:set_printer(zorch.dist.rank() == 0)
end

-- The theoretical bubble of the schedules with P stages and M micro-batches:
-- (P - 1) / (M + P - 1) of a step idle on each stage.
function Pipeline.ideal_bubble(P, M) return (P - 1) / (M + P - 1) end

-- pipe:report() (collective over the pipeline group): the last train_batch of
-- every stage: {stages = {{stage, step, busy, idle, bubble, forward, backward,
-- sent, received, parameters, in_flight (the most micro-batches whose
-- activations the stage held at once), memory (with an engine: its bytes of
-- parameters, gradients, optimizer state and master weights on this rank)}, ...}, bubble (the mean over stages), ideal}.
-- Times in seconds, bytes sent and received over the pipeline group since the
-- last report.
function Pipeline:report()
  local l = self.last
  if not l then error("Pipeline:report: no train_batch has run yet", 2) end
  local sent, recv = self.group:bytes(true)
  local mem = 0 -- the engine's bytes of this stage: parameters, gradients, optimizer state, master weights
  local e = rawget(self, "engine")
  if e and e:prepared_with(self) then
    local m = e:memory_report()
    mem = m.parameters + m.gradients + m.optimizer_state + m.master_weights
  end
  local mine = {l.step, l.busy, l.idle, l.bubble, l.forward, l.backward, sent, recv, count(self), l.in_flight, mem}
  local P, k = self.num_stages, #mine
  local all = zorch.zeros(P * k, {dtype = "float64"})
  self.group:allgather(zorch.tensor(mine, {dtype = "float64"}), all)
  local v = all:totable()
  local r = {stages = {}, bubble = 0, ideal = Pipeline.ideal_bubble(P, l.micro_batches), micro_batches = l.micro_batches}
  for p = 0, P - 1 do
    local o = p * k
    r.stages[p + 1] = {stage = p, step = v[o + 1], busy = v[o + 2], idle = v[o + 3], bubble = v[o + 4],
                       forward = v[o + 5], backward = v[o + 6], sent = math.tointeger(v[o + 7]),
                       received = math.tointeger(v[o + 8]), parameters = math.tointeger(v[o + 9]),
                       in_flight = math.tointeger(v[o + 10]), memory = math.tointeger(v[o + 11])}
    r.bubble = r.bubble + v[o + 4] / P
  end
  return r
end

-- One line of a report: the mean bubble beside the ideal, each stage's.
function Pipeline.report_line(r)
  local parts = {}
  for _, st in ipairs(r.stages) do parts[#parts + 1] = ("%.1f%%"):format(100 * st.bubble) end
  return ("bubble %.1f%% (ideal %.1f%%; stages %s)"):format(100 * r.bubble, 100 * r.ideal, table.concat(parts, " "))
end

Pipeline.__tostring = function(self)
  return ("nn.Pipeline(stage %d of %d, layers %d-%d, %s schedule, %d parameters)"):format(self.stage_id,
    self.num_stages, self.bounds[self.stage_id + 1], self.bounds[self.stage_id + 2] - 1, self.schedule, count(self))
end

return nil
