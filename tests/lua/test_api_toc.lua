-- docs/api.md's table of contents matches its headings (scripts/api-toc.lua
-- makes it: run it after adding a section).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local toc = dofile("../scripts/api-toc.lua")

local f = assert(io.open("../docs/api.md"))
local text = f:read("a")
f:close()
tap.ok(toc.update(text) == text, "docs/api.md's contents are up to date (lua5.4 scripts/api-toc.lua rewrites them)")
local block = text:match("<!%-%- toc %-%->\n(.-)<!%-%- /toc %-%->") or ""
local entries, headings = 0, 0
for _ in block:gmatch("%- %[") do entries = entries + 1 end
local fence = false
for line in text:gmatch("(.-)\n") do
  if line:match("^```") then fence = not fence end
  if not fence and (line:match("^## ") or line:match("^### ")) then headings = headings + 1 end
end
tap.ok(entries > 0 and entries == headings, ("one entry per ## and ### heading (%d entries, %d headings)"):format(entries, headings))
local stale = "# T\n\n<!-- toc -->\n- [Old](#old)\n<!-- /toc -->\n\n## New\n"
tap.ok(toc.update(stale) ~= stale and toc.update(stale):find("- [New](#new)", 1, true), "a renamed heading makes the contents stale")
tap.done()
