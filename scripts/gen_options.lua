-- gen_options.lua [--check]: from the Engine's schema (lua/zorch/engine/options.lua)
-- writes include/zorch_zero_options.h (the C options' X-macro list) and the
-- table in docs/config.md between its markers. --check writes nothing and
-- exits 1 naming each file that differs. Run from the repository root.
local S = dofile("lua/zorch/engine/options.lua")

local function c_string(s) return '"' .. s:gsub('[\\"]', "\\%0") .. '"' end
local CTYPE = {int = "int", int64 = "int64_t", double = "double", bool = "bool", dtype = "zorch_dtype"}
local DTYPE = {fp32 = "ZORCH_F32", bf16 = "ZORCH_BF16", fp16 = "ZORCH_F16"}

local function c_value(r, v)
  if r.c.type == "dtype" then return DTYPE[v] end
  if r.c.type == "bool" then return tostring(v) end
  return tostring(v)
end

local function header()
  local out = {[[
/* zorch_zero_options.h: the fields of zorch_zero_options (zorch_zero.h) that
   the Engine's options fill, one X-macro row each, generated from the schema
   lua/zorch/engine/options.lua by scripts/gen_options.lua (do not edit; a test
   fails when this file differs from the schema). A row is
     X(KIND, type, field, "Engine option", default, lo, hi, "must be", "doc")
   KIND (INT, INT64, DOUBLE, BOOL, DTYPE) says how a script's value is read;
   numbers must lie in [lo, hi]. */
#ifndef ZORCH_ZERO_OPTIONS_H
#define ZORCH_ZERO_OPTIONS_H
#include <float.h>
#include <math.h>

#define ZORCH_ZERO_OPTIONS(X) \]]}
  for _, r in ipairs(S.rows) do
    if r.c then
      local lo, hi = "0", "0"
      if r.kind == "enum" and r.c.type ~= "dtype" then lo, hi = tostring(r.values[1]), tostring(r.values[#r.values])
      elseif r.kind == "int" or r.kind == "number" then
        lo = r.above and "DBL_MIN" or tostring(r.min)
        hi = r.max and tostring(r.max) or "HUGE_VAL"
      end
      out[#out + 1] = ("  X(%s, %s, %s, %s, %s, %s, %s, %s, %s) \\"):format(r.c.type:upper(), CTYPE[r.c.type], r.c.field,
        c_string(r.name), c_value(r, r.default), lo, hi, c_string(S.want(r)), c_string(r.doc))
    end
  end
  out[#out] = out[#out]:gsub(" \\$", "")
  out[#out + 1] = "\n#endif\n"
  return table.concat(out, "\n")
end

local function md(s) return (s:gsub("|", "\\|")) end
local function shown(r, v)
  if v == false then return r.kind == "bool" and "false" or "none" end
  if type(v) == "string" then return '`"' .. v .. '"`' end
  return tostring(v)
end

local function doc_table()
  local out = {"| option | DeepSpeed key (Accelerate) | default | must be | C field | doc |", "|---|---|---|---|---|---|"}
  for _, r in ipairs(S.rows) do
    if r.name then
      local ds = {}
      for i, p in ipairs(r.ds or {}) do ds[i] = "`" .. p .. "`" end
      local d = table.concat(ds, ", ")
      if r.accelerate then d = d .. " (`" .. r.accelerate .. "`)" end
      local default = shown(r, r.default)
      if r.ds_default ~= nil then default = ("%s (DeepSpeed file: %s)"):format(default, shown(r, r.ds_default)) end
      out[#out + 1] = ("| `%s` | %s | %s | %s | %s | %s |"):format(r.name, d, default, md(S.want(r)),
        r.c and ("`" .. r.c.field .. "`") or "", md(r.doc))
    end
  end
  out[#out + 1] = ""
  out[#out + 1] = "DeepSpeed keys without an Engine option:"
  out[#out + 1] = ""
  out[#out + 1] = "| DeepSpeed key | status | doc |"
  out[#out + 1] = "|---|---|---|"
  for _, r in ipairs(S.rows) do
    if not r.name then
      out[#out + 1] = ("| `%s` | %s | %s |"):format(r.ds[1], r.status, md(r.doc))
    end
  end
  return table.concat(out, "\n") .. "\n"
end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("a")
  f:close()
  return s
end

local START, STOP = "<!-- options table start -->\n", "<!-- options table end -->"
local doc = read("docs/config.md")
local a, b = doc:find(START, 1, true)
local c = doc:find(STOP, 1, true)
if not a or not c then io.stderr:write("gen_options: docs/config.md has no options table markers\n") os.exit(1) end
local want = {["include/zorch_zero_options.h"] = header(),
              ["docs/config.md"] = doc:sub(1, b) .. doc_table() .. doc:sub(c)}

local check, bad = arg[1] == "--check", 0
for _, path in ipairs({"include/zorch_zero_options.h", "docs/config.md"}) do
  local f = io.open(path, "rb")
  local have = f and f:read("a")
  if f then f:close() end
  if have ~= want[path] then
    if check then
      io.stderr:write(("gen_options: %s differs from the schema: run lua5.4 scripts/gen_options.lua\n"):format(path))
      bad = 1
    else
      local o = assert(io.open(path, "wb"))
      o:write(want[path])
      o:close()
    end
  end
end
os.exit(bad)
