-- zorch reads the corpus as DeepSpeed 0.19.8 does: for every file both accept,
-- the clipping, batch sizes, optimizer and scheduler lrs equal DeepSpeed's own
-- reading, recorded by scripts/ds_compare.py (which runs DeepSpeedConfig) in
-- tests/configs/deepspeed-reading.json.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"]

local DIR = "configs/corpus"
local record = zorch.json.decode(assert(io.open("configs/deepspeed-reading.json")):read("a"))
local compare = assert(loadfile("lua/ds_reading.lua"))("zorch.ds_reading")
tap.ok(record.deepspeed == Z._require("zorch.engine.options").deepspeed_version,
       ("the record is DeepSpeed %s's, the version zorch follows"):format(record.deepspeed))
local diffs, compared, names = compare(record, DIR)
tap.ok(compared >= 20, ("%d files both read"):format(compared))
local clip_default, sched = 0, 0
for _, name in ipairs(names) do
  local want = record.files[name]
  if not want.skip then
    tap.ok(not diffs[name], name .. (diffs[name] and (": " .. table.concat(diffs[name], "; ")) or ": as DeepSpeed reads it"))
    local f = io.open(DIR .. "/" .. name):read("a")
    if not f:find('"gradient_clipping"', 1, true) and want.gradient_clipping == 1 then clip_default = clip_default + 1 end
    if want.scheduler then sched = sched + 1 end
  end
end
tap.ok(clip_default > 0, ("%d files without gradient_clipping clip at 1.0, as DeepSpeed does"):format(clip_default))
tap.ok(sched > 0, ("%d scheduler lr sequences compared"):format(sched))
tap.done()
