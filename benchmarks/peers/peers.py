#!/usr/bin/env python3
"""Driver of the peer benchmark (run through benchmarks/peers/run.sh, which sets everything up).

    peers.py OUT_DIR BIN_DIR LABEL=MODEL.laya[=NOTE] ...

For every model: runs Laya first (the reference), then each peer, each in its own process with
one thread, checks that every peer's top-5 word ids equal the top-5 of Laya's word logits on the
fixed contexts below, and prints one markdown table per model; then the same for the typing
mode (TYPING: every prefix of a text, in order; PEERS_TYPING_PASSES timed passes), its own
table. Saves OUT_DIR/peers.json and OUT_DIR/peers.md. Exits 1 when a peer disagrees with Laya (after writing the report), 0 otherwise;
a peer that cannot run at all (not installable, crashed) gets a row saying why and does not fail
the run.
"""
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ITERS = int(os.environ.get("PEERS_ITERS", "1000"))
WARMUP = int(os.environ.get("PEERS_WARMUP", "100"))
TIMEOUT_S = int(os.environ.get("PEERS_TIMEOUT_S", "900"))
# Largest allowed |peer - Laya| / max|Laya| over the word logits of one context.
REL_TOL = float(os.environ.get("PEERS_REL_TOL", "1e-3"))
# Typing mode: timed passes over the typing requests (after one untimed pass); 0 turns it off.
TYPING_PASSES = int(os.environ.get("PEERS_TYPING_PASSES", "2"))
PY_PEERS = ["onnxruntime", "torch", "torch-compile", "mlx", "mlx-compile"]
# PEERS_ONLY=laya,onnxruntime runs a subset (Laya is always run: every ratio is against it).
_only = [p for p in os.environ.get("PEERS_ONLY", "").split(",") if p]
PEERS = [p for p in ["laya", "candle"] + PY_PEERS if not _only or p == "laya" or p in _only]

# ~50 fixed contexts: Chinese, ASCII, mixed, full-width, empty, emoji, long, control characters.
CONTEXTS = [
    "", "今", "今天", "今天天气", "我们", "中华人民共和国", "人民日报", "经济发展", "在这个问题上",
    "他说：“", "北京市", "改革开放以来，我国", "新年", "国务院总理", "记者从", "二〇〇〇年",
    "一九九八年一月", "的", "了", "是", "我", "你好", "谢谢你的", "。", "，我们要",
    "a", "h", "hello", "hello wor", "the quick brown fox", "Hello World", "ABC", "123", "2024年",
    "typing pre", " ", "www.", "ｈｅｌｌｏ", "１２", "　今天",
    "😀", "😀😀", "好😀", "👍今天", "🇨🇳", "a😀b",
    "这是一个非常长的上下文，超过了十六个字符的窗口，只看最后的部分", "x" * 40, "\u0000", "\t\n", "中文 English 混合",
]

# Typing mode: this text typed one character at a time; every prefix (the empty one first) is a
# request, decided in order, so each request extends the one before it by one character — the
# case in which a runtime that keeps keys and values between keystrokes (relative_causal
# models) computes only the new position. Lines are separated by a newline, which is typed too.
TYPING_LINES = [
    "今天天气很好，我们一起去公园散步吧。",
    "改革开放以来，我国经济发展取得了举世瞩目的成就。",
    "他说：“这个问题我们明天上午再开会讨论一下。”",
    "国务院总理在北京人民大会堂会见了来访的外国客人。",
    "记者从有关部门了解到，新年期间全市交通运行平稳。",
    "Typing prediction runs on the device, not in the cloud.",
    "谢谢你的帮助，周末有空一起吃饭吗？",
    "The quick brown fox jumps over the lazy dog.",
    "这是一个非常长的上下文，超过了十六个字符的窗口，只看最后的部分。",
    "中文 English 混合输入也要能预测。",
]
TYPING_TEXT = "\n".join(TYPING_LINES)
TYPING = [TYPING_TEXT[:i] for i in range(len(TYPING_TEXT) + 1)]


