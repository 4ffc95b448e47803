-- In-place writes into views against PyTorch: each case of lua/view_writes.txt
-- (from lua/gen_view_writes.py, which documents the programs) is replayed
-- here, and the loss and every leaf's gradient must be PyTorch's (within 1e-6
-- in float64, 1e-5 in float32), or the same step must raise where PyTorch's
-- raised.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok = tap.ok

local G = require("golden")("lua/view_writes.txt")
local fixed, flat = G.fixed, G.flat

local VIEW, WRITE, READ, TERM = 1, 2, 3, 4
local NARROW, SELECT, TRANSPOSE, FLAT, INDEX, VIEW2, PERMUTE, DIAGONAL = 1, 2, 3, 4, 5, 6, 7, 8
local COPY, ADD, MUL, FILL, ZERO, MASKED, SETITEM, SETRANGE = 1, 2, 3, 4, 5, 6, 7, 8
local LEAF, COMPUTED = 1, 3
local B_CONST, B_HIST, B_LEAF = 0, 1, 2
local DTYPES = {[64] = "float64", [32] = "float32"}
local SIZES = {[VIEW] = 8, [WRITE] = 8, [READ] = 4, [TERM] = 2}

local function view_op(t, op, a, b, c)
  if op == NARROW then return t:narrow(a + 1, b + 1, c) end
  if op == SELECT then return t:select(a + 1, b + 1) end
  if op == TRANSPOSE then return t:transpose(a + 1, b + 1) end
  if op == FLAT then return t:view(-1) end
  if op == INDEX then return t[a + 1] end
  if op == VIEW2 then return t:view(a, -1) end
  if op == PERMUTE then return t:permute(a + 1, b + 1, c + 1) end
  if op == DIAGONAL then return zorch.diagonal(t, a, b + 1, c + 1) end
  return t:unsqueeze(a + 1)
end

local function shape_of(t)
  local s = {}
  for i = 1, #t.shape do s[i] = t.shape[i] end
  return s
end
local function tail(s, from) return {table.unpack(s, from)} end

-- Runs one case; returns the step that raised (0: the loss or its backward)
-- and its error, or nil, the loss and the leaves by key.
local function replay(want)
  local base = want.base
  local kind, dtype = math.tointeger(base[1]), DTYPES[math.tointeger(base[2])]
  local x = fixed(tail(base, 4), 1):to(dtype):clone()
  local leaves, views, terms, reads = {}, {}, {}, {}
  if kind ~= B_CONST then
    x:requires_grad_(true)
    leaves[1] = x
  end
  views[0] = (kind == B_CONST or kind == B_LEAF) and x or kind == B_HIST and x * 1.5 or x:exp()
  local function value(vk, seed, shape)
    local v = fixed(shape, seed):to(dtype)
    if vk == LEAF or vk == COMPUTED then
      v:requires_grad_(true)
      leaves[seed] = v
    end
    return vk == COMPUTED and v * 2 - 1 or v
  end
  local function write(t, op, vk, seed, bcast, p, q)
    local s = shape_of(t)
    if op == SETITEM or op == SETRANGE then
      local rest = tail(s, 2)
      local vs = bcast == 1 and {rest[#rest]} or op == SETITEM and rest or {q - p, table.unpack(rest)}
      if op == SETITEM then t[p + 1] = value(vk, seed, vs) else t[{{p + 1, q}}] = value(vk, seed, vs) end
    elseif op == COPY or op == ADD or op == MUL then
      local v = value(vk, seed, bcast == 1 and {s[#s]} or s)
      if op == COPY then t:copy_(v) elseif op == ADD then t:add_(v) else t:mul_(v) end
    elseif op == FILL then t:fill_(p)
    elseif op == ZERO then t:zero_()
    else t:masked_fill_(fixed(s, seed):gt(0), p) end
  end
  local prog, i, step = want.prog, 1, 0
  while i <= #prog do
    local tk = {}
    for k = i, i + SIZES[prog[i]] - 1 do tk[#tk + 1] = math.tointeger(prog[k]) or prog[k] end
    i = i + #tk
    local okk, err = true, nil
    if tk[1] == TERM then
      terms[#terms + 1] = tk[2]
    else
      step = step + 1
      if tk[1] == VIEW then
        okk, err = pcall(function()
          local function make() views[tk[2]] = view_op(views[tk[3]], tk[5], tk[6], tk[7], tk[8]) end
          if tk[4] == 1 then zorch.no_grad(make) else make() end
        end)
      elseif tk[1] == WRITE then
        okk, err = pcall(write, views[tk[2]], tk[3], tk[4], tk[5], tk[6], tk[7], tk[8])
      else
        okk, err = pcall(function()
          local t = views[tk[2]]
          reads[#reads + 1] = tk[3] == 0 and t * 2 or tk[3] == 1 and t * value(LEAF, tk[4], shape_of(t)) or t:exp()
        end)
      end
      if not okk then return step, err end
    end
  end
  local all = {views[0]}
  for _, v in ipairs(terms) do all[#all + 1] = views[v] end
  for _, r in ipairs(reads) do all[#all + 1] = r end
  local loss
  local okk, err = pcall(function()
    for _, t in ipairs(all) do
      local c = (zorch.arange(t:numel(), {dtype = dtype}) * 0.1 + 1):reshape(shape_of(t))
      local term = (t * c):sum()
      loss = loss and loss + term or term
    end
    loss:backward()
  end)
  if not okk then return 0, err end
  return nil, loss, leaves
end

-- |got - want| <= tol * max(1, |want|) over every element
local function matches(got, exp, tol)
  local g = flat(got)
  if #g ~= #exp then return false, math.huge end
  local worst = 0
  for k = 1, #g do
    local e = math.abs(g[k] - exp[k]) / math.max(1, math.abs(exp[k]))
    if e ~= e then e = math.huge end
    worst = math.max(worst, e)
  end
  return worst <= tol, worst
end

local names = {}
for name in pairs(G.want) do names[#names + 1] = name end
table.sort(names, function(a, b) return tonumber(a:match("%d+")) < tonumber(b:match("%d+")) end)
local counts = {grads = 0, raises = 0}
for _, name in ipairs(names) do
  local want = G.want[name]
  local raised, got, leaves = replay(want)
  local tol = math.tointeger(want.base[2]) == 32 and 1e-5 or 1e-6
  if want.raise then
    counts.raises = counts.raises + 1
    local at = math.tointeger(want.raise[1])
    ok(raised == at, ("%s: raises at step %d as PyTorch does (zorch: %s)"):format(name, at,
       raised and ("step " .. raised .. ": " .. tostring(got)) or "no error"))
  elseif raised then
    ok(false, ("%s: raised at step %d where PyTorch did not: %s"):format(name, raised, tostring(got)))
  else
    counts.grads = counts.grads + 1
    local good, worst = matches(got, want.out, tol)
    for key, exp in pairs(want) do
      local k = type(key) == "string" and tonumber(key:match("^g(%d+)$"))
      if k then
        local g = leaves[k] and leaves[k].grad
        local gg, w = matches(g or zorch.zeros(#exp, {dtype = "float64"}), exp, tol)
        good, worst = good and gg, math.max(worst, w)
      end
    end
    ok(good, ("%s: the loss and every leaf's gradient are PyTorch's (worst %.2g)"):format(name, worst))
  end
end
ok(counts.grads >= 100 and counts.raises >= 20,
   ("the file has cases of both kinds (%d compared, %d raising)"):format(counts.grads, counts.raises))

tap.done()
