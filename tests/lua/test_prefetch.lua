-- Stage 3's gathers ahead (prefetch_bucket_size) and its pool of gather
-- buffers: on 1, 2 and 3 ranks the weights equal those of the blocking gathers
-- bit for bit (a fixed order, an order that changes between steps and reuses a
-- layer, a forward that fails with gathers in flight, budgets that let one
-- module ahead or none), the step sends the same bytes, the gather times are
-- reported, and after a step a rank holds only its shard.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin = tap.zorch()

tap.raises("a negative prefetch_bucket_size", function() zorch.Engine{prefetch_bucket_size = -1} end,
           "prefetch_bucket_size must be an integer >= 0")
tap.raises("a fractional max_live_parameters", function() zorch.Engine{max_live_parameters = 1.5} end,
           "max_live_parameters must be an integer >= 0")
local dir = tap.tmpdir()
local f = io.open(dir .. "/ds.json", "w")
f:write('{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 12345, "stage3_max_live_parameters": 6.7e4}}')
f:close()
local cfg = zorch.Engine(dir .. "/ds.json").cfg
tap.ok(cfg.prefetch_bucket_size == 12345 and cfg.max_live_parameters == 67000,
       "the DeepSpeed keys set prefetch_bucket_size and max_live_parameters")
tap.need_mpi(bin)
local function same(a, b)
  if not a or not b then return false end
  for k, v in pairs(a) do
    if b[k] == nil or (v - b[k]):abs():max():item() ~= 0 then return false end
  end
  return true
end
local function close(a, b)
  if not a or not b then return false end
  for k, v in pairs(a) do
    if b[k] == nil or ((v - b[k]):abs() / (b[k]:abs() + 1e-3)):max():item() > 1e-5 then return false end
  end
  return true
end

-- one run: the weights and the report line (in flight, waited, sent, parameters, numel)
local function run(n, mode, stage, prefetch, live)
  local out = ("%s/%s_%d_%d_%d_%d"):format(dir, mode, n, stage, prefetch, live)
  local launch = n > 1 and ("%s launch -n %d"):format(bin, n) or bin
  local text, ok = tap.run(("ZORCH_QUIET=1 timeout 120 env %s lua/prefetch_worker.lua %s %d %d %d %s"):format(
    launch, mode, stage, prefetch, live, out))
  local f, w, s, p, numel, rel = text:match("gathers (%S+) (%S+) (%d+) (%d+) (%d+) (%S+)")
  if not ok or not f then print("# " .. text:gsub("\n", "\n# ")) return nil end
  return {w = zorch.load(out), flight = tonumber(f), waited = tonumber(w), sent = tonumber(s), params = tonumber(p),
          numel = tonumber(numel), released = tonumber(rel)}
end

local BIG, LIVE = 50000000, 1000000000
for _, n in ipairs({1, 2, 3}) do
  do
    for _, mode in ipairs({"plain", "vary", "fail"}) do
      local ref = run(n, mode, 0, 0, 0)
      local blocking = run(n, mode, 3, 0, LIVE)
      local ahead = run(n, mode, 3, BIG, LIVE)
      local one = run(n, mode, 3, 80, LIVE)     -- room for one layer of 8 x 8 ahead at a time
      local tight = run(n, mode, 3, BIG, 150)  -- live parameters capped near two layers
      local what = ("%s order on %d rank%s"):format(mode, n, n > 1 and "s" or "")
      tap.ok(blocking and close(blocking.w, ref.w), "stage 3 trains like stage 0: " .. what)
      tap.ok(ahead and blocking and same(ahead.w, blocking.w), "gathers ahead give the blocking weights: " .. what)
      tap.ok(one and blocking and same(one.w, blocking.w), "one module ahead gives them too: " .. what)
      tap.ok(tight and blocking and same(tight.w, blocking.w), "a max_live_parameters cap gives them too: " .. what)
      if ahead and blocking then
        tap.ok(ahead.sent == blocking.sent, ("and sends the same bytes a step (%d, %d)"):format(ahead.sent, blocking.sent))
        local shard = ahead.numel / n
        tap.ok(ahead.params <= 4 * (shard + 16) and blocking.params <= 4 * (shard + 16),
               ("after the step a rank holds its shard only (%d and %d bytes, the shard %d)"):format(
                 ahead.params, blocking.params, math.floor(4 * shard)))
        tap.ok(ahead.released == 0 and blocking.released == 0 and ref and ref.released > 0,
               ("a released parameter reads zeros (%g, %g; %g at stage 0)"):format(ahead.released, blocking.released,
                                                                                  ref and ref.released or -1))
        if n > 1 then
          tap.ok(blocking.flight > 0 and blocking.waited == blocking.flight,
                 ("blocking gathers: all their time waited (%.3g s in flight, %.3g s waited)"):format(
                   blocking.flight, blocking.waited))
          tap.ok(ahead.flight > 0 and ahead.waited < ahead.flight,
                 ("gathers ahead: %.3g s in flight, %.3g s of it waited"):format(ahead.flight, ahead.waited))
        end
      end
    end
  end
end
os.execute("rm -rf " .. dir)
tap.done()
