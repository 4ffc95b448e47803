-- kernels.lua SEED NCASES OUT.safetensors [OP]: differential cases for the
-- vectorised CPU kernels. From SEED it draws NCASES cases (an op, a dtype, a
-- shape, a layout and values with hard spots), runs each on 1 and on 2 threads
-- (in a drawn order), and writes the inputs, the outputs and the gradients
-- with a description of every case to OUT; kernels.py recomputes them with
-- PyTorch. OP keeps one op family (see FAMILIES). Each case's description is
-- written to stdout before it runs, so that a crash names its case.
local seed, ncases, out_path, only = tonumber(arg[1]), tonumber(arg[2]), arg[3], arg[4]
assert(seed and ncases and out_path, "usage: kernels.lua SEED NCASES OUT.safetensors [OP]")
math.randomseed(seed)
zorch.manual_seed(seed)
local R = math.random

local function pick(t) return t[R(#t)] end
local function numel(s) local n = 1 for _, v in ipairs(s) do n = n * v end return n end
local function copy(t) local o = {} for k, v in pairs(t) do o[k] = v end return o end

-- sizes around the vector widths (16 floats, 32 halves), the blocks and the tails
local EDGE = {1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 257, 1023, 1024, 1025, 2049, 4097}
local LIMIT = 300000 -- elements of the largest input

-- A shape of nd dims whose last is an edge size; sometimes a dim of 0 and
-- sometimes a row longer than a cache block. opts.big: sometimes past the
-- memory-bound loops' threading threshold (524288 elements, ops/cpu/cpu.h).
local function shape(nd, opts)
  opts = opts or {}
  if opts.big and nd > 0 and R(8) == 1 then
    local s = {}
    for i = 1, nd do s[i] = 1 end
    if nd == 1 then s[1] = pick({600001, 1048576})
    else s[nd], s[nd - 1] = pick({1023, 1024, 1025}), pick({600, 1000}) end
    return s
  end
  local s = {}
  for i = 1, nd do s[i] = pick({1, 2, 3, 4, 5, 7, 9}) end
  if nd > 0 then s[nd] = pick(EDGE) end
  if nd > 0 and R(12) == 1 then s[nd] = pick({8193, 16384, 20001, 70001}) end
  if nd > 1 and R(6) == 1 then s[nd - 1] = pick(EDGE) end
  while numel(s) > LIMIT do
    local i = R(nd)
    s[i] = math.max(1, s[i] // 2)
  end
  if not opts.no_empty and nd > 0 and R(30) == 1 then s[R(nd)] = 0 end
  return s
end

-- ---- values -------------------------------------------------------------------------------
local BIG = {float32 = 1e30, bfloat16 = 1e30, float16 = 2e4}
local TINY = {float32 = 1e-30, bfloat16 = 1e-30, float16 = 1e-4}
local SUB = {float32 = 1e-40, bfloat16 = 1e-40, float16 = 1e-6}
local SPECIAL = {0 / 0, math.huge, -math.huge, 0.0, -0.0}

-- float32 values of shape s, of a drawn kind, then in dtype dt; kind is
-- returned for the description
local function values(s, dt, kind)
  local x = zorch.randn(s)
  kind = kind or pick({"normal", "normal", "normal", "normal", "big", "tiny", "subnormal", "offset",
                       "const", "wide", "special", "special"})
  if kind == "big" then x = x * BIG[dt]
  elseif kind == "tiny" then x = x * TINY[dt]
  elseif kind == "subnormal" then x = x * SUB[dt]
  elseif kind == "offset" then x = x + (dt == "float16" and 100 or 1000)
  elseif kind == "const" then x = zorch.zeros(s) + (R() * 4 - 2)
  elseif kind == "wide" then x = x * 30
  elseif kind == "f16max" then x = x * 3e4
  elseif kind == "masked" then x = zorch.where(zorch.rand(s):lt(0.4), zorch.full(s, -math.huge), x) end
  local n = numel(s)
  if kind == "special" and n > 0 then
    x = x:contiguous()
    local flat = x:view({n})
    for _ = 1, R(3) do flat[R(n)] = pick(SPECIAL) end
  end
  return x:to(dt), kind
end

-- ---- layouts: a base tensor and the view ops that give the input -------------------------
-- A layout is a list of {op, ...} with 0-based dims, applied in order to the
-- base (kernels.py applies the same): t d1 d2 (transpose), step d (every
-- second element along d), narrow d start len, expand d size.
local function make_layout(s)
  local nd = #s
  local kinds = {"contig", "contig", "contig"}
  if nd >= 2 then kinds[#kinds + 1] = "t" end
  if nd >= 1 then kinds[#kinds + 1] = "step"; kinds[#kinds + 1] = "narrow"; kinds[#kinds + 1] = "expand" end
  local k = pick(kinds)
  local base = copy(s)
  if k == "t" then
    local d1 = R(nd) - 1
    local d2 = R(nd) - 1
    if d1 == d2 then d2 = (d1 + 1) % nd end
    base[d1 + 1], base[d2 + 1] = s[d2 + 1], s[d1 + 1]
    return base, {{"t", d1, d2}}
  elseif k == "step" then
    local d = R(nd) - 1
    base[d + 1] = s[d + 1] * 2
    return base, {{"step", d}}
  elseif k == "narrow" then
    local d = R(nd) - 1
    base[d + 1] = s[d + 1] + 1
    return base, {{"narrow", d, 1, s[d + 1]}}
  elseif k == "expand" then
    local d = R(nd) - 1
    base[d + 1] = 1
    return base, {{"expand", d, s[d + 1]}}
  end
  return base, {}
end

local function apply_layout(b, layout)
  for _, l in ipairs(layout) do
    if l[1] == "t" then b = b:transpose(l[2] + 1, l[3] + 1)
    elseif l[1] == "step" then
      local d, sz = l[2], b.shape
      local vs = {}
      for i = 1, #sz do
        if i == d + 1 then vs[#vs + 1] = sz[i] // 2; vs[#vs + 1] = 2 else vs[#vs + 1] = sz[i] end
      end
      -- a view of a contiguous base; otherwise reshape copies, and the values are the same
      b = b:reshape(vs):select(d + 2, 1)
    elseif l[1] == "narrow" then b = b:narrow(l[2] + 1, l[3] + 1, l[4])
    elseif l[1] == "expand" then
      local sz = copy(b.shape)
      sz[l[2] + 1] = l[3]
      b = b:expand(sz)
    end
  end
  return b
end

-- An input of shape s: its base (a leaf, requiring grad when grad is set),
-- the layout and its kind of values.
local function input(s, dt, grad, kind)
  local bs, layout = make_layout(s)
  local base, vk = values(bs, dt, kind)
  if grad then base:requires_grad_(true) end
  return {base = base, layout = layout, kind = vk}
end

-- ---- the op families ----------------------------------------------------------------------
-- Each returns a case: {op, dtype, args (for the description and kernels.py),
-- ins = {name = input}, run = function(ins' views) -> output tensor}. The
-- runner adds the cotangent, the outputs and the gradients.
local FLOATS = {"float32", "float32", "bfloat16", "float16"}
local FAMILIES = {}

function FAMILIES.softmax()
  local dt, nd = pick(FLOATS), R(5) - 1
  local s = shape(nd)
  local dim = nd == 0 and 0 or (R(3) == 1 and R(nd) - 1 or nd - 1)
  local op = pick({"softmax", "log_softmax"})
  local kind = R(8) == 1 and (dt == "float16" and "f16max" or "wide") or R(8) == 1 and "masked" or nil
  return {op = op, dtype = dt, args = {dim = dim}, ins = {x = input(s, dt, true, kind)},
          run = function(v) return zorch[op](v.x, dim + 1) end}
end

function FAMILIES.layer_norm()
  local dt, nd = pick(FLOATS), 1 + R(3)
  local s = shape(nd, {no_empty = R(2) == 1})
  local k = R(3) == 1 and 2 or 1
  local ns = {}
  for i = nd - k + 1, nd do ns[#ns + 1] = s[i] end
  local affine = pick({"wb", "w", "none"})
  local eps = pick({1e-5, 1e-5, 1e-12, 0.1})
  local ins = {x = input(s, dt, true)}
  if affine ~= "none" then ins.w = {base = (zorch.randn(ns) * 0.5 + 1):to(dt):requires_grad_(true), layout = {}} end
  if affine == "wb" then ins.b = {base = zorch.randn(ns):to(dt):requires_grad_(true), layout = {}} end
  return {op = "layer_norm", dtype = dt, args = {shape = ns, eps = eps}, ins = ins,
          run = function(v) return zorch.layer_norm(v.x, ns, v.w, v.b, eps) end}
end

function FAMILIES.gelu()
  local dt = pick(FLOATS)
  local s = shape(R(4) - 1, {big = true})
  local approx = pick({"none", "tanh"})
  return {op = "gelu", dtype = dt, args = {approximate = approx}, ins = {x = input(s, dt, true, R(4) == 1 and "wide" or nil)},
          run = function(v) return approx == "tanh" and zorch.gelu(v.x, "tanh") or zorch.gelu(v.x) end}
end

function FAMILIES.reduce()
  local dt, nd = pick(FLOATS), R(5) - 1
  local s = shape(nd, {big = true})
  local op = pick({"sum", "mean"})
  local dims, keep = nil, R(2) == 1
  if nd > 0 and R(4) > 1 then
    dims = {}
    for d = 0, nd - 1 do if R(2) == 1 then dims[#dims + 1] = d end end
    if #dims == 0 then dims = {R(nd) - 1} end
  end
  local ins = {x = input(s, dt, true, R(5) == 1 and pick({"offset", "f16max"}) or nil)}
  return {op = op, dtype = dt, args = {dims = dims or "all", keepdim = keep}, ins = ins,
          run = function(v)
            if not dims then return zorch[op](v.x) end
            local d1 = {}
            for i, d in ipairs(dims) do d1[i] = d + 1 end
            return zorch[op](v.x, d1, keep)
          end}
end

-- 16-bit (and float32) elementwise ops with a one-pass AVX-512 loop
local BINARY = {"add", "sub", "mul", "div"}
local UNARY = {"neg", "relu", "add_s", "mul_s", "rsub_s", "clamp"}
function FAMILIES.elementwise()
  local dt, nd = pick({"bfloat16", "float16", "bfloat16", "float16", "float32"}), R(4) - 1
  local s = shape(nd, {big = true})
  if R(2) == 1 then
    local op = pick(BINARY)
    local sb = copy(s)
    if nd > 0 and R(3) == 1 then sb[R(nd)] = 1 end -- broadcast
    if nd > 0 and R(4) == 1 then table.remove(sb, 1) end
    return {op = op, dtype = dt, args = {}, ins = {x = input(s, dt, true), y = input(sb, dt, true)},
            run = function(v) return zorch[op](v.x, v.y) end}
  end
  local op, p0, p1 = pick(UNARY), R() * 4 - 2, R() * 4
  return {op = op, dtype = dt, args = {p0 = p0, p1 = p1}, ins = {x = input(s, dt, true)},
          run = function(v)
            if op == "add_s" then return v.x + p0
            elseif op == "mul_s" then return v.x * p0
            elseif op == "rsub_s" then return p0 - v.x
            elseif op == "clamp" then return zorch.clamp(v.x, p0, p0 + p1) end
            return zorch[op](v.x)
          end}
end

function FAMILIES.cross_entropy()
  local dt = pick(FLOATS)
  local n, c = pick({1, 2, 3, 5, 17, 64}), R(10) == 1 and pick({8193, 20001}) or pick(EDGE)
  if n * c > LIMIT then n = math.max(1, LIMIT // c) end
  local opts = {reduction = pick({"mean", "sum", "none"})}
  if R(3) == 1 then opts.ignore_index = R(c) - 1 end
  if R(3) == 1 then opts.label_smoothing = pick({0.1, 0.5}) end
  local tg = zorch.randint(0, c - 1, {n})
  if opts.ignore_index and n > 1 then tg[1] = opts.ignore_index end
  local cw = R(4) == 1 and (zorch.rand({c}) + 0.1):to(dt) or nil -- class weights
  local zopts = copy(opts)
  if zopts.ignore_index then zopts.ignore_index = zopts.ignore_index + 1 end
  zopts.weight = cw
  opts.weight = cw and "cw" or nil
  local kind = R(6) == 1 and "masked" or nil
  return {op = "cross_entropy", dtype = dt, args = opts, ins = {x = input({n, c}, dt, true, kind)}, targets = tg, cw = cw,
          run = function(v) return zorch.cross_entropy(v.x, tg + 1, zopts) end}
end

-- contiguous() of a transposed (or otherwise strided) view: a copy, exact
function FAMILIES.contiguous()
  local dt, nd = pick({"float32", "bfloat16", "float16", "float64", "int64", "int32", "uint8", "bool"}), 2 + R(2) - 1
  local s = shape(nd, {big = true})
  if numel(s) <= LIMIT and R(2) == 1 then s[nd - 1] = pick(EDGE) end
  while numel(s) > LIMIT * 4 do s[R(nd)] = math.max(1, s[R(nd)] // 2) end
  local bs, layout = make_layout(s)
  if #layout == 0 then
    bs = copy(s)
    bs[nd], bs[nd - 1] = s[nd - 1], s[nd]
    layout = {{"t", nd - 2, nd - 1}}
  end
  local base = (zorch.randn(bs) * 100)
  if dt == "bool" then base = base:gt(0) else base = base:to(dt) end
  local grad = dt == "float32" or dt == "bfloat16" or dt == "float16"
  if grad then base:requires_grad_(true) end
  return {op = "contiguous", dtype = dt, args = {}, ins = {x = {base = base, layout = layout, kind = "normal"}},
          run = function(v) return v.x:contiguous() end, exact = true}
end

function FAMILIES.attention()
  local dt = pick(FLOATS)
  local B, H, D = pick({1, 2}), pick({1, 2, 3}), pick({1, 8, 16, 17, 32, 64, 65})
  local Tq, Tk = pick({1, 2, 15, 16, 17, 33, 64, 65, 129}), nil
  Tk = R(2) == 1 and Tq or pick({1, 3, 16, 17, 64, 65, 200})
  local causal = R(2) == 1
  local scale = R(3) == 1 and R() * 0.5 or nil
  local function qkv(T) return input({B, H, T, D}, dt, true, pick({"normal", "normal", "wide", "tiny", "special"})) end
  return {op = "attention", dtype = dt, args = {causal = causal, scale = scale or "default"},
          ins = {q = qkv(Tq), k = qkv(Tk), v = qkv(Tk)},
          run = function(v) return zorch.attention(v.q:contiguous(), v.k:contiguous(), v.v:contiguous(),
                                                   {causal = causal, scale = scale}) end}
end

function FAMILIES.matmul()
  local dt = pick(FLOATS)
  local n, k, m = pick(EDGE), pick(EDGE), pick(EDGE)
  while n * k > LIMIT // 4 do n = math.max(1, n // 2) end
  while k * m > LIMIT // 4 do m = math.max(1, m // 2) end
  while n * m > LIMIT // 4 do n = math.max(1, n // 2) end
  local batch = R(4) == 1 and {pick({2, 3})} or {}
  local sa, sb = copy(batch), copy(batch)
  sa[#sa + 1] = n; sa[#sa + 1] = k
  sb[#sb + 1] = k; sb[#sb + 1] = m
  local function mk(s)
    local nd = #s
    local kind = pick({"normal", "normal", "tiny"})
    if R(2) == 1 then -- a transposed operand
      local bs = copy(s)
      bs[nd], bs[nd - 1] = s[nd - 1], s[nd]
      local base = values(bs, dt, kind):requires_grad_(true)
      return {base = base, layout = {{"t", nd - 2, nd - 1}}, kind = kind}
    end
    return input(s, dt, true, kind)
  end
  return {op = "matmul", dtype = dt, args = {}, ins = {a = mk(sa), b = mk(sb)},
          run = function(v) return zorch.matmul(v.a, v.b) end}
end

-- linear(x, w, b, act): the GEMM with its bias and activation epilogue
function FAMILIES.linear()
  local dt = pick(FLOATS)
  local n, k, m = pick(EDGE), pick(EDGE), pick(EDGE)
  while n * k > LIMIT // 4 do n = math.max(1, n // 2) end
  while k * m > LIMIT // 4 do m = math.max(1, m // 2) end
  while n * m > LIMIT // 4 do n = math.max(1, n // 2) end
  local sx = R(3) == 1 and {pick({2, 3}), n, k} or {n, k}
  local act = pick({"none", "relu", "gelu", "gelu_tanh"})
  local ins = {x = input(sx, dt, true, pick({"normal", "normal", "wide"})), w = input({m, k}, dt, true, "normal")}
  local bias = R(3) > 1
  if bias then ins.b = input({m}, dt, true, "normal") end
  return {op = "linear", dtype = dt, args = {act = act}, ins = ins,
          run = function(v) return zorch.linear(v.x, v.w, v.b, act ~= "none" and act or nil) end}
end

-- AdamW over one flat parameter: 3 steps with drawn gradients
function FAMILIES.adamw()
  local n = pick({1, 2, 15, 16, 17, 33, 255, 257, 4097, 65537, 100003})
  local o = {lr = pick({1e-3, 0.1}), betas = {0.9, pick({0.999, 0.95})}, eps = pick({1e-8, 1e-6}),
             weight_decay = pick({0, 0.01, 0.1}), amsgrad = R(4) == 1}
  local p0 = zorch.randn({n})
  local gs = {}
  for i = 1, 3 do gs[i] = values({n}, "float32", pick({"normal", "normal", "tiny", "big"})) end
  return {op = "adamw", dtype = "float32", args = o, p0 = p0, grads = gs,
          run_opt = function()
            local p = p0:clone():requires_grad_(true)
            local opt = zorch.optim.AdamW({p}, o)
            for i = 1, 3 do
              p.grad = gs[i]:clone()
              opt:step()
            end
            return p:detach()
          end}
end

local NAMES = {}
for k in pairs(FAMILIES) do NAMES[#NAMES + 1] = k end
table.sort(NAMES)
-- weights: the row kernels and 16-bit loops are drawn more often
local WEIGHT = {softmax = 4, layer_norm = 4, gelu = 3, reduce = 4, elementwise = 4, cross_entropy = 3,
                contiguous = 2, attention = 2, matmul = 2, linear = 2, adamw = 1}
local BAG = {}
for _, k in ipairs(NAMES) do for _ = 1, WEIGHT[k] or 1 do BAG[#BAG + 1] = k end end

-- ---- running a case -------------------------------------------------------------------------
local function describe(i, c)
  local parts = {("case %d %s %s"):format(i, c.op, c.dtype)}
  for _, name in ipairs({"x", "y", "w", "b", "q", "k", "v", "a"}) do
    local inp = c.ins and c.ins[name]
    if inp then
      local l = {}
      for _, op in ipairs(inp.layout) do l[#l + 1] = table.concat(op, ":") end
      parts[#parts + 1] = ("%s=(%s)[%s]%s"):format(name, table.concat(inp.base.shape, ","),
                                                  table.concat(l, " "), inp.kind or "")
    end
  end
  return table.concat(parts, " ")
end

local function run_once(c, cot)
  if c.run_opt then return {y = c.run_opt()} end
  local views = {}
  for name, inp in pairs(c.ins) do
    if inp.base.requires_grad then inp.base.grad = nil end
    views[name] = apply_layout(inp.base, inp.layout)
  end
  local y = c.run(views)
  local r = {y = y:detach()}
  if y.requires_grad then
    y:backward(cot or zorch.randn(y.shape):to(y:dtype()))
    for name, inp in pairs(c.ins) do
      if inp.base.requires_grad then r["g" .. name] = inp.base.grad and inp.base.grad:detach() end
    end
  end
  return r
end

local cases, saved = {}, {}
for i = 1, ncases do
  local fam = only or BAG[R(#BAG)]
  local c = FAMILIES[fam]()
  local desc = describe(i, c)
  io.write(desc, "\n")
  io.flush()
  local order = R(2) == 1 and {1, 2} or {2, 1}
  local rec = {op = c.op, dtype = c.dtype, args = c.args, desc = desc, ins = {}, threads = order}
  local cot
  local ok, res = pcall(function()
    local res = {}
    for _, t in ipairs(order) do
      zorch.set_num_threads(t)
      if not c.run_opt and not cot then
        -- the cotangent, drawn once for both runs
        local probe = zorch.no_grad(function()
          local v = {}
          for name, inp in pairs(c.ins) do v[name] = apply_layout(inp.base, inp.layout) end
          return c.run(v)
        end)
        cot = zorch.randn(probe.shape):to(probe:dtype())
      end
      res[t] = run_once(c, cot)
    end
    return res
  end)
  local key = "c" .. i
  rec.key = key
  if not ok then rec.error = tostring(res) end
  cases[#cases + 1] = rec
  for name, inp in pairs(c.ins or {}) do
    rec.ins[name] = {layout = inp.layout, kind = inp.kind}
    saved[key .. "." .. name] = inp.base:detach():contiguous()
  end
  if c.targets then saved[key .. ".targets"] = c.targets end
  if c.cw then saved[key .. ".cw"] = c.cw end
  if c.p0 then
    saved[key .. ".p0"] = c.p0
    for s, g in ipairs(c.grads) do saved[key .. ".grad" .. s] = g end
  end
  if cot then saved[key .. ".cot"] = cot:contiguous() end
  if ok then
    for t, r in pairs(res) do
      for name, v in pairs(r) do saved[("%s.out%d.%s"):format(key, t, name)] = v:contiguous() end
    end
  end
end
zorch.save({cases = cases, tensors = saved}, out_path)
print(("wrote %d cases to %s"):format(#cases, out_path))
