-- Parameter groups: grouped AdamW and SGD (with a StepLR) give PyTorch's
-- parameters step by step (tests/golden/groups.txt from gen_groups.py); the
-- Engine at ZeRO stages 0-3 on 1 and 2 ranks steps each group's runs of the
-- flat buffer with its options, equal to the optimizer alone; checkpoints and
-- state dicts keep each group's options; bad groups are refused by name.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local optim = zorch.optim
local Z = debug.getregistry()["zorch.private"] -- zorch's private helpers

-- ---- PyTorch's values --------------------------------------------------------------------------

local SHAPES = {A = {3, 4}, b = {4}, C = {4, 3}, d = {3}}
local ORDER = {"A", "b", "C", "d"}

local golden = {} -- case -> step -> name -> values
for line in io.lines("golden/groups.txt") do
  if line:sub(1, 1) ~= "#" then
    local case, step, name, rest = line:match("^(%S+) (%d+) (%S+) (.*)$")
    local v = {}
    for x in rest:gmatch("%S+") do v[#v + 1] = tonumber(x) end
    golden[case] = golden[case] or {}
    golden[case][tonumber(step)] = golden[case][tonumber(step)] or {}
    golden[case][tonumber(step)][name] = v
  end
end

-- the parameters and loss of gen_groups.py
local function make_params()
  local ps = {}
  for k, name in ipairs(ORDER) do
    local n = 1
    for _, s in ipairs(SHAPES[name]) do n = n * s end
    local v = {}
    for i = 0, n - 1 do v[#v + 1] = math.sin(0.37 * i + k) end
    ps[name] = zorch.tensor(v):reshape(SHAPES[name]):requires_grad_(true)
  end
  return ps
end
local function loss_of(ps)
  local total
  for k, name in ipairs(ORDER) do
    local p = ps[name]:reshape({-1})
    local w, c = {}, {}
    for i = 0, p:numel() - 1 do w[#w + 1] = 0.5 + 0.25 * (i % 3); c[#c + 1] = math.cos(0.11 * i + k) end
    local l = (zorch.tensor(w) * p * p * 0.5 + zorch.tensor(c) * p):sum()
    total = total and total + l or l
  end
  return total
end

local makers = {
  adamw = function(ps)
    return optim.AdamW({{params = {ps.A, ps.C}, weight_decay = 0.1},
                        {params = {ps.b, ps.d}, weight_decay = 0, lr = 0.03, betas = {0.8, 0.99}}},
                       {lr = 0.01, betas = {0.9, 0.95}, eps = 1e-8})
  end,
  sgd = function(ps)
    return optim.SGD({{params = {ps.A, ps.C}, momentum = 0.9, nesterov = true, weight_decay = 0.01},
                      {params = {ps.b, ps.d}, lr = 0.2}}, {lr = 0.05, momentum = 0})
  end,
}

for _, case in ipairs({"adamw", "sgd"}) do
  local ps = makers[case] and make_params()
  local opt = makers[case](ps)
  local sched = optim.lr_scheduler.StepLR(opt, 2, 0.5)
  local worst, count = 0, 0
  for step = 1, 5 do
    opt:zero_grad()
    loss_of(ps):backward()
    opt:step()
    sched:step()
    for _, name in ipairs(ORDER) do
      local got, want = ps[name]:reshape({-1}):totable(), golden[case][step][name]
      for i, y in ipairs(want) do
        worst = math.max(worst, math.abs(got[i] - y) / (math.abs(y) + 1e-3))
        count = count + 1
      end
    end
  end
  tap.ok(count == 5 * 31 and worst <= 2e-5,
         ("%s with two groups and StepLR: 5 steps equal torch.optim's (worst relative difference %.2g)"):format(
           case, worst))
end

-- ---- the groups and their options ----------------------------------------------------------------

do
  local ps = make_params()
  local opt = makers.adamw(ps)
  local g1, g2 = opt.param_groups[1], opt.param_groups[2]
  tap.ok(#opt.param_groups == 2 and #g1.params == 2 and g1.params[1] == ps.A and g2.params[2] == ps.d,
         "param_groups lists each group's parameters")
  tap.ok(g1.lr == 0.01 and g1.weight_decay == 0.1 and g1.betas[1] == 0.9 and g2.lr == 0.03 and g2.weight_decay == 0
         and g2.betas[1] == 0.8 and g2.eps == 1e-8 and g2.amsgrad == false,
         "each group holds its options: its own, else the defaults")
  tap.ok(opt.lr == 0.01, "opt.lr reads the first group's lr")
  opt.lr = 0.5
  tap.ok(g1.lr == 0.5 and g2.lr == 0.5, "setting opt.lr sets every group's")
  local text = tostring(opt)
  tap.ok(text:find("group 1 (2 parameters): lr=0.5", 1, true) and text:find("group 2 (2 parameters): lr=0.5", 1, true)
         and text:find("weight_decay=0.1", 1, true), "an optimizer prints every group: " .. text:gsub("\n", " | "))
  local plain = optim.SGD({ps.A}, {lr = 0.1})
  tap.ok(#plain.param_groups == 1 and plain.param_groups[1].params[1] == ps.A and plain.lr == 0.1,
         "a list of tensors is one group")

  -- schedulers move each group's lr from its own initial lr
  local o2 = makers.adamw(make_params())
  local s = optim.lr_scheduler.LambdaLR(o2, {lr_lambda = function(n) return 1 / (n + 1) end})
  s:step()
  tap.ok(math.abs(o2.param_groups[1].lr - 0.005) < 1e-15 and math.abs(o2.param_groups[2].lr - 0.015) < 1e-15,
         "LambdaLR scales each group's lr")
  local o3 = makers.adamw(make_params())
  local p = optim.lr_scheduler.ReduceLROnPlateau(o3, {patience = 0, factor = 0.5})
  p:step(1); p:step(2)
  tap.ok(math.abs(o3.param_groups[1].lr - 0.005) < 1e-15 and math.abs(o3.param_groups[2].lr - 0.015) < 1e-15,
         "ReduceLROnPlateau reduces each group's lr")
  local o4 = makers.adamw(make_params())
  local ds = Z._make_scheduler({type = "WarmupCosineLR", params = {total_num_steps = 10, warmup_num_steps = 2,
                                                                       warmup_type = "linear"}}, o4)
  ds.step(); ds.step()
  tap.ok(math.abs(o4.param_groups[2].lr / o4.param_groups[1].lr - 3) < 1e-12 and o4.param_groups[1].lr > 0,
         "WarmupCosineLR scales each group's lr")
  local o5 = makers.sgd(make_params())
  local ds2 = Z._make_scheduler({type = "WarmupLR", params = {warmup_min_lr = 0, warmup_max_lr = 0.4,
                                                                  warmup_num_steps = 4, warmup_type = "linear"}}, o5)
  ds2.step(); ds2.step()
  tap.ok(o5.param_groups[1].lr == 0.1 and o5.param_groups[2].lr == 0.1, "WarmupLR sets every group's lr")
end

-- ---- state_dict -----------------------------------------------------------------------------------

do
  local ps = make_params()
  local opt = makers.adamw(ps)
  for _ = 1, 2 do opt:zero_grad(); loss_of(ps):backward(); opt:step() end
  opt.param_groups[2].lr = 0.07
  local sd = opt:state_dict()
  local g = sd.param_groups
  tap.ok(#g == 2 and table.concat(g[1].params, ",") == "1,2" and table.concat(g[2].params, ",") == "3,4"
         and g[2].lr == 0.07 and g[1].weight_decay == 0.1 and g[2].betas[1] == 0.8 and sd.state[3].step == 2,
         "state_dict: PyTorch's layout (param_groups with indices, state by index)")
  -- a fresh optimizer with other options takes them back, then steps as the original
  local qs = make_params()
  for _, name in ipairs(ORDER) do zorch.no_grad(function() qs[name]:copy_(ps[name]) end) end
  local other = optim.AdamW({{params = {qs.A, qs.C}, weight_decay = 0.9}, {params = {qs.b, qs.d}, lr = 1}}, {lr = 0.3})
  other:load_state_dict(sd)
  tap.ok(other.param_groups[1].weight_decay == 0.1 and other.param_groups[2].lr == 0.07
         and other.param_groups[2].betas[2] == 0.99 and other.param_groups[1].params[1] == qs.A,
         "load_state_dict sets each group's options (the parameters stay)")
  opt:zero_grad(); loss_of(ps):backward(); opt:step()
  other:zero_grad(); loss_of(qs):backward(); other:step()
  local same = true
  for _, name in ipairs(ORDER) do same = same and (ps[name] - qs[name]):abs():max():item() == 0 end
  tap.ok(same, "after load_state_dict a step equals the original optimizer's")
  local one = optim.AdamW({qs.A, qs.C, qs.b, qs.d})
  tap.raises("load_state_dict: another number of groups", function() one:load_state_dict(sd) end,
             "load_state_dict", "2 parameter groups", "the optimizer 1")
  local sizes = optim.AdamW({{params = {qs.A}}, {params = {qs.C, qs.b, qs.d}}})
  tap.raises("load_state_dict: groups of other sizes", function() sizes:load_state_dict(sd) end,
             "load_state_dict: parameter group 1 has 2 parameters in the state, 1 in the optimizer")
end

-- ---- errors ---------------------------------------------------------------------------------------

do
  local ps = make_params()
  tap.raises("a parameter in two groups", function()
    optim.AdamW({{params = {ps.A, ps.b}}, {params = {ps.C, ps.A}}})
  end, "optim.AdamW: parameter 2 of group 2 is already parameter 1 of group 1")
  tap.raises("an unknown option in a group", function()
    optim.SGD({{params = {ps.A}}, {params = {ps.b}, momentun = 0.9}})
  end, "optim.SGD: unknown option 'momentun' (group 2)", "allowed: dampening, lr, momentum")
  tap.raises("an empty group", function() optim.Adam({{params = {ps.A}}, {params = {}}}) end,
             "optim.Adam: group 2 has no parameters")
  tap.raises("a group without params", function() optim.Lamb({{params = {ps.A}}, {lr = 0.1}}) end,
             "optim.Lamb: group 2 has no parameters")
  tap.raises("a bad option value in a group", function() optim.AdamW({{params = {ps.A}, lr = -1}}) end,
             "optim.AdamW: invalid lr (group 1): expected a number >= 0, got -1")
  tap.raises("a non-tensor in a group", function() optim.AdamW({{params = {ps.A, 3}}}) end,
             "optim.AdamW: parameter 2 of group 1 is a number, not a tensor")
  tap.raises("nesterov without momentum in a group", function()
    optim.SGD({{params = {ps.A}}, {params = {ps.b}, nesterov = true, momentum = 0}}, {momentum = 0.9})
  end, "optim.SGD: nesterov needs momentum > 0 and dampening 0 (group 2)")
  tap.raises("a group that is not a table", function() optim.SGD({{params = {ps.A}}, 5}) end,
             "optim.SGD: group 2 must be a table")
  tap.raises("a tensor twice in a plain list", function() optim.SGD({ps.A, ps.A}) end,
             "optim.SGD: parameter 2 is parameter 1 again")
  local m = zorch.nn.Linear(2, 2)
  local stranger = zorch.zeros(2, {requires_grad = true})
  local e = zorch.Engine{}
  tap.raises("the Engine: a group's parameter not in the model", function()
    e:prepare(m, nil, optim.AdamW({{params = {m.weight}}, {params = {m.bias, stranger}}}))
  end, "Engine:prepare: parameter 2 of the optimizer's group 2 is not a parameter of the model")
end

-- the Engine's optimizer: its state dict carries the groups' options
do
  local m = zorch.nn.Linear(3, 2)
  local e = zorch.Engine{zero_stage = 1}
  local _, _, o = e:prepare(m, nil, optim.AdamW({{params = {m.weight}, weight_decay = 0.2},
                                                 {params = {m.bias}, weight_decay = 0, lr = 0.5}}))
  local sd = o:state_dict()
  tap.ok(#sd.param_groups == 2 and sd.param_groups[1].weight_decay == 0.2 and sd.param_groups[2].lr == 0.5,
         "a prepared optimizer's state_dict has each group's options")
  o.param_groups[2].lr, o.param_groups[1].weight_decay = 0.1, 0.3
  o:load_state_dict(sd)
  tap.ok(o.param_groups[2].lr == 0.5 and o.param_groups[1].weight_decay == 0.2,
         "a prepared optimizer's load_state_dict restores them")
  tap.raises("a prepared optimizer refuses another number of groups", function()
    o:load_state_dict({state = {}, param_groups = {{lr = 1}}})
  end, "load_state_dict: the state has 1 parameter groups, the optimizer 2")
end

-- ---- the Engine: stages 0-3 on 1 and 2 ranks, and checkpoints -------------------------------------

local bin, run = tap.zorch(), tap.run
local tmp = tap.tmpdir()
local has_mpi = tap.has_mpi(bin)
local function worst(a, b)
  local w = 0
  for k, v in pairs(b) do w = math.max(w, ((a[k] - v):abs() / (v:abs() + 1e-3)):max():item()) end
  return w
end
-- (frozen: a parameter with requires_grad false in the one group; partial: an
-- optimizer over the last layer alone; both left as the optimizer alone leaves them)
for _, kind in ipairs({"adamw", "sgd", "lamb", "frozen", "partial"}) do
  local ref = ("%s/%s_plain.safetensors"):format(tmp, kind)
  local _, good = run(("ZORCH_QUIET=1 %s lua/groups_worker.lua %s plain %s"):format(bin, kind, ref))
  tap.ok(good, kind .. ": the optimizer alone")
  local want = good and zorch.load(ref)
  for _, n in ipairs({1, 2}) do
    if n == 1 or has_mpi then
      local ws = {}
      for stage = 0, 3 do
        local out = ("%s/%s_n%d_s%d.safetensors"):format(tmp, kind, n, stage)
        local launch = n > 1 and ("launch -n %d "):format(n) or ""
        local text, ok = run(("ZORCH_QUIET=1 %s %slua/groups_worker.lua %s stage%d %s"):format(bin, launch, kind, stage, out))
        if not ok then print("# " .. text:gsub("\n", "\n# ")) end
        ws[#ws + 1] = ok and want and worst(zorch.load(out), want) or math.huge
      end
      tap.ok(math.max(table.unpack(ws)) <= 1e-5,
             ("%s: the Engine at stages 0-3 on %d rank%s equals the optimizer alone (worst %s)"):format(kind, n,
               n == 1 and "" or "s", table.concat((function() local t = {} for i, w in ipairs(ws) do
                 t[i] = ("%.2g"):format(w) end return t end)(), ", ")))
    else
      tap.ok(true, "# SKIP zorch was built without MPI")
    end
  end
  -- a checkpoint after 3 steps resumed by an optimizer with other group options
  local ref2 = ("%s/%s_nosched.safetensors"):format(tmp, kind)
  run(("ZORCH_QUIET=1 %s lua/groups_worker.lua %s plain %s 5 nosched"):format(bin, kind, ref2))
  local want2 = zorch.load(ref2)
  for _, c in ipairs({{1, 1}, {2, 2}, {2, 3}}) do
    local n, stage = c[1], c[2]
    if n == 1 or has_mpi then
      local out = ("%s/%s_resume_n%d_s%d.safetensors"):format(tmp, kind, n, stage)
      local launch = n > 1 and ("launch -n %d "):format(n) or ""
      local text, ok = run(("ZORCH_QUIET=1 %s %slua/groups_worker.lua %s resume%d %s"):format(bin, launch, kind, stage, out))
      if not ok then print("# " .. text:gsub("\n", "\n# ")) end
      local w = ok and worst(zorch.load(out), want2) or math.huge
      tap.ok(w <= 1e-5, ("%s: a checkpoint at stage %d on %d rank%s resumes every group's options (worst %.2g)"):format(
        kind, stage, n, n == 1 and "" or "s", w))
    else
      tap.ok(true, "# SKIP zorch was built without MPI")
    end
  end
end

-- the manifest holds the group options
do
  local f = io.open(("%s/adamw_resume_n1_s1.safetensors.ckpt/latest"):format(tmp))
  local folder = f and f:read("l")
  if f then f:close() end
  local m = folder and io.open(("%s/adamw_resume_n1_s1.safetensors.ckpt/%s/manifest.json"):format(tmp, folder))
  local text = m and m:read("a") or ""
  if m then m:close() end
  tap.ok(text:find('"param_groups"', 1, true) and text:find('"weight_decay":%s*0%.1[^%d]') and text:find('"betas":%s*%[0%.8, 0%.99%]') ~= nil,
         "the checkpoint's manifest lists the groups' options")
end

os.execute("rm -rf " .. tmp)
tap.done()
