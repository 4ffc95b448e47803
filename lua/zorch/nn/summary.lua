-- zorch.nn.summary: parameter counts and nn.summary, the table of a model's
-- modules, output shapes and parameters.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, each_param, is_module, shape_str = M.Module, M.each_param, M.is_module, M.shape_str

local dtype_bytes = {float32 = 4, float64 = 8, bfloat16 = 2, float16 = 2, int32 = 4, int64 = 8, uint8 = 1, int8 = 1,
                     bool = 1}

-- Counts of the distinct parameters of m (a parameter shared by two modules
-- counts once): total, trainable (requires grad) and bytes.
local function count_params(m)
  local seen, total, trainable, bytes = {}, 0, 0, 0
  for _, p in ipairs(each_param(m, "", {})) do
    local t = p[2]
    if not seen[t] then
      seen[t] = true
      local n = t:numel()
      total = total + n
      if t.requires_grad then trainable = trainable + n end
      bytes = bytes + n * (dtype_bytes[t:dtype()] or 0)
    end
  end
  return total, trainable, bytes
end

-- Number of parameter elements; trainable_only counts those that require grad.
function Module:num_parameters(trainable_only)
  local total, trainable = count_params(self)
  return trainable_only and trainable or total
end

local function thousands(n)
  local s = tostring(math.tointeger(n) or n)
  local out = s:reverse():gsub("(%d%d%d)", "%1,"):reverse()
  return (out:gsub("^,", ""))
end

local function human_bytes(b)
  local units, i = {"B", "KiB", "MiB", "GiB", "TiB"}, 1
  while b >= 1024 and i < #units do b, i = b / 1024, i + 1 end
  return i == 1 and ("%d B"):format(b) or ("%.1f %s"):format(b, units[i])
end

local function out_shape(v)
  if zorch.is_tensor(v) then return shape_str(v) end
  if type(v) == "table" and not is_module(v) then
    local parts = {}
    for _, x in ipairs(v) do parts[#parts + 1] = zorch.is_tensor(x) and shape_str(x) or type(x) end
    return "{" .. table.concat(parts, ", ") .. "}"
  end
  return type(v)
end

-- Runs model(input) once in eval mode without grad, noting each module's output
-- shape; the modules' training flags are restored after it.
local function record_shapes(model, rows, input)
  local shapes, saved = {}, {}
  for i, r in ipairs(rows) do
    local m = r.module
    saved[i] = {training = rawget(m, "training"), forward = rawget(m, "forward")}
    local fwd = m.forward
    rawset(m, "forward", function(self, ...)
      local res = table.pack(fwd(self, ...))
      shapes[m] = out_shape(res[1])
      return table.unpack(res, 1, res.n)
    end)
  end
  model:eval()
  local args = (type(input) == "table" and not zorch.is_tensor(input)) and input or {input}
  local ok, err = pcall(zorch.no_grad, function() return model(table.unpack(args)) end)
  for i = #rows, 1, -1 do -- backwards: a module listed twice was wrapped twice
    rawset(rows[i].module, "forward", saved[i].forward)
    rawset(rows[i].module, "training", saved[i].training)
  end
  if not ok then
    error(("nn.summary: the forward pass on the example input failed: %s"):format(
      tostring(err):gsub("^[^:]*:%d+: ", "")), 3)
  end
  return shapes
end

-- A table of the modules (name, type, output shape for an example input, the
-- parameter count of the module and its children) and the totals. Prints it
-- unless opts.print is false; returns the text and {total, trainable, bytes}.
-- `input` is a tensor or a list of the forward's arguments.
function nn.summary(model, input, opts)
  if not is_module(model) then error(("nn.summary: expected a module, got %s"):format(type(model)), 2) end
  if opts ~= nil and type(opts) ~= "table" then error("nn.summary: options must be a table", 2) end
  local rows = {}
  local path = {}
  local function walk(m, name, depth)
    local total = count_params(m)
    rows[#rows + 1] = {module = m, name = name, depth = depth, type = getmetatable(m).__name, params = total}
    path[m] = true
    for _, k in ipairs(m._order) do
      local c = rawget(m, k)
      if m._children[k] and c ~= nil and not path[c] then walk(c, name == "" and k or (name .. "." .. k), depth + 1) end
    end
    path[m] = nil
  end
  walk(model, "", 0)
  local shapes = input ~= nil and record_shapes(model, rows, input) or nil
  local header = {"Module", "Type"}
  if shapes then header[#header + 1] = "Output shape" end
  header[#header + 1] = "Params"
  local cells = {}
  for _, r in ipairs(rows) do
    local name = r.depth == 0 and "(model)" or (("  "):rep(r.depth - 1) .. r.name:match("[^.]+$"))
    local row = {name, r.type}
    if shapes then row[#row + 1] = shapes[r.module] or "-" end
    row[#row + 1] = thousands(r.params)
    cells[#cells + 1] = row
  end
  local widths = {}
  for i, h in ipairs(header) do widths[i] = #h end
  for _, row in ipairs(cells) do
    for i, c in ipairs(row) do widths[i] = math.max(widths[i], #c) end
  end
  local function line(row)
    local parts = {}
    for i, c in ipairs(row) do
      parts[i] = i == #row and (" "):rep(widths[i] - #c) .. c or c .. (" "):rep(widths[i] - #c)
    end
    return table.concat(parts, "  ")
  end
  local rule = ("-"):rep(#line(header))
  local total, trainable, bytes = count_params(model)
  local out = {line(header), rule}
  for _, row in ipairs(cells) do out[#out + 1] = line(row) end
  out[#out + 1] = rule
  out[#out + 1] = "Total params: " .. thousands(total)
  out[#out + 1] = "Trainable params: " .. thousands(trainable)
  out[#out + 1] = "Non-trainable params: " .. thousands(total - trainable)
  out[#out + 1] = ("Parameter size: %s (%s bytes)"):format(human_bytes(bytes), thousands(bytes))
  local text = table.concat(out, "\n")
  if not (opts and opts.print == false) then print(text) end
  return text, {total = total, trainable = trainable, bytes = bytes}
end

function Module:summary(input, opts) return nn.summary(self, input, opts) end
