-- `zorch serve`: the openai client's completions and chat completions on a tiny
-- random Llama (a character tokenizer, a chat template) give zorch.generate's
-- greedy tokens; streamed text is the same text; 32 concurrent requests give
-- each prompt's tokens alone; malformed or oversized requests get OpenAI-shaped
-- 4xx errors and the server goes on; a full queue is 429; SIGTERM lets the
-- streamed request in flight finish and the process exits 0.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local bin = tap.zorch()

local okh, herr = pcall(zorch._http_server, {port = 0})
if not okh and tostring(herr):find("without libmicrohttpd", 1, true) then
  print("1..0 # SKIP zorch built without libmicrohttpd"); os.exit(0)
end
if okh then herr:close() end
if not os.execute("python3 -c 'import openai' 2>/dev/null") then
  print("1..0 # SKIP the python openai package is missing"); os.exit(0)
end

-- the folder: llama_gqa's weights, a longer context, no eos (long answers), and
-- a tokenizer of single characters with a chat template
local dir = tap.tmpdir()
local src = "lua/llama/llama_gqa"
assert(os.execute(("cp %s/*.safetensors %s/model.safetensors.index.json %s/"):format(src, src, dir)))
local cfg = zorch.json.decode(io.open(src .. "/config.json"):read("a"))
cfg.max_position_embeddings, cfg.eos_token_id = 4096, nil
local function write(name, text) local f = assert(io.open(dir .. "/" .. name, "w")); f:write(text); f:close() end
write("config.json", zorch.json.encode(cfg))
local vocab = {["▁"] = 0, ["\n"] = 95, ab = 94}
for ch = 33, 125 do vocab[string.char(ch)] = ch - 32 end
local meta = {type = "Metaspace", replacement = "▁", prepend_scheme = "never", split = false}
write("tokenizer.json", zorch.json.encode({version = "1.0", model = {type = "BPE", vocab = vocab, merges = {"a b"}},
  pre_tokenizer = meta, decoder = meta, added_tokens = {{id = 95, content = "\n", special = false}}}))
write("tokenizer_config.json", zorch.json.encode({
  chat_template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}<assistant>"}))
local model = zorch.generation.from_pretrained(dir)
local tok = zorch.tokenizer.load(dir)

local function start(args)
  local log, pidf, rcf = dir .. "/log" .. args:gsub("%W", ""), os.tmpname(), os.tmpname()
  os.execute(("(%s serve %s --port 0 %s > %s 2>&1 & echo $! > %s; wait $!; echo $? > %s) &"):format(
    bin, dir, args, log, pidf, rcf))
  for _ = 1, 300 do -- the port it printed
    local f = io.open(log)
    local port = f and f:read("a"):match("http://[%d.]+:(%d+)")
    if f then f:close() end
    if port then return port, tonumber(io.open(pidf):read("a")), rcf, log end
    os.execute("sleep 0.1")
  end
  error("zorch serve did not start: " .. (io.open(log) and io.open(log):read("a") or "no log"))
end
local function client(...)
  local o, ok = tap.run("python3 lua/generation/serve_client.py " .. table.concat({...}, " "))
  local okj, v = pcall(zorch.json.decode, o:match("[^\n]*$") ~= "" and o:match("[^\n]*$") or o:match("([^\n]*)\n$"))
  if not ok or not okj then print("# " .. o:gsub("\n", "\n# ")) end
  return okj and v or {}
end
local function gen(prompt, n) return zorch.generate(model, tok:encode(prompt), {max_new_tokens = n, tokenizer = tok})[1] end
local function same(a, b) return type(a) == "table" and table.concat(a, " ") == table.concat(b, " ") end

local prompts = {}
for i = 1, 32 do prompts[i] = ("Once %d upon a time"):format(i):sub(1, 3 + i % 20) end
local port, pid, rcf, log = start("--queue 64 --max-body 65536 --max-tokens 64")
local r = client("main", port, "'" .. zorch.json.encode(prompts, {compact = true}) .. "'")
local want = gen(prompts[1], 12)
tap.ok(r.completion and same(r.completion.ids, want.tokens) and r.completion.text == want.text
  and #want.text > 0 and r.completion.finish == "length", "a completion: zorch.generate's greedy tokens and text")
tap.ok(r.completion and r.completion.usage[1] == #tok:encode(prompts[1]) and r.completion.usage[2] == 12
  and r.completion.usage[3] == r.completion.usage[1] + 12, "usage counts the prompt and the completion")
tap.ok(r.stream_text == want.text, "the streamed chunks make the same text")
local chat = tok:apply_chat_template({{role = "user", content = "hello"}}, {add_generation_prompt = true})
local cwant = gen(chat, 10)
tap.ok(r.chat and same(r.chat.ids, cwant.tokens) and #cwant.text > 0 and r.chat.text == cwant.text and r.chat.role == "assistant",
  "a chat completion: the template's prompt, zorch.generate's tokens")
tap.ok(r.chat_stream_text == cwant.text, "the streamed chat deltas make the same text")
local all = r.concurrent ~= nil
for i = 1, 32 do all = all and same(r.concurrent[i], gen(prompts[i], 8).tokens) end
tap.ok(all, "32 concurrent requests: each prompt's tokens as alone")
tap.ok(r.malformed and r.malformed[1] == 400 and r.malformed[2].error.type == "invalid_request_error"
  and r.malformed[2].error.message:find("JSON", 1, true), "malformed JSON: 400 with an OpenAI error")
tap.ok(same(r.after_malformed, want.tokens), "the next request still works")
tap.ok(r.bad_field and r.bad_field[1] == 400 and r.bad_field[2].error.param == "max_tokens", "max_tokens above the limit: 400 naming it")
tap.ok(r.too_large and r.too_large[1] == 413 and r.too_large[2].error, "a body above --max-body: 413")
tap.ok(r.not_found and r.not_found[1] == 404 and r.wrong_method[1] == 405, "an unknown route 404, a wrong method 405")
tap.ok(r.models and r.models[1] == dir:match("[^/]+$") and r.health[1] == 200, "/v1/models and /health")
os.execute("kill -TERM " .. pid)

port, pid, rcf, log = start("--queue 1 --max-tokens 3000")
r = client("stop", port, pid, 2000)
tap.ok(r.queue_full and r.queue_full[1] == 429 and r.queue_full[2].error.type == "rate_limit_error",
  "a request over --queue: 429")
tap.ok(r.stream_tokens == 2000 and r.finish == "length", "SIGTERM mid-stream: the request completes (" ..
  tostring(r.stream_tokens) .. " tokens)")
local rc
for _ = 1, 100 do
  rc = io.open(rcf):read("a"):match("%d+")
  if rc then break end
  os.execute("sleep 0.1")
end
tap.ok(rc == "0", "then the server exits 0 (" .. tostring(rc) .. ")")
tap.done()
