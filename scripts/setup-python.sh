#!/usr/bin/env bash
# Creates the repository's Python environment (.venv at the workspace root) used by the
# interoperability tests (crates/laya-format/tests/interop.rs runs scripts/gguf_interop.py).
# Idempotent: re-running only installs what is missing.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
if .venv/bin/python -c 'import gguf, numpy, xxhash, importlib.metadata as m; assert m.version("gguf") == "0.19.0"' 2>/dev/null; then
    echo "setup-python: .venv already has gguf 0.19.0, numpy and xxhash"
    exit 0
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check 'gguf==0.19.0' numpy xxhash
.venv/bin/python -c 'import gguf, numpy, xxhash; print("setup-python: ready (gguf", __import__("importlib.metadata").metadata.version("gguf") + ")")'
