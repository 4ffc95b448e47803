-- The norms and 1-d layers (lua/zorch/nn/norm.lua, conv.lua, pool.lua, ...):
-- values and gradients against PyTorch's (lua/nn/norm.txt, from
-- lua/nn/gen_norm.py), state-dict names, bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local nn = zorch.nn

local G = require("golden")("lua/nn/norm.txt")
local want, sd_order, fixed, leaf, flat, worst, check = G.want, G.sd_order, G.fixed, G.leaf, G.flat, G.worst, G.check

-- ---- normalisation and 1-d layers ----------------------------------------------------------------
local xn = leaf(fixed({2, 6, 5}, 22) * 3 + 1)
local gw, gb = leaf(fixed({6}, 23) + 1), leaf(fixed({6}, 24))
check("group_norm", function(u, ww, bb) return zorch.group_norm(u, 3, ww, bb) end, {xn, gw, gb})
local x4 = leaf(fixed({2, 4, 3, 2}, 25) * 2)
check("group_norm_4d", function(u) return zorch.group_norm(u, 2, nil, nil, 1e-3) end, {x4})
local rw = leaf(fixed({5}, 26) + 1)
check("rms_norm", function(u, ww) return zorch.rms_norm(u, {5}, ww) end, {xn, rw})
check("rms_norm_eps", function(u) return nn.RMSNorm({6, 5}, {eps = 1e-3, elementwise_affine = false})(u) end, {xn})
local xs = (fixed({2, 3, 4}, 34) * 1e-4):float():requires_grad_(true)
check("rms_norm_f32", function(u) return nn.RMSNorm(4)(u) end, {xs}, 2e-5)
check("instance_norm1d", function(u) return nn.InstanceNorm1d(6)(u) end, {xn})
check("instance_norm2d_affine", function(u, ww, bb) return zorch.group_norm(u, 4, ww, bb) end,
  {x4, leaf(fixed({4}, 27) + 1), leaf(fixed({4}, 28))})
do
  local m = nn.InstanceNorm1d(6, {momentum = 0.3, track_running_stats = true, affine = true}):to("float64")
  for _ = 1, 2 do m(xn) end
  ok(worst(m.running_mean, want.instance_norm_running.mean) < 1e-10 and
     worst(m.running_var, want.instance_norm_running.var) < 1e-10 and m.num_batches_tracked:item() == 2,
     "InstanceNorm1d: PyTorch's running statistics after two training steps")
  m:eval()
  check("instance_norm_eval", function(u) return m(u) end, {xn})
  local u = m(xn[1])
  ok(table.concat(u.shape, ",") == "6,5" and worst(u, flat(m(xn)[1])) < 1e-12, "InstanceNorm1d: an unbatched input (C, L)")
end
local cw, cb = leaf(fixed({4, 3, 3}, 29) * 0.5), leaf(fixed({4}, 30))
local xc = leaf(fixed({2, 6, 7}, 31))
check("conv1d", function(u, ww, bb) return zorch.conv1d(u, ww, bb, {stride = 2, padding = 1, groups = 2}) end,
  {xc, cw, cb})
check("conv1d_dil", function(u, ww) return zorch.conv1d(u, ww, nil, {padding = 2, dilation = 2}) end,
  {leaf(fixed({2, 3, 7}, 32)), leaf(fixed({4, 3, 3}, 33))})
check("max_pool1d", function(u) return nn.MaxPool1d(3, {stride = 2, padding = 1})(u) end, {xc})
check("avg_pool1d", function(u) return nn.AvgPool1d(3, {stride = 2, padding = 1, count_include_pad = false})(u) end, {xc})
check("avg_pool1d_ceil", function(u) return nn.AvgPool1d(2, {ceil_mode = true})(u) end, {xc})
check("adaptive_avg_pool1d", function(u) return nn.AdaptiveAvgPool1d(3)(u) end, {xc})

