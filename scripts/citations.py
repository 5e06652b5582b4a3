#!/usr/bin/env python3
"""Every citation of the five papers in the tree, checked against the papers' own lists.

    scripts/citations.py [--seeds DIR] [--markdown] [--check]

Greps README.md, docs/ and crates/ (.md, .rs) for "Sec. N", "Section N", "Fig. N",
"Figure N", "Table N", "Eq. N" and "Algorithm N"; attributes each to a paper by the words
around it (the paper's name or authors, "seed 00N", "paper 002"; else the file's paper: the
merge and polling code cite 002, the cache simulator 003, the emulator 004, the rest
SmartCon, 000; equations are 000's, the only paper with numbered ones; a device
datasheet's section is left out); and looks the number up in that paper's own list of sections, figures,
tables and equations, read from the seed text (--seeds, default ../shared/seeds). Prints
one row per citation: where, what, which paper, what the paper calls it (the caption or
heading), and `ok` or `NOT IN THE PAPER`. --check exits 1 if a citation names a number
the paper does not have. What the paper says at a number is the reader's check: the
caption is there to make it quick (docs/citations.md records the reading).
"""

import argparse
import os
import re
import sys

CITE = re.compile(r"\b(Sec\.|Section|Figs?\.|Figure|Table|Eq\.|Algorithm)\s?([0-9]+(?:\.[0-9]+)?|[IVX]+)(?:\(([a-z])\))?")

PAPER_WORDS = [
    ("001", re.compile(r"seed 001|Gim, Lee|adaptive context switch|ACS\b|\bacs[\b_]|acs_bar", re.I)),
    ("002", re.compile(r"seed 002|paper 002|Shin\b|dynamic interval polling|temporal merge|pipelined post|\bDIP\b|BenchmarkSQL|002", re.I)),
    ("003", re.compile(r"seed 003|Jammula|elastic time slic|\bETS\b|\bATD\b|CS.miss|DRRIP|SHiP|SPEC CPU|003")),
    ("004", re.compile(r"seed 004|Wu and Tsai|Wu, Tsai|co-simulation|OS-state pausing|Table 4\.|004")),
    ("000", re.compile(r"SmartCon|seed 000|Gim, Hwang|ACM TOS|000")),
]

FILE_PAPER = [
    ("crates/cachesim", "003"), ("docs/cachesim-ets", "003"), ("crates/cli/src/cmd/ets", "003"), ("crates/report/src/ets", "003"),
    ("crates/emulate", "004"), ("docs/emulator", "004"), ("docs/vm", "004"), ("crates/devemu/src/table", "004"),
    ("crates/engine/src/wait", "002"), ("crates/engine/src/merge", "002"), ("docs/merge", "002"), ("docs/hybrid", "002"),
    ("crates/devemu/src/pages", "002"), ("crates/study/src/merge_bench", "002"), ("crates/study/src/polling", "002"),
    ("crates/study/src/acs", "001"), ("crates/cli/src/cmd/evaluate_acs", "001"), ("crates/cli/tests/evaluate_acs", "001"),
    ("crates/report/src/polling", "002"), ("crates/workloads/src/merge", "002"), ("crates/cli/tests/hybrid", "002"),
    ("crates/cli/src/cmd/cachesim", "003"), ("docs/cachesim-ets", "003"),
]

KIND = {"Sec.": "sec", "Section": "sec", "Fig.": "fig", "Figs.": "fig", "Figure": "fig", "Table": "table", "Eq.": "eq", "Algorithm": "alg"}


