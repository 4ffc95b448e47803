#!/bin/sh
# scripts/check-layers.py passes on the tree and fails on trees that break a
# layer: a core file including from zero/, a binding including an internal
# header.
. ./tap.sh
CHECK="python3 ../scripts/check-layers.py"
# fake KIND: a small tree whose files include only downwards, plus the break KIND names
fake() {
  t=$(mktemp -d) || return 1
  mkdir -p "$t/include" "$t/ops/core" "$t/zero" "$t/lua"
  echo '/* public */' > "$t/include/zorch.h"
  echo '#include "zorch.h"' > "$t/ops/core/tensor.h"
  echo '#include "../ops/core/tensor.h"' > "$t/zero/comm.h"
  printf '#include "zorch.h"\n' > "$t/lua/lz.h"
  printf '#include "lz.h"\n' > "$t/lua/lfoo.c"
  case "$1" in
    up) echo '#include "../../zero/comm.h"' > "$t/ops/core/tensor.c" ;;
    binding) printf '#include "../ops/core/tensor.h"\n#include "lz.h"\n' > "$t/lua/lbar.c" ;;
  esac
  echo "$t"
}
# fails KIND WHAT: the check refuses the fake tree, naming WHAT
fails() {
  t=$(fake "$1") || return 1
  out=$($CHECK --root "$t" --includes-only 2>&1); st=$?; rm -rf "$t"
  [ $st != 0 ] || { echo "passed: $out"; return 1; }
  echo "$out" | grep -q "$2" || { echo "no line naming $2: $out"; return 1; }
}
passes_clean() {
  t=$(fake none) || return 1
  out=$($CHECK --root "$t" --includes-only 2>&1); st=$?; rm -rf "$t"
  [ $st = 0 ] || { echo "$out"; return 1; }
}
check "the tree's includes and calls go only down the layers" $CHECK --root .. "${ZORCH_BUILD:-../build}"
check "a tree whose files include only downwards passes" passes_clean
check "an ops/core file including zero/ fails" fails up "ops/core/tensor.c (ops/core) includes zero/comm.h (zero)"
check "a binding including an internal header fails" fails binding "lua/lbar.c includes ops/core/tensor.h"
echo "1..$n"
[ "$fails" = 0 ]
