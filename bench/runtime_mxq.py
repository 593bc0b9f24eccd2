#!/usr/bin/env python3
"""The runtime on a compiled MXQ: load time, peak RSS and decode tokens/s (issue 14).

A random-weight model of a shared config (default Llama-3.2-1B-Instruct; `qbc random-model`
writes a byte-level tokenizer beside it) is compiled once W8 (`qbc compile --preset
llm_fast --use-random-calib`, 16 calibration samples of 128 tokens, maxCacheLength =
maxSequenceLength = 2048) into WORKDIR/<name>.mxq. Then:

  read     wall time of reading the file once (`cat FILE > /dev/null`, warm page cache;
           median of 5)
  load     wall time of `qbc verify FILE` (median of 5, alternating with the reads): what
           loading does, every format rule, every section digest, the decode of the
           programs, the program verifier and the device of every mode; as a ratio to
           `read` (target <= 2x)
  rss      peak RSS of `qbc run FILE -p ... -n N` against file + KV + 256 MB (target <= 1)
  decode   decode tokens/s of that run (the `result` event of --log-format json)

Usage: bench/runtime_mxq.py [--work DIR] [--config NAME] [--tokens N] [--no-build]
Python standard library only.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("QBC_SHARED", os.path.join(ROOT, "..", "shared"))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def timed(cmd, **kw):
    t0 = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)
    return r, time.monotonic() - t0


def child_rss_mb(cmd):
    """Peak RSS (MB) of one child run: measured in a fresh Python child so earlier runs do
    not count."""
    probe = ("import resource,subprocess,sys;"
             "r=subprocess.run(sys.argv[1:],capture_output=True,text=True);"
             "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024.0);"
             "print(r.returncode);sys.stdout.write(r.stdout);sys.stderr.write(r.stderr)")
    r = subprocess.run([sys.executable, "-c", probe] + cmd, capture_output=True, text=True)
    lines = r.stdout.split("\n", 2)
    return float(lines[0]), int(lines[1]), (lines[2] if len(lines) > 2 else ""), r.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/qbc-bench-runtime")
    ap.add_argument("--config", default="Llama-3.2-1B-Instruct")
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run([os.path.join(ROOT, "tools", "setup.sh")], check=True,
                       stdout=subprocess.DEVNULL)
    qbc = os.path.join(ROOT, "build", "tools", "qbc")
    os.makedirs(a.work, exist_ok=True)
    name = a.config.lower()
    hf = os.path.join(a.work, name)
    mxq = os.path.join(a.work, name + ".mxq")
    if not os.path.exists(os.path.join(hf, "config.json")):
        log(f"random-model {a.config} -> {hf}")
        subprocess.run([qbc, "random-model", os.path.join(SHARED, "model-configs", a.config, "config.json"),
                        "--dtype", "bf16", "-o", hf, "--force"], check=True, stdout=subprocess.DEVNULL)
    if not os.path.exists(mxq):
        log(f"compile -> {mxq}")
        r, secs = timed([qbc, "compile", hf, "--preset", "llm_fast", "--use-random-calib",
                         "--set", "calibration.numSamples=16", "--set", "calibration.seqLength=128",
                         "--set", "llm.attributes.maxCacheLength=2048",
                         "--set", "llm.attributes.maxSequenceLength=2048", "-o", mxq])
        if r.returncode != 0:
            sys.exit(f"compile failed:\n{r.stderr}")
        log(f"compiled in {secs:.1f} s")
    size = os.path.getsize(mxq)
    timed(["sh", "-c", f"cat '{mxq}' > /dev/null"])  # warm the page cache
    # Both the median of 5 runs, alternating: one run of either varies by 20-30 % here.
    reads, loads = [], []
    for _ in range(5):
        reads.append(timed(["sh", "-c", f"cat '{mxq}' > /dev/null"])[1])
        r, secs = timed([qbc, "verify", mxq])
        if r.returncode != 0:
            sys.exit(f"verify failed:\n{r.stderr}")
        loads.append(secs)
    read, load = sorted(reads)[2], sorted(loads)[2]
    inspect = json.loads(subprocess.run([qbc, "inspect", mxq, "--memory", "--json"],
                                        capture_output=True, text=True, check=True).stdout)
    kv = inspect["dram"]["kv_bytes"]
    rss, rc, out, err = child_rss_mb([qbc, "--log-format", "json", "run", mxq, "-p", "Once upon a time",
                                      "-n", str(a.tokens), "--ignore-eos"])
    if rc != 0:
        sys.exit(f"run failed:\n{err}")
    decode = None
    for line in err.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if ev.get("event") == "result" and ev.get("command") == "run":
            decode = ev["result"]
    tok_s = decode.get("decode_tokens_per_second") if decode else None
    bound = (size + kv) / 2**20 + 256
    print(f"model     {a.config}-shaped W8, {size / 2**20:.1f} MiB MXQ, KV {kv / 2**20:.1f} MiB")
    print(f"read      {read:.2f} s")
    print(f"load      {load:.2f} s = {load / max(read, 1e-9):.1f}x read (target <= 2x)")
    print(f"rss       {rss:.0f} MiB vs file + KV + 256 MiB = {bound:.0f} MiB: {rss / bound:.2f} (target <= 1)")
    print(f"decode    {tok_s:.2f} tok/s ({a.tokens} tokens)" if tok_s else "decode    (no result event)")


if __name__ == "__main__":
    main()
