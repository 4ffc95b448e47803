-- zorch.data.load_idx: the real Fashion-MNIST files, every IDX type, plain and
-- gzip, and hostile files (truncated, wrong magic, dims past the data, gzip
-- garbage), each refused with a message naming the file and the fault.
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local load_idx = zorch.data.load_idx

local tmp = tap.tmpdir()
local function write(name, bytes)
  local path = tmp .. "/" .. name
  local f = assert(io.open(path, "wb"))
  f:write(bytes)
  f:close()
  return path
end
local function gzip(path)
  assert(os.execute(("gzip -kf %q"):format(path)))
  return path .. ".gz"
end
local function header(type_byte, dims)
  local s = string.pack(">BBBB", 0, 0, type_byte, #dims)
  for _, d in ipairs(dims) do s = s .. string.pack(">I4", d) end
  return s
end

-- the real data set (Debian's dataset-fashion-mnist)
local dir = "/usr/share/datasets/fashion-mnist"
if io.open(dir .. "/train-images-idx3-ubyte.gz", "rb") then
  local x = load_idx(dir .. "/train-images-idx3-ubyte.gz")
  tap.ok(x:dim() == 3 and x.shape[1] == 60000 and x.shape[2] == 28 and x.shape[3] == 28 and x:dtype() == "uint8",
         "train images: 60000x28x28 uint8")
  local mean = x:float():mean():item() / 255
  tap.ok(math.abs(mean - 0.2860) < 1e-3, ("their mean pixel is Fashion-MNIST's 0.2860 (%.4f)"):format(mean))
  local y = load_idx(dir .. "/train-labels-idx1-ubyte.gz")
  tap.ok(y:dim() == 1 and y.shape[1] == 60000 and y:dtype() == "uint8", "train labels: 60000 uint8")
  local counts = zorch.zeros(10):scatter_add(1, y:long() + 1, zorch.ones(60000))
  tap.ok(counts:min():item() == 6000 and counts:max():item() == 6000, "6000 labels of each of the 10 classes")
  local ty = load_idx(dir .. "/t10k-labels-idx1-ubyte.gz")
  local tx = load_idx(dir .. "/t10k-images-idx3-ubyte.gz")
  tap.ok(tx.shape[1] == 10000 and ty.shape[1] == 10000, "test set: 10000 images and labels")
else
  tap.ok(true, "# SKIP " .. dir .. " is not installed")
end

-- every type, big-endian, plain and gzip
local cases = {
  {0x08, "uint8", string.pack("BBBBBB", 0, 1, 2, 253, 254, 255), {0, 1, 2, 253, 254, 255}},
  {0x09, "int32", string.pack("bbbbbb", -128, -1, 0, 1, 2, 127), {-128, -1, 0, 1, 2, 127}},
  {0x0B, "int32", string.pack(">i2i2i2i2i2i2", -32768, -2, 0, 1, 300, 32767), {-32768, -2, 0, 1, 300, 32767}},
  {0x0C, "int32", string.pack(">i4i4i4i4i4i4", -2147483648, -5, 0, 7, 70000, 2147483647),
   {-2147483648, -5, 0, 7, 70000, 2147483647}},
  {0x0D, "float32", string.pack(">ffffff", 1.5, -2.25, 0, 1e-3, 3e5, -7), {1.5, -2.25, 0, 1e-3, 3e5, -7}},
  {0x0E, "float64", string.pack(">dddddd", 1.5, -2.25, 0, 1e-300, 3e300, -7), {1.5, -2.25, 0, 1e-300, 3e300, -7}},
}
for _, c in ipairs(cases) do
  local path = write(("t%02x.idx"):format(c[1]), header(c[1], {2, 3}) .. c[3])
  for _, p in ipairs({path, gzip(path)}) do
    local t = load_idx(p)
    local vals, same = t:reshape({-1}):double():totable(), true
    for i, v in ipairs(c[4]) do
      local tol = c[2] == "float32" and math.abs(v) * 1e-7 or 0
      same = same and math.abs(vals[i] - v) <= tol
    end
    tap.ok(t:dim() == 2 and t.shape[1] == 2 and t.shape[2] == 3 and t:dtype() == c[2] and same,
           ("type 0x%02x (%s) read as %s (2, 3)%s"):format(c[1], p:match("gz$") and "gzip" or "plain", c[2], ""))
  end
end
local empty = load_idx(write("empty.idx", header(0x08, {0, 28})))
tap.ok(empty.shape[1] == 0 and empty.shape[2] == 28, "a file of 0 items has shape (0, 28)")

-- hostile files
local function refuses(desc, path, ...)
  tap.raises(desc, function() load_idx(path) end, "load_idx", path, ...)
end
refuses("an empty file", write("zero.idx", ""), "truncated header")
refuses("the wrong magic", write("magic.idx", "\1\2\3\4" .. ("x"):rep(20)), "not an IDX file", "01 02 03 04")
refuses("an unknown type byte", write("type.idx", header(0x0A, {2}) .. "ab"), "unknown IDX type byte 0x0a")
refuses("0 dims", write("nodims.idx", string.pack(">BBBB", 0, 0, 8, 0)), "0 dims")
refuses("too many dims", write("ninedims.idx", header(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1})), "9 dims")
refuses("dims cut short", write("shortdims.idx", string.pack(">BBBB", 0, 0, 8, 3) .. string.pack(">I4", 5)), "truncated header")
refuses("truncated data", write("trunc.idx", header(0x08, {10, 10}) .. ("z"):rep(57)), "truncated data", "100 bytes",
        "holds 57")
refuses("truncated data, gzip", gzip(write("trunc2.idx", header(0x0C, {4, 4}) .. ("z"):rep(50))), "truncated data")
refuses("dims overflowing", write("huge.idx", header(0x0E, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}) .. "abc"),
        "dims too large")
refuses("dims far past the data", write("big.idx", header(0x08, {60000, 28, 28}) .. ("z"):rep(1000)), "truncated data")
refuses("more data than the dims", write("long.idx", header(0x08, {2, 2}) .. "abcdef"), "more data than the dims")
refuses("gzip garbage", write("garbage.gz", "\31\139\8\0\0\0\0\0\0\3" .. ("\255\0\17"):rep(40)), "load_idx")
local good = gzip(write("good.idx", header(0x08, {64, 64}) .. ("q"):rep(4096)))
local f = assert(io.open(good, "rb"))
local gz = f:read("a")
f:close()
refuses("a gzip stream cut in half", write("half.gz", gz:sub(1, #gz // 2)), "load_idx")
refuses("a missing file", tmp .. "/nope.idx", "cannot open")
tap.raises("a path that is not a string", function() load_idx({}) end, "string expected")
tap.done()
