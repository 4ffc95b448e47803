-- `zorch serve MODEL_DIR ...`: the engine loop of the OpenAI-compatible server
-- (docs/serve.md). The HTTP threads (zorch._http_server, lua/lhttp.c) queue
-- requests; this loop, which owns the VM, takes them between scheduler steps,
-- adds them to the one Scheduler, and writes each answer back as it grows.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local openai = zorch.generation.openai
local json = zorch.json
local COMPACT = {compact = true} -- one line: an event's data is a line

local USAGE = "usage: zorch serve MODEL_DIR [--host 127.0.0.1] [--port 8000] [--max-body B] [--max-tokens N] "
  .. "[--queue N] [--kv-budget 256M] [--quantize int8|int4] [--dtype bf16]"

-- "256M", "1G", "65536" -> bytes
local function bytes_of(s)
  local n, unit = tostring(s):match("^(%d+)([KMGkmg]?)$")
  if not n then return nil end
  return math.tointeger(n) * (({k = 1024, m = 1024 ^ 2, g = 1024 ^ 3})[unit:lower()] or 1) // 1
end


local function sse(t) return "data: " .. json.encode(t, COMPACT) .. "\n\n" end

-- a finished choice's logprobs in the endpoint's shape
local function logprobs_of(kind, r, tok)
  if not r.logprobs then return nil end
  local piece = function(id) return tok and tok:decode({id}) or tostring(id) end
  if kind == "chat" then
    local content = {}
    for i, id in ipairs(r.tokens) do
      local top = {}
      for k, e in ipairs(r.top_logprobs and r.top_logprobs[i] or {}) do top[k] = {token = piece(e[1]), logprob = e[2]} end
      content[i] = {token = piece(id), logprob = r.logprobs[i], top_logprobs = top}
    end
    return {content = content}
  end
  local toks, lps, tops = {}, {}, {}
  for i, id in ipairs(r.tokens) do
    toks[i], lps[i] = piece(id), r.logprobs[i]
    local top = {}
    for _, e in ipairs(r.top_logprobs and r.top_logprobs[i] or {}) do top[piece(e[1])] = e[2] end
    tops[i] = top
  end
  return {tokens = toks, token_logprobs = lps, top_logprobs = tops}
end

