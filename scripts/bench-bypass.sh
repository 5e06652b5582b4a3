#!/usr/bin/env bash
# The measurements of docs/run.md's "Polled and asynchronous I/O" (issue 22):
#
#  1. taken: fio 4 KiB random reads, O_DIRECT, on a file on the local disk, plain and under
#     `smartcon run --strategy smart`, interleaved round by round (plain, smart, plain,
#     smart, ...): psync (QD1), pvsync2 --hipri (QD1, RWF_HIPRI) and libaio --iodepth=8.
#     Each line: engine, round, plain IOPS, smart IOPS, smart/plain, and the I/Os the run
#     took (its --stats record), how they waited.
#  2. emulated: fio 4 KiB random reads on an `--emulate emu:hdd=IMG` image, psync QD1 and
#     libaio at iodepth 1 and 4, in real and virtual time: fio's mean completion latency,
#     the model's mean for the same requests (device time / requests, from the run's
#     --stats record: the completion instants libaio's events are held to), how late the
#     reads came back after those instants (the wait's wake-up) and the rest (fio's and the
#     library's own work); libaio QD1 against psync QD1, also each against its own model.
#
#   bash scripts/bench-bypass.sh [--rounds 5] [--runtime 3] [--emu-ios 200] [--dir /var/tmp]
#   ONLY=taken bash scripts/bench-bypass.sh      # or ONLY=emulated
#   ONLY=taken JOBS='libaio --iodepth=8;psync' bash scripts/bench-bypass.sh --rounds 9   # some engines
#
# The taken part starts with the host's own figures (`smartcon host`, into the work
# directory: a blocking wait's CPU, a 20 us sleep's overshoot, a wake-up across cores) and
# prints the load average beside each round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=5
runtime=3
emu_ios=200
dir=/var/tmp
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --runtime) runtime=$2; shift 2 ;;
        --emu-ios) emu_ios=$2; shift 2 ;;
        --dir) dir=$2; shift 2 ;;
        *) echo "usage: $0 [--rounds N] [--runtime S] [--emu-ios N] [--dir DIR]" >&2; exit 2 ;;
    esac
done
command -v fio >/dev/null || { echo "fio missing: apt-get install fio" >&2; exit 2; }
cargo build --release -q
bin=$PWD/target/release/smartcon
work=$(mktemp -d "$dir/smartcon-bench-bypass.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

echo "# host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r), fio $(fio --version)"
echo "# $(date -u +%FT%TZ), work in $work ($(df --output=source "$work" | tail -1))"

# fio's terse (v3) fields: 8 read IOPS, 40 read mean completion+submission latency (us).
fio_job() { # engine extra... -> the terse line
    local engine=$1; shift
    fio --name=r --filename="$work/data" --size=256m --direct=1 --rw=randread --bs=4k \
        --ioengine="$engine" --clocksource=clock_gettime --output-format=terse "$@"
}

if [ "${ONLY:-taken}" = taken ] || [ -z "${ONLY:-}" ]; then
    echo
    echo "## taken: 4 KiB random reads, ${runtime} s per run, ${rounds} rounds"
    echo "# the host's figures (smartcon host): $("$bin" host --out "$work/host.json" 2>/dev/null |
        grep -E "^(blocking wait's CPU|sleep 20.0 us|wake-up across cores)" | sed 's/  */ /g' | paste -sd';')"
    echo "engine round plain_iops smart_iops ratio taken waits reasons not_taken load1"
    jobs=("psync" "pvsync2 --hipri" "libaio --iodepth=8")
    [ -n "${JOBS:-}" ] && IFS=';' read -ra jobs <<<"$JOBS"
    for job in "${jobs[@]}"; do
        read -r engine extra <<<"$job"
        ratios=()
        for r in $(seq 1 "$rounds"); do
            # shellcheck disable=SC2086
            plain=$(fio_job "$engine" $extra --runtime="$runtime" --time_based | cut -d';' -f8)
            rm -f "$work/stats.jsonl"
            # shellcheck disable=SC2086
            smart=$("$bin" run --strategy smart --stats "$work/stats.jsonl" -- \
                fio --name=r --filename="$work/data" --size=256m --direct=1 --rw=randread --bs=4k \
                --ioengine="$engine" --clocksource=clock_gettime --output-format=terse $extra \
                --runtime="$runtime" --time_based 2>/dev/null | cut -d';' -f8)
            rec=$(python3 -c "import json;r=json.loads(open('$work/stats.jsonl').read().splitlines()[-1]);print(r['ios'], ','.join(f'{k}:{v}' for k,v in r['by_strategy'].items()) or '-', ','.join(f'{k}:{v}' for k,v in r['by_reason'].items()) or '-', ','.join(f'{k}:{v}' for k,v in r['not_taken'].items()) or '-')")
            ratio=$(python3 -c "print(f'{$smart/$plain:.3f}')")
            ratios+=("$ratio")
            echo "${engine}${extra:+:}${extra} $r $plain $smart $ratio $rec $(cut -d' ' -f1 /proc/loadavg)"
        done
        echo "${engine}${extra:+:}${extra} median smart/plain: $(printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}')"
    done
