-- `zorch generate MODEL_DIR ...`: one completion of a model folder, printed as
-- its tokens arrive (docs/generation.md, "From the command line").
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local USAGE = "usage: zorch generate MODEL_DIR (--prompt TEXT | --ids 1,2,3) [--max-new-tokens N] [--temperature T] "
  .. "[--top-p P] [--top-k K] [--seed S] [--chat]"

-- "1,2,3" -> {1, 2, 3}, or nil
local function id_list(s)
  local ids = {}
  for part in s:gmatch("[^,%s]+") do
    local v = math.tointeger(tonumber(part))
    if not v or v < 0 then return nil end
    ids[#ids + 1] = v
  end
  return #ids > 0 and ids or nil
end


function zorch._generate_cli(...)
  local a = zorch.flags({...}, {
    {"MODEL_DIR", "a Hugging Face model folder (config.json, model.safetensors)"},
    prompt = {"", "the prompt text (needs the folder's tokenizer)"},
    ids = {"", "the prompt as 0-based token ids, comma-separated (prints ids)"},
    ["max-new-tokens"] = {64, "tokens to generate at most"},
    temperature = {0.0, "sampling temperature (0: greedy)"},
    ["top-p"] = {1.0, "nucleus sampling"},
    ["top-k"] = {0, "top-k sampling (0: off)"},
    seed = {-1, "the sampling seed (-1: none)"},
    chat = {false, "render the prompt as a user message with the folder's chat template"},
  }, USAGE)
  local bad = function(msg) error(zorch.flags.usage_error("generate: " .. msg .. "\n" .. USAGE)) end
  if (a.prompt == "") == (a.ids == "") then bad("give one of --prompt and --ids") end
  if a["max-new-tokens"] < 1 then bad("--max-new-tokens must be >= 1, got " .. a["max-new-tokens"]) end
  local model = zorch.generation.from_pretrained(a.MODEL_DIR)
  local tok, prompt
  if a.ids ~= "" then
    prompt = id_list(a.ids)
    if not prompt then bad("--ids must be comma-separated token ids >= 0, got '" .. a.ids .. "'") end
    if a.chat then bad("--chat needs --prompt") end
  else
    local ok, t = pcall(zorch.tokenizer.load, a.MODEL_DIR)
    if not ok then bad(("--prompt needs the folder's tokenizer: %s (or give --ids)"):format(t)) end
    tok = t
    prompt = a.prompt
    if a.chat then prompt = tok:apply_chat_template({{role = "user", content = prompt}}, {add_generation_prompt = true}) end
    prompt = tok:encode(prompt)
  end
  local eos = zorch.generation.eos_token_id(a.MODEL_DIR)
  local first = true
  local out = zorch.generate(model, prompt, {
    tokenizer = tok, max_new_tokens = a["max-new-tokens"], eos_token_id = eos,
    do_sample = a.temperature > 0, temperature = a.temperature > 0 and a.temperature or nil,
    top_p = a["top-p"], top_k = a["top-k"], seed = a.seed >= 0 and a.seed or nil,
    on_token = function(_, id, piece)
      io.stdout:write(tok and piece or ((first and "" or " ") .. id))
      io.stdout:flush()
      first = false
    end,
  })
  io.stdout:write("\n")
  if out[1].finish_reason == "refused" then error("generate: " .. out[1].error, 0) end
end
