-- A request's text as its tokens come (zorch.generation.detok): the pieces
-- join into the output's whole decode, a stop string across token boundaries
-- is found where it completes, a piece never ends inside a UTF-8 character,
-- and a long generation decodes a short window per token, not the whole output.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local model = zorch.models.llama.from_pretrained("lua/llama/llama_gqa")
model:eval()
local prompt = {1, 17, 33, 40}

-- a tokenizer of the tokens' pieces; it counts its decode calls and the ids they read
local function tokenizer(piece)
  local t = {calls = 0, ids = 0}
  function t.decode(self, ids)
    self.calls, self.ids = self.calls + 1, self.ids + #ids
    local c = {}
    for i, v in ipairs(ids) do c[i] = piece(v) end
    return table.concat(c)
  end
  function t.encode() error("not used") end
  return t
end
local function gen(tok, o)
  o.tokenizer = tok
  return zorch.generate(model, prompt, o)[1]
end

do -- two letters a token: a stop string of the last letter of one token and the first of the next
  local tok = tokenizer(function(v) return string.char(65 + v % 26, 97 + v % 26) end)
  local full = gen(tok, {max_new_tokens = 12})
  local whole = tok:decode(full.tokens)
  tap.ok(full.text == whole, "the pieces join into the decode of the whole output")
  local stop = whole:sub(6, 7) -- (the 2nd letter of token 3, the 1st of token 4)
  local at = whole:find(stop, 1, true)
  local r = gen(tok, {max_new_tokens = 12, stop = {"never here", stop}})
  tap.ok(r.finish_reason == "stop" and r.text == whole:sub(1, at - 1) and #r.tokens == (at + 1) // 2 + 1,
    ("a stop string across a token boundary ends the request at the token completing it (%q, %d tokens)"):format(
      stop, #r.tokens))
end

do -- a two-byte character split over two tokens: never streamed in halves
  local tok = tokenizer(function(v) return v % 2 == 0 and "\195" or "\169" end) -- (é is C3 A9)
  local pieces, bad = {}, false
  local r = gen(tok, {max_new_tokens = 16, on_token = function(_, _, p)
    pieces[#pieces + 1] = p
    if #p > 0 and p:byte(#p) == 195 then bad = true end
  end})
  local whole = tok:decode(r.tokens)
  tap.ok(not bad and r.text == whole and table.concat(pieces) .. (r.text:sub(#table.concat(pieces) + 1)) == whole,
    ("no piece ends inside a character; the text is the whole decode (%d bytes)"):format(#whole))
end

do -- a long generation: a window per token (two decodes of a few ids), not the whole output
  local tok = tokenizer(function(v) return string.char(65 + v % 26) end)
  local n = 56
  local r = gen(tok, {max_new_tokens = n, stop = "zzzzzzzz"})
  tap.ok(#r.tokens == n and r.text == tok:decode(r.tokens) and tok.calls <= 2 * n + 2
    and tok.ids <= 4 * n, ("%d tokens: %d decode calls over %d ids (the whole output each time: %d ids)"):format(
      #r.tokens, tok.calls, tok.ids, n * (n + 1) // 2))
end

tap.raises("a stop string must be a non-empty string", function()
  gen(tokenizer(function() return "a" end), {stop = {""}})
end, "stop[1] must be a non-empty string")

tap.done()
