-- zorch.Logger{jsonl = path, csv = path, tensorboard = dir}: a metrics logger.
-- logger:log(step, {loss = ..., lr = ...}) writes one row to each output:
--   jsonl        one JSON object a line: {"step": 10, "time": 1.25, "loss": 0.5, ...}
--   csv          a header (step, time, then the names in order of appearance,
--                sorted within a row) and one line a row; a name first seen later
--                adds a column (the file is rewritten once, earlier rows empty there)
--   tensorboard  an event file events.out.tfevents.* in dir (created), one
--                scalar per number: `tensorboard --logdir dir` shows the curves
-- `time` is wall-clock seconds since the logger was made. Values are numbers,
-- one-element tensors (read with :item()), booleans (1/0) or strings (JSON and
-- CSV only). Only rank 0 writes; on other ranks log and close do nothing.
-- Files are flushed at most every `flush_interval` seconds (default 1) and at
-- close(), which also runs on leaving a `local logger <close>` scope, and at
-- once after a checkpoint is saved (zorch._published_step), so the lines up to
-- a checkpoint's step are on disk when a resume from it needs them.
-- resume = step (a run resumed from a checkpoint of that step): the files are
-- appended to, not truncated, after dropping the lines of later steps (the
-- killed run's, which the resumed run writes again); TensorBoard gets a new
-- event file as always.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local Logger = {}
Logger.__index = Logger
Logger.__name = "zorch.Logger"

local OPTIONS = {jsonl = "a path", csv = "a path", tensorboard = "a directory", rank = "an integer",
                 flush_interval = "seconds (a number >= 0)", resume = "a step (an integer >= 0)"}

local function allowed()
  local ks = {}
  for k in pairs(OPTIONS) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ", ")
end

local function open(path, mode, what)
  local f, err = io.open(path, mode)
  if not f then error(("Logger: cannot open the %s file: %s"):format(what, err), 3) end
  return f
end

