#!/usr/bin/env bash
# The measurements of docs/vm.md (issue 23): `smartcon emulate vm` in real time (the seed's
# reference system) against virtual time, on the same workloads, interleaved:
#   boot   - the guest runs `true` (whole run's wall time)
#   sleep  - the guest sleeps 5 s (its own clock against the wall)
#   tar    - a source tree (/usr/include/linux, 6.5 MiB, as a tar archive read from the host)
#            extracted onto ext4 on the device, synced, caches dropped, then wc over it
#   fio    - 4 KiB random reads, psync, direct, QD1, N I/Os on a 64 MiB file on ext4
#            (written first with dd, 1 MiB direct writes)
# Each line: workload, mode, guest time of the command (s), its wall time (s), whole run's
# wall (s), the device's requests and time, the share of requests back within 2% of the
# model's instant, the page pieces joined to their request, and for fio the guest fio's mean
# completion latency (ms). The seed's tables: `smartcon emulate sweep --vm [--fio]`.
#
#   bash scripts/bench-vm.sh [--spec emu:hdd] [--rounds 2] [--fio-ios 500]
#   ONLY="fio" bash scripts/bench-vm.sh      # some of the workloads
set -euo pipefail
cd "$(dirname "$0")/.."
spec=emu:hdd
rounds=2
fio_ios=500
while [ $# -gt 0 ]; do
    case "$1" in
        --spec) spec=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --fio-ios) fio_ios=$2; shift 2 ;;
        *) echo "usage: $0 [--spec SPEC] [--rounds N] [--fio-ios N]" >&2; exit 2 ;;
    esac
done
command -v linux.uml >/dev/null || { echo "linux.uml missing: apt-get install user-mode-linux" >&2; exit 2; }
cargo build --release -q
bin=target/release/smartcon
work=$(mktemp -d /var/tmp/smartcon-bench-vm.XXXXXX)
trap 'rm -rf "$work"' EXIT
tar cf "$work/src.tar" -C /usr/include linux

run() { # name mode args...
    local name=$1 mode=$2; shift 2
    local flags=()
    [ "$mode" = virtual ] && flags+=(--virtual-time)
    local t0 t1 out
    t0=$(date +%s.%N)
    out=$("$bin" emulate vm "$spec" "${flags[@]}" --json -- "$@" 2>"$work/err") || { echo "$name $mode failed:"; cat "$work/err"; return; }
    t1=$(date +%s.%N)
    local rec fio_mean=""
    rec=$(printf '%s\n' "$out" | grep '"type":"emulate_vm"')
    if [ "$name" = fio ]; then
        fio_mean=$(printf '%s\n' "$out" | grep -v '"type":"emulate_vm"' | jq -s '.[0].jobs[0].read.clat_ns.mean / 1e6' 2>/dev/null || echo "?")
    fi
    printf '%-6s %-8s guest %8.3f s  cmd wall %7.3f s  run wall %6.2f s  reads %6s writes %6s device %7.3f s  within 2%% %s  joined %s  %s\n' \
        "$name" "$mode" "$(jq .guest_ns <<<"$rec" | awk '{print $1/1e9}')" \
        "$(jq .command_wall_ns <<<"$rec" | awk '{print $1/1e9}')" "$(echo "$t1 - $t0" | bc)" \
        "$(jq .device.reads <<<"$rec")" "$(jq .device.writes <<<"$rec")" \
        "$(jq .device.device_ns <<<"$rec" | awk '{print $1/1e9}')" "$(jq .within_2pct <<<"$rec")" \
        "$(jq .device.pieces_joined <<<"$rec")" "${fio_mean:+fio mean ${fio_mean} ms}"
}

echo "# $(date -u +%FT%TZ) spec $spec, load $(cut -d' ' -f1-3 /proc/loadavg)"
only=${ONLY:-boot sleep tar fio}
want() { [[ " $only " == *" $1 "* ]]; }
for r in $(seq "$rounds"); do
    for mode in real virtual; do
        if want boot; then run boot "$mode" true; fi
        if want sleep; then run sleep "$mode" sleep 5; fi
        want tar && run tar "$mode" sh -c "tar xf $work/src.tar && sync && echo 3 > /proc/sys/vm/drop_caches && find linux -type f -exec cat {} + | wc -c >/dev/null"
        # The file is written first with 1 MiB requests (fio would lay it out 4 KiB at a time).
        want fio && run fio "$mode" sh -c "dd if=/dev/zero of=f bs=1M count=64 oflag=direct status=none && \
            fio --name=r --filename=f --size=64m --ioengine=psync --direct=1 --rw=randread --bs=4k \
            --number_ios=$fio_ios --clocksource=clock_gettime --output-format=json"
    done
done
echo "# done, load $(cut -d' ' -f1-3 /proc/loadavg)"
