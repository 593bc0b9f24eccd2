#!/usr/bin/env bash
# Resume after a kill on the Llama-3.2-1B shape (random BF16 weights, W8, --preset llm_fast,
# random calibration): one uninterrupted compile (--no-resume) as the reference, then for each
# of 25 %, 50 % and 90 % of its calibration a compile killed with SIGKILL once the JSON
# progress events show that fraction of the `calibrate` pass done, and the same command again.
# Prints the resumed run's wall and user+sys CPU time against the remainder (reference wall
# minus the wall time the killed run had when it was killed) and checks the MXQ bytes.
# Target (issue 29): resumed <= remainder + 10 %, bytes identical.
# Usage: bench/resume.sh [WORKDIR] [extra qbc compile args...]
#   QBC_RESUME_POINTS="25 50 90"  QBC_BENCH_MODEL=DIR (an existing random 1B model folder)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
shared=${QBC_SHARED:-$root/../shared}
work=${1:-$(mktemp -d /tmp/qbc-resume-XXXXXX)}
shift || true
command -v /usr/bin/time >/dev/null || { echo "bench: needs GNU time (apt-get install time)" >&2; exit 2; }
[ -x "$root/build/tools/qbc" ] || { echo "bench: build qbc first (tools/setup.sh --target qbc)" >&2; exit 2; }
# Every run uses one copy of the binary: a rebuild during the bench (another commit, so another
# `git describe`) would otherwise change the producer string the MXQ metadata records and the
# resume fingerprint, and the bytes would differ for that reason alone.
mkdir -p "$work"
cp "$root/build/tools/qbc" "$work/qbc"
qbc="$work/qbc"
config="$shared/model-configs/Llama-3.2-1B-Instruct/config.json"
model=${QBC_BENCH_MODEL:-$work/llama-3.2-1b-bf16}
if [ ! -f "$model/model.safetensors" ]; then
  echo "writing the random model (once)..."
  "$qbc" random-model "$config" --dtype bf16 -o "$model" --force >/dev/null
fi
mkdir -p "$work/ref" "$work/run"
args=(compile "$model" --preset llm_fast --use-random-calib
  --set llm.attributes.maxCacheLength=2048 --set llm.attributes.maxSequenceLength=2048
  --set calibration.numSamples=${QBC_RESUME_SAMPLES:-2} --set calibration.seqLength=${QBC_RESUME_SEQ:-64} "$@")

python3 - "$qbc" "$work" "${QBC_RESUME_POINTS:-25 50 90}" "${args[@]}" <<'PY'
import json, os, signal, subprocess, sys, time, filecmp, shutil

qbc, work, points, args = sys.argv[1], sys.argv[2], [int(p) for p in sys.argv[3].split()], sys.argv[4:]

def timed(cmd, err_path):
    """Runs cmd under GNU time; returns (wall, user, sys, peak RSS in MiB, exit code)."""
    tfile = err_path + ".time"
    with open(err_path, "w") as err:
        rc = subprocess.call(["/usr/bin/time", "-f", "%e %U %S %M", "-o", tfile] + cmd,
                             stdout=subprocess.DEVNULL, stderr=err)
    wall, user, sys_, rss = (float(x) for x in open(tfile).read().split()[-4:])
    return wall, user, sys_, rss / 1024.0, rc

def load():
    return "load %s" % " ".join(open("/proc/loadavg").read().split()[:3])

def differing_bytes(a, b):
    """How many bytes differ (cmp -l), for the report of a mismatch."""
    out = subprocess.run(["cmp", "-l", a, b], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return len(out.stdout.splitlines())

def calib_seconds(err_path):
    for line in open(err_path):
        if '"calibration: ' in line:
            msg = json.loads(line)["message"]
            return float(msg.split(" in ")[1].split(" s")[0])
    return float("nan")

ref_out = os.path.join(work, "ref", "q.mxq")
ref_err = os.path.join(work, "ref", "err.jsonl")
print("qbc %s, %s" % (subprocess.run([qbc, "--version"], stdout=subprocess.PIPE, text=True).stdout.splitlines()[0], load()))
ref_wall, ref_user, ref_sys, ref_rss, rc = timed([qbc, "--log-format", "json", "-v"] + args + ["--no-resume", "-o", ref_out], ref_err)
if rc != 0:
    sys.exit("reference compile failed (%d): see %s" % (rc, ref_err))
print("reference: wall %.1f s, user %.1f s, sys %.1f s, peak RSS %.0f MiB (calibration %.1f s); %s" %
      (ref_wall, ref_user, ref_sys, ref_rss, calib_seconds(ref_err), load()))

ok = True
for p in points:
    out = os.path.join(work, "run", "q.mxq")
    for f in os.listdir(os.path.join(work, "run")):
        path = os.path.join(work, "run", f)
        if not f.endswith((".jsonl", ".time")):  # each point's logs are kept
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    err_path = os.path.join(work, "run", "killed-%d.jsonl" % p)
    with open(err_path, "w") as err:
        t0 = time.monotonic()
        proc = subprocess.Popen([qbc, "--log-format", "json", "--progress-interval", "0.2"] + args + ["-o", out],
                                stdout=subprocess.DEVNULL, stderr=err)
    killed_at, fraction = None, 0.0
    with open(err_path) as events:
        while proc.poll() is None:
            line = events.readline()
            if not line:
                time.sleep(0.02)
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("event") == "progress" and e.get("pass") == "calibrate" and e.get("total"):
                fraction = e["done"] / e["total"]
                if fraction >= p / 100.0:
                    proc.send_signal(signal.SIGKILL)
                    killed_at = time.monotonic() - t0
                    break
    proc.wait()
    if killed_at is None:
        print("%3d %%: the compile ended (%d) before that point of its calibration" % (p, proc.returncode))
        ok = False
        continue
    res_err = os.path.join(work, "run", "resumed-%d.jsonl" % p)
    wall, user, sys_, rss, rc = timed([qbc, "--log-format", "json", "-v"] + args + ["-o", out], res_err)
    resumed = [json.loads(l)["message"] for l in open(res_err) if "resuming:" in l]
    if rc != 0:
        print("%3d %%: the resumed compile failed (%d): %s" % (p, rc, res_err))
    same = rc == 0 and filecmp.cmp(out, ref_out, shallow=False)
    left = os.path.exists(out + ".qbc-resume")
    remainder = ref_wall - killed_at
    ok = ok and same and not left and wall <= 1.10 * remainder
    print("%3d %%: killed at %.1f s (calibrate %.0f %% done); resumed: wall %.1f s, user %.1f s, "
          "sys %.1f s, peak RSS %.0f MiB; remainder %.1f s: %.2fx (target <= 1.10); MXQ %s; "
          "checkpoints %s; %s; %s" %
          (p, killed_at, 100 * fraction, wall, user, sys_, rss, remainder, wall / remainder,
           "identical" if same else "DIFFERENT (rc %d, %d bytes)" % (rc, differing_bytes(out, ref_out)),
           "LEFT BEHIND" if left else "removed", resumed[0] if resumed else "no resume line", load()))
sys.exit(0 if ok else 1)
PY
