-- Real DeepSpeed and Accelerate configurations (tests/configs/corpus) on the
-- reference job: each trains two optimizer steps on one rank, or is refused with
-- a usage error (one message naming the key, exit status 2). The outcome of
-- every file is recorded in tests/configs/corpus/expected.tsv, so a change in
-- behaviour fails here. ZORCH_CORPUS_RECORD=1 rewrites that file from this run
-- (then scripts/corpus-table.lua remakes the table in docs/config.md).
-- All files run in this one process (models/simple_net.lua loaded as a chunk);
-- the refused ones are also run through the zorch command for their exit status.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"]

local DIR = "configs/corpus/"
local record = os.getenv("ZORCH_CORPUS_RECORD") == "1"
local tmp = tap.tmpdir()
local job = assert(loadfile("../models/simple_net.lua"))

local files = {}
for name in io.popen("ls " .. DIR):read("a"):gmatch("[^\n]+") do
  if name:match("%.json$") or name:match("%.ya?ml$") then files[#files + 1] = name end
end
table.sort(files)
tap.ok(#files >= 60, ("%d configuration files in the corpus"):format(#files))

-- The sizes a file sets for the batch: the world size they imply when all three are given.
local function implied_world(text)
  local ok, ds = pcall(Z.json.decode, text, true)
  if not ok or type(ds) ~= "table" then return nil end
  local tb, mb, ga = ds.train_batch_size, ds.train_micro_batch_size_per_gpu, ds.gradient_accumulation_steps
  if math.type(tb) == "integer" and math.type(mb) == "integer" and math.type(ga) == "integer" and mb * ga > 0 and
     tb % (mb * ga) == 0 and tb // (mb * ga) > 1 then
    return tb // (mb * ga)
  end
end

-- One run of the reference job, in this process: "trains" and what the engine
-- did, or "refused" and the usage error's message; anything else is a failure.
local function run(name)
  local engine, errtext = nil, {}
  local real_engine, real_print, real_stderr = zorch.Engine, print, io.stderr
  zorch.Engine = function(...) engine = real_engine(...); return engine end
  print = function() end
  io.stderr = {write = function(_, ...) for _, s in ipairs({...}) do errtext[#errtext + 1] = tostring(s) end end}
  local save = tmp .. "/model.safetensors"
  os.remove(save)
  local real_arg = arg
  arg = {[0] = "../models/simple_net.lua", "--config", DIR .. name, "--steps", "2", "--samples", "256", "--quiet",
         "--save", save}
  local ok, err = pcall(job, table.unpack(arg))
  zorch.Engine, print, io.stderr, arg = real_engine, real_print, real_stderr, real_arg
  if not ok then
    if zorch.flags.is_usage_error(err) then return "refused", (err.message:gsub("^" .. DIR:gsub("%p", "%%%0"), "")) end
    return "failed", tostring(err)
  end
  local c = engine:config()
  local saved = io.open(save) and zorch.load(save)
  local finite = saved ~= nil
  for _, t in pairs(saved or {}) do local s = t:float():abs():sum():item(); finite = finite and s - s == 0 end
  -- (an fp16 step that overflows is skipped, as DeepSpeed skips it)
  local skipped = engine.scaler.skipped
  if engine.steps ~= 2 or not finite then
    return "failed", ("%d steps, saved weights %s"):format(engine.steps, finite and "finite" or "missing or not finite")
  end
  local groups = Z._unimplemented_groups(engine.unimplemented)
  local counts = {}
  for _, g in ipairs(groups) do
    counts[#counts + 1] = g.kind == "changes training" and ("changes training: " .. table.concat(g.keys, " "))
                          or ("%d %s"):format(#g.keys, g.kind)
  end
  local opt = getmetatable(engine.user_opt).__name or "?"
  return "trains", ("stage %d, %s, micro %d x accum %d, %s%s%s%s%s"):format(c.zero_stage, c.precision,
    engine.loader.batch_size, c.gradient_accumulation_steps, opt, c.scheduler and (", " .. c.scheduler.type) or "",
    c.gradient_clipping > 0 and (", clip %g"):format(c.gradient_clipping) or "",
    skipped > 0 and (", %d step%s skipped (fp16 overflow at loss scale 2^%d)"):format(skipped, skipped == 1 and "" or "s",
      c.loss_scale > 0 and math.floor(math.log(c.loss_scale, 2)) or c.initial_scale_power) or "",
    #counts > 0 and ("; ignored: " .. table.concat(counts, "; ")) or "")
end

-- expected.tsv: file, outcome, detail (one line each, tab-separated)
local expected = {}
for line in io.lines(DIR .. "expected.tsv") do
  local f, o, d = line:match("^([^\t]+)\t([^\t]+)\t(.*)$")
  if f and f ~= "file" then expected[f] = {o, d} end
end

local t0 = zorch.clock()
local results = {}
for _, name in ipairs(files) do
  local outcome, detail = run(name)
  detail = detail:gsub("[\t\n]", " ")
  local w = implied_world(io.open(DIR .. name):read("a"))
  if w and outcome == "refused" then detail = detail .. (" (the batch sizes are for %d ranks)"):format(w) end
  results[#results + 1] = {name, outcome, detail}
  local want = expected[name]
  tap.ok(outcome ~= "failed" and want and want[1] == outcome and want[2] == detail,
         ("%s: %s: %s%s"):format(name, outcome, detail, want and (want[1] ~= outcome or want[2] ~= detail) and
           ("\n#   recorded: %s: %s"):format(want[1], want[2]) or (want and "" or " (not recorded)")))
end
local elapsed = zorch.clock() - t0
tap.ok(elapsed < 60, ("the corpus ran in %.1f s"):format(elapsed))

-- the command: refused files exit with status 2 and one message, no traceback
local bin = tap.zorch()
local checked = 0
for _, r in ipairs(results) do
  if r[2] == "refused" then
    local out, ok, _, status = (function()
      local p = io.popen(("%s ../models/simple_net.lua --config %s --steps 2 --samples 64 --quiet --save %s/x.safetensors 2>&1; echo \"status $?\""):format(
        bin, DIR .. r[1], tmp))
      local text = p:read("a")
      p:close()
      return text, nil, nil, tonumber(text:match("status (%d+)%s*$"))
    end)()
    checked = checked + 1
    tap.ok(status == 2 and not out:find("traceback", 1, true) and out:find(r[1], 1, true),
           ("zorch refuses %s with status 2 and its message (status %s)"):format(r[1], tostring(status)))
  end
end
tap.ok(checked > 0, ("%d refused files checked through the zorch command"):format(checked))

-- a file's global batch at another world size: train_batch_size 24 with micro batch 3
-- is 8 accumulation steps on one rank and 4 on each of two, the same weights
do
  local f = DIR .. "deepspeed-squad-deepspeed_bsz24_fp32_config.json"
  local common = ("../models/simple_net.lua --config %s --steps 3 --samples 240 --quiet"):format(f)
  local one, two = tmp .. "/one.safetensors", tmp .. "/two.safetensors"
  local out1, ok1 = tap.run(("%s %s --save %s"):format(bin, common, one))
  local out2, ok2 = tap.run(("%s launch -n 2 %s --save %s"):format(bin, common, two))
  local worst = math.huge
  if ok1 and ok2 then
    local a, b = zorch.load(one), zorch.load(two)
    worst = 0
    for k, v in pairs(a) do worst = math.max(worst, ((v - b[k]):abs() / (v:abs() + 1e-3)):max():item()) end
  else
    print("# " .. (out1 .. out2):gsub("\n", "\n# "))
  end
  tap.ok(worst <= 1e-5, ("%s at 2 ranks trains as at one (worst relative difference %.3g)"):format(f, worst))
end

if record then
  local f = assert(io.open(DIR .. "expected.tsv", "w"))
  f:write("file\toutcome\tdetail\n")
  for _, r in ipairs(results) do f:write(table.concat(r, "\t"), "\n") end
  f:close()
  print("# recorded " .. DIR .. "expected.tsv")
end
os.execute("rm -rf " .. tmp)

-- Accelerate's and TRL's templates run unchanged on 2 ranks, as `accelerate launch`
-- would run them
do
  local ran, dir = 0, tap.tmpdir()
  for _, f in ipairs(files) do
    if f:match("^accelerate%-zero_stage") or f:match("^trl%-deepspeed_zero") then
      local out, ok = tap.run(("%s launch -n 2 ../models/simple_net.lua --config %s%s --steps 2 --samples 256 --quiet --save %s/l2.safetensors"):format(
        bin, DIR, f, dir))
      if not ok then print((("# " .. out):gsub("\n", "\n# "))) end
      tap.ok(ok, ("%s trains two steps on 2 ranks"):format(f))
      ran = ran + 1
    end
  end
  tap.ok(ran >= 6, ("%d templates run on 2 ranks"):format(ran))
  os.execute("rm -rf " .. dir)
end

tap.done()
