#!/usr/bin/env python3
"""One Python peer of the benchmark, run in its own process by peers.py:

    peer_py.py PEER MODEL.laya CONTEXTS.json ITERS WARMUP OUT.json LOGITS.f32

PEER is onnxruntime, torch, torch-compile, mlx or mlx-compile. The weights come from
scripts/reference_forward.py's reader (the standard `gguf` package, every tensor dequantised),
cast to float32; the network is format.md §3 exactly: all blocks, both heads, the last block
computing queries, attention and FFN for the last position only. One decision = forward pass on
one context's embedding rows + top-5 over the word logits, on one thread. For a factorised word
head (format.md §3 step 5) the "word logits" are the dense log P(w) of every word (class head,
then a logsumexp within each class, with each framework's scatter op: `word_classes`), and the
top-5 is taken over them. The rows of each
context (normalisation + codepoint mapping, pure Python) are prepared before timing.

Writes the same JSON/f32 files as the Rust peers (benchmarks/peers/common.rs).
"""
import json
import math
import os
import resource
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
import reference_forward as rf  # noqa: E402  (the repository's gguf reader, reused as a library)


def is_causal(hp):
    return hp.get("laya.position_scheme", "learned_absolute") == "relative_causal"


def causal_plan(hp):
    """`relative_causal` (format.md §3): the `R = L·(T−1)+1` input tokens; block `l` computes
    queries, attention and FFN at its last `m[l]` positions (`m[L−1] = 1`, `m[l] = m[l+1]+T−1`)
    and keys/values at the last `K[l] = m[l]+T−1` (the positions block `l−1` produced; `K[0] = R`)."""
    T, L = hp["laya.context_length"], hp["laya.block_count"]
    m = [1] * L
    for l in range(L - 2, -1, -1):
        m[l] = m[l + 1] + T - 1
    K = [ml + T - 1 for ml in m]
    R = L * (T - 1) + 1
    assert K[0] == R
    return R, m, K


def context_rows(hp, context):
    """(embedding rows, number of padding rows in front) of one context, via the reference's
    own helpers. learned_absolute (format.md §3 step 1): the last T values, left-padded with
    codepoint 0, which is an ordinary token (pad = 0). relative_causal: the last R tokens of
    BOS (row 0) + every character; a shorter stream is left-padded with row 0 to R and `pad`
    says how many rows are padding (the graph masks them)."""
    rules = hp["laya.normalization"]
    if is_causal(hp):
        R = causal_plan(hp)[0]
        toks = [rf.row_of(rf.normalise(ch, rules), hp) for ch in context[-R:]]
        if len(toks) < R:
            toks = [0] + toks  # BOS is still among the last R tokens
        pad = R - len(toks)
        return np.array([0] * pad + toks, dtype=np.int64), pad
    T = hp["laya.context_length"]
    cps = [rf.normalise(ch, rules) for ch in context][-T:]
    cps = [0] * (T - len(cps)) + cps
    return np.array([rf.row_of(c, hp) for c in cps], dtype=np.int64), 0


# Added to the score of a masked (query, key) pair: exp() of it is exactly 0 in f32, and unlike
# -inf it cannot make a NaN (every query row keeps at least itself, see causal_masks).
NEG = np.float32(-1e30)


def causal_masks(hp, W):
    """Per block `l`, constants of the fixed-shape causal graph over the R padded tokens:
    `bias` (H, m[l], K[l]) = pos_embd[l·H+h][t−s] inside the window 0 ≤ t−s < T, NEG outside;
    `diag` (m[l], K[l]) true where the key is the query itself; `kpos` (K[l],) the keys'
    positions in 0..R. At run time a key is allowed when `kpos ≥ pad` (a real token) or it is
    the query itself: real tokens never see padding, and a padding query (whose window is all
    padding) attends only itself, so it stays finite and nobody reads it."""
    T, L, H = hp["laya.context_length"], hp["laya.block_count"], hp["laya.attention.head_count"]
    R, m, K = causal_plan(hp)
    pos = W["pos_embd.weight"]  # numpy (L·H, T) = GGUF ne [T, L·H]: row l·H+h, column distance
    assert pos.shape == (L * H, T), pos.shape
    out = []
    for l in range(L):
        qpos, kpos = np.arange(R - m[l], R), np.arange(R - K[l], R)
        delta = qpos[:, None] - kpos[None, :]
        window = (delta >= 0) & (delta < T)
        bias = np.where(window[None], pos[l * H:(l + 1) * H][:, np.clip(delta, 0, T - 1)], NEG)
        out.append((bias.astype(np.float32), delta == 0, kpos.astype(np.int64)))
    return out


