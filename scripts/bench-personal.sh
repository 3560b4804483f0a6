#!/usr/bin/env bash
# What a learned history costs per keystroke (docs/personalisation.md): `laya bench` with user
# files of about 1,000 and 10,000 learned words, learned from the
# first lines of the training text (`laya user learn`), in one run on this machine. Prints a
# markdown table; the user files stay in $OUT (default target/bench-personal) and are reused
# when present (so the timing can run on another machine without the training text).
#
#   scripts/bench-personal.sh [MODEL]     (default: the embedded model)
#     LAYA=path/to/laya (default target/release/laya), ITER=N timed predictions (default 20000)
set -euo pipefail
cd "$(dirname "$0")/.."
LAYA=${LAYA:-target/release/laya}
ITER=${ITER:-20000}
OUT=${OUT:-target/bench-personal}
TEXT=data/zh/mix-train.txt
MODEL_ARGS=()
[[ -n "${1:-}" ]] && MODEL_ARGS=(--model "$1")
[[ -x "$LAYA" ]] || { echo "bench-personal: $LAYA not found; cargo build --release -p laya-cli" >&2; exit 1; }
[[ -s "$TEXT" || ( -s "$OUT/u1k.layu" && -s "$OUT/u10k.layu" ) ]] ||
    { echo "bench-personal: missing $TEXT (scripts/fetch-data.sh, train-default.sh)" >&2; exit 1; }
mkdir -p "$OUT"

# Lines of the training text that give about 1,000 and 10,000 distinct learned words.
make_user() { # name target_words
    local file="$OUT/$1.layu" lines=50
    [[ -s "$file" ]] && return
    while :; do
        rm -f "$file"
        head -n "$lines" "$TEXT" > "$OUT/$1.txt"
        "$LAYA" user learn "$file" --text "$OUT/$1.txt" "${MODEL_ARGS[@]}" > /dev/null
        local words
        words=$("$LAYA" user export "$file" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["words"]))')
        (( words >= $2 )) && break
        lines=$(( lines * 3 / 2 ))
    done
}
make_user u1k 1000
make_user u10k 10000

# Each history is timed in one loop that alternates with a session without it (`laya bench
# --user`), so the difference is measured under the same conditions.
echo "| learned words | user file bytes | p50 µs with | p50 µs without | p99 µs with | p99 µs without | allocations per prediction |"
echo "|--------------:|----------------:|------------:|---------------:|------------:|---------------:|---------------------------:|"
for u in u1k u10k; do
    "$LAYA" bench --json --iterations "$ITER" --cold-runs 1 "${MODEL_ARGS[@]}" --user "$OUT/$u.layu" |
        python3 -c '
import json, sys
r = json.load(sys.stdin)
print("| %d | %s | %.2f | %.2f | %.2f | %.2f | %g |" % (r["user_words"], sys.argv[1], r["p50_us"], r["p50_us_without_user"],
      r["p99_us"], r["p99_us_without_user"], r["allocations_per_prediction"]))
' "$(stat -c %s "$OUT/$u.layu")"
done
