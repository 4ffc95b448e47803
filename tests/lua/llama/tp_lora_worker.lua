-- LoRA on the tensor-parallel layers under zorch launch, against LoRA on the
-- full layers of one process, for test_llama_tp.lua:
--   zorch launch -n N tp_lora_worker.lua OUT
-- A column-parallel Linear (one with 2 fused blocks, as GPT-2's c_attn) and a
-- row-parallel one with adapters: the output, the gradients of the input and
-- of every adapter tensor (gathered from the ranks), merge and unmerge, and
-- nn.lora.state_dict (the whole adapters). Rank 0 writes "name worst-relative-difference".
local zorch = require "zorch"
local nn, dist = zorch.nn, zorch.dist
local out = arg[1]
local g = dist.world()
local lines = {}
local function worst(a, b) return (a - b):abs():max():item() / math.max(b:abs():max():item(), 1e-12) end
local function check(name, v) lines[#lines + 1] = ("%s %.3g"):format(name, v) end

-- x -> a (two fused blocks of 8 rows) -> relu(block 1) * block 2 -> b -> d -> c
local Net = nn.Module:extend "TPLoRANet"
function Net:init(a, b, d, c) self.a, self.b, self.d, self.c = a, b, d, c end
function Net:forward(x)
  local h = self.a(x)
  local n = h:size(2) // 2
  return self.c(self.d(self.b(zorch.relu(h:narrow(2, 1, n)) * h:narrow(2, n + 1, n))))
end
zorch.manual_seed(4)
local a, b, d, c = nn.Linear(6, 16), nn.Linear(8, 12), nn.Linear(12, 6), nn.Linear(6, 5)
local full = Net(a, b, d, c)
-- a column-parallel by blocks (rank t: chunk t of each block, so its relu(.) * (.) is
-- chunk t of the full one), b row-parallel, d column-parallel gathering its output, c whole
local split = Net(nn.ColumnParallelLinear.from(a, {group = g, blocks = 2}), nn.RowParallelLinear.from(b, {group = g}),
                  nn.ColumnParallelLinear.from(d, {group = g, gather_output = true}), nn.Linear(6, 5))
split.c.weight, split.c.bias = c.weight:detach():clone(), c.bias:detach():clone()
local opts = {r = 3, alpha = 6, target_modules = {"a", "b", "c", "d"}}
zorch.manual_seed(5)
nn.lora.apply(full, opts)
zorch.manual_seed(5)
nn.lora.apply(split, opts)
zorch.manual_seed(6)
zorch.no_grad(function()
  for _, name in ipairs({"a", "b", "c", "d"}) do
    for _, k in ipairs({"lora_A", "lora_B"}) do
      local f = full[name][k]
      f:copy_(zorch.randn(f.shape))
      split[name][k]:copy_(split[name]:_slice(k, f))
    end
  end
end)
check("init_lora_A_drawn_as_one_process", worst(split.b:_whole("lora_A"), full.b.lora_A) +
  worst(split.a:_whole("lora_A"), full.a.lora_A))
local x = zorch.randn(4, 6)
local xf, xs = x:clone():requires_grad_(), x:clone():requires_grad_()
local yf, ys = full(xf), split(xs)
check("forward", worst(ys, yf))
yf:pow(2):sum():backward()
ys:pow(2):sum():backward()
check("input_grad", worst(xs.grad, xf.grad))
local splits = nn.tp_splits(split)
for _, name in ipairs({"a", "b", "c", "d"}) do
  for _, k in ipairs({"lora_A", "lora_B"}) do
    local p, s = split[name][k], splits[name .. "." .. k]
    local gr = s and dist.gather_split(g, p.grad, s) or p.grad
    check(("grad_%s_%s"):format(name, k), worst(gr, full[name][k].grad))
  end
end
-- which adapter tensors split: B as a column-parallel weight (blocks and all), A as a row-parallel one
local sa = splits["a.lora_B"]
lines[#lines + 1] = ("splits %s"):format(type(sa) == "table" and sa.blocks == 2 and splits["b.lora_A"] == 2 and
  splits["d.lora_B"] == 1 and not splits["a.lora_A"] and not splits["b.lora_B"] and not splits["c.lora_A"] and "ok" or "wrong")
local sf, ss = nn.lora.state_dict(full), nn.lora.state_dict(split)
local n, dd = 0, 0
for k, v in pairs(sf) do n = n + 1; dd = math.max(dd, ss[k] and worst(ss[k], v) or math.huge) end
check("state_dict_whole", dd + (n == 8 and 0 or math.huge))
local wa = split.a.weight:clone()
zorch.no_grad(function()
  nn.lora.merge(split)
  check("merged_forward", worst(split(x), ys:detach()))
  nn.lora.unmerge(split)
  check("unmerged_weight", worst(split.a.weight, wa))
  check("unmerged_forward", worst(split(x), ys:detach()))
end)
if g:rank() == 0 then
  local f = assert(io.open(out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
