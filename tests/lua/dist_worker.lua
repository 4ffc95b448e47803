-- Process groups under zorch launch, for test_dist.lua:
--   zorch launch -n N dist_worker.lua coll
--     every rank checks the collectives of a layout's groups against the sums it
--     expects and prints "rank R ok" or what differs
--   zorch launch -n N dist_worker.lua engine STAGE TENSOR OUT [overlap | reuse]
--     the world split by dist.layout{tensor = TENSOR}; every data group trains the
--     same model with the Engine over its own ranks (data_group; overlap_comm
--     with "overlap", max_reuse_distance 1e9 with "reuse"); the first rank of each
--     data group writes the weights to OUT.<world rank> and prints the bytes it
--     sent in the last step
local zorch = require "zorch"
local dist, nn, optim = zorch.dist, zorch.nn, zorch.optim
local mode = arg[1]
local world = dist.world()
local R, W = world:rank(), world:size()
local bad = {}
local function expect(cond, what) if not cond then bad[#bad + 1] = what end end

if mode == "coll" then
  local T = W % 2 == 0 and 2 or 1
  local L = dist.layout{tensor = T}
  expect(L.tensor:size() == T and L.data:size() == W // T and L.pipeline:size() == 1, "group sizes")
  expect(dist.rank_of(L.sizes, L.coords) == R, "rank_of")
  -- the tensor group holds consecutive world ranks
  local tr = L.tensor:ranks()
  for i, r in ipairs(tr) do expect(r == R - L.coords.tensor + i - 1, "tensor group members") end
  -- all-reduce over each group: the sum of its members' world ranks
  for _, kind in ipairs({"tensor", "data", "model"}) do
    local g, want = L[kind], 0
    for _, r in ipairs(g:ranks()) do want = want + r end
    local t = zorch.tensor({R * 1.0, 1.0})
    g:allreduce(t)
    expect(t[1]:item() == want and t[2]:item() == g:size(), kind .. " allreduce")
    local m = zorch.tensor({R * 1.0})
    g:allreduce(m, "max")
    expect(m:item() == g:ranks()[g:size()], kind .. " allreduce max")
  end
  -- all-gather and reduce-scatter over the data group
  local D = L.data
  local all = zorch.zeros(D:size() * 2)
  D:allgather(zorch.tensor({R * 1.0, -R * 1.0}), all)
  for i, r in ipairs(D:ranks()) do expect(all[2 * i - 1]:item() == r and all[2 * i]:item() == -r, "data allgather") end
  local mine = zorch.zeros(2)
  D:reduce_scatter(zorch.ones(D:size() * 2) * (R + 1), mine)
  local s = 0
  for _, r in ipairs(D:ranks()) do s = s + r + 1 end
  expect(mine[1]:item() == s and mine[2]:item() == s, "data reduce_scatter")
  -- a ring in the world, both directions at once, int64 payloads
  local right, left = (R + 1) % W, (R - 1) % W
  local got = zorch.zeros(3, {dtype = "int64"})
  world:sendrecv(zorch.tensor({R, R * 10, R * 100}, {dtype = "int64"}), right, got, left)
  expect(got[1]:item() == left and got[3]:item() == left * 100, "ring sendrecv")
  -- separate send and receive along a chain
  local x = zorch.zeros(2)
  if R % 2 == 0 and R + 1 < W then world:send(zorch.tensor({7.0, R * 1.0}), R + 1) end
  if R % 2 == 1 then world:recv(x, R - 1); expect(x[1]:item() == 7 and x[2]:item() == R - 1, "send/recv") end
  -- a message that does not fit the receiving buffer is an error, not a crash
  if W >= 2 and R < 2 then
    local ok, err
    if R == 0 then ok = pcall(world.send, world, zorch.zeros(4), 1)
    else ok, err = pcall(world.recv, world, zorch.zeros(2), 0) end
    if R == 1 then expect(not ok and tostring(err):find("sendrecv", 1, true), "oversized message refused: " .. tostring(err)) end
  end
  -- broadcast from the last rank of the model group
  local b = zorch.tensor({L.model:rank() == L.model:size() - 1 and 5.5 or 0.0})
  L.model:broadcast(b, L.model:size() - 1)
  expect(b:item() == 5.5, "model broadcast")
  world:barrier()
  print(#bad == 0 and ("rank %d ok"):format(R) or ("rank %d FAILED: %s"):format(R, table.concat(bad, "; ")))
  return
end

-- engine
local stage, T, out, overlap, reuse = tonumber(arg[2]), tonumber(arg[3]), arg[4], arg[5] == "overlap", arg[5] == "reuse"
local L = dist.layout{tensor = T}
zorch.manual_seed(5)
local m = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
local engine = zorch.Engine{zero_stage = math.tointeger(stage), reduce_bucket_size = 32, gradient_clipping = 1.0,
                            data_group = L.data, overlap_comm = overlap,
                            max_reuse_distance = reuse and 1000000000 or 0}
local o = optim.Adam(m:parameters(), {lr = 0.01})
m, _, o = engine:prepare(m, nil, o)
local N, d, D = 16, engine.rank, engine.world_size
local per = N // D
for step = 1, 4 do
  local xs, ys = {}, {}
  for i = d * per, (d + 1) * per - 1 do
    for j = 0, 5 do xs[#xs + 1] = math.sin(0.1 * (i * 6 + j) + step) end
    for j = 0, 2 do ys[#ys + 1] = math.cos(0.2 * (i * 3 + j) - step) end
  end
  local loss = zorch.mse_loss(m(zorch.tensor(xs):reshape({per, 6})), zorch.tensor(ys):reshape({per, 3}))
  o:zero_grad()
  engine:backward(loss)
  o:step()
end
local c = engine:comm_report()
if stage >= 2 and D > 1 and not (c.in_flight_s > 0 and c.waited_s <= c.in_flight_s) then
  error(("overlap_comm reported in flight %g s, waited %g s"):format(c.in_flight_s, c.waited_s))
end
local sd = m:state_dict()
if d == 0 then zorch.save(sd, ("%s.%d"):format(out, R)); print(("sent %d"):format(c.sent)) end
