#!/usr/bin/env bash
# Regenerates the generated parts of docs/:
#   docs/architecture.md  the dependency table (tools/check_layering.sh --print-rules; no build needed)
#   docs/config.md        the configuration reference, from the built qbc binary
# Usage: tools/update-docs.sh [path/to/qbc]   (default: build/tools/qbc)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
qbc=${1:-$root/build/tools/qbc}

# replace DOC BEGIN END FILE: the lines between the line starting with BEGIN and the next one
# starting with END become the contents of FILE (the marker lines stay).
replace() {
  local doc=$1 begin=$2 end=$3 body=$4
  grep -q -F -- "$begin" "$doc" || { echo "update-docs: no '$begin' marker in $doc" >&2; exit 1; }
  awk -v begin="$begin" -v end="$end" -v body="$body" '
    index($0, begin) == 1 { print; while ((getline line < body) > 0) print line; skip = 1; next }
    index($0, end) == 1 { skip = 0 }
    !skip { print }
  ' "$doc" > "$doc.tmp"
  mv "$doc.tmp" "$doc"
  echo "updated $doc"
}

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

bash "$root/tools/check_layering.sh" --print-rules > "$tmp"
replace "$root/docs/architecture.md" '<!-- layering-rules:begin' '<!-- layering-rules:end -->' "$tmp"

"$qbc" dump-config --reference > "$tmp"
replace "$root/docs/config.md" '<!-- BEGIN GENERATED: qbc dump-config --reference -->' \
  '<!-- END GENERATED -->' "$tmp"
