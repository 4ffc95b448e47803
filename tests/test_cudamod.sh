#!/bin/sh
# The CUDA module (docs/cuda.md): a CPU run never opens it, so it maps none of
# CUDA's libraries and stays small; asking for a cuda device opens it (from
# beside the program, or $ZORCH_CUDA_MODULE); without it, or with a file that
# is not a zorch module, cuda tensors are refused with the reason and nothing
# aborts. A CPU-only build says it was built without CUDA.
B=${ZORCH_BUILD:-../build}
Z=${ZORCH_BIN:-$B/zorch}
. ./tap.sh
# the libraries of CUDA's (or the module) this process has mapped, after some CPU work
MAPS='local x = zorch.randn(64, 64, {requires_grad = true}); (x:matmul(x)):sum():backward()
local n = 0
for l in io.lines("/proc/self/maps") do
  local f = l:match("(/[^ ]+)$") or ""
  if f:find("libzorch_cuda", 1, true) or f:find("libcudart", 1, true) or f:find("libcublas", 1, true)
     or f:find("libnccl", 1, true) or f:find("libcudnn", 1, true) then print(f); n = n + 1 end
end
os.exit(n == 0 and 0 or 1)'
check "a CPU run maps none of CUDA's libraries" "$Z" -e "$MAPS"
# peak resident set of an empty run (the CPU-only build's size, not cudart's)
RSS='for l in io.lines("/proc/self/status") do local kb = l:match("^VmHWM:%s*(%d+)")
  if kb then print(kb .. " KiB"); os.exit(tonumber(kb) < 20 * 1024 and 0 or 1) end end os.exit(1)'
if [ -n "${ZORCH_TEST_SANITIZED:-}" ]; then
  skip "resident size under a sanitizer"
else
  check "an empty run stays under 20 MiB resident" "$Z" -e "$RSS"
fi
refused() { # refused "expected text" [env...]: a cuda tensor is an error naming it, and the run goes on
  want=$1; shift
  out=$(env "$@" "$Z" -e 'local ok, e = pcall(zorch.zeros, 2, {device = "cuda"})
    print(ok, e); print(pcall(zorch.cuda.synchronize)); print(zorch.cuda.info()); print("still running")' 2>&1)
  echo "$out" | grep -qF -- "$want" && echo "$out" | grep -q "still running" || { echo "$out"; false; }
}
if "$Z" -e 'os.exit(zorch.cuda.built() and 0 or 1)'; then
  mod=${ZORCH_CUDA_MODULE:-$(cd "$(dirname "$Z")" && pwd)/libzorch_cuda.so}
  check "the module exports only its two entry points" sh -c \
    "nm -D --defined-only '$mod' | awk '{print \$3}' | sort | tr '\n' ' ' | grep -qx 'zorch_cuda_module_open zorch_cuda_nccl_open '"
  check "asking for a cuda device opens the module" "$Z" -e '
    zorch.cuda.device_count()
    local found = false
    for l in io.lines("/proc/self/maps") do if l:find("libzorch_cuda.so", 1, true) then found = true end end
    assert(found, "not mapped"); assert(zorch.cuda.info():find("^module /"), zorch.cuda.info())'
  check "zorch info names the module it loaded" sh -c "'$Z' info | grep -q 'cuda: *module /.*libzorch_cuda.so loaded'"
  if ! "$Z" -e 'os.exit(zorch.cuda.available() and 0 or 1)'; then
    check "without a GPU, cuda tensors are refused with the runtime's reason" \
      refused "not available (0 CUDA devices present)"
  fi
  check "a missing module is named in the error" \
    refused "cuda: the CUDA module is not available: /nonexistent/libzorch_cuda.so" ZORCH_CUDA_MODULE=/nonexistent/libzorch_cuda.so
  other=$(ls /lib/x86_64-linux-gnu/libm.so.6 /usr/lib/x86_64-linux-gnu/libm.so.6 2>/dev/null | head -1)
  check "a library that is not a zorch module is refused" \
    refused "not a zorch CUDA module" ZORCH_CUDA_MODULE="$other"
  tmp=$(mktemp -d)
  cp "$Z" "$tmp/zorch"
  check "the program looks beside itself (a copy without the module says where it looked)" sh -c \
    "env -u ZORCH_CUDA_MODULE '$tmp/zorch' -e 'print(pcall(zorch.zeros, 2, {device = \"cuda\"}))' | grep -qF 'was not found beside $tmp'"
  mkdir -p "$tmp/bin" "$tmp/lib" && mv "$tmp/zorch" "$tmp/bin/" && cp "$mod" "$tmp/lib/"
  check "... and in its ../lib (an installed layout)" sh -c \
    "env -u ZORCH_CUDA_MODULE '$tmp/bin/zorch' -e 'zorch.cuda.device_count() print(zorch.cuda.info())' | grep -qF 'module $tmp/lib/libzorch_cuda.so loaded'"
  rm -rf "$tmp"
else
  check "a CPU-only build refuses cuda tensors, saying why" refused "zorch was built without CUDA"
fi
echo "1..$n"
[ "$fails" = 0 ]
