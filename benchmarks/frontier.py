#!/usr/bin/env python3
"""Speed against quality, model beside model: each MODEL types every dev genre
(scripts/eval-genres.sh) and is timed with `laya bench` (ROUNDS rounds alternating, fastest
round's p50), beside the word trigram; prints one markdown table and writes an SVG of mean
top5_k0 against p50 where a filled point is a model above the trigram on both top-5 figures of
every genre.

    benchmarks/frontier.py [--laya BIN] [--rounds N] [--iterations N] [--svg FILE]
                           [--reference NAME] NAME=MODEL[@WEIGHT]...

MODEL is a model file or `default` (the embedded Chinese default); WEIGHT the n-gram weight of
its evaluation and timing (default: the session's). --reference draws a line at that model's
p50 (the speed goal). docs/training.md ("Speed against quality") was made with it.
"""
import argparse
import math
import os
import statistics
import subprocess
import sys

import stages

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def parse_model(spec):
    name, _, rest = spec.partition("=")
    if not rest:
        sys.exit(f"frontier.py: {spec!r} is not NAME=MODEL[@WEIGHT]")
    path, _, weight = rest.partition("@")
    return name, path, weight or None


def genres(laya, path, weight, with_trigram):
    """{genre: (top5_k0, top5_k1)} of the model, and of the trigram when asked."""
    model = os.path.join(ROOT, "models/default.laya") if path == "default" else path
    # An empty NGRAM is eval-genres.sh's own default trigram; "-" types the model alone.
    args = [os.path.join(ROOT, "scripts/eval-genres.sh"), model, "" if with_trigram else "-"]
    if weight is not None:
        args += ["--", "--ngram-weight", weight]
    run = subprocess.run(args, capture_output=True, text=True, env={**os.environ, "LAYA": laya})
    if run.returncode != 0:
        sys.exit(f"frontier.py: {' '.join(args)} failed:\n{run.stderr.strip()}")
    out = {"model": {}, "ngram": {}}
    for line in run.stdout.splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        out[cells[1]][cells[0]] = (float(cells[4]), float(cells[6]))
    return out


def p50_of(laya, path, weight, iterations):
    extra = ["--cold-runs", "1"] + (["--ngram-weight", weight] if weight is not None else [])
    return stages.bench(laya, path, iterations, extra)["p50_us"]


