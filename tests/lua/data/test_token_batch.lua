-- data.token_batch: a language model's micro-batches from a token stream, in
-- order across ranks and at random windows, as indices from 1; bad arguments.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local ok, raises = tap.ok, tap.raises
local data = zorch.data

local t = zorch.arange(0, 40, {dtype = "int64"}) -- token ids 0..39
-- in order on 2 ranks: micro-batch 0 is tokens 0..11, rank 1 its second half
local x0, y0 = data.token_batch(t, 0, {batch = 2, seq = 3, rank = 0, world = 2})
local x1, y1 = data.token_batch(t, 0, {batch = 2, seq = 3, rank = 1, world = 2})
ok(x0:dtype() == "int64" and x0.shape[1] == 2 and x0.shape[2] == 3, "inputs are int64 (batch, seq)")
ok(x0[1][1]:item() == 1 and x0[2][3]:item() == 6 and y0[1][1]:item() == 2, "rank 0: ids 0..5 as indices 1..6, targets one on")
ok(x1[1][1]:item() == 7 and y1[2][3]:item() == 13, "rank 1 reads the next rows")
local xw = data.token_batch(t, 3, {batch = 2, seq = 3, rank = 0, world = 2})
ok(xw[1][1]:item() == 1, "past the end it starts again (39 tokens hold 3 micro-batches of 12)")
-- random windows: targets are the inputs shifted by one, inside the stream
zorch.manual_seed(3)
local xr, yr = data.token_batch(t, 0, {batch = 4, seq = 5, ordered = false})
local good = true
for i = 1, 4 do
  for j = 1, 5 do good = good and yr[i][j]:item() == xr[i][j]:item() + 1 and yr[i][j]:item() <= 40 end
end
ok(good, "random windows: targets follow their inputs, inside the stream")
zorch.manual_seed(3)
local xa = data.token_batch(t, 0, {batch = 2, seq = 5, rank = 0, world = 2, ordered = false})
zorch.manual_seed(3)
local xb = data.token_batch(t, 0, {batch = 4, seq = 5, ordered = false})
ok(zorch.equal(xa, xb:narrow(1, 1, 2)), "every rank draws all ranks' windows and keeps its own")

raises("a 2-d stream is refused", function() data.token_batch(t:view(4, 10), 0, {batch = 1, seq = 2}) end,
       "data.token_batch: tokens must be a 1-d tensor")
raises("seq 0 is refused", function() data.token_batch(t, 0, {batch = 1, seq = 0}) end, "seq must be an integer >= 1")
raises("a rank outside the world is refused", function() data.token_batch(t, 0, {batch = 1, seq = 2, rank = 2, world = 2}) end,
       "rank must be an integer in 0..1")
raises("too few tokens are named", function() data.token_batch(t, 0, {batch = 8, seq = 8}) end,
       "40 tokens are too few for batches of 8 x 8 on 1 ranks")
raises("an unknown option is named", function() data.token_batch(t, 0, {batch = 1, seq = 2, shuffle = true}) end,
       "data.token_batch", "shuffle")
tap.done()
