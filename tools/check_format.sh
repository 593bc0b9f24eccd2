#!/usr/bin/env bash
# Fails when a file listed in tools/format-checked.txt is not clang-format clean (.clang-format).
#
#   tools/check_format.sh [--fix]     --fix rewrites the listed files in place instead
#
# The list holds repo-relative paths, one a line ('#' starts a comment). It grows file by file:
# add a C++ file once it is formatted (clang-format -i FILE), so the check never fails on code
# nobody touched. $CLANG_FORMAT overrides the binary (default: clang-format; Debian package
# clang-format, installed by tools/setup.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
fix=0
case "${1:-}" in
  --fix) fix=1 ;;
  "") ;;
  *) echo "check_format.sh: unknown option $1" >&2; exit 2 ;;
esac
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "format: $clang_format not found (tools/setup.sh installs the clang-format package)" >&2
  exit 1
fi
files=()
while IFS= read -r line; do
  line=${line%%#*}
  line=$(echo $line)
  [ -n "$line" ] && files+=("$line")
done < tools/format-checked.txt
status=0
for f in "${files[@]}"; do
  if [ ! -f "$f" ]; then
    echo "format: $f is listed in tools/format-checked.txt but does not exist" >&2
    status=1
  elif [ "$fix" = 1 ]; then
    "$clang_format" -i "$f"
  elif ! "$clang_format" --dry-run -Werror "$f"; then
    echo "format: $f is not clang-format clean: run clang-format -i $f" >&2
    status=1
  fi
done
[ "$status" = 0 ] && echo "format: ok (${#files[@]} files)"
exit $status
