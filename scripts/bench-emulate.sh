#!/usr/bin/env bash
# Unmodified programs on emulated devices through `smartcon emulate mount` (seed 004's
# postmark, kernel-source extraction + wc, dd, hdparm -t and fio runs), on emu:sdcard Ch1-1S and
# a faster ChN-xS. Prints a markdown table for docs/emulator.md, then each mount's
# accuracy report. Root only (FUSE, losetup, mount).
#
#   TREE_MB=300 SPECS="emu:sdcard emu:sdcard,channels=4,speedup=2" scripts/bench-emulate.sh
#
# TREE_MB: size of the generated source tree (text, C-like files); CI uses 20.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
  echo "bench-emulate: needs root (FUSE mount, losetup, mount); skipped" >&2
  exit 0
fi
for t in postmark fio dd hdparm tar wc python3; do
  command -v "$t" >/dev/null || { echo "bench-emulate: $t is not installed" >&2; exit 1; }
done

TREE_MB=${TREE_MB:-300}
SPECS=${SPECS:-"emu:sdcard emu:sdcard,channels=4,speedup=2"}
FIO_S=${FIO_S:-10}
cargo build --release -q -p smartcon-cli
BIN=$PWD/target/release/smartcon
WORK=$(mktemp -d /tmp/smartcon-bench-emulate.XXXXXX)
export SMARTCON_HOME=$WORK/home
MNT=$WORK/mnt
mkdir -p "$MNT" "$SMARTCON_HOME"
cleanup() { "$BIN" emulate umount "$MNT" >/dev/null 2>&1 || true; "$BIN" emulate cleanup >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

# The source tree: directories of C-like text files, about TREE_MB MB, as one tarball.
python3 - "$WORK/tree" "$TREE_MB" <<'EOF'
import os, sys, random
root, mb = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
words = ["static", "int", "return", "struct", "unsigned", "long", "if", "else", "for", "while", "void", "const"]
total, n = 0, 0
while total < mb << 20:
    d = os.path.join(root, f"dir{n // 100:03d}", f"sub{n % 10}")
    os.makedirs(d, exist_ok=True)
    lines = [" ".join(rng.choice(words) for _ in range(8)) + ";\n" for _ in range(rng.randint(20, 600))]
    text = "".join(lines)
    with open(os.path.join(d, f"file{n}.c"), "w") as f:
        f.write(text)
    total += len(text)
    n += 1
EOF
tar cf "$WORK/tree.tar" -C "$WORK/tree" .
rm -rf "$WORK/tree"
SIZE=$(( (TREE_MB * 3 + 256) ))m

drop_cache() { # clean pages of every file under $1, so reads reach the device
  python3 - "$1" <<'EOF'
import os, sys
for d, _, files in os.walk(sys.argv[1]):
    for f in files:
        fd = os.open(os.path.join(d, f), os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
EOF
}

REPORTS=$WORK/reports.txt
: >"$REPORTS"
declare -A ROW
for spec in $SPECS; do
  # postmark and tar + wc on ext4.
  "$BIN" emulate mount "$spec" "$MNT" --fs ext4 --size "$SIZE" --detach >/dev/null
  mount -o remount,sync "$MNT"
  pm=$(printf 'set location %s\nset size 50000 200000\nset number 50\nset transactions 200\nrun\nquit\n' "$MNT" \
    | postmark | sed -n 's/.*transactions (\([0-9]*\) per second).*/\1/p' | head -1)
  rm -rf "${MNT:?}"/*
  mount -o remount,async "$MNT"
  t0=$(date +%s.%N)
  tar xf "$WORK/tree.tar" -C "$MNT"
  sync -f "$MNT"
  t1=$(date +%s.%N)
  drop_cache "$MNT"
  find "$MNT" -name '*.c' -print0 | xargs -0 wc -l >/dev/null
  t2=$(date +%s.%N)
  { echo "== $spec, ext4 (postmark, tar + wc)"; "$BIN" emulate umount "$MNT" | sed -n '/^accuracy report/,$p'; } >>"$REPORTS"
  # dd sequential read and fio random 4 KiB writes on the raw loop device.
  dev=$("$BIN" emulate mount "$spec" "$MNT" --fs none --size "$SIZE" --detach | sed -n 's/.* ready: \(\/dev\/loop[0-9]*\),.*/\1/p')
  ddout=$(dd if="$dev" of=/dev/null bs=1M count=256 iflag=direct 2>&1 | tail -1)
  # hdparm -t as the seed measures sequential read bandwidth: buffered (read-ahead keeps
  # several requests in flight) and --direct (one at a time).
  hdb=$(hdparm -t "$dev" 2>&1 | sed -n 's/.*= *\([0-9.]* MB\/sec\).*/\1/p')
  hdd=$(hdparm -t --direct "$dev" 2>&1 | sed -n 's/.*= *\([0-9.]* MB\/sec\).*/\1/p')
  fiolat=$(fio --name=w --filename="$dev" --rw=randwrite --bs=4k --direct=1 --ioengine=psync --size=256m \
    --runtime="$FIO_S" --time_based --output-format=json | python3 -c \
    'import json,sys; w=json.load(sys.stdin)["jobs"][0]["write"]; print("%.1f" % (w["lat_ns"]["mean"]/1e3))')
  { echo "== $spec, raw (dd, fio)"; "$BIN" emulate umount "$MNT" | sed -n '/^accuracy report/,$p'; } >>"$REPORTS"
  ROW[$spec]="| $spec | $pm | $(echo "$t1 - $t0" | bc) | $(echo "$t2 - $t1" | bc) | ${ddout##*, } | $hdb / $hdd | $fiolat |"
done

echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); tree ${TREE_MB} MB; $(nproc) CPUs"
echo
echo "| device | postmark tps (sync mount) | tar x + sync (s) | wc over the tree (s) | dd read (1 MiB, direct) | hdparm -t (buffered / --direct) | fio rand 4 KiB write mean (us) |"
echo "|---|---|---|---|---|---|---|"
for spec in $SPECS; do echo "${ROW[$spec]}"; done
echo
cat "$REPORTS"
