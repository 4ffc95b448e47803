-- A long loop of small training steps runs in constant resident memory: tensor
-- temporaries must not wait on Lua's GC to pile up.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim

local function rss_kb()
  local f = io.open("/proc/self/statm")
  if not f then return 0 end
  local _, res = f:read("n", "n")
  f:close()
  return res * 4
end

-- sanitizers quarantine freed memory, so there the loop is shorter and the
-- resident size is not compared
local sanitized = os.getenv("ZORCH_TEST_SANITIZED") ~= nil
local steps = sanitized and 20000 or 1000000
local model = nn.Linear(4, 1)
local opt = optim.SGD(model:parameters(), {lr = 0.01})
local x, y = zorch.randn(8, 4), zorch.randn(8, 1)
local mark, first, last
for s = 1, steps do
  local loss = zorch.mse_loss(model(x), y)
  opt:zero_grad()
  loss:backward()
  opt:step()
  if s == 1 then first = loss:item() end
  if s == steps // 10 then mark = rss_kb() end
  if s == steps then last = loss:item() end
end
local final = rss_kb()
tap.ok(last < first, ("%d steps train (loss %.4f -> %.4f)"):format(steps, first, last))
if sanitized then
  tap.ok(true, "# SKIP resident memory is not meaningful under a sanitizer")
else
  tap.ok(final - mark < 4096, ("resident memory stays flat: %d kB after %d steps, %d kB after %d"):format(
    mark, steps // 10, final, steps))
end
-- dropped temporaries are reclaimed as they come, in either collector mode:
-- each tensor is charged to Lua's collector as the memory it holds, so 200,000
-- results of 256 bytes (51 MB in all) never hold more than 1 MiB at once
local a, b = zorch.randn(64), zorch.randn(64)
for _, mode in ipairs {"generational", "incremental"} do
  collectgarbage(mode)
  collectgarbage()
  local base = zorch.host_memory().in_use
  zorch.reset_peak_host_memory()
  local c
  for _ = 1, 200000 do c = a + b end
  local held = zorch.host_memory().peak - base
  tap.ok(held < 1 << 20, ("%s collector: at most %d bytes of dropped results held at once"):format(mode, held))
  c = nil
end
-- tensors kept through a step (activations saved for the backward) live
-- through minor collections and turn old, which a generational collector
-- frees only in a major collection; Lua starts one when its own heap has
-- doubled, which tensor memory never makes it. A step of 40 tensors of 512 KiB
-- (20 MiB), kept to its end among small temporaries, 60 times: the dropped
-- steps must not pile up (they held 1200 MiB before full collections were
-- run by the tensor bytes pushed)
collectgarbage("generational")
collectgarbage()
local base = zorch.host_memory().in_use
zorch.reset_peak_host_memory()
local small = zorch.randn(64)
for _ = 1, 60 do
  local acts = {}
  for i = 1, 40 do
    acts[i] = zorch.zeros(128 * 1024)
    for _ = 1, 50 do local _ = small + small end
  end
end
local held = zorch.host_memory().peak - base
tap.ok(held < 160 * 2^20, ("old garbage is reclaimed: at most %.0f MiB held over 60 steps of 20 MiB"):format(
  held / 2^20))
collectgarbage("generational")
tap.done()