def cpu_summary():
    model, flags = platform.processor() or "unknown", set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name") and model in ("unknown", "", "x86_64"):
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    wanted = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
              "avx_vnni", "avx512_bf16", "amx_tile"]
    have = [f for f in wanted if f in flags]
    missing = [f for f in wanted if f not in flags]
    return {"model": model, "cores_online": os.cpu_count(), "flags_present": have, "flags_absent": missing}


def run_peer(peer, model, ctx_path, typing_path, work):
    out, logits = os.path.join(work, peer + ".json"), os.path.join(work, peer + ".f32")
    typing_logits = os.path.join(work, peer + ".typing.f32")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    if peer in PY_PEERS:
        cmd = [sys.executable, os.path.join(HERE, "peer_py.py"), peer]
    else:
        cmd = [os.path.join(BIN_DIR, peer + "-peer")]
    cmd += [model, ctx_path, str(ITERS), str(WARMUP), out, logits]
    if TYPING_PASSES > 0:
        cmd += [typing_path, str(TYPING_PASSES), typing_logits]
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"peer": peer, "error": f"timed out after {TIMEOUT_S} s"}
    if p.returncode != 0:
        tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
        return {"peer": peer, "error": f"exit {p.returncode}: " + " | ".join(tail)}
    with open(out, encoding="utf-8") as f:
        r = json.load(f)
    r["logits"] = np.fromfile(logits, dtype="<f4").reshape(len(CONTEXTS), -1)
    if TYPING_PASSES > 0:
        if "typing_top5" not in r:
            return {"peer": peer, "error": "the peer did not run the typing mode"}
        r["typing_logits"] = np.fromfile(typing_logits, dtype="<f4").reshape(len(TYPING), -1)
        os.remove(typing_logits)  # up to 24 MB per peer and model; the gate below is its only use
    r["wall_s"] = time.time() - t0
    return r


def percentiles(times_ns):
    t = np.array(times_ns, dtype=np.float64) / 1e3
    return {"n_timed": int(t.size), "p50_us": float(np.percentile(t, 50)), "p99_us": float(np.percentile(t, 99)),
            "min_us": float(t.min())}


def stats(r):
    r.update(percentiles(r.pop("times_ns")))
    if "typing_times_ns" in r:
        r["typing"] = percentiles(r.pop("typing_times_ns"))


def reference_top5(logits):
    # Stable sort on the negated logits: ties go to the lower id, the rule of common.rs top_k.
    return [list(map(int, np.argsort(-row, kind="stable")[:5])) for row in logits]


def gate(top5, logits, ref_logits):
    """Top-5 agreement of a peer (`top5`, `logits`) with Laya's word logits (`ref_logits`, one row
    per request) and the largest relative logit difference."""
    ref_top = reference_top5(ref_logits)
    agree, near_ties, bad = 0, 0, []
    for i, (mine, ref) in enumerate(zip(top5, ref_top)):
        if mine == ref:
            agree += 1
            continue
        # Position by position, the id a peer put there must have (almost) the logit Laya's id
        # there has in Laya's own logits: then it was a near-tie that float noise broke, not a bug.
        row = ref_logits[i]
        scale = max(1e-6, float(np.abs(row).max()))
        gap = max(abs(float(row[a]) - float(row[b])) for a, b in zip(mine, ref)) if len(mine) == len(ref) else float("inf")
        if gap <= 1e-4 * scale:
            near_ties += 1
        else:
            bad.append((i, mine, ref))
    rel = np.abs(logits - ref_logits).max(axis=1) / np.maximum(np.abs(ref_logits).max(axis=1), 1e-6)
    return agree, near_ties, bad, float(rel.max())


