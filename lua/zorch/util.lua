-- zorch.util: the helpers every layer shares (nn, optim, engine, ...): the
-- checker of options tables, the way a message shows a value and reading a
-- whole file. Also
-- zorch._check_options and zorch._readable, for the modules and scripts
-- that use them there.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local util = {}

-- Checks an options table for `fn`: nil gives {}; a key not in `allowed` (a
-- list of names, or a set) is an error naming fn and the allowed names,
-- raised at `level` as error() counts it from here.
-- util.closest(name, names): the name of `names` (a list) nearest to `name`
-- by edit distance (a swap of two letters one edit), when it is within a third of its length (a typo), else nil.
function util.closest(name, names)
  name = tostring(name)
  local best, best_d
  for _, n in ipairs(names) do
    local prev, before = {}, nil -- rows i-1 and i-2 (a swap of two letters counts as one edit)
    for j = 0, #n do prev[j] = j end
    for i = 1, #name do
      local cur = {[0] = i}
      for j = 1, #n do
        local cost = name:sub(i, i) == n:sub(j, j) and 0 or 1
        cur[j] = math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + cost)
        if before and j > 1 and name:sub(i, i) == n:sub(j - 1, j - 1) and name:sub(i - 1, i - 1) == n:sub(j, j) then
          cur[j] = math.min(cur[j], before[j - 2] + 1)
        end
      end
      prev, before = cur, prev
    end
    if not best_d or prev[#n] < best_d then best, best_d = n, prev[#n] end
  end
  if best and best_d <= math.max(1, #name // 3) then return best end
end

function util.check_options(fn, opts, allowed, level)
  if opts == nil then return {} end
  if type(opts) ~= "table" then error(("%s: options must be a table, got %s"):format(fn, type(opts)), level) end
  local set = {}
  for k, v in pairs(allowed) do if math.type(k) == "integer" then set[v] = true else set[k] = true end end
  for k in pairs(opts) do
    if not set[k] then
      local names = {}
      for n in pairs(set) do names[#names + 1] = n end
      table.sort(names)
      local near = util.closest(k, names)
      error(("%s: unknown option '%s'%s (allowed: %s)"):format(fn, tostring(k),
        near and ("; did you mean '" .. near .. "'?") or "", table.concat(names, ", ")), level)
    end
  end
  return opts
end
zorch._check_options = util.check_options

-- util.readable(v): a value as a message shows it: strings quoted, numbers as
-- written, tables as JSON-like text (keys sorted, cut short), never "table: 0x...".
function util.readable(v, depth)
  depth = depth or 0
  local t = type(v)
  if t == "string" then
    local q = ("%q"):format(#v > 60 and (v:sub(1, 60) .. "...") or v)
    return (q:gsub("\\\n", "\\n"))
  elseif math.type(v) == "integer" then return tostring(v)
  elseif t == "number" then
    for digits = 15, 17 do
      local text = ("%." .. digits .. "g"):format(v)
      if tonumber(text) == v or digits == 17 then return text end
    end
  elseif t == "nil" then return "nothing"
  elseif t ~= "table" then return tostring(v)
  end
  if zorch.is_tensor and zorch.is_tensor(v) then return "a tensor" end
  if depth > 2 then return "{...}" end
  local keys, n = {}, #v
  for k in pairs(v) do keys[#keys + 1] = k end
  local parts = {}
  if #keys == n and n > 0 then
    for i = 1, math.min(n, 8) do parts[i] = util.readable(v[i], depth + 1) end
    if n > 8 then parts[#parts + 1] = "..." end
    return "[" .. table.concat(parts, ", ") .. "]"
  end
  table.sort(keys, function(x, y) return tostring(x) < tostring(y) end)
  for i = 1, math.min(#keys, 8) do
    parts[i] = util.readable(tostring(keys[i]), depth + 1) .. ": " .. util.readable(v[keys[i]], depth + 1)
  end
  if #keys > 8 then parts[#parts + 1] = "..." end
  return "{" .. table.concat(parts, ", ") .. "}"
end
zorch._readable = util.readable

-- The dtype and device a random fill of x draws in (float64 stays float64, the
-- other float dtypes draw in float32); x must be a float tensor. Errors name
-- `name` and point at the caller of the function that calls this one.
function util.float_opts(name, x)
  if not zorch.is_tensor(x) then error(("%s: argument 1 must be a tensor, got %s"):format(name, type(x)), 3) end
  local dt = x:dtype()
  if dt ~= "float32" and dt ~= "float64" and dt ~= "bfloat16" and dt ~= "float16" then
    error(("%s: needs a floating point tensor, got %s"):format(name, dt), 3)
  end
  return {dtype = dt == "float64" and "float64" or "float32", device = x:device()}
end

-- The whole of the file at path as a string; nil and the message when it
-- cannot be opened.
function util.read_file(path)
  local f, err = io.open(path, "rb")
  if not f then return nil, err end
  local s = f:read("a")
  f:close()
  return s
end

return util
