#!/usr/bin/env python3
"""The blocking wait's tail estimate, old against new, on one calibration's own host state.

`smartcon host` takes a blocking wait's CPU and lateness per device time from all its turns
pooled (every I/O together: the mean is the sum over the count). Until issue 27's fifth
session it took the median of the turns' figures, each quantile and the mean separately,
which drops the turn that met the most of a millisecond tail. This script rebuilds that
older estimate from the same run's first three turns (`host_measurement.block_wait_turns` of
`smartcon host --json`), simulates the calibration's cells on both models (the same seed)
and prints each against the real cells of the same run (compare-*.txt), so the two
estimators are judged on one host state and one set of real runs.

    scripts/host-tail-ab.py OUT_DIR        (OUT_DIR: a scripts/calibrate-host.sh directory)
    SMARTCON=path/to/smartcon scripts/host-tail-ab.py OUT_DIR

Writes OUT_DIR/host-median-of-turns.json (a new file; an existing one is refused) and
prints the table; nothing else is written.
"""
import json
import os
import statistics
import subprocess
import sys

# The old plan's turns per device time and load.
OLD_TURNS = 3


def median_estimate(turns):
    """The old estimator: medians of the first three turns' figures (the old plan's three
    120 ms turns), as crates/study/src/host.rs had it."""
    med = lambda xs: statistics.median(xs[:OLD_TURNS])
    late = turns["late"]
    p50 = med([q["p50_ns"] for q in late])
    p90 = max(med([q["p90_ns"] for q in late]), p50)
    p99 = max(med([q["p99_ns"] for q in late]), p90)
    mean = med([q.get("mean_ns", q["p50_ns"]) for q in late])
    return med(turns["cpu_ns"]), {"p50_ns": p50, "p90_ns": p90, "p99_ns": p99, "mean_ns": mean}


def measured_cells(path):
    """target, strategy -> (IOPS, CPU %) from a `bench --compare-simulated` text table."""
    cells, table = {}, False
    for line in open(path):
        table = table or line.startswith("predicted (simulated")
        f = line.split()
        if table and len(f) == 11 and f[0].startswith("emu:"):
            cells[(f[0], f[3])] = (float(f[4]), float(f[7]))
    return cells


def simulate(smartcon, host, load):
    cmd = [smartcon, "bench", "--simulate", "--seed", "1", "--host", host, "--targets", "emu:nvme,emu:optane",
           "--sizes", "4k", "--ops", "read", "--strategies", "block,spin,sync,hybrid,smart", "--duration", "2s",
           "--load", load, "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    cells = {}
    for line in out.splitlines():
        r = json.loads(line)
        if r.get("type") == "result":
            cells[(r["target"], r["strategy"])] = (r["iops"], r["cpu_user_pct"] + r["cpu_sys_pct"])
    return cells


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: scripts/host-tail-ab.py OUT_DIR")
    out = sys.argv[1]
    smartcon = os.environ.get("SMARTCON", "target/release/smartcon")
    records = [json.loads(l) for l in open(os.path.join(out, "host.jsonl"))]
    detail = next(r for r in records if r.get("type") == "host_measurement")
    pooled = os.path.join(out, "host.json")
    model = json.load(open(pooled))
    old_path = os.path.join(out, "host-median-of-turns.json")
    if os.path.exists(old_path):
        sys.exit(f"host-tail-ab: {old_path} exists; remove it or give another directory")
    print("device   load             pooled: CPU, late mean (p99)      median of turns: CPU, late mean (p99)   turns' means")
    for point in model["block_wait"]:
        for load, cpu_key, late_key in (("alone", "cpu_ns", "late"),
                                        ("beside_cruncher", "cpu_beside_cruncher_ns", "late_beside_cruncher")):
            turns = next(t for t in detail["block_wait_turns"]
                         if t["load"] == load and abs(t["device_ns"] - point["device_ns"]) < 1)
            cpu, late = median_estimate(turns)
            means = ", ".join(f"{q.get('mean_ns', 0) / 1e3:.0f}" for q in turns["late"])
            print(f"{point['device_ns'] / 1e3:5.1f} us {load:<16} {point[cpu_key] / 1e3:5.1f} us, "
                  f"{point[late_key].get('mean_ns', 0) / 1e3:7.1f} us ({point[late_key]['p99_ns'] / 1e3:7.1f})"
                  f"      {cpu / 1e3:5.1f} us, {late['mean_ns'] / 1e3:7.1f} us ({late['p99_ns'] / 1e3:7.1f})"
                  f"           {means}")
            point[cpu_key], point[late_key] = cpu, late
    model["source"] = model.get("source", "") + "; block_wait rebuilt as the median of the turns (host-tail-ab.py)"
    with open(old_path, "x") as f:
        json.dump(model, f, indent=2)
    for load in ("bm-only", "cpu-intensive"):
        real = measured_cells(os.path.join(out, f"compare-{load}.txt"))
        new, old = simulate(smartcon, pooled, load), simulate(smartcon, old_path, load)
        print(f"\n{load}: predicted over measured, pooled tail (now) | median of turns (before)")
        print(f"{'cell':<22} {'IOPS':>6} {'CPU':>6} | {'IOPS':>6} {'CPU':>6}")
        within = {"new": 0, "old": 0}
        for key, (iops, cpu) in sorted(real.items()):
            if key not in new or key not in old or iops <= 0 or cpu <= 0:
                continue
            r = [new[key][0] / iops, new[key][1] / cpu, old[key][0] / iops, old[key][1] / cpu]
            within["new"] += sum(abs(x - 1) <= 0.10 for x in r[:2])
            within["old"] += sum(abs(x - 1) <= 0.10 for x in r[2:])
            print(f"{key[0] + ' ' + key[1]:<22} {r[0]:6.2f} {r[1]:6.2f} | {r[2]:6.2f} {r[3]:6.2f}")
        print(f"within 10%: pooled {within['new']}, median of turns {within['old']} of {2 * len(real)}")


if __name__ == "__main__":
    main()
