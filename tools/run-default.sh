#!/usr/bin/env bash
# Quick start: installs and builds what is missing, then runs qbc's main job on
# its built-in default. Until the compile pipeline exists the main job is
# resolving and printing the `llm` preset's full configuration; then the
# frontend is shown on the built-in tiny random Llama: written, parsed into
# MBLT and inspected.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
qbc="$root/build/tools/qbc"
"$qbc" dump-config --preset llm "$@"
work=$(mktemp -d /tmp/qbc-default-XXXXXX)
trap 'rm -rf "$work"' EXIT
"$qbc" random-model --tiny -o "$work/tiny-llama" >/dev/null
"$qbc" parse "$work/tiny-llama" -o "$work/tiny-llama.mblt"
"$qbc" inspect "$work/tiny-llama.mblt"
