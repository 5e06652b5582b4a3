#!/usr/bin/env bash
# Issue 27's calibration in one session, so the host model and the runs it is compared with
# come from the same host state: `smartcon host` into a fresh SMARTCON_HOME, then
# `bench --compare-simulated` bm-only and beside the crunchers, then five real hybrid runs
# on emu:nvme (4 KiB reads, 3 s) with spin beside them, each against the oracle hybrid for
# the host.json just measured (`--compare-simulated --host`). About 2.5 minutes; run it with every
# other process on the machine stopped (the real cells share the CPUs with whatever runs:
# a spinner alone held 14-39% of a core at load average 10-15).
#
#   scripts/calibrate-host.sh [OUT_DIR]     (OUT_DIR: a new directory; default calibration-DATE)
#   SMARTCON=path/to/smartcon scripts/calibrate-host.sh
#   scripts/calibrate-host.sh --resimulate OLD_DIR OUT_DIR
#
# Writes into OUT_DIR: host.json (the model), host.jsonl (`smartcon host --json`: the model and
# how it was measured, each blocking turn's figures), real-bm-only.jsonl and
# real-cpu-intensive.jsonl (the real cells, `bench --json`), compare-bm-only.txt and
# compare-cpu-intensive.txt (those cells against the simulation on host.json, `bench
# --compare-simulated --measured`), hybrid-N.jsonl and summary.txt (the load average before
# and after each step, the figures within 10%, the five hybrid runs' spin-relative figures).
# The temporary SMARTCON_HOME is removed on exit, also on Ctrl-C.
#
# --resimulate measures nothing: it compares OLD_DIR's saved real cells with this binary's
# simulation on OLD_DIR's host.json (a model before and after a change, judged against one
# real run). A directory from before the real cells were saved as JSON has only the text
# tables; their measured columns (IOPS, CPU, and hybrid's sleeps per I/O) are read back
# into real-*.jsonl first (CPU as user time: the text does not split it).
set -euo pipefail
cd "$(dirname "$0")/.."
SMARTCON=${SMARTCON:-target/release/smartcon}
[ -x "$SMARTCON" ] || { echo "calibrate-host: $SMARTCON not built (cargo build --release)" >&2; exit 2; }
CELLS=(--targets emu:nvme,emu:optane --sizes 4k --ops read --strategies block,spin,sync,hybrid,smart --duration 2s)
if [ "${1:-}" = "--resimulate" ]; then
    OLD=${2:?"--resimulate OLD_DIR OUT_DIR"}
    OUT=${3:?"--resimulate OLD_DIR OUT_DIR"}
    if [ -e "$OUT" ]; then echo "calibrate-host: $OUT exists; give a new directory" >&2; exit 2; fi
    [ -f "$OLD/host.json" ] || { echo "calibrate-host: $OLD/host.json missing" >&2; exit 2; }
    mkdir -p "$OUT"
    cp "$OLD/host.json" "$OUT/host.json"
    echo "resimulated: smartcon $("$SMARTCON" --version 2>/dev/null || true), $(git rev-parse --short HEAD 2>/dev/null || true), against the real cells and host.json of $OLD" > "$OUT/summary.txt"
    for l in bm-only cpu-intensive; do
        if [ -f "$OLD/real-$l.jsonl" ]; then
            cp "$OLD/real-$l.jsonl" "$OUT/real-$l.jsonl"
        else
            python3 - "$OLD/compare-$l.txt" "$l" > "$OUT/real-$l.jsonl" <<'PY'
import json, re, sys
text, load = open(sys.argv[1]).read(), sys.argv[2]
sleeps = {}
for line in text.splitlines():
    m = re.match(r"(emu:\S+)\s+read\s+4k\s+(\w+)\s.*?([0-9.]+) sleeps per I/O", line)
    if m:
        sleeps[(m[1], m[2])] = float(m[3])
rows = 0
for line in text.splitlines():
    f = line.split()
    if len(f) == 11 and f[0].startswith("emu:") and f[2].isdigit():
        target, op, bs, strategy, iops, cpu = f[0], f[1], int(f[2]), f[3], float(f[4]), float(f[7])
        r = {"type": "result", "target": target, "op": op, "bs_bytes": bs, "strategy": strategy,
             "iops": iops, "cpu_user_pct": cpu, "cpu_sys_pct": 0.0, "from_text": sys.argv[1]}
        if (target, strategy) in sleeps:
            r["polling"] = {"sleeps_per_io": sleeps[(target, strategy)]}
        print(json.dumps(r))
        rows += 1
print(json.dumps({"type": "summary", "load": load}))
if rows == 0:
    sys.exit(f"{sys.argv[1]}: no compare table")
