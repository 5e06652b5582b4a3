#!/usr/bin/env bash
# Issue 29's (and issue 22's items 4-6) reproductions, one by one, against a built binary:
# each line is `ID | exit | stderr lines | max RSS KiB | outcome`. The outcome is what the
# script observed (files compared, mounts and devices looked up), not what it expected.
# Needs root for the tmpfs, loop, zram and FUSE cases (they print "skipped" otherwise).
# Usage: scripts/repro-issue29.sh [path/to/smartcon]   (docs/safety.md has the results)
set -u
B=${1:-target/release/smartcon}
B=$(readlink -f "$B")
W=$(mktemp -d /tmp/smartcon-repro29.XXXXXX)
export SMARTCON_HOME=$W/home TMPDIR=$W/tmp
mkdir -p "$W/home" "$W/tmp" "$W/d"
cd "$W/d" || exit 1
ROOT=0
[ "$(id -u)" = 0 ] && ROOT=1

# run ID -- ARGS...: runs smartcon with a 2 GiB address-space cap and a 60 s limit; sets
# RC, LINES (stderr lines), RSS (KiB), ERR (the last stderr line).
run() {
  local id=$1
  shift 2
  /usr/bin/time -f '%M' -o "$W/rss" prlimit --as=$((2 << 30)) timeout 60 "$B" "$@" >"$W/out" 2>"$W/err" </dev/null
  RC=$?
  LINES=$(wc -l <"$W/err")
  RSS=$(tail -1 "$W/rss")
  ERR=$(tail -1 "$W/err" | cut -c1-160)
}
row() { printf '%s | %s | %s | %s | %s\n' "$1" "$RC" "$LINES" "$RSS" "$2"; }
same() { cmp -s "$1" "$2" && echo "kept" || echo "CHANGED"; }

echo "case | exit | stderr lines | max RSS KiB | outcome"
# --- Output paths
echo keep >mine.json; cp mine.json ref
run O1 -- probe emu:nvram --duration 1ms --sizes 4k --out mine.json
row O1 "probe --out existing: file $(same mine.json ref); $ERR"
echo keep >mine.svg; cp mine.svg ref
run O2 -- merge-bench --duration 1ms --rounds 1 --plot mine.svg
row O2 "merge-bench --plot existing: file $(same mine.svg ref); $ERR"
ln -s "$W/d/target" link.json
run O3 -- probe emu:nvram --duration 1ms --sizes 4k --out link.json
row O3 "probe --out symlink: $( [ -L link.json ] && [ ! -e target ] && echo 'link kept, nothing written through it' || echo CHANGED); $ERR"
start=$(date +%s.%N)
run O4 -- run --stats missing/s.jsonl -- sh -c "touch $W/d/ran"
row O4 "run --stats MISSING/: program $( [ -e ran ] && echo RAN || echo 'not run'); $ERR"
if [ $ROOT = 1 ]; then
  mkdir ro && mount -t tmpfs -o ro,size=1m tmpfs ro
  for c in "probe emu:nvram --duration 1ms --sizes 4k --out ro/p.json" "ctx --quick --no-perf --out ro/h.json" \
    "bench --targets emu:nvram --sizes 4k --duration 100ms --sweep-interval 1us --plot ro/b.svg" \
    "merge-bench --duration 1ms --rounds 1 --plot ro/m.svg"; do
    # shellcheck disable=SC2086
    run O5 -- $c
    row O5 "${c%% *} on a read-only directory: $( [ -z "$(cat "$W/out")" ] && echo 'refused before measuring' || echo 'MEASURED'); $ERR"
  done
  umount ro
  mkdir full && mount -t tmpfs -o size=16k tmpfs full && head -c 12288 /dev/zero >full/filler 2>/dev/null
  run O7 -- bench --targets emu:nvram --sizes 4k --duration 100ms --sweep-interval 1us,2us --plot full/b.svg
  row O7 "bench --plot on a full tmpfs: left [$(ls -A full | grep -v filler | tr '\n' ' ')]; $ERR"
  run O7 -- evaluate --tiny --out full/ev
  row O7 "evaluate --out on a full tmpfs: left [$(ls -A full | grep -v filler | tr '\n' ' ')]; $ERR"
  umount full
else
  echo "O5/O7 | - | - | - | skipped: read-only and full tmpfs mounts need root"
fi
for c in "ctx --quick --no-perf --out nodir/h.json" "ets --quick --out nodir/ets" "evaluate --tiny --out nodir/ev" \
  "probe emu:nvram --duration 1ms --sizes 4k --out nodir/p.json"; do
  # shellcheck disable=SC2086
  run O8 -- $c
  row O8 "${c%% *} with a missing parent: $( [ -e nodir ] && echo 'CREATED it' || echo 'refused, not created'); $ERR"
done

# --- Inputs
mkfifo fifo
for c in "trace info fifo" "cachesim --trace fifo" "trace convert --lackey fifo --out t1" \
  "emulate replay --device emu:nvme --trace fifo" "emulate replay --device emu:nvme --faults fifo" \
  "model --host-profile fifo" "model --results fifo" "io --target emu:nvram --duration 1ms --profile fifo"; do
  # shellcheck disable=SC2086
  run I1 -- $c
  row I1 "$c: $ERR"
