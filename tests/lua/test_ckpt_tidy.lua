-- What failed and killed saves leave in a checkpoint folder is removed by the
-- next save (temporary files of atomic writes, folders without manifest.json);
-- keep_last (Engine option, save_checkpoint option, simple_net's --keep-last)
-- keeps the newest N checkpoints whatever their tags; by default all stay.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()

-- steps optimizer steps, a save after each with the tags given (one a step;
-- "-": the default tag), with Engine{keep_last = K} when K is not 0
local job = tap.temp_file([[
local zorch = require "zorch"
local dir, keep, tags = arg[1], tonumber(arg[2]), arg[3]
zorch.manual_seed(1)
local model = zorch.nn.Linear(3, 2)
local e = zorch.Engine{zero_stage = 1, keep_last = keep > 0 and keep or nil}
local _, _, o = e:prepare(model, nil, zorch.optim.Adam(model:parameters(), {lr = 0.01}))
local x, y = zorch.randn(8, 3), zorch.randn(8, 2)
if arg[4] == "resume" then e:load_checkpoint(dir) end
for tag in tags:gmatch("[^,]+") do
  o:zero_grad(); e:backward(zorch.mse_loss(model(x), y)); o:step()
  e:save_checkpoint(dir, {tag = tag ~= "-" and tag or nil})
end
print("steps " .. e.steps)
]], ".lua")

local function names(dir)
  local out = {}
  for n in io.popen("ls -A " .. dir):read("a"):gmatch("[^\n]+") do out[#out + 1] = n end
  table.sort(out)
  return table.concat(out, " ")
end
local function touch(path) io.open(path, "w"):close() end

-- litter: a killed write's temporary files, a failed save's folders; the next save removes them
do
  local dir = tmp .. "/litter"
  local _, ok = run(("%s %s %s 0 -,-"):format(bin, job, dir))
  tap.ok(ok, "two checkpoints saved")
  -- a save that failed right after making its folder (as on a full disk), and what
  -- kill -9 leaves in the middle of an atomic write
  run(("env ZORCH_TEST_HOOKS=checkpoint_stop=folder %s %s %s 0 - resume"):format(bin, job, dir))
  touch(dir .. "/latest.tmp.4242.0")
  touch(dir .. "/step2@2/manifest.json.tmp.4242.1")
  local before = names(dir)
  tap.ok(before == "latest latest.tmp.4242.0 lock step1@1 step2@2 step3@3" and names(dir .. "/step3@3") == "",
         "before: the litter is there, step3@3 empty (" .. before .. ")")
  local text
  text, ok = run(("%s %s %s 0 - resume"):format(bin, job, dir))
  local after = names(dir)
  tap.ok(ok and after == "latest lock step1@1 step2@2 step3@3" and io.open(dir .. "/step3@3/manifest.json"),
         "the next save removes it (and saves step3@3): " .. after .. " " .. (ok and "" or text:sub(-200)))
  tap.ok(names(dir .. "/step2@2") == "manifest.hash manifest.json rank0.safetensors",
         "and the temporary file inside a complete checkpoint: " .. names(dir .. "/step2@2"))
  -- a save that failed after its rank files: the next one removes the folder without a manifest
  run(("env ZORCH_TEST_HOOKS=checkpoint_stop=shards %s %s %s 0 x resume"):format(bin, job, dir))
  tap.ok(names(dir .. "/x@4") == "rank0.safetensors", "x@4 holds a rank file, no manifest.json: " .. names(dir .. "/x@4"))
  text, ok = run(("%s %s %s 0 y resume"):format(bin, job, dir))
  after = names(dir)
  tap.ok(ok and after == "latest lock step1@1 step2@2 step3@3 y@4", "the next save removes it: " .. after)
end

-- keep_last: the newest N of any tag; by default every checkpoint stays
do
  local dir = tmp .. "/keep"
  local _, ok = run(("%s %s %s 2 -,best,-,-,best"):format(bin, job, dir))
  tap.ok(ok and names(dir) == "best@5 latest lock step4@4", "keep_last = 2 keeps the two newest: " .. names(dir))
  dir = tmp .. "/all"
  _, ok = run(("%s %s %s 0 -,best,-,-"):format(bin, job, dir))
  tap.ok(ok and names(dir) == "best@2 latest lock step1@1 step3@3 step4@4", "without it every tag stays: " .. names(dir))
  local text
  text, ok = run(("%s -e 'local z = require \"zorch\"; local m = z.nn.Linear(2, 2); local e = z.Engine{}; " ..
    "e:prepare(m, nil, z.optim.SGD(m:parameters())); e:save_checkpoint(\"%s/bad\", {keep_last = 0})'"):format(bin, tmp))
  tap.ok(not ok and text:find("save_checkpoint: keep_last must be an integer >= 1", 1, true),
         "keep_last = 0 is refused: " .. (text:match("save_checkpoint[^\n]*") or text:sub(1, 200)))
  text, ok = run(("%s -e 'require \"zorch\".Engine{keep_last = -1}'"):format(bin))
  tap.ok(not ok and text:find("keep_last", 1, true), "Engine{keep_last = -1} is refused: " .. text:match("[^\n]*"))
  -- the script's flag
  dir = tmp .. "/net"
  text, ok = run(("%s ../models/simple_net.lua --samples 256 --batch-size 64 --steps 12 --checkpoint-every 3 " ..
    "--keep-last 2 --checkpoint-dir %s --save '' --quiet"):format(bin, dir))
  tap.ok(ok and names(dir) == "latest lock step12@5 step9@3", "simple_net --keep-last 2: " .. names(dir) ..
         (ok and "" or text:sub(-200)))
end

tap.done()
