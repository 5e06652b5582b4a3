#!/usr/bin/env bash
# A model change judged on one machine state: scripts/calibrate-host.sh with the new binary
# (its host.json and real cells saved), then the old binary's `smartcon host` a minute later,
# then the same real cells simulated (--resimulate) on
#   OUT_DIR/re-old        the old binary's host.json (the old measurement),
#   OUT_DIR/re-nosleeps   the new host.json without the blocking waits' sleeps figures,
# besides OUT_DIR/compare-*.txt (the new host.json, the new model).
#
#   OLD_SMARTCON=path/to/old/smartcon SMARTCON=path/to/new/smartcon scripts/calibrate-host-ab.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?"OUT_DIR (a new directory)"}
NEW=${SMARTCON:-target/release/smartcon}
OLD=${OLD_SMARTCON:?"OLD_SMARTCON: the binary before the change"}
SMARTCON=$NEW scripts/calibrate-host.sh "$OUT"
H=$(mktemp -d)
trap 'rm -rf "$H"' EXIT
echo "$(date -u +%T) load average $(cut -d' ' -f1-3 /proc/loadavg) before the old binary's smartcon host" | tee -a "$OUT/summary.txt"
SMARTCON_HOME=$H "$OLD" host --json > "$OUT/host-old.jsonl" 2>/dev/null
cp "$H/host.json" "$OUT/host-old.json"
echo "$(date -u +%T) load average $(cut -d' ' -f1-3 /proc/loadavg) after it" | tee -a "$OUT/summary.txt"
mkdir -p "$OUT/in-old" "$OUT/in-nosleeps"
cp "$OUT/host-old.json" "$OUT/in-old/host.json"
python3 - "$OUT/host.json" "$OUT/in-nosleeps/host.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
for p in h.get("block_wait", []):
    p.pop("sleeps_per_wait", None)
    p.pop("sleeps_per_wait_beside_cruncher", None)
json.dump(h, open(sys.argv[2], "w"))
PY
for d in in-old in-nosleeps; do
    cp "$OUT"/real-*.jsonl "$OUT/$d/"
    SMARTCON=$NEW scripts/calibrate-host.sh --resimulate "$OUT/$d" "$OUT/re-${d#in-}"
done
