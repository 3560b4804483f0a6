#!/usr/bin/env bash
# Types every Chinese dev genre with a model and with the n-gram trained on the same data
# (`laya eval`; docs/data.md, "How evaluation types these files") and prints one markdown table: the evaluation table of the
# README. Needs the files of scripts/fetch-data.sh and train-default.sh.
#
#   scripts/eval-genres.sh [MODEL [NGRAM]] [-- extra laya eval flags]
#     MODEL: default models/default.laya; NGRAM: default data/zh/ngram.json ("-" skips the n-gram)
#     LAYA=path/to/laya (default target/release/laya), LAYA_EVAL_LIMIT=N (default 1000 lines a genre)
#     LAYA_EVAL_LEARN=1: each predictor twice, without and with `--learn` (lines typed in order,
#     each learned after it was typed; docs/personalisation.md)
#     LAYA_EVAL_GENRES="name|file;name|file…": other texts than the Chinese dev genres
#     (scripts/train-english.sh types the English ones)
#     LAYA_EVAL_NGRAM_WEIGHTS="w …": also the model and the n-gram interpolated at each weight
#     (`laya eval --predictor interpolated --ngram-weight w`; docs/training.md)
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-models/default.laya}
NGRAM=${2:-data/zh/ngram.json}
shift $(( $# < 2 ? $# : 2 ))
[[ "${1:-}" == "--" ]] && shift
LAYA=${LAYA:-target/release/laya}
LIMIT=${LAYA_EVAL_LIMIT:-1000}
LEARN=${LAYA_EVAL_LEARN:-0}
D=data/zh
[[ -x "$LAYA" ]] || { echo "eval-genres: $LAYA not found; cargo build --release -p laya-cli" >&2; exit 1; }
[[ -s "$MODEL" ]] || { echo "eval-genres: no model at $MODEL" >&2; exit 1; }

# genre name, dev file: the reviews and held-out People's Daily 1998 (the previous evaluation
# texts) and the held-out dev split of every new training genre (docs/data.md).
DEFAULT_GENRES=(
    "reviews|$D/valid.txt"
    "news 1998 (held out)|$D/heldout-raw.txt"
    "news 2013|$D/genre/news2013/dev.txt"
    "subtitles|$D/genre/subtitles/dev.txt"
    "formal|$D/genre/formal/dev.txt"
    "dialogue|$D/genre/dialogue/dev.txt"
    "tech|$D/genre/tech/dev.txt"
    "ui|$D/genre/ui/dev.txt"
)
GENRES=("${DEFAULT_GENRES[@]}")
[[ -n "${LAYA_EVAL_GENRES:-}" ]] && IFS=';' read -r -a GENRES <<< "$LAYA_EVAL_GENRES"
echo "| genre | predictor | ksr | top1_k0 | top5_k0 | top1_k1 | top5_k1 | oov_rate | words |"
echo "|-------|-----------|----:|--------:|--------:|--------:|--------:|---------:|------:|"
for g in "${GENRES[@]}"; do
    name=${g%%|*} file=${g#*|}
    [[ -s "$file" ]] || { echo "eval-genres: missing $file (scripts/fetch-data.sh, train-default.sh)" >&2; exit 1; }
    preds=(model)
    [[ "$NGRAM" != "-" ]] && preds+=(ngram)
    runs=()
    for p in "${preds[@]}"; do
        runs+=("$p|")
        [[ "$LEARN" == 1 ]] && runs+=("$p|--learn")
    done
    if [[ "$NGRAM" != "-" ]]; then
        for w in ${LAYA_EVAL_NGRAM_WEIGHTS:-}; do runs+=("interpolated|--ngram-weight $w"); done
    fi
    for run in "${runs[@]}"; do
        p=${run%%|*} flags=${run#*|}
        case $flags in
            --learn) label="$p + learning" ;;
            --ngram-weight*) label="model + n-gram (w ${flags#--ngram-weight })" ;;
            *) label=$p ;;
        esac
        "$LAYA" eval --model "$MODEL" --predictor "$p" --ngram "$NGRAM" --text "$file" --limit "$LIMIT" --json $flags "$@" |
            python3 -c '
import json, sys
r = json.load(sys.stdin)
name, p = sys.argv[1], sys.argv[2]
keys = ("ksr", "top1_k0", "top5_k0", "top1_k1", "top5_k1", "oov_rate")
print("| " + " | ".join([name, p] + ["%.4f" % r[k] for k in keys] + [str(r["words"])]) + " |")
' "$name" "$label"
    done
done
