#!/usr/bin/env bash
# Runs one golden file (docs/testing.md "Golden tests"): every line holding "RUN:" is a shell
# pipeline, run with pipefail in the file's folder after these substitutions:
#   %s -> the file, %S -> its folder, qbc -> the qbc binary, FileCheck -> FileCheck,
#   not CMD -> CMD must fail (exit non-zero), like lit's `not`.
# Fails on the first RUN line that fails, printing it.
#
#   run_golden.sh QBC FILECHECK FILE
set -uo pipefail
[ $# -eq 3 ] || { echo "usage: run_golden.sh QBC FILECHECK FILE" >&2; exit 2; }
qbc_bin=$(realpath "$1") filecheck_bin=$(realpath "$2") file=$3
dir=$(cd "$(dirname "$file")" && pwd)
file="$dir/$(basename "$file")"
cd "$dir"
export QBC_BIN=$qbc_bin FILECHECK_BIN=$filecheck_bin
qbc() { "$QBC_BIN" "$@"; }
FileCheck() { "$FILECHECK_BIN" "$@"; }
not() { ! "$@"; }
export -f qbc FileCheck not

runs=0
while IFS= read -r line; do
  cmd=${line#*RUN:}
  cmd=${cmd//%s/$file}
  cmd=${cmd//%S/$dir}
  runs=$((runs + 1))
  if ! bash -o pipefail -c "$cmd"; then
    echo "golden: FAILED: $(basename "$file"): RUN:$cmd" >&2
    exit 1
  fi
done < <(grep 'RUN:' "$file")
if [ "$runs" -eq 0 ]; then
  echo "golden: $(basename "$file") has no RUN: line" >&2
  exit 1
fi
echo "golden: $(basename "$file"): $runs RUN line(s) passed"
