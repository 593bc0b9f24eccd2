#!/usr/bin/env bash
# A soak of the runtime (issue 29): four sequences decoded interleaved on one cache slot, each
# swapped out and in through a KV dump and load at every switch (bursts of 1-7 steps), 10,000
# decode steps in all; then each sequence alone without a dump, logits compared bit for bit;
# resident memory sampled 50 times, flat within 1 % after the warm-up (bench/soak.cpp).
# Runs on two models: the built-in tiny random Llama and stories260K (trained weights), both
# W8 --preset llm_fast compiled with a 4096-position cache.
# Usage: bench/soak.sh [WORKDIR] [steps=10000]
# Target: soak_equal 1, soak_rss_drift <= 0.01 on each model; exit 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-soak-XXXXXX)}
steps=${2:-10000}
command -v /usr/bin/time >/dev/null || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 2; }
bash "$root/tools/setup.sh" --target qbc --target qbc-soak >/dev/null
qbc="$root/build/tools/qbc"
soak="$root/build/tools/qbc-soak"
mkdir -p "$work"
"$qbc" random-model --tiny -o "$work/tiny" --force >/dev/null
status=0
for name in tiny stories260k; do
  src="$work/tiny"
  if [ "$name" = stories260k ]; then
    src="$shared/models/stories260k/hf"
    [ -f "$src/config.json" ] || { echo "bench: $src is missing (set QBC_SHARED)" >&2; exit 2; }
  fi
  "$qbc" compile "$src" --preset llm_fast --use-random-calib --context 4096 \
    -o "$work/$name.mxq" 2>/dev/null >/dev/null
  echo "== $name ($(stat -c %s "$work/$name.mxq") bytes MXQ, $steps steps)"
  /usr/bin/time -f "soak_time wall %e s, user %U s, sys %S s, peak RSS %M KB" \
    "$soak" "$work/$name.mxq" "$steps" 4 16 "$work/dumps" || status=1
done
exit $status
