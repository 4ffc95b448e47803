-- ds_reading.lua RECORD CORPUS: compares zorch's reading of each configuration of the
-- corpus with DeepSpeed's own, recorded in RECORD by scripts/ds_compare.py
-- (tests/configs/deepspeed-reading.json): the clipping, the batch sizes,
-- the optimizer that runs (type and hyper-parameters) and the scheduler's lr at
-- the recorded steps. Prints one line per file, exits 1 when any differs.
-- Run: build/cpu/zorch tests/lua/ds_reading.lua tests/configs/deepspeed-reading.json tests/configs/corpus
-- As a chunk (tests/lua/test_dsreading.lua): returns compare(record, dir).
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"]

local OPT_KEYS = {"lr", "betas", "eps", "weight_decay", "momentum"}

local function close(a, b)
  if type(a) == "table" and type(b) == "table" then
    if #a ~= #b then return false end
    for i = 1, #a do if not close(a[i], b[i]) then return false end end
    return true
  end
  if type(a) == "number" and type(b) == "number" then
    return math.abs(a - b) <= 1e-12 + 1e-9 * math.abs(b)
  end
  return a == b
end

-- zorch's reading of one file, in the record's shape (nil and the message if refused).
local function reading(path, want)
  local ok, out = pcall(Z._from_deepspeed, path, 1)
  if not ok then return nil, tostring(type(out) == "table" and out.message or out) end
  local r = {gradient_clipping = out.gradient_clipping or 0,
             train_micro_batch_size_per_gpu = out.train_micro_batch_size,
             gradient_accumulation_steps = out.gradient_accumulation_steps}
  if r.train_micro_batch_size_per_gpu and r.gradient_accumulation_steps then
    r.train_batch_size = r.train_micro_batch_size_per_gpu * r.gradient_accumulation_steps
  end
  local model = zorch.nn.Linear(1, 1)
  local opt
  if out.optimizer then
    local okb, o = pcall(Z._config_optimizer, out.optimizer, model, nil)
    if not okb then return nil, tostring(o) end
    opt = o
    local p = {}
    for _, k in ipairs(OPT_KEYS) do
      if want.optimizer and want.optimizer.params[k] ~= nil then p[k] = o.defaults[k] end
    end
    r.optimizer = {type = getmetatable(o).__name:match("[^.]*$"), params = p}
  end
  if out.scheduler and want.scheduler then
    opt = opt or zorch.optim.SGD(model:parameters(), {lr = want.scheduler.lr})
    local s = Z._make_scheduler(out.scheduler, opt)
    local lrs, k = {}, 0
    for _, pair in ipairs(want.scheduler.lrs) do
      while k < pair[1] do s.step(); k = k + 1 end
      lrs[#lrs + 1] = {k, opt.lr}
    end
    r.scheduler = {type = out.scheduler.type, lr = want.scheduler.lr, lrs = lrs}
  end
  return r
end

-- The differences between zorch's and DeepSpeed's reading of the files both
-- accept: {file = {"what: zorch X, DeepSpeed Y"}}; the count compared; the
-- names; those zorch refuses {file = message}.
local function compare(record, dir)
  local diffs, names, compared, refused = {}, {}, 0, {}
  for name in pairs(record.files) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local want = record.files[name]
    if not want.skip then
      local have, err = reading(dir .. "/" .. name, want)
      local d = {}
      if not have then refused[name] = err:gsub("\n.*", "")
      else
        compared = compared + 1
        for _, k in ipairs({"gradient_clipping", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                            "train_batch_size", "optimizer", "scheduler"}) do
          if not close(have[k], want[k]) then
            d[#d + 1] = ("%s: zorch %s, DeepSpeed %s"):format(k, Z._readable(have[k]), Z._readable(want[k]))
          end
        end
      end
      if #d > 0 then diffs[name] = d end
    end
  end
  return diffs, compared, names, refused
end

if ... == "zorch.ds_reading" then return compare end -- (required as a chunk by the test)

local path = assert(arg[1], "usage: zorch tests/lua/ds_reading.lua RECORD CORPUS")
local record = zorch.json.decode(assert(io.open(path)):read("a"))
local dir = assert(arg[2], "usage: zorch tests/lua/ds_reading.lua RECORD CORPUS")
local diffs, compared, names, refused = compare(record, dir)
local bad = 0
for _, name in ipairs(names) do
  local want = record.files[name]
  if want.skip then print(("%-60s not compared: %s"):format(name, want.skip))
  elseif refused[name] then print(("%-60s not compared: zorch refuses it: %s"):format(name, refused[name]))
  elseif diffs[name] then
    bad = bad + 1
    print(("%-60s DIFFERS: %s"):format(name, table.concat(diffs[name], "; ")))
  else
    print(("%-60s same: clip %s, micro %s x accum %s%s%s"):format(name, want.gradient_clipping,
      want.train_micro_batch_size_per_gpu, want.gradient_accumulation_steps,
      want.optimizer and (", " .. want.optimizer.type) or "",
      want.scheduler and (", %s (%d lrs)"):format(want.scheduler.type, #want.scheduler.lrs) or ""))
  end
end
print(("DeepSpeed %s: %d files compared, %d differ"):format(record.deepspeed, compared, bad))
os.exit(bad == 0 and 0 or 1)
