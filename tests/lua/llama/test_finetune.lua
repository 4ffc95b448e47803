-- models/finetune.lua end to end on a tiny random Llama (made by models/llama.lua
-- with tests/tokenizer/llama3.json's vocabulary): LoRA and full fine-tuning,
-- packed and padded, chat messages, ZeRO stage 0 and 3 on 2 ranks give the same losses, so
-- do 2 ranks and 1 rank with twice the accumulation; resuming continues the
-- same losses; --save-hf and --save-adapter folders load; --sample prints;
-- bad data files are one-line errors naming the file and the line.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local script = "../models/finetune.lua"
local TOK = "tokenizer/llama3.json"
local BASE = tmp .. "/base"

local out, ok = run(("%s ../models/llama.lua --vocab 451 --dim 32 --layers 2 --heads 4 --kv-heads 2 --context 128 " ..
  "--batch-size 1 --steps 0 --val-fraction 0 --data lua/llama/tokens.bin --save-hf %s"):format(bin, BASE))
tap.ok(ok and io.open(BASE .. "/config.json") ~= nil, "a tiny random Llama folder from models/llama.lua --steps 0 --save-hf")
if not ok then print("# " .. out:gsub("\n", "\n# ")) end

local pairs_ = {{"What is two plus two?", "Four."}, {"Name a colour.", "Blue, like the sky."},
                {"Say hello", "Hello there, friend!"}, {"Count to three", "One, two, three."}, {"Spell cat", "C-A-T"},
                {"Who wrote it?", "Nobody knows."}, {"Is it raining?", "Not today, no."}, {"Pick a number", "Seven"},
                {"What day is it?", "It is a Tuesday, I think."}, {"Where is the key?", "Under the mat."},
                {"Say nothing", "..."}, {"Which way?", "Left, then right, then left again."}}
local lines = {}
for i, p in ipairs(pairs_) do lines[i] = ('{"prompt": %s, "response": %s}'):format(zorch.json.encode(p[1]), zorch.json.encode(p[2])) end
local DATA = tap.temp_file(table.concat(lines, "\n") .. "\n", ".jsonl")
local COMMON = ("--init %s --tokenizer %s --eos '<|end_of_text|>' --data %s --context 32 --lr 5e-3 --warmup 2 " ..
  "--template 'Q: {prompt}\nA: ' --seed 7"):format(BASE, TOK, DATA)

local function losses(text)
  local l = {}
  for s, v in text:gmatch("step (%d+)/%d+ | epoch %d+ | loss (%S+)") do l[tonumber(s)] = tonumber(v) end
  return l
end
local function finetune(flags, launch)
  local text, good = run(("%s %s %s %s"):format(launch or bin, script, COMMON, flags))
  return losses(text), text, good
end
local function same(a, b, tol)
  local worst = #a == #b and #a > 0 and 0 or math.huge
  for s = 1, #a do worst = math.max(worst, math.abs(a[s] - (b[s] or math.huge)) / a[s]) end
  return worst <= tol, worst
end
local function show(text) print("# " .. text:gsub("\n", "\n# ")) end

-- ---- one rank: LoRA, packed; the losses fall; the adapter and the merged folder load -----------

do
  local l, text, good = finetune(("--pack --batch-size 2 --epochs 4 --lora-r 4 --lora-targets q_proj,v_proj,o_proj " ..
    "--save-adapter %s/adapter --save-hf %s/merged --sample 8 --temperature 0 --log %s/m.jsonl"):format(tmp, tmp, tmp))
  tap.ok(good and #l > 4 and l[#l] < l[1], ("LoRA, packed: %d steps, loss %.4f -> %.4f"):format(#l, l[1] or 0, l[#l] or 0))
  if not good then show(text) end
  tap.ok(text:find("LoRA r 4, alpha 16 on 6 modules", 1, true) and text:find("(packed into 32 tokens)", 1, true),
         "the first lines say LoRA and packing")
  tap.ok(text:find("---- sample ----\n<|begin_of_text|>Q: What is two plus two?\nA: ", 1, true) ~= nil,
         "--sample starts from the first example's prompt, written with the template")
  local ok1 = pcall(zorch.models.llama.from_pretrained, tmp .. "/merged")
  tap.ok(ok1 and io.open(tmp .. "/merged/tokenizer.json") and io.open(tmp .. "/adapter/adapter_config.json"),
         "--save-hf writes a folder that loads (with its tokenizer.json), --save-adapter PEFT's folder")
  local f = io.open(tmp .. "/m.jsonl")
  local logged = f and f:read("a") or ""
  if f then f:close() end
  tap.ok(select(2, logged:gsub('"loss"', "")) == #l, "--log writes a loss per step")
  -- the merged folder, its LoRA trained in: the first loss of a new run on it is the last ones' level
  local l2 = finetune(("--init %s/merged --pack --batch-size 2 --steps 1 --lr 0 --no-shuffle"):format(tmp))
  local l3 = finetune("--pack --batch-size 2 --steps 1 --lr 0 --no-shuffle")
  tap.ok(l2[1] and l3[1] and l2[1] < l3[1], ("the merged model starts lower than the base (%.4f < %.4f)"):format(l2[1] or 0, l3[1] or 0))
end

-- ---- chat messages through the tokenizer's apply_chat_template -------------------------------

local chat = {}
for i = 1, 6 do
  local p = pairs_[i]
  chat[i] = zorch.json.encode({messages = {{role = "system", content = "Be brief."}, {role = "user", content = p[1]},
                                           {role = "assistant", content = p[2]}}}):gsub("[\n\t]", "")
end
local CHAT = tap.temp_file(table.concat(chat, "\n") .. "\n", ".jsonl")
do
  local l, text, good = finetune(("--data %s --chat-template chatml --context 128 --pack --batch-size 2 --epochs 2 --lora-r 4 " ..
    "--sample 4 --temperature 0 --prompt 'Say hello'"):format(CHAT))
  tap.ok(good and #l >= 2 and l[#l] < l[1] and text:find("6 examples of " .. CHAT .. " (chat;", 1, true) ~= nil,
         ("messages with --chat-template chatml: %d steps, loss %.4f -> %.4f"):format(#l, l[1] or 0, l[#l] or 0))
  tap.ok(text:find("---- sample ----\n<|im_start|>user\nSay hello<|im_end|>\n<|im_start|>assistant\n", 1, true) ~= nil,
         "--prompt becomes a user turn and the generation prompt")
  if not good then show(text) end
  local _, t2, ok2 = finetune(("--data %s --pack --steps 1"):format(CHAT))
  tap.ok(not ok2 and t2:find(CHAT .. ": line 1: ", 1, true) and t2:find("no chat_template", 1, true),
         "without a chat template the first line of messages is refused: " .. (t2:match("[^\n]*no chat_template[^\n]*") or t2))
end

-- ---- ranks and stages: the same losses --------------------------------------------------------

if tap.has_mpi(bin) then
  local launch = bin .. " launch -n 2"
  for _, c in ipairs{{"LoRA, packed", "--pack --lora-r 4 --batch-size 2 --epochs 2"},
                     {"full, packed", "--pack --batch-size 2 --epochs 2"},
                     {"full, padded", "--batch-size 2 --epochs 2"}} do
    local l0, t0 = finetune(c[2] .. " --zero-stage 0", launch)
    local l3, t3 = finetune(c[2] .. " --zero-stage 3", launch)
    local good, worst = same(l0, l3, 1e-5)
    tap.ok(good, ("%s on 2 ranks: stage 3's %d losses = stage 0's (worst relative %.2g)"):format(c[1], #l3, worst))
    if not good then show(t0); show(t3) end
  end
  local l2 = finetune("--pack --batch-size 2 --epochs 2 --zero-stage 2", launch)
  local l1 = finetune("--pack --batch-size 2 --accum 2 --epochs 2")
  local good, worst = same(l1, l2, 1e-5)
  tap.ok(good, ("2 ranks = 1 rank with accumulation 2: the mean over the step's response tokens (worst %.2g)"):format(worst))
else
  print("# zorch was built without MPI: the 2-rank cases are skipped")
end

-- ---- resume ---------------------------------------------------------------------------------

do
  local all = finetune("--batch-size 3 --steps 8 --lr-schedule constant")
  local _, t1 = finetune(("--batch-size 3 --steps 4 --lr-schedule constant --checkpoint-dir %s/ck"):format(tmp))
  local rest, t2 = finetune(("--batch-size 3 --steps 8 --lr-schedule constant --resume %s/ck"):format(tmp))
  local worst = #all == 8 and rest[5] and 0 or math.huge
  for s = 5, 8 do worst = math.max(worst, math.abs(all[s] - (rest[s] or math.huge)) / all[s]) end
  tap.ok(worst <= 1e-6 and t2:find("resumed from", 1, true) ~= nil,
         ("resumed at step 4: steps 5-8 as in one run, across an epoch's end (worst %.2g)"):format(worst))
  if worst > 1e-6 then show(t1); show(t2) end
end

-- ---- refusals: one line, status 2 --------------------------------------------------------------

local function refused(desc, flags, ...)
  local text = run(("%s %s %s 2>&1; echo status $?"):format(bin, script, flags))
  local good = text:find("status 2\n", 1, true) ~= nil and not text:find("traceback", 1, true)
  for _, p in ipairs{...} do good = good and text:find(p, 1, true) ~= nil end
  local first = text:match("^[^\n]*")
  tap.ok(good and first:find("finetune: ", 1, true) ~= nil, desc .. ": " .. first)
  if not good then show(text) end
end
local base = ("--init %s --tokenizer %s --eos '<|end_of_text|>' --steps 1"):format(BASE, TOK)
local bad_json = tap.temp_file(lines[1] .. "\n" .. lines[2] .. "\n{\"prompt\": \"a\", \"response\": \n", ".jsonl")
refused("a line that is not JSON", base .. " --data " .. bad_json, bad_json .. ": line 3: not valid JSON")
local no_fields = tap.temp_file(lines[1] .. "\n" .. '{"question": "a", "answer": "b"}' .. "\n", ".jsonl")
refused("a line without prompt/response or messages", base .. " --data " .. no_fields, no_fields .. ": line 2: has neither")
local empty = tap.temp_file("", ".jsonl")
refused("an empty file", base .. " --data " .. empty, empty .. ": holds no examples")
refused("no eos in config.json", ("--init %s --tokenizer %s --data %s"):format(BASE, TOK, DATA), "config.json has no eos_token_id")
refused("--context beyond the model", base .. " --data " .. DATA .. " --context 200", "max_position_embeddings 128")
refused("--epochs and --steps", base .. " --data " .. DATA .. " --epochs 2", "not both")

tap.done()
