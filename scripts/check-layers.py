#!/usr/bin/env python3
"""Checks the library's layers (docs/architecture.md): no source file includes a
header of a layer above its own, and no object file calls a function defined
in a layer above its own; and a binding (lua/*.c) includes only the public
headers (include/*.h) and the binding helper lua/lz.h, as Lua's own C modules
include only lua.h and lauxlib.h. Usage:
  check-layers.py [--root DIR] [--includes-only] [BUILD_DIR]
(the tree at DIR, this script's by default); prints a TAP line per check."""
import argparse, os, re, subprocess, sys

# lowest first; a file may use its own layer and those below it
LAYERS = [
    ("ops/core", ["ops/core/"]),
    ("ops/kernels", ["ops/backend/", "ops/cpu/", "ops/cuda/"]),
    ("ops/def", ["ops/def/"]),
    ("ops/autograd", ["ops/autograd/"]),
    ("ops/io", ["ops/io/"]),
    ("zero", ["zero/"]),
    ("lua", ["lua/", "gen/lua_modules"]),
    ("vm", ["vm/", "gen/help_doc"]),
]


def layer_of(path):
    for i, (_, prefixes) in enumerate(LAYERS):
        if any(path.startswith(p) for p in prefixes):
            return i
    return None


def sources(root):
    out = []
    for top in ("vm", "ops", "zero", "lua"):
        for d, _, files in os.walk(os.path.join(root, top)):
            out += [os.path.relpath(os.path.join(d, f), root) for f in files
                    if f.endswith((".c", ".h", ".cu"))]
    return sorted(out)


def includes(root, src):
    """The quoted includes of src, as paths from the root (a name not beside
    the file is looked up in include/, where -Iinclude finds it)."""
    out = []
    for line in open(os.path.join(root, src), encoding="utf-8"):
        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
        if not m:
            continue
        target = os.path.normpath(os.path.join(os.path.dirname(src), m.group(1)))
        if not os.path.exists(os.path.join(root, target)) and os.path.exists(os.path.join(root, "include", m.group(1))):
            target = os.path.join("include", m.group(1))
        out.append(target)
    return out


def include_errors(root):
    errs = []
    for src in sources(root):
        me = layer_of(src)
        for target in includes(root, src):
            them = layer_of(target)
            if them is not None and them > me:
                errs.append(f"{src} ({LAYERS[me][0]}) includes {target} ({LAYERS[them][0]})")
    return errs


def binding_errors(root):
    errs = []
    bindings = sorted(f for f in os.listdir(os.path.join(root, "lua")) if f.endswith(".c")) \
        if os.path.isdir(os.path.join(root, "lua")) else []
    for f in bindings:
        src = "lua/" + f
        bad = [t for t in includes(root, src) if not (t.startswith("include/") or t == "lua/lz.h")]
        errs += [f"{src} includes {t} (a binding includes only include/*.h and lua/lz.h)" for t in bad]
    return errs


def nm(obj, flags):
    r = subprocess.run(["nm", flags, obj], capture_output=True, text=True, check=True)
    return r.stdout.splitlines()


# The CUDA module (libzorch_cuda.so, docs/cuda.md) is its own link unit: its
# objects call each other and the forwarding copies of core functions in
# ops/cuda/host.c, never the library's objects, and the library never calls
# into it (it reaches the module through dlopen and a table). So each unit's
# calls are resolved against its own definitions; ops/core/dtype.o (constant
# tables) is linked into both.
# ops/cuda/host.o stands in for the core there (its functions forward to the
# core's), so it counts as core.
MODULE = ("ops/cuda/", "zero/nccl.")
SHARED = ("ops/core/dtype.o",)
STAND_IN = {"ops/cuda/host.o": 0}


def unit_of(rel):
    if rel.startswith(SHARED):
        return {"lib", "module"}
    return {"module"} if rel.startswith(MODULE) else {"lib"}


def symbol_errors(root, build):
    objdir = os.path.join(build, "obj")
    objs = []
    for d, _, files in os.walk(objdir):
        objs += [os.path.join(d, f) for f in sorted(files) if f.endswith(".o")]
    objs.sort()
    defined = {"lib": {}, "module": {}}
    layer, unit = {}, {}
    for o in objs:
        rel = os.path.relpath(o, objdir)
        layer[o] = STAND_IN.get(rel, layer_of(rel))
        unit[o] = unit_of(rel)
        for line in nm(o, "--defined-only"):
            parts = line.split()
            if len(parts) == 3 and parts[1] in "TDBR":
                for u in unit[o]:
                    defined[u][parts[2]] = o
    errs = []
    for o in objs:
        me = layer[o]
        if me is None:
            continue
        for line in nm(o, "--undefined-only"):
            sym = line.split()[-1]
            for u in unit[o]:
                d = defined[u].get(sym)
                if d and layer[d] is not None and layer[d] > me:
                    errs.append(f"{os.path.relpath(o, objdir)} ({LAYERS[me][0]}) calls {sym} "
                                f"from {os.path.relpath(d, objdir)} ({LAYERS[layer[d]][0]})")
    return sorted(set(errs)), len(objs)


def main():
    ap = argparse.ArgumentParser(description="checks that includes and calls go only down the layers")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help="the source tree (default: this script's)")
    ap.add_argument("--includes-only", action="store_true", help="check the sources alone, no build")
    ap.add_argument("build", nargs="?", help="the build folder (default: ROOT/build)")
    a = ap.parse_args()
    root = a.root
    checks = [("includes go only down the layers", include_errors(root)),
              ("bindings include only the public headers and lua/lz.h", binding_errors(root))]
    if not a.includes_only:
        sym, nobj = symbol_errors(root, a.build or os.path.join(root, "build"))
        checks.append((f"calls go only down the layers ({nobj} objects)", sym))
    print(f"1..{len(checks)}")
    for name, errs in checks:
        print(("ok" if not errs else "not ok") + " - " + name)
        for e in errs:
            print("#   " + e)
    return 1 if any(errs for _, errs in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
