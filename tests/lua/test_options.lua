-- The Engine's option schema (lua/zorch/engine/options.lua): the C list and the
-- docs table are what it generates, and what it says is what the Engine does.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises = tap.ok, tap.raises
local S = debug.getregistry()["zorch.private"]._require("zorch.engine.options")

-- the generated files match the schema (run from tests/: the root is ..)
local rc = os.execute("cd .. && lua5.4 scripts/gen_options.lua --check")
ok(rc == true, "include/zorch_zero_options.h and docs/config.md's table are the schema's (scripts/gen_options.lua)")

-- every row is well formed, every DeepSpeed path has one row
local seen, good = {}, true
for _, r in ipairs(S.rows) do
  if not (r.doc and r.kind and (r.name or r.ds)) then good = false; print("# bad row " .. tostring(r.name)) end
  if r.status ~= "implemented" and r.status ~= "no effect" and r.status ~= "changes training" and r.status ~= "removed" then
    good = false
  end
  for _, p in ipairs(r.ds or {}) do
    if seen[p] then good = false; print("# path twice: " .. p) end
    seen[p] = true
  end
end
ok(good, "each row has a doc, a kind, a status; no DeepSpeed path is in two rows")

-- the defaults are the schema's, and each range is enforced with the schema's words
local e = zorch.Engine{}
local same = true
for _, r in ipairs(S.rows) do
  if r.name and e.cfg[r.name] ~= r.default and not (r.name == "steps_per_print") then same = false; print("# " .. r.name) end
end
ok(same, "Engine defaults are the schema's")
raises("zero_stage 4: the schema's words", function() zorch.Engine{zero_stage = 4} end,
       "zero_stage must be 0, 1, 2 or 3, got 4")
raises("initial_scale_power 65", function() zorch.Engine{initial_scale_power = 65} end,
       "initial_scale_power must be an integer in 0..64")
raises("min_loss_scale 0", function() zorch.Engine{min_loss_scale = 0} end, "min_loss_scale must be a number > 0")

-- a DeepSpeed path reads into its row's option; an ignored row is listed in its group
local read = debug.getregistry()["zorch.private"]._read_ds_config_text
local okr, cfg, un = read('{"zero_optimization": {"stage3_max_live_parameters": 5e3, "reduce_scatter": true}, ' ..
  '"comet": {"enabled": true}, "data_efficiency": {"enabled": true}}')
ok(okr and cfg.max_live_parameters == 5000, "a second spelling reads into its option")
ok(okr and un.kind["zero_optimization.reduce_scatter"] == "no effect" and un.kind.comet == "no effect"
   and un.kind.data_efficiency == "changes training", "ignored keys are grouped by their rows' status")
local okb, msg = read('{"zero_optimization": {"reduce_scatter": 3}}')
ok(not okb and msg:find("zero_optimization.reduce_scatter must be true or false", 1, true), "an ignored key's value is checked")

-- a key that reaches C: bf16.check_grad_overflow (one row; used by the step)
local okc, c2 = read('{"bf16": {"enabled": true, "check_grad_overflow": true}}')
ok(okc and c2.check_grad_overflow == true and c2.precision == "bf16", "bf16.check_grad_overflow reads into check_grad_overflow")
local okd, c3 = read('{"bf16": {"enabled": false, "check_grad_overflow": true}}')
ok(okd and c3.check_grad_overflow == nil, "bf16.check_grad_overflow is not read while bf16 is off")
local function inf_step(check)
  zorch.manual_seed(1)
  local e = zorch.Engine{precision = "bf16", check_grad_overflow = check}
  local m = zorch.nn.Linear(3, 2)
  local _, _, opt = e:prepare(m, nil, zorch.optim.SGD(m:parameters(), {lr = 0.1}))
  local before = m.weight:float():totable()
  opt:zero_grad()
  e:backward(zorch.mse_loss(m(zorch.randn(4, 3)), zorch.randn(4, 2)) * math.huge)
  local stepped = opt:step()
  local w = m.weight:float():totable()
  local finite = true
  for _, row in ipairs(w) do for _, v in ipairs(row) do finite = finite and v == v and v - v == 0 end end
  return stepped, e.steps, finite, before[1][1] == w[1][1]
end
local s1, n1, f1, same1 = inf_step(true)
ok(s1 == false and n1 == 0 and f1 and same1, "bf16 with check_grad_overflow: an inf gradient skips the step")
local s2, n2, f2 = inf_step(false)
ok(s2 == true and n2 == 1 and not f2, "bf16 without it: the step is taken (the weights are no longer finite)")

tap.done()
