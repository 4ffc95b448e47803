#!/bin/sh
# The shipped scripts and programs live on the public API: no code outside
# lua/ (which owns zorch's private table) and tests/ reads that table.
. ./tap.sh
# private_users ROOT: the code files under ROOT, outside lua/ and tests/, that
# name the private table or reach for the registry from Lua
private_users() {
  (cd "$1" && find . -path ./lua -prune -o -path ./tests -prune -o -path ./.git -prune -o -path './build*' -prune \
     -o -type f \( -name '*.lua' -o -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.sh' -o -name '*.py' \) \
     -print | sort | xargs grep -ln 'zorch\.private\|getregistry' 2>/dev/null)
}
none_in() {
  users=$(private_users "$1")
  [ -z "$users" ] || { echo "the private table is read by: $users"; false; }
}
found_in_fake() {
  fake=$(mktemp -d) || return 1
  mkdir -p "$fake/models" "$fake/lua" "$fake/tests/lua"
  echo 'local Z = debug.getregistry()["zorch.private"]' > "$fake/models/m.lua"
  echo 'local Z = debug.getregistry()["zorch.private"]' > "$fake/lua/own.lua"
  echo 'local Z = debug.getregistry()["zorch.private"]' > "$fake/tests/lua/test_x.lua"
  users=$(private_users "$fake"); rm -rf "$fake"
  [ "$users" = "./models/m.lua" ] || { echo "expected only ./models/m.lua, got: $users"; false; }
}
check "no code outside lua/ and tests/ reads the private table" none_in ..
check "a script that reads it is found (and lua/, tests/ are not)" found_in_fake
echo "1..$n"
[ "$fails" = 0 ]
