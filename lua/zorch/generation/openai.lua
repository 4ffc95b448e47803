-- zorch.generation.openai: OpenAI's completion and chat request bodies checked
-- and turned into zorch.generate's options, and OpenAI's error shape.
--   openai.request(body, kind, limits)  {prompts, messages, opts, stream, model, logprobs} or nil, err
--   openai.error(status, message, param)  {error = {message, type, param, code}}
-- kind is "completion" or "chat"; body is the decoded JSON; limits.max_tokens
-- caps max_tokens. err is openai.error's table with err.status (400).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local openai = {}
zorch.generation.openai = openai

local TYPES = {[400] = "invalid_request_error", [404] = "not_found_error", [405] = "invalid_request_error",
               [413] = "invalid_request_error", [429] = "rate_limit_error", [500] = "server_error",
               [503] = "server_error"}

function openai.error(status, message, param)
  return {status = status, error = {message = message, type = TYPES[status] or "invalid_request_error",
                                    param = param, code = status}}
end

-- a checked number field (nil when absent)
local function number(body, key, lo, hi, integer)
  local v = body[key]
  if v == nil then return nil end
  if type(v) ~= "number" or (integer and math.tointeger(v) == nil) or v ~= v or v < lo or v > hi then
    error(openai.error(400, ("'%s' must be %s in [%s, %s], got %s"):format(key, integer and "an integer" or "a number",
      lo, hi, zorch.json.encode(v)), key), 0)
  end
  return integer and math.tointeger(v) or v
end

local function strings(v, key, what)
  if type(v) == "string" then return {v} end
  if type(v) == "table" and #v > 0 then
    for i, s in ipairs(v) do
      if type(s) ~= "string" then error(openai.error(400, ("'%s[%d]' must be a string"):format(key, i - 1), key), 0) end
    end
    return v
  end
  error(openai.error(400, ("'%s' must be %s"):format(key, what), key), 0)
end

-- prompt: a string, a list of strings, a list of token ids or a list of such lists
local function prompts_of(p)
  if type(p) == "string" then return {p} end
  if type(p) ~= "table" or #p == 0 then
    error(openai.error(400, "'prompt' must be a string, a list of strings or a list of token ids", "prompt"), 0)
  end
  if math.type(p[1]) == "integer" then p = {p} end
  for i, q in ipairs(p) do
    if type(q) == "table" then
      for j, id in ipairs(q) do
        if math.type(id) ~= "integer" or id < 0 then
          error(openai.error(400, ("'prompt[%d][%d]' must be a token id (an integer >= 0)"):format(i - 1, j - 1), "prompt"), 0)
        end
      end
    elseif type(q) ~= "string" then
      error(openai.error(400, ("'prompt[%d]' must be a string or a list of token ids"):format(i - 1), "prompt"), 0)
    end
  end
  return p
end

local function messages_of(m)
  if type(m) ~= "table" or #m == 0 then error(openai.error(400, "'messages' must be a non-empty list", "messages"), 0) end
  for i, msg in ipairs(m) do
    if type(msg) ~= "table" or type(msg.role) ~= "string" or type(msg.content) ~= "string" then
      error(openai.error(400, ("'messages[%d]' must be {role, content} with string values"):format(i - 1), "messages"), 0)
    end
  end
  return m
end

local function parse(body, kind, limits)
  if type(body) ~= "table" or #body > 0 then error(openai.error(400, "the body must be a JSON object", nil), 0) end
  local r = {model = body.model}
  if r.model ~= nil and type(r.model) ~= "string" then error(openai.error(400, "'model' must be a string", "model"), 0) end
  if kind == "chat" then r.messages = messages_of(body.messages)
  else
    if body.prompt == nil then error(openai.error(400, "'prompt' is required", "prompt"), 0) end
    r.prompts = prompts_of(body.prompt)
  end
  local cap = limits and limits.max_tokens or 4096
  local o = {max_new_tokens = number(body, "max_tokens", 1, cap, true)
                               or number(body, "max_completion_tokens", 1, cap, true) or math.min(16, cap)}
  local t = number(body, "temperature", 0, 2)
  o.top_p = number(body, "top_p", 0, 1)
  o.top_k = number(body, "top_k", 0, math.maxinteger, true)
  o.min_p = number(body, "min_p", 0, 1)
  o.seed = number(body, "seed", math.mininteger, math.maxinteger, true)
  o.presence_penalty = number(body, "presence_penalty", -2, 2)
  o.frequency_penalty = number(body, "frequency_penalty", -2, 2)
  -- OpenAI samples at temperature 1 by default; 0 is greedy
  local temp = t == nil and 1 or t
  o.do_sample = temp > 0
  if o.do_sample then o.temperature = temp end
  local n = number(body, "n", 1, 1, true)
  if body.n ~= nil and n ~= 1 then error(openai.error(400, "'n' must be 1", "n"), 0) end
  if body.stop ~= nil then
    o.stop = strings(body.stop, "stop", "a string or a list of strings")
    if #o.stop > 4 then error(openai.error(400, "'stop' holds at most 4 strings", "stop"), 0) end
  end
  if body.stream ~= nil and type(body.stream) ~= "boolean" then
    error(openai.error(400, "'stream' must be a boolean", "stream"), 0)
  end
  r.stream = body.stream == true
  if kind == "chat" then
    if body.logprobs ~= nil and type(body.logprobs) ~= "boolean" then
      error(openai.error(400, "'logprobs' must be a boolean", "logprobs"), 0)
    end
    local top = number(body, "top_logprobs", 0, 20, true)
    if top and body.logprobs ~= true then error(openai.error(400, "'top_logprobs' needs 'logprobs': true", "top_logprobs"), 0) end
    r.logprobs = body.logprobs == true
    o.top_logprobs = top
  else
    local lp = number(body, "logprobs", 0, 5, true)
    r.logprobs = lp ~= nil
    if lp and lp > 0 then o.top_logprobs = lp end
  end
  o.logprobs = r.logprobs or nil
  r.opts = o
  return r
end

function openai.request(body, kind, limits)
  if kind ~= "completion" and kind ~= "chat" then
    error("openai.request: argument 2 must be 'completion' or 'chat', got " .. tostring(kind), 2)
  end
  local ok, r = pcall(parse, body, kind, limits)
  if ok then return r end
  if type(r) == "table" and r.error then return nil, r end
  error(r, 0)
end

return openai
