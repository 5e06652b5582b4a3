#!/usr/bin/env python3
"""Seed 000's (SmartCon, ACM TOS) smaller experiments, each a table with the host's figures.

    scripts/seed000-studies.py STUDY [--rounds N] [--smartcon PATH]

STUDY is one of
  fig7       Sec. 5.1, Fig. 7: paper (Q = 0), paper-q1 (Q = 1) and block, two threads of 4 KiB
             sequential reads on emu:nvme (80 us; `paper` declares emu:sata-ssd, the X25-M
             model, mainstream and never spins there): IOPS, CPU, and the branches taken
             (queue_over_limit: the arrival saw more than Q I/Os in flight).
  fig10      Sec. 7.2, Fig. 10: voluntary and involuntary context switches under the
             CPU-intensive load (ten crunchers, separate processes), of the reader and of the
             crunchers (/proc/PID/status nonvoluntary_ctxt_switches), block against smart and
             sync, 4 KiB sequential reads on emu:nvram (the very fast, RAM-like model) and on
             a file on /var/tmp.
  fig15b     Sec. 7.4, Fig. 15(b): smart against always-stall (spin with a 10 s budget, so it
             never gives the CPU back) and spin (1 ms budget), bm-only and cpu-intensive, on
             emu:sata-ssd and on a file on /var/tmp.
  fig20      Sec. 7.8, Fig. 20: the spin loop with and without PAUSE (--no-pause), 4 and 8
             KiB sequential reads of a file on /var/tmp, the process's CPU every 250 ms.
  table6     Sec. 7.3, Table VI: a Dhrystone-style fixed-work program (integer and string
             work, no I/O) timed real/user/sys beside 4 KiB sequential reads by block and by
             smart, and the machine's iowait over its run.
  fig14      Sec. 7.3, Fig. 14: Bonnie++ (Debian bonnie++, -D for O_DIRECT) under
             `smartcon run --strategy block` and `--strategy smart`: sequential block input.

Every study alternates its strategies round by round (a shared machine's load swings hit
them alike) and prints `smartcon host --quick`'s figures first. Temporary files go in
/var/tmp and are removed at the end, also on Ctrl-C. Exit 2 on bad input.
"""

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

SMARTCON = "target/release/smartcon"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def sh(args, **kw):
    return subprocess.run(args, check=True, text=True, capture_output=True, **kw)


def host_figures():
    out = sh([SMARTCON, "host", "--quick"]).stdout
    keep = [l for l in out.splitlines() if re.match(r"(sleep 20\.0|wake-up across|blocking wait's CPU)", l)]
    print("host (smartcon host --quick):")
    for l in keep:
        print("  " + re.sub(r"\s+", " ", l))
    la = open("/proc/loadavg").read().split()[:3]
    print(f"  load average: {' '.join(la)}; {os.cpu_count()} CPUs\n")


def io_json(target, strategy, extra, seconds):
    cmd = [SMARTCON, "io", "--target", target, "--strategy", strategy, "--duration", f"{seconds}s", "--json"] + extra
    out = sh(cmd).stdout
    return json.loads(out.strip().splitlines()[-1])


def rotate(items, r):
    return items[r % len(items):] + items[: r % len(items)]


def fig7(rounds):
    strategies = ["paper", "paper-q1", "block"]
    acc = {s: {"ios": 0, "ns": 0, "cpu": [], "lat": [], "reasons": {}} for s in strategies}
    for r in range(rounds):
        for s in rotate(strategies, r):
            j = io_json("emu:nvme", s, ["--bs", "4k", "--pattern", "seq", "--threads", "2"], 2)
            a = acc[s]
            a["ios"] += j["ios"]
            a["ns"] += j["duration_ns"]
            a["cpu"].append(j["cpu_user_pct"] + j["cpu_sys_pct"])
            a["lat"].append((j["lat_ns_mean"], j["ios"]))
            for k, v in j["decisions"]["by_reason"].items():
                a["reasons"][k] = a["reasons"].get(k, 0) + v
    print("| strategy | IOPS | CPU of the I/O threads (% of one CPU) | mean latency | branches |")
    print("|---|---|---|---|---|")
    for s in strategies:
        a = acc[s]
        iops = a["ios"] / (a["ns"] / 1e9)
        lat = sum(l * n for l, n in a["lat"]) / max(1, sum(n for _, n in a["lat"]))
        total = sum(a["reasons"].values()) or 1
        br = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(a["reasons"].items(), key=lambda x: -x[1]))
        print(f"| {s} | {iops:,.0f} | {statistics.mean(a['cpu']):.0f} | {lat / 1e3:.1f} us | {br or '-'} |")


