-- help.lua: help(x), the documentation of a zorch function, module or tensor
-- method, taken from docs/api.md (scripts/gen_help.lua makes the table at build
-- time). Loaded by vm/help.c with a function that loads that table and the
-- tensor methods table; returns the help function.
local load_doc, methods = ...

-- The library functions it uses, as they are now: a script may reassign globals.
local type, next, rawget, getmetatable, ipairs, select = type, next, rawget, getmetatable, ipairs, select
local concat, sort, remove = table.concat, table.sort, table.remove
local write, loaded, globals = io.write, package.loaded, _G

local doc -- the table, loaded at the first call

local USAGE = [[
help(x): the documentation of a zorch function, module or tensor method, from
docs/api.md: help(zorch.relu), help(zorch.nn.Linear), help(zorch.nn),
help("relu") (by name), help(x.view) (a tensor's method).
]]

-- Word-wraps text (its paragraphs kept) at width columns, each line indented.
local function wrap(text, indent, width)
  local out, line = {}, indent
  for word in text:gmatch("%S+") do
    if #line > #indent and #line + 1 + #word > width then
      out[#out + 1] = line
      line = indent .. word
    else
      line = line .. (#line > #indent and " " or "") .. word
    end
  end
  if #line > #indent then out[#out + 1] = line end
  return concat(out, "\n")
end

local function is_ident(k)
  return type(k) == "string" and k:match("^[%a_][%w_]*$") ~= nil
end

-- The name of a value: its path in the zorch table (breadth first, with raw
-- access so no __index runs), or Tensor:name for a tensor method.
local function name_of(v)
  local zorch = loaded and rawget(loaded, "zorch")
  if type(zorch) ~= "table" then return nil end
  if v == zorch then return "zorch" end
  local queue, seen, head = {{zorch, "zorch", 0}}, {[zorch] = true}, 1
  while queue[head] do
    local t, path, depth = queue[head][1], queue[head][2], queue[head][3]
    head = head + 1
    local keys = {}
    for k in next, t do
      if is_ident(k) then keys[#keys + 1] = k end
    end
    sort(keys)
    for _, k in ipairs(keys) do
      local x = rawget(t, k)
      if x == v then return path .. "." .. k end
      if type(x) == "table" and not seen[x] and depth < 4 then
        seen[x] = true
        queue[#queue + 1] = {x, path .. "." .. k, depth + 1}
      end
    end
  end
  if type(methods) == "table" then
    for k, x in next, methods do
      if x == v and is_ident(k) then return "Tensor:" .. k end
    end
  end
  return nil
end

-- The value a dotted name (zorch.nn.Linear, nn.Linear, Tensor:view) stands for.
local function value_of(name)
  local zorch = loaded and rawget(loaded, "zorch")
  if type(zorch) ~= "table" then return nil end
  local method = name:match("^[%a_][%w_]*:([%a_][%w_]*)$")
  if method then return type(methods) == "table" and rawget(methods, method) or nil end
  local t = zorch
  local parts = {}
  for p in name:gmatch("[^%.]+") do parts[#parts + 1] = p end
  if parts[1] == "zorch" then remove(parts, 1) end
  for _, p in ipairs(parts) do
    if type(t) ~= "table" then return nil end
    t = rawget(t, p)
  end
  return t
end

local function is_tensor(v)
  local mt = type(v) == "userdata" and getmetatable(v)
  return type(mt) == "table" and rawget(mt, "__methods") == methods
end

-- What a value is, in words.
local function kind_of(v, name)
  local t = type(v)
  if name and name:match("^Tensor:") then return "tensor method" end
  if t == "table" then
    local mt = getmetatable(v)
    if type(mt) == "table" and rawget(mt, "__call") then return "class" end
    return "module"
  end
  if t == "userdata" and is_tensor(v) then return "tensor" end
  return t
end

-- The documentation entries for a name: those of its own section (zorch.Engine),
-- then of the section of its module (zorch.nn for zorch.nn.Linear), the longest
-- module that fits; every entry when the name is not qualified.
local function entries_for(name)
  local bare = name:match("([%a_][%w_]*)$")
  local list = bare and doc.names[bare]
  if not list then return {} end
  local parent = name:match("^(.*)[%.:][%a_][%w_]*$")
  if not parent then return list end
  if parent == "Tensor" then parent = "zorch" end
  local best, best_len = {}, -1
  for _, e in ipairs(list) do
    local m = doc.sections[e.s].module
    local len = -1
    if m == name then
      len = 1000
    elseif parent == m or parent:sub(1, #m + 1) == m .. "." then
      len = #m
    end
    if len > best_len then
      best, best_len = {e}, len
    elseif len == best_len and len >= 0 then
      best[#best + 1] = e
    end
  end
  return best_len >= 0 and best or {}
end

local function show_entries(list)
  local shown = {}
  for i, e in ipairs(list) do
    if i > 4 then
      write(("  (%d more: help(\"%s\") lists them all)\n"):format(#list - 4, e.sig:match("[%a_][%w_]*$") or e.sig))
      break
    end
    local sec = doc.sections[e.s]
    write("\n", e.sig, "  [", sec.title, "]\n")
    if not shown[e.t] then
      write(wrap(doc.texts[e.t], "  ", 80), "\n")
      shown[e.t] = true
    else
      write("  (the text above)\n")
    end
  end
end

local function members(t)
  local keys = {}
  for k in next, t do
    if is_ident(k) and not k:match("^_") then keys[#keys + 1] = k end
  end
  sort(keys)
  return keys
end

local function help(...)
  if select("#", ...) == 0 then
    write(USAGE)
    return
  end
  local x = ...
  if x == "help" or x == help then
    write(USAGE)
    return
  end
  if not doc then doc = load_doc() end
  local name, v
  if type(x) == "string" then
    name, v = x, value_of(x)
    if v ~= nil then name = name_of(v) or x end
  else
    v, name = x, name_of(x)
    if not name then
      if is_tensor(x) then
        write("a tensor; its methods (help(x.name) for one):\n", wrap(concat(members(methods), " "), "  ", 80), "\n")
      else
        local global
        for k, g in next, globals do
          if g == x and is_ident(k) then global = k end
        end
        write("no documentation for ", global or ("this " .. type(x)), " (", type(x), ", not part of zorch)\n")
      end
      return
    end
  end
  local kind = v ~= nil and kind_of(v, name) or nil
  local also = ""
  if type(methods) == "table" and name:match("^zorch%.[%a_][%w_]*$") then
    local m = name:match("[%a_][%w_]*$")
    if rawget(methods, m) ~= nil then also = ", also the tensor method x:" .. m .. "()" end
  end
  local list = entries_for(name)
  local section
  for _, s in ipairs(doc.sections) do
    if s.module == name then section = s end
  end
  if #list == 0 and not section then
    write("no documentation for ", name, kind and (" (" .. kind .. ")") or "", "\n")
    return
  end
  write(name, kind and (": " .. kind .. also) or "", "\n")
  if section and #list == 0 and section.intro then
    write("\n", section.title, "\n", wrap(doc.texts[section.intro], "  ", 80), "\n")
  end
  show_entries(list)
  if type(v) == "table" and kind == "module" then
    write("\nmembers:\n", wrap(concat(members(v), " "), "  ", 80), "\n")
  end
end

return help