def table(label, note, rows, laya):
    lines = [f"### {label} — isolated contexts", "", note, "",
             "| peer | p50 µs | p99 µs | cold start ms | (of which gguf-py read ms) | peak RSS MB | p50 / p50(Laya) | top-5 = Laya | max rel. logit diff | notes |",
             "|------|-------:|-------:|--------------:|------:|------------:|------:|:------|------:|-------|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['peer']} | — | — | — | — | — | — | not run | — | {r['error']} |")
            continue
        ratio = r["p50_us"] / laya["p50_us"] if laya and "p50_us" in laya else float("nan")
        read = f"{r['read_ms']:.0f}" if "read_ms" in r else "—"
        agree = agree_cell(r, "", len(CONTEXTS))
        lines.append(
            f"| {r['peer']} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['cold_start_ms']:.0f} | {read} | "
            f"{r['peak_rss_mb']:.0f} | {ratio:.2f}x | {agree} | {r['rel_diff']:.1e}{'' if r['logits_ok'] else ' **> tol**'} | {r.get('notes', '')} |")
    return "\n".join(lines)


def agree_cell(r, prefix, n):
    """`agreeing/n`, the near ties, and a loud flag when any context differs."""
    cell = f"{r[prefix + 'agree']}/{n}" + (f" (+{r[prefix + 'near_ties']} ties)" if r.get(prefix + "near_ties") else "")
    if r.get(prefix + "bad"):
        cell += f" **{len(r[prefix + 'bad'])} DIFFER**"
    return cell


def typing_table(label, rows, laya):
    n = len(TYPING)
    lines = [f"### {label} — typing", "",
             f"{len(TYPING_LINES)} lines ({n - 1} characters, Chinese and ASCII) typed one character at a time: "
             f"{n} requests (every prefix, in order), one untimed pass then {TYPING_PASSES} timed "
             f"({TYPING_PASSES * n} timed requests). Laya keeps one `Session` for the whole sequence "
             "(on a relative_causal model its runtime may reuse the previous request's keys and values); "
             "every peer recomputes each request from scratch (a static graph keeps no state between "
             "runs).", "",
             "| peer | p50 µs | p99 µs | p50 / p50(Laya) | p99 / p99(Laya) | top-5 = Laya | max rel. logit diff |",
             "|------|-------:|-------:|------:|------:|:------|------:|"]
    for r in rows:
        if "error" in r or "typing" not in r:
            lines.append(f"| {r['peer']} | — | — | — | — | not run | — |")
            continue
        t, lt = r["typing"], laya["typing"]
        agree = agree_cell(r, "typing_", n)
        lines.append(
            f"| {r['peer']} | {t['p50_us']:.0f} | {t['p99_us']:.0f} | {t['p50_us'] / lt['p50_us']:.2f}x | "
            f"{t['p99_us'] / lt['p99_us']:.2f}x | {agree} | {r['typing_rel_diff']:.1e}{'' if r['typing_logits_ok'] else ' **> tol**'} |")
    return "\n".join(lines)


