-- The golden-case reader shared by the tests whose values a PyTorch script
-- writes as text (tests/lua/fixed_cases.py holds the generators' side):
--   local G = require("golden")("lua/nn/norm.txt")
-- Lines: `case out values...`, `case gN values...` (the gradient of input N of
-- sum(out * c), c = 1 + 0.1 i), `case step ...`, `case lrs ...`, and
-- `sd_NAME key shape...` (state-dict names, kept in file order).
local tap = require "tap"

local SPECIAL = {nan = 0 / 0, inf = math.huge, ["-inf"] = -math.huge}

local function read(path)
  local want, sd_order = {}, {}
  for line in io.lines(path) do
    local name, key, rest = line:match("^(%S+) (%S+) ?(.*)$")
    local v = {}
    for x in rest:gmatch("%S+") do v[#v + 1] = tonumber(x) or SPECIAL[x] end
    want[name] = want[name] or {}
    if name:match("^sd_") then sd_order[name] = sd_order[name] or {}; table.insert(sd_order[name], key) end
    want[name][name:match("^sd_") and key or tonumber(key) or key] = v
  end
  return want, sd_order
end

-- fixed(shape, k): sin(0.37 k i + k) over the flattened index i, float64 (as the generator)
local function fixed(shape, k)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return (zorch.arange(n, {dtype = "float64"}) * (0.37 * k) + k):sin():reshape(shape)
end
local function leaf(t) return t:detach():clone():requires_grad_(true) end
local function flat(t)
  local out = {}
  local function walk(v) if type(v) == "table" then for _, x in ipairs(v) do walk(x) end else out[#out + 1] = v end end
  walk(zorch.is_tensor(t) and t:totable() or t)
  return out
end
-- worst relative error of got (a tensor or list) against the golden list; NaN
-- in both counts as equal; skip: indices (1-based) not compared
local function worst(got, exp, skip)
  local g, w = flat(got), 0
  if #g ~= #exp then return math.huge end
  for i = 1, #g do
    if not (skip and skip[i]) then
      local a, b = g[i], exp[i]
      local e = (a ~= a and b ~= b) and 0 or math.abs(a - b) / math.max(math.abs(b), 1e-6)
      if e ~= e then e = math.huge end
      w = math.max(w, e)
    end
  end
  return w
end

return function(path)
  local want, sd_order = read(path)
  -- Checks fn(inputs...) and the gradients of sum(out * c) against the golden case.
  local function check(name, fn, inputs, tol, skip)
    tol = tol or 1e-10
    local exp = want[name]
    if not exp then return tap.ok(false, name .. ": golden case missing") end
    local out = fn(table.unpack(inputs))
    local e = worst(out, exp.out)
    local n = out:numel()
    local c = (zorch.arange(n, {dtype = "float64"}) * 0.1 + 1):reshape(out.shape)
    for _, t in ipairs(inputs) do if zorch.is_tensor(t) then t.grad = nil end end
    ;(out * c):sum():backward()
    local ge = 0
    for i, t in ipairs(inputs) do
      local g = exp["g" .. i]
      if g then
        if t.grad == nil then ge = math.huge else ge = math.max(ge, worst(t.grad, g, skip and skip[i])) end
      end
    end
    tap.ok(e <= tol and ge <= tol, ("%s: PyTorch's values (worst %.2g) and gradients (worst %.2g)"):format(name, e, ge))
  end
  return {want = want, sd_order = sd_order, fixed = fixed, leaf = leaf, flat = flat, worst = worst, check = check}
end
