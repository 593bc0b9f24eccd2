#!/usr/bin/env bash
# Regenerates the generated parts of docs/ from the built qbc binary.
# Usage: tools/update-docs.sh [path/to/qbc]   (default: build/tools/qbc)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
qbc=${1:-$root/build/tools/qbc}
doc=$root/docs/config.md
begin='<!-- BEGIN GENERATED: qbc dump-config --reference -->'
end='<!-- END GENERATED -->'
ref=$("$qbc" dump-config --reference)
awk -v begin="$begin" -v end="$end" -v ref="$ref" '
  $0 == begin { print; print ref; skip = 1; next }
  index($0, end) == 1 { skip = 0 }
  !skip { print }
' "$doc" > "$doc.tmp"
mv "$doc.tmp" "$doc"
echo "updated $doc"
