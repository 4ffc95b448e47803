#!/bin/sh
# Installs the Debian packages zorch builds and tests with, when missing.
set -e
PKGS="build-essential pkg-config libopenblas-dev libopenblas0-openmp libdnnl-dev liblua5.4-dev lua5.4 libcjson-dev libreadline-dev openmpi-bin libopenmpi-dev perl python3 valgrind gnuplot-nox luarocks zlib1g-dev dataset-fashion-mnist golang-github-pierrec-lz4-dev liburing-dev"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "zorch: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
