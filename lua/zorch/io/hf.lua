-- zorch.hf: Hugging Face model folders (config.json, model.safetensors or the
-- shards model-0000k-of-0000n.safetensors with model.safetensors.index.json).
--   hf.config(dir)                   config.json as a table
--   hf.decoder_config(raw, path)     a Llama/Mistral/Qwen2 config.json, checked and normalised
--   hf.load(model, dir, opts)        the folder's tensors into the model's parameters, shard by shard
--   hf.save_pretrained(model, dir, {config =, max_shard_size =, dtype =, skip =})
-- Parameter names are the folder's names: a model whose modules are named as
-- Transformers names them loads and saves name for name. Every error is one
-- line naming the file and the key.
local zorch = ...
if type(zorch) ~= "table" then require "zorch"; return package.loaded[zorch] end -- required as an installed file
local hf = {}

local function fail(fmt, ...) error("hf: " .. fmt:format(...), 0) end
local read_file = zorch._require("zorch.util").read_file
-- (opens and closes: never reads a shard into memory)
local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end
local function read_json(path)
  local s, err = read_file(path)
  if not s then fail("%s: cannot open (%s)", path, err) end
  local ok, v = pcall(zorch.json.decode, s)
  if not ok or type(v) ~= "table" then fail("%s: not a JSON object (%s)", path, tostring(v):gsub("\n", " ")) end
  return v
end

function hf.config(dir)
  if type(dir) ~= "string" then error("hf.config: dir must be a folder name, got " .. type(dir), 2) end
  return read_json(dir .. "/config.json")
end

-- ---- the config of the Llama family ---------------------------------------------------------

local FAMILY = {llama = true, mistral = true, qwen2 = true}

