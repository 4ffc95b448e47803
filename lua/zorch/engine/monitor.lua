-- DeepSpeed's monitors (its "tensorboard" and "csv_monitor" sections, the
-- Engine options of those names): after every optimizer step rank 0 writes
-- DeepSpeed's events, named and stepped as DeepSpeed writes them: the
-- x-axis is the samples seen so far (global_samples), the names
-- Train/Samples/lr, Train/Samples/train_loss (the step's mean micro-batch loss
-- on rank 0) and, with fp16, Train/Samples/loss_scale.
--   tensorboard  an event file in output_path/job_name (the existing writer, lua/ltboard.c)
--   csv_monitor  one file per event in output_path/job_name, as DeepSpeed's
--                csvMonitor: the name with / and spaces made _ plus .csv
--                (Train_Samples_lr.csv), a header "step,<last part of the name>"
--                then "samples,value" lines.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local function dir_of(m) return (m.output_path == "" and "." or m.output_path) .. "/" .. m.job_name end

-- The monitors an engine's options ask for (nil when none): rank 0 only.
function zorch._monitors(engine)
  local c = engine.cfg
  if not (c.tensorboard or c.csv_monitor) or not engine.first then return nil end
  local m = {samples = 0, csv = {}, files = {}}
  if c.tensorboard then
    m.tb = zorch.Logger{tensorboard = dir_of(c.tensorboard)}
    m.files[#m.files + 1] = m.tb.tensorboard_file
  end
  if c.csv_monitor then
    m.csv_dir = dir_of(c.csv_monitor)
    local ok, err = pcall(zorch.fs.mkdir, m.csv_dir, true)
    if not ok then error(("Engine: csv_monitor: cannot make %s: %s"):format(m.csv_dir, tostring(err)), 0) end
  end
  return m
end

local function csv_write(m, name, value, step)
  local file = name:gsub("[/ ]", "_")
  local f = m.csv[file]
  if not f then
    local path = m.csv_dir .. "/" .. file .. ".csv"
    f = assert(io.open(path, "w"))
    f:write("step,", name:match("[^/]*$"), "\n")
    m.csv[file] = f
    m.files[#m.files + 1] = path
  end
  f:write(("%d,%s\n"):format(step, zorch._readable(value)))
  f:flush()
end

-- One optimizer step's events: samples is the step's global batch.
function zorch._monitor_step(m, engine, samples, loss)
  m.samples = m.samples + samples
  local events = {{"Train/Samples/lr", engine.user_opt.lr}}
  if loss then events[#events + 1] = {"Train/Samples/train_loss", loss} end
  if engine.cfg.precision == "fp16" then events[#events + 1] = {"Train/Samples/loss_scale", engine.scaler.scale} end
  if m.tb then
    local row = {}
    for _, e in ipairs(events) do row[e[1]] = e[2] end
    m.tb:log(m.samples, row)
    m.tb:flush()
  end
  if m.csv_dir then for _, e in ipairs(events) do csv_write(m, e[1], e[2], m.samples) end end
end

return nil
