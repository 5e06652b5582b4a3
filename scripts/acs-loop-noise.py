#!/usr/bin/env python3
"""Seed 001 on the loop device: why the acs study's per-round means swing (issue 31).

Root: makes its own loop device over a /dev/shm file, ext2 on it and a file of FILE_MB of
random data, and removes all three on exit, Ctrl-C or error. Prints, with the 1-minute load
average beside each part:

1. `smartcon io` on the ext2 file per strategy (block, smart, spin, sync), sequential
   4 KiB O_DIRECT, ROUNDS rounds of SECONDS each in alternating order: mean, p50, p99,
   p99.9 and max read latency, and the mean over the median (the tail's weight).
2. A trace of REPS repetitions of the paper's two orders read by this script (pread,
   O_DIRECT, 4 KiB: it sleeps in the kernel while the loop worker copies, like block):
   every read's start and end; the reads' latency quantiles, and how much of the elapsed
   time went to reads over 100 us and 1 ms and to the gaps between reads.
3. An A/A test on that trace: the reads are dealt to ARMS identical arms either in the
   study's way (a repetition cut in 16 pieces, each arm reading its piece in one go, arm
   after arm) or in slices of SLICE reads dealt round-robin within each piece. The true
   effect is zero, so whatever the estimators report is noise: the separate 95% intervals
   of two arms' mean repetitions (the study's old stopping rule), and the 95% interval of
   the paired per-piece log ratio of arm 1 to arm 0.
4. The scheduler switch: the time of `echo S > queue/scheduler` (none and bfq alternately)
   and the latency of the first reads after a switch against the rest.

    scripts/acs-loop-noise.py [SMARTCON] [FILE_MB] [REPS]
"""
import math
import mmap
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import json

SMARTCON = sys.argv[1] if len(sys.argv) > 1 else "target/release/smartcon"
FILE_MB = int(sys.argv[2]) if len(sys.argv) > 2 else 100
REPS = int(sys.argv[3]) if len(sys.argv) > 3 else 4
ROUNDS, SECONDS = 2, 2
ARMS, PIECES, SLICE = 4, 16, 64
BS = 4096

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
       10: 2.228, 15: 2.131, 20: 2.086, 30: 2.042, 60: 2.000, 120: 1.980}


def t95(df):
    if df <= 0:
        return math.inf
    keys = sorted(k for k in T95 if k <= df)
    return T95[keys[-1]] if df <= 120 else 1.96


def load():
    return open("/proc/loadavg").read().split()[0]


def ci95(xs):
    if len(xs) < 2:
        return (statistics.fmean(xs) if xs else 0.0, math.inf)
    return statistics.fmean(xs), t95(len(xs) - 1) * statistics.stdev(xs) / math.sqrt(len(xs))


def q(sorted_xs, p):
    return sorted_xs[min(len(sorted_xs) - 1, int(p * len(sorted_xs)))]


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout.strip()


