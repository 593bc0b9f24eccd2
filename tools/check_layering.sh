#!/usr/bin/env bash
# Fails when an #include crosses a stage boundary that docs/architecture.md forbids.
# Rules: each stage may include only the public headers (include/qbc/<stage>/) of
# the stages it depends on; LibTorch headers only in .cpp files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
status=0

# allowed[stage]="stages whose public headers it may include" (itself implied).
declare -A allowed=(
  [support]=""
  [numerics]="support"
  [runner]="support"
  [tensorfile]="support"
  [config]="support"
  [frontend]="support tensorfile ir"
  [ir]="support"
  [ref]="support numerics runner ir"
  [calib]="support runner ir frontend"
  [quant]="support numerics runner tensorfile config ir ref"
  [npu]="support config ir"
  [mxq]="support"
  [runtime]="support numerics runner mxq"
  [driver]="support runner tensorfile config frontend ir ref calib quant npu mxq"
)

for stage in "${!allowed[@]}"; do
  for dir in "src/$stage" "include/qbc/$stage"; do
    [ -d "$dir" ] || continue
    while IFS= read -r line; do
      file=${line%%:*}
      inc=$(sed -E 's/.*#include "qbc\/([a-z_]+)\/.*/\1/' <<<"$line")
      [ "$inc" = "$stage" ] && continue
      ok=0
      for a in ${allowed[$stage]}; do [ "$a" = "$inc" ] && ok=1; done
      if [ "$ok" = 0 ]; then
        echo "layering: $file includes qbc/$inc/ but stage '$stage' may only use: ${allowed[$stage]:-nothing}" >&2
        status=1
      fi
    done < <(grep -rn '#include "qbc/' "$dir" || true)
  done
done

# LibTorch stays out of headers.
if grep -rln '#include <torch/\|#include <ATen/\|#include <c10/' include src --include='*.h' 2>/dev/null; then
  echo "layering: the headers above include LibTorch; only .cpp files may" >&2
  status=1
fi
[ "$status" = 0 ] && echo "layering: ok"
exit $status
