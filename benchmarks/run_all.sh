#!/usr/bin/env bash
# Runs the README's benchmark matrix with prebuilt binaries in target/bench-bin/ (see README):
# laya-base / laya-new (`laya bench`, p50 of 3000 predictions, min over RUNS runs) and
# harness-base / harness-new per kernel level (min / p10 / p50 and median stage times).
# Usage: benchmarks/run_all.sh OUTDIR [RUNS] [LEVELS...]
set -euo pipefail
out=${1:?outdir}; runs=${2:-3}; shift 2 || true
levels=("${@:-auto}")
bin=target/bench-bin
models=${MODELS:-/tmp/laya-bench-models}
mkdir -p "$out" "$models"
for v in 512 20000; do for t in f32 f16 q8_0 q4_1; do
  [ -f "$models/seed-$v-$t.laya" ] || "$bin/random_model" "$models/seed-$v-$t.laya" $v $t >/dev/null
done; done
for v in 512 20000; do for t in f32 f16 q8_0 q4_1; do
  m="$models/seed-$v-$t.laya"
  for which in base new; do
    for r in $(seq "$runs"); do
      p50=$("$bin/laya-$which" bench --model "$m" --cold-runs 1 --iterations 3000 --json \
        | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["p50_us"], d["peak_fraction"], d["macs_per_prediction"], d["kernel_level"])')
      echo "bench $which $v $t $p50" | tee -a "$out/bench.txt"
    done
    for l in "${levels[@]}"; do
      "$bin/harness-$which" "$m" "$l" 2000 | sed "s/^/harness $which /" | tee -a "$out/harness.txt"
    done
  done
done; done
