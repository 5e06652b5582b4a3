#!/bin/bash
# Issue 27, item 5: does smart, where its rule blocks, wait through the cheaper of io_uring
# and the plain system call on this host and under this load?
#
# block (io_uring's blocking wait), sync (pread/pwrite) and smart take turns in a Williams
# order (3 strategies, 6 rounds), `smartcon io`, 4 KiB random O_DIRECT reads and writes at
# QD1 on a 256 MiB file this script creates in $TMPDIR (the local disk), idle and then with a
# busy loop per core. Prints per load and op the geometric means of the per-round ratios and
# smart's share of waits by the plain call. The file, the busy loops and the records are
# removed at the end, also on Ctrl-C.
#
#   scripts/bench-block-path.sh [SMARTCON_BINARY]   (default target/release/smartcon)
set -u
B=${1:-target/release/smartcon}
DIR=$(mktemp -d "${TMPDIR:-/tmp}/smartcon-block-path.XXXXXX")
F=$DIR/file.img
CR=()
stop_load() { for p in "${CR[@]}"; do kill "$p" 2>/dev/null; done; CR=(); }
trap 'stop_load; rm -rf "$DIR"' EXIT
trap 'exit 130' INT TERM
dd if=/dev/zero of="$F" bs=1M count=256 oflag=direct conv=fsync status=none || exit 2
S=(block sync smart)
ORD=("0 1 2" "1 2 0" "2 0 1" "2 1 0" "0 2 1" "1 0 2")
for load in idle crunchers; do
  if [ $load = crunchers ]; then
    for _ in $(seq "$(nproc)"); do ( while :; do :; done ) & CR+=($!); done
    sleep 0.2
  fi
  for round in 0 1 2 3 4 5; do
    for op in read write; do
      for i in ${ORD[$round]}; do
        s=${S[$i]}
        "$B" io --target "$F" --op $op --bs 4k --strategy $s --duration 1s --destructive --json \
          > "$DIR/$load-$op-$round-$s.json" 2>/dev/null
      done
    done
  done
  stop_load
done
python3 - "$DIR" <<'PY'
import json, glob, math, sys, collections
R = collections.defaultdict(dict)
for f in glob.glob(sys.argv[1] + '/*.json'):
    load, op, rnd, s = f.split('/')[-1][:-5].split('-')
    try:
        R[(load, op)].setdefault(int(rnd), {})[s] = json.loads(open(f).readline())
    except (ValueError, IndexError):
        pass
gm = lambda x: math.exp(sum(map(math.log, x)) / len(x)) if x else float('nan')
print("| load | op | rounds | sync / block | smart / block | smart / sync | smart's waits by the plain call |")
print("|---|---|---|---|---|---|---|")
for (load, op), rounds in sorted(R.items()):
    rs = [r for r in rounds.values() if len(r) == 3]
    ratio = lambda a, b: gm([r[a]['iops'] / r[b]['iops'] for r in rs])
    share = [r['smart']['decisions']['by_strategy'].get('sync', 0) / max(1, r['smart']['ios']) for r in rs]
    print(f"| {load} | {op} | {len(rs)} | {ratio('sync','block'):.2f} | {ratio('smart','block'):.2f} | "
          f"{ratio('smart','sync'):.2f} | {min(share):.2f}-{max(share):.2f} |")
PY
