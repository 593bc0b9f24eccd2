#!/usr/bin/env python3
"""Compiles at real sizes: wall time and peak RSS of `qbc compile` on random-weight models
of real shapes (issue 29, "Compile at real sizes"), each against its target.

Runs (choose with --runs, default all):
  8b-w8       Llama-3.1-8B-shaped BF16 (16 GB), W8, --preset llm_fast --use-random-calib, 4K
              context: peak RSS <= 10 GiB (block by block: never the whole float model, never
              the image and the sidecar resident together).
  1b-llm      Llama-3.2-1B-shaped BF16, --preset llm (W8), 16 random samples of 256 tokens:
              wall <= 5 min.
  1b-w4-gptq  the same with the W4V8 bits (--preset llm's 4-bit rule: groups of 32, zero
              points, GPTQ with floatTarget): wall <= 10 min and peak RSS <= 3 GiB.

The random models are written once into --work (the 8B one takes about 3 minutes and 16 GB of
disk). Peak RSS is the compile process's own (wait4's ru_maxrss: resident pages, the mapped
model's and sidecar's included); the stage times come from the JSON log's summary. Prints one
line per run and exits non-zero only when a run cannot be made (a missed target is a figure,
not a failure).
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
GIB = 1 << 30

# The 1B runs calibrate as bench/quantize.sh does (where the "today" figures come
# from): 16 random samples of 256 tokens.
CALIB_16x256 = ["--use-random-calib", "--set", "calibration.numSamples=16",
                "--set", "calibration.seqLength=256",
                "--set", "llm.attributes.calibration.useFullSeqLength=false"]

RUNS = {
    "8b-w8": {
        "config": "Llama-3.1-8B-Instruct",
        "args": ["--preset", "llm_fast", "--use-random-calib",
                 "--set", "llm.attributes.maxCacheLength=4096",
                 "--set", "llm.attributes.maxSequenceLength=4096"],
        "rss_gib": 10.0,
        "wall_s": None,
    },
    "1b-llm": {
        "config": "Llama-3.2-1B-Instruct",
        "args": ["--preset", "llm"] + CALIB_16x256,
        "rss_gib": None,
        "wall_s": 300.0,
    },
    "1b-w4-gptq": {
        "config": "Llama-3.2-1B-Instruct",
        "args": ["--preset", "llm"] + CALIB_16x256 + [
            x for k in ("query", "key", "output", "ffn")  # W4V8: value and head at 8
            for x in ("--set", f"bit.transformer.weight.{k}=4")],
        "rss_gib": 3.0,
        "wall_s": 600.0,
    },
}


def run_measured(cmd, log):
    """Runs `cmd` with stdout to `log`: (exit code, wall seconds, peak RSS bytes)."""
    start = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    code = os.waitstatus_to_exitcode(status)
    return code, wall, usage.ru_maxrss * 1024


def summary_of(log):
    """The JSON log's summary event, or None."""
    found = None
    with open(log, errors="replace") as f:
        for line in f:
            if '"event":"summary"' not in line:
                continue
            try:
                found = json.loads(line)
            except ValueError:
                pass
    return found


def stage_text(summary):
    if summary is None:
        return "no summary"
    result = summary.get("result", {})
    parts = [f"{s['name']} {s['seconds']:.1f} s" for s in result.get("stages", [])]
    passes = sorted(result.get("passes", []), key=lambda p: -p.get("seconds", 0))[:3]
    if passes:
        parts.append("slowest passes: " + ", ".join(
            f"{p['name']} {p['seconds']:.1f} s" for p in passes))
    return "; ".join(parts)


def verdict(value, limit, unit):
    if limit is None:
        return "reported"
    ratio = value / limit
    return f"{ratio:.2f} of the {limit:g} {unit} target: {'met' if ratio <= 1 else 'NOT met'}"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/qbc-compile-size",
                    help="folder for the random models, logs and MXQ files (default %(default)s)")
    ap.add_argument("--runs", default=",".join(RUNS),
                    help="comma-separated runs among " + ", ".join(RUNS) + " (default: all)")
    ap.add_argument("--qbc", default=str(ROOT / "build" / "tools" / "qbc"),
                    help="the qbc binary (default: this tree's build)")
    ap.add_argument("--no-build", action="store_true", help="do not run tools/setup.sh first")
    ap.add_argument("--keep", action="store_true", help="keep the MXQ files")
    args = ap.parse_args()
    shared = pathlib.Path(os.environ.get("QBC_SHARED", ROOT.parent / "shared"))
    names = [r for r in args.runs.split(",") if r]
    unknown = [r for r in names if r not in RUNS]
    if unknown:
        ap.error(f"unknown run(s) {', '.join(unknown)}; choose among {', '.join(RUNS)}")
    if not args.no_build:
        subprocess.run([str(ROOT / "tools" / "setup.sh")], check=True, stdout=subprocess.DEVNULL)
    work = pathlib.Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"host: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; qbc {args.qbc}")
    failed = False
    for name in names:
        run = RUNS[name]
        config = shared / "model-configs" / run["config"] / "config.json"
        if not config.is_file():
            print(f"{name}: missing {config}", file=sys.stderr)
            return 2
        model = work / (run["config"] + "-bf16")
        if not (model / "model.safetensors").is_file():
            print(f"{name}: writing the random model {model} (once)...", flush=True)
            subprocess.run([args.qbc, "random-model", str(config), "--dtype", "bf16", "-o",
                            str(model), "--force"], check=True, stdout=subprocess.DEVNULL)
        out = work / f"{name}.mxq"
        log = work / f"{name}.log"
        cmd = [args.qbc, "--log-format", "json", "-v", "compile", str(model), *run["args"],
               "-o", str(out)]
        load = os.getloadavg()[0]
        code, wall, rss = run_measured(cmd, log)
        if code != 0:
            print(f"{name}: qbc compile exited {code} after {wall:.1f} s (log: {log})")
            failed = True
            continue
        size = out.stat().st_size
        print(f"{name}: wall {wall:.1f} s ({verdict(wall, run['wall_s'], 's')}); peak RSS "
              f"{rss / GIB:.2f} GiB ({verdict(rss / GIB, run['rss_gib'], 'GiB')}); MXQ "
              f"{size / GIB:.2f} GiB; load at start {load:.2f}")
        print(f"  {stage_text(summary_of(log))}")
        if not args.keep:
            out.unlink()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
