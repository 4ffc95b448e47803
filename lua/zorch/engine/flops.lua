-- The FLOPs profiler (the Engine's flops_profiler option, DeepSpeed's
-- "flops_profiler" section). Over one optimizer step (profile_step) it counts
-- the FLOPs of the ops that hold nearly all of a network's work, as they run:
-- zorch.linear, zorch.matmul, zorch.attention, zorch.conv1d and zorch.conv2d
-- (a multiply-add is 2 FLOPs), each added to every module the call is inside
-- (the model's modules are wrapped for that step). Backward is counted as twice
-- the forward (each matmul has two in backward: the input's and the weight's
-- gradients), as DeepSpeed's profiler reports a training step. The report:
-- FLOPs by module, the step's time, achieved TFLOP/s, and the model FLOPs
-- utilisation against a peak measured at the start with a short GEMM.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local function numel(t) return t:numel() end

-- Forward FLOPs of each counted op from its arguments and result.
local COUNT = {
  linear = function(y, x, w) return 2 * numel(y) * w:size(2) end, -- y (.., out), w (out, in)
  matmul = function(y, a) return 2 * numel(y) * a:size(a:dim()) end, -- the contracted size is a's last
  attention = function(y, q, k) -- q (.., Tq, D), k (.., Tk, D): q kᵀ and the weights times v
    return 4 * numel(q) * k:size(k:dim() - 1)
  end,
  conv1d = function(y, x, w) return 2 * numel(y) * numel(w) // w:size(1) end, -- per output: (in/groups) x kernel
  conv2d = function(y, x, w) return 2 * numel(y) * numel(w) // w:size(1) end,
}

-- The peak: TFLOP/s of a square float32 GEMM on the device, the best of a few runs.
function zorch._measure_peak(device, n)
  n = n or 1024
  local a = zorch.randn(n, n, {device = device})
  local b = zorch.randn(n, n, {device = device})
  local best = math.huge
  for _ = 1, 4 do
    local t0 = zorch.clock()
    local _ = zorch.matmul(a, b)
    if device ~= "cpu" then zorch.cuda.synchronize() end
    best = math.min(best, zorch.clock() - t0)
  end
  return 2 * n ^ 3 / best / 1e12
end

local Profiler = {}
Profiler.__index = Profiler

-- A profiler for model on device (the peak is measured at start).
function zorch._flops_profiler(model, device, spec)
  return setmetatable({model = model, device = device, spec = spec, by = {}, total = 0, stack = {}}, Profiler)
end

function Profiler:add(flops)
  self.total = self.total + flops
  for _, name in ipairs(self.stack) do self.by[name] = (self.by[name] or 0) + flops end
end

-- Counting on: the ops wrapped, the model's modules wrapped to name the caller.
function Profiler:start()
  self.peak = self.peak or zorch._measure_peak(self.device)
  self.saved_ops, self.saved_forward = {}, {}
  for op, count in pairs(COUNT) do
    local f = zorch[op]
    if f then
      self.saved_ops[op] = f
      zorch[op] = function(...)
        local y = f(...)
        if zorch.is_tensor(y) then self:add(count(y, ...)) end
        return y
      end
    end
  end
  for name, m in self.model:named_modules() do
    if name ~= "" then
      local forward = m.forward
      self.saved_forward[m] = {rawget(m, "forward")}
      rawset(m, "forward", function(mod, ...)
        local stack = self.stack
        stack[#stack + 1] = name
        local r = table.pack(forward(mod, ...))
        stack[#stack] = nil
        return table.unpack(r, 1, r.n)
      end)
    end
  end
  self.t0 = zorch.clock()
end

-- Counting off; returns the report {total, forward, by = {{name, flops}}, seconds, tflops, peak, mfu}.
function Profiler:stop()
  if self.device ~= "cpu" then zorch.cuda.synchronize() end
  local dt = zorch.clock() - self.t0
  for op, f in pairs(self.saved_ops) do zorch[op] = f end
  for m, raw in pairs(self.saved_forward) do rawset(m, "forward", raw[1]) end
  self.stack = {}
  local by = {}
  for name, f in pairs(self.by) do by[#by + 1] = {name, 3 * f} end
  table.sort(by, function(a, b) return a[2] > b[2] or (a[2] == b[2] and a[1] < b[1]) end)
  local total = 3 * self.total
  local tflops = total / math.max(dt, 1e-9) / 1e12
  return {forward = self.total, total = total, by = by, seconds = dt, tflops = tflops, peak = self.peak,
          mfu = tflops / self.peak}
end

-- The report as lines: the step, then the modules two levels deep at most.
function zorch._flops_lines(r, step)
  local lines = {("flops profiler: step %d: %.4g FLOPs (forward %.4g, backward 2x), %.3f ms, %.4g TFLOP/s, " ..
                  "%.1f%% of the measured peak %.4g TFLOP/s"):format(step, r.total, r.forward, 1000 * r.seconds,
                  r.tflops, 100 * r.mfu, r.peak)}
  for _, e in ipairs(r.by) do
    local depth = select(2, e[1]:gsub("%.", "")) + 1
    if depth <= 2 then
      lines[#lines + 1] = ("  %-40s %12.4g FLOPs  %5.1f%%"):format(e[1], e[2], 100 * e[2] / math.max(r.total, 1))
    end
  end
  return lines
end

return nil
