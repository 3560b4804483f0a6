#!/usr/bin/env bash
# Prunes a model at two or more FFN levels, fine-tunes each briefly, and prints one markdown
# table of size, accuracy (docs/evaluation.md §2) and latency (laya bench) against the unpruned model.
#
#   scripts/prune-table.sh MODEL [FFN_SPEC ...]
#
# FFN_SPEC is what `laya prune --ffn` takes (192, or 192,128 per block); without any, the levels
# are --keep 0.75 and --keep 0.5 (FFN 256 → 192 and → 128 for the default model).
# Every level is measured twice: pruned only, and pruned + fine-tuned. A control row fine-tunes
# the unpruned model with the same budget, so the table separates what pruning costs from what
# the extra training buys.
#
# Environment: LAYA_PRUNE_EVENTS (fine-tuning events, default 20000), LAYA_PRUNE_EPOCHS (1),
# LAYA_EVAL_LIMIT (valid.txt lines, 1000), LAYA_BENCH_ITERATIONS (3000), LAYA_PRUNE_CONTROL
# (1: include the unpruned + fine-tune row), LAYA_PRUNE_DIR (runs/prune), LAYA (a prebuilt
# `laya` binary; default: build target/release/laya). Data: scripts/fetch-data.sh and
# scripts/train-default.sh (data/zh/train-events.jsonl, heldout-events.jsonl, valid.txt).
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:?usage: scripts/prune-table.sh MODEL [FFN_SPEC ...]}
shift
EVENTS=${LAYA_PRUNE_EVENTS:-20000}
EPOCHS=${LAYA_PRUNE_EPOCHS:-1}
LIMIT=${LAYA_EVAL_LIMIT:-1000}
ITER=${LAYA_BENCH_ITERATIONS:-3000}
CONTROL=${LAYA_PRUNE_CONTROL:-1}
DIR=${LAYA_PRUNE_DIR:-runs/prune}
D=data/zh

for f in "$MODEL" $D/train-events.jsonl $D/heldout-events.jsonl $D/valid.txt; do
    [[ -s $f ]] || { echo "prune-table: error: $f is missing (scripts/fetch-data.sh, scripts/train-default.sh)" >&2; exit 1; }
done
if [[ -z ${LAYA:-} ]]; then
    cargo build --release -p laya-cli
    LAYA=target/release/laya
fi
mkdir -p "$DIR"

# One even stride through the training log, written once: every level fine-tunes on the same
# events, and the 800 MB log is not parsed again for each level.
SUB=$DIR/train-events-$EVENTS.jsonl
if [[ ! -s $SUB ]]; then
    total=$(wc -l < $D/train-events.jsonl)
    awk -v n="$EVENTS" -v t="$total" 'int(NR * n / t) != int((NR - 1) * n / t)' $D/train-events.jsonl > "$SUB"
fi

if [[ $# -gt 0 ]]; then
    LEVELS=()
    for s in "$@"; do LEVELS+=("--ffn $s"); done
else
    LEVELS=("--keep 0.75" "--keep 0.5")
fi

# measure LABEL FILE PRUNE_JSON: one JSON line per model with eval, bench and the prune report.
RESULTS=$DIR/results.jsonl
: > "$RESULTS"
measure() {
    local label=$1 file=$2 report=${3:-null}
    echo "prune-table: evaluating $label" >&2
    local ev bench
    ev=$($LAYA eval --model "$file" --text $D/valid.txt --limit "$LIMIT" --json)
    bench=$($LAYA bench --model "$file" --iterations "$ITER" --json)
    python3 - "$label" "$file" "$report" "$ev" "$bench" >> "$RESULTS" <<'PY'
import json, os, sys
label, path, report, ev, bench = sys.argv[1:6]
print(json.dumps({"label": label, "bytes": os.path.getsize(path), "prune": json.loads(report),
                  "eval": json.loads(ev), "bench": json.loads(bench)}))
PY
}

prune() {
    local out=$1; shift
    echo "prune-table: laya prune $* -> $out" >&2
    RAYON_NUM_THREADS=1 $LAYA prune --json --model "$MODEL" --out "$out" "$@"
}

measure "unpruned" "$MODEL"
FT=(--events "$SUB" --valid-events $D/heldout-events.jsonl --max-valid-events 2000 --epochs "$EPOCHS")
if [[ $CONTROL == 1 ]]; then
    r=$(prune "$DIR/control.laya" --keep 1 "${FT[@]}")
    measure "unpruned + fine-tune" "$DIR/control.laya" "$r"
fi
i=0
for lv in "${LEVELS[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086 # a level is two words on purpose
    r=$(prune "$DIR/level$i-only.laya" $lv --epochs 0)
    measure "pruned ($lv)" "$DIR/level$i-only.laya" "$r"
    # shellcheck disable=SC2086
    r=$(prune "$DIR/level$i.laya" $lv "${FT[@]}")
    measure "pruned ($lv) + fine-tune" "$DIR/level$i.laya" "$r"
done

python3 - "$RESULTS" "$EVENTS" "$EPOCHS" "$LIMIT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
base = rows[0]
def params(r):
    p = r["prune"]
    return p["params_after"] if p else None
def widths(r):
    p = r["prune"]
    return ",".join(str(b["ffn_after"]) for b in p["blocks"]) if p else "(input)"
base_params = rows[1]["prune"]["params_before"] if len(rows) > 1 else None
print(f"Fine-tuning: {sys.argv[2]} events × {sys.argv[3]} epoch(s); eval: data/zh/valid.txt, first {sys.argv[4]} lines.\n")
print("| level | FFN widths | params | file size | top1_k0 | top5_k0 | top5_k1 | ksr | p50 µs | vs unpruned |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    e, b = r["eval"], r["bench"]
    p = params(r) or base_params
    vs = "—" if r is base else (
        f"top5_k0 {100*(e['top5_k0']-base['eval']['top5_k0']):+.2f} pt, ksr {100*(e['ksr']-base['eval']['ksr']):+.2f} pt, "
        f"p50 ×{b['p50_us']/base['bench']['p50_us']:.2f}, size ×{r['bytes']/base['bytes']:.2f}")
    print(f"| {r['label']} | {widths(r)} | {p:,} | {r['bytes']:,} | {e['top1_k0']:.4f} | {e['top5_k0']:.4f} | "
          f"{e['top5_k1']:.4f} | {e['ksr']:.4f} | {b['p50_us']:.0f} | {vs} |")
PY