def svg(rows, trigram_k0, reference_name, reference_p50):
    """Mean top5_k0 (y) against p50 µs (x): filled where the model is above the trigram
    everywhere, hollow where not; dashed lines at the trigram's mean and at the reference's p50
    (the reference itself is only that line: it is the speed goal)."""
    w, h, left, bottom, top, right = 720, 440, 70, 50, 20, 20
    rows = [r for r in rows if not r["reference"]]
    xs = [r["p50"] for r in rows] + ([reference_p50] if reference_p50 else [])
    ys = [r["k0"] for r in rows] + [trigram_k0]
    x0, x1 = 0.0, max(xs) * 1.1
    y0, y1 = min(ys) - 0.004, max(ys) + 0.004
    px = lambda x: left + (x - x0) / (x1 - x0) * (w - left - right)
    py = lambda y: h - bottom - (y - y0) / (y1 - y0) * (h - bottom - top)
    s = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>',
         f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
         f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
         f'<text x="{(w + left) / 2}" y="{h - 12}" text-anchor="middle">p50 µs per keystroke (laya bench)</text>',
         f'<text x="16" y="{(h - bottom + top) / 2}" text-anchor="middle" transform="rotate(-90 16 {(h - bottom + top) / 2})">mean top5_k0 of the dev genres</text>']
    step = 5 if x1 <= 60 else 10
    for t in range(0, int(x1) + 1, step):
        s.append(f'<line x1="{px(t):.1f}" y1="{h - bottom}" x2="{px(t):.1f}" y2="{h - bottom + 5}" stroke="black"/>'
                 f'<text x="{px(t):.1f}" y="{h - bottom + 18}" text-anchor="middle">{t}</text>')
    # About eight ticks at a step of 1, 2 or 5 times a power of ten.
    raw = (y1 - y0) / 8
    mag = 10 ** math.floor(math.log10(raw))
    ystep = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    t = math.ceil(y0 / ystep) * ystep
    while t <= y1:
        s.append(f'<line x1="{left - 5}" y1="{py(t):.1f}" x2="{left}" y2="{py(t):.1f}" stroke="black"/>'
                 f'<text x="{left - 8}" y="{py(t) + 4:.1f}" text-anchor="end">{t:.3f}</text>')
        t += ystep
    s.append(f'<line x1="{left}" y1="{py(trigram_k0):.1f}" x2="{w - right}" y2="{py(trigram_k0):.1f}" stroke="gray" stroke-dasharray="5,4"/>'
             f'<text x="{w - right - 4}" y="{py(trigram_k0) + 16:.1f}" text-anchor="end" fill="gray">word trigram</text>')
    if reference_p50:
        s.append(f'<line x1="{px(reference_p50):.1f}" y1="{top}" x2="{px(reference_p50):.1f}" y2="{h - bottom}" stroke="gray" stroke-dasharray="5,4"/>'
                 f'<text x="{px(reference_p50) + 4:.1f}" y="{top + 12}" fill="gray">speed goal ({reference_name})</text>')
    s.append(f'<text x="{w - right - 4}" y="{h - bottom - 10}" text-anchor="end">filled: above the trigram on top5_k0 and top5_k1 of every genre</text>')
    placed = []
    for r in sorted(rows, key=lambda r: -r["k0"]):
        fill = "#1f77b4" if not r["below"] else "white"
        x, y = px(r["p50"]), py(r["k0"])
        s.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="5" fill="{fill}" stroke="#1f77b4" stroke-width="2"/>')
        # A label goes right of its point, else above, below or left of it, wherever it
        # overlaps no label placed before.
        width = 7 * len(r["name"])
        spots = [(x + 8, y + 4), (x + 8, y - 8), (x + 8, y + 16), (x - 8 - width, y + 4), (x - 8 - width, y - 8)]
        free = lambda lx, ly: not any(abs(ly - qy) < 13 and lx < qx + qw and qx < lx + width for qx, qy, qw in placed)
        lx, ly = next((spot for spot in spots if free(*spot)), spots[0])
        placed.append((lx, ly, width))
        s.append(f'<text x="{lx:.1f}" y="{ly:.1f}">{r["name"]}</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--laya", default=os.path.join(ROOT, "target/release/laya"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--svg")
    ap.add_argument("--reference")
    ap.add_argument("models", nargs="+", type=parse_model)
    a = ap.parse_args()
    names = [m[0] for m in a.models]
    if a.reference and a.reference not in names:
        sys.exit(f"frontier.py: --reference {a.reference} is not one of {names}")
    typed, trigram = {}, None
    for name, path, weight in a.models:
        r = genres(a.laya, path, weight, trigram is None)
        trigram = trigram or r["ngram"]
        typed[name] = r["model"]
        print(f"typed {name}", file=sys.stderr)
    p50 = {n: [] for n in names}
    for r in range(a.rounds):
        for name, path, weight in a.models:
            p50[name].append(p50_of(a.laya, path, weight, a.iterations))
            print(f"round {r + 1}/{a.rounds}: {name} p50 {p50[name][-1]:.1f} µs", file=sys.stderr)
    mean = lambda d, j: statistics.mean(v[j] for v in d.values())
    rows = []
    print("| model | p50 µs (rounds) | mean top5_k0 | mean top5_k1 | below the trigram (top5_k0; top5_k1) |")
    print("|---|--:|--:|--:|---|")
    for name in names:
        g = typed[name]
        below = [[k for k in g if g[k][j] < trigram[k][j]] for j in (0, 1)]
        rows.append({"name": name, "p50": min(p50[name]), "k0": mean(g, 0), "below": below[0] + below[1], "reference": name == a.reference})
        where = "; ".join(", ".join(b) or "none" for b in below)
        rounds = ", ".join(f"{v:.1f}" for v in p50[name])
        print(f"| {name} | **{min(p50[name]):.1f}** ({rounds}) | {mean(g, 0):.4f} | {mean(g, 1):.4f} | {where} |")
    print(f"| word trigram | — | {mean(trigram, 0):.4f} | {mean(trigram, 1):.4f} | — |")
    if a.svg:
        reference = min(p50[a.reference]) if a.reference else None
        with open(a.svg, "w") as f:
            f.write(svg(rows, mean(trigram, 0), a.reference, reference))


if __name__ == "__main__":
    main()
