#!/bin/sh
# The emulated CUDA build (make test-cuda-emu, docs/cuda.md), after
# gpu/test_cuda.lua ran on it: every __global__ kernel of ops/cuda was launched
# (the launch log, $ZORCH_CUDA_EMU_LOG, against a scan of the sources), and
# each broken variant of the module ($ZORCH_BUILD/broken/*.so, ops/cuda/cuda.h's
# CU_BREAK_*) makes the GPU-against-CPU comparisons fail.
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
  t "$([ -z "$missing" ] && echo 0 || echo 1)" "every kernel ran at least once: $nrun / $ndef${missing:+ (not run: $(echo $missing))}"
else
  echo "ok $((n = n + 1)) # SKIP no launch log (gpu/test_cuda.lua runs first, with ZORCH_CUDA_EMU_LOG)"
fi

# each broken variant against the CPU: the kernels its fault reaches
probe=$(mktemp /tmp/zorch_emu_probe.XXXXXX.lua)
cat >"$probe" <<'LUA'
local zorch = require "zorch"
zorch.manual_seed(3)
local worst = 0
local function cmp(c, g) worst = math.max(worst, (c - g:to("cpu")):abs():max():item()) end
local x = zorch.randn(33, 1000)
cmp(zorch.log_softmax(x, 2), zorch.log_softmax(x:to("cuda"), 2))        -- k_softmax_rows
local q, k, v = zorch.randn(2, 3, 40, 32), zorch.randn(2, 3, 40, 32), zorch.randn(2, 3, 40, 32)
cmp(zorch.attention(q, k, v, {causal = true}),
    zorch.attention(q:to("cuda"), k:to("cuda"), v:to("cuda"), {causal = true}))  -- k_att_fwd
print(("worst %.3g"):format(worst))
LUA
ok_out=$("$BIN" "$probe" 2>&1)
t "$(echo "$ok_out" | grep -q '^worst [0-9.e-]*$' && [ "$(echo "$ok_out" | sed -n 's/^worst //p' | awk '{print ($1 < 1e-5)}')" = 1 ] && echo 0 || echo 1)" \
  "the probe (softmax rows, attention) matches the CPU on the good module: $ok_out"
for v in BOUND SYNC SHMEM; do
  so="$B/broken/$v.so"
  if [ ! -f "$so" ]; then echo "ok $((n = n + 1)) # SKIP $so not built"; continue; fi
  out=$(ZORCH_CUDA_MODULE="$(cd "$(dirname "$so")" && pwd)/$v.so" "$BIN" "$probe" 2>&1)
  w=$(echo "$out" | sed -n 's/^worst //p')
  bad=1
  if [ -z "$w" ] || [ "$(echo "$w" | awk '{print ($1 > 1e-3 || $1 != $1)}')" = 1 ]; then bad=0; fi
  t $bad "CU_BREAK_$v: the emulated suite's comparison fails: $(echo "$out" | tr '\n' ' ' | cut -c1-300)"
done
rm -f "$probe"
echo "1..$n"
