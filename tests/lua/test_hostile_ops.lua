-- Hostile arguments to the newer ops: sizes, repeats, offsets, pads and steps
-- near 2^63 (refused with a clear error, never an overflowed size), values
-- of the wrong kind where the messages used to come from Lua's internals,
-- a scheduler whose period overflowed, and in-place ops whose other operand
-- requires grad.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
local ok, raises, close = tap.ok, tap.raises, tap.close
local BIG, MIN = math.maxinteger, math.mininteger

-- ---- sizes whose product passes 64 bits ---------------------------------------------------------
local x = zorch.randn(2, 3)
raises("tile: a repeat past 64 bits", function() zorch.tile(x, BIG, 2) end, "tile:", "overflow 64 bits", "(2, 3)")
raises("tile: of an empty tensor too", function() zorch.tile(zorch.zeros(0, 3), {2, BIG // 2}) end,
       "tile:", "overflow 64 bits")
raises("repeat: a repeat past 64 bits", function() zorch["repeat"](x, 2, BIG) end, "repeat:", "overflow 64 bits")
raises("repeat (method): a table of repeats", function() x["repeat"](x, {BIG, 2}) end, "repeat:", "overflow 64 bits")
raises("repeat_interleave: repeats past 64 bits", function() zorch.repeat_interleave(x, BIG, 1) end,
       "repeat_interleave:", "overflow 64 bits", "(2, 3)")
raises("unflatten: sizes multiplying past 64 bits", function() zorch.unflatten(x, 2, {BIG, 2}) end,
       "unflatten:", "past 64 bits", "(2, 3)")
raises("diag: an offset past 64 bits", function() zorch.diag(zorch.tensor({1, 2}), BIG) end, "diag:", "past 64 bits")
raises("diag: the most negative offset", function() zorch.diag(zorch.tensor({1, 2}), MIN) end, "diag:", "past 64 bits")
ok(zorch.diag(x, MIN):numel() == 0 and zorch.diag(x, BIG):numel() == 0,
   "diag of a matrix: extreme offsets give empty diagonals")
raises("pad: the most negative pad", function() zorch.pad(x, {MIN, 1}) end, "pad:", "crop more than dim")
raises("pad: two huge crops", function() zorch.pad(x, {MIN + 1, MIN + 1}) end, "pad:", "crop more than dim")
raises("pad: circular, the most negative pad", function() zorch.pad(x:view(1, 2, 3), {MIN, 0}, "circular") end,
       "pad:", "crop more than dim")
close(zorch.pad(x, {-1, -1}), x:narrow(2, 2, 1), 0, "pad: crops within the dim still work")
raises("linspace: steps whose buffer overflows", function() zorch.linspace(0, 1, BIG) end,
       "linspace:", "too many")
raises("logspace: likewise", function() zorch.logspace(0, 1, BIG) end, "logspace:", "too many")

-- ---- integer clamps with bounds outside the dtype --------------------------------------------------
-- A bound that cannot bind is dropped (PyTorch's); the kernel used to convert
-- it to the dtype, so uint8's min -1 became 255 and clamped everything to it.
local u8 = zorch.tensor({1, 5, 200}):byte()
close(zorch.clamp(u8, -1, 3), zorch.clamp(u8, 0, 3), 0, "clamp: uint8 with min -1 is min 0")
close(zorch.clamp(u8, 1, 300), zorch.clamp(u8, 1, 255), 0, "clamp: uint8 with max 300 is max 255")
close(zorch.clamp_min(u8, -1), u8, 0, "clamp_min: uint8 with min -1 changes nothing")
close(zorch.hardtanh(u8, -1, 3), zorch.clamp(u8, 0, 3), 0, "hardtanh: uint8 with min_val -1")
ok(zorch.hardtanh(u8, -1, 3):dtype() == "uint8", "hardtanh: and stays uint8")
local i32 = zorch.tensor({-7, 5}):int()
close(zorch.clamp(i32, -2 ^ 40 | 0, 2 ^ 40 | 0), i32, 0, "clamp: int32 with bounds past its range changes nothing")
local i64 = zorch.tensor({MIN, BIG})
close(zorch.clamp(i64, MIN, BIG), i64, 0, "clamp: int64 between its extremes changes nothing")
do local y = u8:clone(); y:clamp_(-1, 3); close(y, zorch.clamp(u8, 0, 3), 0, "clamp_: uint8 with min -1") end
raises("clamp: a min above uint8's range", function() zorch.clamp(u8, 300) end, "clamp: min 300 is outside the range of uint8")
raises("clamp_max: a max below uint8's range", function() zorch.clamp_max(u8, -1) end,
       "max -1 is outside the range of uint8")
raises("clamp: int32 min past its range", function() zorch.clamp(i32, 2 ^ 40 | 0) end, "outside the range of int32")
raises("clamp: int64 min 2^63 (a float)", function() zorch.clamp(i64, 2 ^ 63) end, "outside the range of int64")
raises("hardtanh: uint8 min_val past its range", function() zorch.hardtanh(u8, 256, 300) end,
       "hardtanh: min 256 is outside the range of uint8")

-- ---- integer numbers beside integer tensors ----------------------------------------------------------
-- The scalar kernels take a double: an int64 past 2^53 was rounded (1 * (2^62 + 1)
-- gave 2^62) and a number past int32's or uint8's range had no defined
-- conversion. Each must equal the same op with the number as an int64 tensor
-- (exact) or brought into the dtype's range (two's complement arithmetic).
do
  local B = (1 << 62) + 1
  local t, tb = zorch.tensor({1, 5, -3}), zorch.tensor(B)
  close(t * B, t * tb, 0, "int64 * (2^62 + 1) is exact")
  close(B * t, tb * t, 0, "(2^62 + 1) * int64 is exact")
  close(t + B, t + tb, 0, "int64 + (2^62 + 1) is exact")
  close(t - B, t - tb, 0, "int64 - (2^62 + 1) is exact")
  close(B - t, tb - t, 0, "(2^62 + 1) - int64 is exact")
  close(t ^ BIG, t ^ zorch.tensor(BIG), 0, "int64 ^ maxinteger is exact")
  close(t ^ B, t ^ tb, 0, "int64 ^ (2^62 + 1) is exact")
  local i32 = zorch.tensor({1, 5, -3}):int()
  close(i32 * ((1 << 32) + 3), i32 * 3, 0, "int32 * (2^32 + 3) wraps as int32 * 3")
  close(i32 + (1 << 32), i32, 0, "int32 + 2^32 wraps to itself")
  ok((i32 * (1 << 40)):dtype() == "int32", "and stays int32")
  local u8 = zorch.tensor({1, 5, 200}):byte()
  close(u8 + (-1), u8 + 255, 0, "uint8 + -1 wraps as uint8 + 255")
  close(u8 * 256, u8 * 0, 0, "uint8 * 256 wraps as uint8 * 0")
  close(u8 - 300, u8 - 44, 0, "uint8 - 300 wraps as uint8 - 44")
  raises("int64 to a huge negative power is still an error", function() return t ^ -(1 << 60) end,
         "integers to negative integer powers are not allowed")
end

-- ---- round's decimals past int ---------------------------------------------------------------------
-- 10^decimals overflows (or underflows) long before: every finite value gives
-- NaN, as PyTorch's; the binding used to truncate 2^32 + 1 to 1.
local r = zorch.tensor({1.5, 2.25}, {dtype = "float64"})
for _, d in ipairs({BIG, MIN, 2 ^ 32 + 1 | 0, -(2 ^ 32) + 1 | 0, 2 ^ 31 | 0}) do
  ok(zorch.round(r, d):isnan():all():item(), ("round: decimals %d gives NaN"):format(d))
end

-- ---- in-place ops on an expanded tensor name themselves ----------------------------------------------
for _, name in ipairs({"exp_", "add_", "clamp_", "relu_"}) do
  raises(name .. " on an expanded tensor", function()
    local e = zorch.randn(1, 3):expand(2, 3)
    if name == "add_" then e:add_(1) elseif name == "clamp_" then e:clamp_(0, 1) else e[name](e) end
  end, name .. ": unsupported operation: more than one element")
end

-- ---- a bad argument of an in-place op is named after it ---------------------------------------------
raises("clamp_min_: a tensor as min", function() x:clone():clamp_min_(zorch.zeros(1)) end,
       "bad argument #2 to 'clamp_min_' (number expected, got zorch.Tensor)")
raises("leaky_relu_: a table as negative_slope", function() x:clone():leaky_relu_({}) end,
       "bad argument #2 to 'leaky_relu_' (number expected, got table)")
ok(x:clone():clamp_min_(0):min():item() >= 0, "clamp_min_ still returns its tensor")

-- ---- values of the wrong kind ------------------------------------------------------------------
raises("add_ with alpha: a table as other", function() x:clone():add_({1}, 2) end,
       "add_: other must be a tensor or a number, got table")
raises("sub_ with alpha: a file as other", function() x:clone():sub_(io.stdout, 2) end,
       "sub_: other must be a tensor or a number, got userdata")
raises("chunk: a table as dim", function() zorch.chunk(x, 2, {}) end, "chunk: dim table out of range for a 2-d tensor")
raises("chunk: dim out of range names chunk", function() zorch.chunk(x, 2, 3) end, "chunk: dim 3 out of range")
raises("split: a table as dim", function() zorch.split(x, 1, {}) end, "split: dim table out of range")
raises("rms_norm: a table inside normalized_shape", function() zorch.rms_norm(x, {{}}) end,
       "rms_norm: normalized_shape (table) must be the last dims of input (2, 3)")
raises("nn.Unflatten: a table inside sizes", function() nn.Unflatten(2, {{}, 3}) end,
       "nn.Unflatten: sizes must be a list of integers", "{table, 3}")
raises("trunc_normal_: a tensor as mean", function() nn.init.trunc_normal_(zorch.empty(3), zorch.zeros(1)) end,
       "nn.init.trunc_normal_: mean must be a number, got userdata")
raises("trunc_normal_: a string as b", function() nn.init.trunc_normal_(zorch.empty(3), 0, 1, -2, "2") end,
       "nn.init.trunc_normal_: b must be a number, got string")

raises("cosine_similarity: dim out of range names it", function() zorch.cosine_similarity(x, x, {dim = BIG}) end,
       "cosine_similarity: dim 9223372036854775807 out of range for input (2, 3)")
raises("normalize: dim out of range names it", function() zorch.normalize(x, {dim = -3}) end,
       "normalize: dim -3 out of range for input (2, 3)")
close(zorch.normalize(zorch.tensor(2.0), {dim = -1}), zorch.normalize(zorch.tensor({2.0}), {dim = 1}):reshape({}), 0,
      "normalize: a 0-d input has dim -1")
do
  local logits, targets = zorch.randn(2, 3), zorch.tensor({1, 3})
  raises("cross_entropy: a number as reduction", function() zorch.cross_entropy(logits, targets, {reduction = 0}) end,
         "cross_entropy: reduction must be \"mean\", \"sum\" or \"none\", got 0")
  raises("cross_entropy: a float ignore_index", function() zorch.cross_entropy(logits, targets, {ignore_index = 2.5}) end,
         "cross_entropy: ignore_index must be an integer, got 2.5")
  close(zorch.cross_entropy(logits, targets, {ignore_index = 3.0}), zorch.cross_entropy(logits, targets, {ignore_index = 3}),
        0, "cross_entropy: an integral float ignore_index still works")
end

-- 4 gates times 2^62 rows wrapped to 0: empty weights instead of an error
for _, name in ipairs({"LSTM", "GRU", "RNN", "LSTMCell", "GRUCell", "RNNCell"}) do
  raises("nn." .. name .. ": a hidden_size whose gate rows pass 2^63", function() nn[name](3, 1 << 62) end,
         "nn." .. name .. ": hidden_size 4611686018427387904 is too large")
end

-- ---- CosineAnnealingWarmRestarts: a T_mult whose powers pass 2^63 ---------------------------------
do
  local p = zorch.zeros(1, {requires_grad = true})
  local o = optim.SGD({p}, {lr = 0.1})
  local s = optim.lr_scheduler.CosineAnnealingWarmRestarts(o, {T_0 = 2, T_mult = BIG})
  -- an instruction budget turns the old endless loop into an error
  debug.sethook(function() error("instruction budget spent", 2) end, "", 1e8)
  local good, err = pcall(function() for _ = 1, 6 do o:step(); s:step() end end)
  debug.sethook()
  ok(good, "CosineAnnealingWarmRestarts with T_mult = maxinteger steps" .. (good and "" or (": " .. tostring(err))))
  ok(o.lr == o.lr and o.lr > 0 and o.lr <= 0.1, "and its lr stays within [eta_min, base]")
end

-- ---- atan2's gradient at the origin: 0, as PyTorch's (golden/gen_hostile.py) ---------------------
do
  local G = {}
  for line in io.lines("golden/hostile.txt") do
    local key, vals = line:match("^(%S+)%s+(.*)$")
    if key:match("^fill%.") or key:match("^arith%.") or key:match("^cast%.") or key:match("^matmul%.") then
      goto next
    end
    local t = {}
    for w in vals:gmatch("%S+") do t[#t + 1] = tonumber(w) end
    G[key] = zorch.tensor(t, {dtype = "float64"})
    ::next::
  end
  local a = G["atan2_origin.a"]:clone():requires_grad_()
  local b = G["atan2_origin.b"]:clone():requires_grad_()
  zorch.atan2(a, b):sum():backward()
  close(a.grad, G["atan2_origin.ga"], 0, "atan2: the gradient to a at the origin and where a^2 + b^2 underflows")
  close(b.grad, G["atan2_origin.gb"], 0, "atan2: the gradient to b there")
end

-- ---- OneCycleLR: epochs x steps_per_epoch wrapped to a small total_steps -----------------------------
do
  local o = optim.SGD({zorch.zeros(1, {requires_grad = true})}, {lr = 0.1})
  raises("OneCycleLR: epochs x steps_per_epoch past 2^63", function()
    optim.lr_scheduler.OneCycleLR(o, {max_lr = 1, epochs = BIG, steps_per_epoch = BIG})
  end, "OneCycleLR: epochs (9223372036854775807) times steps_per_epoch (9223372036854775807) overflows 64 bits")
end

-- ---- in-place ops whose other operand requires grad -----------------------------------------------
-- x:op_(w) reads x for w's gradient; the write must not invalidate what the op saved.
for _, c in ipairs({
  {"mul_", function(a, w) return a:mul_(w) end, function(a, w) return a * w end},
  {"div_", function(a, w) return a:div_(w) end, function(a, w) return a / w end},
  {"atan2_", function(a, w) return a:atan2_(w) end, function(a, w) return zorch.atan2(a, w) end},
  {"maximum_", function(a, w) return a:maximum_(w) end, function(a, w) return zorch.maximum(a, w) end},
  {"lerp_", function(a, w) return a:lerp_(w, 0.25) end, function(a, w) return zorch.lerp(a, w, 0.25) end},
}) do
  local name, inplace, plain = c[1], c[2], c[3]
  zorch.manual_seed(3)
  local a0 = zorch.randn(2, 3)
  local w1 = zorch.randn(2, 3, {requires_grad = true})
  local w2 = w1:detach():requires_grad_()
  local a = a0:clone()
  inplace(a, w1)
  local good, err = pcall(function() (a * a):sum():backward() end)
  ok(good, name .. ": backward through x:" .. name .. "(w), w requiring grad" .. (good and "" or (": " .. tostring(err))))
  local r = plain(a0, w2)
  ;(r * r):sum():backward()
  close(a, r, 1e-6, name .. ": the values are the out-of-place op's")
  if good then close(w1.grad, w2.grad, 1e-6, name .. ": w's gradient is the out-of-place op's") end
end

-- ---- losses and distances whose arguments do not broadcast: the error names the function ----------
for _, c in ipairs({
  {"kl_div", function(a, b) return zorch.kl_div(a, b) end, "input (3, 4) and target (3, 5)"},
  {"pairwise_distance", function(a, b) return nn.PairwiseDistance()(a, b) end, "x1 (3, 4) and x2 (3, 5)"},
  {"cosine_similarity", function(a, b) return zorch.cosine_similarity(a, b) end, "x1 (3, 4) and x2 (3, 5)"},
}) do
  raises(c[1] .. ": arguments that do not broadcast", function() c[2](zorch.randn(3, 4), zorch.randn(3, 5)) end,
         c[1] .. ": " .. c[3] .. " cannot be broadcast together")
  ok(pcall(c[2], zorch.randn(3, 4), zorch.randn(1, 4)), c[1] .. ": arguments that broadcast are taken")
end

-- ---- integer fills with values the dtype cannot hold: errors, as PyTorch's (golden/gen_hostile.py) ----
do
  local R = {}
  for line in io.lines("golden/hostile.txt") do
    local key, vals = line:match("^(%S+)%s+(.*)$")
    if key:match("^fill%.") or key:match("^arith%.") or key:match("^cast%.") or key:match("^matmul%.") then
      local t = {}
      for w in vals:gmatch("%S+") do t[#t + 1] = math.tointeger(tonumber(w)) or w end
      R[key] = t
    end
  end
  local values = { -- gen_hostile.py's FILL_VALUES
    int64 = {p2_63 = 2.0 ^ 63, inf = math.huge, nan = 0 / 0, m2_63 = -2.0 ^ 63, frac = 1.5, p2_62 = (1 << 62) + 1},
    int32 = {p2_31 = 1 << 31, m2_31m1 = -(1 << 31) - 1, max = (1 << 31) - 1, m1 = -1, big_float = 1e10},
    uint8 = {p300 = 300, m1 = -1, m255 = -255, m256 = -256, p255 = 255, frac = 2.5, nan = 0 / 0, mfrac = -1.5},
  }
  local ops = {
    fill_ = function(dt, v) return zorch.zeros(2, {dtype = dt}):fill_(v) end,
    full = function(dt, v) return zorch.full({2}, v, {dtype = dt}) end,
    masked_fill = function(dt, v) return zorch.zeros(2, {dtype = dt}):masked_fill(zorch.tensor({true, false}), v) end,
    tensor = function(dt, v) return zorch.tensor({v}, {dtype = dt}) end,
    index = function(dt, v) local t = zorch.zeros(2, {dtype = dt}); t[1] = v; return t end,
  }
  for dt, vs in pairs(values) do
    for label, v in pairs(vs) do
      for op, f in pairs(ops) do
        local want = R[("fill.%s.%s.%s"):format(dt, label, op)]
        local good, r = pcall(f, dt, v)
        local name = ("%s of %s with %s"):format(op, dt, label)
        if want[1] == "error" then
          ok(not good and tostring(r):find("cannot be converted to " .. dt, 1, true) ~= nil,
             name .. ": refused, as PyTorch (" .. tostring(r) .. ")")
        else
          local got = good and r:tolist() or {}
          ok(good and got[1] == want[1] and got[#got] == want[#want] and #got == #want,
             name .. ": PyTorch's values (" .. (good and table.concat(got, " ") or tostring(r)) .. ")")
        end
      end
    end
  end
  ok(tostring(select(2, pcall(zorch.tensor, 0 / 0, {dtype = "int64"}))):find("^tensor: value nan") ~= nil,
     "a scalar tensor names tensor and the value")
  -- an integer number beside a uint8 or int32 tensor wraps to its dtype, as PyTorch's
  local u8, i32 = zorch.tensor({1, 200}, {dtype = "uint8"}), zorch.tensor({1, -7}, {dtype = "int32"})
  for name, r in pairs({u8_add_300 = u8 + 300, u8_sub_1 = u8 - 1, u8_mul_257 = u8 * 257,
                        i32_add_2_40 = i32 + (1 << 40), i32_mul_2_32p3 = i32 * ((1 << 32) + 3)}) do
    local want, got = R["arith." .. name], r:tolist()
    ok(r:dtype() == (name:sub(1, 2) == "u8" and "uint8" or "int32") and got[1] == want[1] and got[2] == want[2],
       name .. ": PyTorch's wrapped values (" .. table.concat(got, " ") .. ")")
  end
  -- conversions between integer dtypes are exact and wrap around, as PyTorch's
  local I64 = {300, -1, 70000, (1 << 40) + 5, 3000000000, math.maxinteger, math.mininteger, -129}
  local I32 = {300, -1, 70000, -(1 << 31), (1 << 31) - 1, -129}
  for _, c in ipairs({{"i64_u8", I64, "int64", "uint8"}, {"i64_i32", I64, "int64", "int32"},
                      {"i32_u8", I32, "int32", "uint8"}}) do
    local got, want = zorch.tensor(c[2], {dtype = c[3]}):to(c[4]):tolist(), R["cast." .. c[1]]
    local same = #got == #want
    for i = 1, #want do same = same and got[i] == want[i] end
    ok(same, c[1] .. ": PyTorch's values (" .. table.concat(got, " ") .. ")")
  end
  -- integer matmul: exact, wrapping around in the operands' dtype, as PyTorch's
  for _, c in ipairs({{"i64_2d", "int64"}, {"i64_wrap", "int64"}, {"i32_batched", "int32"}, {"i32_wrap", "int32"},
                      {"u8_wrap", "uint8"}, {"vec_mat", "int64"}, {"mat_vec", "int64"}}) do
    local name, dt = c[1], c[2]
    local function shaped(key, sh)
      local dims = {}
      for w in tostring(sh):gmatch("%d+") do dims[#dims + 1] = tonumber(w) end
      return zorch.tensor(R["matmul." .. name .. "." .. key], {dtype = dt}):view(table.unpack(dims))
    end
    local sh = R["matmul." .. name .. ".shapes"]
    local y = zorch.matmul(shaped("a", sh[1]), shaped("b", sh[2]))
    local got, want = y:reshape(-1):tolist(), R["matmul." .. name .. ".out"]
    local same = y:dtype() == dt and table.concat(y.shape, "x") == tostring(sh[3]) and #got == #want
    for i = 1, #want do same = same and got[i] == want[i] end
    ok(same, ("matmul of %s %s: PyTorch's %s %s"):format(dt, name, sh[3], dt))
  end
  raises("matmul of bool matrices", function()
    zorch.matmul(zorch.ones({2, 2}, {dtype = "bool"}), zorch.ones({2, 2}, {dtype = "bool"}))
  end, "matmul: bool matrices are not supported")
  raises("integer matmul with mismatched sizes", function()
    zorch.matmul(zorch.ones({2, 3}, {dtype = "int64"}), zorch.ones({2, 2}, {dtype = "int64"}))
  end, "matmul: shapes (2, 3) and (2, 2) cannot be multiplied")
end

tap.done()
