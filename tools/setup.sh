#!/usr/bin/env bash
# Installs what qbc needs (Debian 12 packages only; idempotent: apt runs only when
# something is missing), then configures and builds it.
#
#   tools/setup.sh [--deps-only] [--build-dir DIR] [--asan] [--target T]...
#
# Environment: QBC_BUILD_TYPE (default Release), QBC_JOBS (default: nproc).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build_dir="$root/build"
deps_only=0
asan=OFF
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --deps-only) deps_only=1 ;;
    --build-dir) build_dir=$2; shift ;;
    --asan) asan=ON ;;
    --target) targets+=("$2"); shift ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

# The package list. libopenblas0-pthread matters: without it Debian's LibTorch
# falls back to reference BLAS and matmuls run about 9x slower. clang-format is for
# the ctest test `format` (tools/check_format.sh). chromium renders the HTML report in
# its test (tests/cli/report_cli_test.cpp, headless). llvm-14-tools gives FileCheck-14 to the
# golden tests (tests/golden).
packages=(
  g++ cmake ninja-build ccache pkg-config git clang-format
  libprotobuf-dev protobuf-compiler
  nlohmann-json3-dev libyaml-cpp-dev libcli11-dev libspdlog-dev libfmt-dev
  libgtest-dev libgmock-dev
  libpcre2-dev libxxhash-dev
  libpng-dev libjpeg62-turbo-dev zlib1g-dev
  llvm-14-tools
  libtorch-dev libopenblas0-pthread
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
[ "$deps_only" = 1 ] && exit 0

export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# Paths relative to the checkout in ccache's keys, so a fresh clone elsewhere (CI) hits the cache.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$root}
jobs=${QBC_JOBS:-$(nproc)}
cmake -S "$root" -B "$build_dir" -G Ninja \
  -DCMAKE_BUILD_TYPE="${QBC_BUILD_TYPE:-Release}" -DQBC_ASAN="$asan" >/dev/null
if [ ${#targets[@]} -gt 0 ]; then
  cmake --build "$build_dir" -j "$jobs" --target "${targets[@]}"
else
  cmake --build "$build_dir" -j "$jobs"
fi
