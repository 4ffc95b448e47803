-- Watching training: zorch.progress on the wall clock and on rank 0 only, the
-- metrics logger (JSON lines, CSV, TensorBoard event files), the Engine's step
-- lines, models/simple_net.lua --log and `zorch plot`.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

local bin = os.getenv("ZORCH_BIN") or "../build/zorch"

local function run(cmd)
  local p = io.popen(cmd .. " 2>&1")
  local out = p:read("a")
  local ok = p:close()
  return out, ok
end
local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("a")
  f:close()
  return s
end
local function write(path, text)
  local f = assert(io.open(path, "w"))
  f:write(text)
  f:close()
end
local function hex(s) return (s:gsub(".", function(c) return ("%02x"):format(c:byte()) end)) end
local function u32(s, i) return string.unpack("<I4", s, i) end

local dir = os.tmpname()
os.remove(dir)
Z.fs.mkdir(dir)

-- ---- CRC32C and the TensorBoard record encoding ------------------------------------
tap.ok(Z._crc32c("123456789") == 0xE3069283, ("crc32c('123456789') = 0xE3069283 (got 0x%08X)"):format(
  Z._crc32c("123456789")))
tap.ok(Z._crc32c("") == 0, "crc32c of nothing is 0")
-- the masked form, as tensorboard's masked_crc32c computes it
tap.ok(Z._crc32c("123456789", true) == 0xc78ab0e5, "masked crc32c('123456789') = 0xc78ab0e5")

