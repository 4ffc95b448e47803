-- Checkpoint publication and manifests: a save killed between any two of its
-- steps leaves a loadable checkpoint; latest naming nothing falls back to the
-- newest complete one; the engine counts steps (SGD too); missing optimizer
-- state, invalid manifest fields and a changed manifest are refused by name.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()

-- A small job: `steps` optimizer steps, a save with `tag`, then `more` steps and
-- a second save with the same tag; or, with "load", a resume that prints what it found.
local job = tmp .. "/job.lua"
local f = io.open(job, "w")
f:write([[
local zorch = require "zorch"
local mode, dir, optname, steps, more, tag = arg[1], arg[2], arg[3], tonumber(arg[4]), tonumber(arg[5]), arg[6]
zorch.manual_seed(1)
local model = zorch.nn.Linear(3, 2)
local X, Y = zorch.randn(40, 3), zorch.randn(40, 2)
local loader = zorch.data.DataLoader(zorch.data.TensorDataset(X, Y), {batch_size = 8})
local e = zorch.Engine{zero_stage = 1}
local opt = optname == "SGD" and zorch.optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
            or zorch.optim.Adam(model:parameters(), {lr = 0.01})
local _, ld, o = e:prepare(model, loader, opt)
local function train(n)
  local done = 0
  while done < n do
    for x, y in ld:iter() do
      o:zero_grad(); e:backward(zorch.mse_loss(model(x), y)); o:step()
      done = done + 1
      if done == n then break end
    end
  end
end
if mode == "load" then
  local m = e:load_checkpoint(dir)
  print(("loaded step %d tag %s engine %d"):format(m.step, m.tag, e.steps))
  zorch.save(model:state_dict(), dir .. "/../loaded.safetensors")
  return
end
if mode == "resume" then e:load_checkpoint(dir) end
train(steps)
zorch.save(model:state_dict(), dir .. (mode == "resume" and "/../second.safetensors" or "/../first.safetensors"))
print("saved " .. e:save_checkpoint(dir, {tag = tag ~= "" and tag or nil}))
if more > 0 then
  train(more)
  print("saved " .. e:save_checkpoint(dir, {tag = tag ~= "" and tag or nil}))
end
]])
f:close()
local function same(a, b)
  local x, y = zorch.load(a), zorch.load(b)
  for k, v in pairs(x) do if not y[k] or (v - y[k]):abs():max():item() ~= 0 then return false end end
  return true
end

-- a save reusing a tag, stopped after each of its steps: what is on disk resumes,
-- as the old checkpoint until latest is replaced, as the new one after
for _, case in ipairs({{"folder", "first"}, {"shards", "first"}, {"manifest", "first"}, {"latest", "second"}}) do
  local step, which = case[1], case[2]
  local dir = ("%s/k_%s/ck"):format(tmp, step)
  os.execute("mkdir -p " .. dir)
  run(("%s %s save %s Adam 3 0 keep"):format(bin, job, dir))
  local text, ok = run(("env ZORCH_TEST_HOOKS=checkpoint_stop=%s %s %s resume %s Adam 2 0 keep"):format(step, bin, job, dir))
  tap.ok(not ok and text:find("stopped after step '" .. step .. "'", 1, true),
         ("the second save of tag 'keep' stops after step '%s'"):format(step))
  text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  local want = which == "first" and "loaded step 3" or "loaded step 5"
  tap.ok(ok and text:find(want, 1, true) and same(dir .. "/../loaded.safetensors", ("%s/../%s.safetensors"):format(dir, which)),
         ("killed after '%s': latest still loads, the %s save (%s)"):format(step, which, text:match("loaded[^\n]*") or text))
  tap.ok(not text:find("warning", 1, true), "without a warning: latest named a complete checkpoint")
end

-- latest naming a folder that is gone: the newest complete checkpoint, with a warning
do
  local dir = tmp .. "/gone/ck"
  os.execute("mkdir -p " .. dir)
  run(("%s %s save %s Adam 2 3 ''"):format(bin, job, dir)) -- step2@1, step5@2
  local latest = io.open(dir .. "/latest"):read("a")
  tap.ok(latest == "step5@2", "latest names the folder of the last save: " .. latest)
  os.execute(("rm -rf %s/%s"):format(dir, latest))
  local text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  tap.ok(ok and text:find("loaded step 2", 1, true) and text:find("warning", 1, true) and text:find("step5@2", 1, true)
         and text:find("newest complete", 1, true), "latest naming a missing folder falls back, with a warning: " ..
         (text:match("warning[^\n]*") or text))
  os.remove(dir .. "/latest")
  text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  tap.ok(ok and text:find("loaded step 2", 1, true) and text:find("no latest", 1, true), "and so does a missing latest")
