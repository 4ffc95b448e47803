-- gen_help.lua: turns docs/api.md into the table help() reads, and writes it,
-- with the help function's own Lua source, as a C file for the zorch command.
-- Usage: lua5.4 scripts/gen_help.lua docs/api.md vm/help.lua > help_doc.c
--
-- The table: {sections = {{title, module, intro}}, texts = {...},
-- names = {[name] = {{s = section, t = text, sig = signature}}}}. A section is
-- a `##` heading naming a Lua module in backticks (`zorch.nn`); sections that
-- name none (Command line, C) are left out. A table row documents every name
-- in its first cell with the row; a paragraph documents every name in its code
-- spans with the whole paragraph.
local md_path, src_path = arg[1], arg[2]
if not md_path or not src_path then
  io.stderr:write("usage: gen_help.lua api.md help.lua\n")
  os.exit(2)
end

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local KEYWORDS = {}
for w in ([[and break do else elseif end false for function goto if in local nil not or
            repeat return then true until while]]):gmatch("%a+") do KEYWORDS[w] = true end

-- Markdown to plain text: code spans lose their backticks, escaped bars unescape.
local function plain(s)
  s = s:gsub("\\|", "|"):gsub("`", "")
  return (s:gsub("^%s+", ""):gsub("%s+$", ""))
end

