#!/usr/bin/env bash
# Builds laya for NVIDIA GPUs (`laya train --device cuda`) and packs what the GPU machine runs:
#
#   scripts/build-cuda.sh [OUT_DIR]        (default .device/gpu; about 10 minutes cold on 2 cores)
#
# OUT_DIR then holds, stripped and xz-compressed: `laya` (with --features cuda), `cuda-test` (the
# GPU-against-CPU tests of crates/laya-train/tests/cuda.rs) and `throughput` (the training
# throughput example), plus scripts/gpu-check.sh. Carry OUT_DIR and the repository to the GPU
# machine (it needs no Rust toolchain) and run `bash scripts/gpu-check.sh OUT_DIR` there
# (docs/training.md, "On a GPU"). Needs python3-venv and gcc; CUDA_COMPUTE_CAP (default 90,
# H100/H200) picks the GPU generation. candle-core is built with
# scripts/patches/candle-core-0.11.1-first-gradient.patch (scripts/candle-patched.sh says why);
# LAYA_CANDLE_UNPATCHED=1 builds against the published crate instead, for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.device/gpu}
# shellcheck source=scripts/cuda-toolchain.sh
source scripts/cuda-toolchain.sh
export CARGO_TARGET_DIR=target/cuda
patch_args=()
if [ "${LAYA_CANDLE_UNPATCHED:-0}" != 1 ]; then
    # shellcheck source=scripts/candle-patched.sh
    source scripts/candle-patched.sh
    patch_args=(--config "$CANDLE_PATCH")
fi
cargo build "${patch_args[@]}" --release -p laya-cli --features cuda
cargo build "${patch_args[@]}" --release -p laya-train --features cuda,mimalloc --example throughput
test_bin=$(cargo test "${patch_args[@]}" --release -p laya-train --features cuda --test cuda --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "cuda" and m.get("executable"):
        print(m["executable"])')
mkdir -p "$OUT"
rm -f "$OUT"/laya.xz "$OUT"/cuda-test.xz "$OUT"/throughput.xz
cp target/cuda/release/laya "$OUT/laya"
cp "$test_bin" "$OUT/cuda-test"
cp target/cuda/release/examples/throughput "$OUT/throughput"
for f in laya cuda-test throughput; do
    strip "$OUT/$f"
    xz -T0 -6 "$OUT/$f"
done
ls -l "$OUT"
