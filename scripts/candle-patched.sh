#!/usr/bin/env bash
# Prepares candle-core 0.11.1 with scripts/patches/candle-core-0.11.1-first-gradient.patch and
# sets CANDLE_PATCH, the `cargo --config` argument that builds against it:
#
#   source scripts/candle-patched.sh && cargo build --config "$CANDLE_PATCH" ...
#
# From the repository root, in a shell of its own (a script): it sets that shell's EXIT trap.
#
# Why: candle's backward pass starts every node's gradient as a zero tensor and adds the first
# gradient into it (a fill and an add of activation size per graph edge); the patch stores the
# first gradient as it is and adds only from the second. Sums are unchanged (0 + g is g), so
# the default build keeps the crate as published; the CUDA build (scripts/build-cuda.sh), where
# these adds were the largest kernel cost of a step, and the CPU trainer of the training scripts
# (scripts/build-trainer.sh) use the patch (docs/training.md, "On a GPU"). The published source
# comes from cargo's own download of the pinned version (Cargo.lock).
dir=target/patched/candle-core
mkdir -p target/patched || return 1
src=$(cargo metadata --format-version 1 --locked 2>/dev/null | python3 -c '
import json, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "candle-core" and p["version"] == "0.11.1" and (p.get("source") or "").startswith("registry+"):
        print(p["manifest_path"].rsplit("/", 1)[0])') || return 1
if [ -z "$src" ]; then echo "candle-core 0.11.1 from crates.io not found in cargo metadata" >&2; return 1; fi
stamp=$(sha256sum scripts/patches/candle-core-0.11.1-first-gradient.patch | cut -c1-16)
if [ ! -f "$dir/.patched-$stamp" ]; then
    rm -rf "$dir" && cp -r "$src" "$dir" || return 1
    patch -s -p1 -d "$dir" < scripts/patches/candle-core-0.11.1-first-gradient.patch || return 1
    touch "$dir/.patched-$stamp"
fi
CANDLE_PATCH="patch.crates-io.candle-core.path=\"$(cd "$dir" && pwd)\""
export CANDLE_PATCH
# Cargo records the patched source in Cargo.lock: the repository's lock file is put back when
# the shell that sourced this exits (its EXIT trap).
cp Cargo.lock target/patched/Cargo.lock.orig || return 1
trap 'cp target/patched/Cargo.lock.orig Cargo.lock' EXIT
