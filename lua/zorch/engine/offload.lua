-- zorch.offload: ZeRO-Offload / ZeRO-Infinity's offload_optimizer for the
-- Engine. Device "nvme": Adam's moments of this rank's shard live in a file
-- under nvme_path (zero/offload.c), streamed through buffer_count chunk
-- buffers each step; the update is the same kernel over each chunk, so the
-- weights are those of a run without offload, bit for bit. Device "cpu": the
-- state lives in host memory, which on a CPU rank is where it is already.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end

local DEFAULT_CHUNK = 1 << 20 -- elements per chunk (8 MiB of moments; 16 MiB with the parameters)

-- Offload on a GPU rank (device "cpu" or "nvme"): the optimizer steps a
-- float32 copy of the rank's shard (its master weights) in host memory, with
-- the CPU Adam, so the moments live there too (or, nvme, in the file); the
-- engine's step copies the clipped gradient over before the update and the
-- updated shard back after it (zorch_zero_set_host), and refreshes the copy when
-- the device's shard is written (load_checkpoint, sync_shard). Returns
-- {target, grad, device_target}, or nil where the shard is on the CPU
-- already. The test hook offload_host takes this path on CPU ranks too (the
-- tests: the same bits as without it). With pin_memory the two host tensors
-- are page-locked (cudaMallocHost through the CUDA module; on a CPU rank, or
-- where the driver refuses, ordinary memory: `pinned` says which). At stages
-- 2-3 in float32 the gradient's copy is made bucket by bucket as backward
-- reduces them (zorch_zero_set_host: on a GPU on a side stream,
-- overlapping backward), and the step only waits for the copies and applies
-- the clip's factor to them (bucketed); otherwise it is copied whole after
-- the clip.
function zorch._offload_host(engine, target)
  local off = engine.cfg.offload_optimizer
  if not off or off.device == "none" then return nil end
  if engine.device == "cpu" and zorch._test_hook("offload_host") == nil then return nil end
  -- (the parameters in a file: the target is the file's shard in host memory already)
  if engine.param_dir then return nil end
  local n = target:numel()
  local pin = off.pin_memory == true and engine.device ~= "cpu" -- (a CPU rank never opens the CUDA module)
  local host, pinned = zorch._host_zeros(n, pin)
  local grad, gpinned = zorch._host_zeros(n, pin)
  host:copy_(target)
  local h = {target = host, grad = grad, device_target = target, pinned = pinned and gpinned}
  h.bucketed = engine.cfg.zero_stage >= 2 and engine.cfg.precision == "fp32" and
    os.getenv("ZORCH_OFFLOAD_BUCKET_COPY") ~= "0"
  engine.zero:set_host(host, grad, h.bucketed) -- (the engine's step copies to and from them)
  return h
end

-- Sets up engine.inner (made by prepare over engine.target) for the config's
-- offload_optimizer; returns the store (nil when the state stays in memory),
-- whether the parameter file streams with it, and the disk's bandwidth
-- {write, read, direct} (nil when not measured), for the engine to keep.
-- The moments' file goes to engine.opt_dir: nvme_path for "nvme"; for "cpu"
-- beside offload_param "cpu" on a GPU rank, a memory filesystem (zorch._host_dir).
function zorch._offload_optimizer(engine)
  local off = engine.cfg.offload_optimizer
  if not engine.opt_dir then return nil end
  local inner, target = engine.inner, engine.target
  local name = getmetatable(inner).__name
  if name ~= "optim.Adam" and name ~= "optim.AdamW" then
    error(("Engine:prepare: offload_optimizer to nvme runs optim.Adam and optim.AdamW, not %s"):format(name), 3)
  end
  local user = engine.user_opt
  for gi, g in ipairs(type(user.param_groups) == "table" and user.param_groups or {user.defaults}) do
    if g.amsgrad then
      error(("Engine:prepare: offload_optimizer to nvme does not support amsgrad (group %d)"):format(gi), 3)
    end
  end
  if target:device() ~= "cpu" or target:dtype() ~= "float32" then
    error(("Engine:prepare: offload_optimizer to a file needs the float32 shard on the CPU, this rank's is %s on %s"):format(
      target:dtype(), target:device()), 3)
  end
  -- with the parameters on nvme, offload_param's buffers (buffer_size elements
  -- each) carry them with the moments, unless offload_optimizer names a chunk
  local op = engine.cfg.offload_param
  local pfile = engine.param_dir ~= nil
  local chunk = off.chunk or (pfile and op.buffer_size) or DEFAULT_CHUNK
  local nbuf = (pfile and op.buffer_count) or off.buffer_count or 4
  local store = zorch.offload_store(engine.opt_dir, target:numel(), chunk, nbuf)
  -- the parameters on nvme too (offload_param): the step streams them with the moments
  local fd, p_off, g_off = engine.zero:param_file()
  local bound = fd ~= nil or nil
  if fd then store:bind(fd, p_off, g_off) end
  -- the disk's bandwidth, measured once (32 MB with direct I/O) for the step
  -- lines to log the achieved I/O against; ZORCH_OFFLOAD_PROBE=0 skips it
  local disk
  if os.getenv("ZORCH_OFFLOAD_PROBE") ~= "0" then
    local w, r, direct = zorch._offload_probe(engine.opt_dir, 32 << 20)
    disk = {write = w, read = r, direct = direct}
  end
  -- the one plug-in point: every step of the inner optimizer asks the store
  -- for the moments (lua/optim.lua, state stores)
  inner:_set_store(1, store)
  return store, bound, disk
end

-- A folder in host memory for the files of offload_param "cpu" on GPU ranks:
-- /dev/shm (a tmpfs: its files are pages of host memory, never written to a
-- disk), or ZORCH_HOST_DIR; the files are unlinked at once, as under nvme_path.
function zorch._host_dir()
  local dir = os.getenv("ZORCH_HOST_DIR") or "/dev/shm"
  local probe = dir .. "/.zorch-probe-" .. tostring(math.random(1 << 30))
  local f = io.open(probe, "w")
  if not f then
    error(("Engine: offload_param device \"cpu\" on a GPU rank keeps the shard in files in host memory, and %s " ..
           "cannot be written (set ZORCH_HOST_DIR to a tmpfs folder)"):format(dir), 3)
  end
  f:close()
  os.remove(probe)
  return dir
end

return nil
