#!/usr/bin/env bash
# Builds `laya` without the training commands (`--no-default-features`: no candle, what a
# device that only predicts needs), statically linked where the host is glibc Linux on x86-64 or
# aarch64, and prints the binary's path. A statically linked process skips the dynamic loader
# and its three libraries: it starts ~0.4 ms sooner on the 2-core development VM, a sixth of
# the embedded default's cold start (docs/architecture.md, "The process itself").
#   scripts/build-predict-only.sh      # → target/predict-only/<host>/release/laya
# `+crt-static` must not reach proc-macros, which are libraries loaded by the compiler, so the
# target is named explicitly: RUSTFLAGS then apply to the binary's crates only.
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
case "$host" in
  x86_64-unknown-linux-gnu | aarch64-unknown-linux-gnu)
    RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
      cargo build -q --release -p laya-cli --no-default-features --target "$host" --target-dir target/predict-only
    echo "target/predict-only/$host/release/laya" ;;
  *)
    cargo build -q --release -p laya-cli --no-default-features --target-dir target/predict-only
    echo "target/predict-only/release/laya" ;;
esac
