#!/usr/bin/env bash
# The vision part of a VLM (issue 26): images per second of the compiled tower on the executor
# (`qbc run --image`'s path: decode, preprocessing, the feature bundle on the simulated device)
# against the float reference runtime (LibTorch, the same folder's vision graph and inputs),
# both measured in this run (bench/vision.cpp). The tower is LLaVA-1.5-7B's CLIP ViT-L/14 at
# 336x336 at full size (23 of 24 layers, width 1024, 577 rows) with random weights; the language
# model is shrunk (2 layers, width 256), which changes neither side's tower.
# Not the issue's Qwen2-VL tower at 448x448: its merger does not lower yet (docs/multimodal.md).
# Usage: bench/vision.sh [WORKDIR] [reps=3]
# Target: vision_executor_vs_float >= 1; exit 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-vision-XXXXXX)}
reps=${2:-3}
config="$shared/model-configs-new/llava-1.5-7b-hf/config.json"
[ -f "$config" ] || { echo "bench: $config is missing (set QBC_SHARED)" >&2; exit 2; }
bash "$root/tools/setup.sh" --target qbc --target qbc-bench-vision >/dev/null
qbc="$root/build/tools/qbc"
mkdir -p "$work"
"$qbc" random-model "$config" -o "$work/llava" --force --dtype f16 \
  --layers 2 --hidden 256 --intermediate 512 --heads 4 --kv-heads 4 --vocab 32064 >/dev/null
"$qbc" compile "$work/llava" --preset multimodal --use-random-calib --context 2048 \
  --set calibration.numSamples=2 --set calibration.seqLength=64 \
  --images "$shared/data/images" -o "$work/llava.mxq" 2>/dev/null
echo "== host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
"$root/build/tools/qbc-bench-vision" "$work/llava" "$work/llava.mxq" \
  "$shared/data/images/rocket.jpg" "$reps"
