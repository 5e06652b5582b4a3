#!/usr/bin/env python3
"""Binaries alternated on one streamed trace: the command's requests_per_s_cpu (the CPU of
all its threads) and requests_per_s_wall, round by round, then the medians.

Usage: scripts/alternate-replay-cpu.py ROUNDS TRACE LABEL=SMARTCON [LABEL=SMARTCON ...]
Each round runs `SMARTCON emulate replay --device emu:nvme --trace TRACE --json` once per
binary, in the order given; EXTRA (environment) adds arguments before --trace.
"""
import json, os, statistics, subprocess, sys, time

def load():
    return " ".join(open("/proc/loadavg").read().split()[:3])

rounds, trace = int(sys.argv[1]), sys.argv[2]
bins = [a.split("=", 1) for a in sys.argv[3:]]
extra = os.environ.get("EXTRA", "").split()
cpu = {label: [] for label, _ in bins}
wall = {label: [] for label, _ in bins}
print(f"load {load()} {time.strftime('%H:%M:%S', time.gmtime())} UTC")
for r in range(rounds):
    row = []
    for label, binary in bins:
        out = subprocess.run(
            [binary, "emulate", "replay", "--device", "emu:nvme", *extra, "--trace", trace, "--json"],
            capture_output=True, text=True, check=True,
        ).stdout
        d = json.loads(out)
        cpu[label].append(d["requests_per_s_cpu"] / 1e6)
        wall[label].append(d["requests_per_s_wall"] / 1e6)
        row.append(f"{label} {cpu[label][-1]:.2f}")
    print(f"r{r + 1}", " | ".join(row), "| load", load().split()[0])
for label, _ in bins:
    c, w = cpu[label], wall[label]
    print(f"{label}: median CPU {statistics.median(c):.2f} M/s (min {min(c):.2f} max {max(c):.2f}), median wall {statistics.median(w):.2f}")
print(f"load {load()} {time.strftime('%H:%M:%S', time.gmtime())} UTC")