def f32_weights(hp, W):
    """float32 copies; a quantised embedding's compensation is folded into the table."""
    out = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in W.items()}
    comp = out.pop("token_embd_comp.weight", None)
    if comp is not None:
        rows = out["token_embd.weight"].shape[0]
        out["token_embd.weight"] = out["token_embd.weight"] + np.repeat(comp, 32, axis=0)[:rows]
    return out


def word_classes(hp):
    """The class of each word (int64, length V) when the word head is factorised
    (`laya.lexicon.word_class`, format.md §3 step 5), None for a flat head. Every peer then
    reports, and ranks by, the dense `log P(w) = log_softmax(clogits)[κ(w)] + logits[w] − lse[κ(w)]`,
    `lse[k] = logsumexp_{v: κ(v)=k} logits[v]`, stable (each class shifted by its own max), all
    with `ClassLayout`'s gathers and reductions (scatters cost ~45 µs per 20,000 updates in ONNX
    Runtime and ~1 ms in MLX here)."""
    c = hp.get("laya.lexicon.word_class")
    return None if c is None else np.asarray(c, dtype=np.int64)


class ClassLayout:
    """How the peers compute `lse[k]` without a scatter: the classes of more than one word as the
    rows of a `(Km, S)` rectangle of word ids (`S` = the largest class, shorter rows padded with
    `V`, which indexes one `−∞` slot appended to the logits), whose max and sum are plain
    reductions; a class of one word has `lse = logits[w]`, a gather. Classes are then in the
    order `order` (the rectangle's, then the single words'), and `pos[w]` is the place of
    `κ(w)` in it, so `log P(w) = logits[w] + (log_softmax(clogits)[order] − lse)[pos[w]]`: three
    gathers, no scatter. Leaving the single-word classes out of the rectangle matters for heads
    with many of them (the factorised default: 1,024 of its 1,245 classes), where a rectangle
    over every class would be 15 times the lexicon."""

    def __init__(self, cls):
        V = len(cls)
        sizes = np.bincount(cls)
        multi, single = np.flatnonzero(sizes > 1), np.flatnonzero(sizes == 1)
        S = int(sizes.max()) if len(multi) else 1
        self.members = np.full((len(multi), S), V, np.int64)
        for r, k in enumerate(multi):
            ids = np.flatnonzero(cls == k)
            self.members[r, :len(ids)] = ids
        first = np.full(len(sizes), -1, np.int64)
        first[cls[::-1]] = np.arange(V - 1, -1, -1)
        self.single_words = first[single]
        self.order = np.concatenate([multi, single]).astype(np.int64)
        place = np.empty(len(sizes), np.int64)
        place[self.order] = np.arange(len(sizes))
        self.pos = place[cls]


# The matrices the Python peers store transposed, (in, out) (see make_torch).
LINEARS = ("blk.", "output.", "output_class.", "replace.")


def shape(hp):
    return (hp["laya.context_length"], hp["laya.embedding_length"], hp["laya.attention.head_count"],
            hp["laya.block_count"], float(hp["laya.attention.layer_norm_epsilon"]), hp["laya.activation"])


