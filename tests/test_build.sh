#!/bin/sh
# The build only builds: `make` runs no installer, warnings are errors only
# when asked (WERROR=1), a user's CFLAGS build without -Werror, `clean` removes
# only its BUILD, and a missing required package is named with its remedy.
. ./tap.sh
R=..
# (run from `make test`, whose flags and WERROR must not reach these makes)
dry() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u WERROR make -s -n -C "$R" --no-print-directory "$@" 2>&1; }
no_install() { out=$(dry BUILD=/tmp/zorch-build-probe lib) || { echo "$out"; return 1; }
  ! echo "$out" | grep -n 'apt-get\|deps\.sh\|dpkg'; }
werror_asked() { dry -B BUILD=/tmp/zorch-build-probe WERROR=1 /tmp/zorch-build-probe/obj/ops/core/state.o | grep -q -- '-Werror'; }
werror_not_default() { out=$(dry -B BUILD=/tmp/zorch-build-probe /tmp/zorch-build-probe/obj/ops/core/state.o) &&
  echo "$out" | grep -q -- '-Wall' && ! echo "$out" | grep -q -- '-Werror'; }
user_cflags() { out=$(dry -B BUILD=/tmp/zorch-build-probe CFLAGS=-O1 /tmp/zorch-build-probe/obj/ops/core/state.o) &&
  echo "$out" | grep -q -- ' -O1' && ! echo "$out" | grep -q -- '-Werror'; }
clean_build() { dry BUILD=/tmp/zorch-build-probe clean | grep -qx 'rm -rf /tmp/zorch-build-probe'; }
missing_named() { out=$(dry LUA_INCDIR=/nonexistent BUILD=/tmp/zorch-build-probe lib); [ $? -ne 0 ] &&
  echo "$out" | grep -q "Lua 5.4's headers" && echo "$out" | grep -q 'liblua5.4-dev'; }
check "make runs no package installer" no_install
check "WERROR=1 compiles with -Werror" werror_asked
check "a plain make compiles with -Wall, without -Werror" werror_not_default
check "make CFLAGS=-O1 adds the user's flags and no -Werror" user_cflags
check "make clean removes only \$(BUILD)" clean_build
check "a missing required package stops the build, naming it and its package" missing_named
echo "1..$n"
[ "$fails" = 0 ]