-- A resumed run's file: the complete lines (a killed run may leave half of
-- one) whose step, step_of(line), is at most `resume` kept, the rest dropped;
-- opened for appending.
local function reopen(path, what, resume, step_of)
  local f = io.open(path, "rb")
  if f then
    local text = f:read("a")
    f:close()
    local keep = {}
    for line in text:gmatch("([^\n]*)\n") do
      local step = step_of(line)
      if step and step <= resume then keep[#keep + 1] = line .. "\n" end
    end
    local ok, err = pcall(zorch.fs.write_atomic, path, table.concat(keep))
    if not ok then error(("Logger: cannot rewrite the %s file: %s"):format(what, err), 3) end
  end
  return open(path, "a", what)
end

-- mkdir -p
local function make_dirs(dir) zorch.fs.mkdir(dir, true) end

-- The shortest of %.15g, %.16g and %.17g that reads back as the same number.
local function fmt_number(v)
  if math.type(v) == "integer" then return tostring(v) end
  if v ~= v then return nil, "nan" end
  if v == math.huge then return nil, "inf" end
  if v == -math.huge then return nil, "-inf" end
  for _, p in ipairs({"%.15g", "%.16g"}) do
    local s = p:format(v)
    if tonumber(s) == v then return s end
  end
  return ("%.17g"):format(v)
end

local function json_string(s)
  return '"' .. s:gsub('[%c"\\]', function(c)
    local named = {['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t"}
    return named[c] or ("\\u%04x"):format(c:byte())
  end) .. '"'
end

local function json_value(v)
  if type(v) == "string" then return json_string(v) end
  return (fmt_number(v)) or "null" -- JSON has no NaN or infinity
end

local function csv_value(v)
  if v == nil then return "" end
  if type(v) == "string" then
    v = v:gsub("[\r\n]", " ") -- one row a line
    if v:find('[,"\r\n]') then return '"' .. v:gsub('"', '""') .. '"' end
    return v
  end
  local s, special = fmt_number(v)
  return s or special
end

function zorch.Logger(opts)
  if type(opts) ~= "table" then error("Logger: expected {jsonl = path, csv = path, tensorboard = dir}", 2) end
  for k, v in pairs(opts) do
    if not OPTIONS[k] then error(("Logger: unknown option '%s' (allowed: %s)"):format(tostring(k), allowed()), 2) end
    local good
    if k == "rank" then good = math.type(v) == "integer"
    elseif k == "resume" then good = math.type(v) == "integer" and v >= 0
    elseif k == "flush_interval" then good = type(v) == "number" and v >= 0
    else good = type(v) == "string" and v ~= "" end
    if not good then error(("Logger: %s must be %s, got %s"):format(k, OPTIONS[k], tostring(v)), 2) end
  end
  local self = setmetatable({rank = opts.rank or zorch._env_rank(), t0 = zorch.clock(),
                             flush_interval = opts.flush_interval or 1, closed = false, columns = {}, known = {},
                             jsonl_path = opts.jsonl, csv_path = opts.csv}, Logger)
  self.last_flush = self.t0
  if self.rank ~= 0 then return self end
  if opts.resume then
    if opts.jsonl then self.jsonl = reopen(opts.jsonl, "jsonl", opts.resume, function(line)
      return tonumber(line:match('^{"step": (%-?%d+)[,}]'))
    end) end
    if opts.csv then
      local header
      self.csv = reopen(opts.csv, "csv", opts.resume, function(line)
        if not header then header = line; return -math.huge end
        return tonumber(line:match("^(%-?%d+),"))
      end)
      if header then
        for name in header:gmatch("[^,]+") do
          self.columns[#self.columns + 1] = name
          self.known[name] = true
        end
        self.csv_rows = true
      end
    end
  else
    if opts.jsonl then self.jsonl = open(opts.jsonl, "w", "jsonl") end
    if opts.csv then self.csv = open(opts.csv, "w", "csv") end
  end
  if opts.tensorboard then
    local ok, err = pcall(make_dirs, opts.tensorboard)
    if not ok then error("Logger: tensorboard directory: " .. tostring(err), 2) end
    self.tensorboard_file = zorch._tb_filename(opts.tensorboard)
    self.tb = open(self.tensorboard_file, "wb", "tensorboard event")
    self.tb:write(zorch._tb_event(0, nil, "brain.Event:2"))
  end
  return self
end

-- The CSV's columns grew: rewrite its header, pad the rows written so far.
function Logger:csv_widen(added)
  self.csv:close()
  local f = open(self.csv_path, "r", "csv")
  local text = f:read("a")
  f:close()
  local pad = (","):rep(added)
  local lines = {table.concat(self.columns, ",")}
  local first = true
  for line in text:gmatch("[^\n]+") do
    if first then first = false
    else lines[#lines + 1] = line .. pad end
  end
  f = open(self.csv_path, "w", "csv")
  f:write(table.concat(lines, "\n"), #lines > 0 and "\n" or "")
  self.csv = f
end

function Logger:log(step, values)
  if math.type(step) ~= "integer" then
    local s = math.tointeger(step)
    if not s then error("Logger:log: step must be an integer, got " .. tostring(step), 2) end
    step = s
  end
  if type(values) ~= "table" then error("Logger:log: expected (step, {name = value, ...})", 2) end
  if self.closed then error("Logger:log: the logger is closed", 2) end
  if self.rank ~= 0 then return self end
  local row, names = {}, {}
  for k, v in pairs(values) do
    if type(k) ~= "string" then error("Logger:log: names must be strings, got " .. tostring(k), 2) end
    if k == "step" or k == "time" then error(("Logger:log: '%s' is written by the logger itself"):format(k), 2) end
    if zorch.is_tensor(v) then v = v:item()
    elseif type(v) == "boolean" then v = v and 1 or 0
    elseif type(v) ~= "number" and type(v) ~= "string" then
      error(("Logger:log: value of '%s' is a %s (expected a number, tensor, boolean or string)"):format(k, type(v)), 2)
    end
    row[k] = v
    names[#names + 1] = k
  end
  table.sort(names)
  local time = math.floor((zorch.clock() - self.t0) * 1e6 + 0.5) / 1e6 -- microseconds
  if self.jsonl then
    local parts = {('{"step": %d, "time": %s'):format(step, json_value(time))}
    for _, k in ipairs(names) do parts[#parts + 1] = json_string(k) .. ": " .. json_value(row[k]) end
    self.jsonl:write(table.concat(parts, ", "), "}\n")
  end
  if self.csv then
    local added = 0
    if #self.columns == 0 then self.columns = {"step", "time"} end
    for _, k in ipairs(names) do
      if not self.known[k] then
        self.known[k] = true
        self.columns[#self.columns + 1] = k
        added = added + 1
      end
    end
    if not self.csv_rows then self.csv:write(table.concat(self.columns, ","), "\n")
    elseif added > 0 then self:csv_widen(added) end
    self.csv_rows = true
    row.step, row.time = step, time
    local cells = {}
    for i, k in ipairs(self.columns) do cells[i] = csv_value(row[k]) end
    self.csv:write(table.concat(cells, ","), "\n")
  end
  if self.tb then
    local scalars = {}
    for _, k in ipairs(names) do if type(row[k]) == "number" then scalars[k] = row[k] end end
    self.tb:write(zorch._tb_event(step, scalars))
  end
  local now, published = zorch.clock(), zorch._published_step
  if now - self.last_flush >= self.flush_interval or
     published and (published ~= self.flushed_at or step <= published) then
    self.flushed_at = published
    self:flush(now)
  end
  return self
end

function Logger:flush(now)
  for _, f in ipairs({self.jsonl or false, self.csv or false, self.tb or false}) do
    if f then f:flush() end
  end
  self.last_flush = now or zorch.clock()
end

function Logger:close()
  if self.closed then return end
  self.closed = true
  for _, k in ipairs({"jsonl", "csv", "tb"}) do
    if self[k] then
      self[k]:close()
      self[k] = nil
    end
  end
end
Logger.__close = Logger.close

return nil