# ---------------------------------------------------------------- ONNX Runtime
def build_onnx(hp, W):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    T, d, H, L, eps, act = shape(hp)
    dh = d // H
    nodes, inits = [], []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return f"{prefix}_{counter[0]}"

    def const(arr, prefix="c"):
        n = name(prefix)
        inits.append(numpy_helper.from_array(np.asarray(arr), n))
        return n

    def op(kind, inputs, **attrs):
        out = name(kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(x, p):
        # Stored (out, in) like nn.Linear; ONNX MatMul wants (in, out).
        return op("Add", [op("MatMul", [x, const(W[p + ".weight"].T.copy(), "w")]), const(W[p + ".bias"], "b")])

    def ln(x, p):
        return op("LayerNormalization", [x, const(W[p + ".weight"]), const(W[p + ".bias"])], axis=-1, epsilon=eps)

    def heads(y, n):  # (n, d) -> (H, n, dh)
        return op("Transpose", [op("Reshape", [y, const(np.array([n, H, dh], np.int64))])], perm=[1, 0, 2])

    i64 = lambda *v: const(np.array(v, np.int64))
    embd = op("Gather", [const(W["token_embd.weight"], "embd"), "rows"], axis=0)
    if is_causal(hp):
        R, m, K = causal_plan(hp)
        x, n_in, neg = embd, R, const(NEG)
        plan = [(K[l], m[l], mask) for l, mask in enumerate(causal_masks(hp, W))]
    else:
        x, n_in = op("Add", [embd, const(W["pos_embd.weight"][:T], "pos")]), T
        plan = [(T, 1 if l == L - 1 else T, None) for l in range(L)]
    scale = const(np.array(1.0 / math.sqrt(dh), np.float32))
    for l, (nk, nq, mask) in enumerate(plan):
        # Block l: keys/values at the nk positions it receives, queries/attention/FFN at the last nq.
        p = f"blk.{l}."
        h = ln(x, p + "attn_norm")
        k, v = heads(linear(h, p + "attn_k"), nk), heads(linear(h, p + "attn_v"), nk)
        if nq < nk:
            tail = lambda y: op("Slice", [y, i64(nk - nq), i64(nk), i64(0)])
            x, h = tail(x), tail(h)
        q = heads(linear(h, p + "attn_q"), nq)
        s = op("Mul", [op("MatMul", [q, op("Transpose", [k], perm=[0, 2, 1])]), scale])
        if mask is not None:
            bias, diag, kpos = mask
            allowed = op("Or", [op("GreaterOrEqual", [const(kpos), "pad"]), const(diag)])
            s = op("Add", [s, op("Where", [allowed, const(bias, "bias"), neg])])
        a = op("Softmax", [s], axis=-1)
        o = op("Reshape", [op("Transpose", [op("MatMul", [a, v])], perm=[1, 0, 2]), i64(nq, d)])
        x = op("Add", [x, linear(o, p + "attn_output")])
        up = linear(ln(x, p + "ffn_norm"), p + "ffn_up")
        up = op("Gelu", [up], approximate="tanh") if act == "gelu_tanh" else op("Relu", [up])
        x = op("Add", [x, linear(up, p + "ffn_down")])
    z = ln(op("Slice", [x, const(np.array([-1], np.int64)), const(np.array([2**62], np.int64)),
                        const(np.array([0], np.int64))]), "output_norm")
    logits = op("Reshape", [linear(z, "output"), const(np.array([-1], np.int64))])
    cls = word_classes(hp)
    if cls is not None:
        # Factorised head: logits becomes the dense log P(w) (word_classes) through ClassLayout:
        # GatherElements (~11 µs for 20,000 indices here, against ~57 for Gather), plain
        # reductions over the rectangle of the classes of several words.
        lay = ClassLayout(cls)
        rows = const(np.array([1], np.int64))
        padded = op("Concat", [logits, const(np.array([-np.inf], np.float32))], axis=0)
        rect = op("Reshape", [op("GatherElements", [padded, const(lay.members.reshape(-1))], axis=0),
                              const(np.array(lay.members.shape, np.int64))])
        cmax = op("ReduceMax", [rect, rows], keepdims=1)
        csum = op("ReduceSum", [op("Exp", [op("Sub", [rect, cmax])]), rows], keepdims=0)
        lse = op("Concat", [op("Add", [op("Log", [csum]), op("Reshape", [cmax, const(np.array([-1], np.int64))])]),
                            op("GatherElements", [logits, const(lay.single_words)], axis=0)], axis=0)
        lcls = op("LogSoftmax", [op("Reshape", [linear(z, "output_class"), const(np.array([-1], np.int64))])], axis=-1)
        lcls = op("GatherElements", [lcls, const(lay.order)], axis=0)
        logits = op("Add", [logits, op("GatherElements", [op("Sub", [lcls, lse]), const(lay.pos, "cls")], axis=0)])
    rlogits = op("Reshape", [linear(z, "replace"), const(np.array([-1], np.int64))])
    nodes.append(helper.make_node("TopK", [logits, const(np.array([5], np.int64))], ["top_values", "top_ids"],
                                  axis=-1, largest=1, sorted=1))
    nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    nodes.append(helper.make_node("Identity", [rlogits], ["rlogits"]))
    V, C = W["output.weight"].shape[0], W["replace.weight"].shape[0]
    graph = helper.make_graph(
        nodes, "laya", [helper.make_tensor_value_info("rows", TensorProto.INT64, [n_in])]
        + ([helper.make_tensor_value_info("pad", TensorProto.INT64, [1])] if is_causal(hp) else []),
        [helper.make_tensor_value_info("top_ids", TensorProto.INT64, [5]),
         helper.make_tensor_value_info("logits", TensorProto.FLOAT, [V]),
         helper.make_tensor_value_info("rlogits", TensorProto.FLOAT, [C])],
        inits)
    # IR 9 is the IR of opset 20 (ONNX 1.15); pinning it lets an older onnxruntime load a graph
    # that a newer `onnx` package would otherwise stamp with its own, newer IR version.
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=9)
    onnx.checker.check_model(model)
    return model


