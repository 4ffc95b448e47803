-- zorch.Engine: one object, configured by one validated table, that prepares a
-- model, loader and optimizer for training and applies gradient clipping and
-- accumulation. In one process every ZeRO stage gives the result of stage 0.
local zorch = ...

-- Every option with its default: the one place defaults live.
local DEFAULTS = {
  zero_stage = 0,                  -- 0..3: what is partitioned across ranks
  gradient_clipping = 0,           -- max global L2 norm of the gradients; 0 is off
  gradient_accumulation_steps = 1, -- micro-steps per optimizer step
  seed = false,                    -- an integer seeds zorch's default generator
  precision = "fp32",              -- "fp32" (bf16 comes with the ZeRO engine)
}

local CHECKS = {
  zero_stage = {function(v) return v == 0 or v == 1 or v == 2 or v == 3 end, "0, 1, 2 or 3"},
  gradient_clipping = {function(v) return type(v) == "number" and v >= 0 end, "a number >= 0 (0 turns it off)"},
  gradient_accumulation_steps = {function(v) return math.type(v) == "integer" and v >= 1 end, "an integer >= 1"},
  seed = {function(v) return v == false or math.type(v) == "integer" end, "an integer"},
  precision = {function(v) return v == "fp32" end, "\"fp32\""},
}

local Engine = {}
Engine.__index = Engine

local function allowed_keys()
  local ks = {}
  for k in pairs(DEFAULTS) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ", ")
end

function zorch.Engine(cfg)
  cfg = cfg or {}
  if type(cfg) ~= "table" then error("Engine: expected a configuration table", 2) end
  local c = {}
  for k, v in pairs(DEFAULTS) do c[k] = v end
  for k, v in pairs(cfg) do
    if DEFAULTS[k] == nil then
      error(("Engine: unknown option '%s' (allowed: %s)"):format(tostring(k), allowed_keys()), 2)
    end
    c[k] = v
  end
  for k, chk in pairs(CHECKS) do
    if not chk[1](c[k]) then
      error(("Engine: %s must be %s, got %s"):format(k, chk[2], tostring(c[k])), 2)
    end
  end
  if c.seed then zorch.manual_seed(c.seed) end
  return setmetatable({cfg = c, rank = 0, world_size = 1, micro = 0, last_norm = nil}, Engine)
end

function Engine:config()
  local c = {}
  for k, v in pairs(self.cfg) do c[k] = v end
  return c
end

-- Returns the model, loader and an optimizer whose step() runs once per
-- accumulation window, after clipping.
function Engine:prepare(model, loader, opt)
  if type(model) ~= "table" or not model.parameters then error("Engine:prepare: argument 1 must be a module", 2) end
  if opt ~= nil and (type(opt) ~= "table" or not opt.step) then error("Engine:prepare: argument 3 must be an optimizer", 2) end
  self.model = model
  if loader then loader.rank, loader.world_size = self.rank, self.world_size end
  if not opt then return model, loader end
  local engine = self
  local wrapped = setmetatable({}, {__index = opt})
  function wrapped.step()
    if engine.micro % engine.cfg.gradient_accumulation_steps ~= 0 then return false end
    if engine.cfg.gradient_clipping > 0 then engine:clip_grad_norm() end
    opt:step()
    return true
  end
  function wrapped.zero_grad()
    if engine.micro % engine.cfg.gradient_accumulation_steps == 0 then opt:zero_grad() end
  end
  self.optimizer = wrapped
  return model, loader, wrapped
end

-- loss / accumulation steps, then backward.
function Engine:backward(loss)
  if not zorch.is_tensor(loss) then error("Engine:backward: expected a loss tensor", 2) end
  local k = self.cfg.gradient_accumulation_steps
  self.micro = self.micro + 1
  if k > 1 then loss = loss * (1 / k) end
  loss:backward()
end

-- Global L2 norm of the gradients (summed in double); scales them down to
-- max_norm (default: gradient_clipping) when above it. Returns the norm.
function Engine:clip_grad_norm(max_norm)
  max_norm = max_norm or self.cfg.gradient_clipping
  local params = self.model and self.model:parameters() or {}
  local sq = 0
  for _, p in ipairs(params) do
    local g = p.grad
    if g then sq = sq + zorch._sumsq(g) end
  end
  local norm = math.sqrt(sq)
  if max_norm and max_norm > 0 then
    local coef = max_norm / (norm + 1e-6)
    if coef < 1 then
      zorch.no_grad(function()
        for _, p in ipairs(params) do
          local g = p.grad
          if g then g:copy_(g * coef) end
        end
      end)
    end
  end
  self.last_norm = norm
  return norm
end

function Engine:print(...)
  if self.rank == 0 then print(...) end
end

function Engine:save(tbl, path)
  if self.rank == 0 then zorch.save(tbl, path) end
end

return nil