-- The names a code span documents, each with its item (the dotted name and the
-- argument list that follows it): `zorch.where(c, a, b)` gives where; a span
-- listing words (`neg exp gelu(x, "tanh"?)`) gives each word. Only names at
-- depth 0 count: not arguments, table fields or strings.
local function span_names(code)
  local out, i, n = {}, 1, #code
  while i <= n do
    local c = code:sub(i, i)
    if c:match("[%a_]") then
      local s, e = code:find("^[%a_][%w_]*[%.:]?[%w_%.:]*", i)
      local chain = code:sub(s, e):gsub("[%.:]+$", "")
      local j = e + 1
      local args = ""
      if code:sub(j, j) == "(" or code:sub(j, j) == "{" then
        local close = code:sub(j, j) == "(" and "%b()" or "%b{}"
        local a, b = code:find("^" .. close, j)
        if a then
          args = code:sub(a, b)
          j = b + 1
        end
      end
      local parts = {}
      for p in chain:gmatch("[%a_][%w_]*") do parts[#parts + 1] = p end
      local last = parts[#parts]
      if last and not KEYWORDS[last] then out[#out + 1] = {name = last, sig = chain .. args} end
      -- a class named on the way (nn.Module:extend) is documented here too
      for k = 2, #parts - 1 do
        if parts[k]:match("^%u") then out[#out + 1] = {name = parts[k], sig = chain .. args} end
      end
      i = j
    elseif c:match("%d") then -- a number (5e8) names nothing
      local _, e = code:find("^[%w_%.]+", i)
      i = e + 1
    elseif c == '"' or c == "'" then
      local e = code:find(c, i + 1, true)
      i = (e or n) + 1
    elseif c == "(" or c == "{" or c == "[" then
      local pat = c == "(" and "%b()" or c == "{" and "%b{}" or "%b[]"
      local _, e = code:find("^" .. pat, i)
      i = (e or i) + 1
    else
      i = i + 1
    end
  end
  return out
end

-- The code spans of a piece of markdown, in order, less file names (docs/gpu.md).
local function spans(text)
  local out = {}
  for code in text:gmatch("`([^`]+)`") do
    if not code:match("^[%w_%.%-]*/[%w_%./%-]*$") then out[#out + 1] = code end
  end
  return out
end

-- Splits a table row into cells at bars that are not escaped.
local function cells(row)
  row = row:gsub("\\|", "\1"):gsub("^%s*|", ""):gsub("|%s*$", "")
  local out = {}
  for cell in (row .. "|"):gmatch("([^|]*)|") do out[#out + 1] = (cell:gsub("\1", "\\|")) end
  return out
end

local doc = {sections = {}, texts = {}, names = {}}
local seen = {} -- name .. section .. text: one entry each

local function add_text(t)
  doc.texts[#doc.texts + 1] = t
  return #doc.texts
end

local function document(name, sec, text, sig)
  local key = name .. "\0" .. sec .. "\0" .. text
  if seen[key] then return end
  seen[key] = true
  local list = doc.names[name]
  if not list then
    list = {}
    doc.names[name] = list
  end
  list[#list + 1] = {s = sec, t = text, sig = plain(sig)}
end

-- The blocks of the file: headings, tables (runs of | lines) and paragraphs,
-- split at blank lines; code fences are skipped.
local blocks, cur, fence = {}, nil, false
local function flush()
  if cur then blocks[#blocks + 1] = cur end
  cur = nil
end
for line in (slurp(md_path) .. "\n"):gmatch("([^\n]*)\n") do
  if line:match("^%s*```") then
    fence = not fence
    flush()
  elseif fence then
    -- code examples are not documentation entries
  elseif line:match("^#+%s") then
    flush()
    blocks[#blocks + 1] = {kind = "heading", level = #line:match("^#+"), text = line:gsub("^#+%s*", "")}
  elseif line:match("^%s*$") then
    flush()
  elseif line:match("^%s*|") then
    if cur and cur.kind ~= "table" then flush() end
    cur = cur or {kind = "table", rows = {}}
    cur.rows[#cur.rows + 1] = line
  else
    if cur and cur.kind ~= "para" then flush() end
    cur = cur or {kind = "para", lines = {}}
    cur.lines[#cur.lines + 1] = line
  end
end
flush()

local sec -- index of the current section, nil outside a Lua module's section
for _, b in ipairs(blocks) do
  if b.kind == "heading" then
    if b.level <= 2 then
      sec = nil
      for _, code in ipairs(spans(b.text)) do
        if code:match("^zorch[%w_%.]*$") then
          doc.sections[#doc.sections + 1] = {title = plain(b.text), module = code}
          sec = #doc.sections
          break
        end
      end
    end
  elseif sec and b.kind == "table" then
    for r, row in ipairs(b.rows) do
      local c = cells(row)
      local is_rule = row:match("^[%s|:%-]+$")
      local first = c[1] or ""
      if r > 1 and not is_rule and first:find("`", 1, true) then
        local desc = {}
        for k = 2, #c do
          if plain(c[k]) ~= "" then desc[#desc + 1] = plain(c[k]) end
        end
        local t = add_text(plain(first) .. (#desc > 0 and ": " .. table.concat(desc, "; ") or ""))
        for _, code in ipairs(spans(first)) do
          for _, it in ipairs(span_names(code)) do document(it.name, sec, t, it.sig) end
        end
      end
    end
  elseif sec and b.kind == "para" then
    local text = table.concat(b.lines, "\n")
    local t = add_text(plain(text))
    if not doc.sections[sec].intro then doc.sections[sec].intro = t end
    for _, code in ipairs(spans(text)) do
      for _, it in ipairs(span_names(code)) do document(it.name, sec, t, it.sig) end
    end
  end
end

-- Lua source for the table, keys in order so the output is reproducible.
local function lua_string(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end
local out = {"return {\nsections = {\n"}
for _, s in ipairs(doc.sections) do
  out[#out + 1] = ("  {title = %s, module = %s, intro = %s},\n"):format(lua_string(s.title),
                                                                       lua_string(s.module), s.intro or "nil")
end
out[#out + 1] = "},\ntexts = {\n"
for _, t in ipairs(doc.texts) do out[#out + 1] = "  " .. lua_string(t) .. ",\n" end
out[#out + 1] = "},\nnames = {\n"
local names = {}
for name in pairs(doc.names) do names[#names + 1] = name end
table.sort(names)
for _, name in ipairs(names) do
  out[#out + 1] = ("  [%s] = {"):format(lua_string(name))
  for _, e in ipairs(doc.names[name]) do
    out[#out + 1] = ("{s = %d, t = %d, sig = %s}, "):format(e.s, e.t, lua_string(e.sig))
  end
  out[#out + 1] = "},\n"
end
out[#out + 1] = "},\n}\n"

-- A C array of bytes for each Lua text: no limit on string literal length.
local function c_bytes(name, s)
  local o = {("const char %s[] = {\n"):format(name)}
  for k = 1, #s, 16 do
    local row = {}
    for m = k, math.min(k + 15, #s) do row[#row + 1] = ("0x%02x,"):format(s:byte(m)) end
    o[#o + 1] = table.concat(row) .. "\n"
  end
  o[#o + 1] = "0};\n"
  o[#o + 1] = ("const size_t %s_len = sizeof %s - 1;\n"):format(name, name)
  return table.concat(o)
end

io.write("/* generated by scripts/gen_help.lua from docs/api.md and vm/help.lua: do not edit */\n",
         "#include <stddef.h>\n",
         "extern const char help_doc_lua[], help_src_lua[];\n",
         "extern const size_t help_doc_lua_len, help_src_lua_len;\n",
         c_bytes("help_doc_lua", table.concat(out)), c_bytes("help_src_lua", slurp(src_path)))
