#!/usr/bin/env bash
# The measurement of issue 21 (docs/run.md): the same fio job on an emulated image under
# `smartcon run --emulate --strategy block`, `spin` and `smart`, in real time: IOPS, mean
# latency and CPU (fio's usr + sys of the job, and per I/O), rounds interleaved (block,
# spin, smart, block, ...) so drift hits every strategy alike. Before issue 21 the three
# waited the same way (a sleep, then a 200 us-2 ms spin).
#
# Job: fio --ioengine=psync --rw=randread --bs=4k --iodepth=1, time-based, on a sparse
# image of emu:PRESET (default nvme, 80 us reads).
#
# Output: a markdown table on stdout (paste into docs/run.md), progress on stderr.
#
# Usage: scripts/bench-run-emulate.sh [--preset P] [--rounds N] [--runtime SECONDS] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

preset=nvme
rounds=3
runtime=5
dir="${TMPDIR:-/var/tmp}"
while [ $# -gt 0 ]; do
    case "$1" in
        --preset) preset="$2"; shift ;;
        --rounds) rounds="$2"; shift ;;
        --runtime) runtime="$2"; shift ;;
        --dir) dir="$2"; shift ;;
        *) echo "bench-run-emulate.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
command -v fio >/dev/null || { echo "bench-run-emulate.sh: fio is not installed (apt-get install fio)" >&2; exit 2; }
bin=target/release/smartcon
[ -x "$bin" ] || { echo "bench-run-emulate.sh: build first: cargo build --release" >&2; exit 2; }

work=$(mktemp -d "$dir/smartcon-bench-emu.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
img="$work/disk.img"
strategies=(block spin smart)

for round in $(seq 1 "$rounds"); do
    for s in "${strategies[@]}"; do
        echo "bench-run-emulate.sh: round $round/$rounds, $s" >&2
        "$bin" run --strategy "$s" --emulate "emu:$preset,size=256m=$img" --stats "$work/run-$s-$round.jsonl" -- \
            fio --name=emu --filename="$img" --ioengine=psync --rw=randread --bs=4k --iodepth=1 --size=256m \
            --time_based --runtime="$runtime" --randseed=42 --output-format=json >"$work/fio-$s-$round.json" 2>"$work/err-$s-$round.txt" \
            || { cat "$work/err-$s-$round.txt" >&2; exit 1; }
    done
done

python3 - "$work" "$rounds" "$preset" "${strategies[@]}" <<'PY'
import json, statistics, sys
work, rounds, preset, strategies = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
rows = {}
for s in strategies:
    iops, lat, cpu, cpu_per_io, waits = [], [], [], [], {}
    for r in range(1, rounds + 1):
        job = json.load(open(f"{work}/fio-{s}-{r}.json"))["jobs"][0]
        rd = job["read"]
        iops.append(rd["iops"])
        lat.append(rd["clat_ns"]["mean"] / 1000 + rd["slat_ns"]["mean"] / 1000)
        pct = job["usr_cpu"] + job["sys_cpu"]
        cpu.append(pct)
        runtime_s = rd["runtime"] / 1000
        cpu_per_io.append(pct / 100 * runtime_s / max(rd["total_ios"], 1) * 1e6)
        rec = [json.loads(l) for l in open(f"{work}/run-{s}-{r}.jsonl")][-1]
        for k, n in rec["emulated"]["by_strategy"].items():
            waits[k] = waits.get(k, 0) + n
    rows[s] = (statistics.median(iops), statistics.median(lat), statistics.median(cpu), statistics.median(cpu_per_io), waits)
base = rows[strategies[0]]
print(f"| strategy (emu:{preset}, fio psync 4 KiB randread QD1) | IOPS | mean latency (us) | CPU (usr+sys, % of one CPU) | CPU per I/O (us) | CPU per I/O vs {strategies[0]} | waits |")
print("|---|---|---|---|---|---|---|")
for s in strategies:
    iops, lat, cpu, per_io, waits = rows[s]
    w = ", ".join(f"{k} {n}" for k, n in sorted(waits.items()))
    print(f"| {s} | {iops:.0f} | {lat:.1f} | {cpu:.1f} | {per_io:.1f} | {per_io / base[3]:.2f} x | {w} |")
print(f"\nMedians of {rounds} interleaved rounds of {json.load(open(f'{work}/fio-{strategies[0]}-1.json'))['jobs'][0]['job_runtime'] / 1000:.0f} s each.")
PY
