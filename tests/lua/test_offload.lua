-- offload_optimizer to nvme: Adam's moments in a file, streamed in chunks,
-- give the weights of a run without offload bit for bit (stages 1-3, 1 and 2
-- ranks); checkpoints taken with offload resume without it and the other way
-- round; the store itself matches the in-memory step; bad settings are errors.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"]
local tmp = tap.tmpdir()

local function same(a, b) return (a - b):abs():max():item() == 0 end

-- the store alone: chunked steps equal the whole-shard step; get/put round trip
do
  local n = 1003
  zorch.manual_seed(4)
  local p, g = zorch.randn({n}), zorch.randn({n})
  local p2 = p:clone()
  local m2, v2 = zorch.zeros({n}), zorch.zeros({n})
  local store = zorch.offload_store(tmp, n, 100, 3)
  local k = {lr = 1e-2, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, decoupled = true}
  for step = 1, 4 do
    store:adam(p, g, step, {{0, n, k}})
    Z._adam_step(p2, g, m2, v2, nil, step, k)
    g = zorch.randn({n})
  end
  local m, v = zorch.zeros({n}), zorch.zeros({n})
  store:get(m, v)
  tap.ok(same(p, p2) and same(m, m2) and same(v, v2), "4 streamed steps over 11 chunks equal the in-memory step, bit for bit")
  local st = store:stats()
  tap.ok(st.io == "io_uring" or st.io == "pread", "the store names its I/O: " .. tostring(st.io))
  tap.ok(st.file_bytes == n * 8 and st.buffer_bytes == 3 * 100 * 8,
         ("the file holds both moments (%d bytes), memory 3 chunk buffers (%d bytes)"):format(st.file_bytes, st.buffer_bytes))
  store:put(m2 * 2, v2 * 3)
  store:get(m, v)
  tap.ok(same(m, m2 * 2) and same(v, v2 * 3), "put then get gives the moments back")
  local names = io.popen("ls -A " .. tmp):read("a")
  tap.ok(names == "", "the state file is not left in nvme_path (unlinked while open): '" .. names .. "'")
  tap.raises("a wrong size is an error", function() store:adam(zorch.zeros({5}), zorch.zeros({5}), 1, {{0, 5, k}}) end,
             "optimizer offload", "1003")
  store:close()
  tap.raises("a closed store says so", function() store:get(m, v) end, "closed")
  tap.raises("a missing folder is named", function() zorch.offload_store(tmp .. "/nope", 10, 4, 2) end,
             "nvme_path", tmp .. "/nope")
  tap.raises("buffer_count below 2 is refused", function() zorch.offload_store(tmp, 10, 4, 1) end, "buffer_count")
end

-- direct I/O: a chunk of a multiple of 1024 elements moves with O_DIRECT (the
-- test folder is on a disk that takes it; tmpfs falls back to the page cache),
-- the last, short chunk rounded up to 4 KiB within its buffer; the same bits
-- as the page cache's path (ZORCH_OFFLOAD_DIRECT=0) and the in-memory step
do
  local n = 5000
  zorch.manual_seed(6)
  local k = {lr = 1e-2, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, weight_decay = 0.1, decoupled = true}
  local p0, gs = zorch.randn({n}), {}
  for s = 1, 3 do gs[s] = zorch.randn({n}) end
  local function run(store)
    local p = p0:clone()
    for s = 1, 3 do store:adam(p, gs[s], s, {{0, n, k}}) end
    local m, v = zorch.zeros({n}), zorch.zeros({n})
    store:get(m, v)
    return p, m, v, store:stats()
  end
  local p2, m2, v2 = p0:clone(), zorch.zeros({n}), zorch.zeros({n})
  for s = 1, 3 do Z._adam_step(p2, gs[s], m2, v2, nil, s, k) end
  local pd, md, vd, sd = run(zorch.offload_store(tmp, n, 1024, 3))
  local fs = io.popen("stat -f -c %T " .. tmp):read("l")
  if fs ~= "tmpfs" then tap.ok(sd.direct == true, "a chunk of 1024 elements moves with direct I/O on " .. tostring(fs))
  else print("# the test folder is on tmpfs: no direct I/O there") end
  tap.ok(same(pd, p2) and same(md, m2) and same(vd, v2), "5 chunks of 1024 (the last 904) with direct I/O: the in-memory step's bits")
  local pc, mc = run(zorch.offload_store(tmp, n, 1000, 3))
  tap.ok(same(pc, p2) and same(mc, m2), "a chunk of 1000 elements (not aligned) through the page cache: the same bits")
  local small = zorch.offload_store(tmp, 300, 1 << 20, 2)
  tap.ok(small:stats().buffer_bytes == 2 * 1024 * 8, "a store smaller than its chunk: buffers of 300 rounded up to 1024 elements")
  small:close()
