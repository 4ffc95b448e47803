-- Recurrent layers and cells (nn.RNN, nn.LSTM, nn.GRU, nn.RNNCell, nn.LSTMCell,
-- nn.GRUCell): outputs, final states and gradients against PyTorch's
-- (lua/nn/rnn.safetensors, from lua/nn/gen_rnn.py), state-dict names and
-- shapes, shapes of every layout, dropout, a short training run, bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local nn, optim = zorch.nn, zorch.optim

local golden = zorch.load("lua/nn/rnn.safetensors").cases

-- the largest |a - b| relative to the largest |b| (0 for both empty)
local function rel(a, b)
  if a == nil or b == nil or tostring(a.shape) ~= tostring(b.shape) then return math.huge end
  if b:numel() == 0 then return 0 end
  local d = (a:to("float64") - b:to("float64")):abs():max():item()
  return d / math.max(b:abs():max():item(), 1e-12)
end
local function leaf(t, dtype) return t:detach():to(dtype or "float64"):clone():requires_grad_(true) end
local function shape(t) return tostring(t.shape) end

-- Runs a golden case in `dtype`: the module gets PyTorch's weights, the loss
-- the file's weights; returns the worst error of the values and of the gradients.
local function run_case(c, dtype)
  local m = nn[c.kind](c.args[1], c.args[2], c.opts):to(dtype)
  local sd = {}
  for k, v in pairs(c.params) do sd[k] = v:to(dtype) end
  m:load_state_dict(sd)
  if c.eval then m:eval() end
  local x, h0, c0 = leaf(c.x, dtype), c.h0 and leaf(c.h0, dtype), c.c0 and leaf(c.c0, dtype)
  local state = c0 and {h0, c0} or h0
  local out, hn, cn
  if c.kind == "LSTMCell" then
    local s = m(x, state)
    out, cn = s[1], s[2]
  elseif c.kind:match("Cell$") then
    out = m(x, state)
  else
    out, hn = m(x, state)
    if c.kind == "LSTM" then hn, cn = hn[1], hn[2] end
  end
  local loss = (out * c.w_out:to(dtype)):sum()
  if c.hn then loss = loss + (hn * c.w_h:to(dtype)):sum() end
  if c.cn then loss = loss + (cn * c.w_c:to(dtype)):sum() end
  loss:backward()
  local e = rel(out, c.out)
  if c.hn then e = math.max(e, rel(hn, c.hn)) end
  if c.cn then e = math.max(e, rel(cn, c.cn)) end
  if (c.hn == nil) ~= (hn == nil) or (c.cn == nil) ~= (cn == nil) then e = math.huge end
  local g = rel(x.grad, c.grads.x)
  if h0 then g = math.max(g, rel(h0.grad, c.grads.h0)) end
  if c0 then g = math.max(g, rel(c0.grad, c.grads.c0)) end
  local n = 0
  for k, p in m:named_parameters() do
    g = math.max(g, rel(p.grad, c.grads.params[k]))
    n = n + 1
  end
  if n ~= #c.names then g = math.huge end
  return e, g, m
end

