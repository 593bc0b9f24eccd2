#!/usr/bin/env bash
# Installs and builds what is missing, then runs the whole test suite with ctest.
# Tests that need ../shared (or $QBC_SHARED) fail, not skip, when $CI is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
cd "$root/build"
ctest --output-on-failure -j "${QBC_JOBS:-$(nproc)}" "$@"