def ctx_switches(pid):
    vol = invol = 0
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("voluntary_ctxt_switches"):
                vol = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                invol = int(line.split()[1])
    except OSError:
        pass
    return vol, invol


def fig10(rounds, workdir):
    path = os.path.join(workdir, "fig10.img")
    sh(["dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=128", "status=none"])
    crunchers = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(10)]
    res = {}
    try:
        time.sleep(1.0)
        for r in range(rounds):
            for target in ["emu:nvram", path]:
                for strat in rotate(["block", "smart", "sync"], r):
                    before = [ctx_switches(c.pid) for c in crunchers]
                    j = io_json(target, strat, ["--bs", "4k", "--pattern", "seq"], 2)
                    after = [ctx_switches(c.pid) for c in crunchers]
                    d = res.setdefault((target, strat), {"ios": 0, "vol": 0, "invol": 0, "cv": 0, "ci": 0, "reasons": {}})
                    d["ios"] += j["ios"]
                    d["vol"] += j["ctx_voluntary"]
                    d["invol"] += j["ctx_involuntary"]
                    d["cv"] += sum(a[0] - b[0] for a, b in zip(after, before))
                    d["ci"] += sum(a[1] - b[1] for a, b in zip(after, before))
                    for k, v in j["decisions"]["by_reason"].items():
                        d["reasons"][k] = d["reasons"].get(k, 0) + v
    finally:
        for c in crunchers:
            c.kill()
            c.wait()
        os.unlink(path)
    print("| target | strategy | I/Os | reader: voluntary | reader: involuntary | crunchers: voluntary | crunchers: involuntary | branches |")
    print("|---|---|---|---|---|---|---|---|")
    for (target, strat), d in res.items():
        total = sum(d["reasons"].values()) or 1
        br = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(d["reasons"].items(), key=lambda x: -x[1])[:2])
        name = "file on /var/tmp" if target == path else target
        print(f"| {name} | {strat} | {d['ios']:,} | {d['vol']:,} | {d['invol']:,} | {d['cv']:,} | {d['ci']:,} | {br or '-'} |")


def bench_json(target, strategies, load, budget, seconds):
    cmd = [SMARTCON, "bench", "--targets", target, "--sizes", "4k", "--ops", "read", "--strategies", strategies,
           "--load", load, "--spin-budget", budget, "--duration", f"{seconds}s", "--json"]
    out = sh(cmd).stdout
    return [json.loads(l) for l in out.splitlines() if l.startswith("{") and '"result"' in l]


def fig15b(rounds):
    rows = {}
    for target in ["emu:sata-ssd", "tmp:256m@/var/tmp"]:
        for load in ["bm-only", "cpu-intensive"]:
            for r in range(rounds):
                # always-stall: spin that never sleeps (10 s budget); smart and spin (1 ms) beside it.
                runs = [("always-stall", "spin", "10s"), ("spin (1 ms)", "spin", "1ms"), ("smart", "smart", "1ms")]
                for name, strat, budget in rotate(runs, r):
                    for j in bench_json(target, strat, load, budget, 1):
                        if j.get("strategy") != strat:
                            continue
                        key = (target, load, name)
                        d = rows.setdefault(key, {"ios": 0, "ns": 0, "cpu": [], "fallbacks": 0, "reasons": {}})
                        for k, v in j.get("decisions", {}).get("by_reason", {}).items():
                            d["reasons"][k] = d["reasons"].get(k, 0) + v
                        d["ios"] += j["ios"]
                        d["ns"] += j["duration_ns"]
                        d["cpu"].append(j["cpu_user_pct"] + j["cpu_sys_pct"])
                        d["fallbacks"] += j.get("spin_fallbacks", 0)
    print("| target | load | strategy | IOPS | smart / it | CPU % | spins that fell back to sleep | smart's branches |")
    print("|---|---|---|---|---|---|---|---|")
    for target in ["emu:sata-ssd", "tmp:256m@/var/tmp"]:
        for load in ["bm-only", "cpu-intensive"]:
            smart = rows.get((target, load, "smart"))
            si = smart["ios"] / (smart["ns"] / 1e9) if smart else float("nan")
            for name in ["always-stall", "spin (1 ms)", "smart"]:
                d = rows.get((target, load, name))
                if not d:
                    continue
                iops = d["ios"] / (d["ns"] / 1e9)
                total = sum(d["reasons"].values()) or 1
                br = ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in sorted(d["reasons"].items(), key=lambda x: -x[1])[:3])
                print(f"| {target} | {load} | {name} | {iops:,.0f} | {si / iops:.2f} | {statistics.mean(d['cpu']):.0f} | "
                      f"{d['fallbacks']} | {br or '-'} |")


