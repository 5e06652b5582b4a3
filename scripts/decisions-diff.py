#!/usr/bin/env python3
"""Where two evaluate runs' decisions differ: per cell, the branch smart and paper took most.

    scripts/decisions-diff.py A/results.jsonl B/results.jsonl [--load-a L] [--load-b L]

For every single-thread `result` of smart and paper, the decision branch taken most
(`decisions.by_reason`) and its share. Cells are matched by load (or --load-a against
--load-b), target (a created /dev/zramN or /dev/loopN counts as one target), workload
and size. Prints every matched cell, marking those where a strategy's main branch
differs between the runs (issue 32: "the cells where the ten crunchers change smart's or
paper's choice"). Exit 2 on bad input.
"""

import argparse
import collections
import json
import re
import sys


def target_key(t):
    return re.sub(r"^/dev/(zram|loop)\d+$", r"\1", t)


def load(path, want_load):
    cells = {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        print(f"decisions-diff: {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    for line in lines:
        r = json.loads(line)
        if r.get("type") != "result" or r.get("threads") != 1 or r.get("strategy") not in ("smart", "paper"):
            continue
        if want_load and r.get("load") != want_load:
            continue
        reasons = collections.Counter(r.get("decisions", {}).get("by_reason", {}))
        total = sum(reasons.values())
        if total == 0:
            continue
        branch, n = reasons.most_common(1)[0]
        key = (target_key(r["target"]), r.get("workload"), r["bs_bytes"])
        cells.setdefault(key, {})[r["strategy"]] = (branch, 100.0 * n / total, r.get("iops", 0.0))
    return cells


def size(b):
    return f"{b // 1024}k" if b < 1 << 20 else f"{b >> 20}m"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--load-a", default="cpu-intensive")
    ap.add_argument("--load-b", default="cpu-intensive")
    args = ap.parse_args()
    a, b = load(args.a, args.load_a), load(args.b, args.load_b)
    keys = sorted(set(a) & set(b))
    if not keys:
        print("decisions-diff: no cell is in both runs (load, target, workload and size)", file=sys.stderr)
        sys.exit(2)
    changed = 0
    print("| cell | strategy | A: main branch | B: main branch | changed |")
    print("|---|---|---|---|---|")
    for k in keys:
        for s in ("smart", "paper"):
            if s not in a[k] or s not in b[k]:
                continue
            (ba, pa, _), (bb, pb, _) = a[k][s], b[k][s]
            diff = ba != bb
            changed += diff
            print(f"| {k[0]} {k[1]} {size(k[2])} | {s} | {ba} {pa:.0f}% | {bb} {pb:.0f}% | {'**yes**' if diff else 'no'} |")
    print(f"\n{changed} of the strategy-cells change their main branch ({len(keys)} cells matched).")


if __name__ == "__main__":
    main()