fi

if [ "${ONLY:-emulated}" = emulated ] || [ -z "${ONLY:-}" ]; then
    echo
    echo "## emulated: emu:hdd, 4 KiB random reads over 256 MiB, ${emu_ios} per run; load average $(cut -d' ' -f1-3 /proc/loadavg)"
    # model: the model's mean time for the run's requests (arrival to completion, queueing
    # included: the instants libaio's events are held to); late: how long after that instant
    # each read returned or each event was handed out (the wait's wake-up); fio - model -
    # late: fio's and the library's own work. The hdd's rotation depends on the arrival
    # instant, so two runs' models differ by a few %: psync and libaio QD1 are also compared
    # each against its own model (the last column of the ratio line).
    echo "mode job fio_mean_lat_us model_mean_us late_mean_us fio-model-late_us fio/model wall_s"
    img="$work/hdd.img"
    for mode in real virtual; do
        flags=()
        [ "$mode" = virtual ] && flags+=(--virtual-time)
        declare -A lat_of=() model_of=()
        for job in "psync --iodepth=1" "libaio --iodepth=1" "libaio --iodepth=4"; do
            read -r engine extra <<<"$job"
            rm -f "$work/stats.jsonl"
            t0=$(date +%s.%N)
            # shellcheck disable=SC2086
            out=$("$bin" run --strategy smart --stats "$work/stats.jsonl" --emulate "emu:hdd,size=1g=$img" "${flags[@]}" -- \
                fio --name=r --filename="$img" --size=256m --direct=1 --rw=randread --bs=4k \
                --ioengine="$engine" --clocksource=clock_gettime --output-format=terse $extra \
                --number_ios="$emu_ios" --randseed=7 2>"$work/err")
            t1=$(date +%s.%N)
            lat=$(cut -d';' -f40 <<<"$out")
            read -r model late <<<"$(python3 - "$work/stats.jsonl" <<'EOF2'
import json, sys
e = json.loads(open(sys.argv[1]).read().splitlines()[-1])["emulated"]
n = max(1, e["reads"] + e["writes"])
print(f"{e['device_ns'] / n / 1e3:.1f} {e['late_ns_sum'] / n / 1e3:.1f}")
EOF2
)"
            lat_of[$engine$extra]=$lat
            model_of[$engine$extra]=$model
            echo "$mode ${engine}:${extra} $lat $model $late $(python3 -c "print(f'{$lat-$model-$late:.1f}')") $(python3 -c "print(f'{$lat/$model:.3f}')") $(python3 -c "print(f'{$t1-$t0:.2f}')")"
        done
        p=psync--iodepth=1 a=libaio--iodepth=1
        echo "$mode libaio QD1 / psync QD1: $(python3 -c "print(f'{${lat_of[$a]}/${lat_of[$p]}:.3f} (fio means), {(${lat_of[$a]}/${model_of[$a]})/(${lat_of[$p]}/${model_of[$p]}):.3f} (each against its own model)')")"
        unset lat_of model_of
    done
    echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
