-- In-place arithmetic (x:add_(y, alpha), mul_, clamp_, exp_, lerp_, ...) with
-- autograd against PyTorch (golden/inplace_ops.txt), PyTorch's casting and
-- shape rules for in-place results, random fills and nn.init, x.T / x.mT,
-- dtype shorthands, split/chunk as methods, zorch.deepcopy and
-- nn.Parameter(t, false).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn
local ok, raises, close = tap.ok, tap.raises, tap.close

local want = {}
for line in io.lines("golden/inplace_ops.txt") do
  local name, rest = line:match("^(%S+) (.*)$")
  local v = {}
  for x in rest:gmatch("%S+") do v[#v + 1] = tonumber(x) end
  want[name] = zorch.tensor(v, {dtype = "float64"})
end
local function rg(v) return zorch.tensor(v, {dtype = "float64", requires_grad = true}) end
local function flat(t) return t:detach():reshape({-1}) end

-- ---- values and gradients, as PyTorch's ---------------------------------------------------------
do
  local a, b = rg({1, -2, 3}), rg({0.5, 4, -1})
  local y = a * 1
  local r = y:add_(b, -2.5)
  ok(r == y, "add_ returns the tensor written")
  y:mul_(a)
  close(flat(y), want.add_mul_value, 1e-12, "add_(b, alpha) then mul_(a): values")
  y:sum():backward()
  close(a.grad, want.add_mul_ga, 1e-12, "add_ then mul_: the gradient of a")
  close(b.grad, want.add_mul_gb, 1e-12, "add_ then mul_: the gradient of b (alpha applied)")
end
do
  local a = rg({-2, 0.3, 1.5})
  local y = a * 2
  y:clamp_(-1, 2):exp_()
  close(y, want.clamp_exp_value, 1e-12, "clamp_ then exp_: values")
  y:sum():backward()
  close(a.grad, want.clamp_exp_ga, 1e-12, "clamp_ then exp_: gradient")
end
do
  local a = rg({-1, 0, 2})
  local y = a + 0
  y:sigmoid_()
  local z = y - 0.25
  z:div_(a * 0 + 3)
  close(z, want.sigmoid_value, 1e-12, "sigmoid_ and div_ by a tensor: values")
  local s = (z * zorch.tensor({1, 2, 3}, {dtype = "float64"})):sum()
  s:backward()
  close(a.grad, want.sigmoid_ga, 1e-12, "sigmoid_ and div_: gradient")
end
do
  local ema = zorch.tensor({1, 2, 3}, {dtype = "float64"})
  local p = zorch.tensor({0, 10, -4}, {dtype = "float64"})
  zorch.no_grad(function() for _ = 1, 3 do ema:mul_(0.9):add_(p, 0.1) end end)
  close(ema, want.ema, 1e-12, "an EMA update under no_grad")
end
do
  local a, b = rg({1, 2, 3}), rg({3, -1, 0})
  local y = a * 1
  y:lerp_(b, 0.25)
  close(y, want.lerp_value, 1e-12, "lerp_: values")
  local s = (y * y):sum()
  s:backward()
  close(a.grad, want.lerp_ga, 1e-12, "lerp_: gradient of the start")
  close(b.grad, want.lerp_gb, 1e-12, "lerp_: gradient of the end")
end
do
  local x = zorch.tensor({{1, 2}, {3, 4}}, {dtype = "float64"})
  x:pow_(2):sub_(zorch.tensor({1, 0.5}, {dtype = "float64"}))
  close(flat(x), want.pow_sub_bcast, 1e-12, "pow_ then sub_ of a broadcast row")
  local i = zorch.tensor({5, -7, 9})
  i:mul_(3):add_(2)
  ok(i:dtype() == "int64", "integer in-place ops keep int64")
  close(i:double(), want.int_mul_add, 0, "integer mul_ and add_")
end
do -- every elementwise op of the registry has its in-place form, equal to the op
  local x = zorch.tensor({0.25, 0.5, 0.75}, {dtype = "float64"})
  local n, bad = 0, {}
  for _, op in ipairs(debug.getregistry()["zorch.private"]._pointwise_ops()) do
    local f = zorch[op.name]
    if op.nin == 1 and op.nparams == 0 and type(f) == "function" then
      local y = x:clone()
      y[op.name .. "_"](y)
      n = n + 1
      local r = f(x) -- equal, or NaN in the same places (an input outside the op's domain)
      local same = y:eq(r):long():sum() + (y:isnan():long() * r:isnan():long()):sum()
      if same:item() ~= x:numel() then bad[#bad + 1] = op.name end
    end
  end
  ok(n >= 8 and #bad == 0, ("%d unary ops in place equal the op (%s)"):format(n, table.concat(bad, " ")))
end

-- ---- the rules of in-place results -------------------------------------------------------------
raises("a float result into an int64 tensor", function() zorch.tensor({1, 2}):div_(2) end,
       "div_: the result's dtype float32 cannot be written in place into a tensor of dtype int64")
raises("a result that does not fit the shape", function() zorch.zeros(3):add_(zorch.ones(2, 3)) end,
       "add_: the result's shape (2, 3) does not fit the tensor of shape (3,)")
raises("an op's own error keeps its name", function() zorch.zeros(3):mul_(zorch.ones(4)) end, "mul")
raises("a bad alpha", function() zorch.zeros(3):add_(1, "x") end, "add_: alpha must be a number")
raises("not a tensor", function() local f = zorch.zeros(1).add_; f(3, 1) end,
       "add_: argument 1 must be a tensor, got number")
do
  local w = rg({1, 2})
  raises("a leaf that requires grad, in grad mode", function() w:mul_(2) end,
         "mul_: a leaf tensor of shape (2,) that requires grad")
  zorch.no_grad(function() w:mul_(2):add_(1) end)
  close(w, zorch.tensor({3, 5}, {dtype = "float64"}), 0, "under no_grad the leaf takes the values")
  ok(w.is_leaf and w.requires_grad, "and stays a leaf that requires grad")
end
do -- a tensor saved for backward, then changed in place: refused, not a wrong gradient
  local a = rg({1, 2})
  local h = a * 1
  local s = (h * a):sum()
  h:add_(1)
  raises("backward through a saved tensor written by add_", function() s:backward() end, "modified by an inplace operation")
end
do -- errors point at the caller's line
  local _, e = pcall(function() zorch.tensor({1}):div_(2) end)
  ok(tostring(e):find("test_inplace_ops.lua:%d+: div_") ~= nil, "the error names the script's line: " .. tostring(e))
end

-- ---- random fills and nn.init -------------------------------------------------------------------
do
  zorch.manual_seed(3)
  local e = zorch.empty({20000}, {dtype = "float64"})
  e:uniform_(-2, 3)
  ok(e:min():item() >= -2 and e:max():item() < 3 and math.abs(e:mean():item() - 0.5) < 0.05, "uniform_(-2, 3)")
  e:normal_(1, 2)
  ok(math.abs(e:mean():item() - 1) < 0.06 and math.abs(e:std():item() - 2) < 0.06, "normal_(1, 2)")
  e:bernoulli_(0.3)
  ok(math.abs(e:mean():item() - 0.3) < 0.02 and e:eq(0):sum():item() + e:eq(1):sum():item() == 20000, "bernoulli_(0.3)")
  raises("normal_ of an integer tensor", function() zorch.zeros({2}, {dtype = "int64"}):normal_() end,
         "normal_: needs a floating point tensor, got int64")
  raises("a negative std", function() e:normal_(0, -1) end, "normal_: std must be >= 0")
  local b = zorch.empty({64, 64}, {dtype = "bfloat16"})
  b:normal_()
  ok(b:dtype() == "bfloat16" and math.abs(b:float():std():item() - 1) < 0.05, "normal_ of a bfloat16 tensor")
end
do
  local init = nn.init
  zorch.manual_seed(4)
  local w = zorch.empty({256, 128})
  init.xavier_uniform_(w)
  local a = math.sqrt(6 / (256 + 128))
  ok(w:abs():max():item() <= a and w:abs():max():item() > 0.99 * a, "xavier_uniform_: bound sqrt(6 / (fan_in + fan_out))")
  init.xavier_normal_(w, 2)
  ok(math.abs(w:std():item() / (2 * math.sqrt(2 / 384)) - 1) < 0.03, "xavier_normal_(gain 2): std")
  init.kaiming_uniform_(w, math.sqrt(5))
  local bound = math.sqrt(3) * math.sqrt(2 / (1 + 5)) / math.sqrt(128)
  ok(w:abs():max():item() <= bound and w:abs():max():item() > 0.99 * bound, "kaiming_uniform_(a = sqrt 5): nn.Linear's bound")
  init.kaiming_normal_(w, {mode = "fan_out", nonlinearity = "relu"})
  ok(math.abs(w:std():item() / (math.sqrt(2) / math.sqrt(256)) - 1) < 0.03, "kaiming_normal_ fan_out relu: std")
  local c = zorch.empty({8, 4, 3, 3})
  init.kaiming_normal_(c)
  ok(c:dim() == 4, "a conv weight's fans count its kernel")
  init.trunc_normal_(w, 0, 1, -0.5, 0.5)
  ok(w:min():item() >= -0.5 and w:max():item() <= 0.5 and w:std():item() > 0.25, "trunc_normal_ stays in [a, b]")
  ok(init.calculate_gain("relu") == math.sqrt(2) and init.calculate_gain("tanh") == 5 / 3 and
     init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04) and init.calculate_gain("conv2d") == 1,
     "calculate_gain")
  for _, shape in ipairs({{8, 5}, {3, 6}, {4, 3, 3, 3}}) do
    local q = zorch.empty(shape)
    init.orthogonal_(q, 2)
    local m = q:reshape(shape[1], -1)
    local g = shape[1] <= m:size(2) and m:matmul(m:t()) or m:t():matmul(m)
    close(g, init.eye_(zorch.empty({g:size(1), g:size(1)})) * 4, 1e-3,
          ("orthogonal_(gain 2) of %s: rows or columns orthogonal with norm 2"):format(table.concat(shape, "x")))
  end
  local z = zorch.ones(2, 3)
  init.zeros_(z); ok(z:abs():sum():item() == 0, "zeros_")
  init.constant_(z, 0.5); ok(z:sum():item() == 3, "constant_")
  init.eye_(z); close(z, zorch.tensor({{1, 0, 0}, {0, 1, 0}}), 0, "eye_ of a 2 x 3 tensor")
  local lin = nn.Linear(4, 3)
  ok(init.normal_(lin.weight, 0, 0.02) == lin.weight and lin.weight.is_leaf and lin.weight.requires_grad,
     "init of a parameter keeps it a leaf that requires grad")
  raises("fans of a 1-d tensor", function() init.xavier_uniform_(zorch.empty({3})) end,
         "nn.init.xavier_uniform_: fan in and fan out need a tensor of at least 2 dims, got shape (3,)")
  raises("a bad mode", function() init.kaiming_uniform_(w, {mode = "fan"}) end, 'mode must be "fan_in" or "fan_out"')
  raises("an unknown option", function() init.kaiming_uniform_(w, {bogus = 1}) end,
         "nn.init.kaiming_uniform_: unknown option 'bogus'")
  raises("an unknown nonlinearity", function() init.kaiming_uniform_(w, 0, "fan_in", "swish") end,
         "nn.init.kaiming_uniform_: unsupported nonlinearity swish")
end

-- ---- T, mT, shorthands, methods, deepcopy -------------------------------------------------------
do
  local x = zorch.arange(24):reshape(2, 3, 4)
  ok(tostring(x.T.shape) == "(4, 3, 2)" and x.T[4][3][2]:item() == x[2][3][4]:item(), "x.T reverses the dims")
  ok(tostring(x.mT.shape) == "(2, 4, 3)" and x.mT[2][4][1]:item() == x[2][1][4]:item(), "x.mT swaps the last two")
  raises("mT of a 1-d tensor", function() return zorch.ones(3).mT end, "mT: the tensor must have at least 2 dims, got 1")
  ok(x:int():dtype() == "int32" and x:bool():dtype() == "bool" and x:half():dtype() == "float16" and
     x:bfloat16():dtype() == "bfloat16" and x:byte():dtype() == "uint8", "int, bool, half, bfloat16, byte")
  local parts = zorch.arange(10):split(4)
  ok(#parts == 3 and parts[3]:numel() == 2, "x:split(4)")
  ok(#zorch.arange(10):chunk(3) == 3, "x:chunk(3)")
  close(zorch.tensor({1, 2, 3}):where(zorch.tensor({true, false, true}), zorch.zeros(3, {dtype = "int64"})),
        zorch.tensor({1, 0, 3}), 0, "x:where(cond, y)")
end
do
  local m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
  local c = zorch.deepcopy(m)
  local x = zorch.randn(5, 3)
  close(c(x), m(x), 0, "deepcopy of a model gives the same outputs")
  zorch.no_grad(function() c[1].weight:add_(1) end)
  ok((c(x) - m(x)):abs():max():item() > 0, "and owns its parameters")
  ok(#c:parameters() == 4 and c[1].weight.requires_grad and c[1].weight.is_leaf, "its parameters are leaves that require grad")
  local t = {w = zorch.ones(2)}
  t.also = t.w
  t.self = t
  local d = zorch.deepcopy(t)
  ok(d.also == d.w and d.self == d and d.w ~= t.w, "a tensor met twice is copied once; cycles stay")
  local h = rg({1}) * 2
  raises("deepcopy of a non-leaf", function() zorch.deepcopy(h) end, "deepcopy: only leaf tensors can be copied")
end

do -- nn.Parameter(t, false): registered and saved, not trained
  local M = nn.Module:extend "FrozenScale"
  function M:init() self.scale = nn.Parameter(zorch.ones(2), false); self.fc = nn.Linear(2, 2) end
  function M:forward(x) return self.fc(x) * self.scale end
  local m = M()
  ok(m:state_dict().scale ~= nil and #m:parameters() == 3 and not m.scale.requires_grad,
     "a parameter without requires_grad is registered and in the state dict")
  local o = zorch.optim.Adam(m:parameters(), {lr = 0.1})
  m(zorch.ones(3, 2)):sum():backward()
  o:step()
  close(m.scale, zorch.ones(2), 0, "and the optimizer leaves it")
  local m2 = M()
  m2:load_state_dict(m:state_dict())
  close(m2.fc.weight, m.fc.weight, 0, "a state dict with it loads into a fresh model")
  raises("a non-leaf", function() nn.Parameter(rg({1}) * 2) end, "nn.Parameter: the tensor must be a leaf")
  raises("a bad flag", function() nn.Parameter(zorch.ones(1), "no") end, "nn.Parameter: requires_grad must be a boolean")
end

tap.done()