function zorch._serve_cli(stop, ...)
  local a = zorch.flags({...}, {
    {"MODEL_DIR", "a Hugging Face model folder (config.json, model.safetensors[, tokenizer.json])"},
    host = {"127.0.0.1", "the IPv4 address to listen on"},
    port = {8000, "the port (0: a free one, printed)"},
    ["max-body"] = {1048576, "the largest request body in bytes (413 above)"},
    ["max-tokens"] = {2048, "the largest max_tokens a request may ask (400 above)"},
    queue = {64, "generation requests in flight at most (429 above)"},
    ["kv-budget"] = {"256M", "the KV cache pool, bytes (K, M, G suffixes)"},
    quantize = {"", "int8 or int4: quantize the linear layers' weights", choices = {"", "int8", "int4"}},
    dtype = {"fp32", "the model's dtype", choices = {"fp32", "bf16"}},
  }, USAGE)
  local budget = bytes_of(a["kv-budget"])
  if not budget or budget < 1 then
    error(zorch.flags.usage_error("serve: --kv-budget must be bytes with an optional K, M or G, got '"
      .. a["kv-budget"] .. "'\n" .. USAGE))
  end
  local dir = a.MODEL_DIR
  local model = zorch.generation.from_pretrained(dir)
  if a.dtype == "bf16" then model:to("bfloat16") end
  if a.quantize ~= "" then zorch.nn.quantize(model, {bits = a.quantize == "int8" and 8 or 4}) end
  local has_tok, tok = pcall(zorch.tokenizer.load, dir)
  if not has_tok then tok = nil end
  local eos = zorch.generation.eos_token_id(dir)
  local name = dir:gsub("/+$", ""):match("[^/]+$") or dir
  local sched = zorch.generation.Scheduler.new(model, {budget = budget, tokenizer = tok})
  local srv, port = zorch._http_server{host = a.host, port = a.port, max_body = a["max-body"], queue = a.queue, stop = stop}
  io.stdout:write(("zorch serve: %s on http://%s:%d\n"):format(name, a.host, port))
  io.stdout:flush()
  local limits = {max_tokens = a["max-tokens"]}
  local live, serial = {}, 0 -- scheduler request -> its choice; a counter for response ids

  local function reply(id, status, t) srv:respond(id, status, json.encode(t, COMPACT)); srv:finish(id) end
  local function fail(id, e) reply(id, e.status, {error = e.error}) end

  -- a generation request: its choices into the scheduler
  local function generate(job, kind)
    local ok, body = pcall(json.decode, job.body)
    if not ok or type(body) ~= "table" then
      return fail(job.id, openai.error(400, "the body is not valid JSON: " .. tostring(body):gsub("\n", " ")))
    end
    local r, err = openai.request(body, kind, limits)
    if not r then return fail(job.id, err) end
    local prompts = r.prompts
    if kind == "chat" then
      if not tok then return fail(job.id, openai.error(400, "the model folder has no tokenizer for messages", "messages")) end
      local okc, text = pcall(tok.apply_chat_template, tok, r.messages, {add_generation_prompt = true})
      if not okc then return fail(job.id, openai.error(400, tostring(text), "messages")) end
      prompts = {text}
    end
    serial = serial + 1
    local g = {job = job.id, kind = kind, stream = r.stream, left = #prompts, choices = {}, usage = {0, 0},
               rid = (kind == "chat" and "chatcmpl-" or "cmpl-") .. serial, created = os.time(),
               object = kind == "chat" and (r.stream and "chat.completion.chunk" or "chat.completion")
                 or "text_completion"}
    local reqs = {}
    for i, p in ipairs(prompts) do
      if type(p) == "string" then
        if not tok then return fail(job.id, openai.error(400, "the model folder has no tokenizer: give the prompt as token ids", "prompt")) end
        p = tok:encode(p)
      end
      local o = {}
      for k, v in pairs(r.opts) do o[k] = v end
      o.eos_token_id = eos
      if o.stop and not tok then return fail(job.id, openai.error(400, "'stop' needs the model folder's tokenizer", "stop")) end
      local c = {g = g, index = i - 1}
      if r.stream then
        o.on_token = function(_, id, piece)
          local ch = {index = c.index, token_ids = {id}}
          if kind == "chat" then ch.delta = {content = piece or ""} else ch.text = piece or "" end
          srv:write(g.job, sse({id = g.rid, object = g.object, created = g.created, model = name, choices = {ch}}))
        end
      end
      reqs[i] = {p, o, c}
    end
    local okh = pcall(function()
      local extra = {}
      if r.stream then srv:respond(job.id, 200, "", "text/event-stream", true) end
      if r.stream and kind == "chat" then
        for _, q in ipairs(reqs) do
          extra[#extra + 1] = sse({id = g.rid, object = g.object, created = g.created, model = name,
                                   choices = {{index = q[3].index, delta = {role = "assistant", content = ""}}}})
        end
        srv:write(job.id, table.concat(extra))
      end
    end)
    if not okh then return end
    for _, q in ipairs(reqs) do
      local okr, req = pcall(sched.add, sched, q[1], q[2])
      if not okr or req.finish_reason == "refused" then
        local msg = okr and req.error or tostring(req)
        if r.stream then -- the head is sent: the error goes into the stream
          srv:write(job.id, sse({error = openai.error(400, msg).error}) .. "data: [DONE]\n\n")
          srv:finish(job.id)
        else
          fail(job.id, openai.error(400, msg, "prompt"))
        end
        for _, other in pairs(live) do if other.g == g then other.dropped = true end end
        return
      end
      q[3].prompt_n = #q[1]
      live[req] = q[3]
    end
  end

  -- a request the scheduler finished: its choice, and the answer once all are in
  local function finished(req)
    local c = live[req]
    live[req] = nil
    if not c or c.dropped then return end
    local g = c.g
    g.usage[1], g.usage[2] = g.usage[1] + c.prompt_n, g.usage[2] + #req.tokens
    local reason = req.finish_reason == "stop" and "stop" or "length"
    local lp = logprobs_of(g.kind, req, tok)
    if g.stream then
      local ch = {index = c.index, finish_reason = reason, logprobs = lp}
      if g.kind == "chat" then ch.delta = {} else ch.text = "" end
      srv:write(g.job, sse({id = g.rid, object = g.object, created = g.created, model = name, choices = {ch}}))
    elseif g.kind == "chat" then
      g.choices[c.index + 1] = {index = c.index, message = {role = "assistant", content = req.text or ""},
                                finish_reason = reason, logprobs = lp, token_ids = req.tokens}
    else
      g.choices[c.index + 1] = {index = c.index, text = req.text or "", finish_reason = reason, logprobs = lp,
                                token_ids = req.tokens}
    end
    g.left = g.left - 1
    if g.left > 0 then return end
    local usage = {prompt_tokens = g.usage[1], completion_tokens = g.usage[2], total_tokens = g.usage[1] + g.usage[2]}
    if g.stream then
      srv:write(g.job, "data: [DONE]\n\n")
      srv:finish(g.job)
    else
      reply(g.job, 200, {id = g.rid, object = g.object, created = g.created, model = name, choices = g.choices,
                         usage = usage})
    end
  end

  local ROUTES = {
    ["/health"] = {GET = function(job) reply(job.id, 200, {status = "ok"}) end},
    ["/v1/models"] = {GET = function(job)
      reply(job.id, 200, {object = "list", data = {{id = name, object = "model", created = 0, owned_by = "zorch"}}})
    end},
    ["/v1/completions"] = {POST = function(job) generate(job, "completion") end},
    ["/v1/chat/completions"] = {POST = function(job) generate(job, "chat") end},
  }

  local function handle(job)
    local route = ROUTES[job.path]
    if not route then return fail(job.id, openai.error(404, "no route " .. job.path)) end
    local h = route[job.method]
    if not h then return fail(job.id, openai.error(405, ("%s does not take %s"):format(job.path, job.method))) end
    local ok, err = pcall(h, job)
    if not ok then -- a bug of the server's: the request fails, the server runs on
      io.stderr:write("zorch serve: ", tostring(err), "\n")
      pcall(fail, job.id, openai.error(500, tostring(err)))
    end
  end

  while true do
    local stopping = srv:stopping()
    for _, job in ipairs(srv:next(sched:busy() and 0 or 50)) do
      if stopping then fail(job.id, openai.error(503, "the server is shutting down")) else handle(job) end
    end
    if sched:busy() then
      local ok, done = pcall(sched.step, sched)
      if ok then
        for _, req in ipairs(done) do finished(req) end
      else -- the step failed: its requests get a 500, a fresh scheduler takes the next ones
        io.stderr:write("zorch serve: ", tostring(done), "\n")
        local told = {}
        for _, c in pairs(live) do
          local g = c.g
          if not c.dropped and not told[g] then
            told[g] = true
            local e = openai.error(500, tostring(done))
            if g.stream then srv:write(g.job, sse({error = e.error}) .. "data: [DONE]\n\n"); srv:finish(g.job)
            else fail(g.job, e) end
          end
        end
        live = {}
        sched = zorch.generation.Scheduler.new(model, {budget = budget, tokenizer = tok})
      end
    elseif stopping then
      break
    end
  end
  srv:close()
  io.stdout:write("zorch serve: stopped\n")
end
