-- zorch.flags(arg, spec, usage): command-line flags for scripts, one helper for
-- all of them. spec maps a flag name to {default, help}; the default's type is
-- the flag's type (a boolean flag takes no value). `--name value`,
-- `--name=value` and `--help` are understood; an unknown flag or a bad value is
-- an error that lists the flags.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local function help_text(spec, usage)
  local names = {}
  for k in pairs(spec) do names[#names + 1] = k end
  table.sort(names)
  local lines = {usage or "flags:"}
  for _, k in ipairs(names) do
    local d = spec[k][1]
    local shown = type(d) == "boolean" and "" or (" (default " .. tostring(d) .. ")")
    lines[#lines + 1] = ("  --%-16s %s%s"):format(k, spec[k][2] or "", shown)
  end
  return table.concat(lines, "\n")
end

return function(args, spec, usage)
  local out = {}
  for k, v in pairs(spec) do out[k] = v[1] end
  local i = 1
  args = args or {}
  while args[i] do
    local a = args[i]
    local name, value = a:match("^%-%-([%w%-_]+)=(.*)$")
    if not name then name = a:match("^%-%-([%w%-_]+)$") end
    if name == "help" then
      print(help_text(spec, usage))
      os.exit(0)
    end
    if not name or not spec[name] then
      error(("unknown argument '%s'\n%s"):format(a, help_text(spec, usage)), 0)
    end
    local d = spec[name][1]
    if type(d) == "boolean" then
      out[name] = true
    else
      if value == nil then
        i = i + 1
        value = args[i]
        if value == nil then error(("--%s needs a value"):format(name), 0) end
      end
      if type(d) == "number" then
        local n = math.tointeger(value) or tonumber(value)
        if n == nil then error(("--%s expects a number, got '%s'"):format(name, value), 0) end
        out[name] = n
      else
        out[name] = value
      end
    end
    i = i + 1
  end
  return out
end
