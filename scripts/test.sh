#!/bin/sh
# The whole test suite on a fresh Debian machine: installs what is missing,
# builds (warnings as errors), and runs every test; the last line is prove's
# summary.
set -e
cd "$(dirname "$0")/.."
scripts/deps.sh
make --no-print-directory WERROR=1 test
