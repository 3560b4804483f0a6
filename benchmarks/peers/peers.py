#!/usr/bin/env python3
"""Driver of the peer benchmark (run through benchmarks/peers/run.sh, which sets everything up).

    peers.py OUT_DIR BIN_DIR LABEL=MODEL.laya[=NOTE] ...

For every model: runs Laya first (the reference), then each peer, each in its own process with
one thread, checks that every peer's top-5 word ids equal the top-5 of Laya's word logits on the
fixed contexts below, and prints one markdown table per model. Saves OUT_DIR/peers.json and
OUT_DIR/peers.md. Exits 1 when a peer disagrees with Laya (after writing the report), 0 otherwise;
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


def run_peer(peer, model, ctx_path, work):
    out, logits = os.path.join(work, peer + ".json"), os.path.join(work, peer + ".f32")
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    if peer in PY_PEERS:
        cmd = [sys.executable, os.path.join(HERE, "peer_py.py"), peer]
    else:
        cmd = [os.path.join(BIN_DIR, peer + "-peer")]
    cmd += [model, ctx_path, str(ITERS), str(WARMUP), out, logits]
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
    r["wall_s"] = time.time() - t0
    return r


def stats(r):
    t = np.array(r.pop("times_ns"), dtype=np.float64) / 1e3
    r["n_timed"] = int(t.size)
    r["p50_us"] = float(np.percentile(t, 50))
    r["p99_us"] = float(np.percentile(t, 99))
    r["min_us"] = float(t.min())


def reference_top5(logits):
    # Stable sort on the negated logits: ties go to the lower id, the rule of common.rs top_k.
    return [list(map(int, np.argsort(-row, kind="stable")[:5])) for row in logits]


def gate(r, laya):
    """Top-5 agreement with Laya's word logits and the largest relative logit difference."""
    ref_top = reference_top5(laya["logits"])
    agree, near_ties, bad = 0, 0, []
    for i, (mine, ref) in enumerate(zip(r["top5"], ref_top)):
        if mine == ref:
            agree += 1
            continue
        # Position by position, the id a peer put there must have (almost) the logit Laya's id
        # there has in Laya's own logits: then it was a near-tie that float noise broke, not a bug.
        row = laya["logits"][i]
        scale = max(1e-6, float(np.abs(row).max()))
        gap = max(abs(float(row[a]) - float(row[b])) for a, b in zip(mine, ref)) if len(mine) == len(ref) else float("inf")
        if gap <= 1e-4 * scale:
            near_ties += 1
        else:
            bad.append((i, mine, ref))
    rel = np.abs(r["logits"] - laya["logits"]).max(axis=1) / np.maximum(np.abs(laya["logits"]).max(axis=1), 1e-6)
    return agree, near_ties, bad, float(rel.max())


def table(label, note, rows, laya):
    lines = [f"### {label}", "", note, "",
             "| peer | p50 µs | p99 µs | cold start ms | (of which gguf-py read ms) | peak RSS MB | p50 / p50(Laya) | top-5 = Laya | max rel. logit diff | notes |",
             "|------|-------:|-------:|--------------:|------:|------------:|------:|:------|------:|-------|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['peer']} | — | — | — | — | — | — | not run | — | {r['error']} |")
            continue
        ratio = r["p50_us"] / laya["p50_us"] if laya and "p50_us" in laya else float("nan")
        read = f"{r['read_ms']:.0f}" if "read_ms" in r else "—"
        agree = f"{r['agree']}/{len(CONTEXTS)}" + (f" (+{r['near_ties']} ties)" if r.get("near_ties") else "")
        if r.get("bad"):
            agree += f" **{len(r['bad'])} DIFFER**"
        lines.append(
            f"| {r['peer']} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['cold_start_ms']:.0f} | {read} | "
            f"{r['peak_rss_mb']:.0f} | {ratio:.2f}x | {agree} | {r['rel_diff']:.1e}{'' if r['logits_ok'] else ' **> tol**'} | {r.get('notes', '')} |")
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
    cpu = cpu_summary()
    head = [f"# Laya vs peers, batch 1, one thread ({time.strftime('%Y-%m-%d %H:%M')})", "",
            f"CPU: **{cpu['model']}**, {cpu['cores_online']} cores online (shared with other jobs).  ",
            f"Flags present: {', '.join(cpu['flags_present']) or 'none'}; absent: {', '.join(cpu['flags_absent'])}.  ",
            f"{ITERS} timed decisions after {WARMUP} warm-up ones, cycling over {len(CONTEXTS)} contexts; "
            "decision = forward pass + top-5 (Laya: full `Session::predict`, k = 5).", ""]
    print("\n".join(head), flush=True)
    report, failed, sections = {"cpu": cpu, "iters": ITERS, "warmup": WARMUP, "contexts": CONTEXTS, "models": []}, False, []
    for spec in models:
        label, path = spec[0], spec[1]
        note = spec[2] if len(spec) > 2 else ""
        work = os.path.join(out_dir, label.replace(" ", "_"))
        os.makedirs(work, exist_ok=True)
        rows = []
        for peer in PEERS:
            print(f"[{label}] {peer} ...", file=sys.stderr, flush=True)
            r = run_peer(peer, path, ctx_path, work)
            if "error" not in r:
                stats(r)
            rows.append(r)
        laya = rows[0]
        if "error" in laya:
            sys.exit(f"Laya itself failed on {path}: {laya['error']}")
        for r in rows:
            if "error" in r:
                continue
            r["agree"], r["near_ties"], r["bad"], r["rel_diff"] = gate(r, laya)
            r["logits_ok"] = r["rel_diff"] <= REL_TOL
            status = "OK" if not r["bad"] and r["logits_ok"] else "FAILED"
            print(f"[{label}] {r['peer']}: top-5 agreement {r['agree']}/{len(CONTEXTS)}, near-ties {r['near_ties']}, "
                  f"max rel logit diff {r['rel_diff']:.2e} -> {status}", file=sys.stderr, flush=True)
            if not r["logits_ok"]:
                failed = True
                print(f"    word logits differ from Laya's by {r['rel_diff']:.2e} relative (limit {REL_TOL})", file=sys.stderr)
            if r["bad"]:
                failed = True
                for i, mine, ref in r["bad"][:5]:
                    print(f"    context {CONTEXTS[i]!r}: {r['peer']} {mine} vs laya {ref}", file=sys.stderr)
        sec = table(label, note, rows, laya)
        print(sec + "\n", flush=True)
        sections.append(sec)
        report["models"].append({"label": label, "path": path, "note": note, "rows": [
            {k: v for k, v in r.items() if k != "logits"} for r in rows]})
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
