-- Fine-tuning data from the book models/llama.lua trains on by default: each
-- quoted paragraph answered by the next one, as {"prompt", "response"} JSON
-- lines, and a byte-level tokenizer.json whose id b is byte b (as the byte
-- model of models/llama.lua reads text) plus <|end|> (id 256), the eos.
--   build/cpu/zorch examples/sft/holmes.lua --out /tmp/holmes
-- README.md ("Fine-tuning a small Llama") walks through the run.
local zorch = require "zorch"
local opt = zorch.flags(arg, {
  book = {"/usr/share/gocode/src/github.com/pierrec/lz4/testdata/pg1661.txt", "the text"},
  out = {"holmes", "the folder for dialogue.jsonl and tokenizer.json"},
  ["max-bytes"] = {160, "the longest prompt and response kept, in bytes"},
}, "usage: zorch examples/sft/holmes.lua [--out DIR]")

local f = assert(io.open(opt.book, "rb"))
local text = f:read("a"):gsub("\r", "")
f:close()
local paras = {}
for p in (text .. "\n\n"):gmatch("(.-)\n\n+") do
  p = p:gsub("\n", " "):gsub("^%s+", ""):gsub("%s+$", "")
  if p ~= "" then paras[#paras + 1] = p end
end
zorch.fs.mkdir(opt.out, true)
local out = assert(io.open(opt.out .. "/dialogue.jsonl", "wb"))
local n = 0
for i = 1, #paras - 1 do
  local a, b = paras[i], paras[i + 1]
  if a:sub(1, 1) == '"' and b:sub(1, 1) == '"' and #a <= opt["max-bytes"] and #b <= opt["max-bytes"] then
    out:write('{"prompt": ', zorch.json.encode(a), ', "response": ', zorch.json.encode(b), '}\n')
    n = n + 1
  end
end
out:close()

-- GPT-2's byte-to-character table (what a ByteLevel pre-tokenizer reads),
-- with byte b as token b: no merges, every byte its own token.
local keep = {}
for c = 33, 126 do keep[c] = true end
for c = 161, 172 do keep[c] = true end
for c = 174, 255 do keep[c] = true end
local vocab, extra = {}, 0
for b = 0, 255 do
  local cp = b
  if not keep[b] then cp = 256 + extra; extra = extra + 1 end
  vocab[utf8.char(cp)] = b
end
local tok = '{"version": "1.0", "truncation": null, "padding": null, "added_tokens": [{"id": 256, ' ..
  '"content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, ' ..
  '"special": true}], "normalizer": null, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, ' ..
  '"trim_offsets": false, "use_regex": false}, "post_processor": null, "decoder": {"type": "ByteLevel", ' ..
  '"add_prefix_space": false, "trim_offsets": false, "use_regex": false}, "model": {"type": "BPE", ' ..
  '"dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null, ' ..
  '"fuse_unk": false, "byte_fallback": false, "ignore_merges": false, "vocab": ' ..
  zorch.json.encode(vocab):gsub("[\n\t]", "") .. ', "merges": []}}\n'
zorch.fs.write_atomic(opt.out .. "/tokenizer.json", tok)
print(("%d prompt/response pairs in %s/dialogue.jsonl, tokenizer.json beside it"):format(n, opt.out))
