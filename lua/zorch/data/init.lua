-- zorch.data: datasets, a batching loader and file readers.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local data = {}

-- A tiny deterministic generator (64-bit LCG with xorshift output) for shuffles:
-- the same seed and epoch give the same order on every machine.
local function rng(seed)
  local s = (seed * 6364136223846793005 + 1442695040888963407) | 1
  return function(n) -- integer in [1, n]
    s = s * 6364136223846793005 + 1442695040888963407
    local x = s ~ (s >> 29)
    return (x >> 1) % n + 1
  end
end

local TensorDataset = {}
TensorDataset.__index = TensorDataset
TensorDataset.__len = function(d) return d.n end

-- data.TensorDataset(X, Y, ...): the i-th sample is the i-th row of each tensor.
function data.TensorDataset(...)
  local ts = {...}
  if #ts == 0 then error("TensorDataset: expected at least one tensor", 2) end
  local n
  for i, t in ipairs(ts) do
    if not zorch.is_tensor(t) then error(("TensorDataset: argument %d is a %s, not a tensor"):format(i, type(t)), 2) end
    if t:dim() == 0 then error(("TensorDataset: tensor %d has no first dimension"):format(i), 2) end
    local m = t:size(1)
    if n and m ~= n then
      error(("TensorDataset: tensor %d has %d rows but tensor 1 has %d"):format(i, m, n), 2)
    end
    n = m
  end
  return setmetatable({tensors = ts, n = n}, TensorDataset)
end

function TensorDataset:get(i) -- one sample (1-based)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = t[i] end
  return table.unpack(out)
end

-- Rows `idx` (an int64 tensor of 1-based indices) of every tensor.
function TensorDataset:batch(idx)
  local out = {}
  for k, t in ipairs(self.tensors) do out[k] = zorch.index_select(t, 1, idx:to(t:device())) end
  return table.unpack(out)
end

-- Map-style datasets, as in PyTorch: any table with a length (#ds through __len
-- or a plain sequence, or a len() or size() method) and samples (ds:get(i), or
-- ds[i]) for i = 1..n. A sample is a tensor, a number, a boolean, a string, or a
-- tuple of them (several values from get, or a sequence), or a table of named
-- fields. A dataset with a batch(idx) method (TensorDataset) gives whole batches.
local function dataset_len(ds)
  if type(ds.len) == "function" then return ds:len() end
  if type(ds.size) == "function" then return ds:size() end
  return #ds
end

local function has_len(ds)
  local mt = getmetatable(ds)
  return (mt and mt.__len) or type(ds.len) == "function" or type(ds.size) == "function" or rawlen(ds) > 0
end

local function sample(ds, i)
  if type(ds.get) == "function" then return table.pack(ds:get(i)) end
  return table.pack(ds[i])
end

