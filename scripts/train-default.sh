#!/usr/bin/env bash
# Reproduces the embedded default Chinese model (models/default.laya) from nothing: fetch the
# corpora, mix the training text, choose the lexicon, train the n-gram baseline, simulate
# keyboard logs, train the transformer with the click-weighted objective (its F16 export, the
# master that `--init` and `laya quantize` start from, is written next to it as
# models/default-f16.laya), attach the broad word frequencies as the completion prior
# (`laya prior`), quantise it (INT4 embedding with compensation, INT8 linears and heads), store
# a word trigram cut with the model's own words in it (`laya ngram --cut lexicon`, `laya
# attach-ngram`: every session mixes it in), and evaluate model and baseline on every dev genre
# (scripts/eval-genres.sh). The word head is factorised over about 512 classes
# (LAYA_WORD_CLASSES=0: a flat head, 5-10 times slower per keystroke).
# README "The default model" states where and how fast the committed files were made;
# LAYA_STAGE{1,2,3}_EVENTS scale the stages down. LAYA_DEVICE=cuda (or cuda:N) trains the
# three stages on an NVIDIA GPU, with the laya that scripts/build-cuda.sh builds
# (target/cuda/release/laya; docs/training.md "On a GPU"); on the CPU the stages run the laya
# of scripts/build-trainer.sh (the same model to the byte, faster; LAYA_CANDLE_UNPATCHED=1: the
# plain build); LAYA_BIN names another binary.
#
#   scripts/train-default.sh [OUT_MODEL]     (default: models/default.laya; F16: OUT_MODEL with -f16)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-models/default.laya}
OUT_F16="${OUT%.laya}-f16.laya"
D=data/zh
G=$D/genre
# The training text: People's Daily 1998-01 (its gold segmentation removed) and the train split
# of every genre of docs/data.md, at these weights (an even stride of weight × the file's lines;
# docs/data.md "The training mix" compares the mixes that were tried).
read -r -a MIX <<< "${LAYA_MIX:-$D/train-raw.txt:0.5 $G/news2013/train.txt:1 $G/subtitles/train.txt:1 $G/formal/train.txt:0.17 $G/dialogue/train.txt:1 $G/tech/train.txt:1 $G/ui/train.txt:1}"
# Validation log of the trainer: the dev split of every genre and held-out news.
DEVS=($D/heldout-raw.txt $G/news2013/dev.txt $G/subtitles/dev.txt $G/formal/dev.txt $G/dialogue/dev.txt $G/tech/dev.txt $G/ui/dev.txt)
# The lexicon: the 50,000 most useful words of the mix, with the average of jieba's, wordfreq's
# and rime's frequencies as a prior at a tenth of the corpus's weight.
LEXICON_SIZE=${LAYA_LEXICON_SIZE:-50000}
DICT_WEIGHT=${LAYA_DICT_WEIGHT:-0.1}
DICTS=(--dict $D/dict.txt --dict $D/wordfreq.txt --dict $D/essay.txt)
# The network is trained in three stages by scripts/train-stages.sh (LAYA_STAGE{1,2,3}_EVENTS,
# LAYA_STAGE3_EPOCHS, LAYA_WORD_CLASSES, LAYA_OWN_CLASS_WORDS and the size variables it lists).

scripts/fetch-data.sh
cargo build --release -p laya-cli
LAYA=target/release/laya
DEVICE=${LAYA_DEVICE:-cpu}
TRAIN_LAYA=${LAYA_BIN:-$LAYA}
if [ "$DEVICE" != cpu ] && [ -z "${LAYA_BIN:-}" ]; then
    scripts/build-cuda.sh >/dev/null
    TRAIN_LAYA=target/cuda/release/laya
elif [ -z "${LAYA_BIN:-}" ] && [ "${LAYA_CANDLE_UNPATCHED:-0}" != 1 ]; then
    TRAIN_LAYA=$(scripts/build-trainer.sh)
fi
mkdir -p "$(dirname "$OUT")"

# People's Daily as typed: its gold segmentation's spaces removed (kept only between two ASCII
# letters or digits), to be cut again by Laya's own segmenter like every other text.
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
done
python3 scripts/mix_corpus.py --out $D/mix-train.txt "${MIX[@]}"
cat "${DEVS[@]}" > $D/mix-dev.txt

VALID=()
for f in $D/valid.txt "${DEVS[@]}"; do VALID+=(--valid "$f"); done
$LAYA lexicon --train $D/mix-train.txt "${DICTS[@]}" --size "$LEXICON_SIZE" --dict-weight "$DICT_WEIGHT" \
    "${VALID[@]}" --out $D/lexicon.tsv
$LAYA ngram --train $D/mix-train.txt --lexicon $D/lexicon.tsv --out $D/ngram.json
# The logs depend on the lexicon and the n-gram, so they are simulated on every run (a few
# minutes on two cores; the same bytes for the same inputs): a log of another lexicon is never
# reused.
$LAYA simulate --text $D/mix-train.txt --ngram $D/ngram.json --out $D/train-events.jsonl
$LAYA simulate --text $D/mix-dev.txt --ngram $D/ngram.json --out $D/dev-events.jsonl

LAYA_BIN=$TRAIN_LAYA LAYA_DEVICE=$DEVICE scripts/train-stages.sh $D runs/default "$OUT_F16"
# The completion prior: each lexicon word's broad frequency (the same three lists), so
# completions are ranked for the genres a keyboard meets rather than the training mix's
# (docs/format.md §3 step 6).
$LAYA prior "${DICTS[@]}" "$OUT_F16" "$OUT_F16"
$LAYA quantize "$OUT_F16" "$OUT"
$LAYA ngram --train $D/mix-train.txt --model "$OUT" --cut lexicon --out $D/ngram-model.json
$LAYA attach-ngram "$OUT" $D/ngram-model.json --out "$OUT"
scripts/eval-genres.sh "$OUT" $D/ngram.json
