#!/usr/bin/env bash
# Quick start: installs and builds what is missing, then runs qbc's main job on its
# built-in default: the built-in tiny random Llama is written and compiled with the `llm`
# preset (equivalence transforms, block-by-block calibration on seeded random tokens,
# 8-bit weights, per-token 8-bit activations, 8-bit KV cache, then the ARIES backend) to
# an MXQ file; the runtime runs it (greedy text from a prompt: the model has random
# weights, so the text is nonsense, but it is the compiled programs' output), and the
# memory plan inside the file is printed. Extra arguments go to `qbc compile`
# (e.g. -c configs/examples/w4v8.yaml).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
qbc="$root/build/tools/qbc"
work=$(mktemp -d /tmp/qbc-default-XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$(date +%s%N)
"$qbc" random-model --tiny -o "$work/tiny-llama" >/dev/null
"$qbc" compile "$work/tiny-llama" --preset llm --use-random-calib --set calibration.numSamples=4 \
  -o "$work/tiny-llama.mxq" -v "$@" 2>&1 | grep -v 'qbc.calib: [0-9]*/'
# Random weights give random bytes: shown with unprintable ones as '.'.
"$qbc" run "$work/tiny-llama.mxq" -p "Once upon a time" -n 16 --ignore-eos | LC_ALL=C tr -c '[:print:]\n' '.'
"$qbc" inspect "$work/tiny-llama.mxq" --memory | grep -v '^ *0x\|^ *[0-9]\|^DRAM buffers' | sed -n '1,11p;$p'
ms=$((($(date +%s%N) - start) / 1000000))
printf 'run-default: wrote, compiled, ran and inspected the MXQ in %d.%d s\n' $((ms / 1000)) $((ms % 1000 / 100))
