-- zorch.text.chat: chat templates, as Transformers' apply_chat_template
-- renders them: a model folder's tokenizer_config.json `chat_template` (a
-- string, or a list of {name, template}; or a chat_template.jinja file
-- beside it) with its bos and eos tokens, or one of the templates below by
-- name for a model whose folder has none.
--   tok:apply_chat_template(messages, {add_generation_prompt =, tokenize =, template =, <extra names>})
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local jinja = zorch._require("zorch.text.jinja")
local read_file = zorch._require("zorch.util").read_file
local chat = {}

-- Templates written here, in the formats the model families use.
chat.templates = {
  chatml = [==[{% for message in messages %}{{ '<|im_start|>' + message['role'] + '
' + message['content'] + '<|im_end|>' + '
' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant
' }}{% endif %}]==],
  llama3 = [==[{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>

' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %}]==],
  zephyr = [==[{% for message in messages %}
{% if message['role'] == 'user' %}
{{ '<|user|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'system' %}
{{ '<|system|>
' + message['content'] + eos_token }}
{% elif message['role'] == 'assistant' %}
{{ '<|assistant|>
'  + message['content'] + eos_token }}
{% endif %}
{% if loop.last and add_generation_prompt %}
{{ '<|assistant|>' }}
{% endif %}
{% endfor %}]==],
}

local function fail(fmt, ...) error("apply_chat_template: " .. fmt:format(...), 0) end

-- a special token in tokenizer_config.json: a string or an AddedToken {content = ...}
local function token_text(v)
  if type(v) == "table" then return v.content end
  if type(v) == "string" then return v end
end

-- The chat part of the folder of a tokenizer file (nil when it has none):
-- {templates = {[name] = source}, default = name, tokens = {bos_token =, ...}, path =}.
function chat.config(tokenizer_path)
  local dir = tokenizer_path:match("^(.*)/[^/]*$") or "."
  local path = dir .. "/tokenizer_config.json"
  local info = {templates = {}, tokens = {}, path = path}
  local text = read_file(path)
  if text then
    local ok, cfg = pcall(zorch.json.decode, text)
    if not ok or type(cfg) ~= "table" then error(("tokenizer: %s: not a JSON object"):format(path), 0) end
    local t = cfg.chat_template
    if type(t) == "string" then
      info.templates.default, info.default = t, "default"
    elseif type(t) == "table" then
      for i, e in ipairs(t) do
        if type(e) ~= "table" or type(e.name) ~= "string" or type(e.template) ~= "string" then
          error(("tokenizer: %s: chat_template[%d] must be {name, template}"):format(path, i), 0)
        end
        info.templates[e.name] = e.template
        if e.name == "default" or not info.default then info.default = e.name end
      end
    elseif t ~= nil then
      error(("tokenizer: %s: chat_template must be a string or a list of {name, template}"):format(path), 0)
    end
    for _, k in ipairs({"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"}) do
      info.tokens[k] = token_text(cfg[k])
    end
  end
  local file = not info.default and read_file(dir .. "/chat_template.jinja")
  if file then info.templates.default, info.default = file, "default" end
  if not text and not info.default then return nil end
  return info
end
zorch._chat_config = chat.config

local compiled = setmetatable({}, {__mode = "v"}) -- by name and source

local function pick(info, want)
  local templates = info and info.templates or {}
  if want == nil then
    if info and info.default then return templates[info.default], "chat_template" end
    fail("the tokenizer has no chat_template (in %s): pass template = one of %s, or a template's text",
         info and info.path or "no tokenizer_config.json", "'chatml', 'llama3', 'zephyr'")
  end
  if type(want) ~= "string" then fail("opts.template must be a string, got %s", type(want)) end
  if templates[want] then return templates[want], "chat_template " .. want end
  if chat.templates[want] then return chat.templates[want], want end
  if want:find("{[{%%]") then return want, "template" end
  local names = {}
  for k in pairs(templates) do names[#names + 1] = "'" .. k .. "'" end
  for k in pairs(chat.templates) do names[#names + 1] = "'" .. k .. "'" end
  table.sort(names)
  fail("no template '%s' (the tokenizer's and zorch's: %s)", want, table.concat(names, ", "))
end

-- tok:apply_chat_template's body: info as chat.config gave it (or nil).
function chat.apply(tok, info, messages, opts)
  if type(messages) ~= "table" then fail("messages must be a list of {role =, content =}, got %s", type(messages)) end
  for i, m in ipairs(messages) do
    if type(m) ~= "table" then fail("messages[%d] must be a table {role =, content =}, got %s", i, type(m)) end
  end
  if opts ~= nil and type(opts) ~= "table" then fail("opts must be a table, got %s", type(opts)) end
  opts = opts or {}
  local src, name = pick(info, opts.template)
  local key = name .. "\0" .. src
  local t = compiled[key]
  if not t then
    t = jinja.compile(src, name)
    compiled[key] = t
  end
  local vars = {}
  for k, v in pairs(info and info.tokens or {}) do vars[k] = v end
  for k, v in pairs(opts) do
    if k ~= "template" and k ~= "tokenize" then vars[k] = v end
  end
  vars.messages = messages
  vars.add_generation_prompt = opts.add_generation_prompt and true or false
  local text = t:render(vars)
  if opts.tokenize then return tok:encode(text, {add_special = false}) end
  return text
end
zorch._chat_apply = chat.apply

return chat