-- state dicts: PyTorch's names and shapes, loaded back
local function sd_matches(name, m)
  local sd, keys = m:state_dict(), {}
  for k in pairs(sd) do keys[#keys + 1] = k end
  local good = #keys == #sd_order[name]
  local load = {}
  for _, k in ipairs(sd_order[name]) do
    local shape = want[name][k]
    good = good and sd[k] ~= nil and table.concat(sd[k].shape, " ") == table.concat(shape, " ")
    load[k] = zorch.zeros(shape, {dtype = sd[k] and sd[k]:dtype() or "float32"}) + (k == "num_batches_tracked" and 3 or 0.5)
  end
  local okload = pcall(m.load_state_dict, m, load)
  ok(good and okload, name .. ": PyTorch's state-dict names and shapes, and they load")
  return m
end
local conv = sd_matches("sd_conv1d", nn.Conv1d(6, 4, 3, {groups = 2}))
ok(worst(conv(xc:float()), flat(zorch.conv1d(xc:float(), conv.weight, conv.bias, {groups = 2}))) == 0
   and conv.weight:max():item() == 0.5, "nn.Conv1d: the loaded weights give conv1d's output")
do
  zorch.manual_seed(3)
  local c = nn.Conv1d(3, 5, 2)
  local bound = 1 / math.sqrt(3 * 2)
  ok(c.weight:abs():max():item() <= bound and c.bias:abs():max():item() <= bound and c.weight:abs():max():item() > bound / 2,
     "nn.Conv1d: weights and bias within PyTorch's bound 1/sqrt(fan_in)")
  ok(tostring(c) == "nn.Conv1d(3, 5, kernel_size=(2,), stride=(1,))", "nn.Conv1d prints as PyTorch's repr: " .. tostring(c))
  local y = c(zorch.ones(3, 6))
  ok(table.concat(y.shape, ",") == "5,5", "nn.Conv1d: an unbatched input (C, L)")
end
sd_matches("sd_conv1d_nobias", nn.Conv1d(3, 5, 2, {bias = false}))
sd_matches("sd_group_norm", nn.GroupNorm(3, 6))
sd_matches("sd_rms_norm", nn.RMSNorm({4, 5}))
local inn = sd_matches("sd_instance_norm", nn.InstanceNorm2d(4, {affine = true, track_running_stats = true}))
ok(inn.num_batches_tracked:item() == 3 and inn.num_batches_tracked:dtype() == "int64", "InstanceNorm2d: num_batches_tracked loads (int64)")
ok(#nn.InstanceNorm2d(4):parameters() == 0 and next(nn.InstanceNorm2d(4):state_dict()) == nil,
   "InstanceNorm2d: no parameters or buffers by default (affine and running stats off, as PyTorch)")
do
  local pl = nn.ParameterList{zorch.zeros(2, 3), zorch.zeros(4)}
  sd_matches("sd_parameter_list", pl)
  ok(#pl == 2 and pl[1].shape[2] == 3 and pl[-1].shape[1] == 4 and pl[1].requires_grad and #pl:parameters() == 2,
     "ParameterList: read from 1, #, parameters that require grad")
  pl:append(zorch.ones(1))
  local names = {}
  for n in pl:named_parameters() do names[#names + 1] = n end
  ok(table.concat(names, " ") == "0 1 2", "ParameterList: append names the next one")
  raises("ParameterList: an item that is not a tensor", function() nn.ParameterList{1} end, "nn.ParameterList: item 1")
end
do
  local u = nn.Unflatten(2, {2, -1})(zorch.zeros(3, 12, 5))
  ok(table.concat(u.shape, ",") == "3,2,6,5", "Unflatten(2, {2, -1}): (3, 12, 5) -> (3, 2, 6, 5)")
  u = nn.Unflatten(-1, {5, 1})(zorch.zeros(3, 5))
  ok(table.concat(u.shape, ",") == "3,5,1", "Unflatten(-1, {5, 1})")
  raises("Unflatten: sizes that do not fit", function() nn.Unflatten(2, {5, 2})(zorch.zeros(3, 12)) end,
    "nn.Unflatten: sizes {5, 2}", "12")
  raises("Unflatten: two -1", function() nn.Unflatten(2, {-1, -1}) end, "nn.Unflatten: sizes")
end
do
  zorch.manual_seed(1)
  for _, case in ipairs({{nn.Dropout1d, {8, 16, 10}}, {nn.Dropout2d, {8, 16, 3, 4}}, {nn.Dropout1d, {16, 10}}}) do
    local d = case[1](0.25)
    local xx = zorch.ones(case[2])
    local y = d(xx)
    local name = getmetatable(d).__name
    -- each channel all 0 or all 1 / 0.75
    local batched = #case[2] ~= 2
    local per = y:reshape({batched and case[2][1] * case[2][2] or case[2][1], -1})
    local mx, mn = per:max(2), per:min(2)
    local whole, zeros = true, 0
    for i, v in ipairs(mx:totable()) do
      local lo = mn:totable()[i]
      whole = whole and v == lo and (v == 0 or math.abs(v - 1 / 0.75) < 1e-6)
      if v == 0 then zeros = zeros + 1 end
    end
    ok(whole and zeros > 0 and zeros < per.shape[1] / 2, ("%s: whole channels zeroed (%d of %d), the rest scaled by 1/(1-p)"):format(
      name, zeros, per.shape[1]))
    d:eval()
    ok(worst(d(xx), flat(xx)) == 0, name .. ": identity in eval")
  end
  raises("Dropout2d: a 2-d input", function() nn.Dropout2d()(zorch.ones(2, 3)) end, "nn.Dropout2d: expected")
  raises("Dropout1d: p above 1", function() nn.Dropout1d(1.5) end, "nn.Dropout1d: p must be")
end
raises("group_norm: groups that do not divide the channels", function() zorch.group_norm(xn, 4) end,
  "group_norm: num_groups", "6 channels", "(2, 6, 5)")
raises("nn.GroupNorm: an unknown option", function() nn.GroupNorm(2, 4, {momentum = 1}) end,
  "nn.GroupNorm: unknown option 'momentum'")
raises("rms_norm: a shape that is not the last dims", function() zorch.rms_norm(xn, {6}) end,
  "rms_norm: normalized_shape (6)", "(2, 6, 5)")
raises("InstanceNorm1d: a 4-d input", function() nn.InstanceNorm1d(6)(zorch.ones(1, 6, 2, 2)) end,
  "nn.InstanceNorm1d: expected 2D or 3D input")
raises("conv1d: a 4-d input", function() zorch.conv1d(zorch.ones(1, 3, 2, 2), zorch.ones(4, 3, 1)) end,
  "conv1d: expected input (N, C, L) or (C, L)")
raises("conv1d: channels that do not match, in 1-d shapes", function()
  zorch.conv1d(zorch.ones(1, 2, 5), zorch.ones(4, 3, 1)) end, "conv1d: weight (4, 3, 1)", "input (1, 2, 5)")
raises("MaxPool1d: an input shorter than the kernel", function() nn.MaxPool1d(3)(zorch.ones(1, 2, 2)) end,
  "nn.MaxPool1d", "input (1, 2, 2)", "kernel 3")
raises("nn.Conv1d: a pair as kernel_size", function() nn.Conv1d(3, 4, {2, 2}) end, "nn.Conv1d: kernel_size")
raises("nn.Conv1d: an unknown option", function() nn.Conv1d(3, 4, 2, {padding_mode = "zeros"}) end,
  "nn.Conv1d: unknown option 'padding_mode'")
raises("nn.MaxPool1d: stride 0", function() nn.MaxPool1d(2, {stride = 0}) end, "nn.MaxPool1d: stride")

-- BatchNorm3d: a training step (values, input gradient, running statistics), then eval
do
  local m = nn.BatchNorm3d(3):to("float64")
  zorch.no_grad(function()
    m.weight:copy_(fixed({3}, 31) + 1)
    m.bias:copy_(fixed({3}, 32))
  end)
  check("batch_norm3d", function(u) return m(u) end, {leaf(fixed({2, 3, 2, 3, 2}, 30) * 2 + 0.5)}, 1e-9)
  local e = math.max(worst(m.running_mean, want.batch_norm3d.running_mean),
                     worst(m.running_var, want.batch_norm3d.running_var))
  ok(e <= 1e-9, ("batch_norm3d: PyTorch's running statistics after a step (worst %.2g)"):format(e))
  m:eval()
  check("batch_norm3d_eval", function(u) return m(u) end, {leaf(fixed({2, 3, 2, 2, 2}, 33))}, 1e-9)
  ok(tostring(m) == "nn.BatchNorm3d(3, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)",
    "nn.BatchNorm3d prints as PyTorch's")
  raises("nn.BatchNorm3d: a 4-d input", function() m(zorch.zeros(2, 3, 4, 4)) end,
    "nn.BatchNorm3d: expected 5D (N, C, D, H, W) input, got shape (2, 3, 4, 4)")
end

tap.done()
