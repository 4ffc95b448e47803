-- The tensor's fields besides shape and grad: ndim, data (detach()), T; and
-- dtype and device staying methods (docs/api.md says why).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises = tap.ok, tap.raises

local x = zorch.randn(2, 3, 4)
ok(x.ndim == 3 and math.type(x.ndim) == "integer" and x.ndim == x:dim(), "x.ndim is the dim count")
ok(zorch.tensor(1.5).ndim == 0, "a 0-d tensor has ndim 0")

local w = zorch.randn(3, 2, {requires_grad = true})
local y = w * 2
local d = y.data
ok(zorch.is_tensor(d) and not d.requires_grad and d.grad_fn == nil and y.grad_fn ~= nil, "x.data has no history")
ok(table.concat(d.shape, ",") == "3,2" and d:dtype() == y:dtype(), "x.data keeps the shape and dtype")
d[1][1] = 42
ok(y[1][1]:item() == 42, "x.data shares the memory")
ok(w.data.is_leaf and not w.data.requires_grad, "a parameter's data is a leaf without grad")
raises("x.data cannot be assigned", function() w.data = zorch.zeros(3, 2) end, "cannot set field 'data'")

ok(x.T.shape[1] == 4 and x.T.shape[3] == 2, "x.T reverses the dims")

-- dtype and device are methods returning strings; the field form is the method itself
ok(x:dtype() == "float32" and x:device() == "cpu", "x:dtype() and x:device() are strings")
ok(type(x.dtype) == "function" and x.dtype ~= "float32", "x.dtype is the method: comparing it with a string is false")
tap.done()
