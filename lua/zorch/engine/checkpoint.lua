-- Checkpoints keyed by parameter name and element range, not by rank layout:
-- any world size and ZeRO stage resumes from any other.
--   DIR/TAG@G/rank<r>.safetensors  this rank's slice: "param/<name>/<first>" and
--                                  "state.<field>/<name>/<first>" 1-D pieces (fp32)
--   DIR/TAG@G/manifest.hash        FNV-1a (64 bits) of manifest.json, 16 hex digits
--   DIR/TAG@G/manifest.json        names, shapes, offsets, counters, loader, RNG,
--                                  and each file's size and FNV-1a hash
--   DIR/latest                     the folder name (TAG@G), replaced atomically
--   DIR/lock                       the job's lock: "host pid" of the process
--                                  whose rank 0 saves or resumes here
-- With a layout that splits the model (Engine{layout = ...}, tensor or pipeline
-- > 1) there is one file per world rank, its pieces are ranges of the rank's own
-- (tensor-sliced) parameters, and the manifest's "layout" records each part
-- (tensor and pipeline coordinate): its parameters, their flat offsets and how
-- each is sliced from the full tensor. Loading assembles the full tensor of
-- every parameter a rank needs and cuts the rank's slice from it, so any
-- (data, pipeline, tensor) layout resumes from any other.
-- G is a generation: a save always writes a folder no earlier save used, and a
-- folder is complete once its manifest.json exists (written last, atomically).
-- Publication is the atomic rename of DIR/latest; only then are older folders of
-- the same tag removed (and, with keep_last = N, all but the newest N
-- complete checkpoints). No step renames a folder, so a process killed between
-- any two steps leaves latest naming a complete checkpoint (or no latest at all
-- before the first save).
-- One job at a time: world rank 0 takes DIR/lock (flock) at its first save or
-- resume and holds it until the process ends, so a second job in the same
-- folder is refused before it writes anything (two jobs would publish and
-- remove each other's folders).
-- The module reaches the engine only through the methods engine.lua defines
-- for it (docs/architecture.md, "The Engine on the Lua side"):
--   engine:checkpoint_layout()        the model, data rank, stage, precision,
--                                     shard, flat target, optimizer name, layout
--   engine:checkpoint_state()         what a save writes besides the pieces
--   engine:restore_optimizer_state(s) the slice's optimizer state, once loaded
--   engine:restore_counters(c, ...)   counters, options, scheduler, loss scale,
--                                     loader and generator (returns ...)
-- Engine:save_checkpoint and Engine:load_checkpoint call save and load.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local M = {}
local readable = zorch._require("zorch.util").readable
local read_file = zorch._require("zorch.util").read_file

local function barrier() zorch._allreduce(zorch.zeros(1)) end

-- FNV-1a (64 bits) of a string, as 16 hex digits: zorch._file_hash of a file
-- holding it (Lua's integers wrap as the hash's arithmetic needs).
local function text_hash(s)
  local h = -3750763034362895579 -- 0xcbf29ce484222325
  for i = 1, #s do h = (h ~ s:byte(i)) * 0x100000001b3 end
  return ("%016x"):format(h)
end

local FORMAT, VERSION = "zorch-checkpoint", 2
local TAG_PATTERN = "^[%w_%-%.]+$"

-- (name, offset, numel, shape) of every parameter, in the engine's flat order.
local function layout(info)
  local out, off = {}, 0
  for name, p in info.model:named_parameters() do
    out[#out + 1] = {name = name, offset = off, numel = p:numel(), shape = p.shape}
    off = off + p:numel()
  end
  return out, off
end

-- The flat range [lo, hi) the optimizer target of this rank covers.
local function target_range(info, numel)
  if info.stage == 0 then return 0, numel end
  local lo = info.rank * info.shard
  return lo, math.min(lo + info.shard, numel)
end

-- ---- the manifest: every field checked (type and range), errors name the field ----
local function is_seq(t)
  if type(t) ~= "table" then return false end
  local n = 0
  for _ in pairs(t) do n = n + 1 end
  return n == #t
end
local function is_int(v, lo, hi) return math.type(v) == "integer" and v >= lo and (hi == nil or v <= hi) end
local function finite(v) return type(v) == "number" and v == v and v - v == 0 end
local MAX_ELEMENTS = 1 << 50

local FIELDS = {} -- name -> check(value, manifest) returning nil or "must be ..."
FIELDS.format = function(v) if v ~= FORMAT then return ('must be "%s"'):format(FORMAT) end end
FIELDS.version = function(v)
  if v ~= VERSION then return ("must be %d (this zorch's checkpoint format)"):format(VERSION) end
end
FIELDS.tag = function(v)
  if type(v) ~= "string" or not v:match(TAG_PATTERN) then return "must be a string of letters, digits, _ - ." end
end
FIELDS.world_size = function(v) if not is_int(v, 1, 1 << 24) then return "must be an integer from 1 to 16777216" end end
FIELDS.zero_stage = function(v) if not is_int(v, 0, 3) then return "must be 0, 1, 2 or 3" end end
FIELDS.precision = function(v)
  if v ~= "fp32" and v ~= "bf16" and v ~= "fp16" then return 'must be "fp32", "bf16" or "fp16"' end
end
FIELDS.numel = function(v) if not is_int(v, 1, MAX_ELEMENTS) then return "must be an integer from 1 to 2^50" end end
FIELDS.shard = function(v, m)
  if not is_int(v, 1, MAX_ELEMENTS) then return "must be an integer from 1 to 2^50" end
  if is_int(m.numel, 1) and is_int(m.world_size, 1) and m.layout == nil then
    local least = (m.numel + m.world_size - 1) // m.world_size
    if v < least or v > least + 1024 then
      return ("must be from %d to %d (numel %d over %d ranks, padded)"):format(least, least + 1024, m.numel, m.world_size)
    end
  end
end
FIELDS.step = function(v) if not is_int(v, 0) then return "must be an integer >= 0" end end
FIELDS.micro = function(v) if not is_int(v, 0) then return "must be an integer >= 0" end end
FIELDS.lr = function(v) if not finite(v) or v < 0 then return "must be a finite number >= 0" end end
FIELDS.rng_offset = function(v) if not is_int(v, 0) then return "must be an integer >= 0" end end
FIELDS.scheduler_step = function(v) if v ~= false and not is_int(v, 0) then return "must be false or an integer >= 0" end end
-- fp16's loss scaler (false otherwise; optional: older manifests lack it)
FIELDS.loss_scale = function(v, m)
  if v == false then return end
  if type(v) ~= "table" or m.precision ~= "fp16" then return 'must be false, or with precision "fp16" an object' end
  if not finite(v.scale) or v.scale <= 0 then return "must have a finite scale > 0" end
  if not is_int(v.hysteresis, 1) then return "must have an integer hysteresis >= 1" end
  if not is_int(v.attempts, 0) or not is_int(v.skipped, 0) or v.skipped > v.attempts then
    return "must have integers attempts >= skipped >= 0"
  end
  if not is_int(v.last_overflow, -1) or v.last_overflow >= v.attempts then
    return "must have an integer last_overflow from -1 to attempts - 1"
  end
  for k in pairs(v) do
    if k ~= "scale" and k ~= "hysteresis" and k ~= "attempts" and k ~= "skipped" and k ~= "last_overflow" then
      return ("has an unknown field %s"):format(readable(k))
    end
  end
end
-- the model's buffers (rank 0's, in rank0.safetensors as "buffer/<name>");
-- optional: older manifests lack it
local BUFFER_DTYPES = {float32 = true, float64 = true, bfloat16 = true, float16 = true, int64 = true, int32 = true,
                       uint8 = true, int8 = true, bool = true}
FIELDS.buffers = function(v)
  if not is_seq(v) then return "must be a list of buffers" end
  local names = {}
  for i, b in ipairs(v) do
    if type(b) ~= "table" then return ("item %d must be an object, got %s"):format(i, readable(b)) end
    for k in pairs(b) do
      if k ~= "name" and k ~= "shape" and k ~= "dtype" then return ("item %d has an unknown field %s"):format(i, readable(k)) end
    end
    if type(b.name) ~= "string" or b.name == "" or names[b.name] then
      return ("item %d: name must be a non-empty string, not repeated, got %s"):format(i, readable(b.name))
    end
    names[b.name] = true
    if not is_seq(b.shape) then return ("'%s': shape must be a list of sizes"):format(b.name) end
    for _, d in ipairs(b.shape) do
      if not is_int(d, 0, MAX_ELEMENTS) then return ("'%s': shape must be a list of sizes"):format(b.name) end
    end
    if not BUFFER_DTYPES[b.dtype] then return ("'%s': dtype must be a zorch dtype, got %s"):format(b.name, readable(b.dtype)) end
  end
end
-- The ranges of the optimizers' hyper-parameters a manifest records (in
-- param_groups and optimizer_state): nil, or what the value must be.
local function hyper_error(k, x)
  if k == "lr" or k == "eps" or k == "weight_decay" or k == "momentum" then
    if not finite(x) or x < 0 then return "must be a finite number >= 0" end
  elseif k == "betas" then
    if not is_seq(x) or #x == 0 then return "must be a list of numbers in [0, 1)" end
    for _, b in ipairs(x) do
      if not finite(b) or b < 0 or b >= 1 then return "must be a list of numbers in [0, 1)" end
    end
  elseif k == "step" then
    if not is_int(x, 0) then return "must be an integer >= 0 (optimizer steps)" end
  end
