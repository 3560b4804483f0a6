#!/usr/bin/env bash
# Runs on the GPU machine what scripts/build-cuda.sh packed (no Rust toolchain needed there):
# the GPU-against-CPU tests, then training throughput at the shipped model's shape (d 192, 3
# heads, 3 blocks of FFN 512, relative_causal positions, 50,000 words in a head factorised over 1,024
# own-word classes plus 512) for laya-train on the GPU and PyTorch on the same GPU
# (benchmarks/train-peer/torch_causal.py, eager and torch.compile), alternating, ROUNDS times.
#
#   bash scripts/gpu-check.sh [DIR] [ROUNDS] [BATCHES]     (defaults: .device/gpu, 2, "512 2048")
#
# BASELINE=DIR2 adds DIR2's throughput example to each round, before DIR's (e.g. one packed by
# `LAYA_CANDLE_UNPATCHED=1 scripts/build-cuda.sh DIR2`, to compare against the published candle-core).
set -uo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.device/gpu}
ROUNDS=${2:-2}
BATCHES=${3:-512 2048}
for f in laya cuda-test throughput; do
    if [ -f "$DIR/$f.xz" ]; then xz -df "$DIR/$f.xz"; fi
    chmod +x "$DIR/$f"
done
BASELINE=${BASELINE:-}
if [ -n "$BASELINE" ]; then
    if [ -f "$BASELINE/throughput.xz" ]; then xz -df "$BASELINE/throughput.xz"; fi
    chmod +x "$BASELINE/throughput"
fi
# NCCL (`laya train --gpus`): the library PyTorch brings; NVLink multicast stays off.
nccl_lib=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib"))')
export LD_LIBRARY_PATH="$nccl_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch; print("torch", torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))'
echo "## GPU against CPU (crates/laya-train/tests/cuda.rs)"
"$DIR/cuda-test" --nocapture --test-threads=1 2>&1 | grep -E "^test |loss|test result|panicked"
echo "## laya train --device cuda: a small run end to end (scripts/gpu-smoke.py), then a prediction"
smoke=$(mktemp -d)
python3 scripts/gpu-smoke.py "$smoke"
"$DIR/laya" train --device cuda --events "$smoke/events.jsonl" --lexicon "$smoke/lexicon.tsv" --epochs 2 \
    --batch-size 256 --word-classes 16 --out "$smoke/m.laya" 2>&1 | grep -vE "^\s*$" | tail -4
"$DIR/laya" predict --model "$smoke/m.laya" "$(head -1 "$smoke/events.jsonl" | python3 -c 'import json,sys; print(json.load(sys.stdin)["context"])')" | head -3
"$DIR/laya" train --device cuda:99 --events "$smoke/events.jsonl" --lexicon "$smoke/lexicon.tsv" --out "$smoke/x.laya" 2>&1 | tail -1
echo "## Several GPUs: laya train --gpus N, 200,000 events, the shipped network (200 words; docs/training.md)"
gpus=$(nvidia-smi -L | wc -l)
big=$(mktemp -d)
python3 scripts/gpu-smoke.py "$big" 200000
for g in 0 $(seq 1 "$gpus"); do
    flags=""
    [ "$g" = 0 ] || flags="--gpus $g"
    echo "# ${flags:-one GPU without --gpus}"
    # shellcheck disable=SC2086
    "$DIR/laya" train --device cuda $flags --events "$big/events.jsonl" --lexicon "$big/lexicon.tsv" --epochs 1 \
        --batch-size 512 --out "$big/m$g.laya" 2>&1 | grep -E "GPUs|samples/s|training time|^1 " 
done
[ "$gpus" -ge 2 ] || echo "(one GPU here: the ranks' test above and this table need two)"
echo "## Throughput, samples/s (V 50,000)"
export LAYA_LAYERS=3 LAYA_FFN=512 LAYA_D_MODEL=192 LAYA_HEADS=3 LAYA_POSITIONS=relative_causal LAYA_WORD_CLASSES=512 LAYA_OWN_CLASS_WORDS=1024
for round in $(seq "$ROUNDS"); do
    for b in $BATCHES; do
        if [ -n "$BASELINE" ]; then
            LAYA_DEVICE=cuda LAYA_STEPS=60 "$BASELINE/throughput" --child 50000 table "$b" | sed 's/^/baseline: /'
        fi
        LAYA_DEVICE=cuda LAYA_STEPS=60 "$DIR/throughput" --child 50000 table "$b"
        python3 benchmarks/train-peer/torch_causal.py 50000 "$b" cuda
        LAYA_TORCH_COMPILE=1 python3 benchmarks/train-peer/torch_causal.py 50000 "$b" cuda 2>&1 | tail -1
    done
done
echo "## Where a step's time goes (laya, batch 512, one graph timed phase by phase)"
LAYA_STEP=whole LAYA_DEVICE=cuda LAYA_STEPS=40 "$DIR/throughput" --child 50000 table 512
