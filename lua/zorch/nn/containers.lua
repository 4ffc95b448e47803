-- zorch.nn.containers: Sequential, ModuleList, ModuleDict and ParameterList.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, is_module = M.Module, M.is_module

-- Children are named "0", "1", ... as in PyTorch, so state dicts match; errors
-- and the printout count modules from 1, as Lua does.
nn.Sequential = Module:extend "nn.Sequential"
function nn.Sequential:init(...)
  self.n = 0
  for i, m in ipairs({...}) do self:add(m) end
end
-- seq[i] (1-based, negative from the end) and #seq, as for nn.ModuleList
nn.Sequential.__index = function(self, k)
  if math.type(k) == "integer" then
    local n = rawget(self, "n") or 0
    if k < 0 then k = n + 1 + k end
    if k < 1 or k > n then return nil end
    return rawget(self, tostring(k - 1))
  end
  return nn.Sequential[k]
end
nn.Sequential.__len = function(self) return rawget(self, "n") or 0 end
function nn.Sequential:add(m)
  if type(m) ~= "table" or not rawget(m, "_order") then
    error(("nn.Sequential: module %d is not a module"):format(self.n + 1), 2)
  end
  self[tostring(self.n)] = m
  rawset(self, "n", self.n + 1)
  return self
end
nn.Sequential.__tostring = function(self)
  if self.n == 0 then return "nn.Sequential()" end
  local lines = {"nn.Sequential("}
  for i = 1, self.n do
    lines[i + 1] = ("  (%d): %s"):format(i, (tostring(rawget(self, tostring(i - 1))):gsub("\n", "\n  ")))
  end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end
