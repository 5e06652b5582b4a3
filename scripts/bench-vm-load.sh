#!/usr/bin/env bash
# docs/vm.md "The host's load": the tar test of scripts/bench-vm.sh (/usr/include/linux as a
# tar archive extracted onto ext4 on emu:hdd, synced, caches dropped, wc of every file) in
# virtual time with --guest-clock cpu and wall, and in real time (the reference), each without
# and with N busy loops on the host beside it (started and ended here), interleaved. One line
# a run: clock, hog, load average at its start, CMD's guest time, its wall time, the guest
# CPU's utilization, the device time, the share of requests within 2% of the model, the data
# halves that ran past the model's instant.
#
#   bash scripts/bench-vm-load.sh [--rounds 1] [--hogs 2] [--clocks "cpu wall real"]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=1
hogs=2
clocks="cpu wall real"
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --hogs) hogs=$2; shift 2 ;;
        --clocks) clocks=$2; shift 2 ;;
        *) echo "usage: $0 [--rounds N] [--hogs N] [--clocks \"cpu wall real\"]" >&2; exit 2 ;;
    esac
done
command -v linux.uml >/dev/null || { echo "linux.uml missing: apt-get install user-mode-linux" >&2; exit 2; }
# SMARTCON_BIN: a smartcon built elsewhere (its libsmartcon.so beside it); else this tree's.
bin=${SMARTCON_BIN:-target/release/smartcon}
[ -n "${SMARTCON_BIN:-}" ] || cargo build --release -q
work=$(mktemp -d /var/tmp/smartcon-bench-vm-load.XXXXXX)
pids=()
stop_hogs() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait "${pids[@]}" 2>/dev/null || true; pids=(); }
trap 'stop_hogs; rm -rf "$work"' EXIT
tar cf "$work/src.tar" -C /usr/include linux

one() { # hog clock
    local hog=$1 clock=$2
    if [ "$hog" = 1 ]; then for _ in $(seq "$hogs"); do (while :; do :; done) & pids+=($!); done; fi
    local flags=(--virtual-time --guest-clock "$clock")
    [ "$clock" = real ] && flags=()
    local load out rec
    load=$(cut -d' ' -f1 /proc/loadavg)
    out=$("$bin" emulate vm emu:hdd "${flags[@]}" --json -- sh -c "tar xf $work/src.tar && sync && echo 3 > /proc/sys/vm/drop_caches && find linux -type f -exec cat {} + | wc -c >/dev/null" 2>"$work/err") || true
    stop_hogs
    rec=$(printf '%s\n' "$out" | grep '"type":"emulate_vm"') || { echo "$clock hog=$hog failed:"; cat "$work/err"; return; }
    jq -r --arg c "$clock" --arg h "$hog" --arg l "$load" \
        '"\($c) hog=\($h) load=\($l) guest=\(.guest_ns/1e9) s cmd wall=\(.command_wall_ns/1e9) s cpu=\(.guest_cpu_utilization) device=\(.device.device_ns/1e9) s within 2%=\(.within_2pct) overran=\(.device.lateness.data_overran) late total=\(.device.lateness.sum_ns/1e9) s nice=\(.host_nice)"' <<<"$rec"
}

echo "# $(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg), hogs $hogs"
for _ in $(seq "$rounds"); do
    for c in $clocks; do one 0 "$c"; one 1 "$c"; done
done
echo "# done $(date -u +%T), load $(cut -d' ' -f1-3 /proc/loadavg)"