end

-- the Engine refuses what it cannot stream
do
  local function prep(opt, cfg)
    local e = zorch.Engine(cfg)
    local model = zorch.nn.Linear(3, 2)
    return e:prepare(model, nil, opt(model:parameters()))
  end
  local nvme = {device = "nvme", nvme_path = tmp, buffer_count = 2}
  tap.raises("SGD with nvme offload is refused", function()
    prep(function(ps) return zorch.optim.SGD(ps, {lr = 0.1}) end, {offload_optimizer = nvme})
  end, "offload_optimizer", "optim.SGD")
  tap.raises("amsgrad with nvme offload is refused", function()
    prep(function(ps) return zorch.optim.Adam(ps, {amsgrad = true}) end, {offload_optimizer = nvme})
  end, "amsgrad")
  tap.raises("offload_param nvme below stage 3 is refused", function()
    zorch.Engine{zero_stage = 2, offload_optimizer = nvme, offload_param = {device = "nvme", nvme_path = tmp}}
  end, "offload_param", "zero_stage 3")
  tap.raises("offload_param nvme without the optimizer on nvme is refused", function()
    zorch.Engine{zero_stage = 3, offload_param = {device = "nvme", nvme_path = tmp}}
  end, "offload_param", "offload_optimizer")
  tap.raises("offload_param nvme with bf16 is refused", function()
    zorch.Engine{zero_stage = 3, precision = "bf16", offload_optimizer = nvme, offload_param = {device = "nvme", nvme_path = tmp}}
  end, "offload_param", "float32", "bf16")
  tap.raises("offload_param with a bad buffer_size is refused", function()
    zorch.Engine{zero_stage = 3, offload_param = {device = "cpu", buffer_size = 0}}
  end, "offload_param", "buffer_size")
  tap.raises("nvme without a path is refused", function() zorch.Engine{offload_optimizer = {device = "nvme"}} end,
             "offload_optimizer")
end

-- one plug-in point: whichever way the inner optimizer is stepped (step, the
-- runs of groups), the moments come from the store and never sit in its state
do
  local function run(off)
    zorch.manual_seed(5)
    local model = zorch.nn.Linear(6, 4)
    local e = zorch.Engine{zero_stage = 1, offload_optimizer = off}
    e:prepare(model, nil, zorch.optim.Adam(model:parameters(), {lr = 0.1}))
    local inner, t = e.inner, e.target
    for _ = 1, 3 do
      t.grad = zorch.randn({t:numel()})
      inner:step()
      inner:_step_runs(t, zorch.randn({t:numel()}), e.runs)
    end
    t.grad = nil
    return t:clone(), inner
  end
  local want, plain = run(false)
  local got, off = run({device = "nvme", nvme_path = tmp, buffer_count = 2, chunk = 7})
  tap.ok(same(want, got), "inner:step() and inner:_step_runs() both step through the store, bit for bit")
  tap.ok(off.state[1].exp_avg == nil and off.state[1].step == 6, "the state table holds the step count only")
  local a, b = plain:full_state(1), off:full_state(1)
  tap.ok(same(a.exp_avg, b.exp_avg) and same(a.exp_avg_sq, b.exp_avg_sq), "full_state reads the moments back from the store")
  local sd = off:state_dict()
  tap.ok(same(sd.state[1].exp_avg, a.exp_avg), "state_dict holds the moments as a run without offload does")
end

