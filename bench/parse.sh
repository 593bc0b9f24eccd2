#!/usr/bin/env bash
# qbc parse of a random-weight Llama-3.2-1B-shaped BF16 model: wall time versus
# reading the file once (cat), and peak RSS. Usage: bench/parse.sh [WORKDIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-bench-XXXXXX)}
"$root/tools/setup.sh" >/dev/null
command -v /usr/bin/time >/dev/null || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 2; }
qbc="$root/build/tools/qbc"
model="$work/llama-3.2-1b-bf16"
if [ ! -f "$model/model.safetensors" ]; then
  echo "writing the random model (once)..."
  "$qbc" random-model "$shared/model-configs/Llama-3.2-1B-Instruct/config.json" --dtype bf16 -o "$model" --force >/dev/null
fi
size=$(stat -c %s "$model/model.safetensors")
cat "$model/model.safetensors" > /dev/null  # warm the page cache
best_cat=999999; best_parse=999999; rss=0
for i in 1 2 3; do
  t0=$(date +%s.%N); cat "$model/model.safetensors" > /dev/null; t1=$(date +%s.%N)
  c=$(echo "$t1 - $t0" | bc -l); best_cat=$(echo "if ($c < $best_cat) $c else $best_cat" | bc -l)
  /usr/bin/time -f "%e %M" -o "$work/time.txt" "$qbc" parse "$model" -o "$work/out.mblt" >/dev/null
  read -r p kb < "$work/time.txt"
  best_parse=$(echo "if ($p < $best_parse) $p else $best_parse" | bc -l)
  rss=$kb
done
printf 'model bytes           %d\n' "$size"
printf 'cat (best of 3)       %.3f s\n' "$best_cat"
printf 'qbc parse (best of 3) %.3f s\n' "$best_parse"
printf 'ratio parse/cat       %.2f  (target <= 2)\n' "$(echo "$best_parse / $best_cat" | bc -l)"
printf 'peak RSS              %.1f MB  (target <= 1500)\n' "$(echo "$rss / 1024" | bc -l)"