end

-- the options of each parameter group (optional: older manifests lack it)
FIELDS.param_groups = function(v)
  if not is_seq(v) or #v == 0 then return "must be a non-empty list of objects (each group's options)" end
  for i, g in ipairs(v) do
    if type(g) ~= "table" or is_seq(g) and #g > 0 then return ("item %d must be an object"):format(i) end
    for k, x in pairs(g) do
      local okv = finite(x) or type(x) == "boolean" or type(x) == "string"
      if not okv and is_seq(x) then
        okv = true
        for _, y in ipairs(x) do okv = okv and finite(y) end
      end
      if type(k) ~= "string" or not k:match("^[%w_]+$") or not okv then
        return ("item %d has an invalid option %s"):format(i, readable(k))
      end
      local why = hyper_error(k, x)
      if why then return ("item %d: '%s' %s, got %s"):format(i, k, why, readable(x)) end
    end
  end
end
FIELDS.extra = function() end -- whatever the caller passed as opts.extra (JSON)
FIELDS.optimizer = function(v)
  if type(v) ~= "string" or not v:match("^[%w_%.]+$") then return "must be an optimizer's name (optim.Adam)" end
end
FIELDS.optimizer_state = function(v)
  if type(v) ~= "table" then return "must be an object of numbers, booleans and strings" end
  for k, x in pairs(v) do
    if type(k) ~= "string" or not (finite(x) or type(x) == "boolean" or type(x) == "string") then
      return "must be an object of numbers, booleans and strings, got " .. readable(k) .. " = " .. readable(x)
    end
    local why = k:sub(1, 7) == "behind/" and not is_int(x, 0) and "must be an integer >= 0 (steps missed while frozen)"
                or hyper_error(k, x)
    if why then return ("'%s' %s, got %s"):format(k, why, readable(x)) end
  end
end
FIELDS.state_fields = function(v)
  if not is_seq(v) then return "must be a list of names" end
  local seen = {}
  for i, f in ipairs(v) do
    if type(f) ~= "string" or not f:match("^[%w_]+$") or seen[f] then
      return ("must be a list of distinct names (letters, digits, _); item %d is %s"):format(i, readable(f))
    end
    seen[f] = true
  end
end
FIELDS.loader = function(v)
  if v == false then return end
  if type(v) ~= "table" then return "must be false or the loader's state (an object)" end
  local want = {epoch = {0}, batch = {0}, global_batch = {1}}
  local optional = {step_batch = {1}} -- samples per optimizer step (older files lack it)
  for k, x in pairs(v) do
    if want[k] or optional[k] then
      local lo = (want[k] or optional[k])[1]
      if not is_int(x, lo) then return ("field '%s' must be an integer >= %d, got %s"):format(k, lo, readable(x)) end
    elseif k == "seed" then
      if math.type(x) ~= "integer" then return "field 'seed' must be an integer, got " .. readable(x) end
    elseif k == "shuffle" then
      if type(x) ~= "boolean" then return "field 'shuffle' must be true or false, got " .. readable(x) end
    else
      return "has an unknown field " .. readable(k)
    end
  end
  for k in pairs(want) do if v[k] == nil then return ("misses its field '%s'"):format(k) end end
