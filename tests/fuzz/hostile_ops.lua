-- Hostile arguments against the tensor ops, losses, layers, optimizers and
-- schedulers: each function's valid call, then each argument replaced by every
-- kind below (tensors of every dtype, empty, 0-d, 8-d, non-contiguous,
-- expanded, with NaN/inf/-0, requiring grad; numbers near 2^31, 2^53, 2^63,
-- fractions, NaN, infinities; nil, tables, strings, booleans, functions, a
-- file), then random mixtures. Errors are logged; results requiring grad are
-- backpropagated. A crash, a sanitizer report or a hang is the finding.
-- zorch hostile_ops.lua FIRST LAST [count]: runs calls FIRST..LAST (prints the
-- number of calls with "count"); HZ_LOG names the file holding the call in
-- progress, HZ_ERRS the file the errors are appended to. hostile_ops.sh drives
-- it in batches and resumes after a crash.
local zorch = require "zorch"
local nn = zorch.nn
local START = tonumber(arg[1] or "1")
local STOP = tonumber(arg[2] or "100000000")
local NAN, INF = 0/0, math.huge

local function T(opts) return zorch.tensor({{1.5, -2, 0}, {3, -0.5, 4}}, opts) end
local dtypes = {"bool","uint8","int32","int64","bfloat16","float16","float32","float64"}
local tk = {} -- tensor kinds: name -> constructor
local tnames = {}
local function addt(name, f) tk[name] = f; tnames[#tnames+1] = name end
addt("f32", function() return T() end)
for _, d in ipairs(dtypes) do addt(d, function() return zorch.tensor({{1, 0, 2}, {3, 1, 4}}):to(d) end) end
addt("empty0", function() return zorch.zeros({0, 3}) end)
addt("empty1", function() return zorch.zeros({2, 0}) end)
addt("empty_i64", function() return zorch.zeros({0}, {dtype="int64"}) end)
addt("d0", function() return zorch.tensor(2.5) end)
addt("d0i", function() return zorch.tensor(3) end)
addt("d8", function() return zorch.randn({1,2,1,2,1,1,2,1}) end)
addt("d8_i64", function() return zorch.ones({1,2,1,2,1,1,2,1}, {dtype="int64"}) end)
addt("d8_nc", function() return zorch.randn({2,1,2,1,2,1,1,2}):permute({8,7,6,5,4,3,2,1}) end)
addt("exp_grad", function() return zorch.randn(1, 3, {requires_grad=true}):expand(2, 3) end)
addt("empty_grad", function() return zorch.zeros({0, 3}, {requires_grad=true}) end)
addt("d0_grad", function() return zorch.tensor(2.5, {requires_grad=true}) end)
addt("d8full", function() return zorch.randn({2,2,2,2,2,2,2,2}) end)
addt("nc", function() return zorch.randn(3, 2):t() end)
addt("exp", function() return zorch.randn(1, 3):expand(2, 3) end)
addt("exp0", function() return zorch.tensor(1.0):expand(2, 3) end)
addt("nan", function() return zorch.tensor({{NAN, INF, -INF}, {-0.0, 0, 1}}) end)
addt("grad", function() return zorch.randn(2, 3, {requires_grad=true}) end)
addt("grad_sq", function() return zorch.randn(3, 3, {requires_grad=true}) end)
addt("grad_nc", function() return zorch.randn(3, 2, {requires_grad=true}):t() end)
addt("vec", function() return zorch.randn(3) end)
addt("vec_i64", function() return zorch.tensor({1, 3, 2}) end)
addt("sq", function() return zorch.randn(3, 3) end)
addt("bat", function() return zorch.randn(2, 3, 3) end)
addt("big1d", function() return zorch.randn(1000) end)
addt("f64_grad", function() return zorch.randn(2, 3, {dtype="float64", requires_grad=true}) end)
addt("bf16_grad", function() return zorch.randn(2, 3, {dtype="bfloat16", requires_grad=true}) end)
addt("neg_i64", function() return zorch.tensor({{-1, 0, 9223372036854775807}, {math.mininteger, 2, 3}}) end)

local scal = {
  {"0", 0}, {"1", 1}, {"-1", -1}, {"2", 2}, {"3", 3}, {"-3", -3}, {"2.5", 2.5}, {"-0.0", -0.0}, {"nan", NAN},
  {"inf", INF}, {"-inf", -INF}, {"2^31", 2^31 | 0}, {"2^31-1", 2147483647}, {"-2^31", -2147483648},
  {"2^32", 4294967296}, {"2^53", 9007199254740992}, {"2^53f", 2.0^53}, {"maxint", math.maxinteger},
  {"minint", math.mininteger}, {"2^63f", 2.0^63}, {"1e300", 1e300}, {"-1e300", -1e300}, {"9", 9}, {"4", 4},
  {"nil", nil}, {"{}", {}}, {"{1,2}", {1, 2}}, {"{-1}", {-1}}, {"{2^31}", {2147483648}}, {"{nan}", {NAN}},
  {"{big}", {math.maxinteger, 2}}, {"{0,0}", {0, 0}}, {"{1,1,1,1,1,1,1,1,1}", {1,1,1,1,1,1,1,1,1}},
  {"{1,-1,1,-1}", {1, -1, 1, -1}}, {"{1000000,1000000}", {1000000, 1000000}}, {"{2.5}", {2.5}},
  {"io.stdout", io.stdout}, {"str", "x"}, {"'inf'", "inf"}, {"true", true}, {"false", false},
  {"fn", function() return 1 end}, {"{{}}", {{}}}, {"{x=1}", {x = 1}},
}
local kinds = {}
for _, n in ipairs(tnames) do kinds[#kinds+1] = {n, "tensor"} end
for _, s in ipairs(scal) do kinds[#kinds+1] = {s[1], "scalar", s[2]} end
local function make(k) if k[2] == "tensor" then return tk[k[1]]() else return k[3] end end

-- function specs: name, call (function(args...)), base arg kinds
local specs = {}
local function S(name, f, base) specs[#specs+1] = {name = name, f = f, base = base} end
local function Z(n) return function(...) return zorch[n](...) end end
local function M(n) return function(x, ...) return x[n](x, ...) end end
local unary = {"sign","floor","ceil","trunc","round","frac","square","reciprocal","rsqrt","log1p","expm1","log2","log10","exp2","erf","erfc","asin","acos","atan","sinh","cosh","tan","asinh","acosh","atanh","leaky_relu","elu","selu","celu","softplus","hardsigmoid","hardswish","mish","logsigmoid","hardtanh","relu6","softsign","tanhshrink","isnan","isinf","isposinf","isneginf","isfinite","nan_to_num","neg","exp","log","sqrt","abs","relu","tanh","sigmoid","sin","cos"}
for _, n in ipairs(unary) do
  S(n, Z(n), {"f32", "nil", "nil", "nil"})
  S(n .. "_", M(n .. "_"), {"f32", "nil", "nil"})
end
local binary = {"maximum","minimum","fmax","fmin","atan2","hypot","logaddexp","copysign","fmod","remainder","floor_divide","add","sub","mul","div","pow","eq","ne","lt","le","gt","ge","clamp_min","clamp_max","type_as","expand_as","view_as"}
for _, n in ipairs(binary) do
  S(n, Z(n), {"f32", "f32", "nil"})
  if zorch.tensor(1.0)[n .. "_"] then S(n .. "_", M(n .. "_"), {"f32", "f32", "nil"}) end
end
S("//", function(a, b) return a // b end, {"f32", "f32"})
S("%", function(a, b) return a % b end, {"f32", "f32"})
S("lerp", Z"lerp", {"f32", "f32", "2.5"})
S("lerp_", M"lerp_", {"f32", "f32", "2.5"})
S("addcmul", Z"addcmul", {"f32", "f32", "f32", "2"})
S("addcdiv", Z"addcdiv", {"f32", "f32", "f32", "2"})
S("clamp", Z"clamp", {"f32", "-1", "1"})
S("clamp_", M"clamp_", {"f32", "-1", "1"})
S("clip", Z"clip", {"f32", "-1", "1"})
S("isclose", Z"isclose", {"f32", "f32", "nil", "nil", "nil"})
S("allclose", Z"allclose", {"f32", "f32", "nil", "nil", "nil"})
S("equal", Z"equal", {"f32", "f32"})
S("add_", M"add_", {"f32", "f32", "2"})
S("sub_", M"sub_", {"f32", "f32", "2"})
S("masked_fill_", M"masked_fill_", {"f32", "bool", "2"})
S("copy_", M"copy_", {"f32", "f32"})
S("fill_", M"fill_", {"f32", "2"})
S("uniform_", M"uniform_", {"f32", "0", "1"})
S("normal_", M"normal_", {"f32", "0", "1"})
S("bernoulli_", M"bernoulli_", {"f32", "nil"})
S("prod", Z"prod", {"f32", "1", "nil"})
S("amax", Z"amax", {"f32", "1", "nil"})
S("amin", Z"amin", {"f32", "1", "nil"})
S("norm", Z"norm", {"f32", "2", "1", "nil"})
S("any", Z"any", {"f32", "1", "nil"})
S("all", Z"all", {"f32", "1", "nil"})
S("count_nonzero", Z"count_nonzero", {"f32", "1"})
S("cumprod", Z"cumprod", {"f32", "1"})
S("cumsum", Z"cumsum", {"f32", "1"})
S("flip", Z"flip", {"f32", "{1,2}"})
S("roll", Z"roll", {"f32", "1", "1"})
S("tile", Z"tile", {"f32", "2", "2"})
S("repeat", function(x, ...) return zorch["repeat"](x, ...) end, {"f32", "2", "2"})
S("repeat_m", function(x, ...) return x["repeat"](x, ...) end, {"f32", "{1,2}"})
S("repeat_interleave", Z"repeat_interleave", {"f32", "2", "1"})
S("unbind", Z"unbind", {"f32", "1"})
S("movedim", Z"movedim", {"f32", "1", "2"})
S("swapaxes", Z"swapaxes", {"f32", "1", "2"})
S("unflatten", Z"unflatten", {"f32", "2", "{-1}"})
S("broadcast_to", Z"broadcast_to", {"f32", "{1,2}"})
S("eye", Z"eye", {"3", "2", "nil"})
S("linspace", Z"linspace", {"0", "1", "3", "nil"})
S("logspace", Z"logspace", {"0", "1", "3", "2", "nil"})
S("one_hot", Z"one_hot", {"vec_i64", "nil"})
S("pad", Z"pad", {"f32", "{1,2}", "nil", "nil"})
S("mm", Z"mm", {"sq", "sq"})
S("bmm", Z"bmm", {"bat", "bat"})
S("mv", Z"mv", {"sq", "vec"})
S("dot", Z"dot", {"vec", "vec"})
S("outer", Z"outer", {"vec", "vec"})
S("addmm", Z"addmm", {"sq", "sq", "sq", "nil", "nil"})
S("baddbmm", Z"baddbmm", {"bat", "bat", "bat", "nil", "nil"})
S("diag", Z"diag", {"sq", "nil"})
S("diagonal", Z"diagonal", {"sq", "nil", "nil", "nil"})
S("trace", Z"trace", {"sq"})
S("tolist", Z"tolist", {"f32"})
S("T", function(x) return x.T end, {"f32"})
S("mT", function(x) return x.mT end, {"f32"})
S("deepcopy", Z"deepcopy", {"f32"})
S("narrow", Z"narrow", {"f32", "1", "1", "1"})
S("select", Z"select", {"f32", "1", "1"})
S("transpose", Z"transpose", {"f32", "1", "2"})
S("permute", Z"permute", {"f32", "{1,2}"})
S("expand", Z"expand", {"f32", "{1,2}"})
S("view", Z"view", {"f32", "{1,2}"})
S("reshape", Z"reshape", {"f32", "{1,2}"})
S("tril", Z"tril", {"f32", "nil"})
S("triu", Z"triu", {"f32", "nil"})
S("split", Z"split", {"f32", "1", "nil"})
S("chunk", Z"chunk", {"f32", "2", "nil"})
S("logsumexp", Z"logsumexp", {"f32", "1", "nil"})
S("zeros", Z"zeros", {"{1,2}", "nil"})
S("full", Z"full", {"{1,2}", "2", "nil"})
S("arange", Z"arange", {"0", "3", "1", "nil"})
S("randperm", Z"randperm", {"3", "nil"})
S("randint", Z"randint", {"3", "{1,2}", "nil"})
S("multinomial", Z"multinomial", {"vec", "2", "nil"})
S("topk", Z"topk", {"f32", "1", "nil"})
S("sort", Z"sort", {"f32", "1", "nil"})
S("gather", Z"gather", {"f32", "1", "neg_i64"})
-- losses
for _, n in ipairs({"smooth_l1_loss","huber_loss","kl_div","binary_cross_entropy","binary_cross_entropy_with_logits","cosine_similarity","pairwise_distance","hinge_embedding_loss","poisson_nll_loss","mse_loss","l1_loss"}) do
  S(n, Z(n), {"f32", "f32", "nil"})
end
S("normalize", Z"normalize", {"f32", "nil"})
S("margin_ranking_loss", Z"margin_ranking_loss", {"vec", "vec", "vec", "nil"})
S("cosine_embedding_loss", Z"cosine_embedding_loss", {"f32", "f32", "vec", "nil"})
S("triplet_margin_loss", Z"triplet_margin_loss", {"f32", "f32", "f32", "nil"})
S("gaussian_nll_loss", Z"gaussian_nll_loss", {"f32", "f32", "f32", "nil"})
S("group_norm", Z"group_norm", {"bat", "1", "nil", "nil", "nil"})
S("rms_norm", Z"rms_norm", {"f32", "{}", "nil", "nil"})
S("conv1d", Z"conv1d", {"bat", "bat", "nil", "nil"})
-- modules (constructor args then forward)
local function MOD(name, base, inp)
  S("nn." .. name, function(...) local m = nn[name](...); return m(inp()) end, base)
end
MOD("GroupNorm", {"1", "3", "nil"}, function() return zorch.randn(2, 3, 4) end)
MOD("RMSNorm", {"3", "nil"}, function() return zorch.randn(2, 3) end)
MOD("InstanceNorm1d", {"3", "nil"}, function() return zorch.randn(2, 3, 4) end)
MOD("InstanceNorm2d", {"3", "nil"}, function() return zorch.randn(2, 3, 4, 4) end)
MOD("Conv1d", {"3", "2", "2", "nil"}, function() return zorch.randn(2, 3, 5) end)
MOD("MaxPool1d", {"2", "nil"}, function() return zorch.randn(2, 3, 5) end)
MOD("AvgPool1d", {"2", "nil"}, function() return zorch.randn(2, 3, 5) end)
MOD("Unflatten", {"2", "{-1}"}, function() return zorch.randn(2, 6) end)
MOD("Dropout1d", {"2.5"}, function() return zorch.randn(2, 3, 5) end)
MOD("Dropout2d", {"2.5"}, function() return zorch.randn(2, 3, 5, 5) end)
MOD("RNN", {"3", "2", "nil"}, function() return zorch.randn(4, 2, 3) end)
MOD("LSTM", {"3", "2", "nil"}, function() return zorch.randn(4, 2, 3) end)
MOD("GRU", {"3", "2", "nil"}, function() return zorch.randn(4, 2, 3) end)
MOD("RNNCell", {"3", "2", "nil"}, function() return zorch.randn(2, 3) end)
MOD("LSTMCell", {"3", "2", "nil"}, function() return zorch.randn(2, 3) end)
MOD("GRUCell", {"3", "2", "nil"}, function() return zorch.randn(2, 3) end)
MOD("MultiheadAttention", {"4", "2", "nil"}, function() local x = zorch.randn(3, 2, 4); return x, x, x end)
MOD("TransformerEncoderLayer", {"4", "2", "nil"}, function() return zorch.randn(3, 2, 4) end)
MOD("Embedding", {"3", "2", "nil"}, function() return zorch.tensor({1, 2}) end)
-- module forward with hostile inputs
local function FWD(name, ctor)
  S("fwd." .. name, function(...) return ctor()(...) end, {"bat", "nil"})
end
FWD("RNN", function() return nn.RNN(3, 2) end)
FWD("LSTM", function() return nn.LSTM(3, 2) end)
FWD("GRU", function() return nn.GRU(3, 2) end)
FWD("GRUCell", function() return nn.GRUCell(3, 2) end)
FWD("LSTMCell", function() return nn.LSTMCell(3, 2) end)
FWD("MHA", function() return nn.MultiheadAttention(3, 1) end)
FWD("TEL", function() return nn.TransformerEncoderLayer(3, 1) end)
FWD("GroupNorm", function() return nn.GroupNorm(1, 3) end)
FWD("RMSNorm", function() return nn.RMSNorm(3) end)
FWD("InstanceNorm1d", function() return nn.InstanceNorm1d(3) end)
FWD("Conv1d", function() return nn.Conv1d(3, 2, 2) end)
FWD("MaxPool1d", function() return nn.MaxPool1d(2) end)
FWD("AvgPool1d", function() return nn.AvgPool1d(2) end)
FWD("Dropout1d", function() return nn.Dropout1d(0.5) end)
-- init
for _, n in ipairs({"uniform_","normal_","constant_","ones_","zeros_","eye_","dirac_","xavier_uniform_","xavier_normal_","kaiming_uniform_","kaiming_normal_","trunc_normal_","orthogonal_","sparse_"}) do
  if nn.init and nn.init[n] then S("init." .. n, function(...) return nn.init[n](...) end, {"f32", "nil", "nil"}) end
end
-- optimizers and schedulers
local function OPT(name)
  S("optim." .. name, function(lr, o2)
    local p = zorch.randn(3, {requires_grad = true})
    local o = zorch.optim[name]({p}, {lr = lr, weight_decay = o2})
    for _ = 1, 3 do o:zero_grad(); (p * p):sum():backward(); o:step() end
    return p
  end, {"1", "nil"})
end
for _, n in ipairs({"Adamax","NAdam","RAdam","Adadelta","RMSprop","Adagrad","SGD","Adam","AdamW"}) do if zorch.optim[n] then OPT(n) end end
local function SCH(name, optsf)
  S("sched." .. name, function(a, b)
    local p = zorch.randn(3, {requires_grad = true})
    local o = zorch.optim.SGD({p}, {lr = 0.1})
    local s = zorch.optim.lr_scheduler[name](o, optsf(a, b))
    for _ = 1, 5 do o:step(); s:step() end
    return o
  end, {"2", "3"})
end
SCH("ExponentialLR", function(a) return {gamma = a} end)
SCH("ConstantLR", function(a, b) return {factor = a, total_iters = b} end)
SCH("PolynomialLR", function(a, b) return {total_iters = a, power = b} end)
SCH("CosineAnnealingWarmRestarts", function(a, b) return {T_0 = a, T_mult = b} end)
SCH("CosineAnnealingLR", function(a, b) return {T_max = a, eta_min = b} end)
SCH("LinearLR", function(a, b) return {start_factor = a, total_iters = b} end)
SCH("CyclicLR", function(a, b) return {base_lr = 0.01, max_lr = 0.1, step_size_up = a, step_size_down = b} end)
S("sched.StepLR", function(a, b) local o = zorch.optim.SGD({zorch.randn(3, {requires_grad = true})}, {lr = 0.1}); local s = zorch.optim.lr_scheduler.StepLR(o, a, b); for _ = 1, 5 do o:step(); s:step() end return o end, {"2", "3"})
SCH("OneCycleLR", function(a, b) return {max_lr = 0.1, total_steps = a, pct_start = b} end)

-- enumerate calls: per spec, (1) each position mutated through every kind, (2) random pairs
local byname = {}
for _, k in ipairs(kinds) do byname[k[1]] = k end
local calls = {}
math.randomseed(7)
for _, sp in ipairs(specs) do
  local base = {}
  for i, b in ipairs(sp.base) do base[i] = assert(byname[b], b) end
  calls[#calls+1] = {sp, base}
  for pos = 1, #base do
    for _, k in ipairs(kinds) do
      local a = {table.unpack(base)}; a[pos] = k
      calls[#calls+1] = {sp, a}
    end
  end
  for _ = 1, 60 do
    local a = {table.unpack(base)}
    for pos = 1, #base do if math.random() < 0.5 then a[pos] = kinds[math.random(#kinds)] end end
    calls[#calls+1] = {sp, a}
  end
end
if arg[3] == "count" then print(#calls) return end

local function desc(c)
  local t = {}
  for i = 1, #c[1].base do t[i] = c[2][i][1] end
  return c[1].name .. "(" .. table.concat(t, ", ") .. ")"
end
local log = io.open(os.getenv("HZ_LOG") or "hostile_ops.cur", "w")
local errs = io.open(os.getenv("HZ_ERRS") or "hostile_ops.errs", "a")
for i = START, math.min(STOP, #calls) do
  local c = calls[i]
  log:seek("set"); log:write(("%d %s\n"):format(i, desc(c))); log:flush()
  local ok, args = pcall(function()
    local a = {n = #c[2]}
    for j, k in ipairs(c[2]) do a[j] = make(k) end
    return a
  end)
  if ok then
    local ok2, r = pcall(c[1].f, table.unpack(args, 1, args.n))
    if not ok2 then
      errs:write(("%d\t%s\t%s\n"):format(i, desc(c), tostring(r):gsub("\n", " | ")))
    elseif zorch.is_tensor(r) then
      pcall(function() return r:totable() end)
      pcall(tostring, r)
      if r.requires_grad then
        local okb, eb = pcall(function() r:sum():backward() end)
        if not okb then errs:write(("%d\tBACKWARD %s\t%s\n"):format(i, desc(c), tostring(eb):gsub("\n", " | "))) end
      end
    end
  end
  if i % 2000 == 0 then collectgarbage() end
end
print("done", #calls)
