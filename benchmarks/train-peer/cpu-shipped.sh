#!/usr/bin/env bash
# CPU training throughput of the shipped network (d 192, 3 heads, 3 blocks of FFN 512,
# relative_causal positions, 50,000 words factorised over 1,024 own-word classes + 512, batch
# 512): laya-train's step, as the `throughput` example runs it against the patched candle-core
# (what scripts/build-trainer.sh builds `laya` with), beside its PyTorch twin torch_causal.py
# (eager), one after the other, ROUNDS rounds (default 3) for each thread count. Prints one line
# per pair and the ratio.
#
#   benchmarks/train-peer/cpu-shipped.sh [BIN [THREADS ...]]
#
# BIN: a built `throughput` example (another machine: build it here, carry it there); without
# it the example is built here. THREADS: default 2. PY: a python with torch (default
# target/peers-venv/bin/python, which benchmarks/peers/run.sh makes). The example runs with
# MIMALLOC_PURGE_DELAY=-1, as `laya train` sets it for itself (docs/training.md "Throughput").
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-}
if [ -z "$BIN" ]; then
    # shellcheck source=scripts/candle-patched.sh
    source scripts/candle-patched.sh
    CARGO_TARGET_DIR=target/patched cargo build --release -p laya-train --example throughput --features mimalloc --config "$CANDLE_PATCH" >&2
    BIN=target/patched/release/examples/throughput
fi
[ -x "$BIN" ] || { echo "cpu-shipped.sh: $BIN is not an executable" >&2; exit 1; }
THREADS=("${@:2}")
[ ${#THREADS[@]} -gt 0 ] || THREADS=(2)
PY=${PY:-target/peers-venv/bin/python}
"$PY" -c 'import torch' 2>/dev/null || { echo "cpu-shipped.sh: $PY has no torch (benchmarks/peers/run.sh makes a venv with it)" >&2; exit 1; }

export LAYA_LAYERS=3 LAYA_FFN=512 LAYA_D_MODEL=192 LAYA_HEADS=3 LAYA_POSITIONS=relative_causal \
    LAYA_WORD_CLASSES=512 LAYA_OWN_CLASS_WORDS=1024
# The number before "samples/s" in a line of either program.
rate() { grep -o '[0-9.]* *samples/s' | tail -1 | awk '{print $1}'; }
echo "round threads laya-train PyTorch laya/PyTorch"
for r in $(seq "${ROUNDS:-3}"); do
    for t in "${THREADS[@]}"; do
        laya=$(MIMALLOC_PURGE_DELAY=-1 RAYON_NUM_THREADS=$t LAYA_STEPS=${LAYA_STEPS:-8} "$BIN" --child 50000 table 512 | rate)
        torch=$(OMP_NUM_THREADS=$t "$PY" benchmarks/train-peer/torch_causal.py 50000 512 cpu | rate)
        echo "$r $t $laya $torch $(awk -v a="$laya" -v b="$torch" 'BEGIN { printf "%.2f", a / b }')"
    done
done
