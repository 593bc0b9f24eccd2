#!/usr/bin/env bash
# Quick start: installs and builds what is missing, then runs qbc's main job on
# its built-in default. Until the compile pipeline exists the main job is
# resolving and printing the `llm` preset's full configuration.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tools/setup.sh"
exec "$root/build/tools/qbc" dump-config --preset llm "$@"
