-- zorch.text.jinja_parse: Jinja templates into trees for zorch.text.jinja:
-- the tags (with trim_blocks, lstrip_blocks and the - and + markers), the
-- expressions (Jinja's precedence) and the statements.
--   parse(source, name) -> body, a list of {op = "text"|"out"|"if"|"for"|"set", ...}
-- Errors: "NAME:LINE: what".
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local P = {}

-- Python's None (nil is Jinja's Undefined)
P.none = setmetatable({}, {__name = "none", __tostring = function() return "None" end})
local NONE = P.none

local function fail(name, line, fmt, ...) error(("%s:%d: %s"):format(name, line, fmt:format(...)), 0) end
P.fail = fail

-- ---- lexing: text and tags ---------------------------------------------------------------------

-- Where the tag's close starts: the first `close` from i not inside a string.
local function find_close(src, i, close, strings)
  local quote
  while i <= #src do
    local c = src:sub(i, i)
    if quote then
      if c == "\\" then i = i + 1 elseif c == quote then quote = nil end
    elseif strings and (c == "'" or c == '"') then quote = c
    elseif src:sub(i, i + 1) == close then return i end
    i = i + 1
  end
end

-- The template as a list of {kind = "text"|"var"|"block", s, line}, with the
-- white space rules applied to the text around the tags.
local function split_tags(src, name)
  local out, pos, line = {}, 1, 1
  local function lines_in(s) local _, n = s:gsub("\n", ""); return n end
  local CLOSE = {["{"] = "}}", ["%"] = "%}", ["#"] = "#}"}
  while pos <= #src do
    local a, _, open = src:find("{([{%%#])", pos)
    local text, text_line = src:sub(pos, (a or #src + 1) - 1), line
    line = line + lines_in(text)
    if not a then
      out[#out + 1] = {kind = "text", s = text, line = text_line}
      break
    end
    local lmark = src:match("^[-+]", a + 2)
    local b = find_close(src, a + 2 + (lmark and 1 or 0), CLOSE[open], open ~= "#")
    if not b then fail(name, line, "'%s' is not closed", "{" .. open) end
    local rmark = b > a + 2 + (lmark and 1 or 0) and src:sub(b - 1, b - 1):match("[-+]") or nil
    local inner = src:sub(a + 2 + (lmark and 1 or 0), b - 1 - (rmark and 1 or 0))
    -- the text before the tag: "-" strips all white space; lstrip_blocks the
    -- blanks that begin its line before {% and {# (not with "+")
    if lmark == "-" then
      text = text:gsub("%s+$", "")
    elseif open ~= "{" and lmark ~= "+" then
      local l_pos = text:match(".*\n()") or 1
      if (l_pos > 1 or pos == 1 or src:sub(pos - 1, pos - 1) == "\n") and text:find("^%s*$", l_pos) then text = text:sub(1, l_pos - 1) end
    end
    out[#out + 1] = {kind = "text", s = text, line = text_line}
    out[#out + 1] = {kind = open == "{" and "var" or open == "%" and "block" or "comment", s = inner, line = line}
    line = line + lines_in(src:sub(a, b + 1))
    pos = b + 2
    -- after the tag: "-" strips all white space; trim_blocks one newline after %} and #}
    if rmark == "-" then
      local ws = src:match("^%s*", pos)
      line, pos = line + lines_in(ws), pos + #ws
    elseif open ~= "{" and rmark ~= "+" and src:sub(pos, pos) == "\n" then
      line, pos = line + 1, pos + 1
    end
  end
  return out
end

-- ---- expressions -------------------------------------------------------------------------------

local KEYWORDS = {["and"] = true, ["or"] = true, ["not"] = true, ["in"] = true, ["is"] = true, ["if"] = true, ["else"] = true}
local OPS = {"//", "==", "!=", "<=", ">=", "**", "+", "-", "*", "/", "%", "~", "<", ">", "(", ")", "[", "]", "{", "}", ".", ",", ":",
             "|", "="}
local ESC = {n = "\n", t = "\t", r = "\r", ["\\"] = "\\", ["'"] = "'", ['"'] = '"', ["0"] = "\0"}

local function lex_expr(s, name, line)
  local toks, i = {}, 1
  while true do
    i = s:find("%S", i)
    if not i then break end
    local c = s:sub(i, i)
    if c == "'" or c == '"' then
      local buf, j = {}, i + 1
      while true do
        local d = s:sub(j, j)
        if d == "" then fail(name, line, "a string is not closed") end
        if d == c then break end
        if d == "\\" then
          local e = s:sub(j + 1, j + 1)
          buf[#buf + 1] = ESC[e] or ("\\" .. e)
          j = j + 2
        else
          buf[#buf + 1] = d
          j = j + 1
        end
      end
      toks[#toks + 1] = {t = "str", v = table.concat(buf)}
      i = j + 1
    elseif c:match("%d") then
      local num = s:match("^%d+%.%d+", i) or s:match("^%d+", i)
      toks[#toks + 1] = {t = "num", v = math.tointeger(tonumber(num)) or tonumber(num)}
      i = i + #num
    elseif c:match("[%a_]") then
      local w = s:match("^[%w_]+", i)
      toks[#toks + 1] = {t = KEYWORDS[w] and w or "name", v = w}
      i = i + #w
    else
      local op
      for _, o in ipairs(OPS) do if s:sub(i, i + #o - 1) == o then op = o; break end end
      if not op then fail(name, line, "unexpected character '%s'", c) end
      toks[#toks + 1] = {t = op}
      i = i + #op
    end
  end
  toks[#toks + 1] = {t = "end"}
  return toks
end

-- A recursive-descent parser over one tag's tokens, Jinja's precedence:
-- if-else < or < and < not < compare < + - < ~ < * / // % < unary - < postfix, filters, tests.
local Parser = {}
Parser.__index = Parser

local function parser(s, name, line)
  return setmetatable({toks = lex_expr(s, name, line), i = 1, name = name, line = line}, Parser)
end
function Parser:peek(k) return self.toks[self.i + (k or 0)] end
function Parser:next() local t = self.toks[self.i]; self.i = self.i + 1; return t end
function Parser:accept(t) if self:peek().t == t then return self:next() end end
function Parser:err(fmt, ...) fail(self.name, self.line, fmt, ...) end
function Parser:expect(t)
  local k = self:next()
  if k.t ~= t then self:err("expected '%s', got '%s'", t, k.v or k.t) end
  return k
end
function Parser:done()
  local t = self:peek()
  if t.t ~= "end" then self:err("unexpected '%s'", t.v or t.t) end
end
function Parser:node(n) n.line = self.line; return n end

function Parser:expr()
  local e = self:or_()
  if self:accept("if") then
    local cond = self:or_()
    local other = self:accept("else") and self:expr() or nil
    return self:node {op = "ifelse", cond, e, other}
  end
  return e
end
function Parser:or_()
  local e = self:and_()
  while self:accept("or") do e = self:node {op = "or", e, self:and_()} end
  return e
end
function Parser:and_()
  local e = self:not_()
  while self:accept("and") do e = self:node {op = "and", e, self:not_()} end
  return e
end
function Parser:not_()
  if self:accept("not") then return self:node {op = "not", self:not_()} end
  return self:compare()
end
local CMP = {["=="] = true, ["!="] = true, ["<"] = true, [">"] = true, ["<="] = true, [">="] = true}
function Parser:compare()
  local e = self:sum()
  while true do
    local t = self:peek().t
    if CMP[t] then
      self:next()
      e = self:node {op = t, e, self:sum()}
    elseif t == "in" then
      self:next()
      e = self:node {op = "in", e, self:sum()}
    elseif t == "not" and self:peek(1).t == "in" then
      self.i = self.i + 2
      e = self:node {op = "not", self:node {op = "in", e, self:sum()}}
    else return e end
  end
end
function Parser:sum()
  local e = self:concat()
  while self:peek().t == "+" or self:peek().t == "-" do e = self:node {op = self:next().t, e, self:concat()} end
  return e
end
function Parser:concat()
  local e = self:product()
  while self:accept("~") do e = self:node {op = "~", e, self:product()} end
  return e
end
function Parser:product()
  local e = self:unary()
  while ({["*"] = 1, ["/"] = 1, ["//"] = 1, ["%"] = 1})[self:peek().t] do e = self:node {op = self:next().t, e, self:unary()} end
  return e
end
function Parser:unary()
  if self:accept("-") then return self:node {op = "neg", self:unary()} end
  return self:filters(self:postfix(self:primary()))
end
-- (args): positional and name=value
function Parser:args()
  local pos, kw = {}, {}
  if not self:accept(")") then
    repeat
      if self:peek().t == "name" and self:peek(1).t == "=" then
        local k = self:next().v
        self:next()
        kw[k] = self:expr()
      else pos[#pos + 1] = self:expr() end
    until not self:accept(",")
    self:expect(")")
  end
  return pos, kw
end
function Parser:primary()
  local t = self:next()
  if t.t == "str" then
    local s = t.v
    while self:peek().t == "str" do s = s .. self:next().v end -- adjacent literals join
    return self:node {op = "lit", s}
  elseif t.t == "num" then return self:node {op = "lit", t.v}
  elseif t.t == "name" then
    local v = ({["true"] = true, ["True"] = true, ["false"] = false, ["False"] = false, none = NONE, None = NONE})[t.v]
    if v ~= nil then return self:node {op = "lit", v} end
    return self:node {op = "name", t.v}
  elseif t.t == "(" then
    local e = self:expr()
    self:expect(")")
    return e
  elseif t.t == "[" then
    local items = {}
    if not self:accept("]") then
      repeat items[#items + 1] = self:expr() until not self:accept(",") or self:peek().t == "]"
      self:expect("]")
    end
    return self:node {op = "list", items}
  elseif t.t == "{" then
    local keys, vals = {}, {}
    if not self:accept("}") then
      repeat
        keys[#keys + 1] = self:expr()
        self:expect(":")
        vals[#vals + 1] = self:expr()
      until not self:accept(",") or self:peek().t == "}"
      self:expect("}")
    end
    return self:node {op = "dict", keys, vals}
  end
  self:err("unexpected '%s'", t.v or t.t)
end
function Parser:postfix(e)
  while true do
    if self:accept(".") then
      local k = self:expect("name").v
      if self:accept("(") then
        local pos, kw = self:args()
        e = self:node {op = "method", e, k, pos, kw}
      else e = self:node {op = "attr", e, k} end
    elseif self:accept("[") then
      local a, b, step, slice
      if self:peek().t ~= ":" then a = self:expr() end
      if self:accept(":") then
        slice = true
        if self:peek().t ~= "]" and self:peek().t ~= ":" then b = self:expr() end
        if self:accept(":") and self:peek().t ~= "]" then step = self:expr() end
      end
      self:expect("]")
      e = slice and self:node {op = "slice", e, a, b, step} or self:node {op = "index", e, a}
    elseif self:accept("(") then
      local pos, kw = self:args()
      e = self:node {op = "call", e, pos, kw}
    else return e end
  end
end
function Parser:filters(e)
  while true do
    if self:accept("|") then
      local f = self:expect("name").v
      local pos, kw = {}, {}
      if self:accept("(") then pos, kw = self:args() end
      e = self:node {op = "filter", e, f, pos, kw}
    elseif self:peek().t == "is" then
      self:next()
      local negate = self:accept("not")
      local test = self:next()
      if test.t ~= "name" and test.t ~= "in" then self:err("expected a test after 'is'") end
      local arg = nil
      if self:peek().t ~= "end" and (self:peek().t == "str" or self:peek().t == "num" or self:peek().t == "(") then
        arg = self:accept("(") and self:args() or {self:primary()}
      end
      e = self:node {op = "test", e, test.v, arg or {}}
      if negate then e = self:node {op = "not", e} end
    else return e end
  end
end

-- ---- statements --------------------------------------------------------------------------------

-- The tags parsed into a tree: a body is a list of nodes {op = "text"|"out"|"if"|"for"|"set"}.
local function parse_body(tags, i, name, stops)
  local body = {}
  while i <= #tags do
    local t = tags[i]
    if t.kind == "text" then
      if t.s ~= "" then body[#body + 1] = {op = "text", t.s} end
      i = i + 1
    elseif t.kind == "comment" then i = i + 1
    elseif t.kind == "var" then
      local p = parser(t.s, name, t.line)
      local e = p:expr()
      p:done()
      body[#body + 1] = {op = "out", e, line = t.line}
      i = i + 1
    else
      local word, rest = t.s:match("^%s*([%a_]+)%s*(.-)%s*$")
      if not word then fail(name, t.line, "an empty tag") end
      if stops and stops[word] then return body, i, word end
      local p = parser(rest, name, t.line)
      if word == "if" then
        local node = {op = "if", line = t.line, conds = {}, bodies = {}}
        local cond = p:expr()
        p:done()
        i = i + 1
        while true do
          local b, j, stop = parse_body(tags, i, name, {elif = true, ["else"] = true, endif = true})
          if not stop then fail(name, t.line, "'if' is not closed by 'endif'") end
          node.conds[#node.conds + 1], node.bodies[#node.bodies + 1] = cond, b
          local st = tags[j]
          local srest = st.s:match("^%s*[%a_]+%s*(.-)%s*$")
          i = j + 1
          if stop == "endif" then break end
          if stop == "else" then
            cond = {op = "lit", true, line = st.line}
          else
            local q = parser(srest, name, st.line)
            cond = q:expr()
            q:done()
          end
        end
        body[#body + 1] = node
      elseif word == "for" then
        local vars = {p:expect("name").v}
        while p:accept(",") do vars[#vars + 1] = p:expect("name").v end
        p:expect("in")
        local iter = p:or_()
        local filter = p:accept("if") and p:expr() or nil
        p:done()
        local b, j, stop = parse_body(tags, i + 1, name, {endfor = true, ["else"] = true})
        if not stop then fail(name, t.line, "'for' is not closed by 'endfor'") end
        local other
        if stop == "else" then
          other, j, stop = parse_body(tags, j + 1, name, {endfor = true})
          if not stop then fail(name, t.line, "'for' is not closed by 'endfor'") end
        end
        body[#body + 1] = {op = "for", vars = vars, iter = iter, filter = filter, body = b, other = other, line = t.line}
        i = j + 1
      elseif word == "set" then
        local target = p:expect("name").v
        local attr = p:accept(".") and p:expect("name").v or nil
        p:expect("=")
        local e = p:expr()
        p:done()
        body[#body + 1] = {op = "set", target = target, attr = attr, e, line = t.line}
        i = i + 1
      elseif ({elif = 1, ["else"] = 1, endif = 1, endfor = 1})[word] then
        fail(name, t.line, "unexpected '%s'", word)
      else
        fail(name, t.line, "unknown tag '%s'", word)
      end
    end
  end
  return body, i, nil
end

function P.parse(source, name)
  local tags = split_tags(source, name)
  local body, i, stop = parse_body(tags, 1, name, nil)
  if stop then fail(name, tags[i].line, "unexpected '%s'", stop) end
  return body
end

return P
