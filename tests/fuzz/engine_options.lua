-- Randomized equivalence of the Engine's communication options:
--   ZORCH_BIN=build/cpu/zorch build/cpu/zorch tests/fuzz/engine_options.lua [FIRST [COUNT [OUTDIR]]]
-- For each seed FIRST .. FIRST+COUNT-1 it draws a model (Linear, ReLU,
-- LayerNorm and Embedding stacks of odd sizes, tied and frozen parameters,
-- some frozen or unfrozen later, a module run twice, a parameter smaller
-- than the world), an optimizer, a configuration (stage, buckets,
-- overlap_comm, prefetch, gather pool, reuse distance, accumulation,
-- clipping, precision, optimizer offload, DeepSpeed keys that change
-- nothing) and a world size of 1-5, trains a few steps under `zorch launch`
-- (each launch under a timeout) and compares the weights and losses with
-- one process running the optimizer alone (float32), or with the Engine's
-- bf16 at one rank and stage 0 (bf16). Some seeds stop at a checkpoint and
-- resume it under another configuration, world size and stage; a few draw
-- a combination refused on purpose and check its message.
-- Each failing seed is listed with its case file, its command and what
-- differed; the status is 1 when any seed failed.
local zorch = require "zorch"
local bin = os.getenv("ZORCH_BIN") or "build/cpu/zorch"
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
local worker = here .. "/engine_worker.lua"
local first, count = math.tointeger(tonumber(arg[1] or "1")), math.tointeger(tonumber(arg[2] or "20"))
local outdir = arg[3] or os.tmpname() .. ".d"
os.execute("mkdir -p " .. outdir)
local TIMEOUT = tonumber(os.getenv("ZORCH_FUZZ_TIMEOUT") or "300")
local env = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ZORCH_QUIET=1"

-- Tolerances. float32: the Engine sums the ranks' gradients in another
-- order than one process does, so weights differ by rounding: each element
-- within 2e-5 of itself plus 2% of the largest change its tensor saw in
-- training (Adam turns a rounding difference in a gradient that nearly
-- cancels into a visible one in its update: 0.3% of that change was
-- measured at stage 0 on 3 and 5 ranks), and the whole tensor's difference
-- within 0.5% of its change (a frozen tensor must stay within rounding). A
-- lost bucket or a gradient counted twice moves weights by about their
-- whole change (under SGD a wrong scale does too). bf16: a run is compared
-- with the Engine's bf16 at one rank and stage 0; stages 2-3 round the
-- reduced gradient slice once more, and a 16-bit weight rounds at 2^-8 of
-- itself, so the bound is a quarter of the tensor's largest change plus 1%
-- of its largest element (with Adam, plus 2 lr a step: a gradient that
-- rounds to the other sign moves the weight by lr the other way; bf16 cases
-- therefore draw SGD more often). Losses: within 2e-5 relative, 2% for
-- bf16. Where a run is outside these and plain stage 0 on as many ranks is
-- too (a training that amplifies rounding: loss going up, wide layers or a
-- bias of two elements under Adam), the run passes within 3 times what that
-- stage-0 run differs (the larger of both world sizes of a resumed case).
local FP32_REL, FP32_OF_CHANGE, FP32_NORM = 2e-5, 2e-2, 5e-3
local BF16_OF_CHANGE = 0.25

