#!/usr/bin/env bash
# The whole test suite from a clean clone: installs what the tests need, then runs them.
# CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The interop and numerics tests run the standard `gguf` package and a numpy reference.
scripts/setup-python.sh

# The C ABI test compiles a C program with the system compiler.
command -v cc >/dev/null || { echo "test.sh: a C compiler (cc) is required" >&2; exit 1; }

# The training scripts' test (crates/laya-cli/tests/scripts.rs) compresses with xz; the CUDA
# build's candle-core patch is applied with patch (below).
if ! command -v xz >/dev/null || ! command -v patch >/dev/null; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null || true
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq xz-utils patch >/dev/null \
    || { echo "test.sh: could not install xz-utils and patch (apt-get)" >&2; exit 1; }
fi

# The typing page's test (crates/laya-cli/tests/browser.rs) drives Debian's chromium through
# chromedriver; a CJK font makes its screenshot legible. Installed when missing, then required.
if ! command -v chromedriver >/dev/null || ! fc-list 2>/dev/null | grep -qi wqy; then
  sudo=""; [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq >/dev/null || true
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver fonts-wqy-microhei >/dev/null \
    || { echo "test.sh: could not install chromium, chromium-driver and fonts-wqy-microhei (apt-get)" >&2; exit 1; }
fi
export LAYA_BROWSER_TESTS=required LAYA_CHROMEDRIVER="$(command -v chromedriver)"

# A one-shot CI build gains nothing from incremental caches (1.4 GB of disk).
[ -z "${CI:-}" ] || export CARGO_INCREMENTAL=0

cargo test --workspace --locked "$@"

# The CUDA build and the training scripts' CPU trainer use candle-core patched
# (scripts/candle-patched.sh); the trainer's tests, which pin every fused op's gradient to
# candle's own backward pass, run again against it (on the whole suite only, not when arguments
# narrow it).
if [ $# -eq 0 ]; then
  # shellcheck source=scripts/candle-patched.sh
  source scripts/candle-patched.sh
  cargo test --config "$CANDLE_PATCH" -p laya-train
fi
