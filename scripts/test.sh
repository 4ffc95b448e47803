#!/bin/sh
# The whole test suite on a fresh Debian machine: installs what is missing,
# builds (warnings as errors), and runs every test: first the CUDA kernels on
# the emulated device (make test-cuda-emu, its own build in build/emu, four to
# six minutes on two cores), then the suite; the last line is prove's summary.
set -e
cd "$(dirname "$0")/.."
scripts/deps.sh
make --no-print-directory WERROR=1 test-cuda-emu
make --no-print-directory WERROR=1 test