-- the parameters on nvme: state dicts in and out (the shard written through
-- sync_shard into the file); a deferred model keeps what it loaded before prepare
do
  local nvme = {device = "nvme", nvme_path = tmp, buffer_count = 2}
  local function model() return zorch.nn.Sequential(zorch.nn.Linear(5, 7), zorch.nn.ReLU(), zorch.nn.Linear(7, 3)) end
  zorch.manual_seed(9)
  local sd = model():state_dict()
  local e = zorch.Engine{zero_stage = 3, offload_optimizer = nvme, offload_param = {device = "nvme", nvme_path = tmp}}
  local mm = model()
  local m = e:prepare(mm, nil, zorch.optim.Adam(mm:parameters()))
  m:load_state_dict(sd)
  local got, all = m:state_dict(), true
  for k, v in pairs(sd) do all = all and same(v, got[k]) end
  tap.ok(all, "offload_param: load_state_dict after prepare writes the shard to the file, state_dict reads it back")
  local d = zorch.nn.deferred(model)
  d:load_state_dict(sd)
  local e2 = zorch.Engine{zero_stage = 3, offload_optimizer = nvme, offload_param = {device = "nvme", nvme_path = tmp}}
  local m2 = e2:prepare(d, nil, zorch.optim.Adam(d:parameters()))
  got, all = m2:state_dict(), true
  for k, v in pairs(sd) do all = all and same(v, got[k]) end
  tap.ok(all, "a deferred model loaded before prepare keeps the loaded values")
end

