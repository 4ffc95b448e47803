-- zorch.offload: ZeRO-Offload / ZeRO-Infinity's offload_optimizer for the
-- Engine. Device "nvme": Adam's moments of this rank's shard live in a file
-- under nvme_path (zero/offload.c), streamed through buffer_count chunk
-- buffers each step; the update is the same kernel over each chunk, so the
-- weights are those of a run without offload, bit for bit. Device "cpu": the
-- state lives in host memory, which on a CPU rank is where it is already.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end

local DEFAULT_CHUNK = 1 << 20 -- elements per chunk (8 MiB of moments)

-- Sets up engine.inner (made by prepare over engine.target) for the config's
-- offload_optimizer; returns the store, or nil when the state stays in memory.
function zorch._offload_optimizer(engine)
  local off = engine.cfg.offload_optimizer
  if off and off.device == "cpu" and engine.device ~= "cpu" and engine.rank == 0 and os.getenv("ZORCH_QUIET") == nil then
    io.stderr:write("zorch: warning: offload_optimizer device \"cpu\" on a GPU rank is not implemented: " ..
                    "the optimizer state stays in GPU memory (the results are the same)\n")
  end
  if not off or off.device ~= "nvme" then return nil end
  local inner, target = engine.inner, engine.target
  local name = getmetatable(inner).__name
  if name ~= "optim.Adam" and name ~= "optim.AdamW" then
    error(("Engine:prepare: offload_optimizer to nvme runs optim.Adam and optim.AdamW, not %s"):format(name), 3)
  end
  if inner.defaults.amsgrad then error("Engine:prepare: offload_optimizer to nvme does not support amsgrad", 3) end
  if target:device() ~= "cpu" or target:dtype() ~= "float32" then
    error(("Engine:prepare: offload_optimizer to nvme needs the float32 shard on the CPU, this rank's is %s on %s"):format(
      target:dtype(), target:device()), 3)
  end
  local user = engine.user_opt
  if user and type(user.param_groups) == "table" and #user.param_groups > 1 then
    error(("Engine:prepare: offload_optimizer to nvme steps one parameter group, the optimizer has %d"):format(
      #user.param_groups), 3)
  end
  local store = zorch._offload_open(off.nvme_path, target:numel(), off.chunk or DEFAULT_CHUNK, off.buffer_count or 4)
  local decoupled = name == "optim.AdamW"
  -- one Adam step of the whole shard p with the options o (the group's, as
  -- they are now: a scheduler sets its lr). The state table keeps the step;
  -- its moments are in the file (or, just loaded from a checkpoint, in
  -- tensors that the next step writes there)
  local function step(opt, p, g, o)
    if not g then return end
    local s = opt.state[1]
    if not s then s = {step = 0}; opt.state[1] = s end
    if zorch.is_tensor(s.exp_avg) then
      store:put(s.exp_avg, s.exp_avg_sq)
      s.exp_avg, s.exp_avg_sq = nil, nil
    end
    s.step = s.step + 1
    store:adam(p, g, s.step, {lr = o.lr, beta1 = o.betas[1], beta2 = o.betas[2], eps = o.eps,
                              weight_decay = o.weight_decay, decoupled = decoupled,
                              no_bias_correction = not o.bias_correction})
  end
  local function group(opt) return type(opt.param_groups) == "table" and opt.param_groups[1] or opt.defaults end
  rawset(inner, "step", function(opt)
    local p = opt.params[1]
    local o = setmetatable({lr = opt.lr}, {__index = group(opt)})
    step(opt, p, p.grad, o)
  end)
  rawset(inner, "_step_runs", function(opt, p, g, runs)
    if #runs ~= 1 or runs[1][1] ~= 1 or runs[1][2] ~= p:numel() then
      error("offload_optimizer: the nvme store steps the whole shard with one group's options", 2)
    end
    step(opt, p, g, runs[1][3])
  end)
  -- the state with its moments read back, as a run without offload holds it
  -- (checkpoints and state_dict)
  rawset(inner, "full_state", function(opt)
    local s = opt.state[1]
    if not s or zorch.is_tensor(s.exp_avg) then return s end
    local m, v = zorch.zeros({target:numel()}), zorch.zeros({target:numel()})
    store:get(m, v)
    return {step = s.step, exp_avg = m, exp_avg_sq = v}
  end)
  local state_dict = inner.state_dict
  rawset(inner, "state_dict", function(opt)
    local s = opt.state[1]
    opt.state[1] = opt:full_state()
    local ok, sd = pcall(state_dict, opt)
    opt.state[1] = s
    if not ok then error(sd, 0) end
    return sd
  end)
  return store
end

return nil
