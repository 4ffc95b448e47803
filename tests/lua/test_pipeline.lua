-- Pipeline parallelism (nn.Pipeline): the partition, the stages of one
-- process, and under zorch launch: an MLP with tied first and last weights
-- trained over 2 and 4 stages (1F1B and GPipe, with data parallelism and
-- ZeRO stage 1 beside it) gives the losses and weights of one process; the
-- measured bubble of 1F1B on stages of fixed times (sleeps) is within 10% of
-- (P - 1) / (M + P - 1); GPT-2 at (pipeline 2, data 2) and (pipeline 4) gives
-- the losses of 20 steps and the final weights of one process.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn
local bin = tap.zorch()

-- ---- one process ------------------------------------------------------------------------------

local function same_list(a, b) return table.concat(a, ",") == table.concat(b, ",") end
tap.ok(same_list(nn.Pipeline.balanced({1, 1, 1, 1}, 2), {1, 3, 5}), "balanced: equal layers in equal halves")
tap.ok(same_list(nn.Pipeline.balanced({10, 1, 1, 1, 10}, 3), {1, 2, 5, 6}), "balanced: heavy ends get stages of their own")
tap.ok(same_list(nn.Pipeline.balanced({5, 0, 0, 5}, 2), {1, 2, 5}) or same_list(nn.Pipeline.balanced({5, 0, 0, 5}, 2), {1, 3, 5})
  or same_list(nn.Pipeline.balanced({5, 0, 0, 5}, 2), {1, 4, 5}), "balanced: layers without parameters go either way")

tap.raises("an unknown option", function() nn.Pipeline{layers = {nn.Tanh()}, stages = 2} end, "nn.Pipeline", "unknown option 'stages'")
tap.raises("no layers", function() nn.Pipeline{layers = {}} end, "layers must be a non-empty list")
tap.raises("a bad schedule", function() nn.Pipeline{layers = {nn.Tanh()}, schedule = "zb"} end, "schedule must be")
tap.raises("a bad layer", function() nn.Pipeline{layers = {42}} end, "layer 1 is a number")
tap.raises("a build that makes no module", function() nn.Pipeline{layers = {{build = function() return 1 end}}} end,
  "layer 1: build returned a number")
tap.raises("a partition that does not start at layer 1", function()
  nn.Pipeline{layers = {nn.Tanh(), nn.Tanh()}, partition = {2}} end, "first layer of each stage")
tap.raises("tied parameters of different shapes", function()
  nn.Pipeline{layers = {nn.Linear(2, 3), nn.Linear(3, 3)}, tied = {{"0.weight", "1.weight"}}} end,
  "differ in shape", "(3, 2)", "(3, 3)")
tap.raises("a layer named \"\" holding a tensor of its own", function()
  local M = nn.Module:extend "OwnTensor"
  function M:init() self.w = nn.Parameter(zorch.ones(1)) end
  nn.Pipeline{layers = {{name = "", build = function() return M() end}}} end, "layer 1 is named", "'w' is a tensor")
tap.raises("train_batch without a loss", function()
  nn.Pipeline{layers = {nn.Tanh()}}:train_batch(function() return zorch.ones(1) end) end, "no loss function")
tap.raises("train_batch with a bad engine", function()
  nn.Pipeline{layers = {nn.Tanh()}, loss = zorch.sum}:train_batch(function() return zorch.ones(1) end, 3) end,
  "argument 2 must be a zorch.Engine")

tap.raises("train_batch with an engine prepared with another model", function()
  local e, other = zorch.Engine{}, nn.Linear(2, 2)
  e:prepare(other, nil, zorch.optim.SGD(other:parameters(), {lr = 0.1}))
  nn.Pipeline{layers = {nn.Linear(2, 2)}, loss = zorch.sum}:train_batch(function() return zorch.ones(2) end, e)
end, "prepare the engine with this pipeline first")

