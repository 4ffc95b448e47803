-- The recurrent, attention and newer normalisation layers under the Engine:
-- ZeRO stages 0-3 train them to the same losses as the optimizer alone (the
-- stage-3 gathers must reach the parameters these modules hold themselves).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local nn, optim = zorch.nn, zorch.optim

local function losses(make, input, stage)
  zorch.manual_seed(5)
  local m = make()
  local o = optim.Adam(m:parameters(), {lr = 0.01})
  local model, e = m, nil
  if stage then
    e = zorch.Engine{zero_stage = stage}
    model, _, o = e:prepare(m, nil, o)
  end
  local out = {}
  for i = 1, 3 do
    o:zero_grad()
    local l = model(input):pow(2):mean()
    if e then e:backward(l) else l:backward() end
    o:step()
    out[i] = l:item()
  end
  return out
end

local R = nn.Module:extend "LstmHead"
function R:init() self.rnn = nn.LSTM(8, 16, {num_layers = 2}); self.head = nn.Linear(16, 1) end
function R:forward(x) return self.head((self.rnn(x))) end
local A = nn.Module:extend "EncoderHead"
function A:init()
  self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, {dim_feedforward = 16, dropout = 0}), 2)
  self.head = nn.Linear(8, 1)
end
function A:forward(x) return self.head(self.enc(x)) end
local G = nn.Module:extend "NormConv"
function G:init() self.g = nn.GroupNorm(2, 4); self.c = nn.Conv1d(4, 4, 3); self.r = nn.RMSNorm(6) end
function G:forward(x) return self.r(self.c(self.g(x))) end

zorch.manual_seed(1)
local cases = {{"LSTM", R, zorch.randn(5, 3, 8)}, {"TransformerEncoder", A, zorch.randn(5, 3, 8)},
               {"GroupNorm, Conv1d, RMSNorm", G, zorch.randn(2, 4, 8)}}
for _, c in ipairs(cases) do
  local want = losses(c[2], c[3], nil)
  tap.ok(want[3] < want[1], ("%s: the loss falls alone (%.6g -> %.6g)"):format(c[1], want[1], want[3]))
  for stage = 0, 3 do
    local got = losses(c[2], c[3], stage)
    local worst = 0
    for i = 1, 3 do worst = math.max(worst, math.abs(got[i] - want[i]) / math.abs(want[i])) end
    tap.ok(worst < 1e-5, ("%s: stage %d gives the losses of the optimizer alone (worst relative %.2g)"):format(
      c[1], stage, worst))
  end
end

tap.done()
