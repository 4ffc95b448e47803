-- Gradients through several narrow/select slices of one tensor: the backward
-- adds a later slice's gradient in place into the input's gradient gathered so
-- far (ops/def/view.c). Checked against the gradient built by hand, for disjoint
-- slices (a fused q, k, v), overlapping ones, selects, slices mixed with a
-- direct use of the tensor, a gradient that other nodes share, and two passes.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"

-- e with w added into e:narrow(dim, start, len) (no grad)
local function add_into(e, dim, start, len, w)
  local part = e:narrow(dim, start, len)
  part:copy_(part + w)
end

for _, dt in ipairs({"float32", "float64", "bfloat16"}) do
  -- q, k, v of a fused projection: three disjoint slices of the last dim
  do
    local B, T, C = 2, 3, 4
    local x = zorch.randn(B, T, 3 * C, {dtype = dt, requires_grad = true})
    local y = x * 1 -- a node, so the slices meet in its accumulated gradient
    local w = {}
    local loss
    for i = 1, 3 do
      w[i] = zorch.randn(B, T, C, {dtype = dt})
      local part = (y:narrow(3, (i - 1) * C + 1, C) * w[i]):sum()
      loss = loss and loss + part or part
    end
    loss:backward()
    tap.close(x.grad, zorch.cat(w, 3), 0, dt .. ": q, k, v slices give the concatenated gradients")
  end
  -- overlapping slices, a select and the tensor itself, in the loss in that order
  do
    local x = zorch.randn(3, 5, {dtype = dt, requires_grad = true})
    local y = x * 1
    local wa, wb = zorch.randn(3, 3, {dtype = dt}), zorch.randn(3, 2, {dtype = dt})
    local ws, wy = zorch.randn(3, {dtype = dt}), zorch.randn(3, 5, {dtype = dt})
    local loss = (y:narrow(2, 1, 3) * wa):sum() + (y:narrow(2, 2, 2) * wb):sum() +
                 (y:select(2, 3) * ws):sum() + (y * wy):sum()
    loss:backward()
    local e = zorch.zeros(3, 5, {dtype = "float64"})
    add_into(e, 2, 1, 3, wa:to("float64"))
    add_into(e, 2, 2, 2, wb:to("float64"))
    add_into(e, 2, 3, 1, ws:to("float64"):view(3, 1))
    e = e + wy:to("float64")
    tap.close(x.grad:to("float64"), e, dt == "bfloat16" and 2e-2 or 1e-6,
              dt .. ": overlapping slices, a select and a direct use add up")
  end
  -- the first gradient to arrive is shared (sum's backward broadcasts one
  -- value): the slices must not write into it
  do
    local x = zorch.randn(4, 6, {dtype = dt, requires_grad = true})
    local y = x * 1
    local w = zorch.randn(4, 2, {dtype = dt})
    local loss = (y:narrow(2, 5, 2) * w):sum() + y:sum() + (y:narrow(2, 1, 2) * w):sum()
    loss:backward()
    local e = zorch.ones(4, 6, {dtype = "float64"})
    add_into(e, 2, 5, 2, w:to("float64"))
    add_into(e, 2, 1, 2, w:to("float64"))
    tap.close(x.grad:to("float64"), e, dt == "bfloat16" and 2e-2 or 1e-6,
              dt .. ": slices beside a broadcast gradient")
  end
end

-- two passes over a retained graph: the leaf's gradient accumulates twice
do
  local x = zorch.randn(2, 6, {requires_grad = true})
  local y = x * 1
  local w1, w2 = zorch.randn(2, 3), zorch.randn(2, 3)
  local loss = (y:narrow(2, 1, 3) * w1):sum() + (y:narrow(2, 4, 3) * w2):sum()
  loss:backward(nil, true)
  loss:backward()
  tap.close(x.grad, zorch.cat({w1, w2}, 2) * 2, 0, "two passes accumulate the sliced gradients")
end

-- a slice of a leaf: the leaf's own gradient is not a node's, so each slice
-- brings its full-size gradient as before
do
  local x = zorch.randn(2, 4, {requires_grad = true})
  local w1, w2 = zorch.randn(2, 2), zorch.randn(2, 2)
  local loss = (x:narrow(2, 1, 2) * w1):sum() + (x:narrow(2, 3, 2) * w2):sum()
  loss:backward()
  tap.close(x.grad, zorch.cat({w1, w2}, 2), 0, "slices of a leaf")
end

print("1.." .. tap.n)
os.exit(tap.failed == 0 and 0 or 1)
