-- tensorparallel.lua: Megatron's tensor parallelism. Each rank of a tensor
-- group holds a slice of a layer's matrices:
--   ColumnParallelLinear  rows of the weight (output features): the output stays split
--   RowParallelLinear     columns of the weight (input features): the input is split,
--                         the partial products are summed by one all-reduce
--   VocabParallelEmbedding  a range of the vocabulary's rows; ids outside it give
--                         zeros, and one all-reduce sums the ranks' rows
--   vocab_parallel_cross_entropy  the loss of split logits: the max and the sum of
--                         exponentials all-reduced, the logits never gathered
-- Two autograd functions carry the communication (Megatron's f and g):
--   dist.copy_to(group, x)     forward: x;  backward: the gradient all-reduced
--   dist.reduce_from(group, x) forward: x all-reduced;  backward: the gradient
-- A column-parallel layer followed by a row-parallel one costs one all-reduce in
-- forward (after the row-parallel matmul) and one in backward (the input
-- gradient of the column-parallel layer).
--
-- Each module names its split parameters in module.tp_split = {name = split},
-- split = the 1-based dim of the full tensor, or {dim = d, blocks = b}: the dim
-- holds b equal blocks (GPT-2's fused q, k, v: b = 3), each cut in T equal
-- contiguous chunks, rank t keeping chunk t of every block. Parameters not
-- listed are replicated across the tensor group. Checkpoints use this to save
-- each slice at its place in the full tensor.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end

local nn, dist = zorch._require "zorch.nn", zorch._require "zorch.parallel.dist"

local function is_group(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return mt and mt.__name == "zorch.Group" or false
end

-- The checks of a model family's tensor_parallel(model, group) (fn): model is
-- a `class` (what: its name in the message), group a Group, the model not
-- split yet. Errors name the caller's call.
function dist.check_model_split(fn, model, class, what, group)
  if getmetatable(model) ~= class then error(("%s: argument 1 must be a %s"):format(fn, what), 3) end
  if not is_group(group) then error(fn .. ": argument 2 must be a zorch.Group (the tensor group)", 3) end
  if rawget(model, "tensor_group") then error(fn .. ": the model is split already", 3) end
end

-- {dim, blocks} of a tp_split entry (a dim or {dim = d, blocks = b}), or nil and why.
function dist.split_spec(s)
  if math.type(s) == "integer" and s >= 1 then return {dim = s, blocks = 1} end
  if type(s) == "table" and math.type(s.dim) == "integer" and s.dim >= 1 and
     (s.blocks == nil or (math.type(s.blocks) == "integer" and s.blocks >= 1)) then
    return {dim = s.dim, blocks = s.blocks or 1}
  end
  return nil, "a split must be a dim (integer >= 1) or {dim = d, blocks = b}, got " .. zorch._readable(s)
end

local function chunk_of(fn, size, spec, T)
  local per = size // (spec.blocks * T)
  if per * spec.blocks * T ~= size then
    error(("%s: dim %d of size %d does not split into %d block%s x %d ranks"):format(fn, spec.dim, size,
      spec.blocks, spec.blocks == 1 and "" or "s", T), 3)
  end
  return per
end

-- dist.slice(full, split, T, t): rank t's slice (of T) of a full tensor, contiguous.
function dist.slice(full, split, T, t)
  local spec = assert(dist.split_spec(split))
  if spec.dim > full:dim() then
    error(("dist.slice: dim %d of a %d-d tensor"):format(spec.dim, full:dim()), 2)
  end
  local size = full:size(spec.dim)
  local per = chunk_of("dist.slice", size, spec, T)
  local parts = {}
  for b = 0, spec.blocks - 1 do
    parts[#parts + 1] = full:narrow(spec.dim, b * (size // spec.blocks) + t * per + 1, per)
  end
  return (#parts == 1 and parts[1] or zorch.cat(parts, spec.dim)):contiguous()
end

-- dist.assemble(slices, split): the full tensor from the T ranks' slices (a list, rank order).
function dist.assemble(slices, split)
  local spec = assert(dist.split_spec(split))
  local T = #slices
  if spec.blocks == 1 then return zorch.cat(slices, spec.dim):contiguous() end
  local per = slices[1]:size(spec.dim) // spec.blocks
  local parts = {}
  for b = 0, spec.blocks - 1 do
    for t = 1, T do parts[#parts + 1] = slices[t]:narrow(spec.dim, b * per + 1, per) end
  end
  return zorch.cat(parts, spec.dim):contiguous()
end

-- t all-reduced in place (a contiguous tensor of its own); 16-bit tensors are
-- summed in float32 and rounded once (the CPU collectives take float32 and float64).
local function allreduce_(group, t, op)
  local dt = t:dtype()
  if dt == "float32" or dt == "float64" then return group:allreduce(t, op) end
  local f = t:float()
  group:allreduce(f, op)
  return t:copy_(f)
end

-- f: identity forward; the gradient all-reduced over the group in backward.
function dist.copy_to(group, x)
  if group:size() == 1 then return x end
  return zorch._grad_fn(x, {x}, function(g)
    local r = g:contiguous():clone()
    zorch._comm_label("a tensor-parallel input gradient")
    return allreduce_(group, r)
  end)
end

-- g: the sum over the group in forward; the gradient passes through in backward.
function dist.reduce_from(group, x)
  if group:size() == 1 then return x end
  local s = x:detach():contiguous():clone()
  zorch._comm_label("a tensor-parallel partial sum")
  allreduce_(group, s)
  return zorch._grad_fn(s, {x}, function(g) return g end)
end

-- The ranks' copies of x (detached) side by side, flat (T * numel), in x's
-- dtype; 16-bit tensors travel as float32 (the CPU collectives' widths).
local function allgather_(group, x, label)
  local dt = x:dtype()
  local wide = dt == "float32" or dt == "float64"
  local send = wide and x:detach():contiguous() or x:detach():float()
  local recv = zorch.zeros(group:size() * x:numel(), {dtype = send:dtype(), device = x:device()})
  zorch._comm_label(label)
  group:allgather(send:view(-1), recv)
  return wide and recv or recv:to(dt)
end

-- The gathered last dim (each rank's chunk side by side); backward keeps this rank's chunk.
function dist.gather_last(group, x)
  local T = group:size()
  if T == 1 then return x end
  local c = x:size(x:dim())
  local lead = x:numel() // c
  local recv = allgather_(group, x, "a tensor-parallel gather")
  local shape = {}
  for i = 1, x:dim() - 1 do shape[i] = x:size(i) end
  shape[#shape + 1] = T * c
  local full = recv:view(T, lead, c):permute(2, 1, 3):contiguous():view(shape)
  local t = group:rank()
  return zorch._grad_fn(full, {x}, function(g) return g:narrow(g:dim(), t * c + 1, c):contiguous() end)
end

-- dist.gather_split(group, t, split): the full tensor of which t is this rank's
-- slice (split as in tp_split); every rank of the group calls it with its own.
function dist.gather_split(group, t, split)
  if not is_group(group) then error("dist.gather_split: argument 1 must be a zorch.Group", 2) end
  if not zorch.is_tensor(t) then error("dist.gather_split: argument 2 must be a tensor, got " .. zorch._readable(t), 2) end
  local spec, why = dist.split_spec(split)
  if not spec then error("dist.gather_split: " .. why, 2) end
  if group:size() == 1 then return t:detach():contiguous() end
  local n = t:numel()
  local recv = allgather_(group, t, "a tensor-parallel slice gathered")
  local slices = {}
  for r = 1, group:size() do slices[r] = recv:narrow(1, (r - 1) * n + 1, n):view(t.shape) end
  return dist.assemble(slices, spec)
end

-- dist.gather_state_dict(group, sd, splits): sd with each tensor that splits
-- (nn.tp_splits' {name = split}) names replaced by the whole tensor (the
-- others as they are); every rank of the tensor group calls it, the names in
-- one order on all of them.
function dist.gather_state_dict(group, sd, splits)
  if type(sd) ~= "table" or type(splits) ~= "table" then
    error("dist.gather_state_dict: expected (group, state dict, {name = split})", 2)
  end
  local out, names = {}, {}
  for k, v in pairs(sd) do
    out[k] = v
    if splits[k] ~= nil then names[#names + 1] = k end
  end
  table.sort(names)
  for _, k in ipairs(names) do out[k] = dist.gather_split(group, sd[k], splits[k]) end
  return out
end

local function check_opts(fn, opts, allowed)
  opts = zorch._check_options(fn, opts, allowed, 5)
  if not is_group(opts.group) then
    error(("%s: option group must be a zorch.Group (the tensor group), got %s"):format(fn,
      zorch._readable(opts.group)), 4)
  end
  return opts
end

local function keep(t) return nn.Parameter(t:detach():contiguous():clone()) end

-- ---- ColumnParallelLinear -------------------------------------------------------------------

-- nn.ColumnParallelLinear(in, out, {group, bias = true, blocks = 1, gather_output = false}):
-- nn.Linear(in, out) made as in one process (the same draws from the
-- generator), each rank keeping its rows of the weight and bias. The output is
-- this rank's out / T features (all of them with gather_output).
nn.ColumnParallelLinear = nn.Module:extend "nn.ColumnParallelLinear"
local COL_OPTS = {group = true, bias = true, blocks = true, gather_output = true}
function nn.ColumnParallelLinear:init(in_features, out_features, opts)
  opts = check_opts("nn.ColumnParallelLinear", opts, COL_OPTS)
  local full = nn.Linear(in_features, out_features, {bias = opts.bias})
  self:_take(full, opts)
end
-- From a full nn.Linear (its weights as they are).
function nn.ColumnParallelLinear.from(lin, opts)
  opts = check_opts("nn.ColumnParallelLinear.from", opts, COL_OPTS)
  local m = setmetatable({_order = {}, _children = {}, _params = {}, _buffers = {}, training = true},
                         nn.ColumnParallelLinear)
  m:_take(lin, opts)
  return m
end
function nn.ColumnParallelLinear:_take(full, opts)
  local g = opts.group
  local T, t = g:size(), g:rank()
  local blocks = opts.blocks or 1
  if opts.gather_output and blocks > 1 then
    error("nn.ColumnParallelLinear: gather_output needs blocks = 1 (blocks come back interleaved)", 4)
  end
  local split = blocks == 1 and 1 or {dim = 1, blocks = blocks}
  chunk_of("nn.ColumnParallelLinear", full.out_features, {dim = 1, blocks = blocks}, T)
  rawset(self, "group", g)
  rawset(self, "gather_output", opts.gather_output or false)
  self.in_features, self.out_features = full.in_features, full.out_features
  self.weight = keep(dist.slice(full.weight, split, T, t))
  local b = rawget(full, "bias")
  if b then self.bias = keep(dist.slice(b, split, T, t)) end
  rawset(self, "tp_split", {weight = split, bias = b and split or nil})
  -- a fused activation (nn.Linear's) is elementwise: it applies to the split output as is
  rawset(self, "activation", rawget(full, "activation"))
end
function nn.ColumnParallelLinear:forward(x)
  local y = zorch.linear(dist.copy_to(self.group, x), self.weight, rawget(self, "bias"), rawget(self, "activation"))
  if self.gather_output then y = dist.gather_last(self.group, y) end
  return y
end
nn.ColumnParallelLinear.__tostring = function(s)
  return ("nn.ColumnParallelLinear(in_features=%d, out_features=%d, rank %d of %d)"):format(s.in_features,
    s.out_features, s.group:rank(), s.group:size())
end

-- ---- RowParallelLinear ----------------------------------------------------------------------

-- nn.RowParallelLinear(in, out, {group, bias = true}): the input is split (this
-- rank's in / T features, a column-parallel layer's output); each rank keeps
-- its columns of the weight; the partial products are all-reduced, then the
-- bias (replicated) is added.
nn.RowParallelLinear = nn.Module:extend "nn.RowParallelLinear"
local ROW_OPTS = {group = true, bias = true}
function nn.RowParallelLinear:init(in_features, out_features, opts)
  opts = check_opts("nn.RowParallelLinear", opts, ROW_OPTS)
  self:_take(nn.Linear(in_features, out_features, {bias = opts.bias}), opts)
end
function nn.RowParallelLinear.from(lin, opts)
  opts = check_opts("nn.RowParallelLinear.from", opts, ROW_OPTS)
  local m = setmetatable({_order = {}, _children = {}, _params = {}, _buffers = {}, training = true},
                         nn.RowParallelLinear)
  m:_take(lin, opts)
  return m
end
function nn.RowParallelLinear:_take(full, opts)
  local g = opts.group
  chunk_of("nn.RowParallelLinear", full.in_features, {dim = 2, blocks = 1}, g:size())
  rawset(self, "group", g)
  self.in_features, self.out_features = full.in_features, full.out_features
  self.weight = keep(dist.slice(full.weight, 2, g:size(), g:rank()))
  local b = rawget(full, "bias")
  if b then self.bias = keep(b) end
  rawset(self, "tp_split", {weight = 2})
  rawset(self, "activation", rawget(full, "activation")) -- (after the sum and the bias)
end
function nn.RowParallelLinear:forward(x)
  local per = self.in_features // self.group:size()
  if x:size(x:dim()) ~= per then
    error(("nn.RowParallelLinear: input (%s) must end in this rank's %d of %d features"):format(
      table.concat(x.shape, ", "), per, self.in_features), 2)
  end
  local y = dist.reduce_from(self.group, zorch.linear(x, self.weight, nil))
  local b = rawget(self, "bias")
  if b then y = y + b end
  local act = rawget(self, "activation")
  if act == "relu" then y = zorch.relu(y)
  elseif act == "gelu" then y = zorch.gelu(y)
  elseif act == "gelu_tanh" then y = zorch.gelu(y, "tanh") end
  return y
end
nn.RowParallelLinear.__tostring = function(s)
  return ("nn.RowParallelLinear(in_features=%d, out_features=%d, rank %d of %d)"):format(s.in_features,
    s.out_features, s.group:rank(), s.group:size())
end

-- ---- VocabParallelEmbedding -----------------------------------------------------------------

-- nn.VocabParallelEmbedding(num, dim, {group}): nn.Embedding(num, dim) made as
-- in one process, each rank keeping the rows of its vocabulary range
-- [t * num / T, (t + 1) * num / T). Ids (from 1) outside it give zero rows; an
-- all-reduce sums the ranks' rows.
nn.VocabParallelEmbedding = nn.Module:extend "nn.VocabParallelEmbedding"
local EMB_OPTS = {group = true}
function nn.VocabParallelEmbedding:init(num, dim, opts)
  opts = check_opts("nn.VocabParallelEmbedding", opts, EMB_OPTS)
  self:_take(nn.Embedding(num, dim), opts)
end
function nn.VocabParallelEmbedding.from(emb, opts)
  opts = check_opts("nn.VocabParallelEmbedding.from", opts, EMB_OPTS)
  local m = setmetatable({_order = {}, _children = {}, _params = {}, _buffers = {}, training = true},
                         nn.VocabParallelEmbedding)
  m:_take(emb, opts)
  return m
end
function nn.VocabParallelEmbedding:_take(full, opts)
  local g = opts.group
  local num = full.weight:size(1)
  local per = chunk_of("nn.VocabParallelEmbedding", num, {dim = 1, blocks = 1}, g:size())
  rawset(self, "group", g)
  self.num_embeddings, self.embedding_dim = num, full.weight:size(2)
  self.vocab_start, self.vocab_size = g:rank() * per, per -- (ids vocab_start + 1 .. vocab_start + per)
  self.weight = keep(dist.slice(full.weight, 1, g:size(), g:rank()))
  rawset(self, "tp_split", {weight = 1})
end

-- ids local to a vocabulary range: (clamped ids, a float mask of those inside)
local function local_ids(idx, start, per, dtype)
  local l = idx - start
  local inside = zorch.gt(l, 0):to(dtype) * zorch.lt(l, per + 1):to(dtype)
  return zorch.clamp(l, 1, per), inside
end

function nn.VocabParallelEmbedding:forward(idx)
  if self.group:size() == 1 then return zorch.embedding(self.weight, idx) end
  local l, inside = local_ids(idx, self.vocab_start, self.vocab_size, self.weight:dtype())
  local e = zorch.embedding(self.weight, l) * inside:unsqueeze(inside:dim() + 1)
  return dist.reduce_from(self.group, e)
end
nn.VocabParallelEmbedding.__tostring = function(s)
  return ("nn.VocabParallelEmbedding(%d, %d, rows %d-%d on rank %d of %d)"):format(s.num_embeddings,
    s.embedding_dim, s.vocab_start + 1, s.vocab_start + s.vocab_size, s.group:rank(), s.group:size())
end

-- ---- vocab-parallel cross-entropy -----------------------------------------------------------

-- nn.vocab_parallel_cross_entropy(logits, targets, group, {ignore_index}): the
-- mean cross-entropy of logits split by vocabulary (N, V / T: this rank's range
-- [t V/T, (t+1) V/T)) against targets (N,) (ids from 1 over the whole
-- vocabulary; with ignore_index, the mean over the other targets), as
-- zorch.cross_entropy of the gathered logits, without gathering them:
-- loss = log sum_v exp(z_v - m) - (z_target - m), with the max m and the sum
-- all-reduced over the group and the target's logit taken where it lives.
function nn.vocab_parallel_cross_entropy(logits, targets, group, opts)
  if not zorch.is_tensor(logits) or logits:dim() ~= 2 then
    error("nn.vocab_parallel_cross_entropy: logits must be a 2-d tensor (N, vocabulary / T)", 2)
  end
  if not zorch.is_tensor(targets) or targets:dim() ~= 1 or targets:size(1) ~= logits:size(1) then
    error(("nn.vocab_parallel_cross_entropy: targets must be 1-d with %d ids, got %s"):format(logits:size(1),
      zorch.is_tensor(targets) and ("(" .. table.concat(targets.shape, ", ") .. ")") or zorch._readable(targets)), 2)
  end
  if not is_group(group) then error("nn.vocab_parallel_cross_entropy: argument 3 must be a zorch.Group", 2) end
  opts = zorch._check_options("nn.vocab_parallel_cross_entropy", opts, {ignore_index = true}, 3)
  local ignore = opts.ignore_index
  if ignore ~= nil and math.type(ignore) ~= "integer" then
    error("nn.vocab_parallel_cross_entropy: ignore_index must be an integer, got " .. zorch._readable(ignore), 2)
  end
  if group:size() == 1 then return zorch.cross_entropy(logits, targets, {ignore_index = ignore}) end
  local N, per = logits:size(1), logits:size(2)
  local m = zorch.max(logits:detach(), 2, true):contiguous():clone() -- (N, 1): a shift, no gradient
  zorch._comm_label("the vocabulary-parallel max")
  allreduce_(group, m, "max")
  local z = logits - m
  local sum = dist.reduce_from(group, zorch.exp(z):sum(2))                -- (N,)
  local l, inside = local_ids(targets, group:rank() * per, per, logits:dtype())
  local zt = dist.reduce_from(group, zorch.gather(z, 2, l:view(N, 1)):view(N) * inside)
  local loss = zorch.log(sum) - zt
  if ignore == nil then return loss:mean() end
  local keep = zorch.ne(targets, ignore):to(logits:dtype()) -- (an ignored target is in no rank's range: zt is 0)
  return (loss * keep):sum() / keep:sum()
end

-- ---- the model's split parameters -----------------------------------------------------------

-- nn.tp_splits(model) -> {parameter name -> split} for the split parameters
-- (state_dict names, tied ones under each name they have).
function nn.tp_splits(model)
  local out = {}
  local function walk(m, prefix, path)
    path[m] = true
    local s = rawget(m, "tp_split")
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._params[k] and v ~= nil and s and s[k] ~= nil then out[prefix .. k] = s[k]
      elseif m._children[k] and v ~= nil and not path[v] then walk(v, prefix .. k .. ".", path) end
    end
    path[m] = nil
  end
  walk(model, "", {})
  return out
end

-- nn.tp_num_parameters(model, T): the whole model's parameter count, from a
-- rank's slices (a split parameter counts T times, a replicated one once).
function nn.tp_num_parameters(model, T)
  local split, n = nn.tp_splits(model), 0
  for name, p in model:named_parameters() do n = n + (split[name] and p:numel() * T or p:numel()) end
  return n
end

return nil
