-- Weight-only quantisation (docs/quantization.md): the int8 dtype, quantize and
-- dequantize's error bounds, qlinear against the float32 linear of the
-- dequantised weight on odd shapes and both row paths (GEMV and tiled GEMM),
-- the portable loops (ZORCH_NO_AVX512) beside the AVX-512 ones, the errors,
-- nn.QuantLinear and nn.quantize, and quantised state dicts and Hugging Face
-- folders loading back to the same outputs bit for bit.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn = zorch.nn
local ok, raises = tap.ok, tap.raises
local tmp = tap.tmpdir()

-- ---- the int8 dtype ----
local i8 = zorch.tensor({-128, -3, 0, 127}, {dtype = "int8"})
ok(i8:dtype() == "int8" and i8:char():dtype() == "int8" and i8[1]:item() == -128, "int8 tensors hold -128..127")
ok(zorch.equal(i8:float(), zorch.tensor({-128, -3, 0, 127})), "int8 converts to float32 exactly")
ok(zorch.equal(i8:to("uint8"), zorch.tensor({128, 253, 0, 127}, {dtype = "uint8"})), "int8 to uint8 wraps as PyTorch's")
ok((i8 + zorch.ones(4, {dtype = "uint8"})):dtype() == "int32", "int8 with uint8 promotes to int32")
ok(zorch.equal(i8 + 1, zorch.tensor({-127, -2, 1, -128}, {dtype = "int8"})), "int8 arithmetic wraps around")
raises("a value past int8 is an error", function() zorch.tensor({128}, {dtype = "int8"}) end, "cannot be converted to int8")
zorch.save({t = i8}, tmp .. "/i8.safetensors")
local back = zorch.load(tmp .. "/i8.safetensors").t
ok(back:dtype() == "int8" and zorch.equal(back, i8), "int8 round-trips through safetensors (I8)")

-- ---- quantize and dequantize: the error bounds ----
zorch.manual_seed(7)
local w = zorch.randn(33, 256)
local q8, s8 = zorch.quantize(w, {bits = 8})
ok(q8:dtype() == "int8" and s8:dtype() == "float16" and q8.shape[1] == 33 and q8.shape[2] == 256 and s8:dim() == 1,
   "int8: q (out, in) int8 and one float16 scale a row")
local e8 = (zorch.dequantize(q8, s8) - w):abs()
local step8 = s8:float():reshape(33, 1)
ok((e8 - step8 * 0.5):max():item() <= 1e-6, "int8: every weight within half a step of its row")
ok((w:abs():amax(2) - step8:reshape(33) * 127):abs():max():item() <= w:abs():max():item() * 1e-3,
   "int8: the step is the row's largest magnitude over 127 (to float16)")