local function pick(t) return t[math.random(#t)] end
local function chance(p) return math.random() < p end

-- Lua source of a value (tables of numbers, strings, booleans and tables).
local function dump(v, ind)
  ind = ind or ""
  if type(v) == "table" then
    local parts, n = {}, #v
    for i = 1, n do parts[#parts + 1] = ind .. "  " .. dump(v[i], ind .. "  ") end
    local keys = {}
    for k in pairs(v) do if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%s  [%q] = %s"):format(ind, k, dump(v[k], ind .. "  ")) end
    return "{\n" .. table.concat(parts, ",\n") .. "\n" .. ind .. "}"
  elseif type(v) == "string" then return ("%q"):format(v)
  elseif math.type(v) == "integer" then return tostring(v)
  elseif type(v) == "number" then return ("%.17g"):format(v)
  else return tostring(v) end
end

-- JSON of a table (objects with string keys, numbers, booleans).
local function json(v)
  if type(v) == "table" then
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys)
    local parts = {}
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%q: %s"):format(k, json(v[k])) end
    return "{" .. table.concat(parts, ", ") .. "}"
  elseif type(v) == "string" then return ("%q"):format(v)
  elseif math.type(v) == "integer" then return tostring(v)
  elseif type(v) == "number" then return ("%.17g"):format(v)
  else return tostring(v) end
end

-- A model: layers, tied weights, frozen parameters; returns the case's model
-- fields and its parameter sizes (for the bucket sizes).
local function draw_model(case)
  local L, sizes = {}, {}
  local function lin(i, o, bias)
    L[#L + 1] = {t = "lin", i = i, o = o, bias = bias}
    sizes[#sizes + 1] = i * o
    if bias then sizes[#sizes + 1] = o end
    return #L
  end
  local function act()
    local r = math.random(3)
    if r == 1 then L[#L + 1] = {t = "relu"} end
  end
  local function ln(d) L[#L + 1] = {t = "ln", d = d}; sizes[#sizes + 1] = d; sizes[#sizes + 1] = d; return #L end
  local ties, frozen = {}, {}
  if chance(0.35) then -- ids -> Embedding -> ... -> a head over the vocabulary (tied or not)
    local V, D = pick({7, 13, 129, 1000}), pick({3, 7, 13, 16})
    case.ids = V
    L[1] = {t = "emb", n = V, d = D}
    sizes[1] = V * D
    local h = pick({5, 13, 31})
    lin(D, h, chance(0.8)); L[#L + 1] = {t = "relu"}
    lin(h, D, chance(0.8))
    if chance(0.5) then ln(D) end
    local tied = chance(0.6)
    local head = lin(D, V, not tied and chance(0.5))
    if tied then ties[#ties + 1] = {1, head}; sizes[#sizes] = nil end
    case.out = V
  else
    local din = pick({1, 3, 7, 13, 129})
    case.input = din
    local nh = chance(0.1) and 0 or math.random(1, 3) -- (none: a model of 2-16 elements, smaller than some worlds)
    local d = din
    for _ = 1, nh do
      local h = pick({2, 7, 13, 129, 1000})
      if d * h > 150000 then h = 13 end
      lin(d, h, chance(0.8)); act()
      if chance(0.3) then ln(h) end
      d = h
    end
    if d <= 129 and chance(0.4) then -- a square layer repeated, its weight tied
      local a = lin(d, d, chance(0.5)); L[#L + 1] = {t = "relu"}
      local b = lin(d, d, chance(0.5))
      ties[#ties + 1] = {a, b}
      sizes[#sizes] = nil
      if L[b].bias then sizes[#sizes] = nil; sizes[#sizes + 1] = d end
    elseif d <= 129 and chance(0.3) then -- one module run twice in a forward
      local a = lin(d, d, chance(0.5))
      L[#L + 1] = {t = "relu"}
      L[#L + 1] = {t = "same", of = a}
    end
    case.out = pick({1, 2, 3, 7})
    lin(d, case.out, true) -- (a bias of 1-3 elements: smaller than a world of 5)
  end
  if chance(0.4) then -- freeze one parameter of a Linear or LayerNorm
    local cands = {}
    for i, l in ipairs(L) do
      if l.t == "lin" then
        cands[#cands + 1] = {i, "weight"}
        if l.bias then cands[#cands + 1] = {i, "bias"} end
      elseif l.t == "ln" then cands[#cands + 1] = {i, "bias"} end
    end
    frozen[1] = pick(cands)
  end
  case.layers, case.ties, case.frozen = L, ties, frozen
  local numel = 0
  for _, s in ipairs(sizes) do numel = numel + s end
  local smallest = math.huge
  for _, s in ipairs(sizes) do smallest = math.min(smallest, s) end
  return numel, smallest
end

-- An Engine configuration: a table, or (sometimes) a DeepSpeed file with
-- the bucketing keys zorch reads and ignores.
local function draw_config(case, numel, smallest, nvme)
  local stage = math.random(0, 3)
  local bucket = pick({1, 3, 7, 13, 97, 127, 1000, 4099, math.max(1, smallest - 1), numel - 1, numel, numel + 1,
                       10 * numel, 500000000})
  bucket = math.max(1, bucket)
  local c = {
    zero_stage = stage,
    reduce_bucket_size = bucket,
    overlap_comm = chance(0.5),
    prefetch_bucket_size = pick({0, 1, 5, 100, numel // 3, 50000000, 1 << 40}),
    max_live_parameters = pick({0, 1, 50, numel // 2, 1000000000, 1 << 40}),
    max_reuse_distance = pick({0, 1, 1000000000}),
    gradient_accumulation_steps = case.accum,
    gradient_clipping = case.clip,
    precision = case.precision,
    comm_timeout = 120,
  }
  if (case.opt.type == "Adam" or case.opt.type == "AdamW") and chance(stage == 3 and 0.5 or 0.3) then
    local dev = pick({"cpu", "nvme"})
    c.offload_optimizer = {device = dev, nvme_path = dev == "nvme" and nvme or nil,
                           chunk = pick({numel < 5000 and 1 or 7, 7, 50, 1000, 1024, 1 << 20}),
                           buffer_count = math.random(2, 4)}
    if dev == "nvme" and stage == 3 and case.precision == "fp32" and chance(0.7) then
      c.offload_param = {device = "nvme", nvme_path = nvme}
    end
  end
  if not chance(0.4) then return {table = c} end
  -- the same as a DeepSpeed file (comm_timeout too: zorch's own key)
  local zo = {stage = stage, reduce_bucket_size = bucket, overlap_comm = c.overlap_comm,
              stage3_prefetch_bucket_size = c.prefetch_bucket_size, stage3_max_live_parameters = c.max_live_parameters,
              stage3_max_reuse_distance = c.max_reuse_distance,
              contiguous_gradients = chance(0.5), reduce_scatter = chance(0.5),
              allgather_bucket_size = pick({1, 3, 97, numel, 500000000}),
              offload_optimizer = c.offload_optimizer, offload_param = c.offload_param}
  local ds = {zero_optimization = zo, gradient_clipping = c.gradient_clipping,
              gradient_accumulation_steps = c.gradient_accumulation_steps, comm_timeout = c.comm_timeout}
  if c.precision == "bf16" then ds.bf16 = {enabled = true} end
  return {json = json(ds), table = {}}
end

-- A combination refused on purpose (docs/distributed.md, "Offload"), and
-- what its error says: every rank must end with it, not hang.
local function draw_refused(case, nvme)
  local nv = {device = "nvme", nvme_path = nvme}
  local c, want = {zero_stage = 3, offload_optimizer = nv, offload_param = nv, precision = "fp32"}
  local r = math.random(4)
  if r == 1 then c.zero_stage, want = math.random(0, 2), "needs zero_stage 3"
  elseif r == 2 then c.offload_optimizer, want = pick({false, {device = "cpu"}}), "needs offload_optimizer device"
  elseif r == 3 then c.precision, want = "bf16", "runs float32 parameters"
  else
    c.offload_param, want = nil, "runs optim.Adam and optim.AdamW, not"
    case.opt = {type = pick({"SGD", "Lamb"}), lr = 0.01, wd = 0, momentum = 0}
  end
  return {table = c}, want
end

local function draw(seed, dir)
  math.randomseed(seed)
  local case = {seed = seed, global_batch = 60, steps = math.random(3, 5), accum = math.random(1, 4)}
  case.precision = chance(0.25) and "bf16" or "fp32"
  case.clip = chance(0.5) and pick({0.01, 0.3, 5.0}) or 0
  -- (bf16 mostly with SGD, whose update is proportional to the gradient, so
  -- the bound below means something; Adam's is lr either way for a gradient
  -- that rounds to either sign)
  local ot = case.precision == "bf16" and pick({"SGD", "SGD", "Adam", "AdamW"}) or pick({"Adam", "AdamW", "SGD", "Lamb"})
  case.opt = {type = ot, lr = ot == "SGD" and 0.003 or 0.002,
              wd = (ot == "AdamW" or (ot ~= "SGD" and chance(0.3))) and 0.1 or 0, momentum = chance(0.5) and 0.9 or 0}
  case.opt.dampening = case.opt.momentum > 0 and chance(0.5) and 0.5 or 0
  case.opt.groups = chance(0.25) -- (two groups, the parameters in turn)
  local numel, smallest = draw_model(case)
  case.numel = numel
  -- a frozen parameter trains from a later step on (Adam then counts its own steps)
  if #case.frozen > 0 and chance(0.5) then case.unfreeze_at = math.random(2, case.steps) end
  -- or trains first and is frozen from a later step (until unfrozen, if it is)
  if #case.frozen > 0 and chance(0.3) then case.freeze_from = math.random(2, case.unfreeze_at or case.steps) end
  local nvme = dir .. "/nvme"
  case.engine = draw_config(case, numel, smallest, nvme)
  case.world = math.random(1, 5)
  if chance(0.3) then
    case.ckpt = {at = math.random(1, case.steps - 1), world = math.random(1, 5),
                 engine = draw_config(case, numel, smallest, nvme)}
  elseif chance(0.06) then
    case.engine, case.refused = draw_refused(case, nvme)
  end
  return case
end

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local text = p:read("a")
  local ok, _, code = p:close()
  return text, ok, code
end

local function launch(n, case_file, mode, out, ckpt)
  local l = n > 1 and ("%s launch -n %d"):format(bin, n) or bin
  local cmd = ("%s timeout -k 10 %d %s %s %s %s %s %s"):format(env, TIMEOUT, l, worker, case_file, mode, out, ckpt or "")
  local t0 = os.time()
  local text, ok, code = run("env " .. cmd)
  return {text = text, ok = ok, code = code, cmd = cmd, hung = code == 124 or code == 137,
          secs = os.time() - t0}
end

local function losses(path)
  local t = {}
  local f = io.open(path)
  if not f then return nil end
  for line in f:lines() do
    local s, v = line:match("(%d+) (%S+)")
    t[tonumber(s)] = tonumber(v)
  end
  f:close()
  return t
end

-- The worst ratio of a difference to its tolerance (<= 1 passes), and where.
local function compare(case, got, want, bf16, init)
  local worst, where = 0, "-"
  for k, b in pairs(want) do
    local a = got[k]
    if not a or a:numel() ~= b:numel() then return math.huge, k .. " missing or of another size" end
    local r
    if bf16 then
      local change = (b - init[k]):abs():max():item()
      local adam = case.opt.type ~= "SGD" and 2 * case.opt.lr * case.steps or 0
      r = (a - b):abs():max():item() / (BF16_OF_CHANGE * change + 1e-2 * b:abs():max():item() + adam + 1e-6)
    else
      local moved = b - init[k]
      local change = moved:abs():max():item()
      r = ((a - b):abs() / (b:abs() * FP32_REL + FP32_OF_CHANGE * change + 1e-9)):max():item()
      local norm = (a - b):norm():item() / (FP32_NORM * moved:norm():item() + FP32_REL * b:norm():item() + 1e-9)
      r = math.max(r, norm)
    end
    if r ~= r then r = math.huge end
    if r > worst then worst, where = r, k end
  end
  return worst, where
end

local function compare_losses(got, want, bf16, from, to)
  if not got then return math.huge end
  local worst = 0
  for s = from, to do
    local g, v = got[s], want[s]
    if not g or not v then return math.huge end
    local r = math.abs(g - v) / ((bf16 and 2e-2 or FP32_REL) * (math.abs(v) + 1e-3))
    if r ~= r then r = math.huge end
    worst = math.max(worst, r)
  end
  return worst
end

local failures, passed, skipped, sensitive = {}, 0, 0, 0
local function fail(seed, what, r, case_file)
  local lines = {("seed %d: %s"):format(seed, what), "  case " .. case_file}
  if r then
    lines[#lines + 1] = "  command: " .. r.cmd
    lines[#lines + 1] = "  " .. (r.text:sub(-1500):gsub("\n", "\n  "))
  end
  failures[#failures + 1] = table.concat(lines, "\n")
  print("FAIL " .. lines[1])
end

local function describe(case)
  local c = case.engine.table
  local s = case.engine.json and "json " .. case.engine.json or dump(c):gsub("%s+", " ")
  return ("world %d, %d params, %s, accum %d, clip %g, %s %s%s%s: %s%s"):format(case.world, case.numel,
    case.ids and ("ids " .. case.ids) or ("in " .. case.input), case.accum, case.clip, case.precision,
    case.opt.type, case.opt.groups and " (2 groups)" or "",
    (case.freeze_from and (", frozen at step %d"):format(case.freeze_from) or "") ..
    (case.unfreeze_at and (", unfrozen at step %d"):format(case.unfreeze_at) or ""), s,
    case.ckpt and (" | ckpt at %d -> world %d %s"):format(case.ckpt.at, case.ckpt.world,
    case.ckpt.engine.json or dump(case.ckpt.engine.table):gsub("%s+", " ")) or "")
end

for seed = first, first + count - 1 do
  local dir = ("%s/seed%d"):format(outdir, seed)
  os.execute(("rm -rf %s; mkdir -p %s/nvme"):format(dir, dir))
  local case = draw(seed, dir)
  local case_file = dir .. "/case.lua"
  local f = assert(io.open(case_file, "w"))
  f:write("return " .. dump(case) .. "\n")
  f:close()
  print(("seed %d: %s%s"):format(seed, case.refused and "refused? " or "", describe(case)))
  if case.refused then -- the Engine must refuse it on every rank, with its message
    local r = launch(case.world, case_file, "engine", dir .. "/run")
    if r.ok or r.hung or not r.text:find(case.refused, 1, true) then
      fail(seed, ("a refused combination %s (wanted an error saying %q)"):format(
        r.ok and "ran" or r.hung and "hung" or "failed otherwise", case.refused), r, case_file)
    else
      print("  refused: " .. (r.text:match("(Engine[^\n]*)") or "?"))
      passed = passed + 1
      if not os.getenv("ZORCH_FUZZ_KEEP") then os.execute("rm -rf " .. dir) end
    end
    goto next
  end
  local bf16 = case.precision == "bf16"
  -- the reference: the optimizer alone (float32), or the Engine's bf16 on one rank at stage 0
  local ref_file = case_file
  if bf16 then
    local rc = {}
    for k, v in pairs(case) do rc[k] = v end
    rc.engine = {table = {zero_stage = 0, precision = "bf16", gradient_accumulation_steps = case.accum,
                          gradient_clipping = case.clip}}
    rc.ckpt = nil
    ref_file = dir .. "/ref_case.lua"
    f = assert(io.open(ref_file, "w"))
    f:write("return " .. dump(rc) .. "\n")
    f:close()
  end
  local ref = launch(1, ref_file, bf16 and "engine" or "plain", dir .. "/ref")
  local init
  if bf16 then -- the initial weights, rounded as the Engine's bf16 rounds them
    local rc = dofile(ref_file)
    rc.steps = 0
    local init_file = dir .. "/init_case.lua"
    f = assert(io.open(init_file, "w"))
    f:write("return " .. dump(rc) .. "\n")
    f:close()
    local r0 = launch(1, init_file, "engine", dir .. "/init")
    init = r0.ok and zorch.load(dir .. "/init.safetensors")
  end
  if not bf16 and ref.ok then init = zorch.load(dir .. "/ref.init.safetensors") end
  if not ref.ok then
    fail(seed, "the reference run failed", ref, ref_file)
  else
    local want, want_losses = zorch.load(dir .. "/ref.safetensors"), losses(dir .. "/ref.losses")
    -- a training that diverges turns rounding into anything: such a draw is not compared
    local diverged = false
    for s = 2, case.steps do diverged = diverged or not (want_losses[s] < 4 * want_losses[1]) end
    if diverged then
      print("  the reference diverged: not compared")
      skipped = skipped + 1
      goto next
    end
    local runs = {}
    if case.ckpt then
      local ck = dir .. "/ckpt"
      runs[1] = launch(case.world, case_file, "first", dir .. "/first", ck)
      if runs[1].ok then runs[2] = launch(case.ckpt.world, case_file, "resume", dir .. "/run", ck) end
    else
      runs[1] = launch(case.world, case_file, "engine", dir .. "/run")
    end
    local last = runs[#runs]
    local bad = false
    for _, r in ipairs(runs) do
      if not r.ok then
        local refused = r.text:match("(Engine[^\n]*)")
        fail(seed, r.hung and "a launch timed out (a hang?)" or
                   ("a launch failed (status %s)%s"):format(tostring(r.code), refused and ": " .. refused or ""), r,
             case_file)
        bad = true
        break
      end
    end
    if not bad then
      local got = zorch.load(dir .. "/run.safetensors")
      local w, where = compare(case, got, want, bf16, init)
      -- a resumed run logs only its own steps, the first run the steps before
      local lw = compare_losses(losses(dir .. "/run.losses"), want_losses, bf16,
                                case.ckpt and case.ckpt.at + 1 or 1, case.steps)
      if case.ckpt then
        lw = math.max(lw, compare_losses(losses(dir .. "/first.losses"), want_losses, bf16, 1, case.ckpt.at))
      end
      print(("  weights worst %.3g (%s), losses worst %.3g, %d s"):format(w, where, lw, last.secs))
      local worlds = {case.world}
      if case.ckpt and case.ckpt.world ~= case.world then worlds[2] = case.ckpt.world end
      if (w > 1 or lw > 1) and math.max(table.unpack(worlds)) > 1 then
        -- a training that amplifies rounding: how far plain stage 0 on as many
        -- ranks (each world size the case ran at) is from the reference
        -- measures it, and the run may be 3 times that
        local s0 = dofile(case_file)
        s0.engine = {table = {zero_stage = 0, precision = case.precision, gradient_accumulation_steps = case.accum,
                              gradient_clipping = case.clip}}
        s0.ckpt = nil
        local s0_file = dir .. "/stage0_case.lua"
        f = assert(io.open(s0_file, "w"))
        f:write("return " .. dump(s0) .. "\n")
        f:close()
        local w0, l0 = 0, 0
        for _, n in ipairs(worlds) do
          local r0 = launch(n, s0_file, "engine", dir .. "/stage0")
          if r0.ok then
            local wn = compare(case, zorch.load(dir .. "/stage0.safetensors"), want, bf16, init)
            local ln = compare_losses(losses(dir .. "/stage0.losses"), want_losses, bf16, 1, case.steps)
            print(("  stage 0 on %d ranks: weights %.3g, losses %.3g"):format(n, wn, ln))
            w0, l0 = math.max(w0, wn), math.max(l0, ln)
          end
        end
        if w0 > 1 or l0 > 1 then
          w, lw = w / math.max(1, 3 * w0), lw / math.max(1, 3 * l0)
          sensitive = sensitive + 1
        end
      end
      if w > 1 or lw > 1 then
        fail(seed, ("differs from the reference: weights %.3g x tolerance at %s, losses %.3g x"):format(w, where, lw),
             nil, case_file)
      else
        passed = passed + 1
        if not os.getenv("ZORCH_FUZZ_KEEP") then os.execute("rm -rf " .. dir) end
      end
    end
  end
  ::next::
end
print(("%d of %d seeds passed (%d within 3 times what stage 0 on as many ranks differs), %d not compared " ..
        "(the reference diverged)"):format(passed, count, sensitive, skipped))
if #failures > 0 then
  print("failures:")
  print(table.concat(failures, "\n"))
  local fl = assert(io.open(outdir .. "/failures.txt", "w"))
  fl:write(table.concat(failures, "\n"), "\n")
  fl:close()
end
os.exit(#failures == 0 and 0 or 1)
