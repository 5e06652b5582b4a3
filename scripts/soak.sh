#!/usr/bin/env bash
# Soak test of issue 16's interrupt and concurrency cases (not part of scripts/test.sh):
# repeats each case N times and checks that nothing is left behind: no loop device over a
# smartcon image, no smartcon mount, no zram device or creation record of ours, no temp
# file, no /dev/shm image, no partial trace. Device cases need root (skipped otherwise).
#
#   scripts/soak.sh [N]        (default N=20; builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-20}
cargo build --release -q -p smartcon-cli
bin=$PWD/target/release/smartcon
work=$(mktemp -d /tmp/smartcon-soak-XXXXXX)
export SMARTCON_HOME=$work/home TMPDIR=$work/tmp
mkdir -p "$SMARTCON_HOME" "$TMPDIR"
fail=0
bad() { echo "soak: FAIL: $*"; fail=1; }

# Waits until $1 exists (bounded), so a signal lands mid-run rather than before it starts.
wait_for() { for _ in $(seq 300); do [ -e "$1" ] && return 0; sleep 0.05; done; return 1; }

# What a run of ours left: only names with our pids and zram ids from our own records,
# because other smartcon runs on a shared machine may hold devices at the same time.
zram_ids() { cat "$SMARTCON_HOME"/devices/*.rec 2>/dev/null | awk 'p {print; p=0} /^zram$/ {p=1}'; }
check_clean() {
    local what=$1 pid=${2:-none} ids=${3:-}
    if losetup -a 2>/dev/null | grep -q "smartcon-loop-$pid-"; then bad "$what: loop device left"; fi
    if grep -q "smartcon-loopfs-$pid-" /proc/mounts; then bad "$what: mount left"; fi
    if ls /dev/shm | grep -q "^smartcon-loop-$pid-"; then bad "$what: /dev/shm image left"; fi
    if [ -n "$(ls -A "$TMPDIR")" ]; then bad "$what: temp files left: $(ls -A "$TMPDIR")"; fi
    if [ -n "$(ls -A "$SMARTCON_HOME/devices" 2>/dev/null)" ]; then bad "$what: creation records left"; fi
    for id in $ids; do [ ! -e "/sys/block/zram$id" ] || bad "$what: zram$id left"; done
}

root=0; [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null && root=1
[ $root = 1 ] || echo "soak: not root or no mkfs.ext4: the device cases are skipped"
eval_args=(evaluate --tiny --workloads iozone-rand-read --loads bm-only --strategies block,spin --skip-polling)

for i in $(seq "$n"); do
    # 1. trace synth, one signal: exit 130, no partial file.
    t=$work/t$i.trace
    "$bin" trace synth --kind random --working-set 1m --accesses 1000000000 --out "$t" >/dev/null 2>&1 &
    pid=$!; wait_for "$t" || true; kill -TERM $pid; set +e; wait $pid; rc=$?; set -e
    [ $rc = 130 ] || bad "trace synth exit $rc after SIGTERM"
    [ ! -e "$t" ] || bad "partial trace $t left"

    # 2. io on a temporary file, Ctrl-C: exit 130, temp file removed.
    "$bin" io --target tmp:64m --duration 60s >/dev/null 2>&1 &
    pid=$!; sleep 0.$((RANDOM % 9 + 1)); kill -INT $pid; set +e; wait $pid; rc=$?; set -e
    [ $rc = 130 ] || bad "io exit $rc after SIGINT"
    check_clean "io round $i" $pid

    # 3. two evaluates racing for one --out: exactly one exits 0.
    out=$work/race$i
    "$bin" "${eval_args[@]}" --targets emu:nvme,size=16m --duration 5ms --out "$out" >/dev/null 2>&1 & p1=$!
    "$bin" "${eval_args[@]}" --targets emu:nvme,size=16m --duration 5ms --out "$out" >/dev/null 2>&1 & p2=$!
    set +e; wait $p1; r1=$?; wait $p2; r2=$?; set -e
    [ "$((r1 == 0)):$((r2 == 0))" = "1:0" ] || [ "$((r1 == 0)):$((r2 == 0))" = "0:1" ] || bad "race $i: exits $r1 and $r2"
    rm -rf "$out"

    if [ $root = 1 ]; then
        # 4. evaluate on ramdisks, Ctrl-C then a burst of Ctrl-Cs: exit 130, nothing left.
        out=$work/dev$i
        "$bin" "${eval_args[@]}" --targets loop:16m,zram:16m,loopfs:32m --duration 3s --out "$out" >/dev/null 2>&1 &
        pid=$!; wait_for "$out/.smartcon-claim" || true; sleep 0.$((RANDOM % 9 + 1))
        ids=$(zram_ids); kill -INT $pid; for _ in $(seq 20); do kill -INT $pid 2>/dev/null || break; sleep 0.02; done
        set +e; wait $pid; rc=$?; set -e
        [ $rc = 130 ] || bad "evaluate on ramdisks exit $rc after repeated SIGINT"
        check_clean "repeated SIGINT round $i" $pid "$ids"
        rm -rf "$out"

        # 5. the same, killed with SIGKILL at a random moment, then smartcon cleanup.
        "$bin" "${eval_args[@]}" --targets loop:16m,zram:16m,loopfs:32m --duration 3s --out "$out" >/dev/null 2>&1 &
        pid=$!; sleep 0.$((RANDOM % 9 + 1)); ids=$(zram_ids); kill -KILL $pid; set +e; wait $pid; set -e
        "$bin" cleanup >/dev/null || bad "cleanup failed in round $i"
        rm -rf "$TMPDIR"/* "$out"
        check_clean "SIGKILL + cleanup round $i" $pid "$ids"
    fi
    echo "soak: round $i/$n done"
done
check_clean "end"
rm -rf "$work"
[ $fail = 0 ] && echo "soak: $n rounds, nothing left behind" || { echo "soak: failures above"; exit 1; }
