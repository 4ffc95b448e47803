-- Frozen parameters outside the Engine's buffers. A parameter that is frozen
-- (requires_grad false) at prepare and in none of the optimizer's groups is
-- never stepped, so the engine keeps no master weight, gradient or optimizer
-- state for it: it stays a plain tensor of the model, in the engine's compute
-- dtype on its device, whole on every rank (at stage 3 too). LoRA's base
-- weights at bf16 then cost their bf16 bytes, as in PEFT over DeepSpeed.
-- Checkpoints write them with the model's buffers (rank 0's file).
-- Kept in the engine as before (for a correct step or a correct checkpoint):
--   a frozen parameter of an optimizer group (it may be unfrozen later);
--   every parameter with an optimizer that has no parameter groups;
--   offload_param (the parameters live in the file);
--   a model split across ranks (a layout with tensor or pipeline > 1, or norm
--   groups): its pieces are resharded by the checkpoint's layout;
--   a model whose parameters would all be left out (the engine needs one).
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end
local M = {}

local COMPUTE = {fp32 = "float32", bf16 = "bfloat16", fp16 = "float16"}
local SIZES = {float64 = 8, float32 = 4, bfloat16 = 2, float16 = 2}

-- A floating-point tensor's bytes (0 for nil).
function M.bytes(t) return t and t:numel() * SIZES[t:dtype()] or 0 end

-- Whether prepare may leave frozen parameters out of the buffers at all.
local function may_split(engine, opt)
  if engine.param_dir then return false end
  if engine.layout and engine.layout.model:size() > 1 then return false end
  if engine.norm_groups then return false end
  return opt == nil or type(opt.param_groups) == "table"
end

-- Each of the model's parameters in the engine's compute dtype, as a tensor
-- of its own (tied ones stay one tensor), in every module that holds it.
local function cast(model, out, dtype)
  local new = {}
  for _, m in ipairs(model:modules()) do
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._params[k] and v ~= nil and out[v] then
        if not new[v] then
          new[v] = v:dtype() == dtype and v or zorch.no_grad(function() return v:detach():to(dtype) end)
          new[v].requires_grad = false
        end
        rawset(m, k, new[v])
      end
    end
  end
  return new
end

-- split(engine, model, group_of, opt) -> the engine's parameters, their names
-- and groups (group_of's entries, in the same order), and the frozen ones
-- left out, {{name, tensor}, ...}. group_of: the group of each of the
-- model's parameters (Engine:group_indices), or nil.
function M.split(engine, model, group_of, opt)
  local names, all = {}, {}
  for name, p in model:named_parameters() do names[#names + 1], all[#all + 1] = name, p end
  local out, any_kept = {}, false
  if may_split(engine, opt) then
    for i, p in ipairs(all) do
      if not p.requires_grad and not (group_of and group_of[i]) then out[p] = true else any_kept = true end
    end
  end
  if not any_kept then out = {} end
  local new = cast(model, out, COMPUTE[engine.cfg.precision])
  local params, pnames, groups, frozen = {}, {}, group_of and {} or nil, {}
  for i, p in ipairs(all) do
    if out[p] then frozen[#frozen + 1] = {names[i], new[p]}
    else
      params[#params + 1], pnames[#pnames + 1] = p, names[i]
      if groups then groups[#groups + 1] = group_of[i] end
    end
  end
  return params, pnames, groups, frozen
end

-- Bytes and elements of the frozen parameters held outside the engine.
function M.size(frozen)
  local bytes, numel = 0, 0
  for _, f in ipairs(frozen or {}) do
    numel = numel + f[2]:numel()
    bytes = bytes + M.bytes(f[2])
  end
  return bytes, numel
end

return M
