-- The commands of README.md and the user guides run as written with the
-- build `make` makes: they name build/zorch, scripts that exist, and flags
-- those scripts list in their --help.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local bin = os.getenv("ZORCH_BIN") or "../build/zorch"
if not bin:match("^/") then bin = "tests/" .. bin end -- run from the root, as the docs' commands are

require "zorch"
local read = require("zorch.util").read_file

local default_build = read("../Makefile"):match("\nBUILD%s*%??:?=%s*(%S+)")
tap.ok(default_build == "build", "make builds into build/ by default (" .. tostring(default_build) .. ")")

local docs = {"README.md", "docs/guide.md", "docs/gpt2.md", "docs/llama.md", "docs/vision.md",
              "docs/distributed.md", "docs/generation.md", "docs/quantization.md", "docs/serve.md"}
local helps = {}
for _, doc in ipairs(docs) do
  local text = read("../" .. doc)
  tap.ok(not text:find("build/cpu/zorch ", 1, true), doc .. " names build/zorch, the command `make` builds")
  local bad = {}
  -- "build/zorch [launch -n N] models/X.lua --flags ..." on one line
  for script, rest in text:gmatch("build/zorch[^\n`]-(models/[%w_]+%.lua)([^\n`]*)") do
    if not helps[script] then
      local p = io.popen(("cd .. && %s %s --help 2>&1"):format(bin, script))
      helps[script] = p:read("a")
      p:close()
    end
    for flag in rest:gmatch("%-%-([%w][%w%-_]*)") do
      local h, plain = helps[script], flag:gsub("^no%-", "")
      if not (h:find("--" .. flag, 1, true) or h:find("--[no-]" .. plain, 1, true)) then
        bad[#bad + 1] = script .. " --" .. flag
      end
    end
  end
  tap.ok(#bad == 0, doc .. ": every flag of its model commands is in the script's --help (" .. table.concat(bad, ", ") .. ")")
end
tap.done()
