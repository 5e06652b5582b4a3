#!/usr/bin/env bash
# Streamed trace replay, old against new binary in one run, alternated ROUNDS times:
# records/s of wall time and of CPU time (the command's "M requests/s", whose CPU time
# counts the reader thread too in the new binary), user+sys and peak RSS by /usr/bin/time.
# Usage: scripts/bench-replay-streamed.sh OLD_SMARTCON NEW_SMARTCON [TRACE] [ROUNDS]
# Without TRACE a 3 M-record fio v3 iolog (4 KiB, 70% reads) is made in a temporary folder.
set -euo pipefail
old=${1:?old smartcon binary}; new=${2:?new smartcon binary}; trace=${3:-}; rounds=${4:-3}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
if [[ -z $trace ]]; then
  trace=$tmp/trace.log
  python3 - "$trace" <<'PY'
import random, sys
r = random.Random(1)
with open(sys.argv[1], "w") as f:
    f.write("fio version 3 iolog\n0 /dev/a add\n")
    us = 0
    for i in range(3_000_000):
        us += r.randrange(20)
        op = "read" if r.random() < 0.7 else "write"
        f.write(f"{us} /dev/a {op} {r.randrange(1 << 18) * 4096} 4096\n")
PY
fi
echo "trace $trace ($(wc -l <"$trace") lines), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
printf '%-4s %-5s %10s %12s %12s %10s %10s\n' round bin ios 'M/s wall' 'M/s CPU' 'user+sys' 'maxrss KB'
for r in $(seq 1 "$rounds"); do
  for which in old new; do
    bin=$old; [[ $which == new ]] && bin=$new
    /usr/bin/time -f '%U %S %M' -o "$tmp/time" "$bin" emulate replay --device emu:nvme --trace "$trace" --json >"$tmp/out.json"
    read -r u s m <"$tmp/time"
    python3 - "$tmp/out.json" "$r" "$which" "$u" "$s" "$m" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ios, wall, cpu_rate = d["ios"], d["wall_ns"], d["requests_per_s_cpu"]
_, r, which, u, s, m = sys.argv[1:]
print(f"{r:<4} {which:<5} {ios:>10} {ios / wall * 1e3:>12.2f} {cpu_rate / 1e6:>12.2f} {float(u) + float(s):>10.2f} {m:>10}")
PY
  done
done