-- the job under zorch launch
local bin = tap.zorch()
if tap.has_mpi(bin) then
  local function job(n, stage, nvme, steps, save, extra, env)
    local text, good = tap.run(("%s%s launch -n %d lua/offload_job.lua %d %s 50 %d %s %s"):format(env or "", bin, n, stage,
                                                                                                  nvme, steps, save, extra or ""))
    if not good then print("# " .. text:gsub("\n", "\n# ")) end
    return good and zorch.load(save), text
  end
  local function equal_sd(a, b)
    if not a or not b then return false end
    for k, v in pairs(a) do if not b[k] or not same(v, b[k]) then return false end end
    return true
  end
  for stage = 1, 3 do
    for _, n in ipairs({1, 2, 4}) do
      local plain = job(n, stage, "-", 5, ("%s/p%d%d.st"):format(tmp, stage, n))
      local off, text = job(n, stage, tmp, 5, ("%s/o%d%d.st"):format(tmp, stage, n))
      tap.ok(equal_sd(plain, off), ("stage %d, %d rank(s): the weights with the moments on nvme are those without, bit for bit"):format(
        stage, n))
      if stage == 2 and n == 2 then
        tap.ok(text:find("offload: nvme 2304 bytes", 1, true) ~= nil and text:find("optimizer_state in memory 0 bytes", 1, true) ~= nil,
               "memory_report: the rank's moments (288 elements x 8 bytes) on nvme, none in memory")
      end
    end
  end
  -- two parameter groups (weights and biases, their own lr and weight decay):
  -- their runs of each shard stream through the store in one pass
  for stage = 1, 3 do
    local plain = job(2, stage, "-", 4, ("%s/gp%d.st"):format(tmp, stage), nil, "ZORCH_TEST_GROUPS=1 ")
    local off = job(2, stage, tmp, 4, ("%s/go%d.st"):format(tmp, stage), nil, "ZORCH_TEST_GROUPS=1 ")
    tap.ok(equal_sd(plain, off), ("stage %d, 2 ranks, 2 parameter groups: the weights with nvme offload are those without"):format(
      stage))
  end
  -- offload_param: the shard and its gradients in a file too (stage 3); with
  -- gradient accumulation (buckets added into the file) and parameter groups
  local P = "ZORCH_TEST_PARAM=1 "
  for _, n in ipairs({1, 2, 4}) do
    local plain = job(n, 3, "-", 5, ("%s/pp%d.st"):format(tmp, n))
    local off, text = job(n, 3, tmp, 5, ("%s/po%d.st"):format(tmp, n), nil, P)
    tap.ok(equal_sd(plain, off), ("offload_param nvme, %d rank(s): the weights are those without offload, bit for bit"):format(n))
    if n == 2 then
      tap.ok(text:find("nvme 4608 bytes", 1, true) ~= nil and text:find("parameters 0, gradients 0", 1, true) ~= nil,
             "memory_report: moments, shard and gradients (288 elements x 16 bytes) on nvme; no shard in memory")
    end
  end
  do
    local plain = job(2, 3, "-", 4, tmp .. "/pa.st", nil, "ZORCH_TEST_ACCUM=2 ")
    local off = job(2, 3, tmp, 4, tmp .. "/pa1.st", nil, P .. "ZORCH_TEST_ACCUM=2 ")
    tap.ok(equal_sd(plain, off), "offload_param nvme, 2 micro-batches a step: the weights are those without, bit for bit")
    plain = job(2, 3, "-", 4, tmp .. "/pg.st", nil, "ZORCH_TEST_GROUPS=1 ")
    off = job(2, 3, tmp, 4, tmp .. "/pg1.st", nil, P .. "ZORCH_TEST_GROUPS=1 ")
    tap.ok(equal_sd(plain, off), "offload_param nvme, 2 parameter groups: the weights are those without, bit for bit")
    plain = job(2, 3, "-", 4, tmp .. "/pd.st")
    off = job(2, 3, tmp, 4, tmp .. "/pd1.st", nil, P .. "ZORCH_TEST_DEFER=1 ")
    tap.ok(equal_sd(plain, off), "nn.deferred with offload_param: each group filled in the file, the weights as built eagerly")
    off = job(2, 2, "-", 4, tmp .. "/pd2.st", nil, "ZORCH_TEST_DEFER=1 ")
    tap.ok(equal_sd(job(2, 2, "-", 4, tmp .. "/pd3.st"), off), "nn.deferred without offload: filled in place at prepare")
    -- chunks of 1024 elements: the moments, parameters and gradients with
    -- direct I/O (the store's one chunk rounded up; the engine's own reads and
    -- writes through its aligned bounce buffer); and with ZORCH_OFFLOAD_DIRECT=0
    local plain2 = job(2, 3, "-", 4, tmp .. "/dp.st")
    local d1, dtext = job(2, 3, tmp, 4, tmp .. "/d1.st", nil, P .. "ZORCH_TEST_CHUNK=1024 ")
    tap.ok(equal_sd(plain2, d1) and dtext:find("direct true", 1, true) ~= nil,
           "offload_param nvme with direct I/O (chunk 1024): the weights without offload, bit for bit")
    tap.ok(equal_sd(plain2, job(2, 3, tmp, 4, tmp .. "/d2.st", nil, P .. "ZORCH_TEST_CHUNK=1024 ZORCH_OFFLOAD_DIRECT=0 ")),
           "ZORCH_OFFLOAD_DIRECT=0 (the page cache): the same weights")
    local u = job(2, 3, tmp, 4, tmp .. "/io1.st", nil, P)
    local r = job(2, 3, tmp, 4, tmp .. "/io2.st", nil, P .. "ZORCH_OFFLOAD_IO=pread ")
    tap.ok(u and equal_sd(u, r), "the I/O thread through pread/pwrite (ZORCH_OFFLOAD_IO=pread) gives the same weights")
    -- the GPU ranks' offload (a host copy of the shard stepped by the CPU Adam,
    -- copies both ways), taken on CPU ranks: the same bits
    local H = "ZORCH_TEST_HOOKS=offload_host "
    for stage = 1, 3 do
      for _, n in ipairs({2, 4}) do
        local want1 = job(n, stage, "-", 4, ("%s/h%d%d.st"):format(tmp, stage, n))
        tap.ok(equal_sd(want1, job(n, stage, "cpu", 4, ("%s/hc%d%d.st"):format(tmp, stage, n), nil, H)),
               ("stage %d, %d ranks: offload_optimizer cpu through a host copy gives the same weights"):format(stage, n))
        tap.ok(equal_sd(want1, job(n, stage, tmp, 4, ("%s/hn%d%d.st"):format(tmp, stage, n), nil, H)),
               ("stage %d, %d ranks: offload_optimizer nvme through a host copy gives the same weights"):format(stage, n))
      end
    end
    -- stages 2-3: the gradient's host copy made bucket by bucket as backward
    -- reduces them (a side stream on a GPU; here at once), the clip's factor
    -- applied to it at the step: the same bits as the copy after the clip
    -- (ZORCH_OFFLOAD_BUCKET_COPY=0), with 2 micro-batches a step, a tight
    -- clip, and pin_memory (no GPU here: ordinary memory, and it says so)
    for stage = 2, 3 do
      for _, extra in ipairs({"", "ZORCH_TEST_ACCUM=2 ", "ZORCH_TEST_CLIP=0.05 ZORCH_TEST_PIN=1 "}) do
        local want = job(2, stage, "-", 4, ("%s/hb%d.st"):format(tmp, stage), nil, extra)
        local got, text = job(2, stage, "cpu", 4, ("%s/hbc%d.st"):format(tmp, stage), nil, H .. extra)
        local whole = job(2, stage, "cpu", 4, ("%s/hbw%d.st"):format(tmp, stage), nil, H .. extra .. "ZORCH_OFFLOAD_BUCKET_COPY=0 ")
        tap.ok(equal_sd(want, got) and equal_sd(want, whole) and text:find("bucketed true", 1, true) ~= nil and
               (extra:find("PIN") == nil or text:find("pinned false, host_pinned 0 bytes", 1, true) ~= nil),
               ("stage %d %s: the host copy by bucket gives the weights without offload, bit for bit"):format(stage, extra))
      end
    end
    -- offload_param on GPU ranks: gathers read the slice into a host buffer
    -- and copy it to the group's (device) buffer, buckets come to the host to
    -- be added into the file, written shards leave the device through the
    -- host; ZORCH_TEST_HOOKS=offload_host runs those copies on CPU ranks
    for _, n in ipairs({1, 2, 3}) do
      local want = job(n, 3, "-", 4, ("%s/gs%d.st"):format(tmp, n), nil, "ZORCH_TEST_CLIP=0.05 ")
      local got = job(n, 3, tmp, 4, ("%s/gsp%d.st"):format(tmp, n), nil, H .. P .. "ZORCH_TEST_CLIP=0.05 ZORCH_TEST_CHUNK=1024 ")
      tap.ok(equal_sd(want, got), ("offload_param through host buffers (the GPU ranks' path), %d rank(s): the same weights"):format(n))
    end
    -- offload_param "cpu" on GPU ranks: the shard, its gradients and the
    -- moments in files in host memory (a tmpfs), gathers through host buffers
    -- as above; on a CPU rank (no offload_host test hook) nothing moves
    for _, n in ipairs({1, 2, 3}) do
      local want = job(n, 3, "-", 4, ("%s/hm%d.st"):format(tmp, n), nil, "ZORCH_TEST_CLIP=0.05 ")
      local got, text = job(n, 3, "cpu", 4, ("%s/hmc%d.st"):format(tmp, n), nil, H .. P .. "ZORCH_TEST_CLIP=0.05 ")
      local files = tonumber((text or ""):match("host_files (%d+) bytes, nvme 0 bytes")) or 0
      tap.ok(equal_sd(want, got) and files > 0,
             ("offload_param cpu on GPU ranks (emulated), %d rank(s): the same weights, %d bytes of files in host memory"):format(
               n, files))
    end
    do
      local want = job(2, 3, "-", 4, tmp .. "/hm0.st")
      local got, text = job(2, 3, "cpu", 4, tmp .. "/hm0c.st", nil, P)
      tap.ok(equal_sd(want, got) and text:find("host_files 0 bytes, nvme 0 bytes", 1, true) ~= nil,
             "offload_param cpu on CPU ranks: the shard stays where it is, the same weights")
    end
    tap.raises("offload_param cpu on a GPU rank without offload_optimizer is refused", function()
      zorch.Engine{zero_stage = 3, device = "cuda", offload_param = {device = "cpu"}}
    end, "offload_param device \"cpu\" on a GPU rank", "offload_optimizer")
    local wanth = job(2, 2, "-", 6, tmp .. "/hw.st")
    job(2, 2, "cpu", 3, tmp .. "/hh.st", tmp .. "/ck_host", H)
    tap.ok(equal_sd(wanth, job(2, 2, "cpu", 6, tmp .. "/hg.st", tmp .. "/ck_host resume", H)),
           "a host-copy run resumes from its checkpoint (the copy refreshed at load), bit for bit")
    local want = job(2, 3, "-", 6, tmp .. "/pw.st")
    job(2, 3, tmp, 3, tmp .. "/ph.st", tmp .. "/ck_param", P)
    local got = job(2, 3, "-", 6, tmp .. "/pgot.st", tmp .. "/ck_param resume")
    tap.ok(equal_sd(want, got), "a checkpoint taken with offload_param resumes without it, bit for bit")
    job(2, 3, "-", 3, tmp .. "/ph2.st", tmp .. "/ck_param2")
    local got2 = job(2, 3, tmp, 6, tmp .. "/pgot2.st", tmp .. "/ck_param2 resume", P)
    tap.ok(equal_sd(want, got2), "a checkpoint taken without offload resumes with offload_param, bit for bit")
  end
  -- clipping with offload (a tight clip, so it scales every step): the
  -- global norm from the file's gradient as its buckets were written, the
  -- factor applied as the optimizer's stream reads each chunk, bit for bit the
  -- in-memory clip; stages 1-2 clip in memory (only the moments on nvme)
  local function traffic(text)
    local r, w, a, norm = text:match("last step: read (%d+) bytes, wrote (%d+) bytes, read ahead (%d+) bytes, norm ([^,]+)")
    return tonumber(r), tonumber(w), tonumber(a), tonumber(norm)
  end
  local C = "ZORCH_TEST_CLIP=0.05 "
  for stage = 1, 3 do
    for n = 1, 2 do
      local env = C .. (stage == 3 and P .. "ZORCH_TEST_CHUNK=1024 " or "")
      local plain = job(n, stage, "-", 4, ("%s/cp%d%d.st"):format(tmp, stage, n), nil, C)
      local off, text = job(n, stage, tmp, 4, ("%s/co%d%d.st"):format(tmp, stage, n), nil, env)
      local _, _, _, norm = traffic(text)
      tap.ok(equal_sd(plain, off) and norm and norm > 0.05,
             ("stage %d, %d rank(s), clipped to 0.05 (norm %s)%s: the weights without offload, bit for bit"):format(
               stage, n, tostring(norm), stage == 3 and ", parameters on nvme" or ""))
    end
  end
  do -- the clip's factor costs no pass over the file: a step moves the same bytes clipped or not
    local _, on = job(2, 3, tmp, 4, tmp .. "/ct1.st", nil, P .. C)
    local _, off = job(2, 3, tmp, 4, tmp .. "/ct2.st", nil, P .. "ZORCH_TEST_CLIP=0 ")
    local r1, w1 = traffic(on)
    local r2, w2 = traffic(off)
    tap.ok(r1 and r1 == r2 and w1 == w2, ("a clipped step reads and writes what an unclipped one does (%s/%s and %s/%s bytes)"):format(
      tostring(r1), tostring(w1), tostring(r2), tostring(w2)))
  end
  -- the bucket parts written behind on a thread of their own while backward
  -- goes on (with 2 micro-batches a step: the second waits for the first's
  -- writes before it reads them back); ZORCH_OFFLOAD_WRITE_BEHIND=0 writes in line
  for _, accum in ipairs({"", "ZORCH_TEST_ACCUM=2 "}) do
    local wb, text = job(2, 3, tmp, 4, tmp .. "/wb1.st", nil, P .. accum)
    local inl = job(2, 3, tmp, 4, tmp .. "/wb2.st", nil, P .. accum .. "ZORCH_OFFLOAD_WRITE_BEHIND=0 ")
    local behind = tonumber(text:match("written behind (%d+) bytes"))
    tap.ok(equal_sd(job(2, 3, "-", 4, tmp .. "/wb0.st", nil, accum), wb) and equal_sd(wb, inl) and behind and behind > 0,
           ("offload_param nvme %s: bucket parts written behind (%s bytes on rank 0), the weights of the in-line writes and of no offload"):format(
             accum, tostring(behind)))
  end
  -- the gathers' reads ahead on every rank: the slice read on the read-ahead
  -- thread while the module before computes, the all-gather at the gather
  for _, n in ipairs({2, 3}) do
    local plain = job(n, 3, "-", 4, ("%s/ra%d.st"):format(tmp, n))
    local off, text = job(n, 3, tmp, 4, ("%s/rb%d.st"):format(tmp, n), nil, P)
    local _, _, ahead = traffic(text)
    tap.ok(equal_sd(plain, off) and ahead and ahead > 0,
           ("offload_param nvme, %d ranks: the gathers read ahead (%s bytes on rank 0's read-ahead thread), the same weights"):format(
             n, tostring(ahead)))
  end
  -- checkpoints: with offload at step 3, resumed without (and the other way) to step 6
  for stage = 2, 3 do
    local want = job(2, stage, "-", 6, tmp .. "/want.st")
    job(2, stage, tmp, 3, tmp .. "/half.st", tmp .. "/ck_off" .. stage)
    local got = job(2, stage, "-", 6, tmp .. "/got.st", tmp .. "/ck_off" .. stage .. " resume")
    tap.ok(equal_sd(want, got), ("stage %d: a checkpoint taken with offload resumes without it, bit for bit"):format(stage))
    job(2, stage, "-", 3, tmp .. "/half2.st", tmp .. "/ck_plain" .. stage)
    local got2 = job(2, stage, tmp, 6, tmp .. "/got2.st", tmp .. "/ck_plain" .. stage .. " resume")
    tap.ok(equal_sd(want, got2), ("stage %d: a checkpoint taken without offload resumes with it, bit for bit"):format(stage))
  end
end

tap.done()
