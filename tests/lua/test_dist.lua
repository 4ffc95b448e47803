-- Process groups (zorch.dist): the layout's groups and their collectives and
-- point-to-point exchanges on 4 and 3 ranks, and the Engine partitioning over a
-- data group: at 4 ranks in two data groups of 2, each group's weights equal
-- those of a 2-rank world, at ZeRO stages 0-3, and with overlap_comm.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin = tap.zorch()
tap.need_mpi(bin)

-- one process: the world, layouts that fit it, and refusals
local w = zorch.dist.world()
tap.ok(w:rank() == 0 and w:size() == 1, "the world of one process")
local L = zorch.dist.layout{}
tap.ok(L.data:size() == 1 and L.tensor:size() == 1 and L.pipeline:size() == 1, "a layout of one rank")
local t = zorch.tensor({3.0})
L.data:allreduce(t)
tap.ok(t:item() == 3, "a group of one reduces to itself")
local got = zorch.zeros(1)
w:sendrecv(zorch.tensor({4.0}), 0, got, 0)
tap.ok(got:item() == 4, "a rank exchanging with itself copies")
tap.raises("layout larger than the world", function() zorch.dist.layout{tensor = 2} end, "tensor 2", "world has 1")
tap.raises("layout with a bad key", function() zorch.dist.layout{tensors = 2} end, "unknown key 'tensors'")
tap.raises("layout with a bad size", function() zorch.dist.layout{pipeline = 0} end, "pipeline must be an integer >= 1")
tap.raises("send to a rank outside the group", function() w:send(t, 1) end, "Group:send", "rank 1 is outside")
tap.raises("receive with no sender", function() w:recv(t, 0) end, "sendrecv", "group of one")
tap.raises("engine with a bad data_group", function() zorch.Engine{data_group = 3} end, "data_group must be")

for _, n in ipairs({4, 3}) do
  local out, ok = tap.run(("ZORCH_QUIET=1 %s launch -n %d lua/dist_worker.lua coll"):format(bin, n))
  local oks = select(2, out:gsub("rank %d ok", ""))
  tap.ok(ok and oks == n, ("collectives over groups on %d ranks"):format(n) .. (oks == n and "" or ": " .. out))
end

local dir = tap.tmpdir()
for stage = 0, 3 do
  local ref, quad = dir .. "/ref" .. stage, dir .. "/quad" .. stage
  local _, ok1 = tap.run(("ZORCH_QUIET=1 %s launch -n 2 lua/dist_worker.lua engine %d 1 %s"):format(bin, stage, ref))
  local out, ok2 = tap.run(("ZORCH_QUIET=1 %s launch -n 4 lua/dist_worker.lua engine %d 2 %s"):format(bin, stage, quad))
  tap.ok(ok1 and ok2, ("stage %d runs in data groups"):format(stage) .. ((ok1 and ok2) and "" or ": " .. out))
  if ok1 and ok2 then
    local a = zorch.load(ref .. ".0")
    for _, r in ipairs({0, 1}) do -- world ranks 0 and 1: data rank 0 of each data group
      local b = zorch.load(("%s.%d"):format(quad, r))
      local same = true
      for k, v in pairs(a) do same = same and b[k] ~= nil and (v - b[k]):abs():max():item() == 0 end
      tap.ok(same, ("stage %d: data group of world rank %d equals a 2-rank world"):format(stage, r))
    end
  end
end
-- overlap_comm: the reductions run while backward goes on, the same sums in the same order
for stage = 2, 3 do
  local ref, ovl = dir .. "/ref" .. stage, dir .. "/ovl" .. stage
  local out, ok = tap.run(("ZORCH_QUIET=1 %s launch -n 4 lua/dist_worker.lua engine %d 2 %s overlap"):format(bin, stage, ovl))
  tap.ok(ok, ("stage %d with overlap_comm in data groups"):format(stage) .. (ok and "" or ": " .. out))
  local a, b = ok and zorch.load(ref .. ".0"), ok and zorch.load(ovl .. ".1")
  local same = ok
  for k, v in pairs(a or {}) do same = same and b[k] ~= nil and (v - b[k]):abs():max():item() == 0 end
  tap.ok(same, ("stage %d: overlap_comm gives the weights of the blocking reductions"):format(stage))
end
-- stage 3 with max_reuse_distance: modules stay gathered from forward to backward,
-- so backward gathers nothing and the step sends less, with the same weights
do
  local ref, rr = dir .. "/ref3", dir .. "/reuse3"
  local out0 = tap.run(("ZORCH_QUIET=1 %s launch -n 2 lua/dist_worker.lua engine 3 1 %s"):format(bin, dir .. "/plain3"))
  local out, ok = tap.run(("ZORCH_QUIET=1 %s launch -n 2 lua/dist_worker.lua engine 3 1 %s reuse"):format(bin, rr))
  local a, b = zorch.load(ref .. ".0"), ok and zorch.load(rr .. ".0")
  local same = ok
  for k, v in pairs(a) do same = same and b[k] ~= nil and (v - b[k]):abs():max():item() == 0 end
  tap.ok(same, "stage 3 with max_reuse_distance gives the same weights" .. (ok and "" or ": " .. out))
  local s0, s1 = tonumber(out0:match("sent (%d+)")), tonumber(out:match("sent (%d+)"))
  tap.ok(s0 and s1 and s1 < s0, ("and sends less a step (%s against %s bytes)"):format(tostring(s1), tostring(s0)))
end
os.execute("rm -rf " .. dir)
tap.done()
