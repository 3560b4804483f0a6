#!/usr/bin/env python3
"""Independent reference implementation of the Laya forward pass (docs/format.md §3), in numpy.

Reads a .laya file with the standard `gguf` package (its own dequantisation, not Laya's),
computes word and replace logits for each context (for a factorised word head, the "word logits"
are the dense log P(w) of every word: `word_head`), and writes them as JSON:

    python scripts/reference_forward.py MODEL.laya CONTEXTS.json OUT.json

CONTEXTS.json is a JSON array of strings (a file, because contexts may hold NUL, which no
command line can carry).

The Rust test `laya-runtime/tests/golden.rs` compares the engine with this, per tensor type.
Everything is computed in float64 so that the reference's own rounding is negligible.
"""
import json
import math
import sys

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def field(reader, key):
    f = reader.fields[key]
    t = f.types[0]
    if t.name == "STRING":
        return bytes(f.parts[f.data[0]]).decode("utf-8")
    if t.name == "ARRAY":
        sub = f.types[1]
        if sub.name == "STRING":
            return [bytes(f.parts[i]).decode("utf-8") for i in f.data]
        return [f.parts[i][0].item() for i in f.data]
    return f.parts[f.data[0]][0].item()


def load(path):
    r = GGUFReader(path)
    hp = {k: field(r, k) for k in r.fields if k.startswith("laya.") or k.startswith("general.")}
    tensors = {}
    for t in r.tensors:
        arr = dequantize(t.data, t.tensor_type).astype(np.float64)
        shape = tuple(int(x) for x in reversed(t.shape.tolist()))  # numpy order
        tensors[t.name] = arr.reshape(shape)
    return hp, tensors


def normalise(ch, rules):
    c = ord(ch)
    for rule in rules:
        if rule == "fullwidth_ascii":
            if 0xFF01 <= c <= 0xFF5E:
                c -= 0xFEE0
            elif c == 0x3000:
                c = 0x20
        elif rule == "lowercase_ascii":
            if 0x41 <= c <= 0x5A:
                c += 0x20
        else:
            raise ValueError(f"unknown rule {rule}")
    return c


def row_of(cp, hp):
    if hp["laya.embedding.mapping"] == "direct":
        return cp if cp < 0x10000 else 0xD800 + (cp - 0x10000) % 0x800
    if cp == 0:
        return 0
    table = hp["laya.embedding.codepoints"]
    import bisect
    j = bisect.bisect_left(table, cp)
    return j + 2 if j < len(table) and table[j] == cp else 1


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def act(x, name):
    if name == "gelu_tanh":
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    return np.maximum(x, 0.0)


def word_head(hp, W, z):
    """The word head on `z` (`(d,)` or `(n, d)`, after output_norm), format.md §3 step 5: the
    logits of a flat head; for a factorised one (`laya.lexicon.word_class`, `output_class.*`)
    the dense `log P(w) = log_softmax(clogits)[κ(w)] + logits[w] − logsumexp_{v: κ(v)=κ(w)} logits[v]`,
    which ranks the words as `P(w)` does. One class at a time, shifted by the class's own max."""
    logits = z @ W["output.weight"].T + W["output.bias"]
    if "laya.lexicon.word_class" not in hp:
        return logits
    cls = np.asarray(hp["laya.lexicon.word_class"], dtype=np.int64)
    clogits = z @ W["output_class.weight"].T + W["output_class.bias"]

    def lse(a):
        m = a.max(-1, keepdims=True)
        return m + np.log(np.exp(a - m).sum(-1, keepdims=True))

    within = np.empty_like(logits)
    for k in range(clogits.shape[-1]):
        members = cls == k
        within[..., members] = lse(logits[..., members])
    return (clogits - lse(clogits))[..., cls] + logits - within


def forward(hp, W, context):
    T = hp["laya.context_length"]
    H = hp["laya.attention.head_count"]
    eps = hp["laya.attention.layer_norm_epsilon"]
    rules = hp["laya.normalization"]
    causal = hp["laya.position_scheme"] == "relative_causal"
    if causal:
        # The whole stream, BOS (row 0) and every character: no window truncation here, so the
        # runtime's receptive-field shortcut is checked, not assumed.
        rows = [0] + [row_of(normalise(ch, rules), hp) for ch in context]
        x = W["token_embd.weight"][rows]
    else:
        cps = [normalise(ch, rules) for ch in context][-T:]
        cps = [0] * (T - len(cps)) + cps
        rows = [row_of(c, hp) for c in cps]
        x = W["token_embd.weight"][rows] + W["pos_embd.weight"][:T]
    if "token_embd_comp.weight" in W:
        # Error compensation of a quantised embedding: one row per group of 32 rows (format.md §7).
        x = x + W["token_embd_comp.weight"][[r // 32 for r in rows]]
    d = x.shape[1]
    dh = d // H
    lin = lambda h, name: h @ W[name + ".weight"].T + W[name + ".bias"]
    for l in range(hp["laya.block_count"]):
        p = f"blk.{l}."
        h = layer_norm(x, W[p + "attn_norm.weight"], W[p + "attn_norm.bias"], eps)
        q, k, v = lin(h, p + "attn_q"), lin(h, p + "attn_k"), lin(h, p + "attn_v")
        o = np.zeros_like(x)
        for hd in range(H):
            s = slice(hd * dh, (hd + 1) * dh)
            sc = q[:, s] @ k[:, s].T / math.sqrt(dh)
            if causal:
                # Query t sees keys t-T+1..t, plus the bias of block l, head hd, distance t-s.
                n = len(rows)
                dist = np.arange(n)[:, None] - np.arange(n)[None, :]
                bias = W["pos_embd.weight"][l * H + hd][np.clip(dist, 0, T - 1)]
                sc = np.where((dist >= 0) & (dist < T), sc + bias, -np.inf)
            sc = np.exp(sc - sc.max(-1, keepdims=True))
            sc /= sc.sum(-1, keepdims=True)
            o[:, s] = sc @ v[:, s]
        x = x + lin(o, p + "attn_output")
        h = layer_norm(x, W[p + "ffn_norm.weight"], W[p + "ffn_norm.bias"], eps)
        x = x + lin(act(lin(h, p + "ffn_up"), hp["laya.activation"]), p + "ffn_down")
    z = layer_norm(x[-1], W["output_norm.weight"], W["output_norm.bias"], eps)
    return word_head(hp, W, z), lin(z, "replace")


def main():
    path, ctx_path, out = sys.argv[1:]
    with open(ctx_path, encoding="utf-8") as f:
        contexts = json.load(f)
    hp, W = load(path)
    result = []
    for c in contexts:
        wl, rl = forward(hp, W, c)
        result.append({"context": c, "word_logits": wl.tolist(), "replace_logits": rl.tolist()})
    with open(out, "w", encoding="utf-8") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
