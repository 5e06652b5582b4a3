#!/usr/bin/env bash
# Seed 001 on the loop device: where its kernel worker runs and how long it waits for a CPU
# after the reading thread queues a read, with the reader spinning and blocking
# (docs/fidelity.md, "Seed 001 in detail"). Root: it makes a loop device over /dev/shm with
# ext2 and a tracefs instance, and removes both on exit, Ctrl-C or error.
#
#   scripts/acs-loop-worker.sh [SMARTCON] [READER_CPU] [SECONDS]
#
# For spin and block in turn: `smartcon io` reads the ext2 file sequentially, 4 KiB O_DIRECT,
# pinned to READER_CPU (default 1); the trace records every wake-up of an unbound kworker by
# the reading thread (comm smartcon-io-0) and the worker's next switch-in. Printed per
# strategy: the engine's IOPS and spins that slept, and the worker's wait from wake-up to
# running, split by whether it was queued on the reader's CPU or another.
set -euo pipefail
SMARTCON=${1:-target/release/smartcon}
CPU=${2:-1}
SECS=${3:-2}
[ "$(id -u)" = 0 ] || { echo "acs-loop-worker: needs root (loop device, tracefs)" >&2; exit 2; }
TRACEFS=/sys/kernel/tracing
[ -d "$TRACEFS/instances" ] || { echo "acs-loop-worker: no tracefs at $TRACEFS" >&2; exit 2; }
command -v mkfs.ext2 >/dev/null || { echo "acs-loop-worker: mkfs.ext2 missing (e2fsprogs)" >&2; exit 2; }

TAG=smartcon-acs-diag-$$
IMG=/dev/shm/$TAG.img
MNT=$(mktemp -d /tmp/$TAG.XXXX)
INST=$TRACEFS/instances/$TAG
OUT=$(mktemp -d /tmp/$TAG-trace.XXXX)
LOOP=
cleanup() {
    [ -d "$INST" ] && rmdir "$INST" 2>/dev/null || true
    mountpoint -q "$MNT" && umount "$MNT" || true
    [ -n "$LOOP" ] && losetup -d "$LOOP" 2>/dev/null || true
    rm -f "$IMG"
    rmdir "$MNT" 2>/dev/null || true
    rm -rf "$OUT"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

truncate -s 96M "$IMG"
LOOP=$(losetup -f --show "$IMG")
mkfs.ext2 -q -b 4096 "$LOOP"
mount "$LOOP" "$MNT"
head -c 64M /dev/urandom > "$MNT/f"
sync

mkdir "$INST"
echo 16384 > "$INST/buffer_size_kb"
echo 'comm ~ "kworker/u*"' > "$INST/events/sched/sched_wakeup/filter"
echo 'next_comm ~ "kworker/u*"' > "$INST/events/sched/sched_switch/filter"

for s in spin block; do
    echo > "$INST/trace"
    echo 1 > "$INST/events/sched/sched_wakeup/enable"
    echo 1 > "$INST/events/sched/sched_switch/enable"
    io=$("$SMARTCON" io --target "$MNT/f" --strategy "$s" --io-cpus "$CPU" --duration "${SECS}s" --pattern seq 2>&1)
    echo 0 > "$INST/events/sched/sched_wakeup/enable"
    echo 0 > "$INST/events/sched/sched_switch/enable"
    cp "$INST/trace" "$OUT/$s.txt"
    echo "$s on $LOOP, reader pinned to CPU $CPU, load average $(cut -d' ' -f1-3 /proc/loadavg):"
    echo "$io" | grep -E "IOPS|latency|budget" | sed 's/^/  /'
    python3 - "$OUT/$s.txt" <<'EOF'
import re, statistics, sys
pending, waits = {}, {True: [], False: []}
for line in open(sys.argv[1]):
    m = re.match(r'\s*(.+?)-(\d+)\s+\[(\d+)\].*?\s(\d+\.\d+): (\w+): (.*)', line)
    if not m or line.startswith('#'):
        continue
    comm, _, cpu, ts, event, rest = m.groups()
    if event == 'sched_wakeup' and comm == 'smartcon-io-0':
        kv = dict(x.split('=', 1) for x in rest.split() if '=' in x)
        pending[kv['pid']] = (float(ts), int(kv['target_cpu']) == int(cpu))
    elif event == 'sched_switch':
        n = re.search(r'next_pid=(\d+)', rest)
        if n and n.group(1) in pending:
            t0, same = pending.pop(n.group(1))
            waits[same].append((float(ts) - t0) * 1e6)
for same in (True, False):
    v = sorted(waits[same])
    if not v:
        continue
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))]
    where = "on the reader's CPU" if same else "on the other CPU "
    print(f"  worker woken {where}: {len(v):6d} times, wait to run p50 {q(.5):7.0f} us  p90 {q(.9):7.0f} us  mean {statistics.mean(v):7.0f} us")
EOF
done
