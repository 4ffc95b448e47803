-- zorch.text.jinja: the subset of Jinja that Hugging Face chat templates use,
-- rendered as Transformers renders them (trim_blocks and lstrip_blocks on).
--   jinja.compile(source, name) -> template; template:render(vars) -> string
-- Statements: if/elif/else, for (loop.*, `for k, v in`, `if` filter), set
-- (names and namespace attributes); {{ }}, {# #}, the `-` and `+` markers.
-- Expressions: literals (strings, numbers, lists, dicts, true/false/none),
-- ~ + - * / // %, comparisons, and/or/not, in, `x if c else y`, is-tests,
-- filters, indexing and slicing (0-based as in Python), method calls on
-- strings and mappings. An undefined name is Jinja's Undefined: empty,
-- falsy, iterating as nothing; an attribute of it is an error. Every error
-- names the template and the line: "NAME:LINE: what". The parsing is
-- zorch.text.jinja_parse's; here are the values and the rendering.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local parse = zorch._require("zorch.text.jinja_parse")
local jinja = {}
local NONE, fail = parse.none, parse.fail
jinja.none = NONE -- Python's None (nil is Jinja's Undefined)

-- ---- values ------------------------------------------------------------------------------------

local function is_list(v)
  if type(v) ~= "table" or v == NONE then return false end
  if getmetatable(v) and getmetatable(v).__jinja_namespace then return false end
  local n = #v
  if n > 0 then return true end
  return next(v) == nil
end
local function is_mapping(v) return type(v) == "table" and v ~= NONE and not is_list(v) end

local function truthy(v)
  if v == nil or v == false or v == NONE or v == 0 or v == "" then return false end
  if type(v) == "table" then return next(v) ~= nil end
  return true
end