def proc_cpu_ticks(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError):
        return None


def steal_ticks():
    f = open("/proc/stat").readline().split()
    return int(f[8]) if len(f) > 8 else 0


def fig20(rounds, workdir):
    path = os.path.join(workdir, "fig20.img")
    sh(["dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=128", "status=none"])
    series = {}
    for r in range(rounds):
        for bs in ["4k", "8k"]:
            for pause in rotate(["on", "off"], r):
                cmd = [SMARTCON, "io", "--target", path, "--strategy", "spin", "--bs", bs, "--pattern", "seq",
                       "--duration", "5s", "--json"] + (["--no-pause"] if pause == "off" else [])
                p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
                samples, last, st0 = [], proc_cpu_ticks(p.pid), steal_ticks()
                t_last = time.monotonic()
                while p.poll() is None:
                    time.sleep(0.25)
                    now, t = proc_cpu_ticks(p.pid), time.monotonic()
                    if now is not None and last is not None:
                        samples.append(100.0 * (now - last) / CLK_TCK / (t - t_last))
                    last, t_last = now, t
                out = p.communicate()[0]
                j = json.loads(out.strip().splitlines()[-1])
                d = series.setdefault((bs, pause), {"cpu": [], "ios": 0, "ns": 0, "steal": 0})
                # The first sample holds the start-up; the last one the exit.
                d["cpu"] += samples[1:-1]
                d["ios"] += j["ios"]
                d["ns"] += j["duration_ns"]
                d["steal"] += steal_ticks() - st0
    os.unlink(path)
    print("| size | PAUSE | IOPS | CPU, mean of 250 ms samples (% of one CPU) | spread (stdev) | min-max | machine steal (ticks) |")
    print("|---|---|---|---|---|---|---|")
    for (bs, pause), d in sorted(series.items()):
        c = d["cpu"]
        print(f"| {bs} | {pause} | {d['ios'] / (d['ns'] / 1e9):,.0f} | {statistics.mean(c):.1f} | {statistics.pstdev(c):.1f} | "
              f"{min(c):.0f}-{max(c):.0f} | {d['steal']} |")
    for (bs, pause), d in sorted(series.items()):
        print(f"{bs} PAUSE {pause}: " + " ".join(f"{x:.0f}" for x in d["cpu"][:40]))


DHRY = r"""
import sys
n = int(sys.argv[1])
a, s, x = [0] * 50, "DHRYSTONE PROGRAM, SOME STRING", 1
for i in range(n):
    x = (x * 1103515245 + 12345) & 0x7fffffff
    a[i % 50] = (a[(i + 7) % 50] + x) % 1000003
    if s[i % 30] == "S":
        x ^= i
print(x, sum(a))
"""


def cpu_iowait():
    f = open("/proc/stat").readline().split()
    return int(f[5])