def make_onnxruntime(hp, W):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(build_onnx(hp, W).SerializeToString(), so, providers=["CPUExecutionProvider"])
    if is_causal(hp):
        prepare = lambda rows, pad: {"rows": rows, "pad": np.array([pad], np.int64)}
    else:
        prepare = lambda rows, pad: {"rows": rows}
    decide = lambda feed: sess.run(["top_ids"], feed)[0]
    logits = lambda feed: sess.run(["logits"], feed)[0]
    return prepare, decide, logits, f"onnxruntime {ort.__version__}, opset 20, ORT_ENABLE_ALL, 1+1 threads"


# ---------------------------------------------------------------- PyTorch
def make_torch(hp, W, compiled):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # a second network in the same process (--self-test): already set
        pass
    T, d, H, L, eps, act = shape(hp)
    dh = d // H
    t = {k: torch.from_numpy(v) for k, v in W.items()}
    # Matrices pre-transposed to (in, out), the layout the ONNX and MLX peers use too: on this
    # AMD VM, F.linear's (out, in) GEMV through MKL took 12-17 ms for the 20,000-word head
    # against ~3 ms for x @ W^T stored transposed (measured while writing this peer).
    wt = {k: torch.from_numpy(np.ascontiguousarray(v.T)) for k, v in W.items()
          if v.ndim == 2 and k.startswith(LINEARS)}
    embd, pos = t["token_embd.weight"], t["pos_embd.weight"][:T]

    def lin(x, p):
        return torch.matmul(x, wt[p + ".weight"]) + t[p + ".bias"]

    def ln(x, p):
        return F.layer_norm(x, (d,), t[p + ".weight"], t[p + ".bias"], eps)

    # Shared by both position schemes: attention output and residual, the FFN, then the heads.
    def out_and_ffn(x, a, v, p):
        x = x + lin((a @ v).transpose(0, 1).reshape(-1, d), p + "attn_output")
        up = lin(ln(x, p + "ffn_norm"), p + "ffn_up")
        up = F.gelu(up, approximate="tanh") if act == "gelu_tanh" else F.relu(up)
        return x + lin(up, p + "ffn_down")

    cls = word_classes(hp)
    if cls is not None:
        lay = ClassLayout(cls)
        members, rect_shape = torch.tensor(lay.members.reshape(-1)), lay.members.shape
        single, order, class_pos = (torch.tensor(a) for a in (lay.single_words, lay.order, lay.pos))
        minus_inf = torch.tensor([-math.inf])
    # A bool, not the numpy map: torch.compile turns a captured numpy array into a tensor whose
    # guard then fails ("dispatch key set mismatch").
    factorised = cls is not None

    def word_head(z):
        logits = lin(z, "output")
        if not factorised:
            return logits
        # Factorised head: the dense log P(w) (word_classes) through ClassLayout; gathers by
        # index_select (x[idx] took ~70 µs for 20,000 indices here, index_select ~7).
        rect = torch.cat([logits, minus_inf]).index_select(0, members).view(rect_shape)
        cmax = rect.max(1, keepdim=True).values
        lse = torch.cat([((rect - cmax).exp().sum(1)).log() + cmax.view(-1), logits.index_select(0, single)])
        lcls = torch.log_softmax(lin(z, "output_class"), -1).index_select(0, order)
        return logits + (lcls - lse).index_select(0, class_pos)

    def heads_top(x):
        z = ln(x[-1], "output_norm")
        logits = word_head(z)
        return logits, lin(z, "replace"), torch.topk(logits, 5).indices

    def forward(rows):
        x = embd[rows] + pos
        for l in range(L):
            p = f"blk.{l}."
            h = ln(x, p + "attn_norm")
            k = lin(h, p + "attn_k").view(T, H, dh).transpose(0, 1)
            v = lin(h, p + "attn_v").view(T, H, dh).transpose(0, 1)
            if l == L - 1:
                x, h = x[T - 1:], h[T - 1:]
            q = lin(h, p + "attn_q").view(-1, H, dh).transpose(0, 1)
            a = torch.softmax((q @ k.transpose(1, 2)) * (1.0 / math.sqrt(dh)), dim=-1)
            x = out_and_ffn(x, a, v, p)
        return heads_top(x)

    if is_causal(hp):
        R, mq, K = causal_plan(hp)
        masks = [tuple(torch.from_numpy(a) for a in mk) for mk in causal_masks(hp, W)]
        neg = torch.tensor(NEG)

        def forward(rows, pad):  # noqa: F811  (the relative_causal network replaces the one above)
            x = embd[rows]
            for l in range(L):
                p = f"blk.{l}."
                nk, nq = K[l], mq[l]
                h = ln(x, p + "attn_norm")
                k = lin(h, p + "attn_k").view(nk, H, dh).transpose(0, 1)
                v = lin(h, p + "attn_v").view(nk, H, dh).transpose(0, 1)
                if nq < nk:
                    x, h = x[nk - nq:], h[nk - nq:]
                q = lin(h, p + "attn_q").view(nq, H, dh).transpose(0, 1)
                bias, diag, kpos = masks[l]
                sb = torch.where((kpos >= pad) | diag, bias, neg)
                a = torch.softmax((q @ k.transpose(1, 2)) * (1.0 / math.sqrt(dh)) + sb, dim=-1)
                x = out_and_ffn(x, a, v, p)
            return heads_top(x)

        prepare = lambda rows, pad: (torch.from_numpy(rows), torch.tensor(pad, dtype=torch.int64))
    else:
        prepare = lambda rows, pad: (torch.from_numpy(rows),)

    fn = torch.compile(forward) if compiled else forward

    def decide(feed):
        with torch.inference_mode():
            return fn(*feed)[2]

    def logits(feed):
        with torch.inference_mode():
            return fn(*feed)[0].numpy().copy()

    kind = "torch.compile (inductor, default mode)" if compiled else "eager"
    return prepare, decide, logits, f"torch {torch.__version__} {kind}, 1 thread"


