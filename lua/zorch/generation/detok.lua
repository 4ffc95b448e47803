-- zorch.generation.detok: a request's text as its tokens come, decoding a
-- short window each time instead of the whole output (which would make a long
-- generation quadratic). The piece of a new token is decode(window + token)
-- less decode(window), the window being the tokens since the last emitted
-- piece and the one before it: a decoder that strips the text's first space
-- or merges byte tokens sees them in context. A piece that ends inside a UTF-8
-- character (or in U+FFFD, a decoder's stand-in for one) is held back until
-- the character completes, or the request ends.
--   detok.new(tokenizer)    a state
--   d:push(ids)             the new text after ids[#ids] (ids: the output's 0-based ids so far)
--   d:flush(ids)            what was held back, at the end
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local detok = {}
local D = {}
D.__index = D

function detok.new(tokenizer)
  -- prefix..read-1: the context window, already emitted; read..: not emitted yet
  return setmetatable({tok = tokenizer, prefix = 1, read = 1, decodes = 0}, D)
end

local function decode(d, ids, from, to)
  if from > to then return "" end
  d.decodes = d.decodes + 1
  return d.tok:decode(table.move(ids, from, to, 1, {}))
end

-- whether s ends inside a UTF-8 sequence (a lead byte without its continuation bytes) or in U+FFFD
local function unfinished(s)
  if s:sub(-3) == "\239\191\189" then return true end
  for back = 1, math.min(4, #s) do
    local b = s:byte(#s - back + 1)
    if b < 0x80 then return false end -- ASCII: complete
    if b >= 0xC0 then -- a lead byte: its sequence's length
      local len = b >= 0xF0 and 4 or b >= 0xE0 and 3 or 2
      return back < len
    end
  end
  return false
end

function D:push(ids)
  local before = decode(self, ids, self.prefix, self.read - 1)
  local now = decode(self, ids, self.prefix, #ids)
  if #now <= #before or unfinished(now) then return "" end
  self.prefix, self.read = self.read, #ids + 1
  return now:sub(#before + 1)
end

function D:flush(ids)
  if self.read > #ids then return "" end
  local before = decode(self, ids, self.prefix, self.read - 1)
  local now = decode(self, ids, self.prefix, #ids)
  self.prefix, self.read = self.read, #ids + 1
  return now:sub(#before + 1)
end

zorch.generation.detok = detok
return detok
