#!/bin/sh
# On a machine with an NVIDIA GPU: builds zorch with CUDA using the local nvcc
# (or, where the image lacks the Debian packages, runs the build that
# scripts/gpu-bundle.sh made and the caller carried), runs tests/gpu, and the
# GPU benchmarks beside PyTorch's; the log and the JSON lines go to $OUT (or
# ./gpu-out). Without a GPU it says so and ends cleanly.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
log="$OUT/gpu-check.log"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU on this machine; nothing to check" | tee "$log"
  exit 0
fi
say() { echo "gpu-check: $*" | tee -a "$log"; }
nvidia-smi | tee "$log"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NVCC="${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
B=build/gpu
if [ -x "$NVCC" ] && [ -f /usr/include/lua5.4/lua.h ] && [ -f /usr/include/cjson/cJSON.h ]; then
  say "building with $NVCC"
  CUDA_DIR="$(dirname "$(dirname "$NVCC")")"
  # build with what is installed (`make` never installs anything)
  make -j"$(nproc)" CUDA=1 CUDA_DIR="$CUDA_DIR" NVCC="$NVCC" BUILD=$B lib $B/bench/bench >>"$log" 2>&1 ||
    { say "the CUDA build failed (see $log)"; exit 1; }
elif [ -x $B/zorch ]; then
  say "cannot build here (no nvcc, or no Lua/cJSON headers): running the carried build ($B, from scripts/gpu-bundle.sh)"
  # the machine's CUDA libraries: the toolkit's, else those of the Python wheels
  extra=$(find /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib /usr/lib/python3*/ /opt /usr/local/lib/python3* \
    -name 'libcublasLt.so.13' -o -name 'libnccl.so.2' -o -name 'libcudart.so.13' -o -name 'libcudnn.so.9' 2>/dev/null | xargs -r -n1 dirname | sort -u | tr '\n' ':')
  export LD_LIBRARY_PATH="$PWD/$B/lib:${extra}${LD_LIBRARY_PATH:-}"
else
  say "cannot build here (nvcc, /usr/include/lua5.4/lua.h, /usr/include/cjson/cJSON.h) and no carried $B/zorch"
  exit 1
fi
# the CUDA libraries belong to the module (libzorch_cuda.so), opened on first use
ldd $B/zorch $B/libzorch_cuda.so >>"$log" 2>&1
$B/zorch info 2>&1 | tee -a "$log"
(cd tests && ZORCH_BIN=../$B/zorch ZORCH_BUILD=../$B sh test_cudamod.sh) >"$OUT/test_cudamod.tap" 2>&1
cat "$OUT/test_cudamod.tap" >>"$log"
say "tests/test_cudamod.sh (the module opened only for cuda): $(grep -c '^ok' "$OUT/test_cudamod.tap") passed, $(grep -c '^not ok' "$OUT/test_cudamod.tap") failed"
(cd tests && ZORCH_QUIET=1 ZORCH_BIN=../$B/zorch timeout 240 ../$B/zorch gpu/test_cuda.lua) 2>&1 | tee "$OUT/test_cuda.tap" >>"$log"
status=0
grep -q '^not ok' "$OUT/test_cuda.tap" "$OUT/test_cudamod.tap" && status=1
tail -1 "$OUT/test_cuda.tap" | grep -q '^1\.\.' || status=1
say "tests/gpu: $(grep -c '^ok' "$OUT/test_cuda.tap") passed, $(grep -c '^not ok' "$OUT/test_cuda.tap") failed"
# (bench/bench sits in $B/bench, not beside the module: name it)
ZORCH_CUDA_MODULE="$PWD/$B/libzorch_cuda.so" timeout 150 $B/bench/bench --gpu >"$OUT/bench.jsonl" 2>>"$log" || say "the zorch benchmarks failed (see $log)"
timeout 120 python3 bench/torch_bench.py --gpu >>"$OUT/bench.jsonl" 2>>"$log" || say "no PyTorch figures"
cat "$OUT/bench.jsonl" | tee -a "$log"
exit $status
