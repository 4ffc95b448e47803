#!/bin/sh
# The main job on a fresh Debian machine: installs what is missing, builds, and
# runs the reference SimpleNet training (models/simple_net.lua). Flags go to it.
set -e
cd "$(dirname "$0")/.."
scripts/deps.sh
make --no-print-directory run ARGS="$*"
