#!/bin/sh
# On a machine with an NVIDIA GPU: builds zorch with CUDA using the local nvcc
# (or, where the image lacks the Debian packages, runs the build that
# scripts/gpu-bundle.sh made and the caller carried), runs tests/gpu, and the
# GPU benchmarks beside PyTorch's; the log and the JSON lines go to $OUT (or
# ./gpu-out). Without a GPU it says so, runs the same kernels on the emulated
# device instead (make test-cuda-emu, docs/cuda.md) and exits with its status.
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
log="$OUT/gpu-check.log"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: no NVIDIA GPU on this machine (no device to check): running the kernels on the emulated device (make test-cuda-emu)" | tee "$log"
  if [ ! -f /usr/include/lua5.4/lua.h ] || [ ! -f /usr/include/cjson/cJSON.h ]; then
    echo "gpu-check: cannot build the emulated suite here (no Lua/cJSON headers: scripts/deps.sh); nothing checked" | tee -a "$log"
    exit 0
  fi
  make --no-print-directory -j"$(nproc)" test-cuda-emu >>"$log" 2>&1
  st=$?
  grep -E '^kernels run|^Result|^Files=' "$log" | sed 's/^/gpu-check: emulated: /'
  echo "gpu-check: no GPU; the emulated suite $([ $st = 0 ] && echo passed || echo FAILED) (log: $log)" | tee -a "$log"
  exit $st
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
# budget (under 5 minutes with the build): the suite 180 s, the benchmarks 45 s each
(cd tests && ZORCH_QUIET=1 ZORCH_BIN=../$B/zorch timeout 180 ../$B/zorch gpu/test_cuda.lua) 2>&1 | tee "$OUT/test_cuda.tap" >>"$log"
status=0
grep -q '^not ok' "$OUT/test_cuda.tap" "$OUT/test_cudamod.tap" && status=1
tail -1 "$OUT/test_cuda.tap" | grep -q '^1\.\.' || status=1
say "tests/gpu: $(grep -c '^ok' "$OUT/test_cuda.tap") passed, $(grep -c '^not ok' "$OUT/test_cuda.tap") failed"
grep -E '^(not )?ok .*(gpt2 on the GPU|ZeRO stage|GPUs at stage|through NCCL)' "$OUT/test_cuda.tap" | sed 's/^/gpu-check: /' | tee -a "$log"
# (bench/bench sits in $B/bench, not beside the module: name it)
ZORCH_CUDA_MODULE="$PWD/$B/libzorch_cuda.so" timeout 45 $B/bench/bench --gpu >"$OUT/bench.jsonl" 2>>"$log" || say "the zorch benchmarks failed or ran out of time (see $log)"
timeout 45 python3 bench/torch_bench.py --gpu >>"$OUT/bench.jsonl" 2>>"$log" || say "no PyTorch figures"
cat "$OUT/bench.jsonl" | tee -a "$log"
# one JSON file: the machine, the tests' counts and every benchmark line
python3 - "$OUT" <<'PY' || say "no gpu-check.json (python3)"
import json, subprocess, sys
out = sys.argv[1]
tap = open(out + "/test_cuda.tap").read().splitlines()
bench = []
for line in open(out + "/bench.jsonl"):
    try: bench.append(json.loads(line))
    except ValueError: pass
gpus = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
json.dump({"gpus": gpus, "tests_passed": sum(l.startswith("ok") for l in tap),
           "tests_failed": [l for l in tap if l.startswith("not ok")], "bench": bench},
          open(out + "/gpu-check.json", "w"), indent=1)
PY
say "results: $OUT/gpu-check.json"
exit $status
