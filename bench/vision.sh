#!/usr/bin/env bash
# The vision part of a VLM (issue 26): images per second of the compiled tower on the executor
# (`qbc run --image`'s path: decode, preprocessing, the feature bundle on the simulated device)
# against the float reference runtime (LibTorch, the same folder's vision graph and inputs),
# both measured in this run (bench/vision.cpp). Random weights; the language model is shrunk
# (2 layers, width 256), which changes neither side's tower. Towers:
#   qwen2.5-vl  Qwen2.5-VL-3B's ViT at 448x448 (1024 patches, 256 tokens), full width 1280,
#               FFN 3420, 16 heads, window attention and one full-attention block, the 2x2
#               merger: 8 of its 32 blocks (the per-block work is the same; `--layers` below)
#   qwen2-vl    Qwen2-VL-2B's ViT at 448x448 (tests/assets/model-configs), full width 1280, FFN
#               5120 (quick_gelu), 16 heads, every block over the whole image, the 2x2 merger:
#               8 of its 32 blocks
#   llava       LLaVA-1.5-7B's CLIP ViT-L/14 at 336x336 at full size (23 of 24 layers, 577 rows)
#   gemma3      gemma-3-4b-it's SigLIP-so400m/14 at 896x896 (4096 patches, the 4x4 pool to 256
#               tokens), full width 1152, FFN 4304, 16 heads: 4 of its 27 layers
# Usage: bench/vision.sh [WORKDIR] [reps=3] [tower=all|qwen2.5-vl|qwen2-vl|llava|gemma3]
# Target: vision_executor_vs_float >= 1 for each tower; exit 1 otherwise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-vision-XXXXXX)}
reps=${2:-3}
tower=${3:-all}
bash "$root/tools/setup.sh" --target qbc --target qbc-bench-vision >/dev/null
qbc="$root/build/tools/qbc"
mkdir -p "$work"
echo "== host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
status=0
run_tower() {  # NAME CONFIG [random-model flags...]
  local name=$1 config=$2
  shift 2
  [ -f "$config" ] || { echo "bench: $config is missing (set QBC_SHARED)" >&2; exit 2; }
  "$qbc" random-model "$config" -o "$work/$name" --force --dtype f16 \
    --layers 2 --hidden 256 --intermediate 512 --heads 4 --kv-heads 4 "$@" >/dev/null
  "$qbc" compile "$work/$name" --preset multimodal --use-random-calib --context 2048 \
    --set calibration.numSamples=2 --set calibration.seqLength=64 \
    --images "$shared/data/images" -o "$work/$name.mxq" 2>/dev/null
  echo "== $name"
  "$root/build/tools/qbc-bench-vision" "$work/$name" "$work/$name.mxq" \
    "$shared/data/images/rocket.jpg" "$reps" || status=1
}
if [ "$tower" = all ] || [ "$tower" = qwen2.5-vl ]; then
  run_tower qwen2.5-vl "$shared/model-configs-new/Qwen2.5-VL-3B-Instruct/config.json" \
    --vocab 32064 --vision-layers 8
fi
if [ "$tower" = all ] || [ "$tower" = qwen2-vl ]; then
  run_tower qwen2-vl "$root/tests/assets/model-configs/Qwen2-VL-2B-Instruct/config.json" \
    --vocab 32064 --vision-layers 8
fi
if [ "$tower" = all ] || [ "$tower" = llava ]; then
  run_tower llava "$shared/model-configs-new/llava-1.5-7b-hf/config.json" --vocab 32064
fi
if [ "$tower" = all ] || [ "$tower" = gemma3 ]; then
  run_tower gemma3 "$shared/model-configs-new/gemma-3-4b-it/config.json" \
    --vocab 32064 --head-dim 64 --vision-layers 4
fi
exit $status
