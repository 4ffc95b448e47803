-- zorch.flags(args, spec [, usage]): the command line of a script, parsed by one
-- helper shared by every script. Returns a table: flag and argument name -> value.
--
-- spec maps a flag name to {default, help, type =, choices =, short =}. The type
-- is "integer", "number", "boolean" or "string"; without one it is the default's
-- (math.type tells 1000, an integer, from 1.0, a number). The array part of spec
-- lists positional arguments in order: {name, help, type =, default =, choices =,
-- optional =, many =}; one with a default (or optional = true) may be left out,
-- and a last one with many = true takes the rest as a list.
--
-- Understood: --name value, --name=value, -s value and -svalue (short = "s"),
-- bundled booleans (-qv), --flag / --no-flag / --flag=true|false|1|0 for booleans,
-- `--` (what follows is positional), --help and -h.
--
-- A bad command line raises a zorch.UsageError: a one-line message and the usage
-- line, status 2. --help raises one with the help text and status 0. The zorch
-- command prints either without a traceback and exits with its status; a script
-- may catch it with pcall (tostring gives the text). Mistakes in the spec itself
-- are ordinary errors.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local flags = {}

local UsageError = {__name = "zorch.UsageError"}
UsageError.__index = UsageError
UsageError.__tostring = function(e) return e.message end
flags.UsageError = UsageError

-- A usage error with this message (status 2 unless given).
function flags.usage_error(message, status)
  return setmetatable({message = message, status = status or 2}, UsageError)
end

function flags.is_usage_error(e) return getmetatable(e) == UsageError end

-- A usage error now, before any training, when the file an output flag names
-- cannot be written (a missing folder, no permission): a probe file next to it
-- is created and removed. An empty path is no output.
function flags.check_output(path, flag)
  if path == nil or path == "" then return end
  local probe = path .. ".probe-" .. tostring(os.time()) .. "-" .. tostring(math.random(1 << 30))
  local f, why = io.open(probe, "w")
  if not f then
    error(flags.usage_error(("%s: cannot write %s: %s"):format(flag, path, tostring(why):gsub("^[^:]*: ", ""))), 0)
  end
  f:close()
  os.remove(probe)
end

local TYPES = {integer = true, number = true, boolean = true, string = true}
local PLACEHOLDER = {integer = "INT", number = "NUM", string = "STR"}

local function value_type(v)
  if math.type(v) == "integer" then return "integer" end
  if math.type(v) == "float" then return "number" end
  if type(v) == "boolean" or type(v) == "string" then return type(v) end
end

local function fits(v, ty)
  if ty == "number" then return type(v) == "number" end
  return value_type(v) == ty
end

-- Checks one spec entry and returns its normal form.
local function entry(name, e, positional)
  local where = positional and ("positional argument '%s'"):format(name) or ("flag '%s'"):format(name)
  local function bad(msg) error(("zorch.flags: %s: %s"):format(where, msg), 5) end
  local allowed = positional and {type = true, choices = true, optional = true, many = true}
                  or {type = true, choices = true, short = true}
  for k in pairs(e) do
    if not (k == 1 or k == 2 or allowed[k]) then bad(("unknown field '%s'"):format(tostring(k))) end
  end
  local default = e[1]
  local help = e[2]
  if help ~= nil and type(help) ~= "string" then bad("the help text must be a string") end
  local ty = e.type or value_type(default) or (positional and "string")
  if e.choices and not e.type and default == nil then ty = value_type(e.choices[1]) end
  if not TYPES[ty] then bad("type must be integer, number, boolean or string (or come from a default)") end
  if default ~= nil and not fits(default, ty) then bad(("the default %s is not a %s"):format(tostring(default), ty)) end
  if e.choices ~= nil then
    if type(e.choices) ~= "table" or #e.choices == 0 then bad("choices must be a non-empty list") end
    for _, c in ipairs(e.choices) do
      if not fits(c, ty) then bad(("choice %s is not a %s"):format(tostring(c), ty)) end
    end
    local found = default == nil
    for _, c in ipairs(e.choices) do found = found or c == default end
    if not found then bad(("the default %s is not one of the choices"):format(tostring(default))) end
  end
  if ty == "boolean" and positional then bad("a positional argument cannot be a boolean") end
  if e.short ~= nil and (type(e.short) ~= "string" or not e.short:match("^%a$")) then
    bad("short must be one letter")
  end
  if ty == "number" and math.type(default) == "integer" then default = default + 0.0 end
  return {name = name, help = help or "", type = ty, default = default, choices = e.choices, short = e.short,
          optional = positional and (e.optional or default ~= nil), many = e.many}
