#!/usr/bin/env bash
# Laya vs ONNX Runtime, PyTorch (eager and torch.compile), MLX (CPU) and candle, batch 1, one
# thread, on the same network and weights. One command does everything:
#
#     benchmarks/peers/run.sh [OUT_DIR]        # default OUT_DIR = runs/peers
#
# Creates target/peers-venv (pinned PyPI packages), builds the Rust peers in release, writes the
# random models, runs benchmarks/peers/peers.py and saves OUT_DIR/peers.{json,md}.
# Environment: PEERS_ITERS (1000), PEERS_WARMUP (100), PEERS_TYPING_PASSES (2; 0 skips the typing
# mode), PEERS_ONLY (a subset of the peers), PEERS_TORCH_INDEX_URL (an index with CPU-only torch
# wheels, when reachable; see README.md).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
out="${1:-runs/peers}"
venv=target/peers-venv
py="$venv/bin/python"

# Pinned so that a rerun measures the same software.
NUMPY=2.4.6 GGUF=0.19.0 ONNX=1.23.2 ORT=1.32.0 TORCH=2.15.0 MLX=0.32.4
if [ ! -x "$py" ]; then
    python3 -m venv "$venv"
fi
have() { "$py" -c "import importlib.metadata as m, sys; sys.exit(m.version('$1') != '$2')" 2>/dev/null; }
pip() { "$py" -m pip install --quiet --disable-pip-version-check "$@"; }
have numpy $NUMPY && have gguf $GGUF && have onnx $ONNX && have onnxruntime $ORT \
    || pip "numpy==$NUMPY" "gguf==$GGUF" "onnx==$ONNX" "onnxruntime==$ORT"
# MLX's Linux CPU build; a failure here leaves the MLX rows saying why (peers.py reports the error).
have mlx $MLX || pip "mlx[cpu]==$MLX" || echo "run.sh: mlx[cpu]==$MLX could not be installed; MLX rows will show the error" >&2
if ! have torch $TORCH; then
    if [ -n "${PEERS_TORCH_INDEX_URL:-}" ]; then
        # A CPU-only build (no CUDA libraries) from an index that has one.
        pip --index-url "$PEERS_TORCH_INDEX_URL" "torch==$TORCH"
    else
        # PyPI only carries the CUDA build for linux x86-64, and its libtorch_cpu.so itself links
        # libcudart/libcupti, so `--no-deps` does not import. The CUDA libraries are installed
        # as ordinary dependencies (~4 GB); compute stays on the CPU (no GPU here).
        pip "torch==$TORCH"
    fi
fi
"$py" -c 'import torch; assert torch.zeros(2).add(1).sum().item() == 2.0' \
    || { echo "run.sh: torch does not run on this machine" >&2; exit 1; }

