-- `zorch generate`: the printed ids are zorch.generate's (greedy and sampled
-- with a seed, the folder's eos from its config), and a bad command line is a
-- usage error (status 2) naming what is wrong.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin = tap.zorch()
local dir = "lua/llama/llama_gqa"
local model = zorch.generation.from_pretrained(dir)
local eos = zorch.json.decode(io.open(dir .. "/config.json"):read("a")).eos_token_id

local function ids(opts)
  return table.concat(zorch.generate(model, {1, 5, 7}, opts)[1].tokens, " ") .. "\n"
end

local o, ok = tap.run(bin .. " generate " .. dir .. " --ids 1,5,7 --max-new-tokens 12 2>&1")
local want = ids({max_new_tokens = 12, eos_token_id = eos})
tap.ok(ok and o == want, "greedy: the printed ids are zorch.generate's: " .. o:gsub("\n", ""))
o, ok = tap.run(bin .. " generate " .. dir .. " --ids 1,5,7 --max-new-tokens 10 --temperature 0.9 --top-p 0.9 --seed 5 2>&1")
want = ids({max_new_tokens = 10, eos_token_id = eos, do_sample = true, temperature = 0.9, top_p = 0.9, seed = 5})
tap.ok(ok and o == want, "sampled with a seed: zorch.generate's ids: " .. o:gsub("\n", ""))

for _, c in ipairs({
  {"--ids 1,5 --prompt hi", "one of --prompt and --ids"},
  {"--ids 1,x", "--ids must be"},
  {"--ids 1 --max-new-tokens 0", "--max-new-tokens must be >= 1"},
  {"--prompt hi", "needs the folder's tokenizer"},
}) do
  local out, good, _, code = tap.run(bin .. " generate " .. dir .. " " .. c[1] .. " 2>&1")
  tap.ok(not good and code == 2 and out:find(c[2], 1, true) ~= nil, c[1] .. ": status 2 naming it: " .. out:gsub("\n.*", ""))
end
tap.done()
