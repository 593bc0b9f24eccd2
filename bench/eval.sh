#!/usr/bin/env bash
# qbc eval throughput on stories260K (ctx 256, TinyStories head), and qbc run
# decode speed. Usage: bench/eval.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
"$root/tools/setup.sh" >/dev/null
qbc="$root/build/tools/qbc"
model="$shared/models/stories260k/hf"
text="$shared/data/tinystories/tinystories_valid_head.clean.txt"
best=0
for i in 1 2 3; do
  tps=$("$qbc" eval "$model" --text "$text" --ctx 256 --json | sed -n 's/.*"tokens_per_second": \([0-9.]*\).*/\1/p')
  best=$(echo "if ($tps > $best) $tps else $best" | bc -l)
done
printf 'eval stories260K ctx 256 (best of 3)  %.0f tokens/s  (llama.cpp-protocol perplexity)\n' "$best"
"$qbc" --log-format json run "$model" -p "Once upon a time" -n 200 --ignore-eos 2>&1 >/dev/null |
  sed -n 's/.*"decode_tokens_per_second":\([0-9.]*\).*/\1/p' |
  xargs printf 'run stories260K decode (200 tokens)    %.0f tokens/s\n'
