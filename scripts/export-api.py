#!/usr/bin/env python3
"""Puts ZORCH_API in front of every function declared in include/zorch.h that
lacks it (the library is built with -fvisibility=hidden: only ZORCH_API
functions are exported). Usage: export-api.py [--check] [header]."""
import re, sys

args = [a for a in sys.argv[1:] if a != "--check"]
path = args[0] if args else "include/zorch.h"
src = open(path).read().split("\n")
out, missing = [], []
decl = re.compile(r"^(?!typedef|ZORCH_API|#|extern|static)[A-Za-z_][\w \*]*\b(zorch_\w+|luaopen_\w+)\s*\(")
for line in src:
    m = decl.match(line)
    if m:
        missing.append(m.group(1))
        line = "ZORCH_API " + line
    out.append(line)
if "--check" in sys.argv:
    for name in missing:
        print(f"{path}: {name} is declared without ZORCH_API")
    sys.exit(1 if missing else 0)
open(path, "w").write("\n".join(out))
print(f"{len(missing)} declarations marked")
