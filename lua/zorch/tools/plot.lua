-- zorch.plot(path, opts): draws columns of a metrics file (JSON lines or CSV, as
-- zorch.Logger writes them) with gnuplot, one panel per column:
--   opts.y       column names (a list or "loss,lr"; default loss, else every
--                numeric column but the x column and time)
--   opts.x       the x column (default "step")
--   opts.output  a .png, .svg or .pdf file; none: drawn as text on stdout
--   opts.smooth  a weight in [0, 1): adds TensorBoard's smoothed curve
--   opts.logy    a log scale on y;  opts.title  a title above the panels
-- Rows without a number in a column are skipped for that column, so per-step
-- and per-epoch rows can share a file. Returns the columns drawn and the x
-- column. `zorch plot` is its command line.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local USAGE = "usage: zorch plot FILE.jsonl|FILE.csv [-o out.png|out.svg|out.pdf] [--y loss,lr] [--x step] " ..
              "[--smooth 0.9] [--logy] [--title TEXT]"

local function fail(msg) error(msg, 0) end

local function read_all(path)
  local f, err = io.open(path, "r")
  if not f then fail("plot: cannot open " .. tostring(err)) end
  local text = f:read("a")
  f:close()
  return text
end

-- Rows (tables of name -> value) and the column names in order of appearance.
local function read_jsonl(path)
  local rows, columns, seen = {}, {}, {}
  for line in read_all(path):gmatch("[^\n]+") do
    -- a line being written while training runs may be cut short: skip it
    local ok, row = pcall(zorch.json.decode, line)
    if ok and type(row) == "table" then
      rows[#rows + 1] = row
      local names = {}
      for k in pairs(row) do if not seen[k] then names[#names + 1] = k end end
      table.sort(names, function(a, b) -- step and time first, as the logger writes them
        local ra, rb = a == "step" and 0 or a == "time" and 1 or 2, b == "step" and 0 or b == "time" and 1 or 2
        if ra ~= rb then return ra < rb end
        return a < b
      end)
      for _, k in ipairs(names) do seen[k] = true; columns[#columns + 1] = k end
    end
  end
  return rows, columns
end

local function split_csv(line)
  local cells, i, n = {}, 1, #line
  while i <= n + 1 do
    if line:sub(i, i) == '"' then
      local buf, j = {}, i + 1
      while j <= n do
        local c = line:sub(j, j)
        if c == '"' and line:sub(j + 1, j + 1) == '"' then buf[#buf + 1] = '"'; j = j + 2
        elseif c == '"' then j = j + 1; break
        else buf[#buf + 1] = c; j = j + 1 end
      end
      cells[#cells + 1] = table.concat(buf)
      i = (line:find(",", j, true) or n + 1) + 1
    else
      local j = line:find(",", i, true) or n + 1
      cells[#cells + 1] = line:sub(i, j - 1)
      i = j + 1
    end
  end
  return cells
end

local function read_csv(path)
  local rows, columns = {}, nil
  for line in read_all(path):gmatch("[^\r\n]+") do
    local cells = split_csv(line)
    if not columns then columns = cells
    else
      local row = {}
      for i, name in ipairs(columns) do
        local v = cells[i]
        if v and v ~= "" then row[name] = tonumber(v) or v end
      end
      rows[#rows + 1] = row
    end
  end
  return rows, columns or {}
end

local function quote(s) return "'" .. tostring(s):gsub("'", "''") .. "'" end -- a gnuplot string
local function shell_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

local function finite(v) return type(v) == "number" and v == v and v ~= math.huge and v ~= -math.huge end

local function list(v)
  if type(v) == "table" then return v end
  local out = {}
  for name in tostring(v):gmatch("[^,%s]+") do out[#out + 1] = name end
  return out
end

function zorch.plot(path, opts)
  if type(path) ~= "string" then fail("plot: expected a metrics file (.jsonl or .csv)") end
  opts = opts or {}
  local rows, columns
  if path:match("%.csv$") then rows, columns = read_csv(path) else rows, columns = read_jsonl(path) end
  if #rows == 0 then fail(("plot: %s: no rows to plot"):format(path)) end
  local has = {}
  for _, c in ipairs(columns) do has[c] = true end
  local xname = opts.x or "step"
  local function unknown(name)
    return ("plot: %s: no column '%s' (columns: %s)"):format(path, name, table.concat(columns, ", "))
  end
  if not has[xname] then fail(unknown(xname)) end
  local ys = opts.y and list(opts.y) or nil
  if not ys or #ys == 0 then
    ys = {}
    if has.loss then ys = {"loss"}
    else
      for _, c in ipairs(columns) do
        if c ~= xname and c ~= "time" and c ~= "step" then
          for _, r in ipairs(rows) do if type(r[c]) == "number" then ys[#ys + 1] = c; break end end
        end
      end
    end
    if #ys == 0 then fail(("plot: %s: no numeric column to plot"):format(path)) end
  end
  for _, y in ipairs(ys) do if not has[y] then fail(unknown(y)) end end
  local smooth = opts.smooth or 0
  if type(smooth) ~= "number" or smooth < 0 or smooth >= 1 then fail("plot: smooth must be a number in [0, 1)") end

  local out = opts.output
  local lines = {}
  local function add(s) lines[#lines + 1] = s end
  local panels = #ys
  if out then
    local ext = out:match("%.(%w+)$")
    ext = ext and ext:lower()
    local size = ("size 900,%d"):format(math.max(300, 280 * panels))
    if ext == "png" then
      add(('if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) { set terminal pngcairo %s } ' ..
           'else { set terminal png %s }'):format(size, size))
    elseif ext == "svg" then add("set terminal svg " .. size)
    elseif ext == "pdf" then add("set terminal pdfcairo size 7in," .. math.max(3, 3 * panels) .. "in")
    else fail(("plot: cannot tell the image format of '%s' (use .png, .svg or .pdf)"):format(out)) end
    add("set output " .. quote(out))
  else
    local cols = math.tointeger(tonumber(os.getenv("COLUMNS") or "")) or 100
    add(("set terminal dumb size %d,%d"):format(cols, math.max(20, 18 * panels)))
  end
  add("set termoption noenhanced")
  if panels > 1 or opts.title then
    add(("set multiplot layout %d,1%s"):format(panels, opts.title and (" title " .. quote(opts.title)) or ""))
  end
  add("set grid")
  add("set key top right")
  add("set xlabel " .. quote(xname))
  if opts.logy then add("set logscale y") end
  for i, y in ipairs(ys) do
    local n, last, weight = 0, 0, smooth
    add(("$data%d << EOD"):format(i))
    for _, r in ipairs(rows) do
      local xv, yv = r[xname], r[y]
      if finite(xv) and finite(yv) and (not opts.logy or yv > 0) then
        n = n + 1
        last = last * weight + (1 - weight) * yv -- TensorBoard's debiased moving average
        add(("%.10g %.10g %.10g"):format(xv, yv, last / (1 - weight ^ n)))
      end
    end
    add("EOD")
    if n == 0 then fail(("plot: %s: column '%s' has no numbers to plot against '%s'"):format(path, y, xname)) end
    add("set title " .. quote(y))
    local cmd = ("plot $data%d using 1:2 with lines lw %s title %s"):format(i, smooth > 0 and "1 lc rgb '#a0c4e8'" or "1.5",
                                                                        quote(y))
    if smooth > 0 then cmd = cmd .. (", $data%d using 1:3 with lines lw 2 lc rgb '#1f5fa8' title %s"):format(
        i, quote(("%s (smoothed %g)"):format(y, smooth))) end
    add(cmd)
  end
  if panels > 1 or opts.title then add("unset multiplot") end

  local gnuplot = os.getenv("ZORCH_GNUPLOT") or "gnuplot"
  if not os.execute(("command -v %s > /dev/null 2>&1"):format(shell_quote(gnuplot))) then
    fail(("plot: gnuplot not found (%s): install it, e.g. apt-get install gnuplot-nox (Debian/Ubuntu) " ..
          "or dnf install gnuplot; ZORCH_GNUPLOT names another binary"):format(gnuplot))
  end
  local script = os.tmpname()
  local f = io.open(script, "w")
  if not f then fail("plot: cannot write a temporary file") end
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
  local errors = os.tmpname()
  local p = io.popen(("%s %s 2> %s"):format(shell_quote(gnuplot), shell_quote(script), shell_quote(errors)))
  local text = p:read("a")
  local ok = p:close()
  local ef = io.open(errors, "r")
  local warnings = ef and ef:read("a") or ""
  if ef then ef:close() end
  os.remove(script)
  os.remove(errors)
  if not ok then fail("plot: gnuplot failed: " .. warnings) end
  if out then
    local img = io.open(out, "rb")
    if not img then fail(("plot: gnuplot wrote no %s: %s"):format(out, warnings)) end
    img:close()
  else
    io.stdout:write(text)
  end
  return ys, xname
end

-- `zorch plot ...`: true, or false and a message (usage errors start with the usage line).
function zorch._plot_cli(...)
  local args = {...}
  local opts, file = {}, nil
  local i = 1
  local function value(flag)
    i = i + 1
    if args[i] == nil then error(USAGE .. "\n" .. flag .. " needs a value", 0) end
    return args[i]
  end
  local ok, err = pcall(function()
    while args[i] do
      local a = args[i]
      if a == "-h" or a == "--help" then
        print(USAGE)
        file = false
        return
      elseif a == "-o" or a == "--output" then opts.output = value(a)
      elseif a == "--y" then opts.y = value(a)
      elseif a == "--x" then opts.x = value(a)
      elseif a == "--title" then opts.title = value(a)
      elseif a == "--logy" then opts.logy = true
      elseif a == "--smooth" then
        local v = value(a)
        opts.smooth = tonumber(v)
        if not opts.smooth then error(("%s\n--smooth expects a number, got '%s'"):format(USAGE, v), 0) end
      elseif a:sub(1, 1) == "-" and a ~= "-" then error(("%s\nunknown option '%s'"):format(USAGE, a), 0)
      elseif file then error(("%s\none metrics file only (got '%s' and '%s')"):format(USAGE, file, a), 0)
      else file = a end
      i = i + 1
    end
    if file == nil then error(USAGE, 0) end
  end)
  if not ok then return false, err end
  if file == false then return true end
  local ys, x
  ok, ys, x = pcall(zorch.plot, file, opts)
  if not ok then return false, "zorch " .. tostring(ys) end
  if opts.output then print(("plotted %s against %s to %s"):format(table.concat(ys, ", "), x, opts.output)) end
  return true
end

return nil
