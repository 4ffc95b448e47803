-- zorch.nn's recurrent layers: RNN, LSTM, GRU and their cells, composed from
-- the tensor ops, with PyTorch's names, defaults, shapes, gate order and state-dict names.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local nn = zorch.nn
local Module = zorch._require("zorch.nn.module").Module
local linear, sigmoid, tanh = zorch.linear, zorch.sigmoid, zorch.tanh

-- sizes as Python writes a tuple, as tensors print their shape: (3, 4), (4,)
local function tuple(...)
  local n = select("#", ...)
  return "(" .. table.concat({...}, ", ") .. (n == 1 and ",)" or ")")
end
local function shape_str(t) return tuple(table.unpack(t.shape)) end

-- Reads options `opts` for fn against spec {name = {default, check, want}}:
-- an unknown key is zorch._check_options' error, a bad value names the option
-- and what it wants. Both point at the caller of the constructor (init is
-- called by the class's __call).
local function read_opts(fn, opts, spec)
  opts = zorch._check_options(fn, opts, spec, 5)
  local o = {}
  for k, s in pairs(spec) do
    local v = opts[k]
    if v == nil then v = s[1] end
    if not s[2](v) then error(("%s: %s must be %s, got %s"):format(fn, k, s[3], tostring(v)), 4) end
    o[k] = v
  end
  return o
end
local function is_bool(v) return type(v) == "boolean" end
local function is_act(v) return v == "tanh" or v == "relu" end
local function check_size(fn, name, v)
  if math.type(v) ~= "integer" or v < 1 then
    error(("%s: %s must be a positive integer, got %s"):format(fn, name, tostring(v)), 4)
  end
  -- the gate rows (up to 4 gates times 2 directions) must not wrap past 2^63
  if name == "hidden_size" and v > math.maxinteger // 8 then
    error(("%s: hidden_size %d is too large (its gate rows overflow 64 bits)"):format(fn, v), 4)
  end
end

-- U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)) for every parameter, as PyTorch's
-- reset_parameters (drawn from zorch's generator, in the state dict's order).
local function uniform(shape, bound)
  return nn.Parameter(zorch.rand(shape) * (2 * bound) - bound)
end

-- ---- one time step of each kind ----------------------------------------------------------------
-- xp is the input's projection x W_ih^T + b_ih (N, G * hidden), w the layer's
-- {hh, bhh, hr} (bhh and hr may be nil); each returns the new state.
local STEP = {}
function STEP.RNN_TANH(xp, h, _, w) return tanh(xp + linear(h, w.hh, w.bhh)) end
function STEP.RNN_RELU(xp, h, _, w) return zorch.relu(xp + linear(h, w.hh, w.bhh)) end
-- gates i, f, g, o in that order along the features
function STEP.LSTM(xp, h, c, w)
  local g, n = xp + linear(h, w.hh, w.bhh), c.shape[2]
  local i, f = sigmoid(g:narrow(2, 1, n)), sigmoid(g:narrow(2, n + 1, n))
  local cand, o = tanh(g:narrow(2, 2 * n + 1, n)), sigmoid(g:narrow(2, 3 * n + 1, n))
  c = f * c + i * cand
  h = o * tanh(c)
  if w.hr then h = linear(h, w.hr) end -- the projection (proj_size)
  return h, c
end
-- gates r, z, n; n's hidden part (with its bias) is scaled by r before the sum
function STEP.GRU(xp, h, _, w)
  local gh, n = linear(h, w.hh, w.bhh), h.shape[2]
  local r = sigmoid(xp:narrow(2, 1, n) + gh:narrow(2, 1, n))
  local z = sigmoid(xp:narrow(2, n + 1, n) + gh:narrow(2, n + 1, n))
  local cand = tanh(xp:narrow(2, 2 * n + 1, n) + r * gh:narrow(2, 2 * n + 1, n))
  return cand + z * (h - cand) -- (1 - z) * cand + z * h
end
local GATES = {RNN_TANH = 1, RNN_RELU = 1, LSTM = 4, GRU = 3}

local function zeros_for(x, n, size)
  return zorch.zeros({n, size}, {dtype = x:dtype(), device = x:device()})
end

-- The parameters' dtype must be the input's: an error naming fn otherwise.
local function check_dtype(fn, what, t, w, level)
  if t:dtype() ~= w:dtype() then
    error(("%s: %s is %s but the parameters are %s (m:to(\"%s\") converts them)"):format(fn, what, t:dtype(),
      w:dtype(), t:dtype()), level + 1)
  end
