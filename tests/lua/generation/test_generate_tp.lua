-- zorch.generate with a model split by heads over 2 ranks (Megatron's split,
-- each rank caching its heads' keys and values): the greedy tokens of 8
-- ragged prompts are Transformers' (golden.safetensors) and one process's,
-- for the tiny Llama with GQA and GPT-2; seeded sampling gives the same
-- tokens on both ranks and as one process; a prefill in chunks of 4 the
-- same greedy tokens.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin, run = tap.zorch(), tap.run
tap.need_mpi(bin)
local tmp = tap.tmpdir()
local function diag(s) print("# " .. tostring(s):gsub("\n", "\n# ")) end
local G = zorch.load("lua/generation/golden.safetensors")

local function lines(path)
  local t = {}
  local f = io.open(path)
  if not f then return t end
  for l in f:lines() do t[#t + 1] = l end
  f:close()
  return t
end

for _, name in ipairs({"llama_gqa", "gpt2_tiny"}) do
  local one, two = tmp .. "/" .. name .. "_1", tmp .. "/" .. name .. "_2"
  local t1, ok1 = run(("%s lua/generation/tp_worker.lua %s %s 2>&1"):format(bin, name, one))
  local t2, ok2 = run(("%s launch -n 2 lua/generation/tp_worker.lua %s %s 2>&1"):format(bin, name, two))
  if not ok1 then diag(t1) end
  if not ok2 then diag(t2) end
  local a, r0, r1 = lines(one .. ".0"), lines(two .. ".0"), lines(two .. ".1")
  local golden = #a == 24
  for i = 1, 8 do
    local want = table.concat(G[("%s.out.%d"):format(name, i)]:totable(), " ")
    golden = golden and a[i] == ("greedy %d %s"):format(i, want) and r0[i] == a[i]
    if r0[i] ~= a[i] then diag(("%s: %s against %s"):format(name, tostring(r0[i]), tostring(a[i]))) end
  end
  tap.ok(ok1 and ok2 and golden, name .. ": split over 2 ranks, 8 ragged prompts give Transformers' greedy tokens and one process's")
  local same = #r0 == 24 and #r1 == 24
  for i = 1, 16 do same = same and r0[i] == r1[i] and r0[i] == a[i] end
  tap.ok(same, name .. ": both ranks take the same tokens (seeded sampling as one process)")
  local chunked = #r0 == 24
  for i = 1, 8 do chunked = chunked and r0[16 + i] == "chunked" .. a[i]:sub(7) and r1[16 + i] == r0[16 + i] end
  tap.ok(chunked, name .. ": a prefill in chunks of 4 over the split cache gives the same greedy tokens")
end

if not os.getenv("KEEP_TMP") then os.execute("rm -rf " .. tmp) end
tap.done()
