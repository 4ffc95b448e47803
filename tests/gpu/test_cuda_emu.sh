#!/bin/sh
# The emulated CUDA build (make test-cuda-emu, docs/cuda.md), after
# gpu/test_cuda.lua ran on it: every __global__ kernel of ops/cuda was launched
# (the launch log, $ZORCH_CUDA_EMU_LOG, against a scan of the sources), and
# each broken variant of the module ($ZORCH_BUILD/broken/*.so, ops/cuda/cuda.h's
# CU_BREAK_*) makes gpu/test_cuda.lua fail.
B="${ZORCH_BUILD:-../build/emu}"
BIN="${ZORCH_BIN:-$B/zorch}"
LOG="${ZORCH_CUDA_EMU_LOG:-}"
n=0
t() { n=$((n + 1)); if [ "$1" = 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fi; }

defined=$(sed -n 's/.*__global__ void \([A-Za-z_0-9]*\).*/\1/p' ../ops/cuda/*.cu | sort -u)
ndef=$(echo "$defined" | wc -l)
if [ -n "$LOG" ] && [ -s "$LOG" ]; then
  run=$(sort -u "$LOG")
  missing=$(echo "$defined" | while read -r k; do echo "$run" | grep -qx "$k" || echo "$k"; done)
  nrun=$(echo "$defined" | while read -r k; do echo "$run" | grep -qx "$k" && echo "$k"; done | wc -l)
  echo "# kernels run: $nrun / $ndef defined (__global__ in ops/cuda/*.cu)"
  [ "${1:-}" = --count ] && exit 0  # (make test-cuda-emu prints the count after the suite)
  t "$([ -z "$missing" ] && echo 0 || echo 1)" "every kernel ran at least once: $nrun / $ndef${missing:+ (not run: $(echo $missing))}"
else
  echo "ok $((n = n + 1)) # SKIP no launch log (gpu/test_cuda.lua runs first, with ZORCH_CUDA_EMU_LOG)"
fi

# each broken variant: gpu/test_cuda.lua on it must fail (a comparison, or
# the launch error the emulator reports)
for v in BOUND SYNC SHMEM; do
  so="$B/broken/$v.so"
  if [ ! -f "$so" ]; then echo "ok $((n = n + 1)) # SKIP $so not built"; continue; fi
  out=$(env -u ZORCH_CUDA_EMU_LOG ZORCH_CUDA_MODULE="$(cd "$(dirname "$so")" && pwd)/$v.so" \
        "$BIN" gpu/test_cuda.lua 2>&1)
  rc=$?
  nbad=$(echo "$out" | grep -c '^not ok')
  first=$(echo "$out" | grep -m1 '^not ok\|^zorch:\|^cuda emulator:' | cut -c1-200)
  t "$([ "$nbad" -gt 0 ] || [ "$rc" -ne 0 ] && echo 0 || echo 1)" \
    "CU_BREAK_$v: gpu/test_cuda.lua fails ($nbad comparisons fail, exit $rc; first: $first)"
done
echo "1..$n"