end

-- ---- cells ---------------------------------------------------------------------------------------

-- A cell class: kind "RNN" (nonlinearity option), "LSTM" or "GRU".
local function cell_class(kind)
  local fn = "nn." .. kind .. "Cell"
  local cls = Module:extend(fn)
  local spec = {bias = {true, is_bool, "true or false"}}
  if kind == "RNN" then spec.nonlinearity = {"tanh", is_act, "\"tanh\" or \"relu\""} end
  function cls:init(input_size, hidden_size, opts)
    check_size(fn, "input_size", input_size)
    check_size(fn, "hidden_size", hidden_size)
    local o = read_opts(fn, opts, spec)
    self.input_size, self.hidden_size, self.bias = input_size, hidden_size, o.bias
    self.nonlinearity = o.nonlinearity
    local g, bound = (kind == "RNN" and 1 or GATES[kind]) * hidden_size, 1 / math.sqrt(hidden_size)
    self.weight_ih = uniform({g, input_size}, bound)
    self.weight_hh = uniform({g, hidden_size}, bound)
    if o.bias then
      self.bias_ih = uniform({g}, bound)
      self.bias_hh = uniform({g}, bound)
    end
  end
  -- forward(x (N, input_size) or (input_size), hx): hx a tensor (N, hidden_size)
  -- or (hidden_size), for LSTMCell a table {h, c} of them; nil is zeros.
  -- Returns h', for LSTMCell the table {h', c'}.
  function cls:forward(x, hx)
    local I, H = self.input_size, self.hidden_size
    if not zorch.is_tensor(x) then error(("%s: input must be a tensor, got %s"):format(fn, type(x)), 2) end
    local batched = x:dim() == 2
    if not (batched or x:dim() == 1) or x.shape[x:dim()] ~= I then
      error(("%s: expected input (N, %d) or (%d,), got %s"):format(fn, I, I, shape_str(x)), 2)
    end
    check_dtype(fn, "input", x, self.weight_ih, 2)
    local want = batched and tuple(x.shape[1], H) or tuple(H)
    local names = kind == "LSTM" and {"h_0", "c_0"} or {"hx"}
    local state = {}
    if hx ~= nil then
      if kind == "LSTM" then
        if type(hx) ~= "table" or zorch.is_tensor(hx) or #hx ~= 2 then
          error(("%s: hx must be a table {h_0, c_0} of tensors, got %s"):format(fn,
            zorch.is_tensor(hx) and "a tensor" or type(hx)), 2)
        end
        state = {hx[1], hx[2]}
      else
        state = {hx}
      end
      for i, s in ipairs(state) do
        if not zorch.is_tensor(s) then error(("%s: %s must be a tensor, got %s"):format(fn, names[i], type(s)), 2) end
        if shape_str(s) ~= want then
          error(("%s: expected %s %s for input %s, got %s"):format(fn, names[i], want, shape_str(x), shape_str(s)), 2)
        end
        check_dtype(fn, names[i], s, self.weight_ih, 2)
        if not batched then state[i] = s:unsqueeze(1) end
      end
    end
    if not batched then x = x:unsqueeze(1) end
    local n = x.shape[1]
    local h = state[1] or zeros_for(x, n, H)
    local c = kind == "LSTM" and (state[2] or zeros_for(x, n, H)) or nil
    local step = STEP[kind == "RNN" and (self.nonlinearity == "relu" and "RNN_RELU" or "RNN_TANH") or kind]
    local w = {hh = self.weight_hh, bhh = rawget(self, "bias_hh")}
    h, c = step(linear(x, self.weight_ih, rawget(self, "bias_ih")), h, c, w)
    if not batched then h, c = h:select(1, 1), c and c:select(1, 1) end
    if kind == "LSTM" then return {h, c} end
    return h
  end
  cls.__tostring = function(s)
    return ("%s(%d, %d%s%s)"):format(fn, s.input_size, s.hidden_size, s.bias and "" or ", bias=False",
      (s.nonlinearity and s.nonlinearity ~= "tanh") and ", nonlinearity=" .. s.nonlinearity or "")
  end
  return cls
end

nn.RNNCell = cell_class("RNN")
nn.LSTMCell = cell_class("LSTM")
nn.GRUCell = cell_class("GRU")

-- ---- multi-layer modules -------------------------------------------------------------------------

