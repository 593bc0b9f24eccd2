#!/usr/bin/env bash
# Quick start: installs and builds what is missing, then runs qbc's main job on its
# built-in default: the built-in tiny random Llama is written, compiled with the
# `llm` preset (equivalence transforms, block-by-block calibration on seeded random
# tokens, 8-bit weights, per-token 8-bit activations, 8-bit KV cache) and the
# quantized graph is inspected; compile also checks the fit and runs the ARIES backend
# (its summary line). Extra arguments go to `qbc compile` (e.g. -c configs/examples/w4v8.yaml).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
qbc="$root/build/tools/qbc"
work=$(mktemp -d /tmp/qbc-default-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$qbc" random-model --tiny -o "$work/tiny-llama" >/dev/null
"$qbc" compile "$work/tiny-llama" --preset llm --use-random-calib --set calibration.numSamples=4 \
  -o "$work/tiny-llama.mblt" -v "$@" 2>&1 | grep -v 'qbc.calib: [0-9]*/'
"$qbc" inspect "$work/tiny-llama.mblt"