-- a mapping's keys: a dict literal's in its order, others' sorted (a Lua
-- table keeps no order)
local function sorted_keys(t)
  local order = (getmetatable(t) or {}).__jinja_order
  if order then return order end
  local ks = {}
  for k in pairs(t) do ks[#ks + 1] = k end
  table.sort(ks, function(a, b) return tostring(a) < tostring(b) end)
  return ks
end

local function num_str(v)
  if math.type(v) == "integer" then return ("%d"):format(v) end
  if v ~= v then return "nan" end
  if v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  local s = ("%.17g"):format(v)
  for p = 1, 17 do -- the shortest that reads back, as Python's repr
    local t = ("%." .. p .. "g"):format(v)
    if tonumber(t) == v then s = t; break end
  end
  if not s:find("[%.eEn]") then s = s .. ".0" end
  return s
end

local str
local function deeper(depth)
  depth = (depth or 0) + 1
  if depth > 64 then error("a list or mapping nested more than 64 deep (one that holds itself?)", 0) end
  return depth
end
-- Python's repr of a value inside a list or dict
local function repr(v, depth)
  if type(v) == "string" then
    if v:find("'") and not v:find('"') then return '"' .. v .. '"' end
    return "'" .. v:gsub("\\", "\\\\"):gsub("'", "\\'"):gsub("\n", "\\n") .. "'"
  end
  return str(v, depth)
end
-- Python's str
function str(v, depth)
  local t = type(v)
  if v == nil then return "" end
  if t == "string" then return v end
  if t == "number" then return num_str(v) end
  if t == "boolean" then return v and "True" or "False" end
  if v == NONE then return "None" end
  if is_list(v) then
    local parts = {}
    depth = deeper(depth)
    for i = 1, #v do parts[i] = repr(v[i], depth) end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  if t == "table" then
    local parts = {}
    depth = deeper(depth)
    for _, k in ipairs(sorted_keys(v)) do parts[#parts + 1] = repr(k) .. ": " .. repr(v[k], depth) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return tostring(v)
end

-- JSON as Python's json.dumps(ensure_ascii=False) writes it
local function tojson(v, indent, level, fail_with)
  level = level or 0
  if level > 64 then fail_with("tojson: nested more than 64 deep (a table that holds itself?)") end
  local t = type(v)
  if v == nil or v == NONE then return "null" end
  if t == "boolean" then return tostring(v) end
  if t == "number" then return num_str(v) end
  if t == "string" then
    return '"' .. v:gsub('[%c"\\]', function(c)
      local e = ({['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t", ["\b"] = "\\b", ["\f"] = "\\f"})[c]
      return e or ("\\u%04x"):format(c:byte())
    end) .. '"'
  end
  if t ~= "table" then fail_with("tojson: cannot write a " .. t) end
  local items, open, close = {}, "[", "]"
  if is_list(v) then
    for i = 1, #v do items[i] = tojson(v[i], indent, level + 1, fail_with) end
  else
    open, close = "{", "}"
    for _, k in ipairs(sorted_keys(v)) do
      items[#items + 1] = tojson(str(k)) .. ": " .. tojson(v[k], indent, level + 1, fail_with)
    end
  end
  if #items == 0 then return open .. close end
  if not indent then return open .. table.concat(items, ", ") .. close end
  local pad, inner = "\n" .. (" "):rep(indent * level), "\n" .. (" "):rep(indent * (level + 1))
  return open .. inner .. table.concat(items, "," .. inner) .. pad .. close
end

local function length(v)
  if type(v) == "string" then return utf8.len(v) or #v end
  if type(v) == "table" then
    if is_list(v) then return #v end
    local n = 0
    for _ in pairs(v) do n = n + 1 end
    return n
  end
  return 0
end

local function strip(s, chars, left, right)
  local set = chars and "[" .. chars:gsub("[%]%[%^%-%%]", "%%%0") .. "]" or "%s"
  if left ~= false then s = s:gsub("^" .. set .. "+", "") end
  if right ~= false then s = s:gsub(set .. "+$", "") end
  return s
end

local function split(s, sep)
  local out = {}
  if sep == nil or sep == NONE then
    for w in s:gmatch("%S+") do out[#out + 1] = w end
    return out
  end
  local pos = 1
  while true do
    local a, b = s:find(sep, pos, true)
    if not a or sep == "" then out[#out + 1] = s:sub(pos); return out end
    out[#out + 1] = s:sub(pos, a - 1)
    pos = b + 1
  end
end

-- ---- evaluation --------------------------------------------------------------------------------

local Render = {} -- one render: self.name, self.out, the scopes
Render.__index = Render

function Render:err(node, fmt, ...) fail(self.name, node.line, fmt, ...) end

local function lookup(scope, k)
  while scope do
    local v = scope.vars[k]
    if v ~= nil then return v end
    scope = scope.parent
  end
end

local function need_string(r, node, v, what)
  if type(v) ~= "string" then r:err(node, "%s needs a string, got %s", what, v == nil and "undefined" or str(v)) end
  return v
end

local FILTERS = {}
function FILTERS.trim(_, _, v) return strip(str(v)) end
function FILTERS.length(_, _, v) return length(v) end
FILTERS.count = FILTERS.length
function FILTERS.upper(_, _, v) return str(v):upper() end
function FILTERS.lower(_, _, v) return str(v):lower() end
function FILTERS.capitalize(_, _, v) local s = str(v); return s:sub(1, 1):upper() .. s:sub(2):lower() end
function FILTERS.string(_, _, v) return str(v) end
function FILTERS.tojson(r, n, v, pos, kw)
  local indent = kw.indent or pos[1]
  if indent ~= nil and indent ~= NONE and math.type(indent) ~= "integer" then r:err(n, "tojson: indent must be an integer") end
  return tojson(v, indent ~= NONE and indent or nil, 0, function(msg) r:err(n, "%s", msg) end)
end
function FILTERS.default(_, _, v, pos, kw)
  local boolean = kw.boolean or pos[2]
  if v == nil or (boolean and not truthy(v)) then return pos[1] == nil and "" or pos[1] end
  return v
end
FILTERS.d = FILTERS.default
function FILTERS.join(r, n, v, pos, kw)
  local parts = {}
  if type(v) == "string" then return v end
  if type(v) ~= "table" then r:err(n, "join needs a list") end
  for i = 1, #v do parts[i] = str(v[i]) end
  return table.concat(parts, str(kw.d or pos[1] or ""))
end
function FILTERS.safe(_, _, v) return v end
function FILTERS.items(r, n, v)
  if not is_mapping(v) then r:err(n, "items needs a mapping") end
  local out = {}
  for _, k in ipairs(sorted_keys(v)) do out[#out + 1] = {k, v[k]} end
  return out
end
local function replace(s, a, b)
  if a == "" then return s end
  return (s:gsub(a:gsub("%p", "%%%0"), (b:gsub("%%", "%%%%"))))
end
function FILTERS.replace(r, n, v, pos)
  return replace(str(v), need_string(r, n, pos[1], "replace"), need_string(r, n, pos[2], "replace"))
end
function FILTERS.first(_, _, v) if type(v) == "table" then return v[1] end end
function FILTERS.last(_, _, v) if type(v) == "table" then return v[#v] end end
function FILTERS.list(_, _, v) return v end
function FILTERS.int(_, _, v) return math.tointeger(tonumber(v) and math.floor(tonumber(v))) or 0 end

local TESTS = {}
function TESTS.defined(v) return v ~= nil end
function TESTS.undefined(v) return v == nil end
function TESTS.none(v) return v == NONE end
function TESTS.string(v) return type(v) == "string" end
function TESTS.number(v) return type(v) == "number" end
function TESTS.integer(v) return math.type(v) == "integer" end
function TESTS.boolean(v) return type(v) == "boolean" end
function TESTS.mapping(v) return is_mapping(v) end
function TESTS.sequence(v) return type(v) == "string" or is_list(v) end
function TESTS.iterable(v) return type(v) == "string" or (type(v) == "table" and v ~= NONE) end
function TESTS.even(v) return type(v) == "number" and v % 2 == 0 end
function TESTS.odd(v) return type(v) == "number" and v % 2 == 1 end
TESTS["true"] = function(v) return v == true end
TESTS["false"] = function(v) return v == false end
function TESTS.eq(v, a) return v == a end
TESTS.equalto = TESTS.eq
TESTS.sameas = TESTS.eq
TESTS["in"] = function(v, a)
  if type(a) == "string" then return type(v) == "string" and a:find(v, 1, true) ~= nil end
  if type(a) == "table" then
    if is_list(a) then for i = 1, #a do if a[i] == v then return true end end return false end
    return a[v] ~= nil
  end
  return false
end

local STRING_METHODS = {
  strip = function(s, a) return strip(s, a[1] ~= NONE and a[1] or nil) end,
  lstrip = function(s, a) return strip(s, a[1] ~= NONE and a[1] or nil, true, false) end,
  rstrip = function(s, a) return strip(s, a[1] ~= NONE and a[1] or nil, false, true) end,
  startswith = function(s, a) return s:sub(1, #a[1]) == a[1] end,
  endswith = function(s, a) return a[1] == "" or s:sub(-#a[1]) == a[1] end,
  split = function(s, a) return split(s, a[1]) end,
  upper = function(s) return s:upper() end,
  lower = function(s) return s:lower() end,
  title = function(s) return (s:gsub("(%a)(%a*)", function(x, y) return x:upper() .. y:lower() end)) end,
  capitalize = function(s) return s:sub(1, 1):upper() .. s:sub(2):lower() end,
  replace = function(s, a) return replace(s, a[1], a[2]) end,
  find = function(s, a) local i = s:find(a[1], 1, true); return i and i - 1 or -1 end,
}
local MAP_METHODS = {
  items = function(t) return FILTERS.items(nil, nil, t) end,
  keys = function(t) return sorted_keys(t) end,
  values = function(t)
    local out = {}
    for _, k in ipairs(sorted_keys(t)) do out[#out + 1] = t[k] end
    return out
  end,
  get = function(t, a) local v = t[a[1]]; if v == nil then return a[2] == nil and NONE or a[2] end return v end,
}

local function index(r, node, v, k)
  if v == nil then r:err(node, "%s is undefined", node[1].op == "name" and node[1][1] or "the value") end
  if type(v) == "string" then
    if math.type(k) ~= "integer" then return nil end
    if k < 0 then k = #v + k end
    if k < 0 or k >= #v then return nil end
    return v:sub(k + 1, k + 1)
  end
  if type(v) ~= "table" or v == NONE then return nil end
  if math.type(k) == "integer" and is_list(v) then
    if k < 0 then k = #v + k end
    return v[k + 1]
  end
  return v[k]
end

local function slice(v, a, b, step)
  local n = #v
  step = step or 1
  local function norm(x, default)
    if x == nil or x == NONE then return default end
    if x < 0 then x = math.max(n + x, step > 0 and 0 or -1) end
    return math.min(x, step > 0 and n or n - 1)
  end
  local out = {}
  if step > 0 then
    for i = norm(a, 0), norm(b, n) - 1, step do out[#out + 1] = type(v) == "string" and v:sub(i + 1, i + 1) or v[i + 1] end
  else
    for i = norm(a, n - 1), norm(b, -1) + 1, step do out[#out + 1] = type(v) == "string" and v:sub(i + 1, i + 1) or v[i + 1] end
  end
  return type(v) == "string" and table.concat(out) or out
end

-- the functions every template sees: (render, node, positional, keywords)
local GLOBALS = {}
function GLOBALS.namespace(_, _, _, kw)
  local ns = setmetatable({}, {__jinja_namespace = true})
  for k, v in pairs(kw) do ns[k] = v end
  return ns
end
function GLOBALS.raise_exception(r, n, args) r:err(n, "raise_exception: %s", str(args[1])) end
function GLOBALS.range(r, n, args)
  local a, b, step = args[1], args[2], args[3] or 1
  if b == nil then a, b = 0, a end
  if math.type(a) ~= "integer" or math.type(b) ~= "integer" or math.type(step) ~= "integer" or step == 0 then
    r:err(n, "range needs integers")
  end
  if (b - a) // step > 100000 then r:err(n, "range of more than 100000 numbers") end -- the sandbox's cap
  local out = {}
  for i = a, b - (step > 0 and 1 or -1), step do out[#out + 1] = i end
  return out
end
-- Transformers' strftime_now(format): the local time
function GLOBALS.strftime_now(r, n, args) return os.date(need_string(r, n, args[1], "strftime_now")) end
local BUILTIN = {}
for _, f in pairs(GLOBALS) do BUILTIN[f] = true end

function Render:eval(n)
  local op = n.op
  if op == "lit" then return n[1] end
  if op == "name" then
    local k = n[1]
    local v = lookup(self.scope, k)
    if v ~= nil then return v end
    return GLOBALS[k]
  end
  if op == "and" then local a = self:eval(n[1]); if not truthy(a) then return a end return self:eval(n[2]) end
  if op == "or" then local a = self:eval(n[1]); if truthy(a) then return a end return self:eval(n[2]) end
  if op == "not" then return not truthy(self:eval(n[1])) end
  if op == "ifelse" then
    if truthy(self:eval(n[1])) then return self:eval(n[2]) end
    return n[3] and self:eval(n[3]) or nil
  end
  if op == "list" then
    local out = {}
    for i, e in ipairs(n[1]) do out[i] = self:eval(e) end
    return out
  end
  if op == "dict" then
    local out, order = {}, {}
    for i, e in ipairs(n[1]) do
      local k = self:eval(e)
      if out[k] == nil then order[#order + 1] = k end
      out[k] = self:eval(n[2][i])
    end
    return setmetatable(out, {__jinja_order = order})
  end
  if op == "attr" then
    local v = self:eval(n[1])
    if v == nil then self:err(n, "'%s' of an undefined value", n[2]) end
    if type(v) == "table" and v ~= NONE then return v[n[2]] end
    return nil
  end
  if op == "index" then return index(self, n, self:eval(n[1]), self:eval(n[2])) end
  if op == "slice" then
    local v = self:eval(n[1])
    if type(v) ~= "string" and not is_list(v) then self:err(n, "slicing needs a list or a string") end
    return slice(v, n[2] and self:eval(n[2]), n[3] and self:eval(n[3]), n[4] and self:eval(n[4]))
  end
  if op == "method" then
    local v, name = self:eval(n[1]), n[2]
    local args = {}
    for i, e in ipairs(n[3]) do args[i] = self:eval(e) end
    if type(v) == "string" and STRING_METHODS[name] then
      local need = ({startswith = 1, endswith = 1, find = 1, replace = 2})[name] or 0
      if #args < need then self:err(n, "%s needs %d argument%s", name, need, need > 1 and "s" or "") end
      for i = 1, #args do
        if args[i] ~= NONE then need_string(self, n, args[i], name) end -- strip(None), split(None): white space
      end
      return STRING_METHODS[name](v, args)
    end
    if is_mapping(v) and MAP_METHODS[name] and v[name] == nil then return MAP_METHODS[name](v, args) end
    local f = type(v) == "table" and v ~= NONE and v[name] or nil
    if type(f) == "function" then return f(table.unpack(args)) end
    self:err(n, "%s has no method '%s'", v == nil and "an undefined value" or type(v) == "string" and "a string" or "the value", name)
  end
  if op == "call" then
    local f = self:eval(n[1])
    local args, kw = {}, {}
    for i, e in ipairs(n[2]) do args[i] = self:eval(e) end
    for k, e in pairs(n[3]) do kw[k] = self:eval(e) end
    if BUILTIN[f] then return f(self, n, args, kw) end
    if type(f) ~= "function" then self:err(n, "%s is not a function", n[1].op == "name" and n[1][1] or "the value") end
    return f(table.unpack(args)) -- a function the caller passed
  end
  if op == "filter" then
    local f = FILTERS[n[2]]
    if not f then self:err(n, "unknown filter '%s'", n[2]) end
    local pos, kw = {}, {}
    for i, e in ipairs(n[3]) do pos[i] = self:eval(e) end
    for k, e in pairs(n[4]) do kw[k] = self:eval(e) end
    return f(self, n, self:eval(n[1]), pos, kw)
  end
  if op == "test" then
    local t = TESTS[n[2]]
    if not t then self:err(n, "unknown test '%s'", n[2]) end
    local arg = n[3][1] and self:eval(n[3][1])
    return t(self:eval(n[1]), arg)
  end
  if op == "in" then return TESTS["in"](self:eval(n[1]), self:eval(n[2])) end
  if op == "neg" then
    local v = self:eval(n[1])
    if type(v) ~= "number" then self:err(n, "'-' needs a number") end
    return -v
  end
  local a, b = self:eval(n[1]), self:eval(n[2])
  if op == "==" then return a == b end
  if op == "!=" then return a ~= b end
  if op == "~" then return str(a) .. str(b) end
  if op == "+" and type(a) == "string" and type(b) == "string" then return a .. b end
  if op == "+" and is_list(a) and is_list(b) then
    local out = {table.unpack(a)}
    for i = 1, #b do out[#out + 1] = b[i] end
    return out
  end
  if op == "<" or op == ">" or op == "<=" or op == ">=" then
    if type(a) ~= type(b) or (type(a) ~= "number" and type(a) ~= "string") then
      self:err(n, "'%s' between %s and %s", op, a == nil and "undefined" or type(a), b == nil and "undefined" or type(b))
    end
    if op == "<" then return a < b elseif op == ">" then return a > b elseif op == "<=" then return a <= b else return a >= b end
  end
  if type(a) ~= "number" or type(b) ~= "number" then
    self:err(n, "'%s' between %s and %s", op, a == nil and "undefined" or type(a), b == nil and "undefined" or type(b))
  end
  if op == "+" then return a + b elseif op == "-" then return a - b elseif op == "*" then return a * b
  elseif op == "/" then if b == 0 then self:err(n, "division by zero") end return a / b
  elseif op == "//" then if b == 0 then self:err(n, "division by zero") end return a // b
  elseif op == "%" then if b == 0 then self:err(n, "division by zero") end return a % b end
  self:err(n, "unknown operator '%s'", op)
end

-- ---- statements --------------------------------------------------------------------------------

function Render:exec(body)
  local out = self.out
  for _, n in ipairs(body) do
    local op = n.op
    self.line = n.line or self.line
    if op == "text" then out[#out + 1] = n[1]
    elseif op == "out" then out[#out + 1] = str(self:eval(n[1]))
    elseif op == "if" then
      for k, cond in ipairs(n.conds) do
        if truthy(self:eval(cond)) then self:exec(n.bodies[k]); break end
      end
    elseif op == "set" then
      local v = self:eval(n[1])
      if n.attr then
        local ns = lookup(self.scope, n.target)
        if type(ns) ~= "table" or not (getmetatable(ns) or {}).__jinja_namespace then
          self:err(n, "'%s.%s = ...' needs a namespace", n.target, n.attr)
        end
        ns[n.attr] = v
      else self.scope.vars[n.target] = v end
    elseif op == "for" then self:loop(n) end
  end
end

function Render:loop(n)
  local seq = self:eval(n.iter)
  local items = {}
  if type(seq) == "string" then
    for _, c in utf8.codes(seq) do items[#items + 1] = utf8.char(c) end
  elseif is_list(seq) then items = seq
  elseif is_mapping(seq) then items = sorted_keys(seq)
  elseif seq ~= nil and seq ~= NONE then self:err(n, "'for' needs a list, got %s", str(seq)) end
  local outer = self.scope
  local function bind(vars, item)
    if #n.vars == 1 then vars[n.vars[1]] = item
    else
      if type(item) ~= "table" then self:err(n, "cannot unpack %s into %d names", str(item), #n.vars) end
      for k, name in ipairs(n.vars) do vars[name] = item[k] end
    end
  end
  if n.filter then -- the filter sees each item, before loop.* is counted
    local kept = {}
    for _, item in ipairs(items) do
      self.scope = {vars = {}, parent = outer}
      bind(self.scope.vars, item)
      if truthy(self:eval(n.filter)) then kept[#kept + 1] = item end
    end
    items = kept
  end
  local len = #items
  for i = 1, len do
    local vars = {loop = {index = i, index0 = i - 1, first = i == 1, last = i == len, length = len, revindex = len - i + 1,
                          revindex0 = len - i, previtem = items[i - 1], nextitem = items[i + 1]}}
    bind(vars, items[i])
    self.scope = {vars = vars, parent = outer}
    self:exec(n.body)
  end
  self.scope = outer
  if len == 0 and n.other then self:exec(n.other) end
end

local Template = {}
Template.__index = Template

function jinja.compile(source, name)
  if type(source) ~= "string" then error("jinja.compile: source must be a string, got " .. type(source), 2) end
  name = name or "template"
  return setmetatable({body = parse.parse(source, name), name = name}, Template)
end

-- vars: the template's names (Lua tables are lists or mappings; jinja.none is None)
function Template:render(vars)
  local r = setmetatable({name = self.name, out = {}, scope = {vars = {}, parent = {vars = vars or {}}}, line = 1}, Render)
  local ok, err = pcall(r.exec, r, self.body)
  if not ok then -- every error names the template and a line, a Lua one (stack overflow, a caller's function) too
    err = tostring(err)
    if err:sub(1, #self.name + 1) ~= self.name .. ":" then err = ("%s:%d: %s"):format(self.name, r.line, err) end
    error(err, 0)
  end
  return table.concat(r.out)
end

return jinja
