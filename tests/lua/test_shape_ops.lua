-- Reductions (prod, amax/amin, norm, any/all, count_nonzero, cumprod), shape ops
-- (flip, roll, repeat/tile, repeat_interleave, movedim, unflatten, pad, ...),
-- creation (eye, linspace, logspace, one_hot) and the strict matrix products,
-- against PyTorch's values and gradients in golden/shape_ops.txt
-- (golden/gen_shape_ops.py), on contiguous and transposed inputs, in bfloat16
-- where PyTorch computes it, and their errors.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises, close = tap.ok, tap.raises, tap.close

-- ---- the golden file ------------------------------------------------------------------------
local gold = {}
for line in io.lines("golden/shape_ops.txt") do
  local name, field, shape, rest = line:match("^(%S+) (%S+) (%S+) ?(.*)$")
  local vals, dims = {}, {}
  for v in rest:gmatch("%S+") do vals[#vals + 1] = tonumber(v) or (v == "nan" and 0 / 0) end
  if shape ~= "-" then for s in shape:gmatch("%d+") do dims[#dims + 1] = tonumber(s) end end
  gold[name] = gold[name] or {}
  gold[name][field] = {shape = dims, vals = vals, scalar = shape == "-"}
end

-- The golden field as a float64 tensor.
local function tensor(f)
  if f.scalar then return zorch.tensor(f.vals[1], {dtype = "float64"}) end
  if #f.vals == 0 then return zorch.zeros(f.shape, {dtype = "float64"}) end
  return zorch.tensor(f.vals, {dtype = "float64"}):reshape(f.shape)
end

local function same_shape(t, f)
  local s = t.shape
  if #s ~= #f.shape then return false end
  for i = 1, #s do if s[i] ~= f.shape[i] then return false end end
  return true
end

-- Runs fn on the case's inputs and checks the output and the gradients of
-- sum(y * w). opts: nc = false (no transposed-input run), dtype (inputs in
-- that dtype, tol), grad = false.
local function check(name, fn, opts)
  opts = opts or {}
  local c = assert(gold[name], "no golden case " .. name)
  local dt, tol = opts.dtype or "float64", opts.tol or 1e-10
  for _, nc in ipairs(opts.nc == false and {false} or {false, true}) do
    local leaves, args, transposed, any2d = {}, {}, {}, false
    for i = 1, 9 do
      local f = c["x" .. i]
      if not f then break end
      local t = tensor(f):to(dt)
      if nc and t:dim() >= 2 then -- the same values through a transposed view
        leaves[i] = t:transpose(-1, -2):contiguous():requires_grad_()
        args[i], transposed[i], any2d = leaves[i]:transpose(-1, -2), true, true
      else
        leaves[i] = t:requires_grad_()
        args[i] = leaves[i]
      end
    end
    if nc and not any2d then break end
    local desc = ("%s%s%s"):format(name, nc and " (transposed input)" or "", dt ~= "float64" and " " .. dt or "")
    local y = fn(table.unpack(args))
    ok(same_shape(y, c.y), desc .. ": shape")
    if opts.out_dtype then ok(y:dtype() == opts.out_dtype, desc .. ": dtype " .. y:dtype()) end
    if dt ~= "float64" and opts.out_dtype == nil then
      ok(y:dtype() == dt, desc .. ": keeps " .. dt .. " (got " .. y:dtype() .. ")")
    end
    local want = tensor(c.y)
    if opts.exact then want = want:to(dt):to("float64") end -- an op that only moves values
    close(y:to("float64"), want, tol, desc .. ": values")
    if c.w and opts.grad ~= false then
      y:backward(tensor(c.w):to(y:dtype()))
      for i = 1, #leaves do
        local g = leaves[i].grad
        if transposed[i] then g = g:transpose(-1, -2) end
        close(g:to("float64"), tensor(c["g" .. i]), opts.gtol or tol, desc .. (": gradient of input %d"):format(i))
      end
    end
  end
end

-- ---- prod ----------------------------------------------------------------------------------------
check("prod_all", function(x) return x:prod() end)
check("prod_d1", function(x) return zorch.prod(x, 2) end)
check("prod_dm2_keep", function(x) return x:prod(-2, true) end)
check("prod_zero1", function(x) return x:prod(2) end)
check("prod_zero2", function(x) return x:prod(-1) end)
check("prod_all_zero1", function(x) return x:prod() end)
check("prod_all_zero2", function(x) return x:prod() end)
check("prod_odd", function(x) return x:prod(1) end)
check("prod_empty", function(x) return x:prod(2) end)
check("prod_d1", function(x) return x:prod(2) end, {dtype = "bfloat16", tol = 3e-2, gtol = 5e-2})
check("prod_d1", function(x) return x:prod(-1) end, {dtype = "float16", tol = 5e-3, gtol = 1e-2})
do
  local i = zorch.tensor{{1, 2}, {3, 4}}
  ok(i:prod():dtype() == "int64" and i:prod():item() == 24, "prod of int64: 24 as int64")
  local b = zorch.tensor{{true, false}, {true, true}}
  ok(b:prod(2):dtype() == "int64" and b:prod(2):tolist()[2] == 1, "prod of bool: int64")
  ok(zorch.tensor(3.5):prod():item() == 3.5, "prod of a 0-d tensor")
end

-- ---- amax, amin ------------------------------------------------------------------------------
check("amax_ties_d1", function(x) return x:amax(2) end)
check("amax_dims", function(x) return zorch.amax(x, {1, -1}) end)
check("amin_keep", function(x) return x:amin(-1, true) end)
check("amax_all", function(x) return x:amax() end)
check("amax_ties_d1", function(x) return x:amax(-1) end, {dtype = "bfloat16", tol = 1e-2})

-- ---- norm -------------------------------------------------------------------------------------
check("norm_2", function(x) return x:norm() end)
check("norm_2_d1", function(x) return zorch.norm(x, 2, 2) end)
check("norm_1_dm1_keep", function(x) return x:norm(1, -1, true) end)
check("norm_inf", function(x) return x:norm(math.huge, 2) end)
check("norm_inf", function(x) return x:norm("inf", -1) end)
check("norm_ninf", function(x) return x:norm(-math.huge, 2) end)
check("norm_ninf", function(x) return x:norm("-inf", 2) end)
check("norm_0", function(x) return x:norm(0, 2) end)
check("norm_3", function(x) return x:norm(3) end)
check("norm_1p5_d0", function(x) return x:norm(1.5, 1) end)
check("norm_fro_dims", function(x) return x:norm("fro", {1, 2}) end)
check("norm_2_zero", function(x) return x:norm(2, 2) end)
check("norm_3_zero", function(x) return x:norm(3, -1) end)
check("norm_2", function(x) return x:norm() end, {dtype = "bfloat16", tol = 1e-2, gtol = 3e-2})
check("norm_3", function(x) return x:norm(3) end, {dtype = "float16", tol = 3e-3, gtol = 1e-2})

-- ---- any, all, count_nonzero -----------------------------------------------------------------
check("any_all", function(x) return x:any() end, {out_dtype = "bool"})
check("any_d1", function(x) return zorch.any(x, 2) end, {out_dtype = "bool"})
check("all_all", function(x) return x:all() end, {out_dtype = "bool"})
check("all_dm2_keep", function(x) return x:all(-2, true) end, {out_dtype = "bool"})
check("all_empty", function(x) return x:all(2) end, {out_dtype = "bool"})
check("count_nonzero", function(x) return x:count_nonzero() end, {out_dtype = "int64"})
check("count_nonzero_d1", function(x) return zorch.count_nonzero(x, 2) end, {out_dtype = "int64"})
ok(zorch.tensor({0, 3}, {dtype = "uint8"}):any():dtype() == "uint8", "any of uint8 is uint8, as PyTorch")
ok(zorch.tensor{0 / 0, 0}:any():item() == true, "nan counts as nonzero")

-- ---- cumprod -----------------------------------------------------------------------------------
check("cumprod_d1", function(x) return x:cumprod(2) end)
check("cumprod_d0", function(x) return zorch.cumprod(x, -2) end)
check("cumprod_zero1", function(x) return x:cumprod(2) end)
check("cumprod_zero2", function(x) return x:cumprod(1) end)
check("cumprod_d1", function(x) return x:cumprod(-1) end, {dtype = "bfloat16", tol = 3e-2, gtol = 6e-2})
ok(zorch.tensor{1, 2, 3}:cumprod(1):dtype() == "int64", "cumprod of int64 stays int64")

-- ---- shape ops --------------------------------------------------------------------------------
check("flip_d0", function(x) return x:flip(1) end)
check("flip_dims", function(x) return zorch.flip(x, {1, -1}) end)
check("flip_d0", function(x) return x:flip(-2) end, {dtype = "bfloat16", tol = 0, exact = true})
check("roll_flat", function(x) return x:roll(2) end)
check("roll_dims", function(x) return zorch.roll(x, {1, -5}, {1, 2}) end)
check("repeat", function(x) return x["repeat"](x, 2, 1, 3) end)
check("repeat", function(x) return zorch["repeat"](x, {2, 1, 3}) end)
check("tile_short", function(x) return x:tile(2) end)
check("repeat_interleave_d1", function(x) return x:repeat_interleave(2, 2) end)
check("repeat_interleave_flat", function(x) return zorch.repeat_interleave(x, 3) end)
check("repeat_interleave_counts", function(x) return x:repeat_interleave(zorch.tensor{1, 0, 2}, 1) end)
check("repeat_interleave_count1", function(x) return x:repeat_interleave(zorch.tensor{2}, -1) end)
check("movedim", function(x) return x:movedim(1, -1) end)
check("movedim", function(x) return zorch.moveaxis(x, 1, 3) end)
check("movedim_list", function(x) return zorch.movedim(x, {1, 2}, {3, 1}) end)
check("unflatten", function(x) return x:unflatten(2, {2, -1}) end)
check("swapaxes", function(x) return x:swapaxes(1, 3) end)
check("swapaxes", function(x) return zorch.swapdims(x, -1, 1) end)
do
  local x = zorch.arange(6, {dtype = "float64"}):reshape(2, 3):requires_grad_()
  local parts = x:unbind(2)
  ok(#parts == 3 and parts[2]:tolist()[2] == 4, "unbind(x, 2): three columns")
  ok(parts[1]:dim() == 1 and zorch.unbind(x)[2]:tolist()[3] == 5, "unbind drops the dim; dim 1 by default")
  ok(not parts[1]:is_contiguous(), "unbind gives views")
  ;(parts[1] * 2 + parts[3]):sum():backward()
  close(x.grad, zorch.tensor({{2, 0, 1}, {2, 0, 1}}, {dtype = "float64"}), 0, "unbind: gradients of the views")
  local y = zorch.ones(3, 1)
  close(y:broadcast_to(2, 3, 4), zorch.ones(2, 3, 4), 0, "broadcast_to")
  close(y:expand_as(zorch.zeros(3, 5)), zorch.ones(3, 5), 0, "expand_as")
  ok(y:view_as(zorch.zeros(1, 3)).shape[2] == 3, "view_as")
  ok(y:type_as(zorch.zeros(1, {dtype = "float64"})):dtype() == "float64", "type_as")
  local r = zorch.ones(2, 2)["repeat"](zorch.ones(2, 2), 1, 1)
  r:fill_(5)
  ok(zorch.ones(2, 2):sum():item() == 4, "repeat with all reps 1 copies")
  local big = zorch.ones(2, 1, 2, 1, 2):tile(2, 2, 2, 2, 2)
  ok(big.shape[1] == 4 and big.shape[5] == 4 and big:sum():item() == 32 * 8, "tile of a 5-d tensor (dim by dim)")
  ok(x:tolist()[2][3] == 5 and zorch.tolist(x)[1][1] == 0, "tolist: nested tables")
end

-- ---- pad ---------------------------------------------------------------------------------------
check("pad_const", function(x) return zorch.pad(x, {1, 2, 0, 1}, "constant", 0.5) end)
check("pad_crop", function(x) return x:pad({-1, 2, 1, -1}) end)
check("pad_reflect", function(x) return x:pad({2, 1}, "reflect") end)
check("pad_reflect2", function(x) return x:pad({2, 1, 1, 2}, "reflect") end)
check("pad_replicate", function(x) return x:pad({2, 1, 1, 0}, "replicate") end)
check("pad_circular", function(x) return x:pad({2, 1}, "circular") end)
check("pad_circular_crop", function(x) return x:pad({-1, 2, 1, -1}, "circular") end)
check("pad_reflect2", function(x) return x:pad({2, 1, 1, 2}, "reflect") end, {dtype = "bfloat16", tol = 0, exact = true})

-- ---- creation -------------------------------------------------------------------------------
local function golden(name) return tensor(gold[name].y) end
close(zorch.eye(3):double(), golden("eye_3"), 0, "eye(3)")
close(zorch.eye(2, 4):double(), golden("eye_2x4"), 0, "eye(2, 4)")
ok(zorch.eye(2, {dtype = "int64"}):dtype() == "int64", "eye: options")
close(zorch.linspace(-1, 2, 7, {dtype = "float64"}), golden("linspace"), 0, "linspace")
close(zorch.linspace(3, 5, 1, {dtype = "float64"}), golden("linspace_1"), 0, "linspace with one step")
close(zorch.linspace(-3.3, 7.1, 101):double(), golden("linspace_f32"), 0, "linspace in float32: PyTorch's roundings")
close(zorch.linspace(0, 1, 1000):double(), golden("linspace_f32b"), 0, "linspace in float32, 1000 steps")
ok(zorch.linspace(0, 1, 0):numel() == 0 and zorch.linspace(0, 1, 3):dtype() == "float32", "linspace: 0 steps; float32")
close(zorch.logspace(-1, 2, 5, {dtype = "float64"}), golden("logspace"), 1e-14, "logspace")
close(zorch.logspace(0, 4, 5, 2, {dtype = "float64"}), golden("logspace_b2"), 0, "logspace base 2")
local oh = zorch.one_hot(zorch.tensor{1, 3, 2, 3})
ok(oh:dtype() == "int64", "one_hot is int64")
close(oh:double(), golden("one_hot"), 0, "one_hot: classes from 1, count from the largest")
close(zorch.tensor{{1, 4}, {2, 2}}:one_hot(5):double(), golden("one_hot_5"), 0, "one_hot with num_classes")
close(zorch.one_hot(zorch.tensor{2}, -1):double(), zorch.tensor({{0, 1}}, {dtype = "float64"}), 0, "one_hot, -1 classes")

-- ---- matrix products ------------------------------------------------------------------------
check("mm", function(a, b) return zorch.mm(a, b) end)
check("mm", function(a, b) return a:mm(b) end, {dtype = "bfloat16", tol = 5e-2, gtol = 5e-2})
check("bmm", function(a, b) return a:bmm(b) end)
check("mv", function(a, v) return zorch.mv(a, v) end)
check("dot", function(a, b) return a:dot(b) end)
check("outer", function(a, b) return zorch.outer(a, b) end)
check("addmm", function(c, a, b) return zorch.addmm(c, a, b, 0.5, 2) end)
check("addmm_beta0", function(c, a, b) return zorch.addmm(c, a, b, 0) end)
check("addmm_bcast", function(c, a, b) return c:addmm(a, b) end)
check("baddbmm", function(c, a, b) return zorch.baddbmm(c, a, b, 1.5, -1) end)
check("diag_vec", function(x) return x:diag() end)
check("diag_vec_k1", function(x) return zorch.diag(x, 1) end)
check("diag_vec_km2", function(x) return x:diag(-2) end)
check("diag_mat", function(x) return x:diag() end)
check("diag_mat_k1", function(x) return x:diag(1) end)
check("diag_mat_km1", function(x) return x:diag(-1) end)
check("diagonal_3d", function(x) return x:diagonal(1, 1, 3) end)
check("diagonal_neg", function(x) return zorch.diagonal(x, -1, -1, -2) end)
check("trace", function(x) return x:trace() end)
do
  local m = zorch.zeros(3, 3)
  m:diagonal():fill_(2)
  ok(m:sum():item() == 6, "diagonal is a view")
  local a = zorch.ones(3, 3)
  local nan = zorch.full({3, 3}, 0 / 0)
  ok(zorch.tensor{1, 2}:dot(zorch.tensor{3, 4}):item() == 11, "dot of int64 vectors")
  local ia, ib = zorch.tensor{{1, 2, 3}, {4, 5, 6}}, zorch.tensor{{1, 0}, {2, 1}, {-1, 3}}
  local im = zorch.mm(ia, ib)
  ok(im:dtype() == "int64" and im:tolist()[1][1] == 2 and im:tolist()[2][2] == 23, "mm of int64 matrices")
  ok(zorch.mm(ia:to("int32"), ib:to("int32")):dtype() == "int32", "mm of int32 stays int32")
  local bm = zorch.bmm(zorch.stack({ia, ia}), zorch.stack({ib, ib}))
  ok(bm.shape[1] == 2 and bm:tolist()[2][2][1] == 8, "bmm of int64")
  local mv = ia:mv(zorch.tensor{1, 1, 1})
  ok(mv:tolist()[1] == 6 and mv:tolist()[2] == 15, "mv of int64")
  ok(zorch.addmm(nan, a, a, 0):sum():item() == 27, "addmm with beta 0 does not read the input (nan)")
end

-- ---- errors ----------------------------------------------------------------------------------
local x = zorch.ones(2, 3)
raises("prod: dim out of range", function() x:prod(3) end, "prod", "dim 3")
raises("prod: dim 0", function() x:prod(0) end, "1-based")
raises("amax: repeated dim", function() x:amax({1, -2}) end, "amax", "repeated")
raises("amax of an empty dim", function() zorch.zeros(2, 0):amax(2) end, "amax", "empty")
raises("norm of integers", function() zorch.tensor{1, 2}:norm() end, "norm", "floating-point", "int64")
raises("norm: bad p string", function() x:norm("nuc") end, "norm", "nuc")
raises("norm: fro over 3 dims", function() zorch.ones(2, 2, 2):norm("fro", {1, 2, 3}) end, "norm", "fro", "got 3")
raises("norm: inf of an empty dim", function() zorch.zeros(2, 0):norm(math.huge, 2) end, "norm", "empty")
raises("cumprod: dim out of range", function() x:cumprod(-3) end, "cumprod", "dim -3")
raises("flip: no dims", function() x:flip() end, "dims")
raises("flip: repeated dim", function() x:flip({1, 1}) end, "flip", "repeated")
raises("roll: shifts and dims of different lengths", function() x:roll({1, 2}, 1) end, "roll", "2 shifts for 1 dims")
raises("roll: several shifts without dims", function() x:roll({1, 2}) end, "roll", "one shift")
raises("repeat: fewer reps than dims", function() x["repeat"](x, 2) end, "repeat", "1 repeats", "(2, 3)")
raises("repeat: negative reps", function() x:tile(-1, 2) end, "tile", ">= 0")
raises("repeat_interleave: negative", function() x:repeat_interleave(-1) end, "repeat_interleave", ">= 0")
raises("repeat_interleave: negative count", function() x:repeat_interleave(zorch.tensor{1, -1}, 1) end,
       "repeat_interleave", ">= 0")
raises("repeat_interleave: counts of another length", function() x:repeat_interleave(zorch.tensor{1, 2, 3}, 1) end,
       "repeat_interleave", "(3,)", "dim 1", "(2, 3)")
raises("repeat_interleave: float counts", function() x:repeat_interleave(zorch.tensor{1.5}, 1) end,
       "repeat_interleave", "int64")
raises("unbind of a 0-d tensor", function() zorch.tensor(1):unbind() end, "unbind", "0-dimensional")
raises("movedim: lengths differ", function() x:movedim({1, 2}, 1) end, "movedim", "2 source dims")
raises("movedim: repeated", function() x:movedim({1, 1}, {1, 2}) end, "movedim", "repeated")
raises("unflatten: sizes do not multiply", function() x:unflatten(2, {2, 2}) end, "unflatten", "(2, 2)", "dim 2", "(2, 3)")
raises("unflatten: two -1", function() x:unflatten(2, {-1, -1}) end, "unflatten", "-1")
raises("broadcast_to: shape that does not fit", function() x:broadcast_to(4, 3) end, "broadcast_to", "(2, 3)", "(4, 3)")
raises("expand_as: fewer dims", function() x:expand_as(zorch.ones(3)) end, "expand_as", "(2, 3)", "1 dims")
raises("view_as: another element count", function() x:view_as(zorch.ones(4)) end, "view_as", "(2, 3)")
raises("swapaxes: dim out of range", function() x:swapaxes(1, 4) end, "swapaxes", "dim 4")
raises("swapdims: dim out of range", function() x:swapdims(-3, 1) end, "swapdims", "dim -3")
raises("pad: odd pads", function() x:pad({1, 2, 3}) end, "pad", "pairs")
raises("pad: too many pads", function() x:pad({1, 1, 1, 1, 1, 1}) end, "pad", "3 dims", "(2, 3)")
raises("pad: reflect as wide as the dim", function() x:pad({3, 0}, "reflect") end, "pad", "reflect", "at most 2")
raises("pad: reflect of a 1-d tensor", function() zorch.ones(4):pad({1, 1}, "reflect") end, "pad", "reflect", "(4,)")
raises("pad: negative reflect", function() x:pad({-1, 0}, "reflect") end, "pad", ">= 0")
raises("pad: circular wider than what the crop leaves", function() x:pad({-1, 3}, "circular") end, "pad", "circular", "at most 2")
raises("pad: crop past the dim", function() x:pad({-2, -2}) end, "pad", "crop", "(2, 3)")
raises("pad: unknown mode", function() x:pad({1, 1}, "mirror") end, "mirror")
raises("pad: value with reflect", function() x:pad({1, 1}, "reflect", 2) end, "pad", "no value")
raises("eye: negative", function() zorch.eye(-1) end, "eye", ">= 0")
raises("linspace: negative steps", function() zorch.linspace(0, 1, -2) end, "linspace", ">= 0")
raises("one_hot: class too large", function() zorch.one_hot(zorch.tensor{1, 4}, 3) end, "one_hot", "class 4", "num_classes 3")
raises("one_hot: class 0", function() zorch.one_hot(zorch.tensor{0, 1}) end, "one_hot", "class 0")
raises("one_hot: float classes", function() zorch.one_hot(zorch.tensor{1.5}) end, "int64")
raises("one_hot: empty without num_classes", function() zorch.one_hot(zorch.zeros(0, {dtype = "int64"})) end, "one_hot", "empty")
raises("mm: a vector", function() zorch.mm(zorch.ones(3), x) end, "mm", "input", "matrix", "(3,)")
raises("mm: inner sizes", function() zorch.mm(x, x) end, "mm", "(2, 3)", "cannot be multiplied")
raises("mm: bool", function() zorch.mm(zorch.ones(2, 2, {dtype = "bool"}), zorch.ones(2, 2, {dtype = "bool"})) end, "mm", "bool")
raises("mm: dtypes", function() zorch.mm(x, zorch.ones(3, 2, {dtype = "float64"})) end, "mm", "float32", "float64")
raises("bmm: batch sizes", function() zorch.bmm(zorch.ones(2, 2, 3), zorch.ones(3, 3, 2)) end, "bmm", "batch")
raises("bmm: matrices", function() zorch.bmm(x, x) end, "bmm", "batch of matrices")
raises("mv: matrix for vector", function() zorch.mv(x, x) end, "mv", "other", "vector", "(2, 3)")
raises("dot: sizes", function() zorch.dot(zorch.ones(3), zorch.ones(4)) end, "dot", "(3,)", "(4,)")
raises("outer: matrices", function() zorch.outer(x, x) end, "outer", "vectors")
raises("addmm: input shape", function() zorch.addmm(zorch.ones(3, 3), x, zorch.ones(3, 2)) end, "addmm", "(3, 3)", "(2, 2)")
raises("diag: 3-d", function() zorch.ones(2, 2, 2):diag() end, "diag", "(2, 2, 2)")
raises("diagonal: same dims", function() x:diagonal(0, 1, -2) end, "diagonal", "same")
raises("diagonal: a vector", function() zorch.ones(3):diagonal() end, "diagonal", "(3,)")
raises("trace: 3-d", function() zorch.ones(2, 2, 2):trace() end, "trace", "matrix")

tap.done()