end

-- The spec as {flags = {sorted}, by_name = {}, by_short = {}, positional = {in order}}.
local function compile(spec)
  if type(spec) ~= "table" then error("zorch.flags: spec must be a table", 3) end
  local s = {flags = {}, by_name = {}, by_short = {}, positional = {}}
  for k, e in pairs(spec) do
    if type(e) ~= "table" then error(("zorch.flags: spec entry '%s' must be a table"):format(tostring(k)), 3) end
    if math.type(k) == "integer" then
      if type(e[1]) ~= "string" then error(("zorch.flags: positional argument %d needs a name"):format(k), 3) end
    elseif type(k) ~= "string" or not k:match("^[%w_][%w_%-]*$") then
      error(("zorch.flags: bad flag name '%s'"):format(tostring(k)), 3)
    elseif k == "help" then
      error("zorch.flags: --help is built in", 3)
    end
  end
  local pos_fields = {type = true, default = true, choices = true, optional = true, many = true}
  for i = 1, #spec do
    local e = spec[i]
    for k in pairs(e) do
      if not (k == 1 or k == 2 or pos_fields[k]) then
        error(("zorch.flags: positional argument '%s': unknown field '%s'"):format(e[1], tostring(k)), 3)
      end
    end
    local p = entry(e[1], {e.default, e[2], type = e.type, choices = e.choices, optional = e.optional,
                           many = e.many}, true)
    if p.many and i ~= #spec then error(("zorch.flags: '%s': only the last positional argument takes many"):format(p.name), 3) end
    local prev = s.positional[#s.positional]
    if prev and prev.optional and not p.optional then
      error(("zorch.flags: required argument '%s' follows optional '%s'"):format(p.name, prev.name), 3)
    end
    s.positional[i] = p
  end
  for k, e in pairs(spec) do
    if type(k) == "string" then
      local f = entry(k, e, false)
      s.flags[#s.flags + 1] = f
      s.by_name[k] = f
      if f.short then
        if f.short == "h" or s.by_short[f.short] then
          error(("zorch.flags: short flag -%s is used twice (-h is --help)"):format(f.short), 3)
        end
        s.by_short[f.short] = f
      end
    end
  end
  table.sort(s.flags, function(a, b) return a.name < b.name end)
  return s
end

local function shown(v)
  if type(v) == "string" then return ("%q"):format(v) end
  return tostring(v)
end

local function default_usage(s, args)
  local prog = args[0] and ((args[-1] and "zorch " or "") .. args[0]) or "script"
  local parts = {"usage: " .. prog, "[flags]"}
  for _, p in ipairs(s.positional) do
    local n = p.many and (p.name .. "...") or p.name
    parts[#parts + 1] = p.optional and ("[" .. n .. "]") or n
  end
  return table.concat(parts, " ")
end

local function joined(list, sep)
  local c = {}
  for i, v in ipairs(list) do c[i] = tostring(v) end
  return table.concat(c, sep)
end

-- "help (type, default d)", or "help (one of a, b; default d)".
local function describe(x)
  local kind = x.choices and ("one of " .. joined(x.choices, ", ")) or x.type
  local d = x.default ~= nil and ((x.choices and "; " or ", ") .. "default " .. shown(x.default)) or ""
  return (x.help ~= "" and (x.help .. " ") or "") .. "(" .. kind .. d .. ")"
end

-- text broken at spaces into lines of at most width characters, joined by sep.
local function wrap(text, width, sep)
  local lines, line = {}, ""
  for word in text:gmatch("%S+") do
    if line ~= "" and #line + 1 + #word > width then
      lines[#lines + 1] = line
      line = word
    else
      line = line == "" and word or (line .. " " .. word)
    end
  end
  lines[#lines + 1] = line
  return table.concat(lines, sep)
end

-- The help text: usage, positional arguments, flags (type, default, help).
local function help_text(s, usage)
  local rows = {}
  if #s.positional > 0 then
    rows[#rows + 1] = "arguments:"
    for _, p in ipairs(s.positional) do rows[#rows + 1] = {p.name .. (p.many and "..." or ""), describe(p)} end
  end
  rows[#rows + 1] = "flags:"
  for _, f in ipairs(s.flags) do
    local left = f.short and ("-" .. f.short .. ", ") or "    "
    if f.type == "boolean" then
      left = left .. (f.name:sub(1, 3) == "no-" and "--" or "--[no-]") .. f.name
    else
      left = left .. "--" .. f.name .. " " .. (f.choices and ("{" .. joined(f.choices, ",") .. "}") or PLACEHOLDER[f.type])
    end
    rows[#rows + 1] = {left, describe(f)}
  end
  rows[#rows + 1] = {"-h, --help", "print this help"}
  local w = 0
  for _, r in ipairs(rows) do
    if type(r) == "table" and #r[1] <= 28 then w = math.max(w, #r[1]) end
  end
  local lines = {usage}
  for _, r in ipairs(rows) do
    if type(r) == "string" then
      lines[#lines + 1] = "\n" .. r
    else -- the help wrapped at 80 columns; a long flag has it from the next line
      local text = wrap(r[2], math.max(30, 76 - w), "\n" .. (" "):rep(w + 4))
      if #r[1] <= w then lines[#lines + 1] = ("  %-" .. w .. "s  %s"):format(r[1], text)
      else lines[#lines + 1] = ("  %s\n  %s  %s"):format(r[1], (" "):rep(w), text) end
    end
  end
  return table.concat(lines, "\n")
end

-- The value of text for x (a flag or positional argument) shown on the command
-- line as `what`; a usage error when it does not fit.
local function convert(x, text, what, fail)
  local v
  if x.type == "integer" then
    v = tonumber(text)
    if math.type(v) ~= "integer" then fail(("%s expects an integer, got '%s'"):format(what, text)) end
  elseif x.type == "number" then
    v = tonumber(text)
    if v == nil then fail(("%s expects a number, got '%s'"):format(what, text)) end
    v = v + 0.0
  elseif x.type == "boolean" then
    local b = {["true"] = true, ["1"] = true, ["false"] = false, ["0"] = false}
    v = b[text]
    if v == nil then fail(("%s expects true, false, 1 or 0, got '%s'"):format(what, text)) end
  else
    v = text
  end
  if x.choices then
    local ok = false
    for _, c in ipairs(x.choices) do ok = ok or c == v end
    if not ok then
      local c = {}
      for i, cv in ipairs(x.choices) do c[i] = tostring(cv) end
      fail(("%s must be one of %s, got '%s'"):format(what, table.concat(c, ", "), text))
    end
  end
  return v
end

-- flags.parse(args, spec [, usage]) (also zorch.flags(...)): see the top of the file.
function flags.parse(args, spec, usage)
  if args ~= nil and type(args) ~= "table" then error("zorch.flags: args must be a table (arg)", 2) end
  args = args or {}
  local s = compile(spec)
  if usage ~= nil and type(usage) ~= "string" then error("zorch.flags: usage must be a string", 2) end
  usage = usage or default_usage(s, args)
  local function fail(msg) error(flags.usage_error(msg .. "\n" .. usage), 0) end
  local function help() error(flags.usage_error(help_text(s, usage), 0), 0) end
  local out = {}
  for _, f in ipairs(s.flags) do out[f.name] = f.default end
  local pos, i, n, rest = {}, 1, #args, false
  local function next_value(what)
    i = i + 1
    if args[i] == nil then fail(what .. " needs a value") end
    return tostring(args[i])
  end
  while i <= n do
    local a = tostring(args[i])
    if rest or a == "-" or a:match("^%-[%d.]") or a:sub(1, 1) ~= "-" then
      pos[#pos + 1] = a -- a negative number is an argument too
    elseif a == "--" then
      rest = true
    elseif a:sub(1, 2) == "--" then
      local name, value = a:match("^%-%-([^=]+)=(.*)$")
      name = name or a:sub(3)
      if name == "help" then help() end
      -- --stop_at and --stop-at name the same flag, whichever the spec spells
      local f, negated = s.by_name[name] or s.by_name[name:gsub("_", "-")] or s.by_name[name:gsub("-", "_")], false
      local plain = name:sub(4)
      plain = s.by_name[plain] and plain or s.by_name[plain:gsub("_", "-")] and plain:gsub("_", "-")
        or s.by_name[plain:gsub("-", "_")] and plain:gsub("-", "_") or plain
      if not f and name:match("^no[-_]") and s.by_name[plain] then
        f, negated = s.by_name[plain], true
        if f.type ~= "boolean" then fail(("--%s: only a boolean flag has a --no- form"):format(name)) end
      end
      if not f then
        local names = {}
        for n in pairs(s.by_name) do names[#names + 1] = n end
        table.sort(names)
        local near = zorch._require("zorch.util").closest(name, names)
        fail(("unknown flag '--%s'%s"):format(name, near and ("; did you mean '--" .. near .. "'?") or ""))
      end
      if negated then
        if value ~= nil then fail(("--%s takes no value"):format(name)) end
        out[f.name] = false
      elseif f.type == "boolean" and value == nil then
        out[f.name] = true
      else
        out[f.name] = convert(f, value or next_value("--" .. name), "--" .. name, fail)
      end
    else -- short flags, possibly bundled: -q, -qv, -e 3, -e3
      local j = 2
      while j <= #a do
        local c = a:sub(j, j)
        local f = s.by_short[c]
        if not f and c == "h" then help() end
        if not f then fail(("unknown flag '-%s'"):format(c)) end
        if f.type == "boolean" then
          out[f.name] = true
          j = j + 1
        else
          local value = a:sub(j + 1):gsub("^=", "")
          if value == "" then value = next_value("-" .. c) end
          out[f.name] = convert(f, value, "-" .. c, fail)
          break
        end
      end
    end
    i = i + 1
  end
  local k = 1
  for _, p in ipairs(s.positional) do
    if p.many then
      local list = {}
      while k <= #pos do
        list[#list + 1] = convert(p, pos[k], p.name, fail)
        k = k + 1
      end
      if #list == 0 and not p.optional then fail(("missing argument '%s'"):format(p.name)) end
      out[p.name] = list
    elseif pos[k] ~= nil then
      out[p.name] = convert(p, pos[k], p.name, fail)
      k = k + 1
    elseif not p.optional then
      fail(("missing argument '%s'"):format(p.name))
    else
      out[p.name] = p.default
    end
  end
  if pos[k] ~= nil then fail(("unexpected argument '%s'"):format(pos[k])) end
  return out
end

-- The help text for a spec (what --help prints).
function flags.help(spec, usage, args)
  local s = compile(spec)
  return help_text(s, usage or default_usage(s, args or {}))
end

zorch.flags = setmetatable(flags, {__call = function(_, ...) return flags.parse(...) end})
return zorch.flags
