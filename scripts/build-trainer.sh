#!/usr/bin/env bash
# Builds the `laya` that the training scripts run on the CPU: the release binary against
# candle-core with scripts/patches/candle-core-0.11.1-first-gradient.patch
# (scripts/candle-patched.sh says what it changes). It trains the same model to the byte, about 15%
# faster on two cores (docs/training.md, "On a GPU"). Prints the binary's path on stdout.
#
#   scripts/build-trainer.sh          (-> target/patched/release/laya; about 5 minutes cold)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/candle-patched.sh
source scripts/candle-patched.sh
CARGO_TARGET_DIR=target/patched cargo build --release -p laya-cli --config "$CANDLE_PATCH" >&2
echo target/patched/release/laya
