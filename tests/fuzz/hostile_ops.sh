#!/bin/bash
# hostile_ops.sh ZORCH SCRIPT OUTDIR: runs SCRIPT (hostile_ops.lua or
# hostile_options.lua) under ZORCH in batches of 2000 calls, each under a
# 150 s timeout; after a crash or a timeout it records the call in progress
# and the output's tail in OUTDIR/crashes.txt and resumes after that call.
# Errors raised by the calls go to OUTDIR/errors.txt. For the sanitized build:
#   ASAN_OPTIONS=detect_leaks=0:allocator_may_return_null=1:max_allocation_size_mb=3000 \
#     tests/fuzz/hostile_ops.sh build/asan/zorch tests/fuzz/hostile_ops.lua /tmp/hostile
set -u
BIN=$1 SCRIPT=$2 OUT=$3
mkdir -p "$OUT"
export HZ_LOG=$OUT/current.txt HZ_ERRS=$OUT/errors.txt
: > "$OUT/crashes.txt"
n=$("$BIN" "$SCRIPT" 1 1 count) || exit 1
s=1
while [ "$s" -le "$n" ]; do
  e=$((s + 1999))
  timeout 150 "$BIN" "$SCRIPT" "$s" "$e" > "$OUT/output.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    cur=$(head -1 "$HZ_LOG")
    { echo "=== exit $rc at call $cur"; tail -30 "$OUT/output.txt"; } >> "$OUT/crashes.txt"
    s=$((${cur%% *} + 1))
  else
    s=$((e + 1))
  fi
done
echo "$n calls; $(grep -c '^===' "$OUT/crashes.txt") crashes or timeouts (in $OUT/crashes.txt)"
