-- Checkpoints: resuming at another world size and ZeRO stage continues exactly
-- like an uninterrupted run; a half-written checkpoint never replaces the last
-- good one; corrupt, truncated and mismatched checkpoints are refused by name.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local function worst(a, b)
  local w = 0
  for k, v in pairs(b) do w = math.max(w, ((a[k] - v):abs() / (v:abs() + 1e-3)):max():item()) end
  return w
end
local net = "../models/simple_net.lua --samples 400 --quiet"
local has_mpi = tap.has_mpi(bin)

-- uninterrupted: global batch 32, 50 steps
local ref = tmp .. "/ref.safetensors"
tap.ok(select(2, run(("env %s %s --batch-size 32 --steps 50 --save %s"):format(bin, net, ref))), "the uninterrupted run")
local want = zorch.load(ref)

-- one process, stopped at 30 and resumed: bit for bit
local c1 = tmp .. "/c1"
run(("env %s %s --batch-size 32 --steps 30 --checkpoint-dir %s --save %s/unused.safetensors"):format(bin, net, c1, tmp))
local out1 = tmp .. "/one.safetensors"
local text, good = run(("env %s %s --batch-size 32 --steps 50 --resume %s --save %s"):format(bin, net, c1, out1))
local w = good and worst(zorch.load(out1), want) or math.huge
tap.ok(w == 0, ("stopped at 30 and resumed in one process: identical (worst %.2g)"):format(w))

if has_mpi then
  -- 2 ranks at stage 2, resumed on 4 ranks at stage 3 (per-rank batches 16 and 8)
  local c2 = tmp .. "/c2"
  text, good = run(("env %s launch -n 2 %s --zero-stage 2 --batch-size 16 --steps 30 --checkpoint-dir %s --save %s/unused.safetensors"):format(bin, net, c2, tmp))
  tap.ok(good, "2 ranks, stage 2, checkpoint at step 30")
  local out4 = tmp .. "/four.safetensors"
  text, good = run(("env %s launch -n 4 %s --zero-stage 3 --batch-size 8 --steps 50 --resume %s --save %s"):format(
    bin, net, c2, out4))
  w = good and worst(zorch.load(out4), want) or math.huge
  tap.ok(w <= 1e-5, ("resumed on 4 ranks at stage 3 equals the uninterrupted run (worst %.2g)"):format(w))
  -- 2 ranks at stage 1, resumed on 4 ranks at stage 3
  local c5 = tmp .. "/c5"
  run(("env %s launch -n 2 %s --zero-stage 1 --batch-size 16 --steps 30 --checkpoint-dir %s --save %s/unused.safetensors"):format(bin, net, c5, tmp))
  local out3 = tmp .. "/three.safetensors"
  text, good = run(("env %s launch -n 4 %s --zero-stage 3 --batch-size 8 --steps 50 --resume %s --save %s"):format(
    bin, net, c5, out3))
  w = good and worst(zorch.load(out3), want) or math.huge
  tap.ok(w <= 1e-5, ("stage 1 on 2 ranks resumed at stage 3 on 4 ranks (worst %.2g)"):format(w))
else
  tap.ok(true, "# SKIP zorch was built without MPI")
end

