-- Remakes the table of the configuration corpus in docs/config.md (between the
-- "corpus table" markers) from tests/configs/corpus/expected.tsv (the outcomes
-- tests/lua/test_corpus.lua recorded) and sources.tsv.
-- Run: lua5.4 scripts/corpus-table.lua   (from the repository root)
local dir = "tests/configs/corpus/"
local function tsv(path)
  local rows = {}
  for line in io.lines(path) do
    local cols = {}
    for c in (line .. "\t"):gmatch("([^\t]*)\t") do cols[#cols + 1] = c end
    if cols[1] ~= "file" then rows[#rows + 1] = cols end
  end
  return rows
end
local sources = {}
for _, r in ipairs(tsv(dir .. "sources.tsv")) do sources[r[1]] = r end
local lines = {"| file | source | outcome | message or note |", "|---|---|---|---|"}
local trains, refused = 0, 0
for _, r in ipairs(tsv(dir .. "expected.tsv")) do
  local s = assert(sources[r[1]], "no source recorded for " .. r[1])
  local note = r[3]:gsub("|", "\\|")
  if r[2] == "refused" then note = note:gsub("^" .. r[1]:gsub("%p", "%%%0") .. ": ", "") end
  if r[2] == "trains" then trains = trains + 1 else refused = refused + 1 end
  lines[#lines + 1] = ("| `%s` | [%s `%s`](https://github.com/%s/blob/%s/%s) | %s | %s |"):format(r[1], s[2], s[3],
    s[2], s[4], s[3], r[2], note)
end
table.insert(lines, 1, ("%d files: %d train, %d are refused.\n"):format(trains + refused, trains, refused))
local doc = io.open("docs/config.md"):read("a")
local a, b = doc:find("<!-- corpus table start -->\n", 1, true), doc:find("<!-- corpus table end -->", 1, true)
assert(a and b, "docs/config.md has no corpus table markers")
doc = doc:sub(1, a + 27) .. table.concat(lines, "\n") .. "\n" .. doc:sub(b)
local f = assert(io.open("docs/config.md", "w"))
f:write(doc)
f:close()