-- ---- PyTorch's values and gradients ---------------------------------------------------------------
ok(#golden >= 28, ("lua/nn/rnn.safetensors has its %d cases"):format(#golden))
for _, c in ipairs(golden) do
  local e, g, m = run_case(c, "float64")
  ok(e <= 1e-12 and g <= 1e-12, ("%s: PyTorch's outputs and states (worst %.2g) and gradients (worst %.2g)"):format(
    c.name, e, g))
  -- the state dict: PyTorch's names, in its order, with its shapes
  local sd = m:state_dict()
  local order, same = getmetatable(sd).order, true
  for i, k in ipairs(c.names) do
    same = same and order[i] == k and shape(sd[k]) == shape(c.params[k])
  end
  ok(same and #order == #c.names, c.name .. ": state dict names, order and shapes as PyTorch's")
end
-- and in float32, the default dtype, on the same weights
for _, name in ipairs({"lstm_2l_bi_h0", "gru_2l_bi_h0", "rnn_relu_2l_bi_h0", "lstm_proj_2l_bi", "gru_cell"}) do
  for _, c in ipairs(golden) do
    if c.name == name then
      local e, g = run_case(c, "float32")
      ok(e <= 1e-5 and g <= 1e-4, ("%s in float32: values (worst %.2g) and gradients (worst %.2g)"):format(name, e, g))
    end
  end
end

-- ---- shapes and layouts ---------------------------------------------------------------------------
zorch.manual_seed(3)
do
  local m = nn.LSTM(4, 6, {num_layers = 2, bidirectional = true, proj_size = 3, batch_first = true})
  local out, s = m(zorch.randn(2, 7, 4))
  ok(shape(out) == "(2, 7, 6)" and shape(s[1]) == "(4, 2, 3)" and shape(s[2]) == "(4, 2, 6)",
    "LSTM batch_first, 2 layers, bidirectional, proj_size: output (N, L, 2 proj), h_n (4, N, proj), c_n (4, N, hidden)")
  local uo, us = m(zorch.randn(7, 4))
  ok(shape(uo) == "(7, 6)" and shape(us[1]) == "(4, 3)" and shape(us[2]) == "(4, 6)",
    "LSTM unbatched: output (L, 2 proj), h_n (4, proj), c_n (4, hidden)")
  ok(type(s) == "table" and #s == 2 and not zorch.is_tensor(s), "LSTM returns its final state as the table {h_n, c_n}")
  local g = nn.GRU(4, 6, {num_layers = 3})
  local go, gh = g(zorch.randn(5, 2, 4))
  ok(shape(go) == "(5, 2, 6)" and shape(gh) == "(3, 2, 6)", "GRU: output (L, N, hidden), h_n (layers, N, hidden)")
  local r = nn.RNN(4, 6, {bidirectional = true})
  local ro, rh = r(zorch.randn(5, 2, 4), zorch.zeros(2, 2, 6))
  ok(shape(ro) == "(5, 2, 12)" and shape(rh) == "(2, 2, 6)", "RNN bidirectional: output (L, N, 2 hidden)")
  -- the last step of the forward direction is h_n[1]; the reverse one's first output is h_n[2]
  ok(rel(ro[5]:narrow(2, 1, 6), rh[1]) == 0 and rel(ro[1]:narrow(2, 7, 6), rh[2]) == 0,
    "RNN bidirectional: h_n holds the forward direction's last step and the reverse one's first")
  local b0 = nn.GRU(4, 3)(zorch.randn(5, 0, 4))
  ok(shape(b0) == "(5, 0, 3)", "an empty batch gives an empty output")
end

-- the cells: batched and unbatched, the state fed back
do
  local cell = nn.LSTMCell(3, 4)
  local st = cell(zorch.randn(2, 3))
  ok(type(st) == "table" and shape(st[1]) == "(2, 4)" and shape(st[2]) == "(2, 4)", "LSTMCell returns {h', c'}")
  st = cell(zorch.randn(2, 3), st)
  ok(shape(st[1]) == "(2, 4)", "LSTMCell takes its own output as the next state")
  ok(shape(nn.GRUCell(3, 4)(zorch.randn(3))) == "(4,)", "GRUCell unbatched: h' (hidden)")
  ok(shape(nn.RNNCell(3, 4)(zorch.randn(5, 3), zorch.randn(5, 4))) == "(5, 4)", "RNNCell batched: h' (N, hidden)")
end

-- nn.LSTM is LSTMCell unrolled over the sequence (the same weights)
do
  zorch.manual_seed(4)
  local m, cell = nn.LSTM(3, 4):to("float64"), nn.LSTMCell(3, 4):to("float64")
  cell:load_state_dict({weight_ih = m.weight_ih_l0, weight_hh = m.weight_hh_l0, bias_ih = m.bias_ih_l0,
                        bias_hh = m.bias_hh_l0})
  local x = zorch.randn(5, 2, 3):to("float64")
  local out, s = m(x)
  local st, worst = nil, 0
  for t = 1, 5 do
    st = cell(x[t], st)
    worst = math.max(worst, rel(st[1], out[t]))
  end
  ok(worst <= 1e-14 and rel(st[2], s[2][1]) <= 1e-14, ("LSTM equals LSTMCell over the steps (worst %.2g)"):format(worst))
  local g, gc = nn.GRU(3, 4):to("float64"), nn.GRUCell(3, 4):to("float64")
  gc:load_state_dict({weight_ih = g.weight_ih_l0, weight_hh = g.weight_hh_l0, bias_ih = g.bias_ih_l0,
                      bias_hh = g.bias_hh_l0})
  local go = g(x)
  local h
  for t = 1, 5 do h = gc(x[t], h) end
  ok(rel(h, go[5]) <= 1e-14, "GRU equals GRUCell over the steps")
end

-- ---- defaults, initialisation, printing -----------------------------------------------------------
do
  local m = nn.LSTM(10, 20)
  ok(m.num_layers == 1 and m.bias == true and m.batch_first == false and m.dropout == 0 and m.bidirectional == false
     and m.proj_size == 0, "LSTM's defaults: num_layers 1, bias, not batch_first, dropout 0, one direction, no projection")
  local bound, worst, spread = 1 / math.sqrt(20), 0, 0
  for _, p in ipairs(m:parameters()) do
    worst = math.max(worst, p:abs():max():item())
    spread = math.max(spread, (p:max() - p:min()):item())
  end
  ok(worst <= bound and spread > bound, "parameters drawn from U(-1/sqrt(hidden), 1/sqrt(hidden))")
  ok(m.weight_ih_l0.requires_grad and m.weight_ih_l0.is_leaf and #m:parameters() == 4, "4 parameters, leaves")
  local c = nn.GRUCell(3, 16)
  local cw = 0
  for _, p in ipairs(c:parameters()) do cw = math.max(cw, p:abs():max():item()) end
  ok(cw <= 0.25 and shape(c.weight_ih) == "(48, 3)" and shape(c.bias_hh) == "(48,)", "GRUCell: 3 gates, bound 1/sqrt(16)")
  ok(tostring(nn.LSTM(10, 20, {num_layers = 2, batch_first = true, dropout = 0.1, bidirectional = true, proj_size = 5}))
     == "nn.LSTM(10, 20, proj_size=5, num_layers=2, batch_first=True, dropout=0.1, bidirectional=True)",
     "LSTM prints as PyTorch's repr")
  ok(tostring(nn.RNNCell(3, 4, {bias = false, nonlinearity = "relu"})) == "nn.RNNCell(3, 4, bias=False, nonlinearity=relu)",
     "RNNCell prints as PyTorch's repr")
  ok(tostring(nn.GRU(3, 4, {bias = false})) == "nn.GRU(3, 4, bias=False)", "GRU prints as PyTorch's repr")
  ok(#nn.RNN(3, 4, {bias = false}):parameters() == 2 and nn.RNN(3, 4, {bias = false}).bias_ih_l0 == nil,
     "bias = false: no bias parameters")
  local seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU())
  local holder = nn.Module:extend "Holder"
  function holder:init() self.rnn = nn.GRU(3, 4) end
  local h = holder()
  ok(h:state_dict()["rnn.weight_hh_l0"] ~= nil and seq ~= nil, "a recurrent layer as a child: names under its prefix")
  ok(m:flatten_parameters() == m, "flatten_parameters is accepted (and does nothing)")
end

-- ---- dropout between layers -----------------------------------------------------------------------
do
  zorch.manual_seed(5)
  local m = nn.GRU(4, 8, {num_layers = 2, dropout = 0.5})
  local x = zorch.randn(6, 3, 4)
  local e1 = m:eval()(x)
  local e2 = m(x)
  local t1 = m:train()(x)
  ok(rel(e1, e2) == 0 and rel(t1, e1) > 1e-3, "dropout acts between layers in training only")
  local one = nn.GRU(4, 8, {dropout = 0.5}) -- (no layer after the first: nothing dropped)
  ok(rel(one(x), one:eval()(x)) == 0, "one layer: dropout does nothing")
end

-- ---- a tiny sequence task: remember the first element ---------------------------------------------
do
  zorch.manual_seed(6)
  local Model = nn.Module:extend "Recall"
  function Model:init()
    self.lstm = nn.LSTM(1, 16, {batch_first = true})
    self.head = nn.Linear(16, 1)
  end
  function Model:forward(x)
    local out = self.lstm(x)
    return self.head(out:select(2, x.shape[2]))
  end
  local model = Model()
  local opt = optim.Adam(model:parameters(), {lr = 0.02})
  local x = zorch.randn(32, 5, 1)
  local y = x:select(2, 1)
  local first, last
  for i = 1, 60 do
    opt:zero_grad()
    local loss = zorch.mse_loss(model(x), y)
    loss:backward()
    opt:step()
    if i == 1 then first = loss:item() end
    last = loss:item()
  end
  ok(last < 0.3 * first, ("training an LSTM to recall the first step: loss %.3f -> %.3f"):format(first, last))
  local g = nn.GRU(2, 8)
  local o2 = optim.SGD(g:parameters(), {lr = 0.5})
  local xs, target = zorch.randn(4, 6, 2), zorch.randn(4, 6, 8):tanh() * 0.5
  local l0, l1
  for i = 1, 30 do
    o2:zero_grad()
    local loss = zorch.mse_loss(g(xs), target)
    loss:backward()
    o2:step()
    if i == 1 then l0 = loss:item() end
    l1 = loss:item()
  end
  ok(l1 < 0.8 * l0, ("training a GRU with SGD: loss %.3f -> %.3f"):format(l0, l1))
end

-- ---- bad arguments --------------------------------------------------------------------------------
local lstm = nn.LSTM(10, 20, {num_layers = 2})
local rnn = nn.RNN(10, 20, {num_layers = 2, batch_first = true})
raises("LSTM: wrong input size", function() lstm(zorch.randn(5, 3, 7)) end,
  "nn.LSTM: expected input (L, N, 10) or unbatched (L, 10), got (5, 3, 7)")
raises("RNN batch_first: wrong input size", function() rnn(zorch.randn(3, 5, 7)) end,
  "nn.RNN: expected input (N, L, 10)", "got (3, 5, 7)")
raises("LSTM: 4-d input", function() lstm(zorch.randn(5, 3, 10, 1)) end, "nn.LSTM: expected input", "(5, 3, 10, 1)")
raises("LSTM: not a tensor", function() lstm({1, 2}) end, "nn.LSTM: input must be a tensor, got table")
raises("GRU: empty sequence", function() nn.GRU(10, 20)(zorch.randn(0, 3, 10)) end,
  "nn.GRU: the sequence length must be at least 1, got input (0, 3, 10)")
raises("RNN: hx of the wrong shape", function() rnn(zorch.randn(3, 5, 10), zorch.randn(1, 3, 20)) end,
  "nn.RNN: expected hx (2, 3, 20) for input (3, 5, 10), got (1, 3, 20)")
raises("RNN: unbatched input with a batched hx", function() rnn(zorch.randn(5, 10), zorch.randn(2, 1, 20)) end,
  "nn.RNN: expected hx (2, 20) for input (5, 10), got (2, 1, 20)")
raises("LSTM: hx a tensor", function() lstm(zorch.randn(5, 3, 10), zorch.randn(2, 3, 20)) end,
  "nn.LSTM: hx must be a table {h_0, c_0} of tensors, got a tensor")
raises("LSTM: c_0 of the wrong shape", function()
  lstm(zorch.randn(5, 3, 10), {zorch.randn(2, 3, 20), zorch.randn(2, 2, 20)}) end,
  "nn.LSTM: expected c_0 (2, 3, 20) for input (5, 3, 10), got (2, 2, 20)")
raises("LSTM proj: h_0 with hidden_size features", function()
  nn.LSTM(10, 20, {proj_size = 4})(zorch.randn(5, 3, 10), {zorch.randn(1, 3, 20), zorch.randn(1, 3, 20)}) end,
  "nn.LSTM: expected h_0 (1, 3, 4) for input (5, 3, 10), got (1, 3, 20)")
raises("LSTM: h_0 not a tensor", function() lstm(zorch.randn(5, 3, 10), {1, 2}) end,
  "nn.LSTM: h_0 must be a tensor, got number")
raises("GRU: float64 input, float32 parameters", function() nn.GRU(10, 20)(zorch.randn(5, 3, 10):to("float64")) end,
  "nn.GRU: input is float64 but the parameters are float32")
raises("GRU: hx of another dtype", function()
  nn.GRU(10, 20)(zorch.randn(5, 3, 10), zorch.zeros({1, 3, 20}, {dtype = "float64"})) end,
  "nn.GRU: hx is float64 but the parameters are float32")
raises("RNNCell: wrong input size", function() nn.RNNCell(10, 20)(zorch.randn(3, 7)) end,
  "nn.RNNCell: expected input (N, 10) or (10,), got (3, 7)")
raises("GRUCell: 3-d input", function() nn.GRUCell(10, 20)(zorch.randn(3, 10, 1)) end,
  "nn.GRUCell: expected input (N, 10) or (10,), got (3, 10, 1)")
raises("RNNCell: hx batch mismatch", function() nn.RNNCell(10, 20)(zorch.randn(3, 10), zorch.randn(2, 20)) end,
  "nn.RNNCell: expected hx (3, 20) for input (3, 10), got (2, 20)")
raises("RNNCell: unbatched input with a batched hx", function()
  nn.RNNCell(10, 20)(zorch.randn(10), zorch.randn(3, 20)) end,
  "nn.RNNCell: expected hx (20,) for input (10,), got (3, 20)")
raises("LSTMCell: c of the wrong size", function()
  nn.LSTMCell(10, 20)(zorch.randn(3, 10), {zorch.randn(3, 20), zorch.randn(3, 21)}) end,
  "nn.LSTMCell: expected c_0 (3, 20) for input (3, 10), got (3, 21)")
raises("LSTMCell: a tensor as the state", function() nn.LSTMCell(10, 20)(zorch.randn(3, 10), zorch.randn(3, 20)) end,
  "nn.LSTMCell: hx must be a table {h_0, c_0} of tensors, got a tensor")
-- construction
raises("RNN: unknown option", function() nn.RNN(10, 20, {num_layer = 2}) end, "nn.RNN: unknown option 'num_layer'")
raises("GRU: proj_size is LSTM's only", function() nn.GRU(10, 20, {proj_size = 2}) end,
  "nn.GRU: unknown option 'proj_size'")
raises("LSTM: nonlinearity is RNN's only", function() nn.LSTM(10, 20, {nonlinearity = "relu"}) end,
  "nn.LSTM: unknown option 'nonlinearity'")
raises("LSTMCell: unknown option", function() nn.LSTMCell(10, 20, {dropout = 0.1}) end,
  "nn.LSTMCell: unknown option 'dropout'")
raises("RNN: options not a table", function() nn.RNN(10, 20, 2) end, "nn.RNN: options must be a table, got number")
raises("RNN: unknown nonlinearity", function() nn.RNN(10, 20, {nonlinearity = "sigmoid"}) end,
  "nn.RNN: nonlinearity must be \"tanh\" or \"relu\", got sigmoid")
raises("RNNCell: unknown nonlinearity", function() nn.RNNCell(10, 20, {nonlinearity = "gelu"}) end,
  "nn.RNNCell: nonlinearity must be")
raises("RNN: dropout out of range", function() nn.RNN(10, 20, {dropout = 2}) end,
  "nn.RNN: dropout must be a number in [0, 1], got 2")
raises("GRU: num_layers 0", function() nn.GRU(10, 20, {num_layers = 0}) end,
  "nn.GRU: num_layers must be a positive integer, got 0")
raises("LSTM: hidden_size 0", function() nn.LSTM(10, 0) end, "nn.LSTM: hidden_size must be a positive integer, got 0")
raises("GRUCell: input_size missing", function() nn.GRUCell() end,
  "nn.GRUCell: input_size must be a positive integer, got nil")
raises("LSTM: proj_size not below hidden_size", function() nn.LSTM(10, 20, {proj_size = 20}) end,
  "nn.LSTM: proj_size must be smaller than hidden_size 20, got 20")
raises("LSTM: negative proj_size", function() nn.LSTM(10, 20, {proj_size = -1}) end,
  "nn.LSTM: proj_size must be a non-negative integer, got -1")
raises("RNN: bidirectional not a boolean", function() nn.RNN(10, 20, {bidirectional = 1}) end,
  "nn.RNN: bidirectional must be true or false, got 1")
-- errors point at the caller's line
do
  local _, err = pcall(function() nn.GRU(10, 20)(zorch.randn(5, 3, 7)) end)
  ok(tostring(err):match("^[^:]*test_rnn%.lua:%d+: nn%.GRU") ~= nil, "a forward error points at the caller's line")
  _, err = pcall(function() nn.GRU(10, 20, {bad = 1}) end)
  ok(tostring(err):match("^[^:]*test_rnn%.lua:%d+: nn%.GRU") ~= nil, "a constructor error points at the caller's line")
  _, err = pcall(function() lstm(zorch.randn(5, 3, 10), {zorch.randn(2, 3, 20), zorch.randn(2, 2, 20)}) end)
  ok(tostring(err):match("^[^:]*test_rnn%.lua:%d+: nn%.LSTM") ~= nil, "a state error points at the caller's line")
end

tap.done()