end
FIELDS.params = function(v, m)
  if not is_seq(v) or #v == 0 then return "must be a non-empty list of parameters" end
  local off, names = 0, {}
  for i, p in ipairs(v) do
    local where = ("item %d"):format(i)
    if type(p) ~= "table" then return ("%s must be an object, got %s"):format(where, readable(p)) end
    for k in pairs(p) do
      if k ~= "name" and k ~= "offset" and k ~= "numel" and k ~= "shape" then
        return ("%s has an unknown field %s"):format(where, readable(k))
      end
    end
    if type(p.name) ~= "string" or p.name == "" then return ("%s: name must be a non-empty string, got %s"):format(where, readable(p.name)) end
    where = ("'%s'"):format(p.name)
    if names[p.name] then return where .. " appears twice" end
    names[p.name] = true
    if not is_seq(p.shape) then return ("%s: shape must be a list of sizes, got %s"):format(where, readable(p.shape)) end
    local n = 1
    for _, d in ipairs(p.shape) do
      if not is_int(d, 0, MAX_ELEMENTS) or (d > 0 and n > MAX_ELEMENTS // d) then
        return ("%s: shape must be a list of sizes (integers >= 0, product <= 2^50), got %s"):format(where, readable(p.shape))
      end
      n = n * d
    end
    if p.numel ~= n then return ("%s: numel must be %d (its shape's product), got %s"):format(where, n, readable(p.numel)) end
    if p.offset ~= off then return ("%s: offset must be %d (the numels before it), got %s"):format(where, off, readable(p.offset)) end
    off = off + n
    if off > MAX_ELEMENTS then return "hold more than 2^50 elements" end
  end
  if is_int(m.numel, 1) and off ~= m.numel then return ("hold %d elements, but numel is %d"):format(off, m.numel) end
end
FIELDS.files = function(v, m)
  if not is_seq(v) then return "must be a list of files" end
  if is_int(m.world_size, 1) and #v ~= m.world_size then
    return ("must list one file per rank (%d), got %d"):format(m.world_size, #v)
  end
  for i, f in ipairs(v) do
    local name = ("rank%d.safetensors"):format(i - 1)
    if type(f) ~= "table" then return ("item %d must be an object, got %s"):format(i, readable(f)) end
    for k in pairs(f) do
      if k ~= "file" and k ~= "bytes" and k ~= "fnv1a64" then return ("item %d has an unknown field %s"):format(i, readable(k)) end
    end
    if f.file ~= name then return ("item %d: file must be \"%s\", got %s"):format(i, name, readable(f.file)) end
    if not is_int(f.bytes, 0) then return ("%s: bytes must be an integer >= 0, got %s"):format(name, readable(f.bytes)) end
    if type(f.fnv1a64) ~= "string" or not f.fnv1a64:match("^%x+$") or #f.fnv1a64 ~= 16 then
      return ("%s: fnv1a64 must be 16 hex digits, got %s"):format(name, readable(f.fnv1a64))
    end
  end
end
-- the layout of a checkpoint saved from a model split across ranks (optional)
local function split_error(v)
  if v == nil then return end
  if type(v) ~= "table" or not is_int(v.dim, 1, 64) or not is_int(v.blocks, 1, MAX_ELEMENTS) then
    return "split must be {dim, blocks} (integers >= 1)"
  end
  for k in pairs(v) do if k ~= "dim" and k ~= "blocks" then return "split has an unknown field " .. readable(k) end end
end
FIELDS.layout = function(v, m)
  if type(v) ~= "table" then return "must be an object {tensor, pipeline, data, parts}" end
  for k in pairs(v) do
    if k ~= "tensor" and k ~= "pipeline" and k ~= "data" and k ~= "parts" then
      return "has an unknown field " .. readable(k)
    end
  end
  for _, k in ipairs({"tensor", "pipeline", "data"}) do
    if not is_int(v[k], 1, 1 << 24) then return ("field '%s' must be an integer >= 1"):format(k) end
  end
  if is_int(m.world_size, 1) and v.tensor * v.pipeline * v.data ~= m.world_size then
    return ("tensor %d x pipeline %d x data %d must be world_size %d"):format(v.tensor, v.pipeline, v.data, m.world_size)
  end
  if not is_seq(v.parts) or #v.parts ~= v.tensor * v.pipeline then
    return "parts must list one part per tensor and pipeline coordinate"
  end
  local seen = {}
  for i, part in ipairs(v.parts) do
    local where = ("part %d"):format(i)
    if type(part) ~= "table" or not is_int(part.tensor, 0, v.tensor - 1) or not is_int(part.pipeline, 0, v.pipeline - 1) then
      return where .. " must have a tensor and a pipeline coordinate within the layout"
    end
    local key = part.tensor .. "," .. part.pipeline
    if seen[key] then return where .. " repeats a coordinate" end
    seen[key] = true
    if not is_int(part.numel, 1, MAX_ELEMENTS) or not is_int(part.shard, 1, MAX_ELEMENTS) or
       part.shard * v.data < part.numel then
      return where .. ": numel and shard must be integers >= 1 with shard x data >= numel"
    end
    if not is_seq(part.params) or #part.params == 0 then return where .. ": params must be a non-empty list" end
    local off = 0
    for _, e in ipairs(part.params) do
      if type(e) ~= "table" or type(e.name) ~= "string" or e.name == "" or e.offset ~= off or not is_seq(e.shape) then
        return ("%s: parameters must be {name, offset (the numels before it), numel, shape, split?}"):format(where)
      end
      local n = 1
      for _, d in ipairs(e.shape) do
        if not is_int(d, 0, MAX_ELEMENTS) or (d > 0 and n > MAX_ELEMENTS // d) then return ("%s: '%s' has a bad shape"):format(where, e.name) end
        n = n * d
      end
      if e.numel ~= n then return ("%s: '%s': numel must be its shape's product"):format(where, e.name) end
      local why = split_error(e.split)
      if why then return ("%s: '%s': %s"):format(where, e.name, why) end
      if e.split and e.split.dim > #e.shape then return ("%s: '%s': split dim beyond its shape"):format(where, e.name) end
      off = off + n
    end
    if off ~= part.numel then return ("%s: params hold %d elements, numel is %d"):format(where, off, part.numel) end
  end
end

local ORDER = {"format", "version", "tag", "world_size", "zero_stage", "precision", "numel", "shard", "params", "files",
               "step", "micro", "lr", "optimizer", "optimizer_state", "state_fields", "loader", "rng_offset",
               "scheduler_step", "extra"}

-- Nil when m is a valid manifest, else a message naming the field.
local function manifest_error(m)
  if type(m) ~= "table" then return "is not a JSON object" end
  if m.format ~= FORMAT then return ("is not a zorch checkpoint manifest (field 'format' is %s)"):format(readable(m.format)) end
  for k in pairs(m) do
    if FIELDS[k] == nil then return ("has an unknown field %s"):format(readable(k)) end
  end
  for _, k in ipairs(ORDER) do
    if m[k] == nil then return ("misses its field '%s'"):format(k) end
    local why = FIELDS[k](m[k], m)
    if why then
      local got = (k == "params" or k == "files" or k == "loader" or k == "optimizer_state" or k == "state_fields")
                  and "" or (", got " .. readable(m[k]))
      return ("field '%s' %s%s"):format(k, why, got)
    end
  end
  if m.loss_scale ~= nil then
    local why = FIELDS.loss_scale(m.loss_scale, m)
    if why then return ("field 'loss_scale' %s, got %s"):format(why, readable(m.loss_scale)) end
  end
  if m.buffers ~= nil then
    local why = FIELDS.buffers(m.buffers)
    if why then return ("field 'buffers' %s"):format(why) end
  end
  if m.param_groups ~= nil then
    local why = FIELDS.param_groups(m.param_groups, m)
    if why then return ("field 'param_groups' %s"):format(why) end
  end
  if m.layout ~= nil then
    local why = FIELDS.layout(m.layout, m)
    if why then return ("field 'layout' %s"):format(why) end
  end
end

-- zorch._read_manifest_text(text) -> true, manifest | false, message. Never
-- raises: parses text as a checkpoint manifest (strict JSON) and checks every
-- field. For fuzz drivers and tools; load_checkpoint reads manifests through it
-- (and checks manifest.hash and the files besides).
function zorch._read_manifest_text(text)
  if type(text) ~= "string" then return false, "manifest: expected a string" end
  local ok, m = pcall(zorch.json.decode, text, true)
  if not ok then return false, "manifest.json is not valid JSON: " .. tostring(m):gsub("^json: ", "") end
  local why = manifest_error(m)
  if why then return false, "manifest.json " .. why end
  return true, m
end

-- A test hook: ZORCH_TEST_HOOKS=checkpoint_stop=<step> makes save_checkpoint raise an error
-- right after that step (folder, shards, manifest, latest), as a process killed
-- there would stop, so tests can check what such a kill leaves on disk.
local function stop_after(step)
  if zorch._test_hook("checkpoint_stop") == step then
    error(("save_checkpoint: stopped after step '%s' (test hook checkpoint_stop)"):format(step), 0)
  end
end

-- Takes DIR/lock on world rank 0 (collective over the world): an error on
-- every rank when another job holds it, naming the holder. With `required`
-- false (a resume) a folder where no lock file can be made (read-only, or
-- not writable in a sandbox) is fine.
local function lock_folder(dir, who, required)
  local world = zorch._group_world()
  local lead = world:rank() == 0
  local ok, why, holder
  if lead then
    local called
    called, ok, why, holder = pcall(zorch._lock_dir, dir)
    if not called then ok, why, holder = nil, ok, false end -- (a sandbox that allows no writes there)
  end
  local bad = zorch.zeros(1, {dtype = "float64"})
  if lead and not ok and (required or holder ~= false) then bad:fill_(1) end
  if world:size() > 1 then
    zorch._comm_label(who .. "'s lock of " .. dir)
    world:allreduce(bad)
  end
  if bad:item() == 0 then return end
  if not lead then error(("%s: rank 0 could not lock %s (another job uses it, or it cannot be written)"):format(who, dir), 3) end
  local host, pid = tostring(holder or ""):match("^(%S+) (%d+)$")
  if host then
    error(("%s: %s is in use by another job (pid %s on host %s holds %s/lock); give each job its own checkpoint folder"):format(
      who, dir, pid, host, dir), 3)
  end
  error(("%s: %s"):format(who, why), 3)
end

-- Folder names: TAG@G, and the generation G, or nil for other names.
local function folder_parts(name)
  local tag, g = name:match("^([%w_%-%.]+)@(%d+)$")
  return tag, g and math.tointeger(tonumber(g))
end

-- What a killed or failed save left in DIR (rank 0, holding DIR/lock, before a
-- save: no save of this job runs, and no other job writes here): the
-- temporary files of atomic writes (NAME.tmp.PID.N, in DIR and in its
-- checkpoint folders) and checkpoint folders without manifest.json (a save
-- that failed part-way, on a full disk say). The folder latest names stays.
local TEMP_PATTERN = "%.tmp%.%d+%.%d+$"
local function tidy(dir)
  local latest = (read_file(dir .. "/latest") or ""):gsub("%s+$", "")
  for _, name in ipairs(zorch._list_dir(dir) or {}) do
    local path = dir .. "/" .. name
    if name:match(TEMP_PATTERN) then
      os.remove(path)
    elseif folder_parts(name) then
      local inside = zorch._list_dir(path)
      if inside then
        local complete = false
        for _, n in ipairs(inside) do complete = complete or n == "manifest.json" end
        if not complete and name ~= latest then
          zorch._remove_dir(path)
        else
          for _, n in ipairs(inside) do if n:match(TEMP_PATTERN) then os.remove(path .. "/" .. n) end end
        end
      end
    end
  end
end

-- After a save of folder `newest` was published: keeps the `keep` newest
-- complete checkpoints of DIR (by generation, whatever their tags), removes
-- the older ones. `newest` is always kept.
local function prune(dir, keep, newest)
  local complete = {}
  for _, name in ipairs(zorch._list_dir(dir) or {}) do
    local _, g = folder_parts(name)
    if g and name ~= newest and read_file(dir .. "/" .. name .. "/manifest.json") then
      complete[#complete + 1] = {name = name, g = g}
    end
  end
  table.sort(complete, function(a, b) return a.g > b.g end)
  for i = keep, #complete do zorch._remove_dir(dir .. "/" .. complete[i].name) end
end

-- The next generation for a save: one more than any folder of DIR uses.
local function next_generation(dir)
  local g = 0
  for _, name in ipairs(zorch._list_dir(dir) or {}) do
    local _, k = folder_parts(name)
    if k and k > g then g = k end
  end
  return g + 1
end

-- Checks a piece "KIND/NAME/FIRST" of a rank file against the format: a 1-D
-- float32 range of the parameter's numel elements starting at `first`.
local function check_piece(who, file, key, t, first, numel)
  if t:dtype() ~= "float32" then
    error(("%s: %s: '%s' is %s; checkpoint pieces are float32"):format(who, file, key, t:dtype()), 0)
  end
  if t:dim() ~= 1 or first + t:numel() > numel then
    error(("%s: %s: '%s' has shape (%s): a piece must be a 1-D range of its parameter's %d elements, "
      .. "and from element %d at most %d fit"):format(who, file, key, table.concat(t.shape, ", "), numel, first,
      math.max(numel - first, 0)), 0)
  end
end

-- ---- checkpoints across layouts ----------------------------------------------------------

-- Whether the engine's model is split across ranks (a layout with tensor or
-- pipeline > 1): then files go by world rank and the manifest has a layout.
local function split_model(info) return info.layout ~= nil and info.layout.model:size() > 1 end

-- This rank's part: its coordinates, flat size and shard, and its parameters
-- (local shapes) with the split of each sliced one.
local function my_part(info, params, numel)
  local L = info.layout
  local splits = zorch.nn.tp_splits(info.model)
  local out = {}
  for i, p in ipairs(params) do
    local e = {name = p.name, offset = p.offset, numel = p.numel, shape = p.shape}
    if splits[p.name] ~= nil and L and L.sizes.tensor > 1 then e.split = zorch.dist.split_spec(splits[p.name]) end
    out[i] = e
  end
  return {tensor = L and L.coords.tensor or 0, pipeline = L and L.coords.pipeline or 0, numel = numel,
          shard = info.shard, params = out}
end

-- The full shape of a parameter of a part in a layout of T tensor ranks.
local function full_shape(e, T)
  local shape = {}
  for i, d in ipairs(e.shape) do shape[i] = (e.split and e.split.dim == i) and d * T or d end
  return shape
end

-- Every rank's string, in world rank order (collective over the world).
local function allgather_strings(s)
  local world = zorch._group_world()
  local n, r = world:size(), world:rank()
  local lens = zorch.zeros(n, {dtype = "float64"})
  lens[r + 1] = #s
  world:allreduce(lens)
  local max = math.tointeger(lens:max():item())
  local bytes = {string.byte(s, 1, -1)}
  for i = #bytes + 1, max do bytes[i] = 0 end
  local recv = zorch.zeros(n * max, {dtype = "float64"})
  world:allgather(zorch.tensor(bytes, {dtype = "float64"}), recv)
  local all, v = {}, recv:totable()
  for k = 0, n - 1 do
    local len = math.tointeger(lens[k + 1]:item())
    local chars = {}
    for i = 1, len do chars[i] = string.char(math.tointeger(v[k * max + i])) end
    all[k + 1] = table.concat(chars)
  end
  return all
end

-- The layout for the manifest (collective): every part once, and the full
-- model's parameters (each name once, in stage then part order).
local function manifest_layout(info, part)
  local L = info.layout
  local texts = allgather_strings(zorch.json.encode(part))
  local parts, seen = {}, {}
  for _, text in ipairs(texts) do
    local q = zorch.json.decode(text, true)
    local key = q.tensor .. "," .. q.pipeline
    if not seen[key] then seen[key] = true; parts[#parts + 1] = q end
  end
  table.sort(parts, function(a, b) return a.pipeline < b.pipeline or (a.pipeline == b.pipeline and a.tensor < b.tensor) end)
  local full, named, off = {}, {}, 0
  for _, q in ipairs(parts) do
    for _, e in ipairs(q.params) do
      if not named[e.name] then
        named[e.name] = true
        local shape = full_shape(e, L.sizes.tensor)
        local n = 1
        for _, d in ipairs(shape) do n = n * d end
        full[#full + 1] = {name = e.name, offset = off, numel = n, shape = shape}
        off = off + n
      end
    end
  end
  return {tensor = L.sizes.tensor, pipeline = L.sizes.pipeline, data = L.sizes.data, parts = parts}, full, off
end

-- What a checkpoint holds, as parts (a checkpoint without a layout is one part
-- over its data ranks), and the world rank whose file holds data rank d of a part.
local function sources(manifest)
  local Lm = manifest.layout or {tensor = 1, pipeline = 1, data = manifest.world_size,
    parts = {{tensor = 0, pipeline = 0, numel = manifest.numel, shard = manifest.shard, params = manifest.params}}}
  local byname = {} -- name -> tensor coordinate -> {part, entry} (the first stage holding it)
  for _, part in ipairs(Lm.parts) do
    for _, e in ipairs(part.params) do
      byname[e.name] = byname[e.name] or {}
      byname[e.name][part.tensor] = byname[e.name][part.tensor] or {part, e}
    end
  end
  local function file_of(part, d)
    return (part.pipeline * Lm.data + d) * Lm.tensor + part.tensor -- (zorch.dist.rank_of)
  end
  return Lm, byname, file_of
end

-- The full tensor of parameter `name` (kind "param" or "state.<field>") from
-- the checkpoint in folder `where`: each holding part's local tensor from its
-- data ranks' pieces, the tensor ranks' slices put together.
local function full_tensor(who, where, src, name, kind)
  local Lm, byname, file_of = src[1], src[2], src[3]
  local holders = byname[name]
  if not holders or not holders[0] then error(("%s: %s has no parameter '%s'"):format(who, where, name), 0) end
  local function local_tensor(h)
    local part, e = h[1], h[2]
    local out = zorch.zeros(e.numel)
    for d = 0, Lm.data - 1 do
      local lo = math.max(e.offset, d * part.shard)
      local hi = math.min(e.offset + e.numel, (d + 1) * part.shard, part.numel)
      if hi > lo then
        local file = ("%s/rank%d.safetensors"):format(where, file_of(part, d))
        local key = ("%s/%s/%d"):format(kind, name, lo - e.offset)
        local ok, t = pcall(zorch.load, file, key)
        if ok and zorch.is_tensor(t) then check_piece(who, file, key, t, lo - e.offset, e.numel) end
        if not ok or not zorch.is_tensor(t) or t:numel() ~= hi - lo then
          error(("%s: %s lacks '%s' covering elements %d-%d of '%s' (it belongs in rank%d.safetensors)"):format(
            who, where, key, lo - e.offset, hi - e.offset - 1, name, file_of(part, d)), 0)
        end
        out:narrow(1, lo - e.offset + 1, hi - lo):copy_(t)
      end
    end
    return out:view(e.shape)
  end
  local split = holders[0][2].split
  if not split then return local_tensor(holders[0]) end
  local slices = {}
  for t = 0, Lm.tensor - 1 do
    if not holders[t] then error(("%s: %s has no tensor slice %d of '%s'"):format(who, where, t, name), 0) end
    slices[t + 1] = local_tensor(holders[t])
  end
  return zorch.dist.assemble(slices, split)
end

-- The optimizer-state fields of a checkpoint (collective): every field any
-- rank holds. A rank whose slice no step reached (every element frozen, or
-- in groups without momentum) made none of SGD's momentum, say; its
-- elements' state is then zeros, as a fresh optimizer's, and every rank's
-- file still covers its slice for each field.
local function state_fields(state, nfiles)
  local mine = {}
  for field, v in pairs(state) do if zorch.is_tensor(v) then mine[#mine + 1] = field end end
  if nfiles == 1 then table.sort(mine) return mine end
  local seen, fields = {}, {}
  for _, text in ipairs(allgather_strings(table.concat(mine, "\n"))) do
    for field in text:gmatch("[^\n]+") do
      if not seen[field] then seen[field] = true; fields[#fields + 1] = field end
    end
  end
  table.sort(fields)
  return fields
end

-- optimizer_state keys "behind/<parameter>": the optimizer steps it missed
local BEHIND = "behind/"

-- The optimizer's scalars of a manifest, without the parameters' missed steps.
local function state_scalars(manifest)
  local state = {}
  for field, v in pairs(manifest.optimizer_state) do
    if field:sub(1, #BEHIND) ~= BEHIND then state[field] = v end
  end
  return state
end

-- save(engine, dir, opts): Engine:save_checkpoint's work (it tail-calls this,
-- so level 2 is the caller's).
function M.save(engine, dir, opts)
  opts = opts or {}
  if type(dir) ~= "string" then error("save_checkpoint: argument 1 must be a folder name", 2) end
  -- (with offload_optimizer nvme the moments come back from their file)
  local saved = engine:checkpoint_state()
  local info = engine:checkpoint_layout()
  local state = saved.optimizer_state
  local step = saved.steps
  if opts.keep_last ~= nil and opts.keep_last ~= false and not is_int(opts.keep_last, 1) then
    error("save_checkpoint: keep_last must be an integer >= 1 (or false: keep every checkpoint), got " ..
      readable(opts.keep_last), 2)
  end
  local tag = opts.tag or ("step" .. step)
  if type(tag) ~= "string" or not tag:match(TAG_PATTERN) then
    error("save_checkpoint: tag must be letters, digits, _ - ., got " .. readable(tag), 2)
  end
  local params, numel = layout(info)
  -- rank 0 picks a folder no save used before and tells the others its generation
  local gen = zorch.zeros(1, {dtype = "float64"})
  -- (one rank leads: world rank 0; files are named by world rank)
  local world = zorch._group_world()
  local lead, wrank, nfiles = world:rank() == 0, world:rank(), world:size()
  if lead then zorch.fs.mkdir(dir) end
  lock_folder(dir, "save_checkpoint", true)
  if lead then
    tidy(dir)
    gen:fill_(next_generation(dir))
  end
  if nfiles > 1 then
    zorch._comm_label("save_checkpoint's folder")
    zorch._allreduce(gen)
  end
  local folder = ("%s@%d"):format(tag, math.tointeger(gen:item()))
  local where = dir .. "/" .. folder
  if lead then zorch.fs.mkdir(where) end
  stop_after("folder")
  barrier()
  -- this rank's pieces: the part of [lo, hi) its shard owns (stage 0: its share)
  local own_lo = info.rank * info.shard
  local own_hi = math.min(own_lo + info.shard, numel)
  local base = target_range(info, numel)
  local target = info.target
  local pieces = {}
  local fields = state_fields(state, nfiles)
  for _, p in ipairs(params) do
    local lo, hi = math.max(own_lo, p.offset), math.min(own_hi, p.offset + p.numel)
    if hi > lo then
      local key = ("%s/%d"):format(p.name, lo - p.offset)
      pieces["param/" .. key] = target:narrow(1, lo - base + 1, hi - lo):to("float32")
      for _, field in ipairs(fields) do
        local v = state[field]
        pieces["state." .. field .. "/" .. key] = v and v:narrow(1, lo - base + 1, hi - lo):clone() or
                                                  zorch.zeros(hi - lo)
      end
    end
  end
  -- buffers are not sharded: each rank keeps its own, rank 0's are saved
  local buffers = {}
  if lead then
    for name, b in info.model:named_buffers() do
      pieces["buffer/" .. name] = b:to("cpu")
      buffers[#buffers + 1] = {name = name, shape = b.shape, dtype = b:dtype()}
    end
  end
  zorch.save(pieces, ("%s/rank%d.safetensors"):format(where, wrank))
  local split_layout, full_params, full_numel
  if split_model(info) then split_layout, full_params, full_numel = manifest_layout(info, my_part(info, params, numel)) end
  barrier()
  stop_after("shards")
  if lead then
    local files = {}
    for r = 0, nfiles - 1 do
      local f = ("rank%d.safetensors"):format(r)
      local h = assert(zorch._file_hash(where .. "/" .. f))
      local fh = assert(io.open(where .. "/" .. f, "rb"))
      local size = fh:seek("end")
      fh:close()
      files[#files + 1] = {file = f, bytes = size, fnv1a64 = h}
    end
    local scalars = {}
    for field, v in pairs(state) do if not zorch.is_tensor(v) then scalars[field] = v end end
    -- the steps each parameter missed while frozen (its own step count is that much less)
    if not split_layout then
      for name, n in pairs(saved.missed) do scalars[BEHIND .. name] = n end
    end
    local manifest = {
      format = FORMAT, version = VERSION, tag = tag, world_size = nfiles,
      zero_stage = info.stage, precision = info.precision, numel = full_numel or numel,
      params = full_params or params, files = files, step = step, shard = info.shard, layout = split_layout,
      micro = saved.micro, lr = saved.lr, optimizer = info.optimizer,
      optimizer_state = scalars, state_fields = fields, loader = saved.loader or false,
      param_groups = saved.param_groups, rng_offset = zorch._rng_offset(), extra = opts.extra or false,
      buffers = buffers, scheduler_step = saved.scheduler_step or false, loss_scale = saved.loss_scale or false,
    }
    local text = zorch.json.encode(manifest)
    local ok, why = zorch._read_manifest_text(text)
    if not ok then error("save_checkpoint: the manifest it would write is invalid: " .. why, 2) end
    -- the hash first: a manifest.json present always has its hash beside it
    zorch.fs.write_atomic(where .. "/manifest.hash", text_hash(text) .. "\n")
    zorch.fs.write_atomic(where .. "/manifest.json", text)
    stop_after("manifest")
    zorch.fs.write_atomic(dir .. "/latest", folder) -- the publication
    zorch._published_step = step -- (zorch.Logger flushes the lines up to it)
    stop_after("latest")
    -- only now: older folders of this tag (and what older zorch versions left)
    for _, name in ipairs(zorch._list_dir(dir) or {}) do
      local t, k = folder_parts(name)
      if (t == tag and k < math.tointeger(gen:item())) or name == tag or name == "." .. tag .. ".partial"
         or name == "." .. tag .. ".old" then
        zorch._remove_dir(dir .. "/" .. name)
      end
    end
    if opts.keep_last then prune(dir, opts.keep_last, folder) end
  end
  barrier()
  return tag
end

-- Checks the checkpoint folder `where`: nil and (what is missing or wrong, and
-- whether it is merely incomplete) when it cannot be used, else its manifest.
local function check_folder(where)
  local text = read_file(where .. "/manifest.json")
  if not text then
    local d = zorch._list_dir(where)
    return nil, d and (where .. " has no manifest.json (an unfinished save)") or (where .. " does not exist"), true
  end
  local hash = read_file(where .. "/manifest.hash")
  if not hash then return nil, where .. "/manifest.hash is missing", true end
  hash = hash:gsub("%s+$", "")
  if text_hash(text) ~= hash then
    return nil, ("%s/manifest.json is corrupt (hash %s, manifest.hash says %s)"):format(where, text_hash(text),
      readable(hash:sub(1, 40)))
  end
  local ok, m = zorch._read_manifest_text(text)
  if not ok then return nil, where .. "/" .. m end
  for _, f in ipairs(m.files) do
    local path = where .. "/" .. f.file
    local h, err = zorch._file_hash(path)
    if not h then return nil, err, true end
    if h ~= f.fnv1a64 then
      return nil, ("%s is corrupt (hash %s, manifest says %s)"):format(path, h, f.fnv1a64)
    end
  end
  return m
end

-- The newest complete checkpoint in dir: the greatest step, then generation.
local function newest_complete(dir)
  local best, best_m, key
  local names = zorch._list_dir(dir) or {}
  table.sort(names)
  for _, name in ipairs(names) do
    if name ~= "latest" and not name:match("^%.") then
      local m = check_folder(dir .. "/" .. name)
      if m then
        local _, g = folder_parts(name)
        local k = {m.step, g or 0}
        if not key or k[1] > key[1] or (k[1] == key[1] and k[2] >= key[2]) then best, best_m, key = name, m, k end
      end
    end
  end
  return best, best_m
end

-- Resolves DIR/latest (or DIR itself when it holds a manifest) and returns the
-- checkpoint folder and its manifest, every hash checked. When latest names a
-- missing or incomplete folder (or is missing), the newest complete checkpoint
-- in DIR is loaded instead, with a warning; a corrupt one is an error.
local function open_checkpoint(dir, who, rank)
  if type(dir) ~= "string" then error(who .. ": argument 1 must be a folder name", 3) end
  if read_file(dir .. "/manifest.json") then
    local m, why = check_folder(dir)
    if not m then error(who .. ": " .. why, 3) end
    return dir, m
  end
  local latest = read_file(dir .. "/latest")
  local why, incomplete
  if latest then
    local name = latest:gsub("%s+$", "")
    if name:match("^[%w_%-%.@]+$") and name ~= "." and name ~= ".." then
      local m
      m, why, incomplete = check_folder(dir .. "/" .. name)
      if m then return dir .. "/" .. name, m end
      if not incomplete then error(who .. ": " .. why, 3) end
      why = ("%s/latest names %s, but %s"):format(dir, readable(name), why)
    else
      error(("%s: %s/latest does not name a checkpoint folder: %s"):format(who, dir, readable(latest:sub(1, 80))), 3)
    end
  else
    if not zorch._list_dir(dir) then error(("%s: %s does not exist"):format(who, dir), 3) end
    why = dir .. " has no latest"
  end
  local name, m = newest_complete(dir)
  if not name then error(("%s: %s, and %s holds no other complete checkpoint"):format(who, why, dir), 3) end
  if (rank or 0) == 0 then
    io.stderr:write(("zorch: warning: %s; loading %s/%s (step %d), the newest complete checkpoint there\n"):format(
      why, dir, name, m.step))
  end
  return dir .. "/" .. name, m
end

-- The first element of [lo, hi) that the intervals {a, b} leave uncovered, or nil.
local function first_gap(intervals, lo, hi)
  table.sort(intervals, function(x, y) return x[1] < y[1] end)
  local at = lo
  for _, iv in ipairs(intervals) do
    if iv[1] > at then return at end
    if iv[2] > at then at = iv[2] end
  end
  if at < hi then return at end
end

-- The parameters and optimizer state of a checkpoint without a layout into an
-- engine without one: the pieces this rank's target covers.
local function load_pieces(engine, info, where, manifest)
  -- the model must be the one saved
  local params, numel = layout(info)
  local saved = {}
  for _, p in ipairs(manifest.params) do saved[p.name] = p end
  for _, p in ipairs(params) do
    local s = saved[p.name]
    if not s then error(("load_checkpoint: %s has no parameter '%s'"):format(where, p.name), 3) end
    if table.concat(s.shape, ",") ~= table.concat(p.shape, ",") then
      error(("load_checkpoint: '%s' has shape (%s) in %s but (%s) in the model"):format(
        p.name, table.concat(s.shape, ", "), where, table.concat(p.shape, ", ")), 3)
    end
  end
  if #manifest.params ~= #params then error("load_checkpoint: the checkpoint has other parameters than the model", 3) end
  local optname = info.optimizer
  if manifest.optimizer ~= optname then
    error(("load_checkpoint: %s was saved with %s, this run uses %s"):format(where, manifest.optimizer, optname), 3)
  end
  -- every file (its hash was checked by open_checkpoint)
  local pieces, file_of = {}, {}
  for _, f in ipairs(manifest.files) do
    for k, t in pairs(zorch.load(where .. "/" .. f.file)) do pieces[k], file_of[k] = t, where .. "/" .. f.file end
  end
  -- copy the pieces this rank's target covers
  local lo, hi = target_range(info, numel)
  local target = info.target
  local state = state_scalars(manifest)
  local offsets, numels, wanted = {}, {}, {param = true}
  for _, p in ipairs(params) do offsets[p.name], numels[p.name] = p.offset, p.numel end
  for _, f in ipairs(manifest.state_fields) do wanted["state." .. f] = true end
  -- the buffers, every rank from rank 0's file
  local model_buffers = {}
  for name, b in info.model:named_buffers() do model_buffers[name] = b end
  for _, b in ipairs(manifest.buffers or {}) do
    local mine, t = model_buffers[b.name], pieces["buffer/" .. b.name]
    if not mine then error(("load_checkpoint: %s has a buffer '%s' the model lacks"):format(where, b.name), 3) end
    if not t then error(("load_checkpoint: %s lacks 'buffer/%s' in rank0.safetensors"):format(where, b.name), 3) end
    if table.concat(t.shape, ",") ~= table.concat(mine.shape, ",") then
      error(("load_checkpoint: buffer '%s' has shape (%s) in %s but (%s) in the model"):format(b.name,
        table.concat(t.shape, ", "), where, table.concat(mine.shape, ", ")), 3)
    end
    mine:copy_(t)
    pieces["buffer/" .. b.name] = nil
    model_buffers[b.name] = nil
  end
  if manifest.buffers then
    local left = next(model_buffers)
    if left then error(("load_checkpoint: %s has no buffer '%s'"):format(where, left), 3) end
  end
  local covered = {} -- kind -> param name -> {{a, b}, ...} (flat ranges within [lo, hi))
  for key, t in pairs(pieces) do
    local kind, name, first = key:match("^([^/]+)/(.+)/(%d+)$")
    local off, f0 = name and offsets[name], first and math.tointeger(tonumber(first))
    if not off or not f0 or not wanted[kind] then
      error(("load_checkpoint: unexpected entry '%s' in %s"):format(key, where), 3)
    end
    check_piece("load_checkpoint", file_of[key], key, t, f0, numels[name])
    local a, b = off + f0, off + f0 + t:numel()
    local s, e = math.max(a, lo), math.min(b, hi)
    if e > s then
      local src = t:narrow(1, s - a + 1, e - s)
      if kind == "param" then
        target:narrow(1, s - lo + 1, e - s):copy_(src)
      else
        local field = kind:match("^state%.(.+)$")
        state[field] = state[field] or zorch.zeros(target:numel(), {device = target:device()})
        state[field]:narrow(1, s - lo + 1, e - s):copy_(src)
      end
      covered[kind] = covered[kind] or {}
      covered[kind][name] = covered[kind][name] or {}
      table.insert(covered[kind][name], {s, e})
    end
  end
  -- every element this rank needs, of the parameters and of each state field
  local kinds = {"param"}
  for _, f in ipairs(manifest.state_fields) do kinds[#kinds + 1] = "state." .. f end
  for _, kind in ipairs(kinds) do
    for _, p in ipairs(params) do
      local a, b = math.max(lo, p.offset), math.min(hi, p.offset + p.numel)
      if b > a then
        local gap = first_gap((covered[kind] or {})[p.name] or {}, a, b)
        if gap then
          local r = gap // manifest.shard
          error(("load_checkpoint: %s lacks '%s/%s/...' covering element %d of '%s' (it belongs in rank%d.safetensors)"):format(
            where, kind, p.name, gap - p.offset, p.name, r), 3)
        end
      end
    end
  end
  -- a rank whose range is all padding (more ranks than the parameters fill)
  -- got no piece: its state is zeros, as a fresh optimizer's would be
  for _, f in ipairs(manifest.state_fields) do
    state[f] = state[f] or zorch.zeros(target:numel(), {device = target:device()})
  end
  engine:restore_optimizer_state(state)
end

-- Any layout into any other: for every parameter this rank's target covers,
-- the full tensor assembled from the checkpoint's parts, this rank's slice cut
-- from it (one full parameter in memory at a time).
local function load_across_layouts(engine, info, where, manifest)
  local who = "load_checkpoint"
  local L = info.layout
  local params, numel = layout(info)
  local part = my_part(info, params, numel)
  local T, t = L and L.sizes.tensor or 1, L and L.coords.tensor or 0
  local saved = {}
  for _, p in ipairs(manifest.params) do saved[p.name] = p end
  for _, e in ipairs(part.params) do
    local s = saved[e.name]
    if not s then error(("load_checkpoint: %s has no parameter '%s'"):format(where, e.name), 3) end
    local want = full_shape(e, T)
    if table.concat(s.shape, ",") ~= table.concat(want, ",") then
      error(("load_checkpoint: '%s' has shape (%s) in %s but (%s) in the model (full, over %d tensor ranks)"):format(
        e.name, table.concat(s.shape, ", "), where, table.concat(want, ", "), T), 3)
    end
  end
  local whole_model = (L == nil or L.sizes.pipeline == 1) and
                      (manifest.layout == nil or manifest.layout.pipeline == 1)
  if whole_model and #manifest.params ~= #params then
    error("load_checkpoint: the checkpoint has other parameters than the model", 3)
  end
  local optname = info.optimizer
  if manifest.optimizer ~= optname then
    error(("load_checkpoint: %s was saved with %s, this run uses %s"):format(where, manifest.optimizer, optname), 3)
  end
  local src = {sources(manifest)}
  local lo, hi = target_range(info, numel)
  local target = info.target
  local state = state_scalars(manifest)
  local kinds = {"param"}
  for _, f in ipairs(manifest.state_fields) do
    kinds[#kinds + 1] = "state." .. f
    state[f] = zorch.zeros(target:numel(), {device = target:device()})
  end
  for _, e in ipairs(part.params) do
    local a, b = math.max(lo, e.offset), math.min(hi, e.offset + e.numel)
    if b > a then
      for _, kind in ipairs(kinds) do
        local full = full_tensor(who, where, src, e.name, kind)
        local mine = e.split and zorch.dist.slice(full, e.split, T, t) or full
        local dest = kind == "param" and target or state[kind:match("^state%.(.+)$")]
        dest:narrow(1, a - lo + 1, b - a):copy_(mine:reshape(-1):narrow(1, a - e.offset + 1, b - a))
      end
    end
  end
  -- the buffers this rank's model has, from the leading rank's file
  local model_buffers = {}
  for name, buf in info.model:named_buffers() do model_buffers[name] = buf end
  for _, buf in ipairs(manifest.buffers or {}) do
    local mine = model_buffers[buf.name]
    if mine then mine:copy_(zorch.load(where .. "/rank0.safetensors", "buffer/" .. buf.name)) end
  end
  engine:restore_optimizer_state(state)
end

-- load(engine, dir): Engine:load_checkpoint's work (it tail-calls this, so
-- level 2 is the caller's). Resumes from DIR/latest (or DIR itself when it
-- holds a manifest), resharding to this run's world size and stage; then the
-- counters, options, scheduler, loss scale, loader and generator, after the
-- parameters and state are in place. Returns the manifest.
function M.load(engine, dir)
  local info = engine:checkpoint_layout()
  if type(dir) == "string" and not read_file(dir .. "/manifest.json") then lock_folder(dir, "load_checkpoint", false) end
  local where, manifest = open_checkpoint(dir, "load_checkpoint", info.rank)
  if manifest.layout or split_model(info) then
    load_across_layouts(engine, info, where, manifest)
  else
    load_pieces(engine, info, where, manifest)
  end
  -- the steps each parameter missed while frozen, by name
  local missed = {}
  for field, v in pairs(manifest.optimizer_state) do
    local name, n = field:sub(1, #BEHIND) == BEHIND and field:sub(#BEHIND + 1), math.tointeger(v)
    if name and n and n > 0 then missed[name] = n end
  end
  return engine:restore_counters({lr = manifest.lr, param_groups = manifest.param_groups, steps = manifest.step,
    scheduler_step = manifest.scheduler_step, missed = missed, loss_scale = manifest.loss_scale or nil,
    loader = manifest.loader or nil, rng_offset = manifest.rng_offset}, manifest)
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
  -- the buffers (rank 0's) follow in their own dtypes
  local buffer_bytes = {}
  for i, b in ipairs(manifest.buffers or {}) do
    local t = zorch.load(("%s/rank0.safetensors"):format(where), "buffer/" .. b.name)
    buffer_bytes[i] = zorch._tensor_bytes(t)
    local st = ({float32 = "F32", float64 = "F64", bfloat16 = "BF16", float16 = "F16", int64 = "I64", int32 = "I32",
                 uint8 = "U8", int8 = "I8", bool = "BOOL"})[t:dtype()]
    header[b.name] = {dtype = st, shape = b.shape, data_offsets = {off, off + #buffer_bytes[i]}}
    off = off + #buffer_bytes[i]
  end
  -- (an empty table encodes as {}: a 0-d buffer's shape must be [])
  local text = zorch.json.encode(header):gsub("%s", ""):gsub('"shape":{}', '"shape":[]')
  text = text .. string.rep(" ", (8 - #text % 8) % 8)
  local tmp = out .. ".partial"
  local f = assert(io.open(tmp, "wb"))
  f:write(string.pack("<I8", #text), text)
  local S, total = manifest.shard, manifest.numel
  local src = manifest.layout and {sources(manifest)}
  for _, p in ipairs(manifest.params) do
    local full = zorch.zeros(p.numel)
    if src then -- (a split model: the tensor slices and pipeline parts put together)
      full = full_tensor("consolidate", where, src, p.name, "param"):reshape(-1)
    end
    for r = 0, src and -1 or manifest.world_size - 1 do
      local lo = math.max(p.offset, r * S)
      local hi = math.min(p.offset + p.numel, (r + 1) * S, total)
      if hi > lo then
        local file, key = ("%s/rank%d.safetensors"):format(where, r), ("param/%s/%d"):format(p.name, lo - p.offset)
        local piece = zorch.load(file, key)
        check_piece("consolidate", file, key, piece, lo - p.offset, p.numel)
        full:narrow(1, lo - p.offset + 1, hi - lo):copy_(piece)
      end
    end
    local t = full:view(p.shape)
    if code[1] == "BF16" then t = t:to("bfloat16") end
    f:write(zorch._tensor_bytes(t))
  end
  for _, bytes in ipairs(buffer_bytes) do f:write(bytes) end
  f:close()
  local ok, err = os.rename(tmp, out)
  if not ok then error("consolidate: " .. tostring(err), 0) end
  return #manifest.params
end

return M
