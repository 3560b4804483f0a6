#!/usr/bin/env python3
"""One Python peer of the benchmark, run in its own process by peers.py:

    peer_py.py PEER MODEL.laya CONTEXTS.json ITERS WARMUP OUT.json LOGITS.f32

PEER is onnxruntime, torch, torch-compile, mlx or mlx-compile. The weights come from
scripts/reference_forward.py's reader (the standard `gguf` package, every tensor dequantised),
cast to float32; the network is format.md §3 exactly: all blocks, both heads, the last block
computing queries, attention and FFN for the last position only. One decision = forward pass on
one context's embedding rows + top-5 over the word logits, on one thread. The rows of each
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


def context_rows(hp, context):
    """Embedding rows of one context (format.md §3 step 1), via the reference's own helpers."""
    T = hp["laya.context_length"]
    cps = [rf.normalise(ch, hp["laya.normalization"]) for ch in context][-T:]
    cps = [0] * (T - len(cps)) + cps
    return np.array([rf.row_of(c, hp) for c in cps], dtype=np.int64)


def f32_weights(hp, W):
    """float32 copies; a quantised embedding's compensation is folded into the table."""
    out = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in W.items()}
    comp = out.pop("token_embd_comp.weight", None)
    if comp is not None:
        rows = out["token_embd.weight"].shape[0]
        out["token_embd.weight"] = out["token_embd.weight"] + np.repeat(comp, 32, axis=0)[:rows]
    return out


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

    x = op("Add", [op("Gather", [const(W["token_embd.weight"], "embd"), "rows"], axis=0),
                   const(W["pos_embd.weight"][:T], "pos")])
    scale = const(np.array(1.0 / math.sqrt(dh), np.float32))
    for l in range(L):
        p = f"blk.{l}."
        h = ln(x, p + "attn_norm")
        k, v = heads(linear(h, p + "attn_k"), T), heads(linear(h, p + "attn_v"), T)
        tq = 1 if l == L - 1 else T
        if tq == 1:
            last = lambda y: op("Slice", [y, const(np.array([T - 1], np.int64)), const(np.array([T], np.int64)),
                                          const(np.array([0], np.int64))])
            x, h = last(x), last(h)
        q = heads(linear(h, p + "attn_q"), tq)
        a = op("Softmax", [op("Mul", [op("MatMul", [q, op("Transpose", [k], perm=[0, 2, 1])]), scale])], axis=-1)
        o = op("Reshape", [op("Transpose", [op("MatMul", [a, v])], perm=[1, 0, 2]), const(np.array([tq, d], np.int64))])
        x = op("Add", [x, linear(o, p + "attn_output")])
        up = linear(ln(x, p + "ffn_norm"), p + "ffn_up")
        up = op("Gelu", [up], approximate="tanh") if act == "gelu_tanh" else op("Relu", [up])
        x = op("Add", [x, linear(up, p + "ffn_down")])
    z = ln(op("Slice", [x, const(np.array([-1], np.int64)), const(np.array([2**62], np.int64)),
                        const(np.array([0], np.int64))]), "output_norm")
    logits = op("Reshape", [linear(z, "output"), const(np.array([-1], np.int64))])
    rlogits = op("Reshape", [linear(z, "replace"), const(np.array([-1], np.int64))])
    nodes.append(helper.make_node("TopK", [logits, const(np.array([5], np.int64))], ["top_values", "top_ids"],
                                  axis=-1, largest=1, sorted=1))
    nodes.append(helper.make_node("Identity", [logits], ["logits"]))
    nodes.append(helper.make_node("Identity", [rlogits], ["rlogits"]))
    V, C = W["output.weight"].shape[0], W["replace.weight"].shape[0]
    graph = helper.make_graph(
        nodes, "laya", [helper.make_tensor_value_info("rows", TensorProto.INT64, [T])],
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
    prepare = lambda rows: {"rows": rows}
    decide = lambda feed: sess.run(["top_ids"], feed)[0]
    logits = lambda feed: sess.run(["logits"], feed)[0]
    return prepare, decide, logits, f"onnxruntime {ort.__version__}, opset 20, ORT_ENABLE_ALL, 1+1 threads"


# ---------------------------------------------------------------- PyTorch
def make_torch(hp, W, compiled):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    T, d, H, L, eps, act = shape(hp)
    dh = d // H
    t = {k: torch.from_numpy(v) for k, v in W.items()}
    # Matrices pre-transposed to (in, out), the layout the ONNX and MLX peers use too: on this
    # AMD VM, F.linear's (out, in) GEMV through MKL took 12-17 ms for the 20,000-word head
    # against ~3 ms for x @ W^T stored transposed (measured while writing this peer).
    wt = {k: torch.from_numpy(np.ascontiguousarray(v.T)) for k, v in W.items()
          if v.ndim == 2 and k.startswith(("blk.", "output.", "replace."))}
    embd, pos = t["token_embd.weight"], t["pos_embd.weight"][:T]

    def lin(x, p):
        return torch.matmul(x, wt[p + ".weight"]) + t[p + ".bias"]

    def ln(x, p):
        return F.layer_norm(x, (d,), t[p + ".weight"], t[p + ".bias"], eps)

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
            x = x + lin((a @ v).transpose(0, 1).reshape(-1, d), p + "attn_output")
            up = lin(ln(x, p + "ffn_norm"), p + "ffn_up")
            up = F.gelu(up, approximate="tanh") if act == "gelu_tanh" else F.relu(up)
            x = x + lin(up, p + "ffn_down")
        z = ln(x[-1], "output_norm")
        logits = lin(z, "output")
        rlogits = lin(z, "replace")
        return logits, rlogits, torch.topk(logits, 5).indices

    fn = torch.compile(forward) if compiled else forward

    def decide(rows):
        with torch.inference_mode():
            return fn(rows)[2]

    def logits(rows):
        with torch.inference_mode():
            return fn(rows)[0].numpy().copy()

    kind = "torch.compile (inductor, default mode)" if compiled else "eager"
    return torch.from_numpy, decide, logits, f"torch {torch.__version__} {kind}, 1 thread"


# ---------------------------------------------------------------- MLX
def make_mlx(hp, W, compiled):
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    T, d, H, L, eps, act = shape(hp)
    dh = d // H
    m = {k: mx.array(v) for k, v in W.items()}
    wt = {k: mx.array(np.ascontiguousarray(v.T)) for k, v in W.items() if v.ndim == 2 and k.startswith(("blk.", "output.", "replace."))}
    embd, pos = m["token_embd.weight"], m["pos_embd.weight"][:T]
    c = math.sqrt(2.0 / math.pi)

    def lin(x, p):
        return x @ wt[p + ".weight"] + m[p + ".bias"]

    def ln(x, p):
        return mx.fast.layer_norm(x, m[p + ".weight"], m[p + ".bias"], eps)

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
            x = x + lin((a @ v).transpose(1, 0, 2).reshape(-1, d), p + "attn_output")
            up = lin(ln(x, p + "ffn_norm"), p + "ffn_up")
            if act == "gelu_tanh":
                up = 0.5 * up * (1.0 + mx.tanh(c * (up + 0.044715 * up * up * up)))
            else:
                up = mx.maximum(up, 0.0)
            x = x + lin(up, p + "ffn_down")
        z = ln(x[-1], "output_norm")
        logits = lin(z, "output")
        rlogits = lin(z, "replace")
        cand = mx.argpartition(-logits, kth=4)[:5]
        top = cand[mx.argsort(-logits[cand])]
        return logits, rlogits, top

    fn = mx.compile(forward) if compiled else forward

    def decide(rows):
        out = fn(rows)
        mx.eval(out)
        return out[2]

    def logits(rows):
        out = fn(rows)
        mx.eval(out)
        return np.array(out[0])

    kind = "mx.compile" if compiled else "eager"
    return mx.array, decide, logits, f"mlx {mx.__version__} {kind}, cpu stream"


PEERS = {
    "onnxruntime": make_onnxruntime,
    "torch": lambda hp, W: make_torch(hp, W, False),
    "torch-compile": lambda hp, W: make_torch(hp, W, True),
    "mlx": lambda hp, W: make_mlx(hp, W, False),
    "mlx-compile": lambda hp, W: make_mlx(hp, W, True),
}


def main():
    if len(sys.argv) != 8 or sys.argv[1] not in PEERS:
        sys.exit(f"usage: peer_py.py {{{','.join(PEERS)}}} MODEL CONTEXTS.json ITERS WARMUP OUT.json LOGITS.f32")
    peer, model, ctx_path, iters, warmup, out, logits_out = sys.argv[1:]
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
    inputs = [prepare(context_rows(hp, c)) for c in contexts]
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
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "top5": top5, "vocab": int(all_logits.shape[1]), "notes": notes,
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
