#!/bin/sh
# Installs the Debian packages zorch builds and tests with, when missing.
set -e
PKGS="build-essential pkg-config libopenblas-dev libopenblas0-openmp libdnnl-dev liblua5.4-dev lua5.4 libcjson-dev libreadline-dev openmpi-bin libopenmpi-dev perl python3 valgrind gnuplot-nox luarocks zlib1g-dev dataset-fashion-mnist golang-github-pierrec-lz4-dev liburing-dev libmicrohttpd-dev"
# a one-node Slurm cluster for tests/lua/test_slurm.lua (about 12 MB without
# the recommended extras; the test skips where they are missing)
SLURM_PKGS="slurmctld slurmd slurm-client"
# optional PyPI packages: the openai client drives tests/lua/generation/test_serve.lua
PYPI_OPTIONAL="openai"
absent() {
  out=""
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out="$out $p"
  done
  echo "$out"
}
pip_optional() {
  for p in $PYPI_OPTIONAL; do
    python3 -c "import $p" 2>/dev/null && continue
    python3 -m pip install -q "$p" 2>/dev/null || python3 -m pip install -q --break-system-packages "$p" 2>/dev/null ||
      echo "zorch: python $p did not install; the tests that use it will skip"
  done
}
missing=$(absent $PKGS)
slurm=$(absent $SLURM_PKGS)
[ -z "$missing$slurm" ] && { pip_optional; exit 0; }
echo "zorch: installing$missing$slurm"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
[ -n "$missing" ] && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
# (optional: a failure here leaves the Slurm test skipping, not the set-up failed)
if [ -n "$slurm" ]; then
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $slurm ||
    echo "zorch: the Slurm packages did not install; tests/lua/test_slurm.lua will skip"
fi
pip_optional
exit 0
