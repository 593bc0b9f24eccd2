#!/usr/bin/env bash
# qbc quantize of a random-weight Llama-3.2-1B-shaped BF16 model at W8 with
# useRandomCalib, 16 samples x 256 tokens (--preset llm_fast): wall time, peak RSS
# against the bound (2 x the largest block's float32 weights + 1.5 GB; the head counts
# as a block), and calibration throughput as a fraction of the measured GEMM peak.
# Usage: [QBC_BENCH_PRESET=llm] bench/quantize.sh [WORKDIR] [extra qbc quantize args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-bench-XXXXXX)}
shift || true
"$root/tools/setup.sh" >/dev/null
command -v /usr/bin/time >/dev/null || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 2; }
qbc="$root/build/tools/qbc"
config="$shared/model-configs/Llama-3.2-1B-Instruct/config.json"
model="$work/llama-3.2-1b-bf16"
if [ ! -f "$model/model.safetensors" ]; then
  echo "writing the random model (once)..."
  "$qbc" random-model "$config" --dtype bf16 -o "$model" --force >/dev/null
fi
peak=$("$root/build/tools/qbc-gemm-peak" | awk '{print $2}')
/usr/bin/time -f "%e %M" -o "$work/time.txt" "$qbc" quantize "$model" --preset "${QBC_BENCH_PRESET:-llm_fast}" --use-random-calib \
  --set calibration.numSamples=16 --set calibration.seqLength=256 -o "$work/q.mblt" -v "$@" 2> "$work/quantize.log"
read -r wall kb < "$work/time.txt"
calib=$(grep -o 'calibration: .*' "$work/quantize.log" | tail -1)
gflops=$(echo "$calib" | grep -o '[0-9.]* GFLOP/s' | awk '{print $1}')
calib_s=$(echo "$calib" | grep -o 'in [0-9.]* s' | awk '{print $2}')
# Largest block in float32: max(one decoder layer, the head), from config.json.
bound_mb=$(python3 - "$config" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
d = c.get("head_dim") or h // heads
layer = h * heads * d * 2 + 2 * h * kv * d + 3 * h * i + 2 * h
head = v * h
print("%.0f" % ((2 * 4 * max(layer, head)) / 2**20 + 1536))
PY
)
printf 'model                 %s (%s bytes)\n' "$model" "$(stat -c %s "$model/model.safetensors")"
printf 'wall time             %.1f s (calibration %.1f s)\n' "$wall" "$calib_s"
printf 'peak RSS              %.0f MB  (bound %s MB: ratio %.2f, target <= 1)\n' "$(echo "$kb / 1024" | bc -l)" "$bound_mb" \
  "$(echo "$kb / 1024 / $bound_mb" | bc -l)"
printf 'GEMM peak             %s GFLOP/s (qbc-gemm-peak, LibTorch fp32)\n' "$peak"
printf 'calibration           %s GFLOP/s in linears: %.2f of the GEMM peak (target >= 0.5)\n' "$gflops" \
  "$(echo "$gflops / $peak" | bc -l)"
