#!/usr/bin/env python3
"""How long UML's host tasks waited for a host CPU while the guest's command ran (docs/vm.md,
issue 23). Runs one `smartcon emulate vm SPEC [--virtual-time] --json -- CMD...` and samples
/proc/PID/task/TID/schedstat of every task in linux.uml's process group every 10 ms between
the guest's start and end marks: per task, its CPU time and its run delay (runnable, waiting
for a CPU). A task that exits between two samples loses its last 10 ms.

    python3 scripts/vm-probe.py target/release/smartcon real|virtual emu:hdd sh -c 'CMD'
"""
import glob, json, os, subprocess, sys, tempfile, time

bin_, mode, spec = sys.argv[1], sys.argv[2], sys.argv[3]
cmd = sys.argv[4:]
flags = ["--virtual-time"] if mode == "virtual" else []
p = subprocess.Popen([bin_, "emulate", "vm", spec, *flags, "--json", "--", *cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
work = os.path.join(tempfile.gettempdir(), f"smartcon-vm-{p.pid}")
def snap(pg):
    out = {}
    for st in glob.glob("/proc/[0-9]*/stat"):
        pid = st.split("/")[2]
        try:
            s = open(st).read()
            f = s[s.rfind(")")+2:].split()
            if int(f[2]) != pg: continue
            ppid = int(f[1])
            for t in glob.glob(f"/proc/{pid}/task/*/schedstat"):
                tid = t.split("/")[4]
                a = open(t).read().split()
                out[int(tid)] = (int(pid), ppid, int(a[0]), int(a[1]))
        except Exception:
            pass
    return out
pg = None; first = None; last = {}; started=False; ended=False
t_start=None
while p.poll() is None:
    if pg is None:
        # the linux.uml child of smartcon
        for st in glob.glob("/proc/[0-9]*/stat"):
            try:
                t = open(st).read(); f = t[t.rfind(")")+2:].split()
                if int(f[1]) == p.pid and "linux.uml" in t[:t.rfind(")")]: pg = int(st.split("/")[2])
            except Exception: pass
    if pg and not started and os.path.exists(work + "/started"):
        started = True; first = snap(pg); last = dict(first); t_start=time.time()
    if started and not ended:
        if os.path.exists(work + "/ended"):
            ended = True
        else:
            s = snap(pg)
            last.update(s)
    time.sleep(0.01)
out, err = p.communicate()
rec = [json.loads(l) for l in out.splitlines() if '"emulate_vm"' in l][0]
cpu = delay = 0; rows=[]
for tid, (pid, ppid, c, d) in last.items():
    c0, d0 = (first.get(tid, (0,0,0,0))[2:4])
    rows.append((tid, pid, ppid, (c-c0)/1e9, (d-d0)/1e9))
rows.sort(key=lambda r: -r[3])
print(f"{mode} guest {rec['guest_ns']/1e9:.3f} s cmd wall {rec['command_wall_ns']/1e9:.3f} util {rec['guest_cpu_utilization']:.3f} device {rec['device']['device_ns']/1e9:.3f} within2 {rec['within_2pct']} late_sum {rec['device']['lateness']['sum_ns']/1e9:.3f} load {open('/proc/loadavg').read().split()[0]}")
for r in rows[:12]:
    print("  tid %d pid %d ppid %d cpu %.3f delay %.3f" % r)
print("  total cpu %.3f delay %.3f" % (sum(r[3] for r in rows), sum(r[4] for r in rows)))
