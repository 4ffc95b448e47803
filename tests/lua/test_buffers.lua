-- Module buffers and BatchNorm: state dict names as PyTorch's, load, to, the
-- optimizer and the engine ignore buffers, train/eval, checkpoints keep them.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim

zorch.manual_seed(3)
local Net = nn.Module:extend "Net"
function Net:init()
  self.fc = nn.Linear(4, 3)
  self.bn = nn.BatchNorm1d(3)
end
function Net:forward(x) return self.bn(self.fc(x)) end

local m = Net()
local sd = m:state_dict()
local names = {}
for k in pairs(sd) do names[#names + 1] = k end
table.sort(names)
tap.ok(table.concat(names, " ") == "bn.bias bn.num_batches_tracked bn.running_mean bn.running_var bn.weight fc.bias fc.weight",
       "state dict names: " .. table.concat(names, " "))
tap.ok(sd["bn.num_batches_tracked"]:dtype() == "int64" and sd["bn.num_batches_tracked"]:dim() == 0,
       "num_batches_tracked is a 0-d int64")
tap.ok(#m:parameters() == 4 and #m:buffers() == 3, "4 parameters and 3 buffers")
local bn_names = {}
for n in m:named_buffers() do bn_names[#bn_names + 1] = n end
tap.ok(table.concat(bn_names, " ") == "bn.running_mean bn.running_var bn.num_batches_tracked", "named_buffers in order")
tap.ok(tostring(m.bn) == "nn.BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)",
       "repr: " .. tostring(m.bn))
tap.ok(not m.bn.running_mean.requires_grad, "buffers do not require grad")

-- training updates the running stats (momentum 0.1, unbiased variance); eval uses them
local x = zorch.randn(16, 4)
local h = zorch.no_grad(function() return m.fc(x) end)
local mu, var = h:mean(1), h:var(1)
local y = m(x)
tap.close(m.bn.running_mean, mu * 0.1, 1e-5, "running_mean = 0.1 * batch mean")
tap.close(m.bn.running_var, var * 0.1 + 0.9, 1e-5, "running_var = 0.9 + 0.1 * unbiased batch variance")
tap.ok(m.bn.num_batches_tracked:item() == 1, "num_batches_tracked counts the batch")
tap.ok(y:mean(1):abs():max():item() < 1e-5, "training output has zero batch mean")
y:sum():backward()
tap.ok(m.bn.running_mean.grad == nil, "no gradient reaches a buffer")
m:eval()
local ye = m(x)
local want = (h - m.bn.running_mean) / (m.bn.running_var + 1e-5):sqrt()
tap.close(ye, want, 1e-5, "eval normalises with the running stats")
tap.ok(m.bn.num_batches_tracked:item() == 1, "eval leaves the running stats")
m:train()

-- momentum = false: a cumulative average, as PyTorch's momentum=None
local cum = nn.BatchNorm1d(2, {momentum = false})
local a, b = zorch.randn(8, 2), zorch.randn(8, 2)
cum(a); cum(b)
tap.close(cum.running_mean, (a:mean(1) + b:mean(1)) / 2, 1e-5, "momentum=false averages the batch means")
tap.ok(tostring(cum):find("momentum=None", 1, true) ~= nil, "momentum=false prints as None")
-- no running stats: batch statistics in eval too, and no buffers
local nostat = nn.BatchNorm2d(2, {track_running_stats = false, affine = false})
tap.ok(#nostat:buffers() == 0 and #nostat:parameters() == 0, "track_running_stats=false, affine=false: nothing stored")
nostat:eval()
tap.ok(nostat(zorch.randn(3, 2, 2, 2)):mean({1, 3, 4}):abs():max():item() < 1e-5, "eval without running stats uses the batch")
tap.raises("BatchNorm2d wants 4-D input", function() nn.BatchNorm2d(2)(zorch.randn(3, 2)) end, "nn.BatchNorm2d", "4D", "(3, 2)")
tap.raises("BatchNorm1d wants C channels", function() nn.BatchNorm1d(2)(zorch.randn(3, 5)) end, "nn.BatchNorm1d", "(3, 5)")
tap.raises("an unknown option", function() nn.BatchNorm1d(2, {eps = 1e-3, mom = 1}) end, "unknown option 'mom'")

-- the optimizer sees parameters only: a step leaves the buffers alone
local before = m.bn.running_var:clone()
local opt = optim.SGD(m:parameters(), {lr = 0.1})
opt:zero_grad()
local out = m(x)
local rv_after_forward = m.bn.running_var:clone()
out:pow(2):sum():backward()
opt:step()
tap.close(m.bn.running_var, rv_after_forward, 0, "an optimizer step does not touch buffers")
tap.ok(((before - rv_after_forward):abs():max():item()) > 0, "(the forward did update them)")

-- load_state_dict loads buffers; strict names them when missing
local m2 = Net()
m2:load_state_dict(m:state_dict())
tap.close(m2.bn.running_mean, m.bn.running_mean, 0, "load_state_dict loads running_mean")
tap.ok(m2.bn.num_batches_tracked:item() == m.bn.num_batches_tracked:item(), "and num_batches_tracked")
local partial = m:state_dict()
partial["bn.running_var"] = nil
tap.raises("a missing buffer is named", function() Net():load_state_dict(partial) end, "missing keys", "bn.running_var")

-- to(dtype) converts float buffers only; to(device) moves them all
m2:to("float64")
tap.ok(m2.bn.running_mean:dtype() == "float64" and m2.bn.num_batches_tracked:dtype() == "int64",
       "to(float64): running stats float64, num_batches_tracked int64")

-- safetensors round trip with PyTorch's names
local tmp = tap.tmpdir()
zorch.save(m:state_dict(), tmp .. "/bn.safetensors")
local back = zorch.load(tmp .. "/bn.safetensors")
tap.ok(back["bn.num_batches_tracked"]:dtype() == "int64", "saved num_batches_tracked stays int64")
local m3 = Net()
m3:load_state_dict(back)
tap.close(m3.bn.running_var, m.bn.running_var, 0, "a saved file loads the buffers back")

-- register_buffer checks its arguments
tap.raises("register_buffer: a dotted name", function() m:register_buffer("a.b", zorch.ones(1)) end, "register_buffer", "'.'")
tap.raises("register_buffer: not a tensor", function() m:register_buffer("a", 3) end, "register_buffer", "tensor")
tap.raises("register_buffer: a parameter's name", function() m.fc:register_buffer("weight", zorch.ones(1)) end,
           "already a parameter")

-- checkpoints: the engine leaves buffers out of ZeRO and saves/restores them
local engine = zorch.Engine{zero_stage = 1}
local em = Net()
local eopt = optim.Adam(em:parameters(), {lr = 0.01})
local _, _, wrapped = engine:prepare(em, nil, eopt)
local p_numel = 0
for _, p in ipairs(em:parameters()) do p_numel = p_numel + p:numel() end
tap.ok(engine.zero:memory().numel == p_numel, ("the ZeRO engine holds the %d parameter elements only"):format(p_numel))
for _ = 1, 3 do
  local l = em(zorch.randn(8, 4)):pow(2):mean()
  wrapped:zero_grad(); engine:backward(l); wrapped:step()
end
local saved_rm, saved_n = em.bn.running_mean:clone(), em.bn.num_batches_tracked:item()
engine:save_checkpoint(tmp .. "/ck")
em(zorch.randn(8, 4)) -- moves the running stats on
tap.ok((em.bn.running_mean - saved_rm):abs():max():item() > 0, "a later forward changes the running stats")
engine:load_checkpoint(tmp .. "/ck")
tap.close(em.bn.running_mean, saved_rm, 0, "load_checkpoint restores running_mean")
tap.ok(em.bn.num_batches_tracked:item() == saved_n, ("and num_batches_tracked (%d)"):format(saved_n))
-- consolidation writes the buffers too
local Z = debug.getregistry()["zorch.private"]
Z._consolidate(tmp .. "/ck", tmp .. "/cons.safetensors")
local cons = zorch.load(tmp .. "/cons.safetensors")
tap.ok(cons["bn.running_var"] ~= nil and cons["bn.num_batches_tracked"]:dtype() == "int64",
       "a consolidated checkpoint holds the buffers")
tap.close(cons["bn.running_mean"], saved_rm, 0, "with rank 0's values")

-- two ranks at ZeRO stage 3: each keeps its own statistics; a checkpoint saves
-- rank 0's and restores them on both
local bin = tap.zorch()
if tap.has_mpi(bin) then
  local script = tap.temp_file([[
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim
zorch.manual_seed(1)
local m = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
local engine = zorch.Engine{zero_stage = 3}
local model, _, o = engine:prepare(m, nil, optim.Adam(m:parameters(), {lr = 0.01}))
if arg[1] == "resume" then engine:load_checkpoint(arg[2])
else
  for _ = 1, 3 do
    local l = model(zorch.randn(16, 6) + engine.rank):pow(2):mean() -- each rank its own data
    o:zero_grad(); engine:backward(l); o:step()
  end
  engine:save_checkpoint(arg[2])
end
print(("rank %d %s %.7f %d"):format(engine.rank, arg[1], m["1"].running_mean[1]:item(), m["1"].num_batches_tracked:item()))
]], ".lua")
  local ck = tmp .. "/ck2"
  local o1 = tap.run(("ZORCH_QUIET=1 %s launch -n 2 %s save %s"):format(bin, script, ck))
  local o2 = tap.run(("ZORCH_QUIET=1 %s launch -n 2 %s resume %s"):format(bin, script, ck))
  local s0, s1 = o1:match("rank 0 save (%S+) 3"), o1:match("rank 1 save (%S+) 3")
  local r0, r1 = o2:match("rank 0 resume (%S+) 3"), o2:match("rank 1 resume (%S+) 3")
  tap.ok(s0 and s1 and s0 ~= s1, ("the ranks' running means differ (%s, %s)"):format(s0, s1))
  tap.ok(r0 == s0 and r1 == s0, ("after load_checkpoint both ranks hold rank 0's (%s, %s)"):format(r0, r1))
else
  tap.ok(true, "# SKIP zorch was built without MPI")
end
tap.done()
