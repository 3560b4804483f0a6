#!/usr/bin/env bash
# Sizes of what a keyboard embeds, stripped: the C library (shared and static) and a `laya`
# binary without the training commands (scripts/build-predict-only.sh: statically linked on
# glibc Linux), next to the full binary. The embedded models
# (models/default.laya, models/en.laya) are part of both binaries' size; each has its own line.
#   scripts/sizes.sh            # builds what it measures (release), prints a markdown table
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/sizes
mkdir -p "$out"

cargo build -q --release -p laya-ffi
cargo build -q --release -p laya-cli
cp target/release/laya "$out/laya-full"
cp "$(scripts/build-predict-only.sh)" "$out/laya-predict-only"
cp target/release/liblaya_ffi.so target/release/liblaya_ffi.a "$out/"
for f in laya-full laya-predict-only liblaya_ffi.so liblaya_ffi.a; do
  cp "$out/$f" "$out/$f.stripped"
  strip --strip-debug "$out/$f.stripped" 2>/dev/null || true
  [[ $f == *.a ]] || strip "$out/$f.stripped"
done

size() { stat -c %s "$1"; }
mb() { awk -v b="$1" 'BEGIN { printf "%.1f MB", b / 1e6 }'; }
model=$(size models/default.laya)
english=$(size models/en.laya)
echo "| artefact | as built | stripped |"
echo "|---|--:|--:|"
for f in liblaya_ffi.so liblaya_ffi.a laya-predict-only laya-full; do
  echo "| \`$f\` | $(mb "$(size "$out/$f")") | $(mb "$(size "$out/$f.stripped")") |"
done
echo "| of which the embedded \`models/default.laya\` (binaries only) | $(mb "$model") | $(mb "$model") |"
echo "| of which the embedded \`models/en.laya\` (binaries only) | $(mb "$english") | $(mb "$english") |"
echo
echo "candle in laya-ffi's dependencies: $(cargo tree -q -p laya-ffi -e normal | grep -c candle || true)"
echo "candle in the predict-only laya:   $(cargo tree -q -p laya-cli --no-default-features -e normal | grep -c candle || true)"