# ---------------------------------------------------------------- MLX
def make_mlx(hp, W, compiled):
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    T, d, H, L, eps, act = shape(hp)
    dh = d // H
    m = {k: mx.array(v) for k, v in W.items()}
    wt = {k: mx.array(np.ascontiguousarray(v.T)) for k, v in W.items() if v.ndim == 2 and k.startswith(LINEARS)}
    embd, pos = m["token_embd.weight"], m["pos_embd.weight"][:T]
    c = math.sqrt(2.0 / math.pi)

    def lin(x, p):
        return x @ wt[p + ".weight"] + m[p + ".bias"]

    def ln(x, p):
        return mx.fast.layer_norm(x, m[p + ".weight"], m[p + ".bias"], eps)

    # Shared by both position schemes: attention output and residual, the FFN, then the heads.
    def out_and_ffn(x, a, v, p):
        x = x + lin((a @ v).transpose(1, 0, 2).reshape(-1, d), p + "attn_output")
        up = lin(ln(x, p + "ffn_norm"), p + "ffn_up")
        if act == "gelu_tanh":
            up = 0.5 * up * (1.0 + mx.tanh(c * (up + 0.044715 * up * up * up)))
        else:
            up = mx.maximum(up, 0.0)
        return x + lin(up, p + "ffn_down")

    cls = word_classes(hp)
    if cls is not None:
        lay = ClassLayout(cls)
        members, rect_shape = mx.array(lay.members.reshape(-1)), lay.members.shape
        single, order, class_pos = (mx.array(a) for a in (lay.single_words, lay.order, lay.pos))
        minus_inf = mx.array([-math.inf])

    def word_head(z):
        logits = lin(z, "output")
        if cls is None:
            return logits
        # Factorised head: the dense log P(w) (word_classes) through ClassLayout (takes and
        # reductions; MLX's .at[] scatters cost ~1 ms more here).
        rect = mx.take(mx.concatenate([logits, minus_inf]), members).reshape(rect_shape)
        cmax = mx.max(rect, axis=1, keepdims=True)
        lse = mx.concatenate([mx.log(mx.sum(mx.exp(rect - cmax), axis=1)) + cmax.reshape(-1), mx.take(logits, single)])
        clogits = lin(z, "output_class")
        lcls = mx.take(clogits - mx.logsumexp(clogits), order)
        return logits + mx.take(lcls - lse, class_pos)

    def heads_top(x):
        z = ln(x[-1], "output_norm")
        logits = word_head(z)
        cand = mx.argpartition(-logits, kth=4)[:5]
        return logits, lin(z, "replace"), cand[mx.argsort(-logits[cand])]

    def forward(rows):
        x = embd[rows] + pos
        for l in range(L):
            p = f"blk.{l}."
            h = ln(x, p + "attn_norm")
            k = lin(h, p + "attn_k").reshape(T, H, dh).transpose(1, 0, 2)
            v = lin(h, p + "attn_v").reshape(T, H, dh).transpose(1, 0, 2)
            if l == L - 1:
                x, h = x[T - 1:], h[T - 1:]
            q = lin(h, p + "attn_q").reshape(-1, H, dh).transpose(1, 0, 2)
            a = mx.softmax((q @ k.transpose(0, 2, 1)) * (1.0 / math.sqrt(dh)), axis=-1)
            x = out_and_ffn(x, a, v, p)
        return heads_top(x)

    if is_causal(hp):
        R, mq, K = causal_plan(hp)
        masks = [tuple(mx.array(a) for a in mk) for mk in causal_masks(hp, W)]
        neg = mx.array(NEG)

        def forward(rows, pad):  # noqa: F811  (the relative_causal network replaces the one above)
            x = embd[rows]
            for l in range(L):
                p = f"blk.{l}."
                nk, nq = K[l], mq[l]
                h = ln(x, p + "attn_norm")
                k = lin(h, p + "attn_k").reshape(nk, H, dh).transpose(1, 0, 2)
                v = lin(h, p + "attn_v").reshape(nk, H, dh).transpose(1, 0, 2)
                if nq < nk:
                    x, h = x[nk - nq:], h[nk - nq:]
                q = lin(h, p + "attn_q").reshape(nq, H, dh).transpose(1, 0, 2)
                bias, diag, kpos = masks[l]
                sb = mx.where(mx.logical_or(kpos >= pad, diag), bias, neg)
                a = mx.softmax((q @ k.transpose(0, 2, 1)) * (1.0 / math.sqrt(dh)) + sb, axis=-1)
                x = out_and_ffn(x, a, v, p)
            return heads_top(x)

        prepare = lambda rows, pad: (mx.array(rows), mx.array(pad, dtype=mx.int64))
    else:
        prepare = lambda rows, pad: (mx.array(rows),)

    fn = mx.compile(forward) if compiled else forward

    def decide(feed):
        out = fn(*feed)
        mx.eval(out)
        return out[2]

    def logits(feed):
        out = fn(*feed)
        mx.eval(out)
        return np.array(out[0])

    kind = "mx.compile" if compiled else "eager"
    return prepare, decide, logits, f"mlx {mx.__version__} {kind}, cpu stream"


