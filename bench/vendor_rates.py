#!/usr/bin/env python3
"""The cost model against the vendor's published MLA100 rates (issue 15).

For every row of the vendor's LLM table (mobilint.md §3: INT8, 240 input tokens, one user)
whose config.json is in the shared assets, `qbc plan` predicts decode tok/s and TTFT of the
single scheme (the vendor's default core mode; the measurement's mode is not published) on
aries-rb with W8 weights, and this script prints prediction, published figure, ratio and
error, with the decode target (within 15 %) and the TTFT target (within 25 %).

--fit refits the two fitted parameters of configs/targets/aries-rb.yaml on the Llama-3.2-1B
row only: dramEfficiency by bisection on its decode rate, then macEfficiency on its TTFT.
It prints the values to put into the profile (with the note "fitted by ...") and the table
they give. Nothing else is fitted; every other number of the profile is a fact or an
assumption (`qbc targets aries-rb`).

--markdown prints the table as docs/performance.md carries it.

Usage: bench/vendor_rates.py [--fit] [--markdown] [--no-build]
Python standard library only.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("QBC_SHARED", os.path.join(ROOT, "..", "shared"))
QBC = os.path.join(ROOT, "build", "tools", "qbc")

# model, config folder (None: not in the shared assets), TTFT ms, decode tok/s
VENDOR = [
    ("Llama-3.2-1B-Instruct", "Llama-3.2-1B-Instruct", 430.56, 30.73),
    ("Llama-3.2-3B-Instruct", "Llama-3.2-3B-Instruct", 1218.22, 12.16),
    ("Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct", 4430.71, 5.81),
    ("EXAONE-4.0-1.2B", None, 329.37, 31.62),
    ("EXAONE-3.5-2.4B-Instruct", None, 963.86, 14.23),
    ("EXAONE-Deep-2.4B", None, 886.35, 13.03),
    ("HyperCLOVAX-SEED-Text-Instruct-1.5B", None, 435.50, 22.46),
    ("c4ai-command-r7b-12-2024", None, 4667.31, 4.58),
]
PROMPT = 240
SCHEME = "single"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def plan(folder, sets=()):
    cmd = [QBC, "plan", os.path.join(SHARED, "model-configs", folder), "--json",
           "--inference-scheme", SCHEME, "--prompt-tokens", str(PROMPT)]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"qbc plan {folder} failed ({r.returncode}): {r.stderr.strip()}")
    j = json.loads(r.stdout)
    s = j["schemes"][0]
    return s["ttft_ms"], s["decode_tok_s"], s


def bisect(f, lo, hi, target, increasing, steps=40):
    """x in [lo, hi] with f(x) = target for a monotone f."""
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        v = f(mid)
        if (v < target) == increasing:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fit", action="store_true", help="refit dramEfficiency and macEfficiency on the 1B row")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--no-build", action="store_true", help="use build/tools/qbc as it is")
    a = ap.parse_args()
    if not a.no_build:
        subprocess.run([os.path.join(ROOT, "tools", "setup.sh"), "--target", "qbc"], check=True,
                       stdout=subprocess.DEVNULL)
    sets = []
    if a.fit:
        name, folder, ttft, tok = VENDOR[0]
        log(f"fitting dramEfficiency on {name} decode {tok} tok/s")
        eff = bisect(lambda x: plan(folder, [f"target.dramEfficiency={x}"])[1], 0.05, 1.0, tok, True, 24)
        sets.append(f"target.dramEfficiency={eff:.4f}")
        log(f"fitting macEfficiency on {name} TTFT {ttft} ms")
        mac = bisect(lambda x: -plan(folder, sets + [f"target.macEfficiency={x}"])[0], 0.001, 1.0, -ttft,
                     True, 24)
        sets.append(f"target.macEfficiency={mac:.4f}")
        print(f"fitted: dramEfficiency: {eff:.4f}  macEfficiency: {mac:.4f}")
    rows = []
    for name, folder, ttft, tok in VENDOR:
        if folder is None or not os.path.isdir(os.path.join(SHARED, "model-configs", folder)):
            rows.append((name, None, ttft, None, tok))
            continue
        p_ttft, p_tok, _ = plan(folder, sets)
        rows.append((name, p_ttft, ttft, p_tok, tok))
    if a.markdown:
        print("| model | TTFT predicted (ms) | published | ratio | decode predicted (tok/s) | published | ratio |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for name, pt, t, pd, d in rows:
            if pt is None:
                print(f"| {name} | no config in the shared assets | {t:.2f} | | | {d:.2f} | |")
                continue
            print(f"| {name} | {pt:.1f} | {t:.2f} | {pt / t:.3f} | {pd:.2f} | {d:.2f} | {pd / d:.3f} |")
        return 0
    print(f"{'model':38s} {'TTFT pred':>10s} {'published':>10s} {'ratio':>6s} {'err':>7s}   "
          f"{'tok/s pred':>10s} {'published':>10s} {'ratio':>6s} {'err':>7s}")
    for name, pt, t, pd, d in rows:
        if pt is None:
            print(f"{name:38s} {'-':>10s} {t:10.2f} {'':6s} {'':7s}   {'-':>10s} {d:10.2f}   (no config in the shared assets)")
            continue
        et, ed = pt / t - 1, pd / d - 1
        print(f"{name:38s} {pt:10.1f} {t:10.2f} {pt / t:6.3f} {100 * et:+6.1f}%{'' if abs(et) <= 0.25 else '!'}  "
              f"{pd:10.2f} {d:10.2f} {pd / d:6.3f} {100 * ed:+6.1f}%{'' if abs(ed) <= 0.15 else '!'}")
    print("targets: decode within 15 %, TTFT within 25 % ('!' marks a miss); scheme "
          f"{SCHEME}, W8, {PROMPT} prompt tokens, aries-rb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
