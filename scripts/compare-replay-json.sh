#!/usr/bin/env bash
# The command's --json of a streamed trace replay, old binary against new, without the timing
# fields (wall_ns, cpu_ns, speedup, the requests/s): the same run must give the same record.
# Cases: a fio v3 iolog (nvme; a fault scenario of write errors, a spike and a stall; sata-ssd
# with a window of 7), an iolog out of order (windows 4096, 100 and 1; gzip with a device
# filter; SJF), MSR (one and two disks, with a filter), Alibaba (with a filter and a window of
# 3), Tencent, blkparse, CRLF iolog and MSR, fio v2, and two errors (a malformed line, the
# line limit), whose message must be the same.
# Usage: scripts/compare-replay-json.sh OLD_SMARTCON NEW_SMARTCON [RECORDS]
# RECORDS (default 1000000) sizes the long traces; the others are a fraction of it.
set -euo pipefail
old=${1:?old smartcon binary}; new=${2:?new smartcon binary}; n=${3:-1000000}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$tmp" "$n" <<'PY'
import gzip, random, sys
d, n = sys.argv[1], int(sys.argv[2])
r = random.Random(1)
def op(): return "read" if r.random() < 0.7 else "write"
with open(f"{d}/fio3.log", "w") as f:
    f.write("fio version 3 iolog\n0 /dev/a add\n")
    us = 0
    for i in range(n):
        us += r.randrange(20)
        f.write(f"{us} /dev/a {op()} {r.randrange(1 << 18) * 4096} {r.choice([4096, 4096, 8192, 512, 131072])}\n")
