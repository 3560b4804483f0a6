#!/usr/bin/env bash
# The before/after table of docs/contexts.md: twenty everyday contexts (chat, work, technical,
# mixed script) and the five candidates each model shows, one column per model.
#
#   scripts/contexts.sh OLD.laya NEW.laya      (LAYA=path/to/laya, default target/release/laya)
#   OLD_FLAGS / NEW_FLAGS: extra `laya predict` flags for each model, e.g. the settings it
#   shipped with (docs/contexts.md: OLD_FLAGS="--completion-prior 0.5").
set -euo pipefail
cd "$(dirname "$0")/.."
LAYA=${LAYA:-target/release/laya}
[[ $# -eq 2 ]] || { echo "usage: scripts/contexts.sh OLD.laya NEW.laya" >&2; exit 2; }
CONTEXTS=(
    "" "你好" "谢谢你的" "祝你生日" "恭喜" "明天" "不好意思，" "我觉得这个" "今天晚上我们去" "早"
    "会议改到" "麻烦你帮我" "请把文件" "点击" "默认" "请输入" "打开终端，运行" "用iPhone" "hello" "I want to"
)
jsonl() {
    local model=$1
    shift
    for c in "${CONTEXTS[@]}"; do
        python3 -c 'import json,sys; print(json.dumps({"context": sys.argv[1]}, ensure_ascii=False))' "$c"
    done | "$LAYA" predict --jsonl --model "$model" "$@"
}
read -r -a OLD_ARGS <<< "${OLD_FLAGS:-}"
read -r -a NEW_ARGS <<< "${NEW_FLAGS:-}"
paste -d '\t' <(jsonl "$1" ${OLD_ARGS[@]+"${OLD_ARGS[@]}"}) <(jsonl "$2" ${NEW_ARGS[@]+"${NEW_ARGS[@]}"}) | python3 -c '
import json, sys
contexts = sys.argv[1:]
def bar(out):
    cands = json.loads(out)["candidates"]
    def one(c):
        word, rep, p = c["word"], c["replace"], c["p"]
        return word + (f"<sub>{rep}</sub>" if rep else "") + f" ({p:.2f})"
    return " ".join(one(c) for c in cands)
print("| context | before | after |")
print("|---------|--------|-------|")
for ctx, line in zip(contexts, sys.stdin):
    old, new = line.rstrip("\n").split("\t")
    shown = ctx.replace("|", "\\|") if ctx else "(empty)"
    print(f"| `{shown}` | {bar(old)} | {bar(new)} |")
' "${CONTEXTS[@]}"
