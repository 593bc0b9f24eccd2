#!/usr/bin/env bash
# The compile report and the timeline trace of a Qwen3-0.6B-shaped model (random weights,
# 2 decoder layers, the full 151936-token vocabulary): compile with --report, the trace of
# `inspect --trace`, a JSON load of the trace with its event counts, and a headless
# Chromium screenshot of the report. Prints wall times and sizes.
# Usage: bench/report_qwen3.sh [WORKDIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-bench-XXXXXX)}
qbc="$root/build/tools/qbc"
[ -x "$qbc" ] || "$root/tools/setup.sh" --target qbc >/dev/null
model="$work/qwen3-0.6b-2l"
if [ ! -f "$model/config.json" ]; then
  "$qbc" random-model "$shared/model-configs/Qwen3-0.6B/config.json" --layers 2 -o "$model" --force >/dev/null
fi
t0=$(date +%s.%N)
"$qbc" compile "$model" --preset llm_fast --use-random-calib \
  --set calibration.numSamples=4 --set calibration.seqLength=128 \
  --set llm.attributes.calibration.useFullSeqLength=false \
  -o "$work/q.mxq" --report "$work/report.html" 2> "$work/compile.log"
t1=$(date +%s.%N)
"$qbc" inspect "$work/q.mxq" --trace "$work/trace.json"
t2=$(date +%s.%N)
python3 - "$work/trace.json" <<'PY'
import json, sys, collections
doc = json.load(open(sys.argv[1]))
ev = doc["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert all(e["ts"] >= 0 and e["dur"] >= 0 for e in x)
named = {(e["pid"], e["tid"]) for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
assert all((e["pid"], e["tid"]) in named for e in x)
calls = collections.defaultdict(dict)
for e in x:
    if e["tid"] == 4:
        calls[e["cat"]][e["pid"]] = e["dur"]
n = collections.Counter(e["cat"] for e in x if e["tid"] != 4)
for cat, per in calls.items():
    print("trace %-8s %7d instructions, per core (us): %s" % (cat, n[cat],
          " ".join("%.1f" % per[p] for p in sorted(per))))
PY
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1000,3000 \
  --screenshot="$work/report.png" "file://$work/report.html" 2>/dev/null
printf 'compile + report  %.1f s (report %s bytes)\n' "$(awk "BEGIN{print $t1 - $t0}")" "$(stat -c %s "$work/report.html")"
printf 'inspect --trace   %.1f s (trace %s bytes)\n' "$(awk "BEGIN{print $t2 - $t1}")" "$(stat -c %s "$work/trace.json")"
echo "screenshot        $work/report.png"
