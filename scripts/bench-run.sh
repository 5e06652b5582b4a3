#!/usr/bin/env bash
# The measurement of issue 13 (docs/run.md): unmodified programs, plain and under
# `smartcon run`, on the local disk, with the I/O process pinned as evaluate pins its
# threads (--io-cpus, default irq: the CPUs that take the disk's completion interrupts).
#
#   1. fio --ioengine=psync --direct=1 --rw=randread --iodepth=1, 4 KiB and 256 KiB, on a
#      256 MiB file: IOPS and CPU of plain fio against fio under --strategy smart, rounds
#      interleaved (plain, smart, plain, smart, ...) so drift hits both alike.
#   2. RocksDB db_bench readrandom --use_direct_reads=true on a database larger than its
#      block cache (Debian's rocksdb-tools; installed with apt-get when root), plain
#      against smart.
#   3. Integrity: fio write-then-verify (--verify=crc32c, 4 jobs, 4 KiB to 128 KiB) under
#      block, spin and smart: zero verify errors; and a seeded 4-job random write whose
#      files' checksums must equal those of the same run without the library.
#
# Output: markdown tables on stdout (paste into docs/run.md), progress on stderr.
#
# Usage: scripts/bench-run.sh [--smoke] [--dir DIR] [--rounds N] [--runtime SECONDS] [--io-cpus P]
#   --smoke   a quick pass to check the script (64 MiB, 2 s, 1 round, a small database);
#             its figures mean nothing.
# Run it on a quiet machine: other work on the CPUs changes smart's decisions and the CPU
# figures.
set -euo pipefail
cd "$(dirname "$0")/.."

smoke=0
dir="${TMPDIR:-/var/tmp}"
rounds=5
runtime=10
io_cpus=irq
while [ $# -gt 0 ]; do
    case "$1" in
        --smoke) smoke=1 ;;
        --dir) dir="$2"; shift ;;
        --rounds) rounds="$2"; shift ;;
        --runtime) runtime="$2"; shift ;;
        --io-cpus) io_cpus="$2"; shift ;;
        *) echo "bench-run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
size=256m
db_keys=4000000
if [ "$smoke" = 1 ]; then
    size=64m; rounds=1; runtime=2; db_keys=200000
fi

command -v python3 >/dev/null || { echo "bench-run.sh: needs python3 to read fio's JSON" >&2; exit 2; }
command -v fio >/dev/null || { echo "bench-run.sh: needs fio (apt-get install fio)" >&2; exit 2; }
log() { echo "bench-run.sh: $*" >&2; }

log "building (cargo build --release builds smartcon and libsmartcon.so)"
cargo build --release -q
smartcon="$PWD/target/release/smartcon"
work="$(mktemp -d "$dir/smartcon-bench-run.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"

# The CPUs --io-cpus means here (the disk holding $work), so plain fio gets the same set.
"$smartcon" run --io-cpus "$io_cpus" --stats placement.jsonl -- true 2>/dev/null
cpus="$(python3 -c 'import json,sys; r=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(r["io_cpus"] or "")' placement.jsonl)"
fio_pin=()
[ -n "$cpus" ] && fio_pin=(--cpus_allowed="$cpus")
log "I/O CPUs: ${cpus:-not pinned} (--io-cpus $io_cpus); work dir $work"

# fio's IOPS and CPU (usr+sys, % of one CPU) from its JSON.
fio_figures() {
    python3 - "$1" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
j = json.loads(text[text.index("{"):])
job = j["jobs"][0]
print(f'{job["read"]["iops"]:.0f} {job["usr_cpu"] + job["sys_cpu"]:.1f}')
EOF
}

run_fio() { # how bs out
    local how="$1" bs="$2" out="$3"
    local args=(--name=randread --filename=randread.dat --size="$size" --ioengine=psync --direct=1
        --rw=randread --bs="$bs" --iodepth=1 --time_based --runtime="$runtime" --ramp_time=1
        --randrepeat=0 "${fio_pin[@]}" --output-format=json --output="$out")
    if [ "$how" = plain ]; then
        fio "${args[@]}" >/dev/null
    else
        "$smartcon" run --strategy smart --io-cpus "$io_cpus" --stats run.jsonl -- fio "${args[@]}" >/dev/null 2>>smartcon.log
    fi
}

log "laying out the ${size} file"
fio --name=layout --filename=randread.dat --size="$size" --rw=write --bs=1m --direct=1 --output=/dev/null

echo "### fio randread, psync, direct=1, iodepth 1, ${size} file, CPUs ${cpus:-unpinned}, ${rounds} x ${runtime} s per cell"
echo
echo "| bs | plain IOPS | smart IOPS | smart / plain | plain CPU % | smart CPU % | target |"
echo "|---|---|---|---|---|---|---|"
for bs in 4k 256k; do
    plain_iops=(); smart_iops=(); plain_cpu=(); smart_cpu=()
    for r in $(seq "$rounds"); do
        for how in plain smart; do
            log "fio $bs $how round $r/$rounds"
            run_fio "$how" "$bs" "fio-$bs-$how-$r.json"
            read -r iops cpu < <(fio_figures "fio-$bs-$how-$r.json")
            if [ "$how" = plain ]; then plain_iops+=("$iops"); plain_cpu+=("$cpu"); else smart_iops+=("$iops"); smart_cpu+=("$cpu"); fi
        done
    done
    target=">= 1.25"; [ "$bs" = 256k ] && target="0.97-1.03, CPU <= plain + 5"
    python3 - "$bs" "$target" "${plain_iops[*]}" "${smart_iops[*]}" "${plain_cpu[*]}" "${smart_cpu[*]}" <<'EOF'