-- consolidation: one safetensors file, equal to the live model, readable by PyTorch
do
  local c3, live, cons = tmp .. "/c3", tmp .. "/live.safetensors", tmp .. "/cons.safetensors"
  local launch = has_mpi and ("launch -n 3 ") or ""
  text, good = run(("env %s %s%s --zero-stage 3 --batch-size 8 --steps 20 --checkpoint-dir %s --save %s"):format(
    bin, launch, net, c3, live))
  text, good = run(("env %s consolidate %s %s"):format(bin, c3, cons))
  tap.ok(good and text:find("consolidated 4 parameters", 1, true), "zorch consolidate writes the state dict")
  w = good and worst(zorch.load(cons), zorch.load(live)) or math.huge
  tap.ok(w == 0, "the consolidated weights equal the live model's (stage 3 state dict gathered)")
  if os.execute("python3 -c 'import torch, safetensors' 2>/dev/null") then
    tap.ok(os.execute(("python3 -c \"from safetensors.torch import load_file; d = load_file('%s'); " ..
      "assert sorted(d) == ['fc1.bias', 'fc1.weight', 'fc2.bias', 'fc2.weight'] and tuple(d['fc1.weight'].shape) == (20, 10)\""):format(cons)),
      "PyTorch's safetensors loads the consolidated file")
  else
    tap.ok(true, "# SKIP python3 with torch and safetensors is not installed")
  end
  text, good = run(("env %s consolidate %s %s bfloat16"):format(bin, c3, cons))
  tap.ok(good and zorch.load(cons)["fc2.weight"]:dtype() == "bfloat16", "consolidate can write bfloat16")
  -- random mutations of the manifest never crash the loader
  local mpath = c3 .. "/" .. io.open(c3 .. "/latest"):read("a") .. "/manifest.json"
  local orig = io.open(mpath):read("a")
  local refused, crashed = 0, 0
  for k = 1, 40 do
    local pos = (k * 7919) % #orig + 1
    local h = io.open(mpath, "w")
    h:write(orig:sub(1, pos - 1) .. string.char((orig:byte(pos) + k) % 256) .. orig:sub(pos + 1))
    h:close()
    if k % 2 == 0 then -- half of them with a matching manifest.hash, so the fields' checks see them
      h = io.open(mpath:gsub("json$", "hash"), "w")
      h:write(Z._file_hash(mpath))
      h:close()
    end
    local ph = io.popen(("env %s consolidate %s %s/fuzz.safetensors 2>&1"):format(bin, c3, tmp))
    local msg = ph:read("a")
    local ok2, how, code = ph:close()
    if not ok2 then
      refused = refused + 1
      -- an error is a message and exit status 1, never a signal (or 128+signal from the shell)
      -- and a message about the checkpoint, not an internal Lua error
      if how ~= "exit" or code ~= 1 or not msg:find("zorch:", 1, true) or msg:find("attempt to", 1, true) then
        crashed = crashed + 1
        io.stderr:write("# ", (msg:gsub("\n", "\n# ")), "\n")
      end
    end
  end
  tap.ok(crashed == 0, ("40 mutated manifests: %d refused with a message, %d crashed"):format(refused, crashed))
  local h = io.open(mpath, "w")
  h:write(orig)
  h:close()
  h = io.open(mpath:gsub("json$", "hash"), "w")
  h:write(Z._file_hash(mpath))
  h:close()
end

-- a checkpoint interrupted while being written leaves the last good one in place
local latest = io.open(c1 .. "/latest"):read("a")
os.execute(("mkdir -p %s/.step99.partial && echo junk > %s/.step99.partial/rank0.safetensors"):format(c1, c1))
tap.ok(io.open(c1 .. "/latest"):read("a") == latest, "a partial checkpoint does not move latest")
local out5 = tmp .. "/five.safetensors"
text, good = run(("env %s %s --batch-size 32 --steps 50 --resume %s --save %s"):format(bin, net, c1, out5))
tap.ok(good and worst(zorch.load(out5), want) == 0, "and the last good one still resumes")

-- a process that dies in the middle of save_checkpoint (after writing its shard,
-- before the manifest) leaves latest on the previous checkpoint, which resumes
do
  local crash = tmp .. "/crash.lua"
  local cf = io.open(crash, "w")
  cf:write(([[
local zorch = require "zorch"
local save, saves = zorch.save, 0
zorch.save = function(t, path)
  save(t, path)
  if path:find("/rank%%d+%%.safetensors$") then os.exit(9) end -- dies mid-checkpoint
end
arg = {"--samples", "400", "--quiet", "--batch-size", "32", "--steps", "50", "--resume", "%s", "--checkpoint-dir", "%s",
       "--checkpoint-every", "40", "--save", "%s"}
dofile("../models/simple_net.lua")
]]):format(c1, c1, tmp .. "/crash-model.safetensors"))
  cf:close()
  local _, crashed_ok = run(("env %s %s"):format(bin, crash))
  tap.ok(not crashed_ok and io.open(c1 .. "/latest"):read("a") == latest,
         "a crash inside save_checkpoint leaves latest on the previous checkpoint")
  local out6 = tmp .. "/six.safetensors"
  text, good = run(("env %s %s --batch-size 32 --steps 50 --resume %s --save %s"):format(bin, net, c1, out6))
  tap.ok(good and worst(zorch.load(out6), want) == 0, "which still resumes exactly")
