-- Chat templates: zorch.text.jinja against jinja2 with Transformers' settings
-- (tests/chat/golden_chat.json, written by tests/chat/gen_chat.py) over
-- Llama 3, Llama 2, Mistral, Qwen2 and Zephyr style templates and zorch's own;
-- tok:apply_chat_template with a folder's tokenizer_config.json; bad
-- templates' errors naming the template and the line.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local jinja = zorch.text.jinja

local f = assert(io.open("chat/golden_chat.json", "rb"))
local golden = zorch.json.decode(f:read("a"))
f:close()

local function source(name)
  local shipped = name:match("^zorch:(.*)$")
  return shipped and zorch.text.templates[shipped] or golden.templates[name]
end

local bad, errs, n = {}, 0, 0
for _, c in ipairs(golden.cases) do
  local src = source(c.template)
  local t = jinja.compile(src, c.template)
  local vars = {messages = golden.conversations[c.conversation], add_generation_prompt = c.add_generation_prompt,
                bos_token = "<s>", eos_token = "</s>", tools = c.tools and golden.tools or nil}
  local ok, out = pcall(t.render, t, vars)
  n = n + 1
  if c.error then
    errs = errs + 1
    if ok or not out:find(c.error, 1, true) or not out:find("^" .. c.template:gsub("%p", "%%%0") .. ":%d+: ") then
      bad[#bad + 1] = ("%s conversation %d: want the error %q, got %s"):format(c.template, c.conversation, c.error, out)
    end
  elseif not ok or out ~= c.output then
    bad[#bad + 1] = ("%s conversation %d agp %s: got %q want %q"):format(c.template, c.conversation,
                                                                           tostring(c.add_generation_prompt), out, c.output)
  end
end
for i = 1, math.min(#bad, 5) do print("#   " .. bad[i]) end
tap.ok(n > 90 and errs >= 4 and #bad == 0, ("%d renders equal jinja2's, %d of them errors (%d differ)"):format(n, errs, #bad))

-- a folder: tokenizer.json and tokenizer_config.json with named templates
local dir = tap.tmpdir()
local function write(path, s) local o = assert(io.open(path, "wb")); o:write(s); o:close() end
local src = assert(io.open("tokenizer/qwen2.json", "rb"))
write(dir .. "/tokenizer.json", src:read("a"))
src:close()
write(dir .. "/tokenizer_config.json", zorch.json.encode({
  bos_token = {__type = "AddedToken", content = "<|begin_of_text|>"}, eos_token = "<|end_of_text|>",
  chat_template = {{name = "default", template = golden.templates.llama3}, {name = "tool_use", template = golden.templates.qwen2}}}))
local tok = zorch.tokenizer.load(dir)
local conv = golden.conversations[3]
local want = jinja.compile(golden.templates.llama3, "x"):render{messages = conv, add_generation_prompt = true,
                                                               bos_token = "<|begin_of_text|>", eos_token = "<|end_of_text|>"}
tap.ok(tok:apply_chat_template(conv, {add_generation_prompt = true}) == want, "a folder's default template with its bos token")
tap.ok(tok:apply_chat_template(conv, {template = "tool_use", tools = golden.tools}):find("get_weather", 1, true),
       "a named template of the config, with an extra variable")
local ids = tok:apply_chat_template(conv, {add_generation_prompt = true, tokenize = true})
local enc = tok:encode(want, {add_special = false})
local bos = tok:special_id("<|begin_of_text|>")
local has_bos = false
for _, id in ipairs(ids) do has_bos = has_bos or id == bos end
tap.ok(has_bos and #ids == #enc and table.concat(ids, " ") == table.concat(enc, " "),
       "tokenize = true: the ids of the text, its special tokens read as themselves")
local tok2 = zorch.tokenizer.load(dir .. "/tokenizer.json")
tap.ok(tok2:apply_chat_template({{role = "user", content = "x"}}, {template = "chatml", add_generation_prompt = true}) ==
       "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n", "the tokenizer.json path finds the config beside it; zorch's chatml by name")
tap.raises("an unknown template name lists the known ones", function() tok:apply_chat_template(conv, {template = "nope"}) end,
           "no template 'nope'", "'chatml'", "'tool_use'")
local bare = zorch.tokenizer.load("tokenizer/qwen2.json")
tap.raises("no chat_template: the error says what to pass", function() bare:apply_chat_template(conv) end, "no chat_template", "chatml")
tap.raises("messages must be a list", function() tok:apply_chat_template("hi") end, "messages must be a list")
tap.raises("a message must be a table", function() tok:apply_chat_template({"hi"}) end, "messages[1] must be a table")
write(dir .. "/tokenizer_config.json", '{"chat_template": 3}')
tap.raises("a bad chat_template in the config names the file", function() zorch.tokenizer.load(dir) end,
           "tokenizer_config.json", "chat_template must be")

-- undefined names: empty and falsy; an attribute of one is an error
tap.ok(jinja.compile("[{{ nope }}]{% if nope %}x{% endif %}{% for a in nope %}y{% endfor %}{{ nope | default('d') }}"):render{} == "[]d",
       "an undefined name prints nothing, is false and iterates as nothing")
tap.ok(jinja.compile("{% for m in ms %}{% set x = m %}{% endfor %}[{{ x }}]"):render{ms = {1, 2}} == "[]",
       "a set in a loop does not leave it (namespace does)")

tap.ok(jinja.compile("{% set x = 'a' ~ 'b }}' %}{{ x ~ \"%}\" }}"):render{} == "ab }}%}", "a tag's close inside a string is text")
tap.ok(jinja.compile("{{ d | tojson }} {{ d.items() | list | length }}"):render{d = {b = {1, 2.5, jinja.none, true}}} ==
       '{"b": [1, 2.5, null, true]} 1', "tojson of Lua tables and jinja.none")

-- bad templates: the template's name and the line
local cases = {
  {"{% if x %}\nno end", "t.jinja:1: 'if' is not closed by 'endif'"},
  {"line\n{% for x in %}{% endfor %}", "t.jinja:2: unexpected 'end'"},
  {"a\nb\n{{ x | nofilter }}", "t.jinja:3: unknown filter 'nofilter'"},
  {"{{ 'open }}", "t.jinja:1: '{{' is not closed"},
  {"\n{{ x ", "t.jinja:2: '{{' is not closed"},
  {"{% endif %}", "t.jinja:1: unexpected 'endif'"},
  {"{% while x %}", "t.jinja:1: unknown tag 'while'"},
  {"\n\n{{ m.role }}", "t.jinja:3: 'role' of an undefined value"},
  {"{{ 1 + 'a' }}", "t.jinja:1: '+' between number and string"},
  {"{{ \"ab\".startswith() }}", "t.jinja:1: startswith needs 1 argument"},
  {"{% set n.x = 1 %}", "t.jinja:1: 'n.x = ...' needs a namespace"},
  {"x\n{{ raise_exception('stop here') }}", "t.jinja:2: raise_exception: stop here"},
}
for _, c in ipairs(cases) do
  tap.raises(("bad template: %s"):format(c[2]), function() jinja.compile(c[1], "t.jinja"):render{} end, c[2])
end
local cyc = {}
cyc[1] = cyc
tap.raises("a table that holds itself, printed", function() jinja.compile("\n{{ t }}", "c"):render{t = cyc} end, "c:2: ", "nested more than 64")
tap.raises("a table that holds itself, through tojson", function() jinja.compile("{{ t|tojson }}", "c"):render{t = cyc} end, "c:1: tojson")
tap.raises("a Lua error in a caller's function names the line", function()
  jinja.compile("\n\n{{ f() }}", "c"):render{f = function() error("boom", 0) end}
end, "c:3: boom")
tap.ok(jinja.compile("{{ add(2, 3) }}"):render{add = function(a, b) return a + b end} == "5", "a caller's function is called")
tap.raises("compile of a non-string", function() jinja.compile(3) end, "jinja.compile: source must be a string")
tap.done()