# Rust side: Laya, candle and the random-model writer, in release, sharing target/.
export CARGO_TARGET_DIR="$root/target"
cargo build --release --quiet --manifest-path benchmarks/peers/laya-peer/Cargo.toml
cargo build --release --quiet --manifest-path benchmarks/peers/candle-peer/Cargo.toml
cargo build --release --quiet -p laya-format --example random_model
cargo build --release --quiet -p laya-cli
models="$out/models"
mkdir -p "$models"
# (a) seed shape: lexicon 512, 3 blocks, d 128, 2 heads, FFN 512, F32, random weights.
target/release/examples/random_model "$models/seed-512-f32.laya" 512 f32 128 512 3
# (b') lexicon 20,000 in F32 with the default model's block shape (2 blocks, FFN 256), random
# weights: an F32 counterpart of (b); its embedding is the 65,536-row direct table, not the
# default's 4,641-row one.
target/release/examples/random_model "$models/rand-20000-f32.laya" 20000 f32 128 256 2
# (c) and (d): (a) and the committed default through `laya quantize` (Q4_1 embedding with its
# compensation bias, Q8_0 linears and head). Laya multiplies the Q8_0 layers with int8
# activations; the peers run the same weights dequantised to f32 with f32 activations, so their
# top-5 may differ from Laya's on a few contexts (the report flags it; docs/quantization.md).
target/release/laya quantize "$models/seed-512-f32.laya" "$models/seed-512-q.laya" >/dev/null
target/release/laya quantize models/default-f16.laya "$models/default-q.laya" >/dev/null
# (f)-(i) relative_causal (causal sliding window with learned relative biases, format.md §3): the
# seed shape and the lexicon-20,000 random shape again, F32 and through `laya quantize`.
target/release/examples/random_model "$models/seed-512-causal-f32.laya" 512 f32 128 512 3 relative_causal
target/release/examples/random_model "$models/rand-20000-causal-f32.laya" 20000 f32 128 256 2 relative_causal
target/release/laya quantize "$models/seed-512-causal-f32.laya" "$models/seed-512-causal-q.laya" >/dev/null
target/release/laya quantize "$models/rand-20000-causal-f32.laya" "$models/rand-20000-causal-q.laya" >/dev/null
# (j), (k) the lexicon-20,000 causal shape with a factorised word head (format.md §3 step 5;
# random_model's 8th argument: about 256 classes, 172 here), F32 and through `laya quantize`.
# The peers compute the dense log P(w) of every word; Laya expands only the classes its ranking
# needs.
target/release/examples/random_model "$models/rand-20000-causal-cls-f32.laya" 20000 f32 128 256 2 relative_causal 256
target/release/laya quantize "$models/rand-20000-causal-cls-f32.laya" "$models/rand-20000-causal-cls-q.laya" >/dev/null
# The causal peers (and Laya) against the plain numpy reference first (causal_reference.py: every
# position of the whole stream, float64), on the benchmark's contexts and typing requests.
"$py" benchmarks/peers/peer_py.py --self-test "$models/seed-512-causal-f32.laya" onnxruntime,torch,mlx --bin target/release
# ... and on the factorised head (the class head, the within-class logsumexp).
"$py" benchmarks/peers/peer_py.py --self-test "$models/rand-20000-causal-cls-q.laya" onnxruntime,torch,mlx --bin target/release
# ... and on the trained default (factorised, 1,024 of its classes single words; its word trigram
# is not part of the network compared).
"$py" benchmarks/peers/peer_py.py --self-test models/default.laya onnxruntime,torch,mlx --bin target/release

exec "$py" benchmarks/peers/peers.py "$out" target/release \
    "lexicon 512, seed shape, F32 (random)=$models/seed-512-f32.laya=3 blocks, d 128, 2 heads, FFN 512, random weights, F32 everywhere." \
    "lexicon 50000, default model, F16=models/default-f16.laya=models/default-f16.laya as committed (3 blocks, d 192, 3 heads, FFN 512, table embedding, factorised word head, F16 matrices): Laya runs the F16 file, peers its weights dequantised to f32." \
    "lexicon 20000, F32 (random)=$models/rand-20000-f32.laya=random weights in the default's block shape (2 blocks, d 128, FFN 256) but a 65,536-row direct embedding; F32 everywhere." \
    "lexicon 512, seed shape, quantised=$models/seed-512-q.laya=the seed-shape model through laya quantize: Laya runs Q8_0 with int8 activations, peers the dequantised weights in f32." \
    "lexicon 50000, default quantised=$models/default-q.laya=models/default-f16.laya through laya quantize (models/default.laya without its word trigram): Laya runs Q8_0 with int8 activations and expands only the classes its ranking needs, peers compute the dense log P(w) from the dequantised weights." \
    "lexicon 512, seed shape, causal, F32 (random)=$models/seed-512-causal-f32.laya=relative_causal: 3 blocks, d 128, 2 heads, FFN 512, window 16, the last 46 tokens reach the output; random weights, F32 everywhere." \
    "lexicon 512, seed shape, causal, quantised=$models/seed-512-causal-q.laya=the causal seed-shape model through laya quantize: Laya runs Q8_0 with int8 activations, peers the dequantised weights in f32." \
    "lexicon 20000, causal, F32 (random)=$models/rand-20000-causal-f32.laya=relative_causal: 2 blocks, d 128, FFN 256, window 16, the last 31 tokens reach the output; 65,536-row direct embedding, random weights, F32 everywhere." \
    "lexicon 20000, causal, quantised=$models/rand-20000-causal-q.laya=the causal lexicon-20,000 model through laya quantize: Laya runs Q8_0 with int8 activations, peers the dequantised weights in f32." \
    "lexicon 20000, causal, factorised head, F32 (random)=$models/rand-20000-causal-cls-f32.laya=the causal lexicon-20,000 shape with a factorised word head (172 classes): peers compute the dense log P(w) of all 20,000 words and take its top-5, Laya computes the class head and expands only the classes its ranking needs; F32 everywhere." \
    "lexicon 20000, causal, factorised head, quantised=$models/rand-20000-causal-cls-q.laya=the factorised model through laya quantize (the class head Q8_0 like the word head): Laya runs Q8_0 with int8 activations, peers the dequantised weights in f32."
