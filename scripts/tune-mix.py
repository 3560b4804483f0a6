#!/usr/bin/env python3
"""Chooses the learned-history mix (docs/personalisation.md, "Choosing the mix").

Types every dev genre in order with learning on (`laya eval --learn --limit 1000`) and walks the
five `--mix-*` settings one at a time over a grid, twice round, keeping the best of
mean(ksr) + mean(top5_k0) + mean(top5_k1) over the genres. Prints every point tried and the
choice. Needs the files of scripts/fetch-data.sh and a release build; about 25 minutes on two
cores (two evaluations at a time).

    scripts/tune-mix.py [--model FILE] [--laya PATH]
"""
import argparse
import itertools
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

D = "data/zh"
GENRES = {
    "reviews": f"{D}/valid.txt",
    "news98": f"{D}/heldout-raw.txt",
    "news13": f"{D}/genre/news2013/dev.txt",
    "subtitles": f"{D}/genre/subtitles/dev.txt",
    "formal": f"{D}/genre/formal/dev.txt",
    "dialogue": f"{D}/genre/dialogue/dev.txt",
    "tech": f"{D}/genre/tech/dev.txt",
    "ui": f"{D}/genre/ui/dev.txt",
}
NAMES = ["pair-evidence", "pair-share", "word-share", "completion-share", "word-evidence"]
GRID = {
    "pair-evidence": [1, 2, 4, 8],
    "pair-share": [0.2, 0.3, 0.45, 0.6],
    "word-share": [0, 0.02, 0.05],
    "completion-share": [0.3, 0.45, 0.6, 0.75],
    "word-evidence": [0.5, 1, 2, 4],
}
START = [4, 0.3, 0.0, 0.6, 1]
KEYS = ["ksr", "top5_k0", "top5_k1"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model")
    ap.add_argument("--laya", default="target/release/laya")
    a = ap.parse_args()
    seen = {}

    def score(vals):
        key = tuple(vals)
        if key not in seen:
            flags = list(itertools.chain.from_iterable([f"--mix-{n}", str(v)] for n, v in zip(NAMES, vals)))
            means = dict.fromkeys(KEYS, 0.0)
            for text in GENRES.values():
                cmd = [a.laya, "eval", "--learn", "--json", "--limit", "1000", "--text", text] + flags
                cmd += ["--model", a.model] if a.model else []
                r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                for k in KEYS:
                    means[k] += r[k] / len(GENRES)
            seen[key] = (sum(means.values()), means)
            print(key, "objective %.4f" % seen[key][0], " ".join("%s=%.4f" % (k, means[k]) for k in KEYS), flush=True)
        return seen[key][0]

    cur = START
    for rnd in range(2):
        for j, n in enumerate(NAMES):
            cands = [cur[:j] + [v] + cur[j + 1:] for v in GRID[n]]
            with ThreadPoolExecutor(2) as ex:
                res = list(ex.map(score, cands))
            cur = cands[max(range(len(cands)), key=res.__getitem__)]
            print(f"round {rnd + 1}, {n}: {cur}", flush=True)
    print("chosen:", " ".join(f"--mix-{n} {v}" for n, v in zip(NAMES, cur)))


if __name__ == "__main__":
    main()
