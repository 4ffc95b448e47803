-- zorch.data: datasets, a batching loader, file readers and a progress display.
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

local DataLoader = {}
DataLoader.__index = DataLoader
DataLoader.__len = function(l) return l:num_batches() end

-- data.DataLoader(dataset, {batch_size = 1, shuffle = false, drop_last = false, seed = 0,
-- device = nil}): with a device ("cuda"), every batch's tensors are moved there
-- (Engine:prepare sets the engine's device).
function data.DataLoader(ds, opts)
  if type(ds) ~= "table" or not ds.batch then error("DataLoader: expected a dataset (data.TensorDataset)", 2) end
  opts = opts or {}
  local allowed = {batch_size = true, shuffle = true, drop_last = true, seed = true, device = true}
  for k in pairs(opts) do
    if not allowed[k] then
      error(("DataLoader: unknown option '%s' (allowed: batch_size, device, drop_last, seed, shuffle)"):format(tostring(k)), 2)
    end
  end
  local bs = opts.batch_size or 1
  if math.type(bs) ~= "integer" or bs < 1 then error("DataLoader: batch_size must be a positive integer", 2) end
  if opts.device ~= nil and type(opts.device) ~= "string" then error("DataLoader: device must be a string (\"cuda\")", 2) end
  return setmetatable({dataset = ds, batch_size = bs, shuffle = opts.shuffle or false,
                       drop_last = opts.drop_last or false, seed = opts.seed or 0, epoch = 0,
                       rank = 0, world_size = 1, device = opts.device}, DataLoader)
end

local function to_device(device, ...)
  if not device then return ... end
  local out = table.pack(...)
  for i = 1, out.n do
    if zorch.is_tensor(out[i]) then out[i] = out[i]:to(device) end
  end
  return table.unpack(out, 1, out.n)
end

-- Batches of an epoch; with world_size N (set by the engine) every global batch of
-- N * batch_size samples is split so rank r takes the r-th contiguous slice. A
-- short last batch is split as evenly as it goes, and dropped when it has fewer
-- samples than ranks: every rank must run the same number of steps.
function DataLoader:num_batches()
  local global = self.batch_size * self.world_size
  local n = #self.dataset
  if self.drop_last then return n // global end
  local rest = n % global
  if rest > 0 and rest < self.world_size then return n // global end
  return (n + global - 1) // global
end

function DataLoader:order()
  local n = #self.dataset
  local idx = {}
  for i = 1, n do idx[i] = i end
  if self.shuffle then
    local r = rng(self.seed * 1000003 + self.epoch)
    for i = n, 2, -1 do
      local j = r(i)
      idx[i], idx[j] = idx[j], idx[i]
    end
  end
  return idx
end

-- Where the loader stands: the epoch under way and the batches it has given.
function DataLoader:state()
  return {epoch = self.epoch, batch = self.batch or 0, global_batch = self.batch_size * self.world_size,
          seed = self.seed, shuffle = self.shuffle}
end

-- The next iter() continues that epoch after the batches already given.
function DataLoader:load_state(s)
  if s.global_batch ~= self.batch_size * self.world_size then
    error(("DataLoader:load_state: the checkpoint's global batch is %d, this run's is %d"):format(
      s.global_batch, self.batch_size * self.world_size), 2)
  end
  self.epoch, self.skip = s.epoch - 1, s.batch
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
    return to_device(self.device, self.dataset:batch(zorch.tensor(rows, {dtype = "int64"})))
  end
end

function data.read_csv(path, opts) return zorch._read_csv(path, opts) end
function data.load_npy(path) return zorch._load_npy(path) end

-- zorch.progress(n, opts): a progress display for n steps. bar:update(k, {loss=})
-- after each step; on a terminal it redraws one line (step, rate, ETA, loss),
-- otherwise it prints a plain line every `every` steps (default n / 10).
local Progress = {}
Progress.__index = Progress
function zorch.progress(total, opts)
  opts = opts or {}
  local out = opts.out or (io and io.stderr)
  local tty = opts.tty
  if tty == nil then tty = os and os.getenv and os.getenv("TERM") ~= nil and os.getenv("TERM") ~= "dumb" and
      (os.execute and select(3, os.execute("test -t 2")) == 0) end
  return setmetatable({total = total, n = 0, out = out, tty = tty, t0 = os and os.clock() or 0,
                       every = opts.every or math.max(1, total // 10), label = opts.label or ""}, Progress)
end
function Progress:update(k, info)
  self.n = self.n + (k or 1)
  if not self.out then return end
  local dt = (os and os.clock() or 0) - self.t0
  local rate = dt > 0 and self.n / dt or 0
  local eta = rate > 0 and (self.total - self.n) / rate or 0
  local loss = info and info.loss and (" loss %.6f"):format(info.loss) or ""
  local line = ("%s%d/%d  %.1f it/s  ETA %.1fs%s"):format(self.label, self.n, self.total, rate, eta, loss)
  if self.tty then
    self.out:write("\r" .. line .. (self.n >= self.total and "\n" or ""))
  elseif self.n % self.every == 0 or self.n >= self.total then
    self.out:write(line .. "\n")
  end
end

return data
