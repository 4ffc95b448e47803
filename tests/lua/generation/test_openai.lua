-- zorch.generation.openai: request bodies become zorch.generate's options, and
-- each bad field is a 400 in OpenAI's error shape naming the field.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local openai = zorch.generation.openai

local r = openai.request({model = "m", prompt = "hi", max_tokens = 5, temperature = 0, stop = "\n", seed = 3}, "completion",
                         {max_tokens = 100})
tap.ok(r and r.prompts[1] == "hi" and r.opts.max_new_tokens == 5 and r.opts.do_sample == false and r.opts.temperature == nil
  and r.opts.stop[1] == "\n" and r.opts.seed == 3 and r.stream == false, "a completion: prompt, max_tokens, greedy at 0, stop, seed")
r = openai.request({prompt = {1, 2, 3}}, "completion")
tap.ok(r and r.prompts[1][3] == 3 and r.opts.max_new_tokens == 16 and r.opts.do_sample and r.opts.temperature == 1,
  "token ids as the prompt; OpenAI's defaults: 16 tokens, sampling at temperature 1")
r = openai.request({prompt = {"a", "b"}, logprobs = 2, top_k = 4, min_p = 0.1, presence_penalty = 0.5,
                    frequency_penalty = -1, stream = true}, "completion")
tap.ok(r and #r.prompts == 2 and r.logprobs and r.opts.logprobs and r.opts.top_logprobs == 2 and r.opts.top_k == 4
  and r.opts.min_p == 0.1 and r.opts.presence_penalty == 0.5 and r.opts.frequency_penalty == -1 and r.stream,
  "a list of prompts, logprobs, the extras and the penalties, stream")
r = openai.request({messages = {{role = "user", content = "hello"}}, logprobs = true, top_logprobs = 3}, "chat")
tap.ok(r and r.messages[1].content == "hello" and r.opts.logprobs and r.opts.top_logprobs == 3, "a chat request with logprobs")

for _, c in ipairs({
  {{prompt = "x", max_tokens = 101}, "completion", "max_tokens"},
  {{prompt = "x", max_tokens = 1.5}, "completion", "max_tokens"},
  {{prompt = "x", temperature = "hot"}, "completion", "temperature"},
  {{prompt = "x", top_p = 2}, "completion", "top_p"},
  {{prompt = "x", n = 2}, "completion", "n"},
  {{prompt = "x", stop = {"a", 1}}, "completion", "stop"},
  {{prompt = "x", stop = {"a", "b", "c", "d", "e"}}, "completion", "stop"},
  {{prompt = "x", stream = "yes"}, "completion", "stream"},
  {{prompt = {1, -2}}, "completion", "prompt"},
  {{prompt = {}}, "completion", "prompt"},
  {{max_tokens = 3}, "completion", "prompt"},
  {{prompt = "x", model = 7}, "completion", "model"},
  {{messages = {{role = "user"}}}, "chat", "messages"},
  {{messages = "hi"}, "chat", "messages"},
  {{messages = {{role = "user", content = "a"}}, top_logprobs = 2}, "chat", "top_logprobs"},
}) do
  local ok, err = openai.request(c[1], c[2], {max_tokens = 100})
  tap.ok(ok == nil and err.status == 400 and err.error.param == c[3] and err.error.type == "invalid_request_error"
    and err.error.message:find(c[3], 1, true) ~= nil, ("a bad '%s': 400 naming it: %s"):format(c[3], err and err.error.message))
end
local _, err = openai.request({1, 2}, "completion")
tap.ok(err and err.status == 400, "a JSON array as the body: 400")
tap.raises("a wrong kind is the caller's error", function() openai.request({}, "edit") end, "openai.request: argument 2")
local e = openai.error(429, "the queue is full")
tap.ok(e.status == 429 and e.error.type == "rate_limit_error" and e.error.message == "the queue is full",
  "openai.error: OpenAI's shape with the status's type")
tap.done()