import statistics as st, sys
bs, target, pi, si, pc, sc = sys.argv[1], sys.argv[2], *[list(map(float, a.split())) for a in sys.argv[3:]]
ratio = st.mean(si) / st.mean(pi)
print(f"| {bs} | {st.mean(pi):.0f} | {st.mean(si):.0f} | {ratio:.2f} | {st.mean(pc):.1f} | {st.mean(sc):.1f} | {target} |")
EOF
done
echo
echo "smart's decisions in those runs (from smartcon run):"
echo
python3 - run.jsonl <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if "randread" not in " ".join(r["command"]):
        continue
    bs = next(a.split("=")[1] for a in r["command"] if a.startswith("--bs="))
    print(f'- {bs}: {r["ios"]} I/Os, by strategy {r["by_strategy"]}, by reason {r["by_reason"]}, p50 {r["lat_ns_p50"]/1000:.1f} us, p99 {r["lat_ns_p99"]/1000:.1f} us')
EOF
rm -f randread.dat
echo

# ---- RocksDB ----
db_bench=""
for c in db_bench rocksdb_db_bench; do command -v "$c" >/dev/null && db_bench="$c" && break; done
if [ -z "$db_bench" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log "installing rocksdb-tools for db_bench"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rocksdb-tools >/dev/null 2>&1 || true
    for c in db_bench rocksdb_db_bench; do command -v "$c" >/dev/null && db_bench="$c" && break; done
fi
echo "### RocksDB db_bench readrandom, --use_direct_reads=true, ${db_keys} keys, 8 MiB block cache"
echo
if [ -z "$db_bench" ]; then
    echo "skipped: db_bench not found (Debian: apt-get install rocksdb-tools)"
else
    log "filling the database ($db_keys keys)"
    "$db_bench" --benchmarks=fillrandom --db="$work/db" --num="$db_keys" --value_size=100 \
        --compression_type=none --disable_wal=true >/dev/null 2>&1
    reads=$((db_keys / 20))
    ops() { sed -n 's/^readrandom *: *[0-9.]* micros\/op \([0-9]*\) ops\/sec.*/\1/p' "$1"; }
    dbargs=(--benchmarks=readrandom --db="$work/db" --use_existing_db=true --num="$db_keys" --reads="$reads"
        --use_direct_reads=true --cache_size=8388608 --threads=1 --compression_type=none)
    plain=(); smart=()
    for r in $(seq "$rounds"); do
        log "db_bench round $r/$rounds"
        taskset_cmd=(); [ -n "$cpus" ] && taskset_cmd=(taskset -c "$cpus")
        "${taskset_cmd[@]}" "$db_bench" "${dbargs[@]}" >"db-plain-$r.txt" 2>&1
        plain+=("$(ops "db-plain-$r.txt")")
        "$smartcon" run --strategy smart --io-cpus "$io_cpus" --stats run.jsonl -- "$db_bench" "${dbargs[@]}" \
            >"db-smart-$r.txt" 2>>smartcon.log
        smart+=("$(ops "db-smart-$r.txt")")
    done
    echo "| plain ops/s | smart ops/s | smart / plain |"
    echo "|---|---|---|"
    python3 - "${plain[*]}" "${smart[*]}" <<'EOF'
import statistics as st, sys
p, s = [list(map(float, a.split())) for a in sys.argv[1:]]
print(f"| {st.mean(p):.0f} | {st.mean(s):.0f} | {st.mean(s) / st.mean(p):.2f} |")
EOF
    python3 - run.jsonl <<'EOF'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[1]) if "readrandom" in l]
if rs:
    r = rs[-1]
    print(f'\nLast smart run: {r["ios"]} I/Os taken, by strategy {r["by_strategy"]}, by reason {r["by_reason"]}')
EOF
fi
echo

# ---- Integrity ----
echo "### Integrity: fio verify=crc32c (4 jobs, 4 KiB-128 KiB) and a seeded write's checksums"
echo
echo "| run | fio exit | verify errors | I/Os taken | checksum of the seeded write equals plain |"
echo "|---|---|---|---|---|"
seeded() { # how
    rm -f seeded.*
    local args=(--name=seeded --directory="$work" --size=32m --numjobs=4 --ioengine=psync --direct=1
        --rw=randwrite --bsrange=4k-128k --randseed=1234 --randrepeat=1 --refill_buffers --output=/dev/null)
    if [ "$1" = plain ]; then fio "${args[@]}"; else "$smartcon" run --strategy "$1" -- fio "${args[@]}" 2>>smartcon.log; fi
    cat seeded.* | sha256sum | cut -d' ' -f1
}
plain_sum="$(seeded plain)"
for how in plain block spin smart; do
    rm -f verify.*
    vargs=(--name=verify --directory="$work" --size=32m --numjobs=4 --ioengine=psync --direct=1 --rw=randwrite
        --bsrange=4k-128k --verify=crc32c --do_verify=1 --output-format=json --output="verify-$how.json")
    rc=0
    if [ "$how" = plain ]; then
        fio "${vargs[@]}" >/dev/null 2>&1 || rc=$?
        ios="-"; same="(reference)"
    else
        "$smartcon" run --strategy "$how" --stats "verify-$how.jsonl" -- fio "${vargs[@]}" >/dev/null 2>>smartcon.log || rc=$?
        ios="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])["ios"])' "verify-$how.jsonl")"
        [ "$(seeded "$how")" = "$plain_sum" ] && same=yes || same=NO
    fi
    errors="$(python3 -c 'import json,sys; t=open(sys.argv[1]).read(); j=json.loads(t[t.index("{"):]); print(sum(x.get("error",0) for x in j["jobs"]))' "verify-$how.json" 2>/dev/null || echo "?")"
    echo "| $how | $rc | $errors | $ios | $same |"
done
