-- A training loop as users write it: the Engine's loop contract (engine:backward,
-- one prepare, frozen parameters), clipping with and without an engine, and the
-- module and tensor idioms around it (Sequential indexing, flatten's dims,
-- activations kept on a module, a DataLoader's printout).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim, data = zorch.nn, zorch.optim, require "zorch.data"
local ok, raises, close = tap.ok, tap.raises, tap.close

local function net()
  zorch.manual_seed(1)
  return nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1))
end
local X = zorch.randn(8, 4)

-- ---- the Engine's loop -------------------------------------------------------------------------
for _, stage in ipairs({0, 1, 2, 3}) do
  local m = net()
  local e = zorch.Engine{zero_stage = stage}
  local model, _, o = e:prepare(m, nil, optim.SGD(m:parameters(), {lr = 0.1}))
  e:gather()
  local w0 = m[1].weight:clone()
  e:release()
  raises(("stage %d: step after loss:backward() instead of engine:backward(loss)"):format(stage), function()
    o:zero_grad()
    model(X):pow(2):mean():backward()
    o:step()
  end, "step: no engine:backward(loss) since the last step")
  e:gather()
  close(m[1].weight, w0, 0, ("stage %d: and nothing was stepped"):format(stage))
  e:release()
  o:zero_grad()
  e:backward(model(X):pow(2):mean())
  ok(o:step() == true, ("stage %d: engine:backward then step steps"):format(stage))
  raises(("stage %d: a second step without a backward"):format(stage), function() o:step() end, "no engine:backward")
  raises(("stage %d: prepare twice"):format(stage), function() e:prepare(m, nil, o) end,
         "Engine:prepare: this engine already prepared a model")
end
do -- accumulation: step() is false inside the window, and needs a backward each time
  local m = net()
  local e = zorch.Engine{zero_stage = 1, gradient_accumulation_steps = 2}
  local c0 = {zorch.Engine{}:counts()}
  ok(c0[1] == 0 and c0[2] == 0 and c0[3] == 0 and zorch.Engine{}.steps == 0, "counts are zeros before prepare")
  ok(zorch.is_engine(e) and not zorch.is_engine({}) and not zorch.is_engine(nil), "zorch.is_engine")
  ok(not e:prepared_with(m), "prepared_with is false before prepare")
  local model, _, o = e:prepare(m, nil, optim.SGD(m:parameters(), {lr = 0.1}))
  ok(e:prepared_with(m) and not e:prepared_with(net()), "prepared_with names the prepared model")
  e:backward(model(X):pow(2):mean())
  ok(o:step() == false, "inside the accumulation window step() is false")
  local c1 = {e:counts()}
  ok(c1[1] == 1 and c1[2] == 0 and c1[3] == 1, ("counts inside the window: %d %d %d"):format(c1[1], c1[2], c1[3]))
  e:backward(model(X):pow(2):mean())
  ok(o:step() == true and e.steps == 1, "at its end it steps once")
  local c2 = {e:counts()}
  ok(c2[1] == 2 and c2[2] == 1 and c2[3] == 0, ("counts after the step: %d %d %d"):format(c2[1], c2[2], c2[3]))
  raises("backward before prepare", function() zorch.Engine{}:backward(zorch.ones(1, {requires_grad = true}):sum()) end,
         "Engine:backward: prepare the model first")
end

-- parameters the optimizer does not hold, or that are frozen, are not stepped
for _, stage in ipairs({0, 2, 3}) do
  local m = net()
  local first = m[1].weight:clone()
  local e = zorch.Engine{zero_stage = stage}
  local model, _, o = e:prepare(m, nil, optim.AdamW(m[3]:parameters(), {lr = 0.05, weight_decay = 0.1}))
  for _ = 1, 3 do o:zero_grad(); e:backward(model(X):pow(2):mean()); o:step() end
  e:gather()
  close(m[1].weight, first, 0, ("stage %d: an optimizer over the last layer leaves the first alone"):format(stage))
  e:release()
  local f = net()
  f[1].weight.requires_grad = false
  local frozen = f[1].weight:clone()
  local fe = zorch.Engine{zero_stage = stage}
  local fm, _, fo = fe:prepare(f, nil, optim.AdamW(f:parameters(), {lr = 0.05, weight_decay = 0.1}))
  for _ = 1, 3 do fo:zero_grad(); fe:backward(fm(X):pow(2):mean()); fo:step() end
  fe:gather()
  close(f[1].weight, frozen, 0, ("stage %d: a frozen weight gets no weight decay"):format(stage))
  fe:release()
  f[1].weight.requires_grad = true
  for _ = 1, 2 do fo:zero_grad(); fe:backward(fm(X):pow(2):mean()); fo:step() end
  fe:gather()
  ok((f[1].weight - frozen):abs():max():item() > 0, ("stage %d: unfrozen, it is stepped again"):format(stage))
  fe:release()
