-- The table of contents of a Markdown file, from its ## and ### headings,
-- between the lines "<!-- toc -->" and "<!-- /toc -->" (placed after the
-- title when missing). Usage: lua5.4 scripts/api-toc.lua [--check] [docs/api.md]
-- --check: exit 1, writing nothing, when the contents are out of date.
local M = {}

-- GitHub's anchor of a heading: lowercase, punctuation dropped, spaces as '-'
-- (a repeated anchor gets -1, -2, ...).
local function anchor(text, seen)
  local a = text:lower():gsub("[^%w%- _]", ""):gsub(" ", "-")
  local n = seen[a]
  seen[a] = (n or 0) + 1
  return n and (a .. "-" .. n) or a
end

-- The contents for `text` (the file without its old contents).
function M.toc(text)
  local lines, seen, fence = {}, {}, false
  for line in (text .. "\n"):gmatch("(.-)\n") do
    if line:match("^```") then fence = not fence end
    local hashes, title = line:match("^(##+)%s+(.-)%s*$")
    if not fence and hashes and #hashes <= 3 then
      lines[#lines + 1] = ("%s- [%s](#%s)"):format(("  "):rep(#hashes - 2), title:gsub("[%[%]]", ""), anchor(title, seen))
    end
  end
  return table.concat(lines, "\n")
end

-- The file with its contents brought up to date.
function M.update(text)
  local head, _, tail = text:match("^(.-<!%-%- toc %-%->\n)(.-)(<!%-%- /toc %-%->\n.*)$")
  if not head then -- first run: after the title line
    local title, rest = text:match("^(.-\n)\n?(.*)$")
    head, tail = title .. "\n<!-- toc -->\n", "<!-- /toc -->\n\n" .. rest
  end
  return head .. M.toc(head:gsub("<!%-%- toc %-%->\n$", "") .. tail) .. "\n" .. tail
end

if arg and arg[0] and arg[0]:match("api%-toc%.lua$") then -- run, not loaded
  local check, path = false, "docs/api.md"
  for _, a in ipairs(arg or {}) do if a == "--check" then check = true else path = a end end
  local f = assert(io.open(path))
  local text = f:read("a")
  f:close()
  local new = M.update(text)
  if check then
    if new ~= text then io.stderr:write(path .. ": the table of contents is out of date (lua5.4 scripts/api-toc.lua)\n"); os.exit(1) end
  elseif new ~= text then
    f = assert(io.open(path, "w"))
    f:write(new)
    f:close()
  end
end
return M
