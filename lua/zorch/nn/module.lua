-- zorch.nn.module: the base of every module (nn.Module: registration of children,
-- parameters and buffers, state dicts, to, train/eval), nn.Parameter, deferred
-- initialisation, and the checks and option readers the layer files share,
-- returned as this module's table (`zorch._require "zorch.nn.module"`).
-- Parameter names follow PyTorch (`fc1.weight`), so state dicts move through
-- safetensors files both ways.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local check_options = zorch._require("zorch.util").check_options

local function class_call(cls, ...)
  local self = setmetatable({_order = {}, _children = {}, _params = {}, _buffers = {}, training = true}, cls)
  self:init(...)
  return self
end

-- Base of every module.
local Module = {__name = "nn.Module"}
Module.__index = Module
nn.Module = Module

-- nn.Module:extend "Name" makes a subclass; calling it makes an instance.
function Module:extend(name)
  if type(name) ~= "string" then error("Module:extend: expected a class name (string)", 2) end
  local cls = {__name = name}
  cls.__index = cls
  -- metamethods are not inherited through __index: copy them down
  for _, k in ipairs({"__call", "__newindex", "__tostring"}) do cls[k] = self[k] end
  return setmetatable(cls, {__index = self, __call = class_call})
end

function Module:init() end

function Module:forward()
  error(("%s: forward is not defined"):format(getmetatable(self).__name), 2)
end

-- ---- errors raised inside forward name the module ----------------------------
-- module(x) runs forward in a protected call (not a tail call), so an error
-- raised anywhere below gets, as it goes up through each module, the path of
-- the innermost module from the outermost one, written as Lua reaches it
-- (blocks[4].attn: list children from 1), its class, and where the innermost
-- forward written outside zorch is (the line it had reached when its frame
-- was still there, else where it is defined): a `return self.fc2(h)` tail
-- call leaves no frame of the user's in the traceback. Only strings are
-- annotated; other error objects go up untouched.
local getinfo = debug and debug.getinfo
local last = {} -- the message written last, and what the levels below knew

local function own(src) return src:sub(1, 7) == "@zorch/" end

-- The message handler: runs where the error was raised (the stack still
-- whole) and, as a rethrow passes each module, there again.
local function on_error(msg)
  if type(msg) ~= "string" or msg == last.msg or not getinfo then return msg end
  last.msg, last.orig, last.path, last.inner, last.child, last.where = nil, msg, nil, nil, nil, nil
  last.site_fn, last.site_line, last.site = nil, nil, nil
  for level = 2, 60 do
    local info = getinfo(level, "Slf")
    if not info then break end
    if info.what == "Lua" and not own(info.source) then
      last.site_fn, last.site_line = info.func, info.short_src .. ":" .. info.currentline
      break
    end
  end
  return msg
end

-- The path from parent down to child, a descendant (a module may call a
-- grandchild, as a forward that loops over a ModuleList does).
local function path_to(parent, child, depth)
  if depth > 32 then return nil end
  for k in pairs(parent._children) do
    local m = rawget(parent, k)
    local step = rawget(parent, "n") and k:match("^%d+$") and "[" .. (tonumber(k) + 1) .. "]"
      or (k:match("^[%a_][%w_]*$") and "." .. k or ("[%q]"):format(k))
    if m == child then return step end
    local below = type(m) == "table" and rawget(m, "_children") and path_to(m, child, depth + 1)
    if below then return step .. below end
  end
  return nil
end

