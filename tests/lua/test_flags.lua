-- zorch.flags: typed values, booleans, choices, positional arguments, short flags,
-- `--`, the generated --help, and usage errors: one line and the usage, printed
-- by the zorch command without a traceback, exit status 2 (0 after --help). The
-- same for the command's own subcommands (consolidate).
package.path = "lua/?.lua;" .. package.path
local tap = require "tap"
local zorch = require "zorch"
local ok, raises = tap.ok, tap.raises
local flags = zorch.flags

local spec = {
  epochs = {10, "number of epochs", short = "e"},
  lr = {0.001, "learning rate"},
  quiet = {false, "print less", short = "q"},
  verbose = {false, "print more", short = "v"},
  shuffle = {true, "shuffle the data"},
  name = {"run", "a label"},
  device = {"cpu", "where to run", choices = {"cpu", "cuda"}},
  stage = {0, "ZeRO stage", choices = {0, 1, 2, 3}},
  out = {nil, "where to save", type = "string"},
}
local function parse(...) return flags({...}, spec, "usage: test [flags]") end
-- the usage error a command line raises (nil when it parses)
local function usage_err(...)
  local good, e = pcall(parse, ...)
  if good then return nil end
  return e
end

-- defaults and types
local o = parse()
ok(o.epochs == 10 and math.type(o.epochs) == "integer" and o.lr == 0.001 and o.quiet == false and
   o.shuffle == true and o.name == "run" and o.device == "cpu" and o.stage == 0 and o.out == nil,
   "no arguments: the defaults")

-- integers
o = parse("--epochs", "3")
ok(o.epochs == 3 and math.type(o.epochs) == "integer", "--epochs 3 is the integer 3")
ok(parse("--epochs=7").epochs == 7, "--epochs=7")
ok(parse("--epochs", "-2").epochs == -2, "a negative value after a flag is its value")
local e = usage_err("--epochs", "2.5")
ok(flags.is_usage_error(e) and e.status == 2 and tostring(e) == "--epochs expects an integer, got '2.5'\nusage: test [flags]",
   "--epochs 2.5 is refused: an integer flag takes integers only")
ok(usage_err("--epochs", "ten") and tostring(usage_err("--epochs", "ten")):find("expects an integer, got 'ten'", 1, true),
   "--epochs ten is refused")
raises("a value flag at the end needs its value", function() parse("--epochs") end, "--epochs needs a value")

-- numbers: always floats
o = parse("--lr", "2")
ok(o.lr == 2.0 and math.type(o.lr) == "float", "--lr 2 is the float 2.0")
ok(parse("--lr=1e-4").lr == 1e-4 and parse("--lr", "-0.5").lr == -0.5, "--lr=1e-4, --lr -0.5")
raises("--lr abc is refused", function() parse("--lr", "abc") end, "--lr expects a number, got 'abc'")

-- booleans
ok(parse("--quiet").quiet == true, "--quiet is true")
ok(parse("--no-shuffle").shuffle == false, "--no-shuffle is false")
ok(parse("--quiet=false").quiet == false and parse("--quiet=true").quiet == true, "--quiet=false / --quiet=true")
ok(parse("--quiet=0").quiet == false and parse("--quiet=1").quiet == true, "--quiet=0 / --quiet=1")
raises("--quiet=maybe is refused", function() parse("--quiet=maybe") end, "--quiet expects true, false, 1 or 0, got 'maybe'")
raises("--no-quiet takes no value", function() parse("--no-quiet=1") end, "--no-quiet takes no value")
raises("--no- of a value flag is refused", function() parse("--no-epochs") end, "only a boolean flag has a --no- form")
raises("a boolean flag does not take the next argument", function() parse("--quiet", "false") end,
       "unexpected argument 'false'")
ok(flags({"--no-shuffle"}, {["no-shuffle"] = {false}}, "u")["no-shuffle"] == true,
   "a flag named no-x is itself (--no-x sets it)")

-- strings and choices
ok(parse("--name", "--x").name == "--x" and parse("--name=").name == "", "a string flag takes the next argument as is")
ok(parse("--device", "cuda").device == "cuda", "a choice")
raises("a value outside the choices is refused", function() parse("--device=tpu") end,
       "--device must be one of cpu, cuda, got 'tpu'", "usage: test [flags]")
ok(parse("--stage", "3").stage == 3, "integer choices")
raises("integer choices check the value", function() parse("--stage", "4") end, "--stage must be one of 0, 1, 2, 3, got '4'")
ok(parse("--out", "f.st").out == "f.st", "a flag with no default, given")