def table6(rounds, workdir):
    path = os.path.join(workdir, "table6.img")
    sh(["dd", "if=/dev/urandom", f"of={path}", "bs=1M", "count=128", "status=none"])
    prog = os.path.join(workdir, "dhry.py")
    open(prog, "w").write(DHRY)
    res = {}
    for r in range(rounds):
        for strat in rotate(["block", "smart"], r):
            io = subprocess.Popen([SMARTCON, "io", "--target", path, "--strategy", strat, "--bs", "4k", "--pattern",
                                   "seq", "--duration", "600s", "--json"], stdout=subprocess.PIPE, text=True)
            time.sleep(0.5)
            w0 = cpu_iowait()
            t = sh(["/usr/bin/time", "-f", "%e %U %S", sys.executable, prog, "6000000"])
            w1 = cpu_iowait()
            io.send_signal(signal.SIGINT)
            out = io.communicate()[0]
            j = json.loads(out.strip().splitlines()[-1])
            real, user, syst = (float(x) for x in t.stderr.strip().splitlines()[-1].split())
            d = res.setdefault(strat, {"real": [], "user": [], "sys": [], "iowait": [], "iops": []})
            d["real"].append(real)
            d["user"].append(user)
            d["sys"].append(syst)
            d["iowait"].append((w1 - w0) / CLK_TCK)
            d["iops"].append(j["iops"])
    os.unlink(path)
    print("| time (sum over rounds) | block (Mainstream) | smart (SmartCon) | gain |")
    print("|---|---|---|---|")
    for k, label in [("real", "real"), ("user", "user"), ("sys", "sys"), ("iowait", "IOWait (machine)")]:
        b, s = sum(res["block"][k]), sum(res["smart"][k])
        print(f"| {label} | {b:.2f} s | {s:.2f} s | {100 * (b - s) / b if b else 0:+.1f}% |")
    print(f"| reader IOPS (mean) | {statistics.mean(res['block']['iops']):,.0f} | {statistics.mean(res['smart']['iops']):,.0f} | |")
    print("per round real (block): " + " ".join(f"{x:.2f}" for x in res["block"]["real"]))
    print("per round real (smart): " + " ".join(f"{x:.2f}" for x in res["smart"]["real"]))


def fig14(rounds, workdir):
    if not shutil.which("bonnie++"):
        print("fig14 skipped: bonnie++ is not installed (Debian package bonnie++)")
        return
    res = {}
    for r in range(rounds):
        for strat in rotate(["block", "smart"], r):
            d = tempfile.mkdtemp(prefix="bonnie-", dir=workdir)
            stats = os.path.join(workdir, f"stats-{strat}-{r}.jsonl")
            cmd = [SMARTCON, "run", "--strategy", strat, "--stats", stats, "--", "bonnie++", "-d", d, "-s", "512",
                   "-r", "256", "-n", "0", "-f", "-b", "-D", "-q", "-u", "root", "-x", "1"]
            out = sh(cmd).stdout
            shutil.rmtree(d, ignore_errors=True)
            csv = [l for l in out.splitlines() if l.count(",") > 10][-1].split(",")
            st = json.loads(open(stats).read().splitlines()[-1])
            taken = ", ".join(f"{k} {v}" for k, v in sorted((st.get("by_reason") or st.get("by_strategy") or {}).items()))
            # bonnie++ 2.00 CSV: 11/12 block output K/s and %CPU, 13/14 rewrite, 17/18 block input.
            res.setdefault(strat, []).append((csv[11], csv[13], csv[17], csv[18], f"{st.get('ios', 0):,}", taken or "-"))
    print("| strategy | block output K/s | rewrite K/s | block input K/s | input %CPU | I/Os taken by smartcon | their waits |")
    print("|---|---|---|---|---|---|---|")
    for strat, rows in res.items():
        for row in rows:
            print(f"| {strat} | " + " | ".join(row) + " |")


def main():
    global SMARTCON
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", choices=["fig7", "fig10", "fig15b", "fig20", "table6", "fig14"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--smartcon", default=os.environ.get("SMARTCON", SMARTCON))
    args = ap.parse_args()
    SMARTCON = args.smartcon
    if not os.access(SMARTCON, os.X_OK):
        print(f"seed000-studies: {SMARTCON}: not an executable smartcon (--smartcon)", file=sys.stderr)
        sys.exit(2)
    if args.rounds < 1:
        print("seed000-studies: --rounds must be at least 1", file=sys.stderr)
        sys.exit(2)
    workdir = tempfile.mkdtemp(prefix="smartcon-seed000-", dir="/var/tmp")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    try:
        host_figures()
        {"fig7": lambda: fig7(args.rounds), "fig10": lambda: fig10(args.rounds, workdir), "fig15b": lambda: fig15b(args.rounds),
         "fig20": lambda: fig20(args.rounds, workdir), "table6": lambda: table6(args.rounds, workdir),
         "fig14": lambda: fig14(args.rounds, workdir)}[args.study]()
    except subprocess.CalledProcessError as e:
        tail = (e.stderr or "").strip().splitlines()[-3:]
        print(f"seed000-studies: {' '.join(e.cmd[:4])} ... failed (exit {e.returncode}): {' / '.join(tail)}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\n({args.study}, {args.rounds} rounds, {time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    main()