local function annotate(self, msg)
  local name = getmetatable(self).__name
  if msg ~= last.msg then -- the innermost module: a new error
    if msg ~= last.orig then on_error(msg) end
    last.inner, last.path = name, ""
  else
    last.path = (path_to(self, last.child, 0) or "[?]") .. last.path
  end
  last.child = self
  local fwd = self.forward
  if getinfo and type(fwd) == "function" then
    local info = getinfo(fwd, "S")
    if not own(info.source) then
      if fwd == last.site_fn and not last.site then
        last.site = ("%s:forward at %s"):format(name, last.site_line)
        last.where = last.where or last.site -- the innermost one's frame is there: its line, once
      end
      last.where = last.where or ("%s:forward (defined at %s:%d)"):format(name, info.short_src, info.linedefined)
    end
  end
  local text = last.orig
  -- error(msg, 2) in a layer's forward now finds xpcall at level 2, a C
  -- function, so no position: the caller's line it meant is the site
  if last.site_line and not text:find("^[^\n]-:%d+: ") then text = last.site_line .. ": " .. text end
  if last.path ~= "" then
    text = ("%s\n  in module %s (%s) of %s"):format(text, last.path:gsub("^%.", ""), last.inner, name)
  elseif last.where then -- (a layer of zorch's called alone: its message names it already)
    text = ("%s\n  in %s"):format(text, last.inner)
  end
  if last.where then text = text .. ", in " .. last.where end
  if last.site and last.site ~= last.where then text = text .. ", from " .. last.site end
  last.msg = text
  return text
end

local function finish(self, ok, ...)
  if ok then return ... end
  local e = ...
  if type(e) ~= "string" then error(e, 0) end
  error(annotate(self, e), 0)
end

-- Forward hooks (PyTorch's): pre-hooks fn(module, args) run before forward,
-- args the call's arguments as a packed table; values they return replace the
-- arguments. Hooks fn(module, args, output) run after; a value returned
-- replaces the output. Each list is kept in registration order on the
-- instance; a handle's remove() takes its hook out.
local function add_hook(self, field, name, fn)
  local mt = getmetatable(fn)
  if type(fn) ~= "function" and not (mt and mt.__call) then
    error(("%s: argument 1 (hook) must be a function, got %s"):format(name, type(fn)), 3)
  end
  local list = rawget(self, field)
  if not list then list = {}; rawset(self, field, list) end
  local entry = {fn = fn}
  list[#list + 1] = entry
  return {remove = function()
    for i, e in ipairs(list) do if e == entry then table.remove(list, i); return end end
  end}
end
function Module:register_forward_pre_hook(fn)
  return add_hook(self, "_forward_pre_hooks", "register_forward_pre_hook", fn)
end
function Module:register_forward_hook(fn)
  return add_hook(self, "_forward_hooks", "register_forward_hook", fn)
end

local function run_forward(self, ...) return finish(self, xpcall(self.forward, on_error, self, ...)) end
local function hooked(self, pre, post, ...)
  local args = table.pack(...)
  for _, e in ipairs({table.unpack(pre or {})}) do
    local r = table.pack(e.fn(self, args))
    if r.n > 0 and r[1] ~= nil then args = r end
  end
  local out = table.pack(run_forward(self, table.unpack(args, 1, args.n)))
  for _, e in ipairs({table.unpack(post or {})}) do
    local r = table.pack(e.fn(self, args, table.unpack(out, 1, out.n)))
    if r.n > 0 and r[1] ~= nil then out = r end
  end
  return table.unpack(out, 1, out.n)
end
Module.__call = function(self, ...)
  local pre, post = rawget(self, "_forward_pre_hooks"), rawget(self, "_forward_hooks")
  if (pre and #pre > 0) or (post and #post > 0) then return hooked(self, pre, post, ...) end
  return run_forward(self, ...)
end

-- nn.Parameter(t, false): parameters made without requires_grad (weak keys).
local FROZEN_PARAM = setmetatable({}, {__mode = "k"})

-- Assigning a module, or a leaf tensor that requires grad (an nn.Parameter),
-- registers it, in order; a computed tensor (an activation kept in forward)
-- is a plain field.
Module.__newindex = function(self, k, v)
  if type(k) == "string" then
    if type(v) == "table" and getmetatable(v) and rawget(v, "_order") then
      self._children[k] = true
      table.insert(self._order, k)
    elseif zorch.is_tensor(v) and v.is_leaf and (v.requires_grad or FROZEN_PARAM[v]) then
      self._params[k] = true
      table.insert(self._order, k)
    end
  end
  rawset(self, k, v)
end

Module.__tostring = function(self)
  local lines = {getmetatable(self).__name .. "("}
  for _, k in ipairs(self._order) do
    if self._children[k] then
      lines[#lines + 1] = "  (" .. k .. "): " .. tostring(self[k]):gsub("\n", "\n  ")
    end
  end
  if #lines == 1 then return lines[1] .. ")" end
  lines[#lines + 1] = ")"
  return table.concat(lines, "\n")
end

-- Marks a tensor as a parameter (a leaf that requires grad); with
-- requires_grad false, a parameter that is not trained (PyTorch's
-- Parameter(t, requires_grad=False)): registered, saved and loaded.
function nn.Parameter(t, requires_grad)
  if not zorch.is_tensor(t) then error("nn.Parameter: expected a tensor", 2) end
  if requires_grad ~= nil and type(requires_grad) ~= "boolean" then
    error("nn.Parameter: requires_grad must be a boolean, got " .. type(requires_grad), 2)
  end
  if not t.is_leaf then error("nn.Parameter: the tensor must be a leaf (made by " .. tostring(t.grad_fn) ..
    "); pass its detach()", 2) end
  if requires_grad == false then
    if t.requires_grad then t:requires_grad_(false) end
    FROZEN_PARAM[t] = true
  elseif not t.requires_grad then
    t:requires_grad_(true)
  end
  return t
end

-- Visits (name, tensor) for every parameter, depth first in registration order.
-- A module is not entered again below itself (a child holding its parent), so
-- cycles end; with `seen`, a tensor met before (a tied weight) is skipped, as
-- PyTorch's named_parameters does; without it every name is listed (state dicts).
local function each_param(m, prefix, out, seen, path, kinds)
  path = path or {}
  kinds = kinds or "_params"
  path[m] = true
  for _, k in ipairs(m._order) do
    local v = rawget(m, k)
    if (m._params[k] and kinds ~= "_buffers" or rawget(m, "_buffers") and m._buffers[k] and kinds ~= "_params")
       and v ~= nil then
      if not (seen and seen[v]) then
        if seen then seen[v] = true end
        out[#out + 1] = {prefix .. k, v}
      end
    elseif m._children[k] and v ~= nil and not path[v] then
      each_param(v, prefix .. k .. ".", out, seen, path, kinds)
    end
  end
  path[m] = nil
  return out
end
-- The buffers (kinds "_buffers") or parameters and buffers together ("both"),
-- in registration order, every name listed.
local function each_buffer(m, kinds) return each_param(m, "", {}, nil, nil, kinds or "_buffers") end

-- Calls fn(module) once for m and each module below it, parents first; a
-- module reached twice (shared, or a reference back to a parent) is visited once.
local function each_module(m, fn, seen)
  seen = seen or {}
  if seen[m] then return end
  seen[m] = true
  fn(m)
  for _, k in ipairs(m._order) do
    local v = rawget(m, k)
    if m._children[k] and v ~= nil then each_module(v, fn, seen) end
  end
end

-- Each parameter once (the first name of a tied one).
-- an iterator over a list of {name, tensor}, and the list of its tensors
local function iter_named(list)
  local i = 0
  return function()
    i = i + 1
    if list[i] then return list[i][1], list[i][2] end
  end
end
local function tensors_of(list)
  local ts = {}
  for _, e in ipairs(list) do ts[#ts + 1] = e[2] end
  return ts
end

function Module:named_parameters() return iter_named(each_param(self, "", {}, {})) end
function Module:parameters() return tensors_of(each_param(self, "", {}, {})) end

-- Buffers: tensors a module keeps in its state dict that are not parameters
-- (BatchNorm's running statistics): they never get gradients, and neither
-- optimizers nor the ZeRO engine see them (parameters() leaves them out).
-- register_buffer(name, nil) reserves the name, as PyTorch's None buffer.
function Module:register_buffer(name, t)
  local cls = getmetatable(self).__name
  if type(name) ~= "string" or name == "" or name:find(".", 1, true) then
    error(("%s:register_buffer: name must be a non-empty string without '.', got %s"):format(cls, tostring(name)), 2)
  end
  if t ~= nil and not zorch.is_tensor(t) then
    error(("%s:register_buffer: '%s' must be a tensor or nil, got %s"):format(cls, name, type(t)), 2)
  end
  if self._params[name] or self._children[name] then
    error(("%s:register_buffer: '%s' is already a parameter or a module"):format(cls, name), 2)
  end
  if t ~= nil and t.requires_grad then t = t:detach() end
  if not rawget(self, "_buffers") then rawset(self, "_buffers", {}) end
  if not self._buffers[name] then
    self._buffers[name] = true
    table.insert(self._order, name)
  end
  rawset(self, name, t)
  return t
end

function Module:named_buffers() return iter_named(each_buffer(self)) end
function Module:buffers() return tensors_of(each_buffer(self)) end

local function is_device(where) return where == "cpu" or where:match("^cuda") ~= nil end

-- Moves (or converts) every parameter: m:to("cuda"), m:to("bfloat16"). The
-- parameters are new leaves (frozen ones stay frozen), so build the optimizer
-- after moving the model.
function Module:to(where)
  if type(where) ~= "string" then
    error(("%s:to: expected a device or dtype name (string), got %s"):format(getmetatable(self).__name,
      type(where)), 2)
  end
  local moved = {} -- a tied parameter stays one tensor
  local device = is_device(where)
  local function move(m)
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._params[k] and v ~= nil then
        moved[v] = moved[v] or v:detach():to(where):requires_grad_(v.requires_grad) -- a frozen one stays frozen
        rawset(m, k, moved[v])
      elseif rawget(m, "_buffers") and m._buffers[k] and v ~= nil then
        -- buffers follow a device; a dtype converts only the floating-point
        -- ones (num_batches_tracked stays int64), as in PyTorch
        local dt = v:dtype()
        if device or dt:match("^b?float") then
          moved[v] = moved[v] or v:to(where)
          rawset(m, k, moved[v])
        end
      end
    end
  end
  local ok, err = pcall(each_module, self, move)
  if not ok then
    error(("%s:to: %s"):format(getmetatable(self).__name, tostring(err):gsub("^[^:]*:%d+: ", "")), 2)
  end
  return self
end

function Module:children()
  local cs = {}
  for _, k in ipairs(self._order) do
    if self._children[k] then cs[#cs + 1] = rawget(self, k) end
  end
  return cs
end

-- Every module of the tree once, this one first (PyTorch's modules()), and
-- with their dotted names ("" for this one); apply(fn) calls fn on each.
local function each_named_module(self)
  local list = {}
  local function walk(m, prefix, seen)
    if seen[m] then return end
    seen[m] = true
    list[#list + 1] = {prefix, m}
    for _, k in ipairs(m._order) do
      local v = rawget(m, k)
      if m._children[k] and v ~= nil then walk(v, prefix == "" and k or (prefix .. "." .. k), seen) end
    end
  end
  walk(self, "", {})
  return list
end
function Module:named_modules() return iter_named(each_named_module(self)) end
function Module:modules() return tensors_of(each_named_module(self)) end
function Module:apply(fn)
  if type(fn) ~= "function" then error("Module:apply: expected a function, got " .. type(fn), 2) end
  for _, m in ipairs(self:modules()) do fn(m) end
  return self
end
-- requires_grad_(on = true) on every parameter: false freezes the module
function Module:requires_grad_(on)
  if on == nil then on = true end
  if type(on) ~= "boolean" then error("Module:requires_grad_: expected a boolean, got " .. type(on), 2) end
  for _, p in ipairs(self:parameters()) do p.requires_grad = on end
  return self
end

function Module:train(on)
  if on == nil then on = true end
  each_module(self, function(m) rawset(m, "training", on) end)
  return self
end

function Module:eval() return self:train(false) end

function Module:zero_grad()
  for _, p in ipairs(self:parameters()) do p.grad = nil end
end

-- A state dict prints one tensor a line: name, shape, dtype (and device
-- when not the CPU), in the model's order; names added later come last.
local function state_dict_tostring(sd)
  local names, seen = {}, {}
  for _, k in ipairs(getmetatable(sd).order) do
    if sd[k] ~= nil then names[#names + 1], seen[k] = k, true end
  end
  local extra = {}
  for k in pairs(sd) do if not seen[k] then extra[#extra + 1] = tostring(k) end end
  table.sort(extra)
  table.move(extra, 1, #extra, #names + 1, names)
  local shapes, wn, ws, numel = {}, 0, 0, 0
  for i, k in ipairs(names) do
    local t = sd[k]
    shapes[i] = zorch.is_tensor(t) and tostring(t.shape) or tostring(t)
    wn, ws = math.max(wn, #k), math.max(ws, #shapes[i])
  end
  local lines = {}
  for i, k in ipairs(names) do
    local t, line = sd[k], ("  %-" .. wn .. "s  %s"):format(k, shapes[i])
    if zorch.is_tensor(t) then
      local dev = t:device()
      line = ("%-" .. (wn + ws + 4) .. "s  %s%s"):format(line, t:dtype(), dev == "cpu" and "" or " " .. dev)
      numel = numel + t:numel()
    end
    lines[i] = line
  end
  table.insert(lines, 1, ("state_dict (%d tensor%s, %d elements)%s"):format(#names, #names == 1 and "" or "s",
    numel, #names > 0 and ":" or ""))
  return table.concat(lines, "\n")
end

function Module:state_dict()
  local engine = rawget(self, "_engine") -- ZeRO stage 3 holds slices: gather first
  if engine then engine:gather() end
  local sd, order = {}, {}
  for _, p in ipairs(each_param(self, "", {}, nil, nil, "both")) do
    -- under stage 3 the gathered pages go back after this: keep copies
    sd[p[1]] = engine and p[2]:detach():clone() or p[2]:detach()
    order[#order + 1] = p[1]
  end
  if engine then engine:release() end
  return setmetatable(sd, {__tostring = state_dict_tostring, order = order})
end

-- Copies tensors into the parameters; every missing or unexpected name, and
-- every shape mismatch, is an error unless strict is false. Everything is
-- checked before anything is written (or gathered, under ZeRO stage 3).
function Module:load_state_dict(sd, strict)
  if type(sd) ~= "table" then error("load_state_dict: expected a table of tensors, got " .. type(sd), 2) end
  if strict == nil then strict = true end
  local seen, missing, todo = {}, {}, {}
  for _, p in ipairs(each_param(self, "", {}, nil, nil, "both")) do
    local name, param = p[1], p[2]
    local t = sd[name]
    if t == nil then
      missing[#missing + 1] = name
    elseif not zorch.is_tensor(t) then
      error(("load_state_dict: '%s' is a %s in the state dict, not a tensor"):format(name, type(t)), 2)
    else
      seen[name] = true
      local a, b = table.concat(param.shape, ", "), table.concat(t.shape, ", ")
      if a ~= b then
        error(("load_state_dict: '%s' has shape (%s) in the model but (%s) in the state dict"):format(name, a, b), 2)
      end
      todo[#todo + 1] = name
    end
  end
  if strict then
    local unexpected = {}
    for k in pairs(sd) do if not seen[k] then unexpected[#unexpected + 1] = tostring(k) end end
    table.sort(unexpected)
    if #missing > 0 or #unexpected > 0 then
      error(("load_state_dict: missing keys {%s}, unexpected keys {%s}"):format(
        table.concat(missing, ", "), table.concat(unexpected, ", ")), 2)
    end
  end
  local engine = rawget(self, "_engine")
  if engine then engine:gather() end
  local params = {}
  for _, p in ipairs(each_param(self, "", {}, nil, nil, "both")) do params[p[1]] = p[2] end
  local ok, err = pcall(zorch.no_grad, function()
    for _, name in ipairs(todo) do
      params[name]:copy_(sd[name])
      zorch._deferred_done(params[name]) -- (a deferred parameter keeps the loaded values)
    end
  end)
  if engine then
    if ok then engine:sync_shard() end
    engine:release()
  end
  if not ok then error(err, 0) end
  return self
end

local function check_int(fn, name, v)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), 3)
  end
end

-- Deferred initialisation (DeepSpeed's zero.Init, for models larger than
-- memory): inside nn.deferred(fn), Linear's parameters are made without
-- their values (memory the system has not handed out yet) and remember how
-- to fill them; Engine:prepare fills each one where it then lives (at
-- stage 3 with offload_param on nvme, one group at a time, straight into the
-- file), and nn.materialize(module) fills them in place. Either way each one
-- draws from the generator in the order they were made, as without deferral.
local DEFERRED = setmetatable({}, {__mode = "k"}) -- parameter -> function(t) filling t
local deferring = 0
function nn.deferred(fn)
  if type(fn) ~= "function" then error("nn.deferred: expected a function that builds the model", 2) end
  deferring = deferring + 1
  local r = table.pack(pcall(fn))
  deferring = deferring - 1
  if not r[1] then error(r[2], 0) end
  return table.unpack(r, 2, r.n)
end
-- the fill of a deferred parameter (nil once filled, or for others)
function zorch._deferred_init(p) return DEFERRED[p] end
function zorch._deferred_done(p) DEFERRED[p] = nil end
function nn.materialize(module)
  for _, p in ipairs(module:parameters()) do
    local fill = DEFERRED[p]
    if fill then zorch.no_grad(function() fill(p) end); DEFERRED[p] = nil end
  end
  return module
end

-- U(-bound, bound), as torch.nn.init.kaiming_uniform_(a = sqrt(5)) gives Linear.
local function uniform(shape, bound)
  if deferring > 0 then
    local p = nn.Parameter(zorch.empty(shape))
    DEFERRED[p] = function(t) t:copy_(zorch.rand(shape) * (2 * bound) - bound) end
    return p
  end
  return nn.Parameter(zorch.rand(shape) * (2 * bound) - bound)
end

-- A dim given to a module: a non-zero integer (1-based; negative counts from the end).
local function check_dim(fn, name, d)
  if math.type(d) ~= "integer" or d == 0 then
    error(("%s: %s must be a non-zero integer (dims count from 1, negative from the end), got %s"):format(
      fn, name, tostring(d)), 3)
  end
end

local function shape_str(t) return "(" .. table.concat(t.shape, ", ") .. ")" end

-- Sizes are a number or a pair {h, w}; the modules print them as PyTorch's repr
-- does (a number as given, a pair as (h, w)).
local function size_str(v)
  if type(v) == "table" then return ("(%s, %s)"):format(tostring(v[1]), tostring(v[2])) end
  return tostring(v)
end
local function pair_of(v) return type(v) == "table" and v or {v, v} end
local function check_size(fn, name, v, lo)
  local ok = math.type(v) == "integer" and v >= lo
  if type(v) == "table" then
    ok = #v == 2 and math.type(v[1]) == "integer" and math.type(v[2]) == "integer" and v[1] >= lo and v[2] >= lo
  end
  if not ok then
    error(("%s: %s must be %s integer or a pair {h, w} of them, got %s"):format(fn, name,
      lo > 0 and "a positive" or "a non-negative", type(v) == "table" and size_str(v) or tostring(v)), 4)
  end
end
local function check_opts(fn, opts, allowed) return check_options(fn, opts, allowed, 4) end -- (a tail call)

local function py_bool(b) return b and "True" or "False" end

-- Reads options `opts` for fn against spec {name = {default, check, want}}: an
-- unknown key is check_options' error; a value failing check names fn, the
-- option and what it wants. `level` is where the error points, as error() counts from here.
local function read_opts(fn, opts, spec, level)
  opts = check_options(fn, opts, spec, level + 1)
  local o = {}
  for k, s in pairs(spec) do
    local v = opts[k]
    if v == nil then v = s[1] end
    if not s[2](v) then error(("%s: %s must be %s, got %s"):format(fn, k, s[3], tostring(v)), level) end
    o[k] = v
  end
  return o
end
local function is_reduction(v) return v == "mean" or v == "sum" or v == "none" end
local REDUCTION = {"mean", is_reduction, "'mean', 'sum' or 'none'"}
local function num_ge0(v) return type(v) == "number" and v >= 0 end
local function num_gt0(v) return type(v) == "number" and v > 0 end
local function is_num(v) return type(v) == "number" end
local function is_bool(v) return type(v) == "boolean" end
local function opt_tensor(v) return v == nil or zorch.is_tensor(v) end
local function nonzero_int(v) return math.type(v) == "integer" and v ~= 0 end
local function is_p(v) return type(v) == "number" and v > 0 end
local function spec_with(base, extra)
  local s = {}
  for k, v in pairs(base) do s[k] = v end
  for k, v in pairs(extra or {}) do s[k] = v end
  return s
end

local function need_tensor(fn, what, t)
  if not zorch.is_tensor(t) then error(("%s: %s must be a tensor, got %s"):format(fn, what, type(t)), 3) end
end

-- The items of a list the caller gave, joined for a message (any values).
local function list_str(t)
  local out = {}
  for i, v in ipairs(t) do out[i] = math.type(v) and tostring(v) or type(v) end
  return table.concat(out, ", ")
end

-- 1-d convolution and pooling over the 2-d ops with a unit height: input
-- (N, C, L) or (C, L); sizes are integers.
local function check_int1(fn, name, v, lo)
  if math.type(v) ~= "integer" or v < lo then
    error(("%s: %s must be %s integer, got %s"):format(fn, name, lo > 0 and "a positive" or "a non-negative",
      tostring(v)), 4)
  end
end
local function as_2d(fn, x)
  need_tensor(fn, "input", x)
  if x:dim() ~= 2 and x:dim() ~= 3 then
    error(("%s: expected input (N, C, L) or (C, L), got %s"):format(fn, shape_str(x)), 3)
  end
  return x:unsqueeze(-2)
end
-- The 2-d op's message about the input with a unit height, in 1-d terms:
-- (N, C, 1, L) as (N, C, L), a window (1, k) as k.
local function message_1d(fn, msg)
  msg = msg:gsub("^[^:]*:%d+: ", ""):gsub("^[%w_.]+2d", fn)
  msg = msg:gsub("%((%d+), (%d+), 1, (%d+)%)", "(%1, %2, %3)"):gsub("%((%d+), 1, (%d+)%)", "(%1, %2)")
  return (msg:gsub("%(1, (%d+)%)", "%1"):gsub("%(1 x (%d+)%)", "(%1)"))
end
-- runs f on the input with a unit height, naming fn in its errors (callers
-- call it without a tail call, so that the error points at their caller)
local function via_2d(fn, x, f)
  local x2 = as_2d(fn, x)
  local ok, y = pcall(f, x2)
  if not ok then error(message_1d(fn, tostring(y)), 3) end
  return y:squeeze(-2)
end

-- A number as Python's repr writes it: the shortest digits that read back,
-- a float with an integer value ending in ".0" (so modules print PyTorch's
-- `upper=0.3333333333333333`, `value=20.0`).
local function py_num(v)
  if math.type(v) ~= "float" then return tostring(v) end
  if v ~= v then return "nan" elseif v == math.huge then return "inf" elseif v == -math.huge then return "-inf" end
  local p = 1
  while p < 17 and tonumber(("%." .. p .. "g"):format(v)) ~= v do p = p + 1 end
  local e = tonumber(("%." .. (p - 1) .. "e"):format(v):match("e(.*)$"))
  if e < -4 or e >= 16 then return ("%." .. p .. "g"):format(v) end
  local s = ("%." .. math.max(p - 1 - e, 0) .. "f"):format(v)
  return s:find("%.") and s or s .. ".0"
end
-- A size as PyTorch prints it: a number as is, a list as a tuple.
local function tuple_str(v)
  if type(v) ~= "table" then return py_num(v) end
  local t = {}
  for i, x in ipairs(v) do t[i] = py_num(x) end
  return "(" .. table.concat(t, ", ") .. (#t == 1 and ",)" or ")")
end

-- d (1-based, negative from the end) within x's dims, or an error naming fn
-- and the input's shape; returns the positive dim.
local function dim_in(fn, name, d, x, level)
  local n = x:dim()
  if math.type(d) ~= "integer" or d == 0 or d > n or d < -n then
    error(("%s: %s must be a non-zero integer within the %d dims of input %s (dims count from 1), got %s"):format(
      fn, name, n, shape_str(x), tostring(d)), level + 1)
  end
  return d < 0 and n + 1 + d or d
end
local function need_number(fn, name, v, level)
  if type(v) ~= "number" then error(("%s: %s must be a number, got %s"):format(fn, name, tostring(v)), level + 1) end
end
local INT_DTYPES = {int64 = true, int32 = true, int16 = true, int8 = true, uint8 = true}
local FLOAT_DTYPES = {float32 = true, float64 = true, bfloat16 = true, float16 = true}
local function need_float(fn, what, t, level)
  if not FLOAT_DTYPES[t:dtype()] then
    error(("%s: %s must be a float tensor, got dtype %s"):format(fn, what, t:dtype()), level + 1)
  end
end
-- runs f(...) and raises its error as fn's (the op's name replaced), at level
local function as_fn(fn, level, f, ...)
  local r = table.pack(pcall(f, ...))
  if not r[1] then
    local msg = tostring(r[2]):gsub("^[^:]*:%d+: ", ""):gsub("^[%w_.]+: ", "")
    error(fn .. ": " .. msg, level + 1)
  end
  return table.unpack(r, 2, r.n)
end

-- The output of fn, shape `shape`, must fit in memory: an absurd size is the
-- allocation's error before any loop over it in Lua.
local function need_room(fn, shape, x, level)
  for _, v in ipairs(shape) do
    if math.type(v) ~= "integer" then
      error(("%s: the output size %s is too large for input %s"):format(fn, tostring(v), shape_str(x)), level + 1)
    end
  end
  as_fn(fn, level + 1, zorch.empty, shape, {dtype = x:dtype(), device = x:device()})
end

-- The leading dims of x before its last k, multiplied (1 when there are none).
local function lead_of(x, k)
  local b = 1
  for i = 1, x:dim() - k do b = b * x.shape[i] end
  return b
end
local function lead_shape(x, k, tail)
  local s = {}
  for i = 1, x:dim() - k do s[i] = x.shape[i] end
  for _, v in ipairs(tail) do s[#s + 1] = v end
  return s
end
local function pos_int(fn, name, v, level)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), level + 1)
  end
end

local function is_module(m) return type(m) == "table" and rawget(m, "_order") ~= nil end

-- linear must be an nn.Linear without a fused activation (for the layers that
-- wrap or replace one, such as quantisation's); refusal ends the message for one.
local function need_plain_linear(fn, linear, refusal, level)
  if type(linear) ~= "table" or getmetatable(linear) ~= zorch.nn.Linear then
    error(("%s: argument 1 must be an nn.Linear, got %s"):format(fn,
      type(linear) == "table" and tostring(getmetatable(linear) and getmetatable(linear).__name) or type(linear)), level + 1)
  end
  if rawget(linear, "activation") then
    error(("%s: a Linear with a fused activation (%s) %s"):format(fn, linear.activation, refusal), level + 1)
  end
end

-- What the layer files share.
return {
  FLOAT_DTYPES = FLOAT_DTYPES, INT_DTYPES = INT_DTYPES, Module = Module, REDUCTION = REDUCTION,
  as_fn = as_fn, check_dim = check_dim, check_int = check_int, check_int1 = check_int1,
  check_opts = check_opts, check_size = check_size, dim_in = dim_in, each_param = each_param,
  is_bool = is_bool, is_module = is_module, is_num = is_num, is_p = is_p,
  is_reduction = is_reduction, lead_of = lead_of, lead_shape = lead_shape, list_str = list_str,
  need_float = need_float, need_plain_linear = need_plain_linear, need_number = need_number, need_room = need_room,
  need_tensor = need_tensor, nonzero_int = nonzero_int, num_ge0 = num_ge0, num_gt0 = num_gt0,
  opt_tensor = opt_tensor, pair_of = pair_of, pos_int = pos_int, py_bool = py_bool, py_num = py_num,
  read_opts = read_opts, shape_str = shape_str, size_str = size_str, spec_with = spec_with,
  tuple_str = tuple_str, uniform = uniform, via_2d = via_2d,
}