def main():
    global BIN_DIR
    if len(sys.argv) < 4:
        sys.exit("usage: peers.py OUT_DIR BIN_DIR LABEL=MODEL.laya[=NOTE] ...")
    out_dir, BIN_DIR = sys.argv[1], sys.argv[2]
    models = [a.split("=", 2) for a in sys.argv[3:]]
    os.makedirs(out_dir, exist_ok=True)
    ctx_path = os.path.join(out_dir, "contexts.json")
    with open(ctx_path, "w", encoding="utf-8") as f:
        json.dump(CONTEXTS, f, ensure_ascii=False)
    typing_path = os.path.join(out_dir, "typing.json")
    with open(typing_path, "w", encoding="utf-8") as f:
        json.dump(TYPING, f, ensure_ascii=False)
    cpu = cpu_summary()
    head = [f"# Laya vs peers, batch 1, one thread ({time.strftime('%Y-%m-%d %H:%M')})", "",
            f"CPU: **{cpu['model']}**, {cpu['cores_online']} cores online (shared with other jobs).  ",
            f"Flags present: {', '.join(cpu['flags_present']) or 'none'}; absent: {', '.join(cpu['flags_absent'])}.  ",
            f"{ITERS} timed decisions after {WARMUP} warm-up ones, cycling over {len(CONTEXTS)} contexts; "
            "decision = forward pass + top-5 (Laya: full `Session::predict`, k = 5)."
            + (f" Typing mode: {len(TYPING)} requests in order, {TYPING_PASSES} timed passes." if TYPING_PASSES else ""), ""]
    print("\n".join(head), flush=True)
    report = {"cpu": cpu, "iters": ITERS, "warmup": WARMUP, "contexts": CONTEXTS, "typing_passes": TYPING_PASSES,
              "typing_text": TYPING_TEXT, "models": []}
    failed, sections = False, []
    for spec in models:
        label, path = spec[0], spec[1]
        note = spec[2] if len(spec) > 2 else ""
        work = os.path.join(out_dir, label.replace(" ", "_"))
        os.makedirs(work, exist_ok=True)
        rows = []
        for peer in PEERS:
            print(f"[{label}] {peer} ...", file=sys.stderr, flush=True)
            r = run_peer(peer, path, ctx_path, typing_path, work)
            if "error" not in r:
                stats(r)
            rows.append(r)
        laya = rows[0]
        if "error" in laya:
            sys.exit(f"Laya itself failed on {path}: {laya['error']}")
        for r in rows:
            if "error" in r:
                continue
            r["agree"], r["near_ties"], r["bad"], r["rel_diff"] = gate(r["top5"], r["logits"], laya["logits"])
            r["logits_ok"] = r["rel_diff"] <= REL_TOL
            checks = [("", CONTEXTS, r["agree"], r["near_ties"], r["bad"], r["rel_diff"])]
            if "typing_logits" in r:
                (r["typing_agree"], r["typing_near_ties"], r["typing_bad"],
                 r["typing_rel_diff"]) = gate(r["typing_top5"], r["typing_logits"], laya["typing_logits"])
                r["typing_logits_ok"] = r["typing_rel_diff"] <= REL_TOL
                checks.append(("typing ", TYPING, r["typing_agree"], r["typing_near_ties"], r["typing_bad"], r["typing_rel_diff"]))
            for mode, requests, agree, near, bad, rel in checks:
                ok = not bad and rel <= REL_TOL
                print(f"[{label}] {r['peer']}: {mode}top-5 agreement {agree}/{len(requests)}, near-ties {near}, "
                      f"max rel logit diff {rel:.2e} -> {'OK' if ok else 'FAILED'}", file=sys.stderr, flush=True)
                if rel > REL_TOL:
                    failed = True
                    print(f"    word logits differ from Laya's by {rel:.2e} relative (limit {REL_TOL})", file=sys.stderr)
                if bad:
                    failed = True
                    for i, mine, ref in bad[:5]:
                        print(f"    {mode}request {requests[i][-20:]!r}: {r['peer']} {mine} vs laya {ref}", file=sys.stderr)
        sec = table(label, note, rows, laya)
        if TYPING_PASSES > 0:
            sec += "\n\n" + typing_table(label, rows, laya)
        print(sec + "\n", flush=True)
        sections.append(sec)
        report["models"].append({"label": label, "path": path, "note": note, "rows": [
            {k: v for k, v in r.items() if k not in ("logits", "typing_logits")} for r in rows]})
        # Saved after every model, so a long run that is stopped keeps what it measured.
        with open(os.path.join(out_dir, "peers.json"), "w", encoding="utf-8") as f:
            json.dump(report, f, ensure_ascii=False, indent=1, default=str)
        with open(os.path.join(out_dir, "peers.md"), "w", encoding="utf-8") as f:
            f.write("\n".join(head) + "\n" + "\n\n".join(sections) + "\n")
    if failed:
        print("CORRECTNESS GATE FAILED: a peer's top-5 or word logits differ from Laya's (see above)", file=sys.stderr)
        sys.exit(1)
    print(f"saved {out_dir}/peers.json and {out_dir}/peers.md", file=sys.stderr)


if __name__ == "__main__":
    main()
