#!/bin/sh
# Which oneDNN runs the GEMMs (ops/cpu/dnnl.c): `zorch info` names it; a
# ZORCH_DNNL_LIB that does not load, or is not oneDNN, is named there and the
# usual search runs on; a oneDNN 3.x, where one is at hand (ZORCH_TEST_DNNL3,
# or PyPI's onednn-cpu-gomp under python3's prefix), passes the GEMM tests.
B=${ZORCH_BUILD:-../build}
Z=${ZORCH_BIN:-$B/zorch}
. ./tap.sh
# a bf16 product through the GEMM, against the same product in float64
PROD='local a, b = zorch.randn(64, 96), zorch.randn(96, 80)
local got = a:to("bf16"):matmul(b:to("bf16")):to("f64")
local want = a:to("bf16"):to("f64"):matmul(b:to("bf16"):to("f64"))
local err = (got - want):abs():max():item()
assert(err < 0.05 * want:abs():max():item(), "bf16 product off by " .. err)'
info=$("$Z" info 2>&1)
if ! echo "$info" | grep -q "bf16 GEMM: oneDNN"; then
  skip "no oneDNN here ($(echo "$info" | grep -o 'bf16 GEMM: [^;]*'))"
  skip "no oneDNN here"
  skip "no oneDNN here"
else
  check "zorch info names the oneDNN and the kernel it runs" sh -c \
    "echo '$info' | grep -Eq 'bf16 GEMM: oneDNN [23]\.[0-9]+\.[0-9]+ matmul, kernel [a-z]'"
  check "a ZORCH_DNNL_LIB that does not load is named, and the search goes on" sh -c \
    "ZORCH_DNNL_LIB=/nonexistent/libdnnl.so.3 '$Z' info | grep -q 'bf16 GEMM: oneDNN .*ZORCH_DNNL_LIB=/nonexistent/libdnnl.so.3 did not load' &&
     ZORCH_DNNL_LIB=/nonexistent/libdnnl.so.3 '$Z' -e '$PROD'"
  libm=$(ls /lib/x86_64-linux-gnu/libm.so.6 /usr/lib/x86_64-linux-gnu/libm.so.6 /lib64/libm.so.6 2>/dev/null | head -1)
  check "a ZORCH_DNNL_LIB that is not oneDNN is named, and the search goes on" sh -c \
    "ZORCH_DNNL_LIB='$libm' '$Z' info | grep -q 'bf16 GEMM: oneDNN .*ZORCH_DNNL_LIB=$libm is not oneDNN'"
fi
# oneDNN 3.x, where there is one
d3=${ZORCH_TEST_DNNL3:-}
if [ -z "$d3" ] && command -v python3 >/dev/null 2>&1; then
  d3="$(python3 -c 'import sys; print(sys.prefix)' 2>/dev/null)/lib/libdnnl.so.3"
fi
if [ -f "$d3" ] && ZORCH_DNNL_LIB="$d3" "$Z" info | grep -q "bf16 GEMM: oneDNN 3\."; then
  check "oneDNN 3.x ($d3): zorch info names it" sh -c "ZORCH_DNNL_LIB='$d3' '$Z' info | grep -q 'fp32 GEMM: oneDNN (oneDNN 3\.'"
  check "oneDNN 3.x: a bf16 product" env ZORCH_DNNL_LIB="$d3" "$Z" -e "$PROD"
  for t in test_cpu_kernels test_sgemm; do
    check "oneDNN 3.x: $t passes" sh -c "out=\$(ZORCH_DNNL_LIB='$d3' '$B/tests/$t') || exit 1; ! echo \"\$out\" | grep '^not ok'"
  done
else
  for i in 1 2 3 4; do skip "no oneDNN 3.x at hand (ZORCH_TEST_DNNL3, or pip install onednn-cpu-gomp)"; done
fi
echo "1..$n"
[ "$fails" -eq 0 ]
