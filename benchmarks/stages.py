#!/usr/bin/env python3
"""Where a keystroke goes, model beside model: `laya bench --json` of each MODEL in turn,
ROUNDS rounds alternating (so a noisy machine slows every model alike), printed as one markdown
table of the median per-stage mean µs, then the fastest round's mean and p50 with every round's.

    benchmarks/stages.py [--laya BIN] [--rounds N] [--iterations N] MODEL...

MODEL is a model file, or `default` (the embedded Chinese default). BIN defaults to
target/release/laya. docs/training.md ("A smaller network beside the n-gram") was made with it.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(laya, model, iterations, extra=()):
    """`laya bench --json` of MODEL (`default`: the embedded one), with EXTRA flags, parsed."""
    args = [laya, "bench", "--iterations", str(iterations), "--json", *extra]
    if model != "default":
        args += ["--model", model]
    run = subprocess.run(args, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {' '.join(args)} failed:\n{run.stderr.strip()}")
    return json.loads(run.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--laya", default="target/release/laya")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    runs = {m: [] for m in a.models}
    for r in range(a.rounds):
        for m in a.models:
            runs[m].append(bench(a.laya, m, a.iterations))
            print(f"round {r + 1}/{a.rounds}: {m} p50 {runs[m][-1]['p50_us']:.1f} µs", file=sys.stderr)
    first = runs[a.models[0]][0]
    print("| stage (mean µs) | " + " | ".join(a.models) + " |")
    print("|---|" + "--:|" * len(a.models))
    for j, stage in enumerate(s["stage"] for s in first["stages"]):
        cells = (statistics.median(d["stages"][j]["mean_us"] for d in runs[m]) for m in a.models)
        print(f"| {stage} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
    for key in ("mean_us", "p50_us"):
        cells = []
        for m in a.models:
            values = [d[key] for d in runs[m]]
            cells.append(f"**{min(values):.1f}** ({', '.join(f'{v:.1f}' for v in values)})")
        print(f"| {key} | " + " | ".join(cells) + " |")
    allocations = {m: max(d["allocations_per_prediction"] for d in runs[m]) for m in a.models}
    print("| allocations per prediction | " + " | ".join(f"{allocations[m]:g}" for m in a.models) + " |")


if __name__ == "__main__":
    main()
