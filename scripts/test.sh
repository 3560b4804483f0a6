#!/usr/bin/env bash
# The whole test suite from a clean clone: installs what the tests need, then runs them.
# CI (.ci/run) calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

# The interop and numerics tests run the standard `gguf` package and a numpy reference.
scripts/setup-python.sh

# The C ABI test compiles a C program with the system compiler.
command -v cc >/dev/null || { echo "test.sh: a C compiler (cc) is required" >&2; exit 1; }

cargo test --workspace --locked "$@"
