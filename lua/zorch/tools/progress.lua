-- zorch.progress(total, opts): a progress display for `total` steps (nil when
-- unknown), timed on the wall clock (zorch.clock, monotonic). Only rank 0 shows
-- it; on other ranks every method does nothing. bar:update(k, info) after k
-- steps (info: loss and other numbers or one-element tensors, read only when
-- drawn). On a terminal it redraws one line at most every `interval` seconds;
-- otherwise it prints a plain line every `every` steps, or with `every_s` every
-- that many seconds (a log stays quiet for a short run). bar:print(s) prints a
-- line above the bar, bar:stats() gives {n, total, elapsed, rate, eta} and
-- bar:close() ends the display (also on leaving a `local bar <close>` scope).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

-- This process's rank from the launcher's environment (0 when run alone),
-- without starting MPI: what progress displays and loggers need to stay quiet.
function zorch._env_rank()
  if not (os and os.getenv) then return 0 end
  -- (a rank that joined by rendezvous, zero/rendezvous.c, is an MPI singleton
  -- whose PMIX_RANK is 0: RANK and SLURM_PROCID come first)
  for _, k in ipairs({"OMPI_COMM_WORLD_RANK", "RANK", "SLURM_PROCID", "PMIX_RANK", "PMI_RANK"}) do
    local v = math.tointeger(tonumber(os.getenv(k) or ""))
    if v then return v end
  end
  return 0
end

-- Whether a file handle is a terminal that can redraw a line.
function zorch._is_terminal(f)
  if not (io and io.type and io.type(f) == "file") then return false end
  local term = os and os.getenv and os.getenv("TERM")
  return term ~= "dumb" and zorch.isatty(f)
end