-- (an error names the module as seq[i] does: "in module [3] (nn.Linear) of
-- nn.Sequential", written by Module.__call)
function nn.Sequential:forward(x)
  for i = 1, self.n do x = rawget(self, tostring(i - 1))(x) end
  return x
end

-- A list of modules, registered as children "0", "1", ... (PyTorch's names, so
-- state dicts match); indexed from 1 in Lua: list[1] is child "0". It has no
-- forward: iterate over it (ipairs, #list) in the owner's forward.
nn.ModuleList = Module:extend "nn.ModuleList"
local ModuleList = nn.ModuleList

function ModuleList:init(modules)
  rawset(self, "n", 0)
  if modules == nil then return end
  if type(modules) ~= "table" or is_module(modules) then
    error("nn.ModuleList: expected a list of modules ({m1, m2, ...}) or nothing", 3)
  end
  for i, m in ipairs(modules) do
    if not is_module(m) then error(("nn.ModuleList: item %d is a %s, not a module"):format(i, type(m)), 3) end
    self:append(m)
  end
end
function ModuleList:append(m)
  if not is_module(m) then
    error(("nn.ModuleList:append: expected a module, got %s"):format(type(m)), 2)
  end
  self[tostring(self.n)] = m
  rawset(self, "n", self.n + 1)
  return self
end
function ModuleList:forward()
  error("nn.ModuleList: a module list has no forward; iterate over it (ipairs) in the owner's forward", 2)
end
-- The __index of a list kept under the keys "0", "1", ... with its length in
-- field n (ModuleList, ParameterList): list[i] (1-based, negative from the
-- end); methods and fields of cls otherwise.
local function list_index(cls)
  return function(self, k)
    if math.type(k) == "integer" then
      local n = rawget(self, "n")
      if k < 0 then k = n + 1 + k end
      if k < 1 or k > n then return nil end
      return rawget(self, tostring(k - 1))
    end
    return cls[k]
  end
end
ModuleList.__index = list_index(ModuleList)
-- list[i] = m replaces module i; list[#list + 1] = m appends
ModuleList.__newindex = function(self, k, v)
  if math.type(k) == "integer" then
    local n = rawget(self, "n")
    if not is_module(v) then error(("nn.ModuleList: item %d must be a module, got %s"):format(k, type(v)), 2) end
    if k == n + 1 then return self:append(v) end
    if k < 1 or k > n then
      error(("nn.ModuleList: index %d out of range for a list of %d modules (1-based)"):format(k, n), 2)
    end
    rawset(self, tostring(k - 1), v)
    return
  end
  Module.__newindex(self, k, v)
end
ModuleList.__len = function(self) return rawget(self, "n") end

-- nn.ModuleDict{name = module, ...}: children named by their keys (in sorted
-- order: a Lua table has none of its own), so state-dict names are
-- "name.weight" as PyTorch's; dict.name or dict["name"] reads one,
-- dict:set(name, m) adds or replaces one, dict:keys() lists them, and
-- dict:items() walks (name, module) pairs in order.
nn.ModuleDict = Module:extend "nn.ModuleDict"
local ModuleDict = nn.ModuleDict
local RESERVED = {training = true, n = true}
function ModuleDict:init(modules)
  if modules == nil then return end
  if type(modules) ~= "table" or is_module(modules) then
    error("nn.ModuleDict: expected a table of modules ({name = m, ...}) or nothing", 3)
  end
  local keys = {}
  for k in pairs(modules) do keys[#keys + 1] = k end
  for _, k in ipairs(keys) do
    if type(k) ~= "string" then error(("nn.ModuleDict: keys must be strings, got %s"):format(type(k)), 3) end
  end
  table.sort(keys)
  for _, k in ipairs(keys) do
    local ok, err = pcall(self.set, self, k, modules[k])
    if not ok then error(err, 3) end
  end
end
function ModuleDict:set(k, m)
  if type(k) ~= "string" or k == "" or k:find("%.") or k:sub(1, 1) == "_" or RESERVED[k] or ModuleDict[k] ~= nil then
    error(("nn.ModuleDict: '%s' cannot name a module (a string without dots, not a method or field name)"):format(
      tostring(k)), 2)
  end
  if not is_module(m) then error(("nn.ModuleDict: '%s' must be a module, got %s"):format(k, type(m)), 2) end
  if rawget(self, k) ~= nil then rawset(self, k, m) else self[k] = m end
  return self
end
function ModuleDict:keys()
  local ks = {}
  for _, k in ipairs(self._order) do if self._children[k] then ks[#ks + 1] = k end end
  return ks
end
function ModuleDict:items()
  local ks, i = self:keys(), 0
  return function()
    i = i + 1
    if ks[i] then return ks[i], rawget(self, ks[i]) end
  end
end
ModuleDict.__len = function(self) return #self:keys() end
function ModuleDict:forward()
  error("nn.ModuleDict: a module dict has no forward; call its modules in the owner's forward", 2)
end

-- ParameterList{t1, t2, ...}: parameters named "0", "1", ... (PyTorch's names),
-- read from 1 (list[1] is "0", list[-1] the last) with #list, ipairs and
-- list:append(t); each tensor becomes a parameter. It has no forward.
nn.ParameterList = Module:extend "nn.ParameterList"
local ParameterList = nn.ParameterList
function ParameterList:init(ts)
  rawset(self, "n", 0)
  if ts == nil then return end
  if type(ts) ~= "table" or zorch.is_tensor(ts) or is_module(ts) then
    error("nn.ParameterList: expected a list of tensors ({t1, t2, ...}) or nothing", 3)
  end
  for i, t in ipairs(ts) do
    if not zorch.is_tensor(t) then error(("nn.ParameterList: item %d is a %s, not a tensor"):format(i, type(t)), 3) end
    self:append(t)
  end
end
function ParameterList:append(t)
  if not zorch.is_tensor(t) then error(("nn.ParameterList:append: expected a tensor, got %s"):format(type(t)), 2) end
  if not t.is_leaf then t = t:detach() end
  self[tostring(self.n)] = nn.Parameter(t)
  rawset(self, "n", self.n + 1)
  return self
end
ParameterList.__index = list_index(ParameterList)
ParameterList.__len = function(self) return rawget(self, "n") end
function ParameterList:forward()
  error("nn.ParameterList: a parameter list has no forward; use its tensors in the owner's forward", 2)
end
ParameterList.__tostring = function(s) return ("nn.ParameterList(%d parameters)"):format(s.n) end
