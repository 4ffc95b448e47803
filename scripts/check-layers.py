#!/usr/bin/env python3
"""Checks the library's layers (docs/architecture.md): no source file includes a
header of a layer above its own, and no object file calls a function defined
in a layer above its own. Usage: check-layers.py [BUILD_DIR]; prints a TAP line
per check."""
import os, re, subprocess, sys

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


def include_errors(root):
    errs = []
    for src in sources(root):
        me = layer_of(src)
        for line in open(os.path.join(root, src), encoding="utf-8"):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            target = os.path.normpath(os.path.join(os.path.dirname(src), m.group(1)))
            them = layer_of(target)
            if them is not None and them > me:
                errs.append(f"{src} ({LAYERS[me][0]}) includes {target} ({LAYERS[them][0]})")
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
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, "build")
    inc = include_errors(root)
    sym, nobj = symbol_errors(root, build)
    print("1..2")
    for name, errs in (("includes go only down the layers", inc),
                       (f"calls go only down the layers ({nobj} objects)", sym)):
        print(("ok" if not errs else "not ok") + " - " + name)
        for e in errs:
            print("#   " + e)
    return 1 if inc or sym else 0


if __name__ == "__main__":
    sys.exit(main())
