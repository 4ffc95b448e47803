-- onebit-bytes.lua: bytes and time of one float32 all-reduce of 4 Mi elements
-- against the 1-bit compressed all-reduce (docs/onebit.md). Run:
--   build/zorch launch -n 4 scripts/onebit-bytes.lua
local zorch = require "zorch"
local w = zorch.dist.world()
local n = 1 << 22
local buf = zorch.randn(n)
local P, C = w:onebit_sizes(n)
local we, se = zorch.zeros(P), zorch.zeros(C)
w:bytes(true)
w:allreduce(buf:clone())
local full = w:bytes(true)
local t0 = zorch.clock()
for _ = 1, 5 do w:compressed_allreduce(buf:clone(), we, se) end
local tc = (zorch.clock() - t0) / 5
local comp = w:bytes(true) / 5
t0 = zorch.clock()
for _ = 1, 5 do w:allreduce(buf:clone()) end
local tf = (zorch.clock() - t0) / 5
if w:rank() == 0 then print(("n=%d ranks=%d: allreduce %d bytes %.1f ms; compressed %d bytes (1/%.1f) %.1f ms"):format(n, w:size(), full, tf*1e3, comp, full/comp, tc*1e3)) end