PY
        fi
        "$SMARTCON" bench "${CELLS[@]}" --load "$l" --compare-simulated --host "$OUT/host.json" \
            --measured "$OUT/real-$l.jsonl" > "$OUT/compare-$l.txt"
        grep -E "figures within|largest miss" "$OUT/compare-$l.txt" | sed "s/^/  $l: /" | tee -a "$OUT/summary.txt"
    done
    exit 0
fi
OUT=${1:-calibration-$(date -u +%Y%m%dT%H%M%SZ)}
if [ -e "$OUT" ]; then echo "calibrate-host: $OUT exists; give a new directory" >&2; exit 2; fi
mkdir -p "$OUT"
SMARTCON_HOME=$(mktemp -d)
export SMARTCON_HOME
trap 'rm -rf "$SMARTCON_HOME"' EXIT
trap 'exit 130' INT TERM
load() { echo "$(date -u +%H:%M:%S) load average $(cut -d' ' -f1-3 /proc/loadavg) $1" | tee -a "$OUT/summary.txt"; }
start=$(date +%s)
echo "smartcon $("$SMARTCON" --version 2>/dev/null || true), $(git rev-parse --short HEAD 2>/dev/null || true), $(nproc) CPUs" > "$OUT/summary.txt"
load "before smartcon host"
"$SMARTCON" host --json > "$OUT/host.jsonl"
cp "$SMARTCON_HOME/host.json" "$OUT/host.json"
for l in bm-only cpu-intensive; do
    load "before compare-simulated, $l"
    "$SMARTCON" bench "${CELLS[@]}" --load "$l" --json > "$OUT/real-$l.jsonl"
    "$SMARTCON" bench "${CELLS[@]}" --load "$l" --compare-simulated --host "$OUT/host.json" \
        --measured "$OUT/real-$l.jsonl" > "$OUT/compare-$l.txt"
    grep -E "figures within|largest miss" "$OUT/compare-$l.txt" | sed "s/^/  $l: /" | tee -a "$OUT/summary.txt"
done
for i in 1 2 3 4 5; do
    load "before hybrid run $i"
    "$SMARTCON" bench --targets emu:nvme --sizes 4k --ops read --strategies spin,hybrid --duration 3s --json \
        --compare-simulated --host "$OUT/host.json" > "$OUT/hybrid-$i.jsonl"
done
load "at the end"
python3 - "$OUT" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
out = sys.argv[1]
rows = []
for i in range(1, 6):
    cells, oracle = {}, None
    for line in open(f"{out}/hybrid-{i}.jsonl"):
        r = json.loads(line)
        if r.get("type") == "result":
            cells[r["strategy"]] = r
        elif r.get("type") == "hybrid_oracle":
            oracle = r
    s, h = cells["spin"], cells["hybrid"]
    cpu = lambda r: r["cpu_user_pct"] + r["cpu_sys_pct"]
    spi = (h.get("polling") or {}).get("sleeps_per_io", 0.0)
    # CPU per I/O over spin's: spin's CPU share is whatever of a core the machine's other
    # load left it; per I/O it is the device time, so this ratio leaves that load out.
    per_io = (cpu(h) / h["iops"]) / (cpu(s) / s["iops"])
    rows.append((h["iops"] / s["iops"], cpu(h) / cpu(s), cpu(h), spi, per_io))
    print(f"hybrid run {i}: {rows[-1][0]:.2f} x spin's IOPS, {rows[-1][1]:.2f} x spin's CPU "
          f"(hybrid {rows[-1][2]:.1f}% of a CPU, spin {cpu(s):.1f}%), {spi:.3f} sleeps per I/O, "
          f"CPU per I/O {per_io:.3f} x spin's")
    if oracle:
        o, sim = oracle["oracle"], oracle.get("simulated") or {}
        print(f"  this host's oracle (host.json): {o['iops_over_spin']:.3f} x IOPS, {o['cpu_share']:.3f} x CPU "
              f"(sleep {o['sleep_ns'] / 1e3:.2f} us), CPU per I/O {oracle['oracle_cpu_per_io_over_spin']:.3f} x; "
              f"simulated hybrid {sim.get('iops_over_spin', float('nan')):.3f} x IOPS, "
              f"{sim.get('cpu_over_spin', float('nan')):.3f} x CPU; measured CPU - oracle {oracle['cpu_over_oracle']:+.3f}")
spread = lambda k: max(r[k] for r in rows) - min(r[k] for r in rows)
print(f"hybrid's CPU x spin: spread {spread(1):.3f} (issue 27: <= 0.05); "
      f"CPU per I/O x spin's: spread {spread(4):.3f}; sleeps per I/O spread {spread(3):.3f}")
PY
echo "whole calibration: $(( $(date +%s) - start )) s; results in $OUT" | tee -a "$OUT/summary.txt"