# Out of order: each timestamp jittered back by up to 300 us; two files, one filtered.
lines = ["fio version 3 iolog\n", "0 /dev/a add\n", "0 /dev/b add\n"]
us = 0
for i in range(n // 3):
    us += r.randrange(20)
    t = max(0, us - r.randrange(300)) if r.random() < 0.3 else us
    dev = "/dev/a" if r.random() < 0.8 else "/dev/b"
    lines.append(f"{t} {dev} {op()} {r.randrange(1 << 18) * 4096} 4096\n")
with open(f"{d}/ooo.log", "w") as f:
    f.writelines(lines)
with gzip.open(f"{d}/ooo.log.gz", "wt") as f:
    f.writelines(lines)
def msr(path, disks, count, crlf=False):
    end = "\r\n" if crlf else "\n"
    with open(path, "w") as f:
        t = 128166372000000000
        for i in range(count):
            t += r.randrange(200)
            disk = r.choice(disks)
            f.write(f"{t},hm,{disk},{'Read' if r.random() < 0.7 else 'Write'},{r.randrange(1 << 20) * 4096},{r.choice([4096, 65536, 512])},{r.randrange(5000)}{end}")
msr(f"{d}/msr1.csv", [1], n)
msr(f"{d}/msr2.csv", [0, 1], n // 2)
msr(f"{d}/msr_crlf.csv", [0], n // 10, crlf=True)
with open(f"{d}/ali.csv", "w") as f:
    t = 1577808000000000
    for i in range(n):
        t += r.randrange(20)
        jitter = r.randrange(3) if r.random() < 0.1 else 0
        f.write(f"{r.choice([3, 7])},{'R' if r.random() < 0.7 else 'W'},{r.randrange(1 << 20) * 4096},{r.choice([4096, 16384])},{t - jitter}\n")
with open(f"{d}/tencent.csv", "w") as f:
    t = 1538323200
    for i in range(n // 2):
        t += 1 if r.random() < 0.0001 else 0
        f.write(f"{t},{r.randrange(1 << 24) * 8},{r.choice([8, 16, 64])},{1 if r.random() < 0.3 else 0},{r.choice([1063, 2001])}\n")
with open(f"{d}/blk.txt", "w") as f:
    s, ns = 0, 0
    for i in range(n // 2):
        ns += r.randrange(20000)
        s += ns // 1_000_000_000; ns %= 1_000_000_000
        rw = "R" if r.random() < 0.7 else "W"
        sector = r.randrange(1 << 28)
        for act in ["Q", "G", "D", "C"]:
            f.write(f"  8,0    {i % 2}   {i * 4 + 1}   {s}.{ns:09d}  {1000 + i % 5}  {act}  {rw} {sector} + 8 [fio]\n")
with open(f"{d}/fio3_crlf.log", "w", newline="") as f:
    f.write("fio version 3 iolog\r\n0 /dev/a add\r\n")
    us = 0
    for i in range(n // 10):
        us += r.randrange(20)
        f.write(f"{us} /dev/a {op()} {r.randrange(1 << 18) * 4096} 4096\r\n")
with open(f"{d}/fio2.log", "w") as f:
    f.write("fio version 2 iolog\n/dev/a add\n/dev/a open\n")
    for i in range(n // 10):
        if r.random() < 0.3:
            f.write(f"/dev/a wait {r.randrange(40)}\n")
        f.write(f"/dev/a {op()} {r.randrange(1 << 18) * 4096} 4096\n")
with open(f"{d}/bad.log", "w") as f:
    f.write("fio version 3 iolog\n0 /dev/a add\n")
    for i in range(1000):
        f.write(f"{i} /dev/a read {i * 4096} 4096\n")
    f.write("1000 /dev/a read 12x 4096\n")
with open(f"{d}/faults.toml", "w") as f:
    f.write('seed = 7\n[[error]]\nop = "write"\nprobability = 0.2\n'
            '[[spike]]\nstart = "1s"\nend = "2s"\nfactor = 10.0\n'
            '[[stall]]\nstart = "3s"\nduration = "5ms"\n')
PY
t=$tmp
cases=(
  "fio3|--device emu:nvme --trace $t/fio3.log"
  "fio3-faults|--device emu:nvme --faults $t/faults.toml --trace $t/fio3.log"
  "fio3-sata-w7|--device emu:sata-ssd --reorder-window 7 --trace $t/fio3.log"
  "ooo-4096|--device emu:nvme --trace $t/ooo.log"
  "ooo-100|--device emu:nvme --reorder-window 100 --trace $t/ooo.log"
  "ooo-1|--device emu:nvme --reorder-window 1 --trace $t/ooo.log"
  "ooo-gz-filter|--device emu:nvme --device-filter /dev/b --trace $t/ooo.log.gz"
  "ooo-sjf|--device emu:nvme,queue=sjf --trace $t/ooo.log"
  "msr1|--device emu:nvme --trace $t/msr1.csv"
  "msr2|--device emu:nvme --trace $t/msr2.csv"
  "msr2-filter|--device emu:nvme --device-filter hm_0 --trace $t/msr2.csv"
  "alibaba|--device emu:nvme --trace $t/ali.csv"
  "alibaba-filter-w3|--device emu:nvme --device-filter 7 --reorder-window 3 --trace $t/ali.csv"
  "tencent|--device emu:nvme --trace $t/tencent.csv"
  "blkparse|--device emu:nvme --trace $t/blk.txt"
  "fio3-crlf|--device emu:nvme --trace $t/fio3_crlf.log"
  "msr-crlf|--device emu:nvme --trace $t/msr_crlf.csv"
  "fio2|--device emu:nvme --trace $t/fio2.log"
  "fio3-hdd|--device emu:hdd --trace $t/fio3_crlf.log"
  "err-malformed|--device emu:nvme --trace $t/bad.log"
  "err-lines-max|--device emu:nvme --trace-lines-max 500 --trace $t/bad.log"
)
drop='del(.wall_ns, .cpu_ns, .speedup, .requests_per_s_wall, .requests_per_s_cpu)'
same=0; differ=0
for c in "${cases[@]}"; do
  name=${c%%|*}; args=${c#*|}
  # shellcheck disable=SC2086
  for which in old new; do
    bin=$old; [[ $which == new ]] && bin=$new
    set +e
    "$bin" emulate replay $args --json >"$t/$which.out" 2>"$t/$which.err"
    echo "exit $?" >>"$t/$which.err"
    set -e
    if [[ -s $t/$which.out ]]; then jq -S "$drop" "$t/$which.out" >"$t/$which.json"; else : >"$t/$which.json"; fi
  done
  if cmp -s "$t/old.json" "$t/new.json" && cmp -s "$t/old.err" "$t/new.err"; then
    same=$((same + 1)); printf '%-20s same   (%s)\n' "$name" "$(jq -c '{ios, p99: .lat_ns_p99, late: .trace.late, outstanding_max}' "$t/new.json" 2>/dev/null || tail -c 120 "$t/new.err" | tr '\n' ' ')"
  else
    differ=$((differ + 1)); printf '%-20s DIFFER\n' "$name"
    diff "$t/old.json" "$t/new.json" | head -20 || true
    diff "$t/old.err" "$t/new.err" | head -5 || true
  fi
done
echo "$same same, $differ differ ($(date -u +%FT%TZ), load $(cut -d' ' -f1-3 /proc/loadavg))"
[[ $differ == 0 ]]
