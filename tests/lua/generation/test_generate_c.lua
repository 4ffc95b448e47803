-- examples/generate_c, a C host generating through zorch_generate.h alone,
-- gives the tokens zorch.generate gives in Lua (greedy, 8 ragged prompts in
-- one call, Llama with GQA and GPT-2; and sampled with a seed), and a bad
-- folder or prompt is one line on stderr and status 2.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local G = zorch.load("lua/generation/golden.safetensors")
local bin = (os.getenv("ZORCH_BUILD") or "../build") .. "/examples/generate_c"
local run = tap.run

local function prompts_of(name)
  local p, args = {}, {}
  for i = 1, 8 do
    p[i] = G[("%s.prompt.%d"):format(name, i)]:totable()
    args[i] = table.concat(p[i], ",")
  end
  return p, table.concat(args, " ")
end
-- the C host's lines as lists of "ids<TAB>reason"
local function lua_lines(out)
  local l = {}
  for i, r in ipairs(out) do l[i] = table.concat(r.tokens, " ") .. "\t" .. r.finish_reason end
  return table.concat(l, "\n") .. "\n"
end

for _, c in ipairs({{"llama_gqa", "lua/llama/llama_gqa"}, {"gpt2_tiny", "lua/generation/gpt2_tiny"}}) do
  local name, dir = c[1], c[2]
  local model = zorch.generation.from_pretrained(dir)
  local prompts, args = prompts_of(name)
  local o, ok = run(("%s %s --max-new 12 --eos 2 %s"):format(bin, dir, args))
  local want = lua_lines(zorch.generate(model, prompts, {max_new_tokens = 12, eos_token_id = 2}))
  tap.ok(ok and o == want, name .. ": the C host's greedy tokens for 8 prompts equal Lua's")
  if o ~= want then print((("# " .. o):gsub("\n", "\n# "))) end
  local s, sok = run(("%s %s --max-new 10 --sample --seed 5 --temperature 0.9 --top-p 0.9 %s"):format(bin, dir, args))
  local swant = lua_lines(zorch.generate(model, prompts, {max_new_tokens = 10, do_sample = true, seed = 5,
                                                           temperature = 0.9, top_p = 0.9}))
  tap.ok(sok and s == swant, name .. ": sampled with a seed, the same tokens as Lua's")
end

local o, ok = run(bin .. " /nonexistent/folder 1,2")
tap.ok(not ok and select(2, o:gsub("\n", "")) == 1 and o:find("config.json", 1, true) ~= nil,
  "a missing folder: status 2 and one line naming the file: " .. o:gsub("\n", ""))
o, ok = run(bin .. " lua/llama/llama_gqa 5,500")
tap.ok(not ok and select(2, o:gsub("\n", "")) == 1 and o:find("prompt[2] = 500", 1, true) ~= nil,
  "an id outside the vocabulary: one line naming it: " .. o:gsub("\n", ""))

tap.done()