def order(pattern, n):
    if pattern == "sequential":
        return list(range(n))
    return [i // 2 if i % 2 == 0 else n - 1 - i // 2 for i in range(n)]


def trace(fd, buf, offs):
    """Reads every offset; returns (starts, ends) in ns."""
    starts, ends = [0] * len(offs), [0] * len(offs)
    pc = time.perf_counter_ns
    pr = os.preadv
    for i, off in enumerate(offs):
        starts[i] = pc()
        pr(fd, [buf], off)
        ends[i] = pc()
    return starts, ends


def aa(starts, ends, n, scheme):
    """Deals reads 0..len to ARMS arms; returns per-arm lists of piece times (ns), pieces
    aligned across arms. 'study': each piece of a repetition is split into ARMS contiguous
    stretches, arm a reading stretch a (the study's turn after turn; the stretches stand for
    the arms reading the same blocks one after another). 'slices': the piece's reads dealt
    to the arms in slices of SLICE reads, round-robin, the order rotated per piece."""
    total = len(starts)
    elapsed = [starts[i + 1] - starts[i] if i + 1 < total else ends[i] - starts[i] for i in range(total)]
    per_piece = n // PIECES
    arms = [[] for _ in range(ARMS)]
    piece_no = 0
    i = 0
    while i + per_piece * ARMS <= total:
        window = range(i, i + per_piece * ARMS)
        sums = [0] * ARMS
        if scheme == "study":
            for a in range(ARMS):
                sums[a] = sum(elapsed[j] for j in range(i + a * per_piece, i + (a + 1) * per_piece))
        else:
            for k, j0 in enumerate(range(window.start, window.stop, SLICE)):
                a = (k + piece_no) % ARMS
                sums[a] += sum(elapsed[j] for j in range(j0, min(j0 + SLICE, window.stop)))
        for a in range(ARMS):
            arms[a].append(sums[a])
        i += per_piece * ARMS
        piece_no += 1
    return arms


def main():
    if os.geteuid() != 0:
        sys.exit("acs-loop-noise: needs root (loop device, mount)")
    tag = f"smartcon-acs-noise-{os.getpid()}"
    img = f"/dev/shm/{tag}.img"
    mnt = tempfile.mkdtemp(prefix=tag)
    loop = None
    mounted = False
    try:
        with open(img, "wb") as f:
            f.truncate((FILE_MB + FILE_MB // 16 + 16) << 20)
        loop = sh("losetup", "-f", "--show", img)
        sh("mkfs.ext2", "-q", "-b", "4096", loop)
        sh("mount", loop, mnt)
        mounted = True
        path = os.path.join(mnt, "acs.dat")
        size = FILE_MB * 1000 * 1000 // BS * BS
        with open(path, "wb") as f:
            left = size
            while left:
                chunk = os.urandom(min(left, 1 << 20))
                f.write(chunk)
                left -= len(chunk)
            f.flush()
            os.fsync(f.fileno())
        n = size // BS
        queue = f"/sys/block/{os.path.basename(loop)}/queue/scheduler"
        print(f"{loop} over {img}, ext2, {size} bytes ({n} blocks); scheduler: {open(queue).read().strip()}")

        # 1. smartcon io per strategy.
        print(f"\n1. smartcon io --target FILE --pattern seq --bs 4k --duration {SECONDS}s --json, {ROUNDS} rounds")
        strategies = ["block", "smart", "spin", "sync"]
        rows = {s: [] for s in strategies}
        for r in range(ROUNDS):
            for s in (strategies if r % 2 == 0 else strategies[::-1]):
                l0 = load()
                out = subprocess.run([SMARTCON, "io", "--target", path, "--strategy", s, "--pattern", "seq",
                                      "--duration", f"{SECONDS}s", "--json"], capture_output=True, text=True)
                rec = next((json.loads(x) for x in out.stdout.splitlines() if x.startswith('{"type":"result"')), None)
                if rec is None:
                    print(f"   {s}: no record: {out.stderr.strip()[-200:]}")
                    continue
                rows[s].append((rec, l0, load()))
        print("   strategy round  IOPS     mean    p50     p99     p99.9   max (us)   mean/p50  ctx vol/invol  load")
        for s in strategies:
            for k, (rec, l0, l1) in enumerate(rows[s]):
                us = lambda key: rec[key] / 1e3
                print(f"   {s:<8} {k}  {rec['iops']:8.0f} {us('lat_ns_mean'):7.1f} {us('lat_ns_p50'):7.1f} "
                      f"{us('lat_ns_p99'):7.1f} {us('lat_ns_p999'):8.1f} {us('lat_ns_max'):9.0f}   "
                      f"{rec['lat_ns_mean'] / rec['lat_ns_p50']:6.2f}   {rec['ctx_voluntary']}/{rec['ctx_involuntary']}"
                      f"  {l0}-{l1}")

        # 2. The trace.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, BS)
        traces = {}
        for pattern in ["sequential", "random"]:
            offs = [b * BS for b in order(pattern, n)]
            trace(fd, buf, offs[:256])  # warm
            l0 = load()
            t0 = time.monotonic()
            starts, ends = [], []
            for _ in range(REPS):
                s_, e_ = trace(fd, buf, offs)
                starts += s_
                ends += e_
            traces[pattern] = (starts, ends)
            lat = sorted(e - s for s, e in zip(starts, ends))
            elapsed = ends[-1] - starts[0]
            gaps = sum(starts[i + 1] - ends[i] for i in range(len(starts) - 1))
            over = lambda th: sum(x for x in lat if x > th)
            cnt = lambda th: sum(1 for x in lat if x > th)
            reps = [ends[(k + 1) * n - 1] - starts[k * n] for k in range(REPS)]
            print(f"\n2. {pattern}: {REPS} repetitions x {n} reads by pread, {time.monotonic() - t0:.1f} s, "
                  f"load {l0}-{load()}")
            print(f"   read latency p50 {q(lat, .5) / 1e3:.1f} us, p90 {q(lat, .9) / 1e3:.1f}, p99 {q(lat, .99) / 1e3:.1f}, "
                  f"p99.9 {q(lat, .999) / 1e3:.1f}, max {lat[-1] / 1e3:.0f} us; mean {statistics.fmean(lat) / 1e3:.1f} us")
            print(f"   of the elapsed {elapsed / 1e9:.2f} s: reads over 100 us {over(100_000) / elapsed * 100:.1f}% "
                  f"({cnt(100_000)} reads), over 1 ms {over(1_000_000) / elapsed * 100:.1f}% ({cnt(1_000_000)} reads), "
                  f"between reads {gaps / elapsed * 100:.1f}%")
            print(f"   repetitions: {', '.join(f'{x / 1e6:.0f}' for x in reps)} ms")
            bins = [0] * 14
            for x in lat:
                if x > 1_000_000:
                    bins[min(13, x // 1_000_000)] += 1
            print("   reads over 1 ms by whole ms (1-2, 2-3, ...): " + " ".join(str(b) for b in bins[1:]))

        # 3. The A/A test.
        print(f"\n3. A/A: {ARMS} identical arms, {PIECES} pieces a repetition, slices of {SLICE} reads")
        for pattern, (starts, ends) in traces.items():
            for scheme in ["study", "slices"]:
                arms = aa(starts, ends, n, scheme)
                a0, a1 = arms[0], arms[1]
                if len(a0) < 2:
                    continue
                (m0, h0), (m1, h1) = ci95(a0), ci95(a1)
                logs = [math.log(x / y) for x, y in zip(a1, a0) if x > 0 and y > 0]
                lm, lh = ci95(logs)
                pct = lambda v: (1 - math.exp(v)) * 100
                print(f"   {pattern:<10} {scheme:<6} {len(a0):3} pairs: arm 0 {m0 * PIECES / 1e6:7.1f} ms +- "
                      f"{h0 / m0 * 100:5.1f}%, arm 1 {m1 * PIECES / 1e6:7.1f} ms +- {h1 / m1 * 100:5.1f}% "
                      f"(difference {abs(m1 - m0) / m0 * 100:5.1f}%); paired: {pct(lm):+6.1f}% "
                      f"[{pct(lm + lh):+6.1f}, {pct(lm - lh):+6.1f}]")

        # 4. The scheduler switch.
        have = open(queue).read()
        if "bfq" in have:
            offs = [b * BS for b in order("sequential", n)]
            took, first, rest = [], [], []
            l0 = load()
            for k in range(20):
                t0 = time.perf_counter_ns()
                with open(queue, "w") as f:
                    f.write("bfq" if k % 2 == 0 else "none")
                took.append(time.perf_counter_ns() - t0)
                s_, e_ = trace(fd, buf, offs[k * 1000:(k + 1) * 1000])
                lat = [e - s for s, e in zip(s_, e_)]
                first += lat[:32]
                rest += lat[32:]
            with open(queue, "w") as f:
                f.write("none")
            took.sort()
            first.sort()
            rest.sort()
            print(f"\n4. scheduler switches (none/bfq alternately, 20), load {l0}-{load()}: "
                  f"{took[len(took) // 2] / 1e6:.1f} ms median, {took[-1] / 1e6:.1f} ms max")
            print(f"   the first 32 reads after a switch: mean {statistics.fmean(first) / 1e3:.1f} us, p50 "
                  f"{q(first, .5) / 1e3:.1f}, p99 {q(first, .99) / 1e3:.1f}; the next 968: mean "
                  f"{statistics.fmean(rest) / 1e3:.1f} us, p50 {q(rest, .5) / 1e3:.1f}, p99 {q(rest, .99) / 1e3:.1f}")
        os.close(fd)
    finally:
        if mounted:
            subprocess.run(["umount", mnt])
        if loop:
            subprocess.run(["losetup", "-d", loop])
        if os.path.exists(img):
            os.remove(img)
        os.rmdir(mnt)


if __name__ == "__main__":
    main()
