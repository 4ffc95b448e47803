-- The Engine's options change nothing that is computed: cases that the
-- randomized checker (tests/fuzz/engine_options.lua) found and their
-- neighbours, each run by its worker (tests/fuzz/engine_worker.lua) under
-- zorch launch and compared with one process running the optimizer alone.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin = tap.zorch()
tap.need_mpi(bin)
local dir = tap.tmpdir()
local worker = "fuzz/engine_worker.lua"

-- Lua source of a case (tables, numbers, strings, booleans).
local function dump(v)
  if type(v) ~= "table" then return type(v) == "string" and ("%q"):format(v) or tostring(v) end
  local parts = {}
  for k, x in pairs(v) do
    parts[#parts + 1] = (math.type(k) == "integer" and "[%d] = %s" or "[%q] = %s"):format(k, dump(x))
  end
  return "{" .. table.concat(parts, ", ") .. "}"
end

local function write_case(name, c)
  local path = ("%s/%s.lua"):format(dir, name)
  local f = assert(io.open(path, "w"))
  f:write("return " .. dump(c) .. "\n")
  f:close()
  return path
end

-- One launch of the worker; true when it succeeded (its output is printed otherwise).
local function launch(n, file, mode, out, ckpt)
  local l = n > 1 and ("%s launch -n %d"):format(bin, n) or bin
  local text, ok = tap.run(("ZORCH_QUIET=1 timeout -k 5 120 env %s %s %s %s %s %s"):format(l, worker, file, mode, out,
                                                                                          ckpt or ""))
  if not ok then print("# " .. text:gsub("\n", "\n# ")) end
  return ok, text
end

-- The worst difference of the weights relative to each element (floor 1e-3).
local function worst(a, b)
  local w = 0
  for k, v in pairs(b) do
    if not a[k] then return math.huge end
    w = math.max(w, ((a[k] - v):abs() / (v:abs() + 1e-3)):max():item())
  end
  return w
end

-- SGD's momentum on a rank whose whole shard is a frozen parameter: that rank
-- never made the buffer, and its checkpoint lacked the field, so a resume on
-- another layout failed ("lacks 'state.momentum_buffer/0.weight/...'").
do
  -- 13 x 129 = 1677 frozen elements of 2196: at 3 ranks (shards of 736) all of rank 1's
  local c = {seed = 3, global_batch = 60, steps = 4, accum = 2, clip = 0, precision = "fp32", input = 13, out = 3,
             layers = {{t = "lin", i = 13, o = 129, bias = true}, {t = "relu"}, {t = "lin", i = 129, o = 3, bias = true}},
             ties = {}, frozen = {{1, "weight"}}, opt = {type = "SGD", lr = 0.003, momentum = 0.9, wd = 0},
             engine = {table = {zero_stage = 2, reduce_bucket_size = 97, gradient_accumulation_steps = 2}},
             ckpt = {at = 2, engine = {table = {zero_stage = 0, gradient_accumulation_steps = 2}}}}
  local file = write_case("frozen_shard", c)
  local ok_ref = launch(1, file, "plain", dir .. "/ref")
  local want = ok_ref and zorch.load(dir .. "/ref.safetensors")
  for _, to in ipairs({{1, 0}, {2, 3}}) do
    local ck = ("%s/ck%d_%d"):format(dir, to[1], to[2])
    c.ckpt.engine.table.zero_stage = to[2]
    file = write_case("frozen_shard", c)
    local ok = launch(3, file, "first", dir .. "/first", ck) and launch(to[1], file, "resume", dir .. "/resumed", ck)
    local w = ok and want and worst(zorch.load(dir .. "/resumed.safetensors"), want) or math.huge
    tap.ok(w <= 1e-5, ("SGD momentum, a rank's shard all frozen: stage 2 at 3 ranks resumes at stage %d on %d rank%s " ..
                       "as one process trains (worst %.3g)"):format(to[2], to[1], to[1] > 1 and "s" or "", w))
  end
end

-- Adam on a parameter frozen for the first steps, then unfrozen: PyTorch
-- counts each parameter's steps in its own state, so its first update is a
-- first step's (bias corrections of step 1); the Engine's one counter for
-- the flat shard gave it step 3's (25% of the change off), with or without
-- the moments on NVMe, and a checkpoint saved while it was frozen must
-- carry how many steps it missed.
do
  local c = {seed = 5, global_batch = 60, steps = 5, accum = 1, clip = 0, precision = "fp32", input = 7, out = 3,
             layers = {{t = "lin", i = 7, o = 13, bias = true}, {t = "relu"}, {t = "lin", i = 13, o = 3, bias = true}},
             ties = {}, frozen = {{1, "weight"}}, unfreeze_at = 3,
             opt = {type = "Adam", lr = 0.002, momentum = 0, wd = 0}}
  c.engine = {table = {zero_stage = 0}}
  local file = write_case("unfreeze", c)
  local want = launch(1, file, "plain", dir .. "/uref") and zorch.load(dir .. "/uref.safetensors")
  local cases = {
    {"stage 0 on 1 rank", 1, {zero_stage = 0}},
    {"stage 1 on 2 ranks", 2, {zero_stage = 1}},
    {"stage 2 on 3 ranks, the moments on NVMe", 3,
     {zero_stage = 2, offload_optimizer = {device = "nvme", nvme_path = dir, chunk = 50}}},
    {"stage 3 on 2 ranks, parameters and moments on NVMe", 2,
     {zero_stage = 3, offload_optimizer = {device = "nvme", nvme_path = dir, chunk = 50},
      offload_param = {device = "nvme", nvme_path = dir}}},
  }
  for _, k in ipairs(cases) do
    c.engine = {table = k[3]}
    file = write_case("unfreeze", c)
    local ok = launch(k[2], file, "engine", dir .. "/unfrozen")
    local w = ok and want and worst(zorch.load(dir .. "/unfrozen.safetensors"), want) or math.huge
    tap.ok(w <= 1e-5, ("Adam, a weight unfrozen at step 3: %s trains as one process (worst %.3g)"):format(k[1], w))
  end
  -- saved at step 2 (frozen), resumed elsewhere, unfrozen at step 3
  c.engine = {table = {zero_stage = 2}}
  c.ckpt = {at = 2, engine = {table = {zero_stage = 1}}}
  file = write_case("unfreeze", c)
  local ck = dir .. "/ck_unfreeze"
  local ok = launch(3, file, "first", dir .. "/ufirst", ck) and launch(2, file, "resume", dir .. "/uresumed", ck)
  local w = ok and want and worst(zorch.load(dir .. "/uresumed.safetensors"), want) or math.huge
  tap.ok(w <= 1e-5, ("and a checkpoint of stage 2 at 3 ranks, saved while it was frozen, resumes at stage 1 on 2 " ..
                     "ranks as one process trains (worst %.3g)"):format(w))
end

-- SGD with momentum and dampening on a weight unfrozen at step 3: PyTorch
-- starts its momentum buffer from the gradient at its first step; the
-- Engine's buffer for the slice had started at step 1, so the weight's
-- began at zeros and took the dampened gradient (a third of the change off).
do
  local c = {seed = 6, global_batch = 60, steps = 5, accum = 2, clip = 0, precision = "fp32", input = 7, out = 3,
             layers = {{t = "lin", i = 7, o = 13, bias = true}, {t = "relu"}, {t = "lin", i = 13, o = 3, bias = true}},
             ties = {}, frozen = {{1, "weight"}}, unfreeze_at = 3,
             opt = {type = "SGD", lr = 0.01, momentum = 0.9, dampening = 0.5, wd = 0}}
  c.engine = {table = {zero_stage = 0}}
  local file = write_case("dampening", c)
  local want = launch(1, file, "plain", dir .. "/dref") and zorch.load(dir .. "/dref.safetensors")
  -- (at 3 ranks, stage 2: shards of 64, rank 0's wholly the weight: its slice is one run)
  for _, k in ipairs({{"stage 0 on 1 rank", 1, 0}, {"stage 2 on 3 ranks", 3, 2}}) do
    c.engine = {table = {zero_stage = k[3], gradient_accumulation_steps = 2}}
    file = write_case("dampening", c)
    local ok = launch(k[2], file, "engine", dir .. "/damped")
    local w = ok and want and worst(zorch.load(dir .. "/damped.safetensors"), want) or math.huge
    tap.ok(w <= 1e-5, ("SGD with dampening, a weight unfrozen at step 3: %s trains as one process (worst %.3g)"):format(
      k[1], w))
  end
end

-- Lamb (runs per tensor) stepped a frozen parameter as if in the first
-- group: its weight decay shrank a frozen weight (by 0.014 in 3 steps).
do
  local c = {seed = 7, global_batch = 60, steps = 3, accum = 1, clip = 0, precision = "fp32", input = 7, out = 3,
             layers = {{t = "lin", i = 7, o = 13, bias = true}, {t = "relu"}, {t = "lin", i = 13, o = 3, bias = true}},
             ties = {}, frozen = {{1, "weight"}}, opt = {type = "Lamb", lr = 0.01, wd = 0.1}}
  c.engine = {table = {zero_stage = 0}}
  local file = write_case("lamb", c)
  local want = launch(1, file, "plain", dir .. "/lref") and zorch.load(dir .. "/lref.safetensors")
  local init = want and zorch.load(dir .. "/lref.init.safetensors")
  tap.ok(init and (want["0.weight"] - init["0.weight"]):abs():max():item() == 0,
         "Lamb alone leaves the frozen weight as it was")
  for _, k in ipairs({{"stage 0 on 1 rank", 1, 0}, {"stage 2 on 2 ranks", 2, 2}}) do
    c.engine = {table = {zero_stage = k[3]}}
    file = write_case("lamb", c)
    local ok = launch(k[2], file, "engine", dir .. "/lamb")
    local w = ok and want and worst(zorch.load(dir .. "/lamb.safetensors"), want) or math.huge
    tap.ok(w <= 1e-5, ("Lamb with weight decay and a frozen weight: %s trains as one process (worst %.3g)"):format(
      k[1], w))
  end
end

-- Lamb on a weight unfrozen at step 3 counts its own steps too (its bias
-- corrections matter through the weight decay beside the trust ratio).
do
  local c = {seed = 8, global_batch = 60, steps = 5, accum = 1, clip = 0, precision = "fp32", input = 7, out = 3,
             layers = {{t = "lin", i = 7, o = 13, bias = true}, {t = "relu"}, {t = "lin", i = 13, o = 3, bias = true}},
             ties = {}, frozen = {{1, "weight"}}, unfreeze_at = 3, opt = {type = "Lamb", lr = 0.01, wd = 0.1}}
  c.engine = {table = {zero_stage = 0}}
  local file = write_case("lamb_unfreeze", c)
  local want = launch(1, file, "plain", dir .. "/luref") and zorch.load(dir .. "/luref.safetensors")
  for _, k in ipairs({{"stage 0 on 1 rank", 1, 0}, {"stage 3 on 2 ranks", 2, 3}}) do
    c.engine = {table = {zero_stage = k[3]}}
    file = write_case("lamb_unfreeze", c)
    local ok = launch(k[2], file, "engine", dir .. "/lamb_unfrozen")
    local w = ok and want and worst(zorch.load(dir .. "/lamb_unfrozen.safetensors"), want) or math.huge
    tap.ok(w <= 1e-5, ("Lamb, a weight unfrozen at step 3: %s trains as one process (worst %.3g)"):format(k[1], w))
  end
end

-- The other optimizers with a step counter, in this process (stage 0, one
-- rank): a weight unfrozen at step 3 steps as under the optimizer alone
-- (NAdam: its product of momentum factors too).
do
  local nn, optim = zorch.nn, zorch.optim
  local function net() zorch.manual_seed(1); return nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 2)) end
  local X = zorch.randn(8, 4)
  local function train(name, opts, engine)
    local m = net()
    m[1].weight.requires_grad = false
    local o = optim[name](m:parameters(), opts)
    local e = engine and zorch.Engine{zero_stage = 0}
    if e then m, _, o = e:prepare(m, nil, o) end
    for step = 1, 5 do
      if step == 3 then m[1].weight.requires_grad = true end
      o:zero_grad()
      local loss = m(X):pow(2):mean()
      if e then e:backward(loss) else loss:backward() end
      o:step()
    end
    return m[1].weight:clone()
  end
  for _, c in ipairs({{"RAdam", {lr = 0.01}}, {"Adamax", {lr = 0.01}}, {"Adagrad", {lr = 0.01, lr_decay = 0.5}},
                      {"NAdam", {lr = 0.01}}}) do
    local a, b = train(c[1], c[2], false), train(c[1], c[2], true)
    local d = (a - b):abs():max():item()
    tap.ok(d == 0, ("%s, a weight unfrozen at step 3: the Engine steps it as the optimizer alone (%.3g)"):format(c[1], d))
  end
end

os.execute("rm -rf " .. dir)
tap.done()