def paper_lists(seeds):
    """For each paper: {(kind, number): caption or heading}."""
    lists = {}
    for name in sorted(os.listdir(seeds)):
        m = re.match(r"(\d{3})_", name)
        if not m:
            continue
        text = open(os.path.join(seeds, name), encoding="utf-8").read()
        d = {}
        for line in text.splitlines():
            s = line.strip().lstrip("#*").strip()
            if mm := re.match(r"(?:Fig\.|Figure)\s?(\d+)[.:]\s*(.*)", s):
                d.setdefault(("fig", mm.group(1)), mm.group(2)[:90])
            if mm := re.match(r"(?:Table|TABLE)\s?([0-9]+(?:\.[0-9]+)?|[IVX]+)[.:]?\s*(.*)", s):
                d.setdefault(("table", mm.group(1)), mm.group(2)[:90] or "(table)")
            if mm := re.match(r"(\d+(?:\.\d+)?)\.?\s+([A-Z][A-Za-z].*)", s):
                d.setdefault(("sec", mm.group(1)), mm.group(2)[:90])
            if mm := re.match(r"([IVX]+)\.\s+([A-Z].*)", s):
                d.setdefault(("sec", mm.group(1)), mm.group(2)[:90])
            for mm in re.finditer(r"\\quad \((\d+)\)", line):
                d.setdefault(("eq", mm.group(1)), "equation")
            if mm := re.match(r"\*?\*?Algorithm (\d+)\*?\*?\s*(.*)", s):
                d.setdefault(("alg", mm.group(1)), mm.group(2)[:90])
        lists[m.group(1)] = d
    return lists


def files(root):
    for top in ["README.md", "docs", "crates"]:
        p = os.path.join(root, top)
        if os.path.isfile(p):
            yield p
            continue
        for dirpath, dirnames, names in os.walk(p):
            dirnames[:] = [d for d in dirnames if d not in ("target", ".git")]
            for n in sorted(names):
                if n.endswith((".rs", ".md")) and n != "citations.md":
                    yield os.path.join(dirpath, n)


def which_paper(rel, lines, i, kind, at):
    near = " ".join(lines[max(0, i - 1): i + 2])
    here = lines[i]
    if re.search(r"Hitachi|Deskstar|7K320", near):
        return "other"
    if kind == "eq" or re.search(r"\bEq\. ?[1-6]", here):
        return "000"
    # On the citation's own line, the paper named last before it (a line may name several),
    # else the first one named after it.
    before, after = [], []
    for paper, rx in PAPER_WORDS:
        for m in rx.finditer(here):
            (before if m.start() < at else after).append((m.start(), paper))
    if before:
        return max(before)[1]
    if after:
        return min(after)[1]
    for prefix, paper in FILE_PAPER:
        if rel.startswith(prefix):
            return paper
    for paper, rx in PAPER_WORDS:
        if rx.search(near):
            return paper
    return "000"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--seeds", default=None)
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    seeds = args.seeds or os.path.join(root, "..", "shared", "seeds")
    if not os.path.isdir(seeds):
        print(f"citations: {seeds}: no seeds directory (--seeds)", file=sys.stderr)
        sys.exit(2)
    lists = paper_lists(seeds)
    rows, missing = [], 0
    for path in files(root):
        rel = os.path.relpath(path, root)
        lines = open(path, encoding="utf-8").read().splitlines()
        for i, line in enumerate(lines):
            for m in CITE.finditer(line):
                kind = KIND[m.group(1)]
                num = m.group(2)
                if kind == "sec" and re.fullmatch(r"[IVX]+", num) is None and "." not in num and int(num) > 9:
                    continue
                paper = which_paper(rel, lines, i, kind, m.start())
                if paper == "other":
                    rows.append((f"{rel}:{i + 1}", m.group(0), "-", "a device's datasheet, not a paper", "not a paper"))
                    continue
                cap = lists.get(paper, {}).get((kind, num))
                # A top-level section of 000 cited by its chapter ("Sec. 7") is its heading.
                if cap is None and kind == "sec":
                    cap = next((v for (k, n), v in lists.get(paper, {}).items() if k == "sec" and n.split(".")[0] == num), None)
                # 004's tables are numbered by chapter; a plain "Table 3" there is not a citation of it.
                ok = cap is not None
                missing += not ok
                rows.append((f"{rel}:{i + 1}", m.group(0), paper, cap or "-", "ok" if ok else "NOT IN THE PAPER"))
    if args.markdown:
        print("| where | cites | paper | the paper's caption or heading | number |")
        print("|---|---|---|---|---|")
        for r in rows:
            print("| " + " | ".join(x.replace("|", "/") for x in r) + " |")
    else:
        for r in rows:
            print("  ".join(r))
    print(f"\n{len(rows)} citations, {missing} naming a number the paper does not have.", file=sys.stderr)
    if args.check and missing:
        sys.exit(1)


if __name__ == "__main__":
    main()