PEERS = {
    "onnxruntime": make_onnxruntime,
    "torch": lambda hp, W: make_torch(hp, W, False),
    "torch-compile": lambda hp, W: make_torch(hp, W, True),
    "mlx": lambda hp, W: make_mlx(hp, W, False),
    "mlx-compile": lambda hp, W: make_mlx(hp, W, True),
}


# ---------------------------------------------------------------- self-test
def self_test(argv):
    """peer_py.py --self-test MODEL [PEER,PEER,...] [--bin DIR]

    Checks every Python peer (default: all five; they are built in this process) and, with
    --bin, the Rust peers DIR/candle-peer and DIR/laya-peer (run through the benchmark protocol,
    no timing) against causal_reference.py (relative_causal models: plain loops over the whole
    stream, float64) or scripts/reference_forward.py (learned_absolute), on the benchmark's
    contexts and every typing request: word logits within 1e-4 of the largest |logit|, and the
    same top-5 (a swap of logits within 1e-5 of it counts as a near-tie). On a relative_causal
    model the Python peers are also checked on an amplified copy of the weights (biases x30,
    queries x4), so that the attention is sharp and a wrong bias, window or mask cannot hide in
    near-uniform attention weights. Exits 1 when a check fails."""
    import subprocess
    import tempfile

    import causal_reference as cr
    import peers as drv

    args = list(argv)
    bin_dir = None
    if "--bin" in args:
        i = args.index("--bin")
        bin_dir = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(self_test.__doc__)
    model = args[0]
    names = args[1].split(",") if len(args) > 1 else list(PEERS)
    hp, W64 = rf.load(model)
    causal = is_causal(hp)
    contexts, typing = drv.CONTEXTS, drv.TYPING
    requests = contexts + typing

    def reference(Wd):
        t0 = time.perf_counter()
        if causal:
            ctx = [cr.forward_causal(hp, Wd, c)[0] for c in contexts]
            typ = list(cr.stream_logits(hp, Wd, drv.TYPING_TEXT)[0])  # row i = TYPING[i]
        else:
            ctx = [rf.forward(hp, Wd, c)[0] for c in contexts]
            typ = [rf.forward(hp, Wd, c)[0] for c in typing]
        print(f"  reference: {len(requests)} requests in {time.perf_counter() - t0:.1f} s", flush=True)
        return np.stack(ctx + typ)

    def check(name, logits, top5, ref):
        ref_top = [list(np.argsort(-row, kind="stable")[:5]) for row in ref]
        rel = float((np.abs(logits - ref).max(axis=1) / np.abs(ref).max(axis=1)).max())
        bad, ties = [], 0
        for i, (mine, want) in enumerate(zip(top5, ref_top)):
            if list(mine) != want:
                row = ref[i]
                gap = max(abs(row[a] - row[b]) for a, b in zip(mine, want)) if len(mine) == len(want) else np.inf
                (ties := ties + 1) if gap <= 1e-5 * np.abs(row).max() else bad.append(i)
        ok = rel <= 1e-4 and not bad
        print(f"  {name:14s} max rel logit diff {rel:.1e}, top-5 equal on {len(requests) - len(bad) - ties}/{len(requests)}"
              f"{f' (+{ties} near-ties)' if ties else ''} -> {'OK' if ok else 'FAILED'}", flush=True)
        for i in bad[:3]:
            print(f"    request {requests[i][-20:]!r}: {list(top5[i])} vs reference {ref_top[i]}")
        return ok

    def python_peers(Wd, ref):
        W = f32_weights(hp, Wd)
        ok = True
        for name in names:
            prepare, decide, logits_of, _ = PEERS[name](hp, W)
            feeds = [prepare(*context_rows(hp, c)) for c in requests]
            logits = np.stack([np.asarray(logits_of(f), dtype=np.float64).reshape(-1) for f in feeds])
            top5 = [list(map(int, np.asarray(decide(f)).reshape(-1))) for f in feeds]
            ok &= check(name, logits, top5, ref)
        return ok

    print(f"{model}: {hp.get('laya.position_scheme', 'learned_absolute')}, {len(contexts)} contexts + {len(typing)} typing requests")
    def sensitivity(Wd, ref):
        # How far the logits move without the learned bias: what a wrong bias would cost at least.
        no_bias = dict(Wd, **{"pos_embd.weight": Wd["pos_embd.weight"] * 0})
        r0 = cr.stream_logits(hp, no_bias, drv.TYPING_TEXT)[0]
        r1 = ref[len(contexts):]
        rel = np.abs(r0 - r1).max(axis=1) / np.abs(r1).max(axis=1)
        print(f"  (without the bias the typing requests' logits move by {np.median(rel):.1e} (median) to "
              f"{rel.max():.1e} relative: the tolerance below is 1e-4)")

    ref = reference(W64)
    if causal:
        sensitivity(W64, ref)
        # The repository's own reference (vectorised, written separately from the loops here)
        # must agree with causal_reference.py to float64 rounding.
        rel = 0.0
        for c in contexts[:12] + [drv.TYPING_TEXT]:
            mine = cr.forward_causal(hp, W64, c)[0]
            rel = max(rel, float(np.abs(rf.forward(hp, W64, c)[0] - mine).max() / np.abs(mine).max()))
        print(f"  (scripts/reference_forward.py and causal_reference.py differ by {rel:.1e} relative)")
        if rel > 1e-9:
            sys.exit("self-test FAILED: the two references disagree")
    ok = python_peers(W64, ref)
    if bin_dir:
        with tempfile.TemporaryDirectory() as tmp:
            paths = {k: os.path.join(tmp, k) for k in ["ctx.json", "typ.json", "out.json", "l.f32", "t.f32"]}
            for key, data in [("ctx.json", contexts), ("typ.json", typing)]:
                with open(paths[key], "w", encoding="utf-8") as f:
                    json.dump(data, f, ensure_ascii=False)
            for peer in ["candle", "laya"]:
                cmd = [os.path.join(bin_dir, peer + "-peer"), model, paths["ctx.json"], "0", "0", paths["out.json"],
                       paths["l.f32"], paths["typ.json"], "0", paths["t.f32"]]
                p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, RAYON_NUM_THREADS="1"))
                if p.returncode != 0:
                    print(f"  {peer:14s} not run: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
                    continue
                with open(paths["out.json"], encoding="utf-8") as f:
                    rep = json.load(f)
                logits = np.concatenate([np.fromfile(paths["l.f32"], "<f4").reshape(len(contexts), -1),
                                         np.fromfile(paths["t.f32"], "<f4").reshape(len(typing), -1)]).astype(np.float64)
                ok &= check(peer, logits, rep["top5"] + rep["typing_top5"], ref)
    if causal:
        print("  amplified weights (pos_embd x30, attn_q x4):")
        amp = dict(W64, **{"pos_embd.weight": W64["pos_embd.weight"] * 30})
        for l in range(hp["laya.block_count"]):
            for t in ("weight", "bias"):
                amp[f"blk.{l}.attn_q.{t}"] = W64[f"blk.{l}.attn_q.{t}"] * 4
        ref = reference(amp)
        sensitivity(amp, ref)
        ok &= python_peers(amp, ref)
    print("self-test", "passed" if ok else "FAILED")
    sys.exit(0 if ok else 1)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--self-test":
        return self_test(sys.argv[2:])
    if len(sys.argv) not in (8, 11) or sys.argv[1] not in PEERS:
        sys.exit(f"usage: peer_py.py {{{','.join(PEERS)}}} MODEL CONTEXTS.json ITERS WARMUP OUT.json LOGITS.f32 "
                 "[TYPING.json PASSES TYPING_LOGITS.f32]\n       peer_py.py --self-test MODEL [PEER,...] [--bin DIR]")
    peer, model, ctx_path, iters, warmup, out, logits_out = sys.argv[1:8]
    iters, warmup = int(iters), int(warmup)
    with open(ctx_path, encoding="utf-8") as f:
        contexts = json.load(f)
    # Cold start: reading the file (gguf-py), building the framework's model, first decision.
    t0 = time.perf_counter()
    hp, W64 = rf.load(model)
    read_ms = (time.perf_counter() - t0) * 1e3
    W = f32_weights(hp, W64)
    del W64
    prepare, decide, logits_of, notes = PEERS[peer](hp, W)
    inputs = [prepare(*context_rows(hp, c)) for c in contexts]
    decide(inputs[0])
    cold_ms = (time.perf_counter() - t0) * 1e3
    for i in range(warmup):
        decide(inputs[i % len(inputs)])
    times = []
    clock = time.perf_counter_ns
    for i in range(iters):
        x = inputs[i % len(inputs)]
        s = clock()
        decide(x)
        times.append(clock() - s)
    all_logits = np.stack([np.asarray(logits_of(x), dtype=np.float32).reshape(-1) for x in inputs])
    top5 = [list(map(int, np.asarray(decide(x)).reshape(-1))) for x in inputs]
    all_logits.astype("<f4").tofile(logits_out)
    report = {
        "peer": peer, "cold_start_ms": cold_ms, "read_ms": read_ms, "times_ns": times,
        "top5": top5, "vocab": int(all_logits.shape[1]), "notes": notes,
    }
    if len(sys.argv) == 11:
        # Typing mode: every request in order, each computed from scratch (nothing is kept
        # between runs of the graph); rows prepared before timing, as above.
        typing_path, passes, typing_out = sys.argv[8], int(sys.argv[9]), sys.argv[10]
        with open(typing_path, encoding="utf-8") as f:
            requests = [prepare(*context_rows(hp, c)) for c in json.load(f)]
        for x in requests:
            decide(x)
        typing_times = []
        for _ in range(passes):
            for x in requests:
                s = clock()
                decide(x)
                typing_times.append(clock() - s)
        np.stack([np.asarray(logits_of(x), dtype=np.float32).reshape(-1) for x in requests]).astype("<f4").tofile(typing_out)
        report["typing_times_ns"] = typing_times
        report["typing_top5"] = [list(map(int, np.asarray(decide(x)).reshape(-1))) for x in requests]
    report["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
