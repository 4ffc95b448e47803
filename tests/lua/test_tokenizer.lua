-- zorch.tokenizer: the ids of tests/tokenizer's goldens (Hugging Face's
-- tokenizers, tests/tokenizer/gen_tokenizer.py) through the Lua binding, the
-- round trip, encode_batch and the tensor option, the options' errors, and
-- `zorch tokenize` writing an llm.c token file that data.load_tokens reads.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local function golden(name)
  local rows = {}
  for line in io.lines("tokenizer/golden_" .. name .. ".tsv") do
    local mode, hex, ids = line:match("^(%S+)\t(%x*)\t(.*)$")
    local text = hex:gsub("%x%x", function(h) return string.char(tonumber(h, 16)) end)
    local v = {}
    for id in ids:gmatch("%d+") do v[#v + 1] = tonumber(id) end
    rows[#rows + 1] = {mode = mode, text = text, ids = v}
  end
  return rows
end

local function same(a, b)
  if #a ~= #b then return false end
  for i = 1, #a do if a[i] ~= b[i] then return false end end
  return true
end

for _, name in ipairs({"gpt2", "llama3", "qwen2", "spm"}) do
  local tok = zorch.tokenizer.load("tokenizer/" .. name .. ".json")
  local rows, bad, trip = golden(name), 0, 0
  for _, r in ipairs(rows) do
    local ids = tok:encode(r.text, {add_special = r.mode ~= "no_add"})
    if not same(ids, r.ids) then bad = bad + 1 end
    -- Qwen2's NFC normalizer: the text comes back as its NFC
    local back = name == "qwen2" and zorch.tokenizer.nfc(r.text) or r.text
    if r.mode == "no_add" and tok:decode(ids) ~= back then trip = trip + 1 end
  end
  tap.ok(#rows > 20 and bad == 0, ("%s: encode equals the reference on %d texts (%d differ)"):format(name, #rows, bad))
  tap.ok(trip == 0, ("%s: decode(encode(x)) == x (%d differ)"):format(name, trip))
end

tap.ok(zorch.tokenizer.nfc("e\u{301} \u{212B} \u{1100}\u{1161}\u{11A8} \u{958}") == "\u{E9} \u{C5} \u{AC01} \u{915}\u{93C}",
       "tokenizer.nfc composes, maps singletons, composes Hangul, keeps exclusions apart")
tap.ok(not pcall(zorch.tokenizer.nfc, {}), "tokenizer.nfc of a table is an error")

local tok = zorch.tokenizer.load("tokenizer/llama3.json")
tap.ok(tostring(tok):find("vocab_size=451", 1, true) and tok:vocab_size() == 451, "vocab_size and tostring")
local bos = tok:special_id("<|begin_of_text|>")
local ids = tok:encode("Hello <|end_of_text|>")
tap.ok(ids[1] == bos and bos == 0 and ids[#ids] == tok:special_id("<|end_of_text|>"),
  "ids are 0-based as in the file: BOS first, a special in the text is its id")
local none = tok:encode("<|end_of_text|>", {add_special = false, allowed_special = "none"})
tap.ok(#none > 1 and tok:decode(none) == "<|end_of_text|>", "allowed_special = \"none\" encodes a special as text")
local only = tok:encode("<|end_of_text|><|begin_of_text|>", {add_special = false, allowed_special = {"<|begin_of_text|>"}})
tap.ok(only[#only] == bos and #only > 2, "allowed_special as a list")
local t = tok:encode("Hello world", {tensor = true, add_special = false})
tap.ok(t:dtype() == "int64" and same(t:totable(), tok:encode("Hello world", {add_special = false})), "tensor = true gives int64 ids")
tap.ok(tok:decode(t) == "Hello world", "decode takes a tensor")
local batch = tok:encode_batch({"a b", "", "Hello"}, {add_special = false})
tap.ok(#batch == 3 and #batch[2] == 0 and same(batch[3], tok:encode("Hello", {add_special = false})), "encode_batch")
tap.ok(tok:id_to_token(tok:token_to_id("\u{120}t")) == "\u{120}t" and tok:token_to_id("no such") == nil and tok:id_to_token(10 ^ 6 // 1) == nil,
  "token_to_id and id_to_token")
tap.raises("decode names a bad id", function() tok:decode({1, 99999}) end, "decode", "99999")
tap.raises("decode refuses a non-integer", function() tok:decode({1.5}) end, "ids[1]")
tap.raises("a bad allowed_special", function() tok:encode("x", {allowed_special = 3}) end, "allowed_special")
tap.raises("encode_batch names a bad entry", function() tok:encode_batch({"a", 3}) end, "texts[2]")
tap.raises("a missing file is named", function() zorch.tokenizer.load("tokenizer/none.json") end, "none.json", "cannot open")
tap.raises("a bad pattern option", function() zorch.tokenizer.load("tokenizer/gpt2.json", {pattern = "o200k"}) end, "opts.pattern")
local closed
do
  local c <close> = zorch.tokenizer.load("tokenizer/gpt2.json")
  closed = c
end
tap.raises("a closed tokenizer", function() closed:encode("x") end, "closed")

-- zorch tokenize: the llm.c header and uint16 ids
local bin, tmp = tap.zorch(), tap.tmpdir()
local out, okrun = tap.run(("%s tokenize --tokenizer tokenizer/llama3.json tokenizer/train.txt -o %s/t.bin"):format(bin, tmp))
local f = io.open("tokenizer/train.txt", "rb")
local text = f:read("a")
f:close()
local want = tok:encode(text, {add_special = false})
tap.ok(okrun and out:find(("%d tokens (uint16)"):format(#want), 1, true), "zorch tokenize reports the count")
local got = zorch.data.load_tokens(tmp .. "/t.bin")
tap.ok(same(got:totable(), want), "data.load_tokens reads the header and the ids back")
local hf = io.open(tmp .. "/t.bin", "rb")
local head = hf:read(12)
hf:close()
local magic, version, count = string.unpack("<i4i4i4", head)
tap.ok(magic == 20240520 and version == 1 and count == #want, "the header: magic, version 1, the count")
local _, bad = tap.run(("%s tokenize --tokenizer tokenizer/none.json tokenizer/train.txt -o %s/u.bin"):format(bin, tmp))
tap.ok(not bad, "zorch tokenize fails on a missing tokenizer")
tap.raises("data.load_tokens names a bad dtype", function() zorch.data.load_tokens(tmp .. "/t.bin", {dtype = "int8"}) end, "uint32")
tap.done()
