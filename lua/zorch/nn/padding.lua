-- zorch.nn.padding: the padding modules over zorch.pad (constant, zero,
-- reflection, replication, circular; 1 to 3 dims).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local M = zorch._require "zorch.nn.module"
local Module, as_fn, need_number, need_tensor = M.Module, M.as_fn, M.need_number, M.need_tensor
local py_num, shape_str, tuple_str = M.py_num, M.shape_str, M.tuple_str

-- The padding modules over zorch.pad: padding is one integer for every side
-- or 2 k of them (left, right, top, bottom, front, back), PyTorch's order.
local function pad_class(name, mode, k, with_value)
  local cls = Module:extend(name)
  function cls:init(padding, value)
    local p = padding
    if math.type(p) == "integer" then
      p = {}
      for i = 1, 2 * k do p[i] = padding end
    end
    local good = type(p) == "table" and #p == 2 * k
    for i = 1, good and #p or 0 do good = good and math.type(p[i]) == "integer" end
    if not good then
      error(("%s: padding must be an integer or a list of %d integers, got %s"):format(name, 2 * k,
        type(padding) == "table" and tuple_str(padding) or tostring(padding)), 3)
    end
    self.padding = p
    if with_value then
      need_number(name, "value", value, 3)
      self.value = value
    end
  end
  function cls:forward(x)
    need_tensor(name, "input", x)
    if x:dim() ~= k + 1 and x:dim() ~= k + 2 then
      error(("%s: expected a %dD or %dD input, got %s"):format(name, k + 1, k + 2, shape_str(x)), 2)
    end
    return as_fn(name, 2, zorch.pad, x, self.padding, mode, self.value or 0)
  end
  cls.__tostring = function(s)
    if with_value then return ("%s(padding=%s, value=%s)"):format(name, tuple_str(s.padding), py_num(s.value)) end
    return ("%s(%s)"):format(name, tuple_str(s.padding))
  end
  return cls
end
for k = 1, 3 do
  nn["ZeroPad" .. k .. "d"] = pad_class("nn.ZeroPad" .. k .. "d", "constant", k)
  nn["ConstantPad" .. k .. "d"] = pad_class("nn.ConstantPad" .. k .. "d", "constant", k, true)
  nn["ReflectionPad" .. k .. "d"] = pad_class("nn.ReflectionPad" .. k .. "d", "reflect", k)
  nn["ReplicationPad" .. k .. "d"] = pad_class("nn.ReplicationPad" .. k .. "d", "replicate", k)
  nn["CircularPad" .. k .. "d"] = pad_class("nn.CircularPad" .. k .. "d", "circular", k)
end