end

-- the step counter is the engine's: SGD saves step3, and resumes at step 3
do
  local dir = tmp .. "/sgd/ck"
  os.execute("mkdir -p " .. dir)
  local text, ok = run(("%s %s save %s SGD 3 0 ''"):format(bin, job, dir))
  tap.ok(ok and text:find("saved step3", 1, true), "SGD's checkpoint is tagged by the engine's steps: " .. (text:match("saved[^\n]*") or text))
  text, ok = run(("%s %s load %s SGD 0 0 x"):format(bin, job, dir))
  tap.ok(ok and text:find("loaded step 3 tag step3 engine 3", 1, true), "and resumes at step 3: " .. (text:match("loaded[^\n]*") or text))
end

-- rewrites a checkpoint's manifest (and its hash, so only the fields are wrong)
local function rewrite(where, change)
  local m = Z.json.decode(io.open(where .. "/manifest.json"):read("a"))
  change(m)
  local h = io.open(where .. "/manifest.json", "w")
  h:write(Z.json.encode(m))
  h:close()
  h = io.open(where .. "/manifest.hash", "w")
  h:write(Z._file_hash(where .. "/manifest.json"))
  h:close()
end

do
  local dir = tmp .. "/bad/ck"
  os.execute("mkdir -p " .. dir)
  run(("%s %s save %s Adam 3 0 ''"):format(bin, job, dir))
  local where = dir .. "/" .. io.open(dir .. "/latest"):read("a")
  local orig_m, orig_h = io.open(where .. "/manifest.json"):read("a"), io.open(where .. "/manifest.hash"):read("a")
  local orig_r = io.open(where .. "/rank0.safetensors", "rb"):read("a")
  local function restore()
    for name, text in pairs({["manifest.json"] = orig_m, ["manifest.hash"] = orig_h, ["rank0.safetensors"] = orig_r}) do
      local h = io.open(where .. "/" .. name, "wb")
      h:write(text)
      h:close()
    end
  end
  local function refused(desc, change, ...)
    rewrite(where, change)
    local text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
    local found = not ok and not text:find("attempt to", 1, true)
    for _, p in ipairs({...}) do found = found and text:find(p, 1, true) ~= nil end
    tap.ok(found, desc .. ": " .. (text:match("load_checkpoint[^\n]*") or text:sub(1, 300)))
    restore()
  end
  refused("a negative step", function(m) m.step = -4 end, "field 'step'", "-4")
  refused("world size 0", function(m) m.world_size = 0 end, "field 'world_size'")
  refused("stage 7", function(m) m.zero_stage = 7 end, "field 'zero_stage'", "7")
  refused("an unknown precision", function(m) m.precision = "fp8" end, "field 'precision'", '"fp8"')
  refused("a step that is text", function(m) m.step = "3" end, "field 'step'", '"3"')
  refused("params that are not a list", function(m) m.params = 5 end, "field 'params'")
  refused("a parameter without a shape", function(m) m.params[1].shape = nil end, "field 'params'", "shape")
  refused("an offset out of place", function(m) m.params[2].offset = 1 end, "field 'params'", "offset")
  refused("a file list of the wrong length", function(m) m.files[2] = m.files[1] end, "field 'files'")
  refused("a missing field", function(m) m.lr = nil end, "field 'lr'")
  refused("an unknown field", function(m) m.surprise = 1 end, "unknown field", "surprise")
  refused("a loader state with a bad epoch", function(m) m.loader.epoch = -1 end, "field 'loader'", "epoch")
  -- the optimizer's hyper-parameters, by range, naming the file and the key
  refused("a negative lr in a group", function(m) m.param_groups[1].lr = -0.5 end,
          "manifest.json field 'param_groups' item 1: 'lr' must be a finite number >= 0, got -0.5")
  refused("a negative eps", function(m) m.param_groups[1].eps = -1e-8 end, "manifest.json", "'eps' must be", "-1e-08")
  refused("a beta of 1", function(m) m.param_groups[1].betas = {0.9, 1} end, "'betas' must be a list of numbers in [0, 1)")
  refused("a negative beta", function(m) m.param_groups[1].betas = {-0.1, 0.999} end, "'betas' must be")
  refused("a negative optimizer step", function(m) m.optimizer_state.step = -1 end,
          "manifest.json field 'optimizer_state' 'step' must be an integer >= 0 (optimizer steps), got -1")
  refused("a fractional optimizer step", function(m) m.optimizer_state.step = 2.5 end, "'step' must be an integer", "2.5")
  -- the manifest is covered by its hash
  local h = io.open(where .. "/manifest.json", "w")
  h:write((orig_m:gsub('"step":%s*3', '"step": 2')))
  h:close()
  local text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  tap.ok(not ok and text:find("manifest.json is corrupt", 1, true), "an edited manifest fails its hash: " ..
         (text:match("load_checkpoint[^\n]*") or text:sub(1, 300)))
  restore()
  os.remove(where .. "/manifest.hash")
  text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  tap.ok(not ok and text:find("manifest.hash", 1, true), "a missing manifest.hash is named")
  restore()
  -- a missing piece of optimizer state is an error naming it, never zeros
  local pieces = zorch.load(where .. "/rank0.safetensors")
  local gone
  for k in pairs(pieces) do if k:match("^state%.exp_avg_sq/") then gone = k end end
  pieces[gone] = nil
  zorch.save(pieces, where .. "/rank0.safetensors")
  rewrite(where, function(m) m.files[1].fnv1a64 = Z._file_hash(where .. "/rank0.safetensors") end)
  text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  local name = gone:match("^state%.exp_avg_sq/(.+)/%d+$")
  tap.ok(not ok and text:find("state.exp_avg_sq/" .. name, 1, true) and text:find("rank0.safetensors", 1, true),
         "a missing optimizer state piece is named: " .. (text:match("load_checkpoint[^\n]*") or text:sub(1, 300)))
  restore()
  -- pieces the format does not allow: an int32 one, a 2-D one larger than its parameter
  local function bad_piece(desc, change, ...)
    refused(desc, function(m)
      local p = zorch.load(where .. "/rank0.safetensors")
      change(p)
      zorch.save(p, where .. "/rank0.safetensors")
      m.files[1].fnv1a64 = Z._file_hash(where .. "/rank0.safetensors")
    end, ...)
  end
  bad_piece("an int32 piece", function(p) p["param/weight/0"] = p["param/weight/0"]:to("int32") end,
            "rank0.safetensors: 'param/weight/0' is int32; checkpoint pieces are float32")
  bad_piece("a 2-D piece larger than its parameter", function(p) p["state.exp_avg/bias/0"] = zorch.zeros(3, 4) end,
            "rank0.safetensors: 'state.exp_avg/bias/0' has shape (3, 4): a piece must be a 1-D range of its parameter's 2 elements")
  text, ok = run(("%s %s load %s Adam 0 0 x"):format(bin, job, dir))
  tap.ok(ok and text:find("loaded step 3", 1, true), "restored, it loads again")
end

-- the manifest reader for tools and fuzzing: seeds are valid, garbage is refused
-- with a message, never an error
local seeds = io.popen("ls ../tests/fuzz/seeds/manifest/*.json 2>/dev/null"):read("a")
local n = 0
for path in seeds:gmatch("[^\n]+") do
  local ok, why = Z._read_manifest_text(io.open(path):read("a"))
  tap.ok(ok, "seed " .. path:match("[^/]+$") .. " is a valid manifest " .. (ok and "" or why))
  n = n + 1
end
tap.ok(n >= 2, ("%d manifest seeds in tests/fuzz/seeds/manifest"):format(n))
for _, text in ipairs({"", "[]", "{}", "nul", '{"format": "zorch-checkpoint"}', "{\"a\":1} x", "\0", '{"format":01}'}) do
  local ok, a, b = pcall(Z._read_manifest_text, text)
  tap.ok(ok and a == false and type(b) == "string", ("_read_manifest_text(%q) returns false and %s"):format(text, tostring(b)))
end
os.execute("rm -rf " .. tmp)
tap.done()
