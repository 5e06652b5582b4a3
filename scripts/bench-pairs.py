#!/usr/bin/env python3
"""Do two jobs at once run slower than one alone on this host, and why?

The question behind the Ray sweep's bound (docs/distributed.md): a two-node sweep on one
2-CPU host can reach 0.5 x the serial wall time only if two points at once each run as
fast as one alone. Each job below runs alone and as a pair, alternately (alone, pair,
alone, pair, ...), so a change of the machine's load hits both about equally. For every
process the script takes its wall time and its own CPU time (rusage; with this kernel's
CONFIG_PARAVIRT_TIME_ACCOUNTING the host's steal is not in it), and for every phase the
machine's /proc/stat: the share of its CPU time that was stolen by the host, idle, and
used by processes other than the job's.

- CPU time paired / alone > 1: the hardware is shared (an SMT sibling, caches, memory
  bandwidth): the job itself does more work per result when another runs.
- wall paired / alone > CPU paired / alone: the job was not running while it wanted to:
  other processes (the shared machine) or the host's steal; the phase figures say which.

Jobs: a register-only integer loop (no memory traffic: only SMT or steal can slow it),
a random pointer chase in 512 KiB (fits this CPU's L2) and in 256 MiB (DRAM: memory
latency and bandwidth; its shuffle too), and smartcon's virtual-time replay (a point of the Ray sweep).

    python3 scripts/bench-pairs.py [--rounds 3] [--ios 15000000] [--only reg,replay]

Needs cc. Prints one line per job and a JSON record per job (type pair_contention).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REG_C = r"""
#include <stdio.h>
#include <stdlib.h>
/* Eight independent xorshift chains: enough independent work to fill the core's integer
   ports, so an SMT sibling busy with the same would slow it (one chain would not). */
int main(int argc, char **argv) {
    unsigned long n = strtoul(argv[1], 0, 10), x[8], s = 0;
    for (int k = 0; k < 8; k++) x[k] = 88172645463325252UL + k;
    for (unsigned long i = 0; i < n; i++)
        for (int k = 0; k < 8; k++) { x[k] ^= x[k] << 13; x[k] ^= x[k] >> 7; x[k] ^= x[k] << 17; }
    for (int k = 0; k < 8; k++) s += x[k];
    printf("%lu\n", s & 1);
    return 0;
}
"""

CHASE_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
int main(int argc, char **argv) {
    size_t n = strtoul(argv[1], 0, 10) * 1024 / sizeof(size_t);
    unsigned long steps = strtoul(argv[2], 0, 10);
    size_t *a = malloc(n * sizeof(size_t));
    if (!a) return 1;
    for (size_t i = 0; i < n; i++) a[i] = i;
    uint64_t r = 12345;
    /* Sattolo's shuffle: one cycle through every slot, in random order. */
    for (size_t i = n - 1; i > 0; i--) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t j = (r >> 33) % i, t = a[i]; a[i] = a[j]; a[j] = t;
    }
    size_t p = 0;
    for (unsigned long i = 0; i < steps; i++) p = a[p];
    printf("%zu\n", p & 1);
    return 0;
}
"""


def proc_stat():
    """The machine's CPU ticks: (total, idle+iowait, steal, busy)."""
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    total = sum(f)
    return total, f[3] + f[4], f[7], total - f[3] - f[4] - f[7]


def run(cmds):
    """Starts every command at once; returns [(wall s, cpu s)] and the phase's machine shares."""
    tick = os.sysconf("SC_CLK_TCK")
    s0 = proc_stat()
    t0 = time.monotonic()
    # Each in a session of its own: with sched_autogroup a session shares the CPU with the
    # others as one, and two Ray nodes are two sessions.
    procs = {subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True).pid: i
             for i, c in enumerate(cmds)}
    out = [None] * len(cmds)
    while procs:
        pid, status, ru = os.wait4(-1, 0)
        if pid not in procs:
            continue
        if status != 0:
            sys.exit(f"bench-pairs: {cmds[procs[pid]]} failed ({status})")
        out[procs.pop(pid)] = (time.monotonic() - t0, ru.ru_utime + ru.ru_stime)
    s1 = proc_stat()
    total = s1[0] - s0[0]
    ours = sum(cpu for _, cpu in out) * tick
    phase = {"steal": (s1[2] - s0[2]) / total, "idle": (s1[1] - s0[1]) / total,
             "others": max(0.0, (s1[3] - s0[3] - ours) / total)}
    return out, phase


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ios", type=int, default=15_000_000, help="the replay's requests")
    ap.add_argument("--smartcon", default=os.path.join(os.path.dirname(__file__), "..", "target", "release", "smartcon"))
    ap.add_argument("--only", default="", help="comma-separated job names")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench-pairs-")
    try:
        for name, src in (("reg", REG_C), ("chase", CHASE_C)):
            with open(os.path.join(work, name + ".c"), "w") as f:
                f.write(src)
            subprocess.run(["cc", "-O2", "-o", os.path.join(work, name), os.path.join(work, name + ".c")], check=True)
        reg, chase = os.path.join(work, "reg"), os.path.join(work, "chase")
        jobs = [
            ("reg", "register-only integer loop (8 chains)", [reg, "150000000"]),
            ("chase-512k", "pointer chase, 512 KiB (L2)", [chase, "512", "150000000"]),
            ("chase-256m", "pointer chase, 256 MiB (DRAM)", [chase, str(256 * 1024), "10000000"]),
            ("replay", f"emulate replay emu:nvme qd 32, {a.ios} I/Os",
             [a.smartcon, "emulate", "replay", "--device", "emu:nvme", "--qd", "32", "--ios", str(a.ios), "--json"]),
        ]
        only = set(filter(None, a.only.split(",")))
        print(f"host: {os.cpu_count()} CPUs; loadavg before: {open('/proc/loadavg').read().split(' ', 3)[:3]}")
        for key, what, cmd in jobs:
            if only and key not in only:
                continue
            alone, pair, phases = [], [], []
            for _ in range(a.rounds):
                alone += run([cmd])[0]
                p, ph = run([cmd, cmd])
                pair += p
                phases.append(ph)
            wa, wp = median([w for w, _ in alone]), median([w for w, _ in pair])
            ca, cp = median([c for _, c in alone]), median([c for _, c in pair])
            steal = sum(p["steal"] for p in phases) / len(phases)
            others = sum(p["others"] for p in phases) / len(phases)
            idle = sum(p["idle"] for p in phases) / len(phases)
            load = open("/proc/loadavg").read().split(" ", 3)[:3]
            print(f"{what}: alone {wa:.2f} s wall / {ca:.2f} s CPU; two at once {wp:.2f} s / {cp:.2f} s each: "
                  f"CPU x {cp / ca:.2f}, wall x {wp / wa:.2f}; while paired the machine's CPU was "
                  f"{100 * steal:.1f}% stolen, {100 * others:.0f}% other processes, {100 * idle:.0f}% idle; loadavg {' '.join(load)}")
            print(json.dumps({"type": "pair_contention", "job": key, "rounds": a.rounds,
                              "alone_wall_s": [round(w, 3) for w, _ in alone],
                              "alone_cpu_s": [round(c, 3) for _, c in alone],
                              "pair_wall_s": [round(w, 3) for w, _ in pair], "pair_cpu_s": [round(c, 3) for _, c in pair],
                              "cpu_ratio": round(cp / ca, 3), "wall_ratio": round(wp / wa, 3),
                              "paired_steal": round(steal, 4), "paired_others": round(others, 3),
                              "paired_idle": round(idle, 3), "loadavg": load}))
    finally:
        subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    main()
