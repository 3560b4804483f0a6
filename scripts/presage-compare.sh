#!/usr/bin/env bash
# Debian's presage against the English model on the same text, each typed under presage's own
# protocol (docs/training.md, "The English model"): presage_simulator with five suggestions and
# no learning, and scripts/presage-protocol.py with `laya predict --lang en`.
#
#   scripts/presage-compare.sh TEXT [LINES]     (LINES: the first N non-empty lines, default 1000)
# Needs `apt-get install presage` (Debian 12: 0.9.1) and target/release/laya.
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=$1
LINES=${2:-1000}
command -v presage_simulator > /dev/null || { echo "presage-compare: apt-get install presage" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# awk stops reading itself: `grep | head` would fail under pipefail when head closes the pipe.
awk -v n="$LINES" 'NF { print; if (++c == n) exit }' "$TEXT" > "$work/text.txt"
# presage's shipped configuration with five suggestions and its shipped n-gram alone: no online
# learning, no user database, no recency cache.
sed -e 's|<SUGGESTIONS>[0-9]*</SUGGESTIONS>|<SUGGESTIONS>5</SUGGESTIONS>|' \
    -e 's|<ONLINE_LEARNING>[a-z]*</ONLINE_LEARNING>|<ONLINE_LEARNING>no</ONLINE_LEARNING>|' \
    -e 's|<PREDICTORS>.*</PREDICTORS>|<PREDICTORS>DefaultSmoothedNgramPredictor</PREDICTORS>|' \
    /etc/presage.xml > "$work/presage.xml"
echo "presage:"
HOME=$work presage_simulator -q -c "$work/presage.xml" "$work/text.txt" | grep -E '^(ki|ks|kn|KSR) *:'
echo "laya (models/en.laya):"
python3 scripts/presage-protocol.py "$work/text.txt" -- --lang en
