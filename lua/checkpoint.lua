-- Checkpoints keyed by parameter name and element range, not by rank layout:
-- any world size and ZeRO stage resumes from any other.
--   DIR/TAG/rank<r>.safetensors  this rank's slice: "param/<name>/<first>" and
--                                "state.<field>/<name>/<first>" 1-D pieces (fp32)
--   DIR/TAG/manifest.json        names, shapes, offsets, counters, loader, RNG,
--                                and each file's size and FNV-1a hash
--   DIR/latest                   the tag, written last and atomically
-- A checkpoint is written under DIR/.TAG.partial and renamed when complete, so a
-- crash leaves the previous one loadable.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local Engine = zorch._Engine

local function barrier() zorch._allreduce(zorch.zeros(1)) end

-- (name, offset, numel, shape) of every parameter, in the engine's flat order.
local function layout(engine)
  local out, off = {}, 0
  for name, p in engine.model:named_parameters() do
    out[#out + 1] = {name = name, offset = off, numel = p:numel(), shape = p.shape}
    off = off + p:numel()
  end
  return out, off
end

-- The flat range [lo, hi) the optimizer target of this rank covers.
local function target_range(engine, numel)
  local m = engine.zero:memory()
  if engine.cfg.zero_stage == 0 then return 0, numel end
  local lo = engine.rank * m.shard
  return lo, math.min(lo + m.shard, numel)
end

function Engine:save_checkpoint(dir, opts)
  if not self.inner then error("save_checkpoint: call prepare with an optimizer first", 2) end
  opts = opts or {}
  local state = self.inner.state[1] or {}
  local step = state.step or 0
  local tag = opts.tag or ("step" .. step)
  if not tostring(tag):match("^[%w_%-%.]+$") then error("save_checkpoint: tag must be letters, digits, _ - .", 2) end
  local params, numel = layout(self)
  local partial, final = dir .. "/." .. tag .. ".partial", dir .. "/" .. tag
  if self.rank == 0 then
    zorch._mkdir(dir)
    zorch._remove_dir(partial) -- what an interrupted save left
    zorch._mkdir(partial)
  end
  barrier()
  -- this rank's pieces: the part of [lo, hi) its shard owns (stage 0: its share)
  local m = self.zero:memory()
  local own_lo = self.rank * m.shard
  local own_hi = math.min(own_lo + m.shard, numel)
  local base = target_range(self, numel)
  local target = self.zero:target()
  local pieces = {}
  for _, p in ipairs(params) do
    local lo, hi = math.max(own_lo, p.offset), math.min(own_hi, p.offset + p.numel)
    if hi > lo then
      local key = ("%s/%d"):format(p.name, lo - p.offset)
      pieces["param/" .. key] = target:narrow(1, lo - base + 1, hi - lo):to("float32")
      for field, v in pairs(state) do
        if zorch.is_tensor(v) then pieces["state." .. field .. "/" .. key] = v:narrow(1, lo - base + 1, hi - lo):clone() end
      end
    end
  end
  zorch.save(pieces, ("%s/rank%d.safetensors"):format(partial, self.rank))
  barrier()
  if self.rank == 0 then
    local files = {}
    for r = 0, self.world_size - 1 do
      local f = ("rank%d.safetensors"):format(r)
      local h = assert(zorch._file_hash(partial .. "/" .. f))
      local fh = assert(io.open(partial .. "/" .. f, "rb"))
      local size = fh:seek("end")
      fh:close()
      files[#files + 1] = {file = f, bytes = size, fnv1a64 = h}
    end
    local scalars = {}
    for field, v in pairs(state) do if not zorch.is_tensor(v) then scalars[field] = v end end
    local manifest = {
      format = "zorch-checkpoint", version = 1, tag = tag, world_size = self.world_size,
      zero_stage = self.cfg.zero_stage, precision = self.cfg.precision, numel = numel,
      params = params, files = files, step = step, shard = m.shard, micro = self.micro, lr = self.user_opt.lr,
      optimizer_state = scalars, loader = self.loader and self.loader:state() or false,
      rng_offset = zorch._rng_offset(), extra = opts.extra or false,
      scheduler_step = self.lr_scheduler and self.lr_scheduler.last_step or false,
    }
    zorch._write_atomic(partial .. "/manifest.json", zorch._json_encode(manifest))
    -- an older checkpoint of the same tag steps aside until the new one is in place
    local old = dir .. "/." .. tag .. ".old"
    zorch._remove_dir(old)
    os.rename(final, old)
    local ok, err = os.rename(partial, final)
    if not ok then
      os.rename(old, final)
      error("save_checkpoint: " .. tostring(err), 2)
    end
    zorch._write_atomic(dir .. "/latest", tag)
    zorch._remove_dir(old)
  end
  barrier()
  return tag
end

local function read_file(path)
  local f, err = io.open(path, "rb")
  if not f then error("load_checkpoint: " .. err, 3) end
  local s = f:read("a")
  f:close()
  return s
end

-- Resolves DIR/latest (or DIR itself) and returns the checkpoint folder and its
-- manifest, with every file's hash checked.
local function open_checkpoint(dir, who)
  local where = dir
  local lf = io.open(dir .. "/latest", "rb")
  if lf then
    where = dir .. "/" .. lf:read("a"):gsub("%s+$", "")
    lf:close()
  end
  local ok, manifest = pcall(zorch._json_decode, read_file(where .. "/manifest.json"))
  if not ok or type(manifest) ~= "table" or manifest.format ~= "zorch-checkpoint" then
    error(("%s: %s/manifest.json is not a zorch checkpoint manifest"):format(who, where), 3)
  end
  for _, f in ipairs(manifest.files or {}) do
    local path = where .. "/" .. f.file
    local h, err = zorch._file_hash(path)
    if not h then error(who .. ": " .. err, 3) end
    if h ~= f.fnv1a64 then
      error(("%s: %s is corrupt (hash %s, manifest says %s)"):format(who, path, h, f.fnv1a64), 3)
    end
  end
  return where, manifest
end

-- Resumes from DIR/latest (or DIR itself when it holds a manifest), resharding
-- to this run's world size and stage. Returns the manifest.
function Engine:load_checkpoint(dir)
  if not self.inner then error("load_checkpoint: call prepare with an optimizer first", 2) end
  local where, manifest = open_checkpoint(dir, "load_checkpoint")
  -- the model must be the one saved
  local params, numel = layout(self)
  local saved = {}
  for _, p in ipairs(manifest.params or {}) do saved[p.name] = p end
  for _, p in ipairs(params) do
    local s = saved[p.name]
    if not s then error(("load_checkpoint: %s has no parameter '%s'"):format(where, p.name), 2) end
    if table.concat(s.shape, ",") ~= table.concat(p.shape, ",") then
      error(("load_checkpoint: '%s' has shape (%s) in %s but (%s) in the model"):format(
        p.name, table.concat(s.shape, ", "), where, table.concat(p.shape, ", ")), 2)
    end
  end
  if #manifest.params ~= #params then error("load_checkpoint: the checkpoint has other parameters than the model", 2) end
  -- every file (its hash was checked by open_checkpoint)
  local pieces = {}
  for _, f in ipairs(manifest.files or {}) do
    for k, t in pairs(zorch.load(where .. "/" .. f.file)) do pieces[k] = t end
  end
  -- copy the pieces this rank's target covers
  local lo, hi = target_range(self, numel)
  local target = self.zero:target()
  local state = {}
  for field, v in pairs(manifest.optimizer_state or {}) do state[field] = v end
  local offsets = {}
  for _, p in ipairs(params) do offsets[p.name] = p.offset end
  local covered = 0
  for key, t in pairs(pieces) do
    local kind, name, first = key:match("^([^/]+)/(.+)/(%d+)$")
    local off = name and offsets[name]
    if not off then error(("load_checkpoint: unexpected entry '%s' in %s"):format(key, where), 2) end
    local a, b = off + tonumber(first), off + tonumber(first) + t:numel()
    local s, e = math.max(a, lo), math.min(b, hi)
    if e > s then
      local src = t:narrow(1, s - a + 1, e - s)
      if kind == "param" then
        target:narrow(1, s - lo + 1, e - s):copy_(src)
        covered = covered + (e - s)
      else
        local field = kind:match("^state%.(.+)$")
        if not field then error(("load_checkpoint: unexpected entry '%s'"):format(key), 2) end
        state[field] = state[field] or zorch.zeros(target:numel(), {device = target:device()})
        state[field]:narrow(1, s - lo + 1, e - s):copy_(src)
      end
    end
  end
  if covered ~= hi - lo then
    error(("load_checkpoint: %s covers %d of the %d elements this rank needs"):format(where, covered, hi - lo), 2)
  end
  self.inner.state[1] = state
  self.user_opt.lr, self.inner.lr = manifest.lr, manifest.lr
  -- saved between optimizer steps: the next micro-batch opens a window, whatever the accumulation now
  self.micro = 0
  self.zero:after_update() -- master weights into the parameters, then gather or release
  if self.lr_scheduler and manifest.scheduler_step then
    self.lr_scheduler.last_step = manifest.scheduler_step
    self.user_opt.lr = self.lr_scheduler.lr_at(manifest.scheduler_step)
  end
  self.steps = manifest.step
  if self.loader and manifest.loader then self.loader:load_state(manifest.loader) end
  zorch._rng_set_offset(manifest.rng_offset)
  return manifest
end

-- zorch consolidate DIR OUT [bf16]: the full state dict of a checkpoint as one
-- safetensors file, written a tensor at a time (memory stays near the largest
-- parameter), under PyTorch's names.
-- Mistakes on its command line are usage errors (zorch.flags).
function zorch._consolidate(...)
  local usage = "usage: zorch consolidate DIR out.safetensors [float32|bfloat16]"
  local a = zorch.flags({...}, {
    {"DIR", "a checkpoint folder (save_checkpoint's)"},
    {"out", "the safetensors file to write"},
    {"dtype", "the tensors' dtype in the file", default = "float32", choices = {"float32", "bfloat16", "fp32", "bf16"}},
  }, usage)
  local dir, out, dtype = a.DIR, a.out, a.dtype
  if not io.open(dir .. "/latest", "rb") and not io.open(dir .. "/manifest.json", "rb") then
    error(zorch.flags.usage_error(("consolidate: %s is not a checkpoint folder (no latest or manifest.json)\n%s"):format(
      dir, usage)))
  end
  local codes = {float32 = {"F32", 4}, bfloat16 = {"BF16", 2}, bf16 = {"BF16", 2}, fp32 = {"F32", 4}}
  local code = codes[dtype]
  local where, manifest = open_checkpoint(dir, "consolidate")
  local header, off = {}, 0
  for _, p in ipairs(manifest.params) do
    local bytes = p.numel * code[2]
    header[p.name] = {dtype = code[1], shape = p.shape, data_offsets = {off, off + bytes}}
    off = off + bytes
  end
  local text = zorch._json_encode(header):gsub("%s", "")
  text = text .. string.rep(" ", (8 - #text % 8) % 8)
  local tmp = out .. ".partial"
  local f = assert(io.open(tmp, "wb"))
  f:write(string.pack("<I8", #text), text)
  local S, total = manifest.shard, manifest.numel
  for _, p in ipairs(manifest.params) do
    local full = zorch.zeros(p.numel)
    for r = 0, manifest.world_size - 1 do
      local lo = math.max(p.offset, r * S)
      local hi = math.min(p.offset + p.numel, (r + 1) * S, total)
      if hi > lo then
        local piece = zorch.load(("%s/rank%d.safetensors"):format(where, r), ("param/%s/%d"):format(p.name, lo - p.offset))
        full:narrow(1, lo - p.offset + 1, hi - lo):copy_(piece)
      end
    end
    local t = full:view(p.shape)
    if code[1] == "BF16" then t = t:to("bfloat16") end
    f:write(zorch._tensor_bytes(t))
  end
  f:close()
  local ok, err = os.rename(tmp, out)
  if not ok then error("consolidate: " .. tostring(err), 0) end
  return #manifest.params
end

return nil
