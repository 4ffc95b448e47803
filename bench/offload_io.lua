-- The offload store's streaming step on the same chunks, I/O through
-- io_uring or pread/pwrite (ZORCH_OFFLOAD_IO=pread): one JSON line.
--   zorch bench/offload_io.lua [DIR] [ELEMENTS] [CHUNK] [BUFFERS] [STEPS]
local zorch = require "zorch"
local dir, n = arg[1] or "/tmp", math.tointeger(tonumber(arg[2] or "33554432"))
local chunk, nbuf, steps = math.tointeger(tonumber(arg[3] or "1048576")), math.tointeger(tonumber(arg[4] or "4")),
  math.tointeger(tonumber(arg[5] or "5"))
local p, g = zorch.randn({n}), zorch.randn({n})
local store = zorch.offload_store(dir, n, chunk, nbuf)
local k = {lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01, decoupled = true}
store:adam(p, g, 1, {{0, n, k}}) -- (the file's pages made once)
local best, st = math.huge, nil
for s = 2, steps + 1 do
  local t0 = zorch.clock()
  store:adam(p, g, s, {{0, n, k}})
  local dt = zorch.clock() - t0
  if dt < best then best, st = dt, store:stats() end
end
print(('{"bench": "offload_io", "io": "%s", "elements": %d, "chunk": %d, "buffers": %d, "best_s": %.4f, ' ..
       '"MBps": %.0f, "read_s": %.4f, "write_s": %.4f, "wait_s": %.4f}'):format(st.io, n, chunk, nbuf, best,
  (st.read_bytes + st.write_bytes) / 1e6 / best, st.read_s, st.write_s, st.wait_s))
store:close()
