#!/usr/bin/env python3
"""Types a text with Laya the way Debian's `presage_simulator` types it with presage, so the two
keystroke savings rates can be compared (docs/training.md, "The English model").

presage_simulator's protocol, as its source and its printed counts show: the text is cut at
whitespace into tokens, typed in order as one stream. Before each token's first character the
predictor is asked once; a hit there costs one selection (`ks`). Otherwise characters are typed
one by one (`ki` each), the predictor asked after each; a hit costs one more keystroke. A
selected word brings its trailing space with it (presage's auto-space); a token typed to the end
without a hit costs one keystroke for the space. `kn` counts every token's characters plus one,
`ks` starts at 1, and KSR = 1 - (ki + ks) / kn. A hit is a candidate equal to the whole token.
Laya's own `laya eval` protocol differs: it counts a whitespace keystroke after every word,
selected or not, and segments punctuation apart (docs/evaluation.md section 2).

    scripts/presage-protocol.py TEXT [--limit N] [-- LAYA PREDICT FLAGS]
      (LAYA=path/to/laya, default target/release/laya; e.g. -- --lang en)
prints one JSON object: ki, ks, kn, ksr, tokens, hits.
"""
import json
import os
import subprocess
import sys

# Characters of the stream sent as each query's context.
CONTEXT = 200


def main():
    args = sys.argv[1:]
    extra = []
    if "--" in args:
        at = args.index("--")
        args, extra = args[:at], args[at + 1:]
    limit = None
    if "--limit" in args:
        at = args.index("--limit")
        limit = int(args[at + 1])
        del args[at:at + 2]
    if len(args) != 1:
        sys.exit(__doc__)
    with open(args[0], encoding="utf-8") as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    tokens = [t for line in lines[:limit] for t in line.split()]

    # Every context the protocol may ask about: before each token, and after each of its
    # characters. The stream is the tokens so far, each followed by its space; a query sends
    # its last CONTEXT characters, so only that tail of the stream is kept.
    queries = []
    stream = ""
    for t in tokens:
        queries.append(stream[-CONTEXT:])
        for j in range(1, len(t) + 1):
            queries.append((stream + t[:j])[-CONTEXT:])
        stream = (stream + t + " ")[-CONTEXT:]
    laya = os.environ.get("LAYA", "target/release/laya")
    stdin = "".join(json.dumps({"context": q}, ensure_ascii=False) + "\n" for q in queries)
    out = subprocess.run([laya, "predict", "--jsonl", "--top", "5", *extra], input=stdin, capture_output=True, text=True, check=True)
    answers = [json.loads(line)["candidates"] for line in out.stdout.splitlines()]
    if len(answers) != len(queries):
        sys.exit(f"laya answered {len(answers)} of {len(queries)} queries")

    ki, ks, kn, hits, at = 0, 1, 0, 0, 0
    for t in tokens:
        kn += len(t) + 1
        asked = answers[at:at + len(t) + 1]
        at += len(t) + 1
        # Before the first character a next word (replace 0), after j characters a candidate
        # that completes those j.
        hit_after = next((j for j, cands in enumerate(asked) if any(c["word"] == t and c["replace"] == j for c in cands)), None)
        if hit_after == 0:
            ks += 1
        elif hit_after is not None:
            ki += hit_after + 1
        else:
            ki += len(t) + 1
        hits += hit_after is not None
    print(json.dumps({"ki": ki, "ks": ks, "kn": kn, "ksr": 1 - (ki + ks) / kn, "tokens": len(tokens), "hits": hits}))


if __name__ == "__main__":
    main()