for _, g in ipairs({32, 128}) do
  local q4, s4 = zorch.quantize(w, {bits = 4, group = g})
  ok(q4:dtype() == "uint8" and q4.shape[2] == 128 and s4.shape[1] == 33 and s4.shape[2] == 256 // g,
     ("int4 group %d: q (out, in / 2) uint8, scales (out, in / group)"):format(g))
  local e4 = (zorch.dequantize(q4, s4) - w):abs():reshape(33, 256 // g, g):amax(3)
  ok((e4 - s4:float():abs()):max():item() <= 1e-6, ("int4 group %d: every weight within one step of its group"):format(g))
  local rel = ((zorch.dequantize(q4, s4) - w):pow(2):mean():sqrt() / w:pow(2):mean():sqrt()):item()
  ok(rel < (g == 32 and 0.12 or 0.14), ("int4 group %d: RMS error %.3f of the weights' RMS"):format(g, rel))
end
local z8, zs = zorch.quantize(zorch.zeros(3, 64), {bits = 4})
ok(zorch.equal(zorch.dequantize(z8, zs), zorch.zeros(3, 64)), "zero weights quantise to zeros")

-- ---- qlinear against the float32 linear of the dequantised weight ----
local function rel_err(y, ref) return ((y:double() - ref):abs():max() / ref:abs():max()):item() end
local cases = { -- bits, group, x shape, out
  {8, nil, {1, 70}, 33}, {8, nil, {2, 64}, 1}, {8, nil, {4, 100}, 7}, {8, nil, {37, 70}, 33}, {8, nil, {2, 3, 96}, 7},
  {4, 32, {1, 64}, 1}, {4, 32, {3, 96}, 7}, {4, 32, {5, 160}, 33}, {4, 128, {1, 256}, 33}, {4, 128, {2, 9, 256}, 7},
  {8, nil, {1, 4096}, 300}, {4, 32, {2, 4096}, 40},
}
for _, c in ipairs(cases) do
  local bits, group, xs, out = c[1], c[2], c[3], c[4]
  local x, wt, b = zorch.randn(xs), zorch.randn(out, xs[#xs]), zorch.randn(out)
  local q, s = zorch.quantize(wt, {bits = bits, group = group})
  local dw = zorch.dequantize(q, s)
  local desc = ("int%d%s, x (%s), out %d"):format(bits, group and (" group " .. group) or "", table.concat(xs, ", "), out)
  local e1 = rel_err(zorch.qlinear(x, q, s, b), zorch.linear(x:double(), dw:double(), b:double()))
  local e2 = rel_err(zorch.qlinear(x, q, s), zorch.linear(x:double(), dw:double()))
  ok(e1 <= 1e-5 and e2 <= 1e-5, ("qlinear %s: the dequantised linear within 1e-5 (%.1e, %.1e)"):format(desc, e1, e2))
end
do -- bfloat16 input: computed in float32, returned as bfloat16
  local x, wt = zorch.randn(3, 64), zorch.randn(5, 64)
  local q, s = zorch.quantize(wt, {bits = 8})
  local y = zorch.qlinear(x:bfloat16(), q, s)
  ok(y:dtype() == "bfloat16" and zorch.equal(y, zorch.qlinear(x:bfloat16():float(), q, s):bfloat16()),
     "qlinear of bfloat16 x: float32 math, a bfloat16 result")
  ok(zorch.qlinear(zorch.zeros(0, 64), q, s).shape[1] == 0, "qlinear of no rows")
end

-- the portable loops (the AVX2 and baseline builds) give what the AVX-512 ones do
local chunk = [[
zorch.manual_seed(11)
local out = {}
for _, c in ipairs({{8, nil, 3, 70, 33}, {4, 32, 1, 96, 7}, {4, 128, 2, 256, 17}}) do
  local x, w = zorch.randn(c[3], c[4]), zorch.randn(c[5], c[4])
  local q, s = zorch.quantize(w, {bits = c[1], group = c[2]})
  local y, ref = zorch.qlinear(x, q, s), zorch.linear(x:double(), zorch.dequantize(q, s):double())
  out[#out + 1] = ("%.3e"):format(((y:double() - ref):abs():max() / ref:abs():max()):item())
end
print(table.concat(out, " "))
]]
local path = tap.temp_file(chunk, ".lua")
for _, env in ipairs({"", "ZORCH_NO_AVX512=1 "}) do
  local got, fine = tap.run(env .. tap.zorch() .. " " .. path)
  local worst = 0
  for v in got:gmatch("%S+") do worst = math.max(worst, tonumber(v) or math.huge) end
  ok(fine and worst <= 1e-5, ("%sthe GEMV loops within 1e-5 of the dequantised linear (%s)"):format(env, got:gsub("\n", "")))
end

-- ---- errors ----
raises("quantize: in not a multiple of the group", function() zorch.quantize(zorch.ones(4, 48), {bits = 4, group = 32}) end,
       "quantize: in_features 48 is not a multiple of the group 32")
raises("quantize: a group that is no multiple of 32", function() zorch.quantize(zorch.ones(4, 64), {bits = 4, group = 16}) end,
       "quantize: group must be nil or a positive multiple of 32, got 16")
raises("quantize: int8 takes no group", function() zorch.quantize(zorch.ones(4, 64), {bits = 8, group = 32}) end,
       "group must be nil")
raises("quantize: NaN weights", function() zorch.quantize(zorch.tensor({{0 / 0, 1}}), {bits = 8}) end,
       "quantize: w holds NaN")
raises("quantize: a vector", function() zorch.quantize(zorch.ones(4)) end, "quantize: w must be a float matrix")
raises("qlinear: int tensors as scales", function() zorch.qlinear(zorch.ones(1, 4), q8, q8) end, "scales must be float16")
raises("qlinear: integer x", function() zorch.qlinear(zorch.ones(1, 256, {dtype = "int64"}), q8, s8) end,
       "qlinear: input must be floating point")
raises("qlinear: a bias of the wrong size", function() zorch.qlinear(zorch.ones(1, 256), q8, s8, zorch.ones(3)) end,
       "qlinear: bias must be a float vector (33)")
raises("qlinear: backward is an error", function()
  local x = zorch.randn(2, 256):requires_grad_()
  zorch.qlinear(x, q8, s8):sum():backward()
end, "qlinear: no gradient")
raises("quantize: 4 bits of no inputs", function() zorch.quantize(zorch.ones(3, 0), {bits = 4}) end,
       "quantize: 4 bits need at least one group of inputs")
do -- int8 of no inputs: the bias alone; strided views of q are read as they are
  local q0, s0 = zorch.quantize(zorch.ones(3, 0), {bits = 8})
  ok(zorch.equal(zorch.qlinear(zorch.ones(2, 0), q0, s0, zorch.tensor({1.5, 2, 3})), zorch.tensor({{1.5, 2, 3}, {1.5, 2, 3}})),
     "qlinear with no inputs gives the bias")
  local qv, xv = q8:narrow(2, 9, 100), zorch.randn(2, 100)
  ok(rel_err(zorch.qlinear(xv, qv, s8), zorch.linear(xv:double(), zorch.dequantize(q8, s8):narrow(2, 9, 100):double()))
     <= 1e-5, "qlinear of a strided view of q")
end
ok(not zorch.no_grad(function() return zorch.qlinear(zorch.randn(2, 256):requires_grad_(), q8, s8) end).requires_grad,
   "qlinear under no_grad records nothing")

-- ---- nn.QuantLinear and nn.quantize ----
local Net = nn.Module:extend "QuantTestNet"
function Net:init()
  self.up = nn.Linear(64, 33)
  self.down = nn.Linear(33, 64, {bias = false})
  self.head = nn.Linear(64, 96)
end
function Net:forward(x) return self.head(self.down(zorch.relu(self.up(x)))) end

zorch.manual_seed(5)
local lin = nn.Linear(64, 7)
local ql = nn.QuantLinear.from(lin, {bits = 4})
local x = zorch.randn(3, 64)
ok(tostring(ql) == "nn.QuantLinear(in_features=64, out_features=7, bits=4, group=32)", "QuantLinear.from: 4 bits, groups of 32")
ok(rel_err(ql(x), zorch.linear(x:double(), ql:dequantized_weight():double(), lin.bias:double())) <= 1e-5,
   "QuantLinear: the linear of its dequantised weight and the bias")
raises("QuantLinear.from: not a Linear", function() nn.QuantLinear.from(nn.ReLU()) end, "must be an nn.Linear")

local net = Net()
local ref = zorch.no_grad(function() return net(x) end)
raises("nn.quantize: a layer whose inputs do not divide into groups", function() nn.quantize(net, {bits = 4}) end,
       "nn.quantize: down: nn.QuantLinear.from: in_features 33 is not a multiple of the group 32")
ok(getmetatable(net.up) == nn.Linear, "a failed nn.quantize leaves the model as it was")
local _, names = nn.quantize(net, {bits = 4, skip = {"^down$"}})
ok(#names == 2 and getmetatable(net.down) == nn.Linear and getmetatable(net.up) == nn.QuantLinear,
   "nn.quantize: skip keeps the layers it names")
local sd = net:state_dict()
ok(sd["up.qweight"]:dtype() == "uint8" and sd["up.scales"]:dtype() == "float16" and sd["up.bias"] and sd["down.weight"]
   and sd["up.weight"] == nil, "state dict: up.weight becomes up.qweight and up.scales, the bias kept")
local y4 = zorch.no_grad(function() return net(x) end)
ok((y4 - ref):abs():max():item() < 0.15 * ref:abs():max():item(), "the 4-bit model is close to the float one")
raises("nn.quantize twice", function() nn.quantize(net, {bits = 8}) end, "already quantised")
local cfg = nn.quantization_config(net)
ok(cfg.quant_method == "zorch" and cfg.bits == 4 and cfg.group_size == 32 and cfg.skip[1] == "^down$",
   "nn.quantization_config: method, bits, group and skip")

zorch.save(sd, tmp .. "/q.safetensors")
local net2 = Net()
nn.quantize(net2, {bits = 4, skip = {"^down$"}, weights = false})
net2:load_state_dict(zorch.load(tmp .. "/q.safetensors"))
ok(zorch.equal(zorch.no_grad(function() return net2(x) end), y4), "zorch.save and load_state_dict: the same outputs, bit for bit")

-- ---- a quantised Hugging Face folder ----
local llama = zorch.models.llama
for _, bits in ipairs({8, 4}) do
  local model = llama.from_pretrained("lua/llama/llama_tied")
  local tokens = zorch.tensor({{3, 17, 42, 5, 9, 1}})
  nn.quantize(model, {bits = bits, group = bits == 4 and 32 or nil})
  local want = zorch.no_grad(function() return model(tokens) end)
  local raw = zorch.hf.config("lua/llama/llama_tied")
  raw.quantization_config = nn.quantization_config(model)
  local dir = ("%s/hf_int%d"):format(tmp, bits)
  zorch.hf.save_pretrained(model, dir, {config = raw, dtype = "float32"})
  local st = zorch.load(dir .. "/model.safetensors")
  local qname = "model.layers.0.self_attn.q_proj"
  ok(st[qname .. ".qweight"]:dtype() == (bits == 8 and "int8" or "uint8") and st[qname .. ".scales"]:dtype() == "float16"
     and st["lm_head.qweight"] ~= nil, ("int%d folder: qweight %s and float16 scales saved as they are"):format(bits,
     st[qname .. ".qweight"]:dtype()))
  local again = llama.from_pretrained(dir)
  ok(getmetatable(again.model.layers[1].mlp.up_proj) == nn.QuantLinear and
     zorch.equal(zorch.no_grad(function() return again(tokens) end), want),
     ("int%d folder: from_pretrained rebuilds the QuantLinears, the same logits bit for bit"):format(bits))
end
local bad = zorch.hf.config(tmp .. "/hf_int8")
raises("an unknown quant_method", function() nn.quantization_options({quant_method = "gptq", bits = 4}) end,
       "quant_method must be \"zorch\"")
raises("a config with bits 3", function() nn.quantization_options({quant_method = "zorch", version = 1, bits = 3}) end,
       "bits must be 8 or 4")
ok(bad.quantization_config.bits == 8, "the folder's config.json names its format")
tap.done()
