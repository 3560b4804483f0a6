"""Plain numpy reference of the `relative_causal` forward pass (docs/format.md §3), for checking
the peers (`peer_py.py --self-test`).

Deliberately naive and independent of the peers' shortcuts: it runs every block at **every**
position of the whole token stream (BOS + every character of the context, however long), with
explicit loops over positions, heads and keys, in float64. The peers compute only the last
`R = L·(T−1)+1` tokens and, per block, only the positions the spec says reach the output; this
reference does not, so agreement also checks that truncation.
"""
import math

import numpy as np

import reference_forward as rf


def stream_logits(hp, W, context):
    """(word logits, replace logits), float64 (word logits = log P(w) for a factorised head,
    `rf.word_head`), one row per position `t` of the token stream of
    `context`: row `t` is the output for the context `context[:t]` (the stream is causal, so
    position `t` sees only BOS and the first `t` characters). `W` as read by `rf.load`."""
    T = hp["laya.context_length"]
    H = hp["laya.attention.head_count"]
    L = hp["laya.block_count"]
    eps = hp["laya.attention.layer_norm_epsilon"]
    rules = hp["laya.normalization"]
    # 1. BOS (row 0) followed by every normalised scalar value of the context.
    rows = [0] + [rf.row_of(rf.normalise(ch, rules), hp) for ch in context]
    # 2. Token embeddings only (plus a quantised table's compensation rows, format.md §7).
    x = np.array(W["token_embd.weight"][rows], dtype=np.float64)
    if "token_embd_comp.weight" in W:
        x = x + W["token_embd_comp.weight"][[r // 32 for r in rows]]
    bias = W["pos_embd.weight"]  # numpy (L·H, T): row l·H + h, column distance t − s
    assert bias.shape == (L * H, T), bias.shape
    n, d = x.shape
    dh = d // H
    lin = lambda h, name: h @ W[name + ".weight"].T + W[name + ".bias"]
    for l in range(L):
        p = f"blk.{l}."
        h = rf.layer_norm(x, W[p + "attn_norm.weight"], W[p + "attn_norm.bias"], eps)
        q, k, v = lin(h, p + "attn_q"), lin(h, p + "attn_k"), lin(h, p + "attn_v")
        o = np.zeros_like(x)
        # 3. Causal attention over the window max(0, t−T+1) ≤ s ≤ t, oldest key first.
        for t in range(n):
            for hd in range(H):
                c = slice(hd * dh, (hd + 1) * dh)
                keys = range(max(0, t - T + 1), t + 1)
                sc = np.array([q[t, c] @ k[s, c] / math.sqrt(dh) + bias[l * H + hd, t - s] for s in keys])
                a = np.exp(sc - sc.max())
                a /= a.sum()
                o[t, c] = sum(a_s * v[s, c] for a_s, s in zip(a, keys))
        x = x + lin(o, p + "attn_output")
        h = rf.layer_norm(x, W[p + "ffn_norm.weight"], W[p + "ffn_norm.bias"], eps)
        x = x + lin(rf.act(lin(h, p + "ffn_up"), hp["laya.activation"]), p + "ffn_down")
    # 4. The last position of the stream feeds the heads (here: every position, one prefix each).
    z = rf.layer_norm(x, W["output_norm.weight"], W["output_norm.bias"], eps)
    return rf.word_head(hp, W, z), lin(z, "replace")


def forward_causal(hp, W, context):
    """(word logits, replace logits) of `context`: the last position of its stream."""
    words, replace = stream_logits(hp, W, context)
    return words[-1], replace[-1]


def forward(hp, W, context):
    """Either scheme: the causal loops above, or the repository's reference for learned positions."""
    if hp.get("laya.position_scheme", "learned_absolute") == "relative_causal":
        return forward_causal(hp, W, context)
    return rf.forward(hp, W, context)
