-- Shapes, state dicts, loaders, engines and optimizers print readably, and
-- stay the plain tables they were.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, zorch.data

local function is(got, want, desc)
  if got ~= want then print("#   got:  " .. tostring(got):gsub("\n", "\n#         ") .. "\n#   want: " .. want:gsub("\n", "\n#         ")) end
  tap.ok(got == want, desc)
end

-- shapes
local x = zorch.ones(2, 3)
is(tostring(x.shape), "(2, 3)", "x.shape prints as (2, 3)")
is(tostring(x:size()), "(2, 3)", "x:size() prints as (2, 3)")
is(tostring(zorch.ones(4).shape), "(4,)", "a 1-d shape")
is(tostring(zorch.tensor(1.5).shape), "()", "a 0-d shape")
local s = x.shape
local seen = {}
for i, v in ipairs(s) do seen[i] = v end
tap.ok(#s == 2 and s[1] == 2 and s[2] == 3 and #seen == 2 and seen[2] == 3, "a shape is still a plain array")
tap.ok(table.concat(s, "x") == "2x3" and select("#", table.unpack(s)) == 2, "table functions work on a shape")
s[1] = 7
tap.ok(x.shape[1] == 2, "each shape is a fresh table")
tap.ok(zorch.zeros(x:size()):numel() == 6 and zorch.ones(6):view(x.shape):dim() == 2,
  "a shape is accepted where sizes are")
tap.ok(x:size(2) == 3, "size(dim) is still a number")

-- state dicts
zorch.manual_seed(1)
local model = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 2, {bias = false}))
local sd = model:state_dict()
is(tostring(sd), table.concat({
  "state_dict (3 tensors, 260 elements):",
  "  0.weight  (20, 10)  float32",
  "  0.bias    (20,)     float32",
  "  2.weight  (2, 20)   float32"}, "\n"), "a state dict prints its names, shapes and dtypes in the model's order")
local n = 0
for k, v in pairs(sd) do n = n + (zorch.is_tensor(v) and 1 or 0) end
tap.ok(n == 3, "pairs over a state dict gives only its tensors")
sd.extra = zorch.zeros(2, {dtype = "int64"})
local tail = "\n  extra     (2,)      int64"
tap.ok(tostring(sd):sub(-#tail) == tail, "names added later print last")
sd.extra = nil
local dir = tap.tmpdir()
zorch.save(model:state_dict(), dir .. "/m.safetensors")
local back = nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 2, {bias = false}))
back:load_state_dict(zorch.load(dir .. "/m.safetensors"))
tap.ok(back:state_dict()["2.weight"]:eq(sd["2.weight"]):sum():item() == 40, "a printable state dict saves and loads")
os.remove(dir .. "/m.safetensors")
os.remove(dir)
is(tostring(nn.ReLU():state_dict()), "state_dict (0 tensors, 0 elements)", "an empty state dict")

-- loaders
local ds = data.TensorDataset(zorch.randn(100, 10), zorch.randn(100, 2))
is(tostring(data.DataLoader(ds, {batch_size = 64, shuffle = true})),
  "DataLoader(100 samples, batch_size=64, shuffle=true, drop_last=false, 2 batches)", "a loader prints its settings")
is(tostring(data.DataLoader(ds, {batch_size = 32, drop_last = true})),
  "DataLoader(100 samples, batch_size=32, shuffle=false, drop_last=true, 3 batches)", "drop_last counts the batches")

-- optimizers
local opt = optim.Adam(model:parameters(), {lr = 0.00015})
is(tostring(opt), "optim.Adam (3 parameters, 260 elements)\n"
  .. "  group 1: lr=0.00015, amsgrad=false, betas=(0.9, 0.999), bias_correction=true, eps=1e-08, weight_decay=0",
  "Adam prints its type, hyperparameters and parameter count")
is(tostring(optim.AdamW({zorch.ones(3, {requires_grad = true})})), "optim.AdamW (1 parameter, 3 elements)\n"
  .. "  group 1: lr=0.001, amsgrad=false, betas=(0.9, 0.999), bias_correction=true, eps=1e-08, weight_decay=0.01", "AdamW")
local sgd = optim.SGD(model:parameters(), {lr = 0.1, momentum = 0.9})
is(tostring(sgd), "optim.SGD (3 parameters, 260 elements)\n"
  .. "  group 1: lr=0.1, dampening=0, momentum=0.9, nesterov=false, weight_decay=0", "SGD")
sgd.lr = 0.05
tap.ok(tostring(sgd):find("lr=0.05,", 1, true) ~= nil, "the printed lr is the current one")

-- integer tensors print their values exactly, past 2^53 too (a double would round them)
is(tostring(zorch.tensor({9007199254740993, -9007199254740993, 3})),
   "tensor([ 9007199254740993, -9007199254740993,                 3])", "int64 past 2^53, exactly")
is(tostring(zorch.tensor(9007199254740993)), "tensor(9007199254740993)", "a 0-d int64 past 2^53")
is(tostring(zorch.tensor({math.maxinteger, math.mininteger})),
   "tensor([ 9223372036854775807, -9223372036854775808])", "int64's extremes")
is(tostring(zorch.tensor({-7, 2147483647}, {dtype = "int32"})), "tensor([        -7, 2147483647], dtype=int32)", "int32")

-- engines
local engine = zorch.Engine{zero_stage = 2, gradient_clipping = 1.0, precision = "bf16"}
is(tostring(engine), "zorch.Engine(zero_stage=2, precision=bf16, gradient_clipping=1, "
  .. "gradient_accumulation_steps=1, world_size=1, device=cpu)", "an engine prints its configuration")
is(tostring(zorch.Engine{}), "zorch.Engine(zero_stage=0, precision=fp32, gradient_clipping=off, "
  .. "gradient_accumulation_steps=1, world_size=1, device=cpu)", "clipping off")
local e2 = zorch.Engine{zero_stage = 1}
local _, loader, popt = e2:prepare(model, data.DataLoader(ds, {batch_size = 10}), optim.SGD(model:parameters()))
tap.ok(tostring(e2):find(", prepared: 3 parameters)", 1, true) ~= nil, "a prepared engine says so")
tap.ok(tostring(popt):find("^optim.SGD %(3 parameters") ~= nil, "the prepared optimizer prints as the optimizer")
tap.ok(tostring(loader):find("10 batches", 1, true) ~= nil, "the prepared loader prints")

tap.done()
