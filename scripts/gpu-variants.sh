#!/usr/bin/env bash
# Trains variants of the default model side by side on one GPU machine, for the capacity table
# of docs/training.md ("What a bigger network, a larger lexicon or more epochs buy"). The GPU
# machine has no network and takes a small upload, so the inputs travel compressed and the
# simulated logs (1.2 GB) are made there.
#
# Here (after scripts/train-default.sh has made data/zh, and scripts/build-cuda.sh the binary):
#   scripts/gpu-variants.sh pack [DIR]
#     compresses the training text, the dev text, lexicon.tsv, ngram.json and the dictionaries
#     of the prior of data/zh (or LAYA_DATA_DIR: runs/en for English, which has wordfreq's list
#     only) into DIR (.device/data)
#   scripts/gpu-variants.sh pack-set NAME LEXICON NGRAM [DIR]
#     adds another lexicon with the n-gram trained over it (`laya lexicon --size`, `laya ngram`)
#     as DIR/NAME, for the variants that name it
# There:
#   bash scripts/gpu-variants.sh train DATA_DIR LAYA OUT_DIR VARIANT...
#     simulates the logs, runs every VARIANT's three stages (scripts/train-stages.sh) at once
#     on the GPU (LAYA_DEVICE, default cuda), then attaches the prior and quantises each to OUT_DIR/NAME.laya, like
#     scripts/train-default.sh. A VARIANT is NAME:LAYERS:FFN:D_MODEL:HEADS:STAGE1:STAGE2:STAGE3:EPOCHS3
#     with an optional :SET naming a pack-set lexicon ("." for the pack's own) and an optional
#     :BUCKETS/ORDERS giving the network an output memory (`laya train --memory-buckets BUCKETS
#     --memory-orders ORDERS`, e.g. 131072/2,3,4) (the shipped model:
#     default:3:512:192:3:2000000:2000000:3500000:2). LAYA_KEEP_F16="NAME..." also keeps those
#     variants' F16 masters (xz, in parts under 16 MiB) and loss curves in OUT_DIR. The prior
#     uses the dictionaries the pack has; LAYA_LANGUAGE, LAYA_NAME, LAYA_TRAINING_DATA and the
#     other variables of scripts/train-stages.sh pass through (LAYA_STAGE3_SECONDS ends stage 3
#     in time for the machine's call limit: simulating, stages 1 and 2 and the prior come first).
#     LAYA_INIT_F16=FILE (a master that came back) makes every VARIANT continue FILE with stage 3
#     only, so a recipe longer than one job runs as several (scripts/train-english.sh's header).
# Back here, scripts/eval-genres.sh OUT_DIR/NAME.laya NGRAM types the dev genres with each.
set -euo pipefail
cd "$(dirname "$0")/.."
INPUTS=(mix-train.txt mix-dev.txt lexicon.tsv ngram.json dict.txt wordfreq.txt essay.txt)
case "${1:-}" in
pack)
    out=${2:-.device/data}
    mkdir -p "$out"
    for f in "${INPUTS[@]}"; do
        src=${LAYA_DATA_DIR:-data/zh}/$f
        case $f in dict.txt | essay.txt) [ -f "$src" ] || continue ;; esac
        xz -T0 -6 -c "$src" > "$out/$f.xz"
    done
    ls -l "$out"
    ;;
pack-set)
    out=${5:-.device/data}/$2
    mkdir -p "$out"
    xz -T0 -6 -c "$3" > "$out/lexicon.tsv.xz"
    xz -T0 -6 -c "$4" > "$out/ngram.json.xz"
    ls -l "$out"
    ;;
train)
    data=$2 laya=$3 out=$4
    shift 4
    [ $# -gt 0 ] || { echo "gpu-variants: name at least one VARIANT" >&2; exit 2; }
    [ -f "$laya.xz" ] && xz -dkf "$laya.xz"
    chmod +x "$laya"
    work=$(mktemp -d)
    dicts=()
    for f in "${INPUTS[@]}"; do
        [ -f "$data/$f.xz" ] || continue
        xz -dc "$data/$f.xz" > "$work/$f"
        case $f in dict.txt | wordfreq.txt | essay.txt) dicts+=(--dict "$work/$f") ;; esac
    done
    mkdir -p "$out"
    SECONDS=0
    # One set of logs per lexicon: simulated with the n-gram over that lexicon.
    sets=()
    for v in "$@"; do
        IFS=: read -r _ _ _ _ _ _ _ _ _ lex _ <<< "$v"
        sets+=("${lex:-.}")
    done
    sims=()
    for lex in $(printf '%s\n' "${sets[@]}" | sort -u); do
        mkdir -p "$work/$lex"
        for f in lexicon.tsv ngram.json; do
            [ "$lex" = . ] || xz -dc "$data/$lex/$f.xz" > "$work/$lex/$f"
        done
        for f in train dev; do
            "$laya" simulate --text "$work/mix-$f.txt" --ngram "$work/$lex/ngram.json" \
                --out "$work/$lex/$f-events.jsonl" &
            sims+=($!)
        done
    done
    for p in "${sims[@]}"; do wait "$p"; done
    echo "logs simulated in ${SECONDS} s"
    pids=()
    for v in "$@"; do
        IFS=: read -r name layers ffn dm heads s1 s2 s3 e3 lex memory <<< "$v"
        lex=${lex:-.}
        memory=${memory:-0/2,3,4}
        (
            start=$SECONDS
            LAYA_BIN=$laya LAYA_DEVICE=${LAYA_DEVICE:-cuda} LAYA_LAYERS=$layers LAYA_FFN=$ffn LAYA_D_MODEL=$dm \
                LAYA_HEADS=$heads LAYA_STAGE1_EVENTS=$s1 LAYA_STAGE2_EVENTS=$s2 LAYA_STAGE3_EVENTS=$s3 \
                LAYA_STAGE3_EPOCHS=$e3 LAYA_MEMORY_BUCKETS=${memory%%/*} LAYA_MEMORY_ORDERS=${memory#*/} scripts/train-stages.sh "$work/$lex" "$work/run-$name" "$work/$name-f16.laya" \
                > "$out/$name.log" 2>&1
            "$laya" prior "${dicts[@]}" "$work/$name-f16.laya" "$work/$name-f16.laya" >> "$out/$name.log"
            "$laya" quantize "$work/$name-f16.laya" "$out/$name.laya" >> "$out/$name.log"
            if [ "$(stat -c %s "$out/$name.laya")" -gt 15728640 ]; then
                # Too large to come back whole (an output memory): in parts, like the masters.
                xz -T0 -6 -c "$out/$name.laya" | split -b 15M -d - "$out/$name.laya.xz."
                rm "$out/$name.laya"
            fi
            case " ${LAYA_KEEP_F16:-} " in
            *" $name "*)
                # A file comes back from the GPU machine only under 16 MiB: the master travels
                # compressed, in parts (here: cat NAME-f16.laya.xz.* | xz -d > NAME-f16.laya).
                xz -T0 -6 -c "$work/$name-f16.laya" | split -b 15M -d - "$out/$name-f16.laya.xz."
                cp "$work/$name-f16.loss.svg" "$out/"
                ;;
            esac
            echo "$name: trained in $((SECONDS - start)) s" | tee -a "$out/$name.log"
        ) &
        pids+=($!)
    done
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=1; done
    ls -l "$out"
    exit $status
    ;;
*)
    sed -n '2,28p' "$0" >&2
    exit 2
    ;;
esac