-- one stage: nn.Sequential's names and forward; the tied weights one tensor;
-- train_batch's gradients the mean of the micro-batches'
do
  zorch.manual_seed(3)
  local a, b = nn.Linear(4, 4), nn.Linear(4, 4)
  local pipe = nn.Pipeline{layers = {a, nn.Tanh(), b}, tied = {{"0.weight", "2.weight"}},
                           loss = function(y, t) return zorch.mse_loss(y, t) end, micro_batches = 3}
  local names = {}
  for k in pairs(pipe:state_dict()) do names[#names + 1] = k end
  table.sort(names)
  tap.ok(same_list(names, {"0.bias", "0.weight", "2.bias", "2.weight"}), "a stage's state dict has the model's names")
  tap.ok(rawequal(a.weight, b.weight) and #pipe:parameters() == 3, "tied weights on one stage are one tensor")
  local xs, ts = {}, {}
  for m = 1, 3 do xs[m], ts[m] = zorch.randn(2, 4), zorch.randn(2, 4) end
  local loss = pipe:train_batch(function(m) return xs[m], ts[m] end)
  local got = {}
  for i, p in ipairs(pipe:parameters()) do got[i] = p.grad:clone(); p.grad = nil end
  local want = 0
  for m = 1, 3 do
    local l = zorch.mse_loss(b(zorch.tanh(a(xs[m]))), ts[m])
    want = want + l:item() / 3
    (l * (1 / 3)):backward()
  end
  local worst = 0
  for i, p in ipairs(pipe:parameters()) do worst = math.max(worst, (p.grad - got[i]):abs():max():item()) end
  tap.ok(math.abs(loss - want) < 1e-6 and worst < 1e-6,
    ("train_batch on one stage: the mean loss and the accumulated gradients (largest difference %.2g)"):format(worst))
  pipe:to("float64")
  tap.ok(rawequal(pipe.ties[1].param, a.weight) and a.weight:dtype() == "float64" and rawequal(a.weight, b.weight),
    "after Module:to the tie finds the moved tensor")
  local r = pipe:report()
  tap.ok(#r.stages == 1 and r.ideal == 0 and r.stages[1].in_flight == 1, "one stage: no bubble in theory, one micro-batch in flight")
end

-- ---- ranks -------------------------------------------------------------------------------------

if not tap.has_mpi(bin) then
  print("# the runs over ranks are skipped: zorch was built without MPI")
  tap.done()
  return
end
local dir = tap.tmpdir()

-- the losses ("loss S L norm N" lines) and the output of a run
local function run(cmd)
  local out, ok = tap.run(cmd)
  local got = {}
  for s, l, n in out:gmatch("loss (%d+) (%S+) norm (%S+)") do got[tonumber(s)] = {tonumber(l), tonumber(n)} end
  if not ok then print("# " .. out:gsub("\n", "\n# ")) end
  return got, ok, out
end
local function rel(a, b) return math.abs(a - b) / math.max(math.abs(b), 1e-30) end
-- The largest relative difference between two state dicts' tensors (the
-- norm of the difference over the norm: single elements of a model trained
-- with Adam drift apart more, as they do between one process and plain data
-- parallelism), and whether they hold the same names. The keys' bias of
-- GPT-2's attention (the middle third of c_attn.bias) has a gradient of zero
-- in exact arithmetic (a constant added to every score of a query), so Adam
-- steps it by its rounding noise, differently for different summation orders:
-- it is held to staying near zero instead.
local function weights(a, b)
  local worst, names = 0, true
  local function norm(t) return math.sqrt((t * t):sum():item()) end
  local function diff(x, y) return norm(x - y) / math.max(norm(x), 1e-30) end
  for k, v in pairs(a) do
    if b[k] == nil then names = false
    elseif k:match("c_attn%.bias$") then
      local C = v:size(1) // 3
      worst = math.max(worst, diff(v:narrow(1, 1, C), b[k]:narrow(1, 1, C)),
        diff(v:narrow(1, 2 * C + 1, C), b[k]:narrow(1, 2 * C + 1, C)))
      local kb = math.max(v:narrow(1, C + 1, C):abs():max():item(), b[k]:narrow(1, C + 1, C):abs():max():item())
      if kb > 1e-4 then worst = math.huge end
    else worst = math.max(worst, diff(v, b[k])) end
  end
  for k in pairs(b) do names = names and a[k] ~= nil end
  return worst, names
end

do
  local ref, ok = run(("%s lua/pipe_worker.lua train 1f1b 1 0 %s/ref"):format(bin, dir))
  tap.ok(ok and #ref == 4, "the MLP on one process")
  for _, c in ipairs({{2, "1f1b", 2, 0}, {4, "1f1b", 2, 1}, {4, "gpipe", 4, 0}, {4, "1f1b", 4, 1}}) do
    local n, sched, P, stage = c[1], c[2], c[3], c[4]
    local what = ("%d stages (%s) x data %d, ZeRO stage %d"):format(P, sched, n // P, stage)
    local out = ("%s/p%d_%s_%d"):format(dir, P, sched, stage)
    local got, ok2, o = run(("%s launch -n %d lua/pipe_worker.lua train %s %d %d %s"):format(bin, n, sched, P, stage, out))
    local ps, ms = o:match("stages parameters ([%d ]+) memory ([%d ]+)")
    local np, nm, sum = 0, 0, 0
    for v in (ps or ""):gmatch("%d+") do np, sum = np + 1, sum + tonumber(v) end
    for v in (ms or ""):gmatch("%d+") do nm = nm + (tonumber(v) > 0 and 1 or 0) end
    -- (6x6 + 6 + 8x6 + 8 + 6x8 + 6 + 6 for the head's bias; the tied 6x6 weight on the first and last stages)
    tap.ok(np == P and nm == P and sum == 158 + 36, ("%s: the report counts each stage's parameters (%s) and bytes (%s)"):format(
      what, tostring(ps), tostring(ms)))
    local worst = 0
    for s = 1, 4 do
      worst = math.max(worst, got[s] and ref[s] and math.max(rel(got[s][1], ref[s][1]), rel(got[s][2], ref[s][2])) or math.huge)
    end
    tap.ok(ok and ok2 and worst <= 1e-5,
      ("%s: the losses and clipped gradient norms of one process (worst relative difference %.2g)"):format(what, worst))
    if ok and ok2 and out then
      local w, names = weights(zorch.load(dir .. "/ref"), zorch.load(out))
      tap.ok(names and w <= 1e-5, ("%s: the weights of one process (largest difference %.2g)"):format(what, w))
    end
  end
end

-- the bubble: stages whose forward sleeps 50 ms and backward 100 ms
for _, c in ipairs({{4, 8}, {2, 4}}) do
  local P, M = c[1], c[2]
  local out, ok = tap.run(("%s launch -n %d lua/pipe_worker.lua bubble 1f1b %d 0.05 0.1"):format(bin, P, M))
  local got, ideal = out:match("bubble (%S+) (%S+)")
  got, ideal = tonumber(got), tonumber(ideal)
  tap.ok(ok and got and math.abs(ideal - (P - 1) / (M + P - 1)) < 1e-4 and rel(got, ideal) <= 0.1,
    ("1F1B at %d stages, %d micro-batches: measured bubble %s within 10%% of (P-1)/(M+P-1) = %.4f"):format(P, M,
      tostring(got), (P - 1) / (M + P - 1)) .. (ok and "" or ": " .. out))
  if P == 4 then
    local f = out:match("in_flight ([%d ]+)")
    tap.ok(f == "4 3 2 1", "1F1B holds the activations of P - stage micro-batches at most (" .. tostring(f) .. ")")
    local out2 = tap.run(("%s launch -n %d lua/pipe_worker.lua bubble gpipe %d 0.01 0.02"):format(bin, P, M))
    local f2 = out2:match("in_flight ([%d ]+)")
    tap.ok(f2 == "8 8 8 8", "GPipe holds all M micro-batches' activations (" .. tostring(f2) .. ")")
  end
end

-- GPT-2 (the small model of golden/gpt2_init.safetensors): 20 steps
do
  local TEXT = "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt"
  local args = "--init golden/gpt2_init.safetensors --heads 4 --steps 20 --lr 3e-3 --min-lr 3e-4 --warmup 3 " ..
    "--beta2 0.99 --weight-decay 1 --clip 1 --no-shuffle --val-batches 2 --data " .. TEXT
  local function gpt(launch, extra, out)
    local o, ok = tap.run(("%s ../models/gpt2.lua %s %s%s"):format(launch, args, extra, out and " --save-hf " .. out or ""))
    local got = {}
    for s, l in o:gmatch("step (%d+)/%d+ | loss (%S+)") do got[tonumber(s)] = tonumber(l) end
    got.val = tonumber(o:match("val loss (%S+)"))
    if not ok then print("# " .. o:gsub("\n", "\n# ")) end
    return got, ok, o
  end
  local ref, ok = gpt(bin, "--batch-size 4 --accum 2", dir .. "/gref")
  tap.ok(ok and #ref == 20, "GPT-2 on one process, 20 steps")
  for _, c in ipairs({{2, "--batch-size 2 --accum 2 --pipeline-parallel 2 --zero-stage 1", "pipeline 2 x data 2, ZeRO stage 1"},
                      {4, "--batch-size 4 --accum 2 --pipeline-parallel 4 --schedule gpipe", "pipeline 4 (GPipe)"},
                      -- (the whole model is not written with tensor parallelism: losses only)
                      {22, "--batch-size 4 --accum 2 --pipeline-parallel 2 --tensor-parallel 2 --zero-stage 1",
                       "pipeline 2 x tensor 2, ZeRO stage 1", nosave = true}}) do
    local out = not c.nosave and dir .. "/g" .. c[1] or nil
    local got, ok2, o = gpt(bin .. " launch -n 4", c[2], out)
    local worst = 0
    for s = 1, 20 do worst = math.max(worst, got[s] and ref[s] and rel(got[s], ref[s]) or math.huge) end
    tap.ok(ok and ok2 and worst <= 1e-5, ("GPT-2, %s: the losses of 20 steps of one process (worst relative difference %.2g)"):format(
      c[3], worst))
    tap.ok(ok2 and got.val and ref.val and rel(got.val, ref.val) <= 1e-5, ("GPT-2, %s: the validation loss"):format(c[3]))
    tap.ok(ok2 and o:find("bubble", 1, true) ~= nil, ("GPT-2, %s: the step line reports the bubble"):format(c[3]))
    if ok and ok2 and out then
      local w, names = weights(zorch.load(dir .. "/gref/model.safetensors"), zorch.load(out .. "/model.safetensors"))
      tap.ok(names and w <= 1e-5, ("GPT-2, %s: the final weights of one process (largest difference %.2g)"):format(c[3], w))
    end
  end
end

-- a checkpoint taken at (pipeline 2, tensor 2) after step 10 resumes on one
-- process, at (data 4) and at (pipeline 2, tensor 2): steps 11-20 as the
-- uninterrupted run; zorch consolidate writes the whole model
do
  local TEXT = "/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt"
  local args = "--init golden/gpt2_init.safetensors --heads 4 --steps 20 --lr 3e-3 --min-lr 3e-4 --warmup 3 " ..
    "--beta2 0.99 --weight-decay 1 --clip 1 --no-shuffle --val-batches 2 --accum 2 --data " .. TEXT
  local function losses(o)
    local got = {}
    for st, l in o:gmatch("step (%d+)/%d+ | loss (%S+)") do got[tonumber(st)] = tonumber(l) end
    return got
  end
  local ck = dir .. "/ck3d"
  local o, ok = tap.run(("%s launch -n 4 ../models/gpt2.lua %s --batch-size 4 --pipeline-parallel 2 --tensor-parallel 2 " ..
    "--zero-stage 1 --checkpoint-dir %s --checkpoint-every 10"):format(bin, args, ck))
  local ref = losses(o)
  tap.ok(ok and ref[20], "(pipeline 2, tensor 2) with checkpoints every 10 steps" .. (ok and "" or ": " .. o))
  -- the final weights: the step-20 checkpoint consolidated, against one process's
  local o1, ok1 = tap.run(("%s ../models/gpt2.lua %s --batch-size 4 --checkpoint-dir %s/ck1"):format(bin, args, dir))
  local _, okc1 = tap.run(("%s consolidate %s/ck1 %s/w1.safetensors"):format(bin, dir, dir))
  local _, okc4 = tap.run(("%s consolidate %s %s/w4.safetensors"):format(bin, ck, dir))
  if ok and ok1 and okc1 and okc4 then
    local a, b = zorch.load(dir .. "/w1.safetensors"), zorch.load(dir .. "/w4.safetensors")
    -- (the last stage's tied copy is saved as lm_head.weight: it must be wte's)
    for _, t in ipairs({a, b}) do
      if t["lm_head.weight"] and (t["lm_head.weight"] - t["wte.weight"]):abs():max():item() == 0 then
        t["lm_head.weight"] = nil
      end
    end
    local w, names = weights(a, b)
    tap.ok(names and w <= 1e-5, ("GPT-2, pipeline 2 x tensor 2: the final weights of one process (largest " ..
      "difference %.2g of a tensor's norm)"):format(w))
  else
    tap.ok(false, "GPT-2, pipeline 2 x tensor 2: the final weights: " .. o1)
  end
  -- back to the step-10 checkpoint: the later one goes
  local f = io.open(ck .. "/latest")
  local last = f and f:read("l")
  if f then f:close() end
  local ten
  local p = io.popen("ls " .. ck)
  for name in p:lines() do if name:match("^step10@") then ten = name end end
  p:close()
  if last and ten then
    os.execute(("rm -rf %s/%s"):format(ck, last))
    f = io.open(ck .. "/latest", "w"); f:write(ten, "\n"); f:close()
  end
  for _, c in ipairs({{"", "--batch-size 4", "one process"}, {"launch -n 4", "--batch-size 1", "data 4"},
                      {"launch -n 4", "--batch-size 4 --pipeline-parallel 2 --tensor-parallel 2 --zero-stage 1",
                       "pipeline 2 x tensor 2"}}) do
    local o2, ok2 = tap.run(("%s %s ../models/gpt2.lua %s %s --resume %s"):format(bin, c[1], args, c[2], ck))
    local got, worst = losses(o2), 0
    for st = 11, 20 do worst = math.max(worst, got[st] and ref[st] and rel(got[st], ref[st]) or math.huge) end
    tap.ok(ok and ok2 and ten and o2:find("resumed from .* at step 10") and worst <= 1e-6,
      ("a (pipeline 2, tensor 2) checkpoint resumes at %s: steps 11-20 as the uninterrupted run (worst %.2g)"):format(
        c[3], worst) .. (ok2 and "" or ": " .. o2))
  end
  local o3, ok3 = tap.run(("%s consolidate %s %s/full.safetensors"):format(bin, ck, dir))
  local full = ok3 and zorch.load(dir .. "/full.safetensors")
  tap.ok(full and full["wte.weight"] and full["wte.weight"].shape[1] == 256 and full["h.0.attn.c_attn.weight"].shape[1] == 192,
    "zorch consolidate writes the whole model from the (pipeline 2, tensor 2) checkpoint" .. (ok3 and "" or ": " .. o3))
end

os.execute("rm -rf " .. dir)
tap.done()
