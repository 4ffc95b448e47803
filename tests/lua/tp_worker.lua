-- Tensor-parallel layers on the ranks of zorch launch, against the full layers
-- of one process made from the same seed, for test_tensor_parallel.lua:
--   zorch launch -n N tp_worker.lua OUT
-- Every rank computes the full model too; rank 0 writes one line per check to
-- OUT: "name worst-relative-difference" (gradients gathered from the ranks).
local zorch = require "zorch"
local nn, dist = zorch.nn, zorch.dist
local out = arg[1]
local world = dist.world()
local g = world -- one tensor group of every rank
local T, t = g:size(), g:rank()
local lines = {}

local function worst(a, b)
  return ((a - b):abs():max():item()) / math.max(b:abs():max():item(), 1e-12)
end
-- the full tensor from every rank's slice (split as the module says)
local function gather(slice, split) return dist.gather_split(g, slice, split) end
local function check(name, v) lines[#lines + 1] = ("%s %.3g"):format(name, v) end

-- fused blocks (GPT-2's q, k, v): rank t keeps chunk t of each block's rows
do
  zorch.manual_seed(9)
  local full = nn.Linear(4, 12)
  zorch.manual_seed(9)
  local qkv = nn.ColumnParallelLinear(4, 12, {group = g, blocks = 3})
  check("init_blocks", worst(gather(qkv.weight, qkv.tp_split.weight), full.weight))
  local x = zorch.randn(2, 4)
  local y, per = full(x), 4 // T
  local mine = {}
  for b = 0, 2 do mine[#mine + 1] = y:narrow(2, b * 4 + t * per + 1, per) end
  check("blocks_forward", worst(qkv(x), zorch.cat(mine, 2)))
end

-- an MLP: column-parallel then row-parallel
do
  zorch.manual_seed(7)
  local fc, proj = nn.Linear(8, 12), nn.Linear(12, 8) -- the full layers
  zorch.manual_seed(7)
  local cfc = nn.ColumnParallelLinear(8, 12, {group = g})
  local rproj = nn.RowParallelLinear(12, 8, {group = g})
  check("init_column", worst(gather(cfc.weight, cfc.tp_split.weight), fc.weight))
  check("init_row", worst(gather(rproj.weight, rproj.tp_split.weight), proj.weight))
  zorch.manual_seed(3)
  local x = zorch.randn(5, 8)
  local x1, x2 = x:clone():requires_grad_(true), x:clone():requires_grad_(true)
  local y1 = proj(zorch.tanh(fc(x1)))
  local y2 = rproj(zorch.tanh(cfc(x2)))
  check("mlp_forward", worst(y2, y1))
  local w = zorch.randn(5, 8)
  ;(y1 * w):sum():backward()
  ;(y2 * w):sum():backward()
  check("mlp_input_grad", worst(x2.grad, x1.grad))
  check("column_weight_grad", worst(gather(cfc.weight.grad, cfc.tp_split.weight), fc.weight.grad))
  check("column_bias_grad", worst(gather(cfc.bias.grad, cfc.tp_split.bias), fc.bias.grad))
  check("row_weight_grad", worst(gather(rproj.weight.grad, rproj.tp_split.weight), proj.weight.grad))
  check("row_bias_grad", worst(rproj.bias.grad, proj.bias.grad))
end

-- gather_output: the whole output on every rank
do
  zorch.manual_seed(11)
  local full = nn.Linear(6, 4)
  local col = nn.ColumnParallelLinear.from(full, {group = g, gather_output = true})
  local x = zorch.randn(3, 6)
  local x1, x2 = x:clone():requires_grad_(true), x:clone():requires_grad_(true)
  local y1, y2 = full(x1), col(x2)
  check("gather_output_forward", worst(y2, y1))
  local w = zorch.randn(3, 4)
  ;(y1 * w):sum():backward()
  ;(y2 * w):sum():backward()
  check("gather_output_input_grad", worst(x2.grad, x1.grad))
end

-- the vocabulary-parallel embedding, a tied head and the cross-entropy
do
  zorch.manual_seed(5)
  local emb = nn.Embedding(10, 4)
  zorch.manual_seed(5)
  local vemb = nn.VocabParallelEmbedding(10, 4, {group = g})
  check("init_embedding", worst(gather(vemb.weight, 1), emb.weight))
  local idx = zorch.tensor({{1, 10, 3}, {6, 5, 2}})
  local targets = zorch.tensor({2, 9, 10, 1, 6, 5})
  local function run(e, loss)
    local h = zorch.tanh(e(idx)):reshape(6, 4)
    local logits = zorch.linear(loss == "full" and h or dist.copy_to(g, h), e.weight, nil) -- the tied head
    if loss == "full" then return zorch.cross_entropy(logits, targets) end
    return nn.vocab_parallel_cross_entropy(logits, targets, g)
  end
  local l1, l2 = run(emb, "full"), run(vemb, "parallel")
  check("vocab_loss", math.abs(l2:item() - l1:item()) / math.abs(l1:item()))
  l1:backward()
  l2:backward()
  check("vocab_weight_grad", worst(gather(vemb.weight.grad, 1), emb.weight.grad))
  -- ignored targets (SFT's prompt tokens): the mean over the others
  zorch.manual_seed(12)
  local logits = zorch.randn(6, 10)
  local ids = zorch.tensor({2, -100, 10, -100, 6, 5})
  local z1 = logits:clone():requires_grad_(true)
  local z2 = logits:narrow(2, t * (10 // T) + 1, 10 // T):contiguous():requires_grad_(true)
  local c1 = zorch.cross_entropy(z1, ids, {ignore_index = -100})
  local c2 = nn.vocab_parallel_cross_entropy(z2, ids, g, {ignore_index = -100})
  check("vocab_loss_ignore", math.abs(c2:item() - c1:item()) / math.abs(c1:item()))
  c1:backward()
  c2:backward()
  check("vocab_grad_ignore", worst(dist.gather_last(g, z2.grad), z1.grad))
end

-- errors name the layer and the sizes
do
  local ok, err = pcall(nn.ColumnParallelLinear, 4, 2 * T + 1, {group = g})
  lines[#lines + 1] = "error_column " .. (ok and "none" or tostring(err):gsub("\n", " "))
  ok, err = pcall(nn.VocabParallelEmbedding, 2 * T + 1, 3, {group = g})
  lines[#lines + 1] = "error_vocab " .. (ok and "none" or tostring(err):gsub("\n", " "))
end

if t == 0 then
  local f = assert(io.open(out, "w"))
  f:write(table.concat(lines, "\n"), "\n")
  f:close()
end