-- One layer in one direction over x (L, N, in): the whole sequence's input
-- projection in one matmul, then a loop over the time steps (backwards for
-- the reverse direction). Returns the outputs (L, N, out) and the last state.
local function run_direction(step, x, h, c, w, reverse)
  local xp = linear(x, w.ih, w.bih)
  local L, outs = x.shape[1], {}
  for s = 1, L do
    local t = reverse and L + 1 - s or s
    h, c = step(xp:select(1, t), h, c, w)
    outs[t] = h
  end
  return zorch.stack(outs, 1), h, c
end

-- A multi-layer class: kind "RNN", "LSTM" or "GRU".
local function rnn_class(kind)
  local fn = "nn." .. kind
  local cls = Module:extend(fn)
  local spec = {num_layers = {1, function(v) return math.type(v) == "integer" and v >= 1 end, "a positive integer"},
                bias = {true, is_bool, "true or false"},
                batch_first = {false, is_bool, "true or false"},
                dropout = {0, function(v) return type(v) == "number" and v >= 0 and v <= 1 end, "a number in [0, 1]"},
                bidirectional = {false, is_bool, "true or false"}}
  if kind == "RNN" then spec.nonlinearity = {"tanh", is_act, "\"tanh\" or \"relu\""} end
  if kind == "LSTM" then
    spec.proj_size = {0, function(v) return math.type(v) == "integer" and v >= 0 end, "a non-negative integer"}
  end

  function cls:init(input_size, hidden_size, opts)
    check_size(fn, "input_size", input_size)
    check_size(fn, "hidden_size", hidden_size)
    local o = read_opts(fn, opts, spec)
    local proj = o.proj_size or 0
    if proj >= hidden_size then
      error(("%s: proj_size must be smaller than hidden_size %d, got %d"):format(fn, hidden_size, proj), 3)
    end
    self.input_size, self.hidden_size, self.proj_size = input_size, hidden_size, proj
    self.num_layers, self.bias, self.batch_first = o.num_layers, o.bias, o.batch_first
    self.dropout, self.bidirectional, self.nonlinearity = o.dropout, o.bidirectional, o.nonlinearity
    self.mode = kind == "RNN" and (o.nonlinearity == "relu" and "RNN_RELU" or "RNN_TANH") or kind
    local D, out = o.bidirectional and 2 or 1, proj > 0 and proj or hidden_size
    local g, bound = GATES[self.mode] * hidden_size, 1 / math.sqrt(hidden_size)
    -- the parameters' names per layer and direction, in PyTorch's order
    local names = {}
    for l = 0, o.num_layers - 1 do
      for d = 1, D do
        local sfx = ("_l%d%s"):format(l, d == 2 and "_reverse" or "")
        local n = {ih = "weight_ih" .. sfx, hh = "weight_hh" .. sfx}
        self[n.ih] = uniform({g, l == 0 and input_size or D * out}, bound)
        self[n.hh] = uniform({g, out}, bound)
        if o.bias then
          n.bih, n.bhh = "bias_ih" .. sfx, "bias_hh" .. sfx
          self[n.bih] = uniform({g}, bound)
          self[n.bhh] = uniform({g}, bound)
        end
        if proj > 0 then
          n.hr = "weight_hr" .. sfx
          self[n.hr] = uniform({proj, hidden_size}, bound)
        end
        names[#names + 1] = n
      end
    end
    rawset(self, "_weight_names", names) -- (names, not tensors: to() replaces the tensors)
  end

  -- The initial state for input x (time-major, 3-d): nil, or h0 (and c0)
  -- checked against the expected shapes and made 3-d.
  local function initial_state(self, input, batched, hx, n)
    if hx == nil then return nil end
    local D = self.bidirectional and 2 or 1
    local k, H, out = D * self.num_layers, self.hidden_size, self.proj_size > 0 and self.proj_size or self.hidden_size
    local state, names, sizes = {hx}, {"hx"}, {out}
    if kind == "LSTM" then
      if type(hx) ~= "table" or zorch.is_tensor(hx) or #hx ~= 2 then
        error(("%s: hx must be a table {h_0, c_0} of tensors, got %s"):format(fn,
          zorch.is_tensor(hx) and "a tensor" or type(hx)), 3)
      end
      state, names, sizes = {hx[1], hx[2]}, {"h_0", "c_0"}, {out, H}
    end
    for i, s in ipairs(state) do
      if not zorch.is_tensor(s) then error(("%s: %s must be a tensor, got %s"):format(fn, names[i], type(s)), 4) end
      local want = batched and tuple(k, n, sizes[i]) or tuple(k, sizes[i])
      if shape_str(s) ~= want then
        error(("%s: expected %s %s for input %s, got %s"):format(fn, names[i], want, shape_str(input), shape_str(s)), 3)
      end
      check_dtype(fn, names[i], s, self.weight_ih_l0, 3)
      if not batched then state[i] = s:unsqueeze(2) end
    end
    return state[1], state[2]
  end

  -- forward(input, hx): input (L, N, input_size), (N, L, input_size) with
  -- batch_first, or unbatched (L, input_size); hx (D * num_layers, N, H_out)
  -- or (D * num_layers, H_out) unbatched, for LSTM a table {h_0, c_0} (c_0 with
  -- hidden_size features); nil is zeros. Returns output (L, N, D * H_out) (as
  -- the input is laid out) and h_n, for LSTM the table {h_n, c_n}.
  function cls:forward(input, hx)
    local I = self.input_size
    if not zorch.is_tensor(input) then
      error(("%s: input must be a tensor, got %s"):format(fn, type(input)), 2)
    end
    local batched = input:dim() == 3
    if not (batched or input:dim() == 2) or input.shape[input:dim()] ~= I then
      error(("%s: expected input %s or unbatched (L, %d), got %s"):format(fn,
        self.batch_first and ("(N, L, %d)"):format(I) or ("(L, N, %d)"):format(I), I, shape_str(input)), 2)
    end
    local x = input
    if not batched then x = x:unsqueeze(2) elseif self.batch_first then x = x:transpose(1, 2) end
    if x.shape[1] == 0 then
      error(("%s: the sequence length must be at least 1, got input %s"):format(fn, shape_str(input)), 2)
    end
    check_dtype(fn, "input", input, self.weight_ih_l0, 2)
    local n = x.shape[2]
    local h0, c0 = initial_state(self, input, batched, hx, n)
    local D, H = self.bidirectional and 2 or 1, self.hidden_size
    local out = self.proj_size > 0 and self.proj_size or H
    local step, names, hs, cs = STEP[self.mode], self._weight_names, {}, {}
    for l = 1, self.num_layers do
      if l > 1 and self.dropout > 0 and self.training then x = zorch.dropout(x, self.dropout, true) end
      local ys = {}
      for d = 1, D do
        local k, nm = (l - 1) * D + d, names[(l - 1) * D + d]
        local w = {ih = self[nm.ih], hh = self[nm.hh], bih = nm.bih and self[nm.bih], bhh = nm.bhh and self[nm.bhh],
                   hr = nm.hr and self[nm.hr]}
        local h = h0 and h0:select(1, k) or zeros_for(x, n, out)
        local c = kind == "LSTM" and (c0 and c0:select(1, k) or zeros_for(x, n, H)) or nil
        ys[d], hs[k], cs[k] = run_direction(step, x, h, c, w, d == 2)
      end
      x = D == 2 and zorch.cat(ys, 3) or ys[1]
    end
    local h_n, c_n = zorch.stack(hs, 1), kind == "LSTM" and zorch.stack(cs, 1) or nil
    if not batched then
      x, h_n, c_n = x:select(2, 1), h_n:select(2, 1), c_n and c_n:select(2, 1)
    elseif self.batch_first then
      x = x:transpose(1, 2)
    end
    if kind == "LSTM" then return x, {h_n, c_n} end
    return x, h_n
  end

  -- PyTorch's flatten_parameters lays the weights out for cuDNN; nothing to do here.
  function cls:flatten_parameters() return self end

  cls.__tostring = function(s)
    local t = {("%s(%d, %d"):format(fn, s.input_size, s.hidden_size)}
    if s.proj_size ~= 0 then t[#t + 1] = ", proj_size=" .. s.proj_size end
    if s.num_layers ~= 1 then t[#t + 1] = ", num_layers=" .. s.num_layers end
    if not s.bias then t[#t + 1] = ", bias=False" end
    if s.batch_first then t[#t + 1] = ", batch_first=True" end
    if s.dropout ~= 0 then t[#t + 1] = ", dropout=" .. tostring(s.dropout) end
    if s.bidirectional then t[#t + 1] = ", bidirectional=True" end
    return table.concat(t) .. ")"
  end
  return cls
end

nn.RNN = rnn_class("RNN")
nn.LSTM = rnn_class("LSTM")
nn.GRU = rnn_class("GRU")

return nil