local function fmt_time(s)
  if s ~= s or s == math.huge then return "?" end
  if s < 60 then return ("%.1fs"):format(s) end
  s = math.floor(s + 0.5)
  if s < 3600 then return ("%d:%02d"):format(s // 60, s % 60) end
  return ("%d:%02d:%02d"):format(s // 3600, s // 60 % 60, s % 60)
end

local function fmt_rate(r)
  if r >= 100 then return ("%.0f"):format(r) end
  if r >= 1 then return ("%.1f"):format(r) end
  return ("%.3f"):format(r)
end

local function number(v)
  if zorch.is_tensor(v) then return v:item() end
  return v
end

local Progress = {}
Progress.__index = Progress
Progress.__name = "zorch.progress"

function zorch.progress(total, opts)
  if total ~= nil and not (math.tointeger(total) and total >= 0) then
    error("progress: total must be an integer >= 0 or nil, got " .. tostring(total), 2)
  end
  total = total and math.tointeger(total)
  if opts ~= nil and type(opts) ~= "table" then error("progress: opts must be a table", 2) end
  opts = opts or {}
  local function bad(k, what) error(("progress: %s must be %s, got %s"):format(k, what, tostring(opts[k])), 4) end
  local function check(k, ok, what) if opts[k] ~= nil and not ok(opts[k]) then bad(k, what) end end
  check("every", function(v) return math.tointeger(v) and v >= 1 end, "an integer >= 1")
  check("interval", function(v) return type(v) == "number" and v >= 0 end, "a number >= 0")
  check("every_s", function(v) return type(v) == "number" and v > 0 end, "a number > 0")
  check("rank", function(v) return math.tointeger(v) ~= nil end, "an integer")
  check("tty", function(v) return type(v) == "boolean" end, "a boolean")
  check("label", function(v) return type(v) == "string" end, "a string")
  check("unit", function(v) return type(v) == "string" end, "a string")
  check("out", function(v)
    local ok, w = pcall(function() return v.write end)
    return ok and type(w) == "function"
  end, "a file or an object with a write method")
  local rank = opts.rank or zorch._env_rank()
  local out = opts.out or (io and io.stderr)
  local tty = opts.tty
  if tty == nil then tty = zorch._is_terminal(out) end
  local self = setmetatable({total = total, n = 0, out = out, tty = tty, t0 = zorch.clock(), last_draw = -math.huge,
                             every = math.tointeger(opts.every) or (total and math.max(1, total // 10)) or 100,
                             interval = opts.interval or 0.1, label = opts.label and (opts.label .. " ") or "",
                             unit = opts.unit or "it", silent = rank ~= 0 or not out, open = false, printed = 0,
                             closed = false, every_s = opts.every_s}, Progress)
  if self.every_s then self.last_draw = self.t0 end
  return self
end

-- {n, total, elapsed (s), rate (steps/s), eta (s, nil when the total is unknown)}
function Progress:stats()
  local elapsed = zorch.clock() - self.t0
  local rate = elapsed > 0 and self.n / elapsed or 0
  local eta
  if self.total then eta = rate > 0 and math.max(self.total - self.n, 0) / rate or 0 / 0 end
  return {n = self.n, total = self.total, elapsed = elapsed, rate = rate, eta = eta}
end

function Progress:line()
  local s = self:stats()
  local parts = {}
  if self.tty and self.total and self.total > 0 then
    local frac = math.min(self.n / self.total, 1)
    local w = math.floor(frac * 20 + 0.5)
    parts[#parts + 1] = ("%3d%% [%s%s]"):format(math.floor(frac * 100), ("#"):rep(w), ("-"):rep(20 - w))
  end
  parts[#parts + 1] = self.total and ("%d/%d"):format(self.n, self.total) or tostring(self.n)
  parts[#parts + 1] = ("%s %s/s"):format(fmt_rate(s.rate), self.unit)
  parts[#parts + 1] = "elapsed " .. fmt_time(s.elapsed)
  if s.eta then parts[#parts + 1] = "ETA " .. fmt_time(s.eta) end
  local info = self.info
  if info then
    if info.loss ~= nil then parts[#parts + 1] = ("loss %.6f"):format(number(info.loss)) end
    local keys = {}
    for k, v in pairs(info) do
      if k ~= "loss" and type(k) == "string" and (type(v) == "number" or zorch.is_tensor(v)) then keys[#keys + 1] = k end
    end
    table.sort(keys)
    for _, k in ipairs(keys) do parts[#parts + 1] = ("%s %.4g"):format(k, number(info[k])) end
  end
  return self.label .. table.concat(parts, "  ")
end

-- Writes the line: redrawn in place on a terminal (ending it when `final`).
function Progress:draw(final)
  if self.tty then
    self.out:write("\r" .. self:line() .. "\27[K" .. (final and "\n" or ""))
    self.open = not final
  else
    self.out:write(self:line() .. "\n")
    self.printed = self.n
  end
  if self.out.flush then self.out:flush() end
  self.last_draw = zorch.clock()
end

function Progress:update(k, info)
  if k ~= nil and not math.tointeger(k) then error("progress:update: k must be an integer, got " .. tostring(k), 2) end
  self.n = self.n + (k and math.tointeger(k) or 1)
  if info ~= nil then self.info = info end
  if self.silent or self.closed then return self end
  local done = self.total ~= nil and self.n >= self.total
  if self.tty then
    if done then
      if not self.finished then self:draw(true) end
      self.finished = true
    elseif zorch.clock() - self.last_draw >= self.interval then
      self:draw(false)
    end
  elseif self.every_s then
    if zorch.clock() - self.last_draw >= self.every_s then self:draw(false) end
  elseif self.n - self.printed >= self.every or (done and self.printed ~= self.n) then
    self:draw(false)
  end
  return self
end

-- A line of text (to stdout) above the bar, as print would write it.
function Progress:print(s)
  if self.silent then return end
  if self.open then
    self.out:write("\r\27[K")
    if self.out.flush then self.out:flush() end
  end
  io.stdout:write(tostring(s), "\n")
  io.stdout:flush()
  if self.open then self:draw(false) end
end

-- Ends the display: a terminal gets the final state and a newline, a plain
-- stream a last line unless the last step was printed. Returns stats().
function Progress:close()
  if not self.closed then
    self.closed = true
    if not self.silent then
      if self.tty then
        if not self.finished and self.n > 0 then self:draw(true) end
      elseif self.n > 0 and self.printed ~= self.n and not (self.every_s and self.printed == 0) then
        self:draw(false)
      end
    end
  end
  return self:stats()
end
Progress.__close = Progress.close

return nil