-- One batch from a list of samples (each a value): tensors stacked along a new
-- first dim, numbers and booleans into a tensor, strings kept as a list, and
-- tuples and tables of fields batched field by field. `what` names it in errors.
local function collate(list, what, depth)
  depth = depth or 1
  if depth > 32 then
    error(("DataLoader: a sample nests tables deeper than 32 levels (a cycle?), at %s%s"):format(what:sub(1, 60),
          #what > 60 and "..." or ""), 0)
  end
  local first = list[1]
  for k = 2, #list do
    local t, t1 = zorch.is_tensor(list[k]) and "tensor" or type(list[k]), zorch.is_tensor(first) and "tensor" or type(first)
    if t ~= t1 then error(("DataLoader: %s is a %s in one sample and a %s in another"):format(what, t1, t), 0) end
  end
  if zorch.is_tensor(first) then
    local ok, res = pcall(zorch.stack, list, 1)
    if not ok then error(("DataLoader: cannot stack %s of the samples: %s"):format(what, tostring(res)), 0) end
    return res
  elseif type(first) == "number" or type(first) == "boolean" then
    return zorch.tensor(list)
  elseif type(first) == "string" then
    return list
  elseif type(first) == "table" then
    local out, keys = {}, {}
    for k in pairs(first) do keys[#keys + 1] = k end
    for _, k in ipairs(keys) do
      local col = {}
      for j, s in ipairs(list) do
        if s[k] == nil then error(("DataLoader: %s.%s is missing from a sample"):format(what, tostring(k)), 0) end
        col[j] = s[k]
      end
      out[k] = collate(col, what .. "." .. tostring(k), depth + 1)
    end
    return out
  end
  error(("DataLoader: %s of a sample is a %s (samples hold tensors, numbers, booleans, strings and tables%s)"):format(
    what, type(first), type(first) == "userdata" and "; a closed tensor is not a tensor" or ""), 0)
end

-- The batch of dataset rows `rows` (1-based), as values: a tuple sample gives one
-- value per field.
local function collate_rows(ds, rows)
  local samples = {}
  for j, i in ipairs(rows) do samples[j] = sample(ds, i) end
  local n = samples[1].n
  local tuple = n > 1 or (type(samples[1][1]) == "table" and not zorch.is_tensor(samples[1][1]) and
                          rawlen(samples[1][1]) > 0)
  if not tuple then
    local col = {}
    for j, s in ipairs(samples) do
      if s[1] == nil then error(("DataLoader: the dataset has no sample %d"):format(rows[j]), 0) end
      col[j] = s[1]
    end
    return collate(col, "the sample")
  end
  local out = {}
  for f = 1, n > 1 and n or rawlen(samples[1][1]) do
    local col = {}
    for j, s in ipairs(samples) do
      local v = n > 1 and s[f] or (type(s[1]) == "table" and s[1][f] or nil)
      if v == nil then error(("DataLoader: field %d of sample %d is missing"):format(f, rows[j]), 0) end
      col[j] = v
    end
    out[f] = collate(col, ("field %d"):format(f))
  end
  return table.unpack(out, 1, n > 1 and n or rawlen(samples[1][1]))
end

local DataLoader = {}
DataLoader.__index = DataLoader
DataLoader.__len = function(l) return l:num_batches() end

-- data.DataLoader(dataset, {batch_size = 1, shuffle = false, drop_last = false, seed = 0,
-- device = nil}): with a device ("cuda"), every batch's tensors are moved there
-- (Engine:prepare sets the engine's device).
function data.DataLoader(ds, opts)
  if type(ds) ~= "table" or not (type(ds.batch) == "function" or has_len(ds)) then
    error("DataLoader: expected a dataset: data.TensorDataset, or a table with a length (__len, or a len or size " ..
          "method) and samples (a get(i) method, or ds[i]), got a " .. (zorch.is_tensor(ds) and "tensor" or type(ds)), 2)
  end
  if type(ds.batch) ~= "function" then
    local n = dataset_len(ds)
    if math.type(n) ~= "integer" or n < 0 then
      error("DataLoader: the dataset's length must be a non-negative integer, got " .. tostring(n), 2)
    end
    -- (each epoch's sample order is a Lua table of n entries)
    if n > 1 << 31 then
      error(("DataLoader: the dataset's length %d is more than 2^31 samples, whose order would not fit in memory"):format(n), 2)
    end
    if n > 0 and type(ds.get) ~= "function" and ds[1] == nil then
      error("DataLoader: the dataset has no get(i) method and ds[1] is nil", 2)
    end
  end
  opts = opts or {}
  local allowed = {batch_size = true, shuffle = true, drop_last = true, seed = true, device = true, augment = true,
                   normalize = true}
  for k in pairs(opts) do
    if not allowed[k] then
      error(("DataLoader: unknown option '%s' (allowed: augment, batch_size, device, drop_last, normalize, seed, " ..
             "shuffle)"):format(tostring(k)), 2)
    end
  end
  if opts.augment ~= nil then data.check_augment("DataLoader", opts.augment, 3) end
  if opts.normalize ~= nil then data.check_normalize("DataLoader", opts.normalize, 3) end
  local bs = opts.batch_size or 1
  -- (at most 2^40: batch times ranks and samples stay far inside an integer)
  if math.type(bs) ~= "integer" or bs < 1 or bs > 1 << 40 then
    error("DataLoader: batch_size must be an integer from 1 to 2^40, got " .. tostring(bs), 2)
  end
  if opts.device ~= nil and type(opts.device) ~= "string" then error("DataLoader: device must be a string (\"cuda\")", 2) end
  local seed = opts.seed or 0
  if not math.tointeger(seed) then error("DataLoader: seed must be an integer, got " .. tostring(seed), 2) end
  for _, k in ipairs{"shuffle", "drop_last"} do
    if opts[k] ~= nil and type(opts[k]) ~= "boolean" then
      error(("DataLoader: %s must be a boolean, got %s"):format(k, tostring(opts[k])), 2)
    end
  end
  return setmetatable({dataset = ds, batch_size = bs, shuffle = opts.shuffle or false,
                       drop_last = opts.drop_last or false, seed = math.tointeger(seed), epoch = 0,
                       rank = 0, world_size = 1, device = opts.device, augment = opts.augment,
                       normalize = opts.normalize}, DataLoader)
end

DataLoader.__tostring = function(l)
  return ("DataLoader(%d samples, batch_size=%d, shuffle=%s, drop_last=%s, %d batches%s%s)"):format(
    dataset_len(l.dataset), l.batch_size, tostring(l.shuffle), tostring(l.drop_last), l:num_batches(),
    l.world_size > 1 and (", rank %d of %d"):format(l.rank, l.world_size) or "",
    l.device and (", device=" .. l.device) or "")
end

local function to_device(device, ...)
  if not device then return ... end
  local out = table.pack(...)
  for i = 1, out.n do
    if zorch.is_tensor(out[i]) then out[i] = out[i]:to(device)
    elseif type(out[i]) == "table" then -- a batch of named fields
      local t = {}
      for k, v in pairs(out[i]) do t[k] = zorch.is_tensor(v) and v:to(device) or v end
      out[i] = t
    end
  end
  return table.unpack(out, 1, out.n)
end

-- Batches of an epoch; with world_size N (set by the engine) every global batch of
-- N * batch_size samples is split so rank r takes the r-th contiguous slice. A
-- short last batch is split as evenly as it goes, and dropped when it has fewer
-- samples than ranks: every rank must run the same number of steps.
function DataLoader:num_batches()
  local global = self.batch_size * self.world_size
  local n = dataset_len(self.dataset)
  if self.drop_last then return n // global end
  local rest = n % global
  if rest > 0 and rest < self.world_size then return n // global end
  return (n + global - 1) // global
end

-- The samples in the data set.
function DataLoader:num_samples() return dataset_len(self.dataset) end

-- data.permutation(n, seed): 1..n in an order drawn from seed (Fisher-Yates from
-- the end over the generator above): the same on every machine and rank.
function data.permutation(n, seed)
  if math.type(n) ~= "integer" or n < 0 then error("data.permutation: n must be an integer >= 0, got " .. tostring(n), 2) end
  if not math.tointeger(seed) then error("data.permutation: seed must be an integer, got " .. tostring(seed), 2) end
  local idx = {}
  for i = 1, n do idx[i] = i end
  local r = rng(math.tointeger(seed))
  for i = n, 2, -1 do
    local j = r(i)
    idx[i], idx[j] = idx[j], idx[i]
  end
  return idx
end

-- An epoch's order: shuffled by seed * 1000003 + epoch.
function DataLoader:order()
  local n = dataset_len(self.dataset)
  if self.shuffle then return data.permutation(n, self.seed * 1000003 + self.epoch) end
  local idx = {}
  for i = 1, n do idx[i] = i end
  return idx
end

-- Where the loader stands: the epoch under way and the batches it has given.
-- step_batch: samples per optimizer step (global batch x the engine's accumulation).
function DataLoader:state()
  local global = self.batch_size * self.world_size
  return {epoch = self.epoch, batch = self.batch or 0, global_batch = global,
          step_batch = global * (self.accumulation or 1), seed = self.seed, shuffle = self.shuffle}
end

-- The next iter() continues that epoch after the batches already given. The
-- samples per optimizer step must be the checkpoint's; on another number of
-- ranks (more accumulation per rank) the position carries over by samples.
function DataLoader:load_state(s)
  local global = self.batch_size * self.world_size
  local step_batch = global * (self.accumulation or 1)
  if (s.step_batch or s.global_batch) ~= (s.step_batch and step_batch or global) then
    error(("DataLoader:load_state: the checkpoint's global batch is %d samples per step, this run's is %d"):format(
      s.step_batch or s.global_batch, s.step_batch and step_batch or global), 2)
  end
  local given = s.batch * s.global_batch
  if given % global ~= 0 then
    error(("DataLoader:load_state: the checkpoint stands %d samples into epoch %d, not a multiple of this run's " ..
           "global batch %d"):format(given, s.epoch, global), 2)
  end
  self.epoch, self.skip = s.epoch - 1, given // global
end

function DataLoader:iter()
  self.epoch = self.epoch + 1
  local order, b, nb = self:order(), self.skip or 0, self:num_batches()
  self.skip = nil
  self.batch = b
  local global = self.batch_size * self.world_size
  local n = #order
  return function()
    b = b + 1
    if b > nb then return nil end
    self.batch = b
    local gfirst = (b - 1) * global + 1
    local size = math.min(global, n - gfirst + 1)
    local first, last
    if size == global then
      first = gfirst + self.rank * self.batch_size
      last = first + self.batch_size - 1
    else -- the short last batch, split evenly
      local per, extra = size // self.world_size, size % self.world_size
      first = gfirst + self.rank * per + math.min(self.rank, extra)
      last = first + per - 1 + (self.rank < extra and 1 or 0)
    end
    if last < first then return nil end
    local rows = {}
    for i = first, last do rows[#rows + 1] = order[i] end
    if type(self.dataset.batch) ~= "function" then
      return self:transform(to_device(self.device, collate_rows(self.dataset, rows)))
    end
    return self:transform(to_device(self.device, self.dataset:batch(zorch.tensor(rows, {dtype = "int64"}))))
  end
end

-- `for x, y in loader do` as `for x, y in loader:iter() do`: the for loop calls
-- the loader with a nil control value first (a new epoch), then with the last batch.
DataLoader.__call = function(self, _, control)
  if control == nil then rawset(self, "_loop", self:iter()) end
  local loop = rawget(self, "_loop")
  if not loop then return nil end
  return loop()
end

-- The loader's augmentation, then normalisation, of a batch's first tensor (the images).
function DataLoader:transform(x, ...)
  if zorch.is_tensor(x) then
    if self.augment then x = data.augment(x, self.augment) end
    if self.normalize then x = data.normalize(x, self.normalize.mean, self.normalize.std) end
  end
  return x, ...
end

-- ---- image batches: augmentation and normalisation ----------------------------------------

function data.check_augment(fn, a, level)
  if type(a) ~= "table" then error(fn .. ": augment must be a table {crop_padding = n, hflip = true}", level) end
  for k in pairs(a) do
    if k ~= "crop_padding" and k ~= "hflip" then
      error(("%s: unknown augment option '%s' (allowed: crop_padding, hflip)"):format(fn, tostring(k)), level)
    end
  end
  local p = a.crop_padding
  if p ~= nil and (math.type(p) ~= "integer" or p < 0) then
    error(("%s: crop_padding must be an integer >= 0, got %s"):format(fn, tostring(p)), level)
  end
end

function data.check_normalize(fn, nrm, level)
  if type(nrm) ~= "table" or nrm.mean == nil or nrm.std == nil then
    error(fn .. ": normalize must be a table {mean = m, std = s} (numbers, or lists of one per channel)", level)
  end
end

-- Images (N, H, W) or (N, C, H, W): each image shifted by a random crop of
-- the image padded with `crop_padding` zeros on every side, then flipped left
-- to right with probability 1/2 when `hflip`. The random numbers come from
-- zorch's generator (zorch.manual_seed), so a seeded run repeats.
function data.augment(x, opts)
  if not zorch.is_tensor(x) or x:dim() < 3 then
    error("data.augment: expected a batch of images (N, H, W) or (N, C, H, W)", 2)
  end
  data.check_augment("data.augment", opts or {}, 3)
  local p, nd, n = opts.crop_padding or 0, x:dim(), x.shape[1]
  local H, W = x.shape[nd - 1], x.shape[nd]
  if p > 0 and n > 0 then
    local dy = zorch.randint(-p, p, {n}):totable()
    local dx = zorch.randint(-p, p, {n}):totable()
    local out = zorch.zeros_like(x)
    for i = 1, n do
      -- out[i] at (r, c) = x[i] at (r + dy, c + dx), zero where that falls outside
      local h, w = H - math.abs(dy[i]), W - math.abs(dx[i])
      if h > 0 and w > 0 then
        local src = x:select(1, i):narrow(nd - 2, math.max(0, dy[i]) + 1, h):narrow(nd - 1, math.max(0, dx[i]) + 1, w)
        local dst = out:select(1, i):narrow(nd - 2, math.max(0, -dy[i]) + 1, h):narrow(nd - 1, math.max(0, -dx[i]) + 1, w)
        dst:copy_(src)
      end
    end
    x = out
  end
  if opts.hflip and n > 0 then
    local rev = zorch.arange(W, 0, -1, {dtype = "int64", device = x:device()})
    local flipped = zorch.index_select(x, nd, rev)
    local shape = {n}
    for _ = 2, nd do shape[#shape + 1] = 1 end
    local coin = zorch.randint(0, 1, {n}):to(x:device()):eq(1):reshape(shape)
    x = zorch.where(coin, flipped, x)
  end
  return x
end

-- (x - mean) / std in float32 (x's dtype when it is a float); mean and std are
-- numbers or lists of one per channel (dim 2 of (N, C, H, W)).
function data.normalize(x, mean, std)
  if not zorch.is_tensor(x) then error("data.normalize: expected a tensor", 2) end
  if not x:dtype():match("float") then x = x:float() end
  local function as_tensor(v, what)
    if type(v) == "number" then return v end
    if type(v) ~= "table" or #v == 0 or x:dim() < 2 or #v ~= x.shape[2] then
      error(("data.normalize: %s must be a number or a list of %s (one per channel)"):format(what,
        x:dim() >= 2 and tostring(x.shape[2]) or "?"), 3)
    end
    local shape = {1, #v}
    for _ = 3, x:dim() do shape[#shape + 1] = 1 end
    return zorch.tensor(v, {dtype = x:dtype(), device = x:device()}):reshape(shape)
  end
  return (x - as_tensor(mean, "mean")) / as_tensor(std, "std")
end

function data.read_csv(path, opts) return zorch._read_csv(path, opts) end
function data.load_npy(path) return zorch._load_npy(path) end
-- Token ids of a file, as int64 (n,). A file with llm.c's 1,024-byte header
-- (magic 20240520; `zorch tokenize` writes them) is read by it; a file without
-- one by {dtype = "uint8"} (the default: each byte a token), "uint16" or
-- "uint32" (little-endian).
local token_widths = {uint8 = 1, uint16 = 2, uint32 = 4}
function data.load_tokens(path, opts)
  local dt = opts and opts.dtype or "uint8"
  if not token_widths[dt] then
    error(("data.load_tokens: dtype must be \"uint8\", \"uint16\" or \"uint32\", got %s"):format(tostring(dt)), 2)
  end
  return zorch._load_tokens(path, token_widths[dt])
end
-- data.token_batch(tokens, m, {batch, seq, rank = 0, world = 1, ordered = true,
-- device}): micro-batch m (from 0) of a language model's stream, this rank's
-- inputs and targets (batch, seq) as int64 indices from 1 (token id t is row
-- t + 1). ordered (llm.c's loader): each micro-batch reads the next
-- batch * seq * world tokens, this rank its own rows, the targets shifted by
-- one, starting again at the end; otherwise batch windows at random places,
-- every rank drawing all ranks' windows (the generators stay in step) and
-- keeping its own.
function data.token_batch(t, m, opts)
  local fn = "data.token_batch"
  if not zorch.is_tensor(t) or t:dim() ~= 1 then error(fn .. ": tokens must be a 1-d tensor", 2) end
  opts = zorch._check_options(fn, opts, {"batch", "seq", "rank", "world", "ordered", "device"}, 3)
  local B, T = opts.batch, opts.seq
  local rank, world = opts.rank or 0, opts.world or 1
  for k, v in pairs({batch = B, seq = T, world = world}) do
    if math.type(v) ~= "integer" or v < 1 then error(("%s: %s must be an integer >= 1, got %s"):format(fn, k, tostring(v)), 2) end
  end
  if math.type(rank) ~= "integer" or rank < 0 or rank >= world then
    error(("%s: rank must be an integer in 0..%d, got %s"):format(fn, world - 1, tostring(rank)), 2)
  end
  local n = t:numel()
  if n < T + 2 or (opts.ordered ~= false and n - 1 < B * T * world) then
    error(("%s: %d tokens are too few for batches of %d x %d on %d ranks"):format(fn, n, B, T, world), 2)
  end
  local x, y
  if opts.ordered ~= false then
    local chunk = B * T * world
    local start = (m % ((n - 1) // chunk)) * chunk + rank * B * T
    x = t:narrow(1, start + 1, B * T):view(B, T)
    y = t:narrow(1, start + 2, B * T):view(B, T)
  else
    local starts = zorch.randint(0, n - T - 1, {B * world, 1}):narrow(1, rank * B + 1, B) + zorch.arange(0, T):view(1, T)
    x = t:index_select(1, (starts + 1):view(-1)):view(B, T)
    y = t:index_select(1, (starts + 2):view(-1)):view(B, T)
  end
  x, y = x:long(), y:long()
  local dev = opts.device
  if dev and dev ~= "cpu" then x, y = x:to(dev), y:to(dev) end
  return x + 1, y + 1
end
-- An IDX file (MNIST's format), gzip-compressed or not: a tensor of the stored
-- shape; uint8 data stays uint8, int8/int16 widen to int32.
function data.load_idx(path) return zorch._load_idx(path) end

zorch.data = data
for _, part in ipairs(zorch._parts "zorch.data") do zorch._require(part) end -- the folder's files

return data