-- raw: config.json as decoded; path: its file (for messages). Returns
-- {model_type, vocab, dim, hidden, layers, heads, kv_heads, head_dim, max_pos,
--  eps, tie, qkv_bias, o_bias, mlp_bias, sliding_window, rope = {theta, type,
--  factor, low_freq_factor, high_freq_factor, original_max_position_embeddings}}.
function hf.decoder_config(raw, path)
  path = path or "config.json"
  local function int(key, default, min)
    local v = raw[key]
    if v == nil then v = default end
    if math.type(v) ~= "integer" or v < (min or 1) then
      fail("%s: %s must be an integer >= %d, got %s", path, key, min or 1, tostring(v))
    end
    return v
  end
  local function num(tbl, where, key, default)
    local v = tbl[key]
    if v == nil then v = default end
    if type(v) ~= "number" then fail("%s: %s%s must be a number, got %s", path, where, key, tostring(v)) end
    return v
  end
  local mt = raw.model_type
  if not FAMILY[mt] then
    fail("%s: model_type %s is not implemented (llama, mistral and qwen2 are)", path,
         type(mt) == "string" and ("%q"):format(mt) or tostring(mt))
  end
  local c = {model_type = mt}
  c.vocab = int("vocab_size")
  c.dim = int("hidden_size")
  c.hidden = int("intermediate_size")
  c.layers = int("num_hidden_layers")
  c.heads = int("num_attention_heads")
  c.kv_heads = int("num_key_value_heads", c.heads)
  if c.heads % c.kv_heads ~= 0 then
    fail("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", path, c.heads, c.kv_heads)
  end
  if raw.head_dim == nil and c.dim % c.heads ~= 0 then
    fail("%s: hidden_size %d is not a multiple of num_attention_heads %d (and no head_dim)", path, c.dim, c.heads)
  end
  c.head_dim = int("head_dim", c.dim // c.heads)
  if c.head_dim % 2 ~= 0 then fail("%s: head_dim %d is odd: rotary embeddings need pairs", path, c.head_dim) end
  c.max_pos = int("max_position_embeddings", 2048)
  c.eps = num(raw, "", "rms_norm_eps", 1e-6)
  local act = raw.hidden_act or "silu"
  if act ~= "silu" then fail("%s: hidden_act %q is not implemented (silu is)", path, tostring(act)) end
  local tie = raw.tie_word_embeddings
  if tie == nil then tie = false end
  if type(tie) ~= "boolean" then fail("%s: tie_word_embeddings must be true or false, got %s", path, tostring(tie)) end
  c.tie = tie
  if mt == "qwen2" then
    c.qkv_bias, c.o_bias, c.mlp_bias = true, false, false
    if raw.use_sliding_window then
      fail("%s: use_sliding_window true is not implemented for qwen2 (the window of some layers)", path)
    end
  elseif mt == "llama" then
    c.qkv_bias = raw.attention_bias == true
    c.o_bias, c.mlp_bias = c.qkv_bias, raw.mlp_bias == true
  else
    c.qkv_bias, c.o_bias, c.mlp_bias = false, false, false
  end
  if mt == "mistral" and raw.sliding_window ~= nil then c.sliding_window = int("sliding_window") end
  local prf = raw.partial_rotary_factor
  if prf ~= nil and prf ~= 1 then fail("%s: partial_rotary_factor %s is not implemented (1 is)", path, tostring(prf)) end
  -- RoPE: Transformers 5 writes rope_parameters {rope_type, rope_theta, ...};
  -- earlier ones rope_theta beside rope_scaling {type or rope_type, ...}.
  local key, rp = "rope_parameters", raw.rope_parameters
  if rp == nil then key, rp = "rope_scaling", raw.rope_scaling end
  if rp ~= nil and type(rp) ~= "table" then fail("%s: %s must be an object, got %s", path, key, tostring(rp)) end
  rp = rp or {}
  local rope = {theta = num(rp, key .. ".", "rope_theta", num(raw, "", "rope_theta", 10000))}
  local rtype = rp.rope_type or rp.type or "default"
  if rtype == "llama3" then
    -- rope.scaling is nn.rope_tables' scaling (zorch.nn computes the frequencies)
    rope.type = "llama3"
    local sc = {rope_type = "llama3"}
    for _, k in ipairs({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}) do
      sc[k] = num(rp, key .. ".", k)
    end
    if sc.high_freq_factor <= sc.low_freq_factor then
      fail("%s: %s.high_freq_factor %g must exceed low_freq_factor %g", path, key, sc.high_freq_factor,
           sc.low_freq_factor)
    end
    rope.scaling = sc
  elseif rtype ~= "default" then
    fail("%s: %s.rope_type %s is not implemented (default and llama3 are)", path, key, tostring(rtype))
  end
  c.rope = rope
  return c
end

-- ---- reading the tensors ------------------------------------------------------------------

-- The folder's files: {{file = name, names = {tensor names it should hold} or nil}}
-- in order, and the index's path (nil for one model.safetensors).
local function files_of(dir)
  local index = dir .. "/model.safetensors.index.json"
  if exists(index) then
    local idx = read_json(index)
    if type(idx.weight_map) ~= "table" then fail("%s: no weight_map object", index) end
    local by, order = {}, {}
    for name, file in pairs(idx.weight_map) do
      if type(file) ~= "string" or file:find("/", 1, true) or file == ".." then
        fail("%s: weight_map.%s must name a file of the folder, got %s", index, name, tostring(file))
      end
      if not by[file] then by[file] = {}; order[#order + 1] = file end
      table.insert(by[file], name)
    end
    table.sort(order)
    local list = {}
    for _, f in ipairs(order) do table.sort(by[f]); list[#list + 1] = {file = f, names = by[f]} end
    return list, index
  end
  if not exists(dir .. "/model.safetensors") then
    fail("%s: neither model.safetensors nor model.safetensors.index.json", dir)
  end
  return {{file = "model.safetensors"}}, nil
end

-- hf.load(model, dir, {optional = {names}, ignore = {lua patterns}}): copies
-- every tensor of the folder into the parameter (or buffer) of its name,
-- converted to the parameter's dtype, one file at a time (each freed before
-- the next is read, so the model is never held twice). Every parameter must
-- come from some file except the optional ones (a tied head); a tensor no
-- parameter takes is an error unless it matches an ignore pattern. Call it
-- before Engine:prepare. Returns the number of tensors read.
function hf.load(model, dir, opts)
  if type(dir) ~= "string" then error("hf.load: dir must be a folder name, got " .. type(dir), 2) end
  opts = opts or {}
  local targets = model:state_dict() -- (detached views of the parameters: copies go into them)
  local optional = {}
  for _, n in ipairs(opts.optional or {}) do optional[n] = true end
  local function ignored(name)
    for _, p in ipairs(opts.ignore or {}) do if name:match(p) then return true end end
    return false
  end
  local list, index = files_of(dir)
  local provided, count = {}, 0
  for _, entry in ipairs(list) do
    local path = dir .. "/" .. entry.file
    if not exists(path) then
      fail("%s: missing (%s names it for %s)", path, index or "the folder", entry.names and entry.names[1] or "its tensors")
    end
    local ok, ts = pcall(zorch.load, path)
    if not ok then fail("%s: %s", path, tostring(ts):gsub("\n", " ")) end
    for _, name in ipairs(entry.names or {}) do
      if ts[name] == nil then fail("%s: weight_map.%s names %s, which does not hold it", index, name, entry.file) end
    end
    local names = {}
    for name in pairs(ts) do names[#names + 1] = name end
    table.sort(names)
    zorch.no_grad(function()
      for _, name in ipairs(names) do
        local t, dst = ts[name], targets[name]
        if not zorch.is_tensor(t) then fail("%s: %s is not a tensor", path, name) end
        if dst == nil then
          if not ignored(name) then fail("%s: %s is no parameter of the model", path, name) end
        else
          local a, b = table.concat(dst.shape, ", "), table.concat(t.shape, ", ")
          if a ~= b then fail("%s: %s has shape (%s), the model's is (%s)", path, name, b, a) end
          if provided[name] then fail("%s: %s is also in %s", path, name, provided[name]) end
          dst:copy_(t:to(dst:dtype()))
          provided[name], count = entry.file, count + 1
        end
      end
    end)
    ts = nil -- (the file's tensors go before the next file is read)
    collectgarbage()
  end
  local missing = {}
  for name in pairs(targets) do
    if not provided[name] and not optional[name] then missing[#missing + 1] = name end
  end
  table.sort(missing)
  if #missing > 0 then
    fail("%s: no file provides %s%s", index or (dir .. "/model.safetensors"), missing[1],
         #missing > 1 and (" (nor %d more)"):format(#missing - 1) or "")
  end
  return count
end

-- ---- writing --------------------------------------------------------------------------------

local UNITS = {B = 1, KB = 10^3, MB = 10^6, GB = 10^9, TB = 10^12, KIB = 2^10, MIB = 2^20, GIB = 2^30, TIB = 2^40}
-- max_shard_size as Transformers reads it: bytes, or "5GB", "200MiB", ...
function hf.parse_size(s)
  if math.type(s) == "integer" and s > 0 then return s end
  if type(s) == "string" then
    local n, u = s:upper():match("^%s*([%d.]+)%s*(%a*)%s*$")
    local k = UNITS[u ~= "" and u or "B"]
    if n and tonumber(n) and k and tonumber(n) > 0 then return math.floor(tonumber(n) * k) end
  end
  error(("hf: max_shard_size must be a positive number of bytes or a size such as \"5GB\", got %s"):format(
    tostring(s)), 0)
end

local DTYPE_NAMES = {float32 = "float32", bfloat16 = "bfloat16", float16 = "float16"}
-- integer tensors, and the scales beside a quantised weight (docs/quantization.md),
-- are saved as they are
local INT_BYTES = {int8 = 1, uint8 = 1, int32 = 4, int64 = 8, bool = 1}
-- the dtype sd[name] is saved in: its own for those, else want (or its own
-- float dtype, float32 for float64)
local function saved_dtype_of(sd, name, want)
  local t = sd[name]
  local dt = t:dtype()
  local stem = name:match("^(.*)%.scales$")
  if INT_BYTES[dt] or (stem and sd[stem .. ".qweight"]) then return dt end
  dt = want or dt
  return DTYPE_NAMES[dt] and dt or "float32"
end

-- hf.save_pretrained(model or state dict, dir, {config = table, max_shard_size =
-- "5GB", dtype = nil (each float tensor's; integer ones keep theirs), skip = {names}}): config.json, and
-- model.safetensors, or the shards and model.safetensors.index.json when the
-- tensors exceed max_shard_size (filled in name order, a new shard when the next
-- tensor would not fit, as Transformers fills them). Returns the file names.
function hf.save_pretrained(model, dir, opts)
  if type(dir) ~= "string" then error("hf.save_pretrained: dir must be a folder name, got " .. type(dir), 2) end
  opts = opts or {}
  local max = hf.parse_size(opts.max_shard_size or "5GB")
  if opts.dtype ~= nil and not DTYPE_NAMES[opts.dtype] then
    error(("hf.save_pretrained: dtype must be float32, bfloat16 or float16, got %s"):format(tostring(opts.dtype)), 2)
  end
  if type(model) ~= "table" then error("hf.save_pretrained: expected a model or a state dict, got " .. type(model), 2) end
  local sd = type(model.state_dict) == "function" and model:state_dict() or model
  local skip = {}
  for _, n in ipairs(opts.skip or {}) do skip[n] = true end
  local names = {}
  for name, t in pairs(sd) do
    if not skip[name] then
      if not zorch.is_tensor(t) then error(("hf.save_pretrained: %s is not a tensor"):format(tostring(name)), 2) end
      names[#names + 1] = name
    end
  end
  table.sort(names)
  local shards, cur, size, total, saved_dtype = {}, nil, 0, 0, nil
  for _, name in ipairs(names) do
    local t = sd[name]
    local dt = saved_dtype_of(sd, name, opts.dtype)
    if not INT_BYTES[dt] and not name:match("%.scales$") then saved_dtype = saved_dtype or dt end
    local bytes = t:numel() * (INT_BYTES[dt] or (dt == "float32" and 4 or 2))
    if not cur or (size + bytes > max and size > 0) then cur = {}; shards[#shards + 1] = cur; size = 0 end
    cur[#cur + 1] = name
    size, total = size + bytes, total + bytes
  end
  local ok, err = pcall(zorch.fs.mkdir, dir)
  if not ok then fail("%s: cannot make the folder (%s)", dir, tostring(err)) end
  local files, map = {}, {}
  for k, list in ipairs(shards) do
    local file = #shards == 1 and "model.safetensors" or ("model-%05d-of-%05d.safetensors"):format(k, #shards)
    local part = {}
    for _, name in ipairs(list) do
      part[name] = sd[name]:to(saved_dtype_of(sd, name, opts.dtype)):to("cpu"):contiguous()
      map[name] = file
    end
    zorch.save(part, dir .. "/" .. file)
    files[#files + 1] = file
    part = nil -- (one shard's copies at a time)
    collectgarbage()
  end
  if #shards > 1 then
    zorch.fs.write_atomic(dir .. "/model.safetensors.index.json",
      zorch.json.encode({metadata = {total_size = total}, weight_map = map}) .. "\n")
    files[#files + 1] = "model.safetensors.index.json"
  end
  if opts.config then
    local c = {}
    for k, v in pairs(opts.config) do c[k] = v end
    c.torch_dtype = c.torch_dtype or saved_dtype or "float32"
    zorch.fs.write_atomic(dir .. "/config.json", zorch.json.encode(c) .. "\n")
    files[#files + 1] = "config.json"
  end
  return files
end

zorch.hf = hf
return hf