done
rm -f "$W/home/host-wait.json"; mkfifo "$W/home/host-wait.json"
run I1 -- bench --targets emu:nvram --sizes 4k --duration 100ms --sweep-interval 1us
row I1 "a FIFO at \$SMARTCON_HOME/host-wait.json: $ERR"
rm "$W/home/host-wait.json"
for c in "trace convert --lackey /dev/zero --out t2" "emulate replay --device emu:nvme --trace /dev/zero" \
  "emulate replay --device emu:nvme --faults /dev/zero" "emulate replay --device emu:nvme,table=/dev/zero" \
  "model --host-profile /dev/zero" "io --target emu:nvram --duration 1ms --profile /dev/zero" \
  "emulate replay --device emu:nvme --trace /dev/urandom"; do
  # shellcheck disable=SC2086
  run I2 -- $c
  row I2 "$c: $ERR"
done
head -c $((200 << 20)) /dev/zero >zeros
for c in "trace convert --lackey zeros --out t3" "emulate replay --device emu:nvme --trace zeros" \
  "model --host-profile zeros" "emulate replay --device emu:nvme --faults zeros"; do
  # shellcheck disable=SC2086
  run I2 -- $c
  row I2 "$c (200 MiB regular file): $ERR"
done
rm zeros
(echo "fio version 2 iolog"; echo "/dev/x add"; echo "/dev/x open"; yes "/dev/x read 0 4096" | head -3000) >long.iolog
run I3 -- emulate replay --device emu:nvme --trace long.iolog --trace-lines-max 1000
row I3 "a trace longer than --trace-lines-max: $ERR"
printf 'fio version 2 iolog\n/dev/x add\n/dev/x open\n/dev/x read 0 4096\n/dev/x wait 18446744073709551\n/dev/x read 4096 4096\n' >huge.iolog
run I4 -- emulate replay --device emu:nvme --trace huge.iolog
row I4 "iolog wait 18446744073709551: $ERR"
echo '{"version": 1, "blocking_ns' >"$W/home/host-wait.json"
run I5 -- bench --targets emu:nvram --sizes 4k --duration 100ms --sweep-interval 1us
row I5 "a truncated host-wait.json: $(grep -m1 host-wait "$W/err" | cut -c1-160)"
rm -f "$W/home/host-wait.json"

# --- Records and cleanup
( "$B" probe tmp:256m --duration 10s >/dev/null 2>&1 & echo $! >"$W/pid"; wait ) 2>/dev/null &
sleep 2; kill -9 "$(cat "$W/pid")"; sleep 0.3
before=$(ls "$TMPDIR" | grep -c '^smartcon-')
run R1 -- cleanup
row R1 "probe tmp:256m, kill -9: $before tmp file(s) before cleanup, $(ls "$TMPDIR" | grep -c '^smartcon-') after"
mkdir -p "$W/home/devices" && printf 'owner\n\xff\xfe\n\x80\n' >"$W/home/devices/bad.rec"
run R2 -- cleanup
row R2 "a record that is not UTF-8: $ERR"
rm -f "$W/home/devices/bad.rec"
mkdir -p empty && echo "999999 1" >empty/.smartcon-claim
run R3 -- emulate replay --device emu:nvme --out empty
row R3 "a stale .smartcon-claim in an empty --out: $( [ -e empty/results.jsonl ] && echo 'reused' || echo 'BLOCKED'); $ERR"
if [ $ROOT = 1 ] && [ -e /dev/fuse ]; then
  mkdir -p mnt full2 && touch full2/mine
  run R4 -- emulate mount emu:nvme full2
  row R4 "emulate mount on a non-empty directory: $ERR"
  "$B" emulate mount emu:nvme mnt >"$W/m1" 2>&1 & m1=$!
  "$B" emulate mount emu:nvme mnt >"$W/m2" 2>&1 & m2=$!
  # Whichever is refused ends first; the other comes up.
  wait -n -p first $m1 $m2; RC=$?
  if [ "$first" = "$m1" ]; then lost=m1; won=$m2; wlog=m2; else lost=m2; won=$m1; wlog=m1; fi
  for _ in $(seq 600); do grep -q ready "$W/$wlog" && break; sleep 0.1; done
  LINES=$(wc -l <"$W/$lost"); RSS=-
  row R5 "two emulate mount on one DIR: the other came up: $(grep -c ready "$W/$wlog"); refused: $(head -1 "$W/$lost" | cut -c1-120)"
  kill -INT $won; wait $won
  RC=-; LINES=-; RSS=-
  row R5 "after the mounted one's SIGINT: mounts on DIR $(grep -c " $W/d/mnt " /proc/mounts), records $(ls "$W/home/devices" | wc -l)"
else
  echo "R4/R5 | - | - | - | skipped: emulate mount needs root and /dev/fuse"
fi

# --- Messages
run M1 -- evaluate --no-such-flag
row M1 "an unknown flag: $ERR"
printf 'not = [toml\n' >bad.toml
run M2 -- emulate replay --device emu:nvme --faults bad.toml
row M2 "a TOML error: $ERR"
run M3 -- probe emu:nvram --duration 1ms --out "$(printf 'a\nb')/p.json"
row M3 "a path with a newline: $ERR"

cd / && rm -rf "$W"
