#!/usr/bin/env python3
"""Prepares Laya's English chat text and word frequencies; run by fetch-data.sh.

    python3 scripts/prepare_english.py RAW_DIR OUT_DIR

RAW_DIR is the extraction tree fetch-data.sh builds (data/raw), OUT_DIR the data directory.
Writes OUT_DIR/en/chat/{train,dev,test}.txt from chitchat-dataset's messages and
OUT_DIR/en/wordfreq.txt from wordfreq's `large_en` (see docs/data.md). Python 3 stdlib only.

Every line of the chat files is one typed message, whitespace collapsed, as written otherwise
(case, spelling, emoji). The split is by conversation, with the rule of the Chinese genres
(prepare_broad.bucket: sha1(conversation id)[0] % 20 == 0 -> dev, == 1 -> test, else train);
dev.txt keeps at most DEV_CAP lines (deterministic shuffle by line hash). Messages are not
de-duplicated: a typist sends "ok" and "lol" many times, and the counts are what a model learns.
"""

import json
import os
import sys

from prepare_broad import DEV_CAP, MAX_LINE, WS_RE, Fail, bucket, line_key, prepare_wordfreq, write_lines


def chat_conversations(raw):
    """(conversation id, [message text]) in id order, from chitchat-dataset's dataset.json:
    {id: {"messages": [[{"text", "timestamp", "sender"}, ...], ...]}} (runs of one sender)."""
    path = os.path.join(raw, "chitchat/dataset.json")
    if not os.path.isfile(path):
        raise Fail(f"{path} is missing")
    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    if not isinstance(data, dict) or not data:
        raise Fail(f"{path}: expected an object of conversations")
    for conv_id in sorted(data):
        conv = data[conv_id]
        runs = conv.get("messages") if isinstance(conv, dict) else None
        if not isinstance(runs, list):
            raise Fail(f"{path}: conversation {conv_id} has no message list")
        texts = [m.get("text", "") for run in runs if isinstance(run, list) for m in run if isinstance(m, dict)]
        yield conv_id, texts


def prepare_chat(raw, out):
    parts = {"train": [], "dev": [], "test": []}
    convs = {"train": 0, "dev": 0, "test": 0}
    for conv_id, texts in chat_conversations(raw):
        b = bucket(conv_id)
        convs[b] += 1
        for t in texts:
            line = WS_RE.sub(" ", t if isinstance(t, str) else "").strip()
            if line and len(line) <= MAX_LINE:
                parts[b].append(line)
    dev_all = len(parts["dev"])
    parts["dev"] = sorted(parts["dev"], key=line_key)[:DEV_CAP]
    cdir = os.path.join(out, "en", "chat")
    os.makedirs(cdir, exist_ok=True)
    for name, lines in parts.items():
        write_lines(os.path.join(cdir, name + ".txt"), lines)
        words = sum(len(l.split()) for l in lines)
        print(f"  en/chat/{name}.txt: {len(lines)} messages, {words} words, {convs[name]} conversations"
              + (f" (dev conversations had {dev_all} messages; the rest are dropped)" if name == "dev" else ""))
    if not parts["train"]:
        raise Fail("chat: no training messages")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.split("\n\n")[1])
    raw, out = sys.argv[1:]
    try:
        prepare_chat(raw, out)
        prepare_wordfreq(raw, out, "en")
    except Fail as e:
        sys.exit(f"prepare_english: {e}")


if __name__ == "__main__":
    main()
