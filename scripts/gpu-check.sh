#!/bin/sh
# On a machine with an NVIDIA GPU: builds zorch with CUDA using the local nvcc,
# runs the GPU tests and the benchmarks, and writes the log and JSON lines to
# $OUT (or ./gpu-out). Without a GPU it says so and ends cleanly.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
log="$OUT/gpu-check.log"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU on this machine; nothing to check" | tee "$log"
  exit 0
fi
nvidia-smi -L | tee "$log"
make CUDA=1 BUILD=build/cuda lib >>"$log" 2>&1 || { echo "gpu-check: the CUDA build failed (see $log)"; exit 1; }
build/cuda/zorch info | tee -a "$log"
(cd tests && ZORCH_QUIET=1 ../build/cuda/zorch gpu/test_cuda.lua) 2>&1 | tee -a "$log"
status=$?
make CUDA=1 BUILD=build/cuda bench 2>/dev/null | tee "$OUT/bench.jsonl" >>"$log"
exit $status
