#!/bin/sh
# The library's shape: only the public API is exported, every public function
# is, and includes and calls go only down the layers (docs/architecture.md).
B=${ZORCH_BUILD:-../build}
. ./tap.sh
exported() { nm -D --defined-only "$1" | awk '{print $3}' | sort; }
only_api() {
  [ -f "$1" ] || { echo "$1 was not built"; return 1; }
  syms=$(exported "$1") && [ -n "$syms" ] || { echo "no symbols read from $1"; return 1; }
  extra=$(echo "$syms" | grep -v '^zorch_\|^luaopen_'); [ -z "$extra" ] || { echo "$extra"; false; }
}
all_exported() {
  declared=$(grep -ohE '\b(zorch_[a-z0-9_]+|luaopen_[a-z0-9_]+)\(' ../include/zorch.h ../include/zorch_zero.h ../include/zorch_generate.h | tr -d '(' | sort -u)
  missing=$(echo "$declared" | while read -r f; do exported "$B/libzorch.so" | grep -qx "$f" || echo "$f"; done)
  [ -z "$missing" ] || { echo "declared in zorch.h, zorch_zero.h or zorch_generate.h, not exported: $missing"; false; }
}
check "libzorch.so exports only zorch_* and luaopen_*" only_api "$B/libzorch.so"
check "zorch.so exports only zorch_* and luaopen_*" only_api "$B/zorch.so"
check "every function of zorch.h, zorch_zero.h and zorch_generate.h is exported" all_exported
check "every function of zorch.h is marked ZORCH_API" python3 ../scripts/export-api.py --check ../include/zorch.h
check "every function of zorch_zero.h is marked ZORCH_API" python3 ../scripts/export-api.py --check ../include/zorch_zero.h
check "every function of zorch_generate.h is marked ZORCH_API" python3 ../scripts/export-api.py --check ../include/zorch_generate.h
check "includes and calls go only down the layers" python3 ../scripts/check-layers.py "$B"
echo "1..$n"
[ "$fails" = 0 ]