end

-- corrupt, truncated and mismatched checkpoints are refused, naming the problem
local step = c1 .. "/" .. latest
local f = io.open(step .. "/rank0.safetensors", "rb")
local bytes = f:read("a")
f:close()
local function try(desc, setup, ...)
  setup()
  local t, g = run(("env %s %s --batch-size 32 --steps 50 --resume %s --save %s/x.safetensors"):format(bin, net, c1, tmp))
  local found = not g
  for _, p in ipairs({...}) do found = found and t:find(p, 1, true) ~= nil end
  tap.ok(found, desc .. ": " .. (t:match("load_checkpoint[^\n]*") or t:sub(1, 200)))
end
try("a flipped byte in a shard is caught by its hash", function()
  local g = io.open(step .. "/rank0.safetensors", "wb")
  g:write(bytes:sub(1, 200) .. string.char((bytes:byte(201) + 1) % 256) .. bytes:sub(202))
  g:close()
end, "rank0.safetensors", "corrupt")
try("a missing shard is named", function() os.remove(step .. "/rank0.safetensors") end, "rank0.safetensors")
local g = io.open(step .. "/rank0.safetensors", "wb")
g:write(bytes)
g:close()
local mf = io.open(step .. "/manifest.json"):read("a")
try("a truncated manifest is refused", function()
  local h = io.open(step .. "/manifest.json", "wb")
  h:write(mf:sub(1, #mf // 2))
  h:close()
end, "manifest.json")
local h = io.open(step .. "/manifest.json", "wb")
h:write(mf)
h:close()
text, good = run(("env %s %s --batch-size 32 --steps 50 --hidden 21 --resume %s --save %s/x.safetensors"):format(
  bin, net, c1, tmp))
tap.ok(not good and text:find("fc1.weight", 1, true) and text:find("(21, 10)", 1, true),
       "another model is refused, naming the parameter and shapes")
text, good = run(("env %s %s --batch-size 16 --steps 50 --resume %s --save %s/x.safetensors"):format(bin, net, c1, tmp))
tap.ok(not good and text:find("global batch", 1, true), "another global batch is refused (the data position would differ)")
if has_mpi then
  -- a model smaller than one shard: rank 1's range is all padding, with no
  -- piece in any checkpoint; resuming there starts its (empty) state at zero
  local tiny = "../models/simple_net.lua --samples 400 --quiet --in 1 --hidden 1 --out 1"
  local tref, ct = tmp .. "/tiny_ref.safetensors", tmp .. "/ct"
  run(("env %s %s --batch-size 32 --steps 20 --save %s"):format(bin, tiny, tref))
  run(("env %s %s --batch-size 32 --steps 10 --checkpoint-dir %s --save %s/unused.safetensors"):format(bin, tiny, ct, tmp))
  for _, stage in ipairs({1, 3}) do
    local tout = ("%s/tiny_s%d.safetensors"):format(tmp, stage)
    local text2, good2 = run(("env %s launch -n 2 %s --zero-stage %d --batch-size 16 --steps 20 --resume %s --save %s"):format(
      bin, tiny, stage, ct, tout))
    local w2 = good2 and worst(zorch.load(tout), zorch.load(tref)) or math.huge
    tap.ok(w2 < 1e-5, ("a 4-parameter model resumed on 2 ranks at stage %d (one rank all padding): worst %.2g %s"):format(
      stage, w2, good2 and "" or text2:sub(1, 300)))
  end
end

os.execute("rm -rf " .. tmp)
tap.done()
