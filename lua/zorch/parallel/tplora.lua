-- tplora.lua: LoRA adapters on the tensor-parallel layers, so that the
-- adapter's output is the whole layer's, as in one process:
--   nn.ColumnParallelLoRA  on an nn.ColumnParallelLinear: lora_A (r, in) whole,
--                          lora_B split by output rows like the weight
--   nn.RowParallelLoRA     on an nn.RowParallelLinear: lora_A split by input
--                          columns like the weight, lora_B (out, r) whole; the
--                          partial products A_t x_t travel in the layer's own
--                          all-reduce, beside W_t x_t
-- nn.lora.apply wraps these layers (nn.lora.register), and the adapters keep
-- tp_split entries for their split tensors, which the engine's norm and the
-- checkpoints read. lora.state_dict gathers the whole adapters (every rank of
-- the tensor group calls it) and lora.load cuts a file's into the ranks' parts.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file

local nn, dist = zorch._require "zorch.nn", zorch._require "zorch.parallel.dist"
zorch._require "zorch.parallel.tensorparallel"
local lora = zorch._require "zorch.nn.lora"

-- An adapter class for a split layer class whose adapter tensor `part`
-- (lora_A or lora_B) is split as the layer's weight is, the other one whole.
local function adapter_class(name, layer_class, part)
  local cls = nn.LoRALinear:extend("nn." .. name)
  function cls:init(layer, opts)
    if type(layer) == "table" and getmetatable(layer) == layer_class then
      local s = {}
      for k, v in pairs(rawget(layer, "tp_split")) do s[k] = v end
      s[part] = part == "lora_B" and s.weight or 2 -- (B's rows as the weight's; A's columns as the input's)
      rawset(self, "group", layer.group)
      rawset(self, "tp_split", s)
      rawset(self, "gather_output", rawget(layer, "gather_output") or false)
    end
    nn.LoRALinear.init(self, layer, opts) -- (checks the layer's class)
  end
  function cls:_slice(k, full)
    local g = rawget(self, "group")
    return k == part and dist.slice(full, self.tp_split[k], g:size(), g:rank()) or full
  end
  function cls:_whole(k)
    return k == part and dist.gather_split(rawget(self, "group"), self[k], self.tp_split[k]) or self[k]:detach()
  end
  lora.register(layer_class, cls)
  nn[name] = cls
  return cls
end

-- y_t = W_t x + B_t (A x) * scaling: A x is whole on every rank; its gradient,
-- the sum of each rank's rows' part, is all-reduced (dist.copy_to) so that A,
-- replicated, gets the same gradient on every rank. Dropout on the replicated
-- input draws the same mask on every rank (the ranks' generators in step).
local Col = adapter_class("ColumnParallelLoRA", nn.ColumnParallelLinear, "lora_B")
function Col:forward(x)
  local g = self.group
  local y = zorch.linear(dist.copy_to(g, x), self.weight, rawget(self, "bias"))
  if not rawget(self, "merged") then
    local h = x
    if self.dropout > 0 and self.training then h = zorch.dropout(h, self.dropout, true) end
    local u = dist.copy_to(g, zorch.linear(h, self.lora_A))
    y = y + zorch.linear(u, self.lora_B) * self.scaling
  end
  if rawget(self, "gather_output") then y = dist.gather_last(g, y) end
  return y
end

-- y = sum_t W_t x_t + B (sum_t A_t x_t) * scaling + bias: one all-reduce sums
-- both partial products (side by side), so B, replicated, sees the whole A x.
-- Dropout draws the mask of the whole input and keeps this rank's columns, so
-- the ranks' columns are masked independently, as in one process.
local Row = adapter_class("RowParallelLoRA", nn.RowParallelLinear, "lora_A")
function Row:forward(x)
  local g = self.group
  local per = self.in_features // g:size()
  if x:size(x:dim()) ~= per then
    error(("nn.RowParallelLoRA: input (%s) must end in this rank's %d of %d features"):format(
      table.concat(x.shape, ", "), per, self.in_features), 2)
  end
  local y
  if rawget(self, "merged") then
    y = dist.reduce_from(g, zorch.linear(x, self.weight))
  else
    local h = x
    if self.dropout > 0 and self.training then
      local shape = {table.unpack(x.shape)}
      shape[#shape] = self.in_features
      local mask = zorch.dropout(zorch.ones(shape, {dtype = x:dtype(), device = x:device()}), self.dropout, true)
      h = x * mask:narrow(x:dim(), g:rank() * per + 1, per)
    end
    local both = dist.reduce_from(g, zorch.cat({zorch.linear(x, self.weight), zorch.linear(h, self.lora_A)}, x:dim()))
    local d = both:dim()
    y = both:narrow(d, 1, self.out_features) +
        zorch.linear(both:narrow(d, self.out_features + 1, self.r), self.lora_B) * self.scaling
  end
  local b = rawget(self, "bias")
  if b then y = y + b end
  return y
end

return nil
