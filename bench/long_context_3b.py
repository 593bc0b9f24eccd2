#!/usr/bin/env python3
"""A full-size Qwen2.5-3B at 32K context: plan, compile, run (issue 15).

The case the vendor's 1.2/1.3 backend fails (seed 001: attention buffers that grow with the
cache). A random-weight Qwen2.5-3B-Instruct (BF16, `qbc random-model`, ~6 GB) is planned
with `qbc plan` and compiled W8, KV8, batch 1, with maxSequenceLength = maxCacheLength =
32768 on aries-rb (`--preset llm_fast --use-random-calib`, 4 calibration rows of 128
tokens: the calibration is not what is measured). Then:

  plan     `qbc plan` wall time and its memory plan (shapes only)
  compile  wall time and peak RSS of `qbc compile`
  match    the memory plan inside the MXQ (`qbc inspect --memory --json`) against the plan:
           every DRAM term, the SRAM peak per core and the program size must be equal
  run      wall time and peak RSS of `qbc run MXQ -p ... -n N` (a few decode steps on the
           runtime), and its decode tokens/s

Usage: bench/long_context_3b.py [--work DIR] [--tokens N] [--context N] [--no-build]
Needs about 12 GB of disk in WORKDIR. Python standard library only.
"""
import argparse
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("QBC_SHARED", os.path.join(ROOT, "..", "shared"))
QBC = os.path.join(ROOT, "build", "tools", "qbc")
CONFIG = "Qwen2.5-3B-Instruct"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def measured(cmd):
    """Runs cmd in a fresh Python child: (returncode, stdout, stderr, wall s, peak RSS MiB)."""
    probe = ("import resource,subprocess,sys,time;t=time.monotonic();"
             "r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
             "print(time.monotonic()-t);"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024.0);"
             "print(r.returncode);sys.stdout.write(r.stdout);sys.stderr.write(r.stderr)")
    r = subprocess.run([sys.executable, "-c", probe] + cmd, capture_output=True, text=True)
    lines = r.stdout.split("\n", 3)
    return int(lines[2]), (lines[3] if len(lines) > 3 else ""), r.stderr, float(lines[0]), float(lines[1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/qbc-bench-3b")
    ap.add_argument("--tokens", type=int, default=4)
    ap.add_argument("--context", type=int, default=32768)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run([os.path.join(ROOT, "tools", "setup.sh"), "--target", "qbc"], check=True,
                       stdout=subprocess.DEVNULL)
    os.makedirs(a.work, exist_ok=True)
    hf = os.path.join(a.work, "qwen2.5-3b")
    mxq = os.path.join(a.work, f"qwen2.5-3b-{a.context}.mxq")
    cfg = ["--preset", "llm_fast", "--inference-scheme", "single",
           "--set", f"llm.attributes.maxSequenceLength={a.context}",
           "--set", f"llm.attributes.maxCacheLength={a.context}",
           "--set", "bit.kvCache.key=8", "--set", "bit.kvCache.value=8"]
    if not os.path.exists(os.path.join(hf, "model.safetensors")):
        log(f"random-model {CONFIG} -> {hf}")
        subprocess.run([QBC, "random-model", os.path.join(SHARED, "model-configs", CONFIG, "config.json"),
                        "--dtype", "bf16", "-o", hf, "--force"], check=True, stdout=subprocess.DEVNULL)
    rc, out, err, plan_s, _ = measured([QBC, "plan", hf, "--json"] + cfg)
    if rc != 0:
        sys.exit(f"plan failed ({rc}):\n{err}")
    plan = json.loads(out)
    log(f"plan: fits={plan['fits']} in {plan_s:.1f} s")
    compile_s = compile_rss = None
    if not os.path.exists(mxq):
        log(f"compile -> {mxq}")
        rc, out, err, compile_s, compile_rss = measured(
            [QBC, "compile", hf, "--use-random-calib", "--set", "calibration.numSamples=4",
             "--set", "calibration.seqLength=128",
             "--set", "llm.attributes.calibration.useFullSeqLength=false", "-o", mxq] + cfg)
        if rc != 0:
            sys.exit(f"compile failed ({rc}):\n{err}")
    rc, out, err, _, _ = measured([QBC, "inspect", mxq, "--memory", "--json"])
    if rc != 0:
        sys.exit(f"inspect failed ({rc}):\n{err}")
    mem = json.loads(out)
    mismatch = [k for k in mem if k in plan["memory"] and mem[k] != plan["memory"][k]]
    rc, out, err, run_s, run_rss = measured(
        [QBC, "--log-format", "json", "run", mxq, "-p", "Once upon a time", "-n", str(a.tokens),
         "--ignore-eos"])
    if rc != 0:
        sys.exit(f"run failed ({rc}):\n{err}")
    tok_s = None
    for line in err.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "result" and ev.get("command") == "run":
            tok_s = ev["result"].get("decode_tokens_per_second")
    d = plan["memory"]["dram"]
    print(f"model     {CONFIG} (random weights), W8 KV8, batch 1, context {a.context}, aries-rb single")
    print(f"plan      {plan_s:.1f} s: fits={plan['fits']}, DRAM {d['total_bytes'] / 2**30:.2f} GiB "
          f"(weights {d['weights_bytes'] / 2**30:.2f}, KV {d['kv_bytes'] / 2**30:.2f}) of "
          f"{d['device_bytes'] / 2**30:.0f} GiB; largest context {plan['max_context']}")
    for s in plan["schemes"]:
        print(f"          {s['scheme']}: TTFT {s['ttft_ms']:.0f} ms, decode {s['decode_tok_s']:.2f} tok/s, "
              f"{s['decode_tok_s_at_end']:.2f} at {a.context}")
    if compile_s is not None:
        print(f"compile   {compile_s:.1f} s, peak RSS {compile_rss:.0f} MiB, MXQ {os.path.getsize(mxq) / 2**30:.2f} GiB")
    else:
        print(f"compile   (reused {mxq}; delete it to measure)")
    print("match     " + ("memory plan of the MXQ == plan (every DRAM term, SRAM peaks, program size)"
                          if not mismatch else f"MISMATCH in {mismatch}: mxq {[mem[k] for k in mismatch]} "
                          f"plan {[plan['memory'][k] for k in mismatch]}"))
    print(f"run       {run_s:.1f} s wall, peak RSS {run_rss:.0f} MiB, decode "
          f"{tok_s:.3f} tok/s ({a.tokens} tokens)" if tok_s else f"run       {run_s:.1f} s, RSS {run_rss:.0f} MiB")
    return 1 if mismatch else 0


if __name__ == "__main__":
    sys.exit(main())
