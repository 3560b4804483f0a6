"""Writes a tiny lexicon and click log for a `laya train --device cuda` smoke run (scripts/gpu-check.sh):
200 words (or WORDS), 4,000 events (or EVENTS) over 60 distinct contexts, each with a clicked word
and two alternatives.

    python3 scripts/gpu-smoke.py DIR [EVENTS [WORDS]]     (writes DIR/lexicon.tsv and DIR/events.jsonl)
"""
import json
import os
import random
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = random.Random(7)
n_words = int(sys.argv[3]) if len(sys.argv) > 3 else 200
# Past 6,000 words a third character keeps them distinct.
words = ["词" + chr(0x4E00 + i % 6000) + chr(0x4E80 + i % 37) + (chr(0x5200 + i // 6000) if i >= 6000 else "") for i in range(n_words)]
with open(os.path.join(out, "lexicon.tsv"), "w", encoding="utf-8") as f:
    for i, w in enumerate(words):
        f.write(f"{w}\t{max(1, 1000 - 4 * i)}\n")
contexts = ["".join(chr(0x4E00 + rng.randrange(300)) for _ in range(rng.randrange(2, 12))) for _ in range(60)]
with open(os.path.join(out, "events.jsonl"), "w", encoding="utf-8") as f:
    for n in range(int(sys.argv[2]) if len(sys.argv) > 2 else 4000):
        c = n % 60
        shown = [{"word": words[(c * 3 + k) % n_words], "replace": 0} for k in range(3)]
        f.write(json.dumps({"context": contexts[c], "shown": shown, "clicked": 1}, ensure_ascii=False) + "\n")