-- short flags
ok(parse("-e", "3").epochs == 3 and parse("-e3").epochs == 3 and parse("-e=4").epochs == 4, "-e 3, -e3, -e=4")
o = parse("-qv")
ok(o.quiet and o.verbose, "bundled boolean short flags: -qv")
o = parse("-qe", "5")
ok(o.quiet and o.epochs == 5, "a bundle may end with a value flag: -qe 5")
raises("-e 2.5 is refused like --epochs 2.5", function() parse("-e", "2.5") end, "-e expects an integer, got '2.5'")
raises("an unknown short flag is refused", function() parse("-x") end, "unknown flag '-x'")

-- unknown flags, repeats
e = usage_err("--nope")
ok(e and tostring(e) == "unknown flag '--nope'\nusage: test [flags]", "an unknown flag: one line and the usage")
ok(parse("--epochs", "1", "--epochs", "2").epochs == 2, "the last of a repeated flag wins")

-- positional arguments and --
local pspec = {
  {"input", "the data file"},
  {"count", "how many", type = "integer", default = 5},
  {"rest", "more files", many = true, optional = true},
  epochs = {1, "epochs", short = "e"},
  quiet = {false, "quiet"},
}
local function pparse(...) return flags({...}, pspec, "usage: p [flags] input [count] [rest...]") end
o = pparse("data.bin")
ok(o.input == "data.bin" and o.count == 5 and #o.rest == 0, "a positional argument; the optional ones take defaults")
o = pparse("a", "--quiet", "7", "-e", "2", "b", "c")
ok(o.input == "a" and o.count == 7 and o.quiet and o.epochs == 2 and #o.rest == 2 and o.rest[1] == "b" and o.rest[2] == "c",
   "flags and positional arguments mixed; the last takes the rest")
o = pparse("a", "-3")
ok(o.count == -3, "a negative number is a positional argument, not a flag")
o = pparse("--", "--quiet", "4", "-e")
ok(o.input == "--quiet" and o.count == 4 and o.rest[1] == "-e" and o.quiet == false, "-- ends the flags")
raises("a missing positional argument", function() pparse("--quiet") end, "missing argument 'input'", "usage: p [flags]")
raises("a positional argument is typed", function() pparse("a", "x") end, "count expects an integer, got 'x'")
raises("no positional arguments in the spec: an argument is refused", function() parse("extra") end,
       "unexpected argument 'extra'")
ok(flags({"-"}, {{"file"}}, "u").file == "-", "a lone - is an argument (stdin)")

-- the existing format still works: arg tables with arg[0] and negative indices
local argt = {[-1] = "zorch", [0] = "script.lua", "--lr", "0.5", "--quiet", "--name=x"}
o = flags(argt, {lr = {1.0}, quiet = {false}, name = {"a"}})
ok(o.lr == 0.5 and o.quiet == true and o.name == "x", "an arg table (with arg[0] and arg[-1]) parses as before")
ok(flags(nil, {lr = {1.0}}).lr == 1.0, "no args: the defaults")

-- --help: usage, every flag with its type, default and help
local help
local good, h = pcall(flags, {"--help"}, spec, "usage: test [flags]")
ok(not good and flags.is_usage_error(h) and h.status == 0, "--help raises a usage error with status 0")
help = tostring(h)
ok(help:find("^usage: test %[flags%]\n"), "help starts with the usage line")
-- the help line that starts with `left`, its runs of spaces made one
local function row(text, left)
  for l in text:gmatch("[^\n]+") do
    if l:sub(1, #left) == left then return (l:gsub("%s+", " ")) end
  end
end
ok(row(help, "  -e, --epochs") == " -e, --epochs INT number of epochs (integer, default 10)",
   "an integer flag: short, type, default, help")
ok(row(help, "      --lr") == " --lr NUM learning rate (number, default 0.001)", "a number flag")
ok(row(help, "  -q, --[no-]quiet") == " -q, --[no-]quiet print less (boolean, default false)", "a boolean flag")
ok(row(help, "      --name") == ' --name STR a label (string, default "run")', "a string flag")
ok(row(help, "      --device") == ' --device {cpu,cuda} where to run (one of cpu, cuda; default "cpu")', "a choice flag")
ok(row(help, "      --out") == " --out STR where to save (string)", "a flag without a default")
ok(row(help, "  -h, --help") == " -h, --help print this help", "--help itself")
ok(#help:match("\n(  %-e, %-%-epochs INT *)") == #help:match("\n(      %-%-lr NUM *)"), "the help texts start in one column")
ok(help:find("--device", 1, true) < help:find("--epochs", 1, true) and
   help:find("--epochs", 1, true) < help:find("--lr", 1, true), "flags in name order")
good, h = pcall(flags, {"-h"}, spec, "usage: test [flags]")
ok(not good and tostring(h) == help, "-h is --help")
help = flags.help(pspec, nil, {[-1] = "zorch", [0] = "p.lua"})
ok(help:find("^usage: zorch p.lua %[flags%] input %[count%] %[rest...%]\n") and
   help:find("\narguments:\n  input  +the data file %(string%)\n  count  +how many %(integer, default 5%)\n"),
   "a generated usage line and the positional arguments")

-- mistakes in the spec are ordinary errors that name the entry
raises("a spec entry of an unknown type", function() flags({}, {x = {{}}}) end, "flag 'x'", "type must be")
raises("a default outside the choices", function() flags({}, {x = {"a", choices = {"b"}}}) end,
       "flag 'x'", "not one of the choices")
raises("a default of another type", function() flags({}, {x = {1, type = "boolean"}}) end, "the default 1 is not a boolean")
raises("an unknown field", function() flags({}, {x = {1, shrt = "x"}}) end, "unknown field 'shrt'")
raises("a short flag twice", function() flags({}, {a = {1, short = "x"}, b = {2, short = "x"}}) end, "short flag -x is used twice")
raises("-h is taken", function() flags({}, {a = {1, short = "h"}}) end, "-h is --help")
raises("a required positional after an optional one", function() flags({}, {{"a", default = "x"}, {"b"}}) end,
       "required argument 'b' follows optional 'a'")
good, h = pcall(flags, {}, {x = {{}}})
ok(not flags.is_usage_error(h), "a spec mistake is not a usage error")

-- the zorch command: usage errors without a traceback, exit 2; --help exit 0
local bin = tap.zorch()
local script = os.tmpname() .. ".lua"
local f = io.open(script, "w")
f:write('local zorch = require "zorch"\n' ..
        'local o = zorch.flags(arg, {epochs = {10, "epochs", short = "e"}, quiet = {false, "quiet"}})\n' ..
        'print("epochs", o.epochs, math.type(o.epochs), o.quiet)\n')
f:close()
local function run(args)
  local p = io.popen(("%s %s %s 2>&1"):format(bin, script, args))
  local out = p:read("a")
  local _, _, code = p:close()
  return out, code
end
local out, code = run("-e 3 --no-quiet")
ok(code == 0 and out == "epochs\t3\tinteger\tfalse\n", "a script parses its flags")
out, code = run("--epochs 2.5")
ok(code == 2 and out == ("zorch: --epochs expects an integer, got '2.5'\nusage: zorch %s [flags]\n"):format(script),
   "a bad flag: one line, the usage, exit status 2, no traceback")
out, code = run("--bogus")
ok(code == 2 and not out:find("traceback", 1, true) and out:find("unknown flag '--bogus'", 1, true),
   "an unknown flag: exit status 2, no traceback")
out, code = run("--help")
ok(code == 0 and out:find("^usage: zorch .* %[flags%]\n\nflags:\n") and out:find("--[no-]quiet", 1, true),
   "--help prints the help to stdout and exits 0")
out, code = run("--quiet=yes")
ok(code == 2 and out:find("--quiet expects true, false, 1 or 0, got 'yes'", 1, true), "--quiet=yes: exit status 2")
os.remove(script)

-- an ordinary error still has its traceback and exit status 1
local p = io.popen(bin .. " -e 'error(\"boom\")' 2>&1")
out = p:read("a")
code = select(3, p:close())
ok(code == 1 and out:find("boom", 1, true) and out:find("stack traceback", 1, true), "other errors keep their traceback")

-- zorch consolidate: usage errors the same way
for _, c in ipairs({{"", "missing argument 'DIR'"},
                    {"/nonexistent/dir out.safetensors", "/nonexistent/dir is not a checkpoint folder"},
                    {". out.safetensors float16", "dtype must be one of float32, bfloat16, fp32, bf16, got 'float16'"},
                    {"--frobnicate", "unknown flag '--frobnicate'"}}) do
  p = io.popen(("%s consolidate %s 2>&1"):format(bin, c[1]))
  out = p:read("a")
  code = select(3, p:close())
  ok(code == 2 and out:find("zorch: ", 1, true) == 1 and out:find(c[2], 1, true) and
     out:sub(-65) == "\nusage: zorch consolidate DIR out.safetensors [float32|bfloat16]\n" and
     not out:find("traceback", 1, true), ("zorch consolidate %s: one line, the usage, exit 2"):format(c[1]))
end
p = io.popen(bin .. " consolidate --help 2>&1")
out = p:read("a")
code = select(3, p:close())
ok(code == 0 and out:find("DIR  +a checkpoint folder"), "zorch consolidate --help")
p = io.popen(bin .. " -e 2>&1")
out = p:read("a")
code = select(3, p:close())
ok(code == 2 and out:find("usage: zorch", 1, true), "zorch -e without a chunk: the usage, exit 2")

tap.done()