-- the Event bytes equal protobuf's serialisation of the same messages (tensorboard.Event)
local rec = Z._tb_event(7, {loss = 0.5}, nil, 1234.5)
local len = string.unpack("<I8", rec)
tap.ok(#rec == 8 + 4 + len + 4, "a record is length, crc, data, crc")
tap.ok(u32(rec, 9) == Z._crc32c(rec:sub(1, 8), true) and
       u32(rec, 13 + len) == Z._crc32c(rec:sub(13, 12 + len), true), "both masked CRCs check")
tap.ok(hex(rec:sub(13, 12 + len)) == "0900000000004a934010072a0d0a0b0a046c6f7373150000003f",
       "a scalar event is encoded as protobuf does: " .. hex(rec:sub(13, 12 + len)))
rec = Z._tb_event(-3, nil, "brain.Event:2", 1234.5)
tap.ok(hex(rec:sub(13, -5)) == "0900000000004a934010fdffffffffffffffff011a0d627261696e2e4576656e743a32",
       "the file_version event, with a negative int64 step, too")
tap.raises("an event's step must be an integer", function() Z._tb_event("x") end, "number expected")

-- ---- progress: wall clock, close, rank 0 only --------------------------------------
local lines = {}
local sink = {write = function(_, s) lines[#lines + 1] = s end}
local bar = zorch.progress(5, {every = 1, tty = false, out = sink})
for _ = 1, 5 do
  os.execute("sleep 0.1") -- the time passes in a child: this process's CPU clock barely moves
  bar:update(1, {loss = 0.25})
end
local s = bar:close()
tap.ok(s.rate > 5 and s.rate < 20 and s.elapsed > 0.4,
       ("5 steps of 0.1 s wall time: about 10 it/s (got %.1f it/s over %.2f s)"):format(s.rate, s.elapsed))
tap.ok(#lines == 5 and lines[5]:find("5/5", 1, true) and lines[5]:find("it/s", 1, true) and
       lines[5]:find("loss 0.250000", 1, true), "a plain line a step with every = 1: " .. (lines[5] or ""):gsub("\n", ""))
local shown = tonumber(lines[5]:match("([%d%.]+) it/s"))
tap.ok(shown and shown > 5 and shown < 20, "the line shows the wall-clock rate: " .. tostring(shown))
tap.ok(type(bar.close) == "function" and #lines == 5, "close() exists and adds no line after the last step's")

lines = {}
bar = zorch.progress(nil, {tty = false, out = sink, every = 2})
for _ = 1, 3 do bar:update() end
bar:close()
tap.ok(#lines == 2 and lines[2]:find("^3 ") and not lines[2]:find("ETA", 1, true),
       "an unknown total: no ETA, and close() prints the last count: " .. (lines[2] or ""):gsub("\n", ""))

lines = {}
bar = zorch.progress(100, {tty = true, out = sink, interval = 10})
for _ = 1, 50 do bar:update() end
bar:close()
tap.ok(#lines == 2 and lines[1]:sub(1, 1) == "\r" and lines[2]:find("50/100", 1, true) and lines[2]:sub(-1) == "\n",
       "a terminal is redrawn at most every `interval` seconds and close() ends the line")

lines = {}
bar = zorch.progress(3, {tty = false, every = 1, out = sink, rank = 1})
for _ = 1, 3 do bar:update(1, {loss = 1}) end
bar:print("hidden")
bar:close()
tap.ok(#lines == 0, "a rank other than 0 shows nothing")
do
  lines = {}
  local b <close> = zorch.progress(2, {tty = false, every = 5, out = sink})
  b:update()
end
tap.ok(#lines == 1 and lines[1]:find("1/2", 1, true), "leaving a <close> scope closes the display")
tap.raises("progress checks its total", function() zorch.progress("ten") end, "progress", "total")

-- two ranks: one prints, and only rank 0 writes the log
local script = dir .. "/ranks.lua"
write(script, ([[
local zorch = require "zorch"
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers
local bar = zorch.progress(4, {every = 1, tty = false, out = io.stdout})
for i = 1, 4 do bar:update(1, {loss = i}) end
bar:close()
local log = zorch.Logger{jsonl = %q}
log:log(1, {loss = Z._env_rank()})
log:close()
]]):format(dir .. "/ranks.jsonl"))
local out, ok = run(("%s launch -n 2 %s"):format(bin, script))
local count = select(2, out:gsub("%d/4 ", ""))
tap.ok(ok and count == 4, ("under launch -n 2 one rank prints the 4 progress lines (got %d)"):format(count))
tap.ok((read(dir .. "/ranks.jsonl") or ""):find('"loss": 0}', 1, true), "and only rank 0 writes the metrics file")

-- ---- the logger ------------------------------------------------------------------------
local log = zorch.Logger{jsonl = dir .. "/l.jsonl", csv = dir .. "/l.csv", tensorboard = dir .. "/tb/a/b"}
log:log(1, {loss = 0.5, lr = 0.001})
log:log(2, {loss = zorch.tensor({0.25}), lr = 0.002})
log:log(2, {epoch = 1, note = "a, \"b\""})
log:log(3, {loss = 0 / 0, lr = 0.003, ok = true})
log:close()
log:close()
local jl = {}
for line in read(dir .. "/l.jsonl"):gmatch("[^\n]+") do jl[#jl + 1] = line end
local r1, r2 = Z.json.decode(jl[1]), Z.json.decode(jl[2])
tap.ok(#jl == 4 and r1.step == 1 and r1.loss == 0.5 and r1.lr == 0.001 and r2.loss == 0.25 and type(r1.time) == "number",
       "JSON lines: step, time and the values (a tensor read as a number): " .. jl[1])
tap.ok(Z.json.decode(jl[3]).note == 'a, "b"' and jl[4]:find('"loss": null', 1, true) and
       Z.json.decode(jl[4]).ok == 1, "strings kept, NaN written as null, booleans as 1/0")
local csv = {}
for line in read(dir .. "/l.csv"):gmatch("[^\n]+") do csv[#csv + 1] = line end
tap.ok(csv[1] == "step,time,loss,lr,epoch,note,ok", "the CSV header grows with new names: " .. csv[1])
tap.ok(#csv == 5 and csv[2]:match("^1,[%d.e-]+,0%.5,0%.001,,,$") and csv[3]:match("^2,[%d.e-]+,0%.25,0%.002,,,$") and
       csv[4]:match('^2,[%d.e-]+,,,1,"a, ""b""",$') and csv[5]:match("^3,[%d.e-]+,nan,0%.003,,,1$"),
       "CSV rows hold the logged values, earlier rows padded: " .. table.concat(csv, " | "))
local tbdir = dir .. "/tb/a/b"
local tbfile = io.popen("ls " .. tbdir):read("a"):match("events%.out%.tfevents%.%d+%.[^\n]+")
tap.ok(tbfile ~= nil, "an event file in the (created) directory: " .. tostring(tbfile))
local ev = tbfile and read(tbdir .. "/" .. tbfile) or ""
local nrec, pos, good = 0, 1, true
while pos <= #ev do
  local n = string.unpack("<I8", ev, pos)
  local data = ev:sub(pos + 12, pos + 11 + n)
  good = good and u32(ev, pos + 8) == Z._crc32c(ev:sub(pos, pos + 7), true) and
         u32(ev, pos + 12 + n) == Z._crc32c(data, true)
  nrec, pos = nrec + 1, pos + 16 + n
end
tap.ok(good and nrec == 5 and pos == #ev + 1, ("the event file is 5 framed records with good CRCs (got %d)"):format(nrec))
tap.raises("unknown logger options are named", function() zorch.Logger{json = "x"} end, "unknown option 'json'", "jsonl")
tap.raises("step must be an integer", function() zorch.Logger{}:log(1.5, {}) end, "step must be an integer")
tap.raises("values must be numbers, tensors, booleans or strings",
           function() zorch.Logger{}:log(1, {f = print}) end, "'f'", "function")
tap.raises("a closed logger says so", function() local l = zorch.Logger{}; l:close(); l:log(1, {}) end, "closed")

local function have_tensorboard()
  return os.execute("python3 -c 'from tensorboard.backend.event_processing.event_accumulator import EventAccumulator' " ..
                    "> /dev/null 2>&1")
end
local python_tb = have_tensorboard()
local read_tb = [[
import sys, json, math
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
ea = EventAccumulator(sys.argv[1], size_guidance={"scalars": 0})
ea.Reload()
value = lambda v: v if math.isfinite(v) else str(v)
print(json.dumps({t: [[e.step, value(e.value)] for e in ea.Scalars(t)] for t in ea.Tags()["scalars"]}))
]]
write(dir .. "/read_tb.py", read_tb)
if python_tb then
  out = run(("python3 %s/read_tb.py %s"):format(dir, tbdir))
  local okj, sc = pcall(Z.json.decode, out:match("{.*}") or "")
  tap.ok(okj and sc.loss and #sc.loss == 3 and sc.loss[1][1] == 1 and sc.loss[1][2] == 0.5 and sc.loss[2][2] == 0.25 and
         sc.loss[3][2] == "nan" and #sc.lr == 3 and math.abs(sc.lr[3][2] - 0.003) < 1e-9 and sc.epoch[1][1] == 2 and not sc.note,
         "tensorboard's EventAccumulator reads the logged scalars: " .. out:sub(1, 300))
else
  tap.ok(true, "# SKIP python3 cannot import tensorboard: the event file is not checked by tensorboard itself")
end

-- ---- the reference script: step lines, --log, --csv, --tensorboard, then zorch plot ----
local net = ("%s ../models/simple_net.lua --samples 640 --batch-size 32 --save %s/m.safetensors "):format(bin, dir)
out, ok = run(net .. ("--epochs 3 --print-every 10 --log %s/m.jsonl --csv %s/m.csv --tensorboard %s/tb/run"):format(
  dir, dir, dir))
local step_line = out:match("step 20  [^\n]*")
tap.ok(ok and step_line and step_line:match("loss %d+%.%d+  lr [%d.e-]+  grad norm %d+%.%d+  %d+ samples/s  [%d.]+ ms/step"),
       "the Engine's step line: loss, lr, grad norm, samples/s, step time: " .. tostring(step_line))
local epoch_line = out:match("Epoch 3 loss[^\n]*")
tap.ok(epoch_line and epoch_line:match("grad norm: [%d.]+  lr: [%d.e-]+  samples/s: %d+"),
       "the script's epoch line: loss, grad norm, lr, samples/s: " .. tostring(epoch_line))
tap.ok(select(2, out:gsub("\nstep %d+ ", "")) + (out:match("^step ") and 1 or 0) == 6, "a step line every 10 of 60 steps")
local rows, epochs = {}, {}
for line in (read(dir .. "/m.jsonl") or ""):gmatch("[^\n]+") do
  local r = Z.json.decode(line)
  if r.epoch then epochs[#epochs + 1] = r else rows[#rows + 1] = r end
end
tap.ok(#rows == 60 and rows[60].step == 60 and rows[1].loss > 0 and rows[1].lr == 0.00015 and rows[1].grad_norm > 0,
       ("--log: a row per step with loss, lr, grad_norm (%d rows)"):format(#rows))
local printed = tonumber(out:match("Epoch 3 loss: ([%d.]+)"))
tap.ok(#epochs == 3 and epochs[3].step == 60 and printed and math.abs(epochs[3].epoch_loss - printed) < 1e-6 and
       epochs[3].samples_per_s > 0, "and a row per epoch with the printed epoch loss and samples/s")
csv = {}
for line in (read(dir .. "/m.csv") or ""):gmatch("[^\n]+") do csv[#csv + 1] = line end
local c2 = {}
for v in (csv[2] or ""):gmatch("[^,]*") do c2[#c2 + 1] = v end
tap.ok(#csv == 64 and csv[1] == "step,time,grad_norm,loss,lr,epoch,epoch_loss,samples_per_s" and
       tonumber(c2[4]) == rows[1].loss, "--csv: the same rows and values: " .. (csv[1] or ""))
if python_tb then
  out = run(("python3 %s/read_tb.py %s/tb/run"):format(dir, dir))
  local okj, sc = pcall(Z.json.decode, out:match("{.*}") or "")
  local match = okj and sc.loss and #sc.loss == 60
  for i = 1, 60 do
    match = match and sc.loss[i][1] == rows[i].step and math.abs(sc.loss[i][2] - rows[i].loss) <= 1e-6 * rows[i].loss
  end
  tap.ok(match and #sc.epoch_loss == 3, "--tensorboard: tensorboard reads the 60 step losses and 3 epoch losses")
else
  tap.ok(true, "# SKIP python3 cannot import tensorboard")
end

local have_gnuplot = os.execute("command -v gnuplot > /dev/null 2>&1")
if have_gnuplot then
  out, ok = run(("%s plot %s/m.jsonl -o %s/loss.png"):format(bin, dir, dir))
  local png = read(dir .. "/loss.png") or ""
  tap.ok(ok and png:sub(1, 8) == "\137PNG\r\n\26\n" and #png > 5000,
         ("zorch plot writes a PNG (%d bytes): %s"):format(#png, out:gsub("\n", " ")))
  out, ok = run(("%s plot %s/m.csv --y loss,lr,grad_norm --smooth 0.9 --title run -o %s/all.svg"):format(bin, dir, dir))
  local svg = read(dir .. "/all.svg") or ""
  tap.ok(ok and svg:find("<svg", 1, true) and svg:find("grad_norm", 1, true), "from the CSV, three panels, smoothed, as SVG")
  out, ok = run(("COLUMNS=80 %s plot %s/m.jsonl --y epoch_loss --x epoch"):format(bin, dir))
  tap.ok(ok and out:find("epoch_loss", 1, true) and out:find("*", 1, true), "without -o it draws on the terminal as text")
else
  tap.ok(true, "# SKIP gnuplot is not installed (scripts/deps.sh installs gnuplot-nox)")
  tap.ok(true, "# SKIP gnuplot is not installed")
  tap.ok(true, "# SKIP gnuplot is not installed")
end
out, ok = run(bin .. " plot")
tap.ok(not ok and out:match("^usage: zorch plot") and not out:find("traceback", 1, true), "no file: the usage line")
out, ok = run(("%s plot %s/m.jsonl --wat"):format(bin, dir))
tap.ok(not ok and out:match("^usage: zorch plot") and out:find("unknown option '--wat'", 1, true) and
       not out:find("traceback", 1, true), "an unknown option: the usage line and the option")
out, ok = run(("%s plot %s/m.jsonl --y nope -o %s/x.png"):format(bin, dir, dir))
tap.ok(not ok and out:find("no column 'nope'", 1, true) and out:find("loss", 1, true) and not out:find("traceback", 1, true),
       "a missing column is named with the columns there are: " .. out:gsub("\n", " "))
out, ok = run(("ZORCH_GNUPLOT=%s/no-gnuplot %s plot %s/m.jsonl -o %s/x.png"):format(dir, bin, dir, dir))
tap.ok(not ok and out:find("gnuplot not found", 1, true) and out:find("gnuplot-nox", 1, true),
       "without gnuplot: a clear error naming the package: " .. out:gsub("\n", " "))

os.execute("rm -rf " .. dir)
tap.done()
