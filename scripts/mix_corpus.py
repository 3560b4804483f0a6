#!/usr/bin/env python3
"""Writes a training text mixed from several genre files at chosen weights (docs/data.md, "The
training mix").

    scripts/mix_corpus.py --out data/zh/mix-train.txt data/zh/train-raw.txt:0.5 data/zh/genre/tech/train.txt:1 ...

Each SOURCE:WEIGHT takes an even stride of WEIGHT times the file's lines (0.5: every other line;
2: every line twice, the copies placed in the second pass), so every part of a file is
represented and the result is the same on every run. The sources are interleaved line by line in
proportion to their sizes, so a prefix of the output (what `laya train --max-events` strides
through) has the same mix as the whole. Prints what each source contributed.
"""
import argparse
import sys


def take(lines, weight):
    """An even stride of round(weight * len(lines)) lines, in order, whole passes first."""
    n = len(lines)
    want = round(weight * n)
    out = []
    while want >= n and n > 0:
        out.extend(lines)
        want -= n
    # The same even stride as `laya train --max-events`: line i is kept when floor(i*want/n) steps.
    out.extend(line for i, line in enumerate(lines) if (i * want) // n != ((i + 1) * want) // n)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("sources", nargs="+", metavar="FILE:WEIGHT")
    args = ap.parse_args()
    parts = []
    for spec in args.sources:
        path, sep, w = spec.rpartition(":")
        if not sep:
            sys.exit(f"mix_corpus: {spec}: expected FILE:WEIGHT")
        try:
            weight = float(w)
        except ValueError:
            sys.exit(f"mix_corpus: {spec}: the weight {w!r} is not a number")
        if weight < 0:
            sys.exit(f"mix_corpus: {spec}: the weight must be 0 or more")
        try:
            with open(path, encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f if line.strip()]
        except OSError as e:
            sys.exit(f"mix_corpus: cannot read {path}: {e}")
        parts.append((path, weight, take(lines, weight)))
    total = sum(len(p[2]) for p in parts)
    if total == 0:
        sys.exit("mix_corpus: the mix is empty")
    # Interleave: each source's next line goes where its running share falls behind its share.
    cursors = [0] * len(parts)
    out = []
    for step in range(total):
        best, lag = None, None
        for j, (_, _, lines) in enumerate(parts):
            if cursors[j] < len(lines):
                behind = (step + 1) * len(lines) / total - cursors[j]
                if lag is None or behind > lag:
                    best, lag = j, behind
        out.append(parts[best][2][cursors[best]])
        cursors[best] += 1
    with open(args.out, "w", encoding="utf-8") as f:
        for line in out:
            f.write(line + "\n")
    chars = sum(len(line) for line in out)
    print(f"| source | weight | lines | chars | share of chars |")
    print(f"|--------|-------:|------:|------:|------:|")
    for path, weight, lines in parts:
        c = sum(len(line) for line in lines)
        print(f"| {path} | {weight:g} | {len(lines):,} | {c:,} | {100 * c / chars:.1f}% |")
    print(f"| **{args.out}** | | {len(out):,} | {chars:,} | 100% |")


if __name__ == "__main__":
    main()