end
do
  local m, other = net(), net()
  raises("an optimizer over another model's parameters", function()
    zorch.Engine{}:prepare(m, nil, optim.SGD(other:parameters(), {lr = 0.1}))
  end, "parameter 1 of the optimizer's group 1 is not a parameter of the model")
end

-- mean over ranks takes a number or a one-element tensor
do
  local e = zorch.Engine{}
  ok(e:mean(zorch.tensor(1.5)) == 1.5 and e:mean(2) == 2, "Engine:mean of a one-element tensor or a number")
  raises("Engine:mean of a string", function() e:mean("x") end, "Engine:mean: expected a number or a one-element tensor")
end

-- ---- clipping -----------------------------------------------------------------------------------
do
  local function grads()
    zorch.manual_seed(3)
    local l = nn.Linear(4, 2)
    l(zorch.randn(8, 4) * 100):sum():backward()
    return l
  end
  local function norm(ps)
    local sq = 0
    for _, p in ipairs(ps) do sq = sq + (p.grad:double() * p.grad:double()):sum():item() end
    return math.sqrt(sq)
  end
  local l = grads()
  local before = norm(l:parameters())
  local g0 = l.weight.grad:clone()
  local got = nn.utils.clip_grad_norm_(l:parameters(), 1.0)
  close(zorch.tensor(got, {dtype = "float64"}), zorch.tensor(before, {dtype = "float64"}), 1e-6,
        "clip_grad_norm_ returns the norm before clipping")
  close(zorch.tensor(norm(l:parameters()), {dtype = "float64"}), zorch.tensor(1.0, {dtype = "float64"}), 1e-5,
        "and leaves the gradients at max_norm")
  close(l.weight.grad, g0 * (1.0 / (before + 1e-6)), 1e-6, "by PyTorch's factor max_norm / (norm + 1e-6)")
  local l2 = grads()
  local big = nn.utils.clip_grad_norm_(l2:parameters(), 1e9)
  ok(math.abs(big - before) / before < 1e-6, "a max above the norm changes nothing and returns the norm")
  local l5 = grads() -- gradients of two dtypes: the norm of them all
  local p64 = zorch.tensor({3, 4}, {dtype = "float64", requires_grad = true})
  p64:pow(2):sum():backward() -- (its gradient 6, 8: norm 10)
  local ps = l5:parameters()
  ps[#ps + 1] = p64
  local mixed, want = nn.utils.clip_grad_norm_(ps, 1e9), math.sqrt(before * before + 100)
  ok(math.abs(mixed - want) / want < 1e-6, ("float32 and float64 gradients: norm %.9g, want %.9g"):format(mixed, want))
  local l3 = grads()
  local inf = nn.utils.clip_grad_norm_(l3:parameters(), 1.0, math.huge)
  ok(inf > 0 and math.abs(l3.weight.grad:abs():max():item() - 1.0) < 1e-5, "norm_type math.huge: the largest |g| to max")
  raises("clip_grad_norm_ with norm_type 3", function() nn.utils.clip_grad_norm_(l3:parameters(), 1, 3) end,
         "norm_type must be 2 or math.huge")
  raises("Engine:clip_grad_norm with no model and no parameters", function() zorch.Engine{}:clip_grad_norm(1.0) end,
         "Engine:clip_grad_norm: no model prepared")
  local l4 = grads()
  ok(math.abs(zorch.Engine{}:clip_grad_norm(1.0, l4:parameters()) - before) / before < 1e-6 and
     math.abs(norm(l4:parameters()) - 1.0) < 1e-5, "Engine:clip_grad_norm(max, params) clips them")
end

-- ---- cross entropy with class weights and label smoothing (golden/ce_options.txt) ---------------
do
  local N, C = 5, 4
  local lv = {}
  for i = 0, N - 1 do
    local row = {}
    for j = 0, C - 1 do row[#row + 1] = math.sin(0.7 * i + j) * 2 end
    lv[#lv + 1] = row
  end
  local targets = zorch.tensor{1, 4, 2, 3, 4}
  local weight = zorch.tensor({0.5, 2.0, 1.0, 1.5}, {dtype = "float64"})
  local cases = {w = {weight = weight}, s = {label_smoothing = 0.1}, ws = {weight = weight, label_smoothing = 0.2},
                 wsi = {weight = weight, label_smoothing = 0.2, ignore_index = 3},
                 si = {label_smoothing = 0.3, ignore_index = 3}}
  local n, worst = 0, 0
  for line in io.lines("golden/ce_options.txt") do
    local name, red, what, rest = line:match("^(%S+) (%S+) (%S+) (.*)$")
    local want = {}
    for v in rest:gmatch("%S+") do want[#want + 1] = tonumber(v) end
    local got
    if name == "single" then
      got = {zorch.cross_entropy(zorch.tensor(lv[1], {dtype = "float64"}), zorch.tensor(1),
                                 {weight = weight, label_smoothing = 0.1}):item()}
    else
      local x = zorch.tensor(lv, {dtype = "float64", requires_grad = true})
      local opts = {reduction = red}
      for k, v in pairs(cases[name]) do opts[k] = v end
      local loss = zorch.cross_entropy(x, targets, opts)
      if what == "loss" then got = loss:reshape({-1}):totable()
      else loss:sum():backward(); got = x.grad:reshape({-1}):totable() end
    end
    for i, v in ipairs(want) do worst = math.max(worst, math.abs(got[i] - v) / (math.abs(v) + 1e-12)) end
    n = n + 1
  end
  ok(n == 31 and worst < 1e-12, ("cross_entropy with weight, label_smoothing and ignore_index: PyTorch's losses " ..
     "and gradients, %d lines (worst relative error %.2g)"):format(n, worst))
  local ce = nn.CrossEntropyLoss{weight = weight, label_smoothing = 0.2, ignore_index = 3}
  local x = zorch.tensor(lv, {dtype = "float64"})
  close(ce(x, targets), zorch.cross_entropy(x, targets, {weight = weight, label_smoothing = 0.2, ignore_index = 3}), 0,
        "nn.CrossEntropyLoss passes weight and label_smoothing")
  raises("an unknown cross_entropy option", function() zorch.cross_entropy(x, targets, {label_smothing = 0.1}) end,
         "cross_entropy: unknown option 'label_smothing'")
  raises("an unknown loss module option", function() nn.MSELoss{weight = 1} end, "nn.MSELoss: unknown option 'weight'")
  raises("a weight of the wrong size", function() zorch.cross_entropy(x, targets, {weight = zorch.ones(3)}) end,
         "cross_entropy: weight must be a tensor of shape (4)")
end

-- ---- gradients at the edges: PyTorch's (golden/edge_grads.txt) -----------------------------------
do
  local want = {}
  for line in io.lines("golden/edge_grads.txt") do
    local name, rest = line:match("^(%S+) (.*)$")
    local v = {}
    for x in rest:gmatch("%S+") do v[#v + 1] = x == "nan" and 0 / 0 or x == "-inf" and -math.huge or tonumber(x) end
    want[name] = v
  end
  local function rg(v) return zorch.tensor(v, {dtype = "float64", requires_grad = true}) end
  local got = {}
  local function grad_of(f, ...)
    local ins = {...}
    local l = f(table.unpack(ins))
    l:backward()
    local out = {}
    for i, t in ipairs(ins) do out[i] = t.grad:reshape({-1}):totable() end
    return table.unpack(out)
  end
  got.std_const = grad_of(function(x) return x:std() end, rg({1, 1, 1}))
  got.std_rows = grad_of(function(x) return x:std(2):sum() end, rg({{1, 1, 1}, {1, 2, 3}}))
  got.var_rows = grad_of(function(x) return x:var(2):sum() end, rg({{1, 1, 1}, {1, 2, 3}}))
  got.pow_s0 = grad_of(function(x) return (x ^ 0):sum() end, rg({0, 2}))
  got.pow_s2 = grad_of(function(x) return (x ^ 2):sum() end, rg({0, 2}))
  got.pow_a, got.pow_e = grad_of(function(a, e) return (a ^ e):sum() end, rg({0, 0}), rg({2, 0}))
  got.pow_neg_a, got.pow_neg_e = grad_of(function(a, e) return (a ^ e):sum() end, rg({0, 2}), rg({-1, 3}))
  got.max_all = grad_of(function(x) return (x:max()) end, rg({{5, 5}, {1, 5}}))
  got.min_all = grad_of(function(x) return (x:min()) end, rg({{5, 5}, {1, 5}}))
  got.amax_02 = grad_of(function(x) return (x:max({1, 3})):sum() end, rg({{{3, 3}, {1, 2}}, {{0, 3}, {3, 1}}}))
  got.max_dim = grad_of(function(x) return (x:max(2)):sum() end, rg({{5, 5}, {1, 5}}))
  got.relu_nan = zorch.relu(zorch.tensor({0 / 0, -1, 2})):totable()
  got.clamp_bounds = grad_of(function(x) return zorch.clamp(x, -1, 1):sum() end, rg({-1, 1, 0.5}))
  got.mul_read_then_write = grad_of(function(x)
    local y = x * 2
    local s = (y * zorch.tensor({1, 2, 3}, {dtype = "float64"})):sum()
    y[1] = 100 -- (the product saved only the constant: the write is no error)
    return s
  end, rg({1, 2, 3}))
  local lx = rg({{1, 2, 3}, {4, 5, 6}, {0, -math.huge, 2}})
  local lse = zorch.logsumexp(lx, 2)
  got.logsumexp_rows = lse:totable()
  lse:sum():backward()
  got.logsumexp_grad = lx.grad:reshape({-1}):totable()
  got.logsumexp_neginf = {zorch.logsumexp(zorch.tensor({-math.huge, -math.huge}, {dtype = "float64"}), 1):item()}
  local m = zorch.arange(1, 13, 1, {dtype = "float64"}):reshape({3, 4})
  got.tril = zorch.tril(m):reshape({-1}):totable()
  got.triu_1 = zorch.triu(m, 1):reshape({-1}):totable()
  got.tril_m1 = m:tril(-1):reshape({-1}):totable()
  got.chunk_sizes = {}
  for i, p in ipairs(zorch.chunk(zorch.arange(1, 11), 3)) do got.chunk_sizes[i] = p:numel() end
  local names = {}
  for name in pairs(want) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    local w, g, good = want[name], got[name], got[name] ~= nil
    for i = 1, #w do
      local a, b = w[i], g and g[i]
      good = good and b ~= nil and ((a ~= a and b ~= b) or a == b or math.abs(a - b) <= 1e-12 * math.abs(a))
    end
    ok(good, name .. ": PyTorch's values (" .. table.concat(w, " ") .. ")" ..
       (good and "" or (", got " .. (g and table.concat(g, " ") or "nothing"))))
  end
end

-- ---- module options that PyTorch users pass -----------------------------------------------------
do
  zorch.manual_seed(5)
  local e = nn.Embedding(6, 3, {padding_idx = 2})
  close(e.weight[2], zorch.zeros(3), 0, "Embedding padding_idx: its row starts at zeros")
  local idx = zorch.tensor{{1, 2, 4}, {2, 2, 6}}
  local out = e(idx)
  close(out, zorch.embedding(e.weight, idx), 0, "the output is the plain lookup's")
  local l = (out * out + out):sum()
  l:backward()
  close(e.weight.grad[2], zorch.zeros(3), 0, "and the padding row gets no gradient")
  local plain = e.weight:detach():clone():requires_grad_()
  local p = zorch.embedding(plain, idx)
  local pl = (p * p + p):sum()
  pl:backward()
  close(e.weight.grad[4], plain.grad[4], 1e-6, "the other rows get the plain lookup's")
  ok(nn.Embedding(6, 3, {padding_idx = -1}).padding_idx == 6, "a negative padding_idx counts from the end")
  raises("padding_idx out of range", function() nn.Embedding(6, 3, {padding_idx = 7}) end,
         "nn.Embedding: padding_idx must be an integer in 1..6")
  raises("an unknown Embedding option", function() nn.Embedding(6, 3, {max_norm = 1}) end,
         "nn.Embedding: unknown option 'max_norm'")
  local ln = nn.LayerNorm(4, {elementwise_affine = false})
  ok(#ln:parameters() == 0, "LayerNorm elementwise_affine = false: no parameters")
  local x = zorch.randn(2, 4)
  close(ln(x), zorch.layer_norm(x, {4}), 1e-6, "and the plain normalisation")
  ok(#nn.LayerNorm(4, {bias = false}):parameters() == 1, "bias = false: the weight alone")
  raises("an unknown LayerNorm option", function() nn.LayerNorm(4, {affine = false}) end,
         "nn.LayerNorm: unknown option 'affine'")
end

-- ---- zorch.Function: an op with a gradient of its own ------------------------------------------
do
  local Cube = zorch.Function{name = "Cube",
    forward = function(ctx, x, k) ctx:save_for_backward(x); ctx.k = k; return x * x * x * k end,
    backward = function(ctx, g) local x = ctx.saved_tensors[1]; return g * 3 * x * x * ctx.k end}
  local x = zorch.tensor({1, 2, -1}, {dtype = "float64", requires_grad = true})
  local y = Cube(x, 2)
  close(y, zorch.tensor({2, 16, -2}, {dtype = "float64"}), 0, "zorch.Function: forward's values")
  y:sum():backward()
  close(x.grad, zorch.tensor({6, 24, 6}, {dtype = "float64"}), 0, "and backward's gradient")
  local z = Cube(x, 1)
  x.grad = nil
  zorch.no_grad(function() x[1] = 5 end)
  raises("a saved tensor written since the forward", function() z:sum():backward() end,
         "Cube: saved tensor 1 of shape (3) was modified by an inplace operation")
  raises("forward returning a number", function()
    zorch.Function{forward = function() return 1 end, backward = function() end}(x) end,
    "Function: forward must return one tensor, got number")
  local e = zorch.tensor({1, 2}, {dtype = "float64", requires_grad = true})
  local p = 2 ^ e
  close(p, zorch.tensor({2, 4}, {dtype = "float64"}), 0, "a number raised to a tensor")
  p:sum():backward()
  close(e.grad, zorch.tensor({2 * math.log(2), 4 * math.log(2)}, {dtype = "float64"}), 1e-15, "and its gradient")
  local lin = nn.Linear(2, 1):to("bfloat16")
  lin(zorch.ones(1, 2, {dtype = "bfloat16"})):sum():backward()
  raises("an optimizer over bf16 parameters", function() optim.Adam(lin:parameters()):step() end,
         "optim.Adam: parameter 1 is bfloat16", "zorch.Engine{precision = \"bf16\"}")
end

-- ---- RMSprop and Adagrad under the Engine (their values: optim/test_schedules.lua) ----------
do
  -- the Engine steps them too, as the optimizer alone
  for _, make in ipairs({function(ps) return optim.RMSprop(ps, {lr = 0.01, momentum = 0.5}) end,
                         function(ps) return optim.Adagrad(ps, {lr = 0.1}) end}) do
    local a, b = net(), net()
    local oa = make(a:parameters())
    for _ = 1, 3 do oa:zero_grad(); a(X):pow(2):mean():backward(); oa:step() end
    local e = zorch.Engine{zero_stage = 2}
    local mb, _, ob = e:prepare(b, nil, make(b:parameters()))
    for _ = 1, 3 do ob:zero_grad(); e:backward(mb(X):pow(2):mean()); ob:step() end
    close(b[1].weight, a[1].weight, 1e-5, getmetatable(oa).__name .. ": the Engine at stage 2 steps as the optimizer alone")
  end
end

-- ---- comparisons: PyTorch's, NaN included ---------------------------------------------------------
do
  local f = zorch.tensor({1, 0 / 0, 3})
  local two = zorch.tensor(2.0)
  local function bools(t) local r = {} for i, v in ipairs(t:totable()) do r[i] = tostring(v) end return table.concat(r, " ") end
  ok(bools(f:ne(f)) == "false true false" and bools(f:le(f)) == "true false true" and bools(f:ge(two)) == "false false true"
     and bools(zorch.ne(zorch.tensor{1, 2}, 2)) == "true false" and f:le(two):dtype() == "bool",
     "ne, le and ge as PyTorch's (NaN is unequal to itself and neither <= nor >=)")
end

-- ---- ModuleDict ------------------------------------------------------------------------------------
do
  local H = nn.Module:extend "Heads"
  function H:init() self.heads = nn.ModuleDict{b = nn.Linear(2, 1), a = nn.Linear(2, 3)} end
  function H:forward(x) return self.heads.a(x):sum() + self.heads["b"](x):sum() end
  local h = H()
  local names = {}
  for k in pairs(h:state_dict()) do names[#names + 1] = k end
  table.sort(names)
  ok(table.concat(names, " ") == "heads.a.bias heads.a.weight heads.b.bias heads.b.weight",
     "ModuleDict: children named by their keys in the state dict")
  ok(#h.heads == 2 and table.concat(h.heads:keys(), " ") == "a b", "its keys, sorted, and #")
  local seen = {}
  for k, m in h.heads:items() do seen[#seen + 1] = k .. ":" .. m.weight.shape[1] end
  ok(table.concat(seen, " ") == "a:3 b:1", "items() walks them in order")
  h.heads:set("c", nn.Linear(2, 2))
  ok(#h:parameters() == 6 and #h.heads == 3, "set adds a module and its parameters")
  h(zorch.ones(1, 2)):backward()
  ok(h.heads.a.weight.grad ~= nil, "and gradients reach the modules")
  raises("a key that is a method name", function() nn.ModuleDict{keys = nn.Linear(1, 1)} end,
         "nn.ModuleDict: 'keys' cannot name a module")
  raises("a value that is not a module", function() nn.ModuleDict{a = 1} end, "nn.ModuleDict: 'a' must be a module")
end

-- ---- walking a model: modules, named_modules, apply, requires_grad_ -------------------------------
do
  local m = net()
  local names = {}
  for name, mod in m:named_modules() do names[#names + 1] = name .. "=" .. getmetatable(mod).__name end
  ok(table.concat(names, " ") == "=nn.Sequential 0=nn.Linear 1=nn.ReLU 2=nn.Linear",
     "named_modules: dotted names, the root first")
  local count = 0
  m:apply(function(mod) if getmetatable(mod).__name == "nn.Linear" then count = count + 1 end end)
  ok(count == 2 and #m:modules() == 4, "apply visits each module once")
  m[1]:requires_grad_(false)
  ok(not m[1].weight.requires_grad and not m[1].bias.requires_grad and m[3].weight.requires_grad,
     "requires_grad_(false) freezes one module's parameters")
  m:requires_grad_()
  ok(m[1].weight.requires_grad, "and requires_grad_() unfreezes them")
  raises("apply of a number", function() m:apply(3) end, "Module:apply: expected a function")
end

-- ---- module and tensor idioms -------------------------------------------------------------------
do
  local s = net()
  ok(#s == 3 and s[1] == s["0"] and s[-1] == s["2"] and s[4] == nil, "Sequential: s[i] from 1, s[-1], #s")
  local x = zorch.randn(8, 32, 4, 4)
  ok(tostring(x:flatten(2).shape) == "(8, 512)" and tostring(zorch.flatten(x, 2, 3).shape) == "(8, 128, 4)" and
     tostring(x:flatten().shape) == "(4096,)" and tostring(x:flatten(-2).shape) == "(8, 32, 16)",
     "flatten(x, start_dim, end_dim), dims from 1")
  raises("flatten with start_dim past the dims", function() x:flatten(5) end, "flatten: start_dim 5 out of range")
  raises("flatten with start_dim after end_dim", function() x:flatten(3, 2) end, "start_dim 3 comes after end_dim 2")
  local D = nn.Module:extend "D"
  function D:init() self.fc = nn.Linear(2, 2) end
  function D:forward(v) local y = self.fc(v); self.last = y; return y end
  local d = D()
  d(zorch.ones(1, 2))
  ok(#d:parameters() == 2 and d.last ~= nil, "an activation kept on a module is not a parameter")
  D():load_state_dict(d:state_dict())
  ok(true, "and a fresh module loads the state dict")
  local DS = {}
  DS.__index = DS
  function DS:len() return 5 end
  function DS:get() return zorch.ones(2) end
  ok(tostring(data.DataLoader(setmetatable({}, DS), {batch_size = 2})):find("5 samples", 1, true),
     "a DataLoader over a dataset with len() prints its size")
end

tap.done()
