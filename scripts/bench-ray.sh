#!/usr/bin/env bash
# The 64-point virtual-time replay sweep (4 presets x 16 channel counts, a closed-loop job
# of IOS requests per point) serially and on two local Ray nodes of one CPU each, and
# Ray's per-task overhead; the figures of docs/distributed.md. Starts the two nodes itself
# (`ray start --block`, each in its own process group) and stops them by pid on exit.
#
#   IOS=3000000 ROUNDS=1 [SMARTCON_BIN=target/release/smartcon] scripts/bench-ray.sh
#
# ROUNDS (default 1) alternates serial and Ray runs (serial, Ray, serial, Ray, ...) so a
# change of the shared machine's load hits both. For every Ray run it accounts for the two
# CPUs' time over the run's wall time: the points' smartcon (the ray_point records' cpu_ns),
# Ray's own processes (the two nodes' sessions, sampled every 0.2 s), the driver (smartcon
# --ray and its Python, by rusage), the host's steal, idle, and the rest (other processes).
#
# Needs Ray in .venv-ray (scripts/test.sh installs it) or SMARTCON_RAY_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${SMARTCON_RAY_PYTHON:-$PWD/.venv-ray/bin/python}
"$PY" -c "import ray" 2>/dev/null || { echo "bench-ray: $PY cannot import ray (run scripts/test.sh)" >&2; exit 1; }
IOS=${IOS:-3000000}
# SMARTCON_BIN=PATH benchmarks that binary as it is (no cargo build).
if [ -n "${SMARTCON_BIN:-}" ]; then
  BIN=$(realpath "$SMARTCON_BIN")
else
  cargo build --release -q -p smartcon-cli
  BIN=$PWD/target/release/smartcon
fi
WORK=$(mktemp -d /tmp/scbench.XXXXXX)
PORT=$((30000 + ($$ % 10000) * 3))
export RAY_USAGE_STATS_ENABLED=0 SMARTCON_RAY_PYTHON=$PY PYTHONPATH=$PWD/python SMARTCON_HOME=$WORK/home
PIDS=()
cleanup() {
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do kill -TERM "${PIDS[i]}" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 60); do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -KILL -- "-$p" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

RAY=$(dirname "$PY")/ray
# Waits (at most 300 s) until the cluster has $1 nodes, while every `ray start` still runs.
wait_nodes() {
  for _ in $(seq 300); do
    [ "$(nodes)" -ge "$1" ] && return 0
    for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null || { echo "bench-ray: a ray start exited" >&2; exit 1; }; done
    sleep 1
  done
  echo "bench-ray: the cluster did not reach $1 nodes in 300 s" >&2; exit 1
}
nodes() { "$PY" -c "import ray; ray.init(address='127.0.0.1:$PORT', logging_level='ERROR'); print(sum(n['Alive'] for n in ray.nodes()))" 2>/dev/null || echo 0; }
setsid "$RAY" start --head --block --num-cpus 1 --include-dashboard=false --disable-usage-stats --port "$PORT" \
  --ray-client-server-port $((PORT + 1)) --dashboard-agent-listen-port $((PORT + 2)) --temp-dir "$WORK/t" >/dev/null 2>&1 &
PIDS+=($!)
wait_nodes 1
setsid "$RAY" start --block --num-cpus 1 --disable-usage-stats --address "127.0.0.1:$PORT" \
  --dashboard-agent-listen-port $((PORT + 3)) >/dev/null 2>&1 &
PIDS+=($!)
wait_nodes 2

SWEEP=(emulate replay --device emu:nvram --device emu:optane --device emu:nvme --device emu:sata-ssd
       --channels 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16 --qd 8 --ios "$IOS")
ROUNDS=${ROUNDS:-1}
# The accounting: `acct.py sample PIDFILE OUT` samples the nodes' sessions until PIDFILE
# goes; `acct.py run OUT CMD...` runs CMD and writes its wall and children's CPU time and
# the machine's /proc/stat ticks over it.
cat >"$WORK/acct.py" <<'PYEOF'
import json, os, resource, subprocess, sys, time
TICK = os.sysconf("SC_CLK_TCK")
def stat():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return {"total": sum(f) / TICK, "idle": (f[3] + f[4]) / TICK, "steal": f[7] / TICK}
if sys.argv[1] == "run":
    out, cmd = sys.argv[2], sys.argv[3:]
    s0, t0 = stat(), time.monotonic()
    rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    wall, s1, ru = time.monotonic() - t0, stat(), resource.getrusage(resource.RUSAGE_CHILDREN)
    json.dump({"rc": rc, "wall": wall, "cpu": ru.ru_utime + ru.ru_stime,
               **{k: s1[k] - s0[k] for k in s0}, "load": open("/proc/loadavg").read().split()[:3]}, open(out, "w"))
else:  # sample: the last CPU time seen of every process (not smartcon) in the sessions given
    pidfile, out, sids = sys.argv[2], sys.argv[3], {int(x) for x in sys.argv[4:]}
    def snap():
        seen = {}
        for p in os.listdir("/proc"):
            if not p.isdigit():
                continue
            try:
                s = open(f"/proc/{p}/stat").read()
            except OSError:
                continue
            comm, f = s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()
            if int(f[3]) in sids and comm != "smartcon":
                seen[(p, f[19])] = (int(f[11]) + int(f[12])) / TICK  # keyed by pid and start time
        return seen
    first = snap(); last = dict(first)
    while os.path.exists(pidfile):
        last.update(snap()); time.sleep(0.2)
    last.update(snap())
    json.dump({"ray_cpu": sum(v - first.get(k, 0) for k, v in last.items())}, open(out, "w"))
PYEOF
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); IOS=$IOS ROUNDS=$ROUNDS; loadavg before: $(load)"
for r in $(seq "$ROUNDS"); do
  python3 "$WORK/acct.py" run "$WORK/serial$r.json" "$BIN" "${SWEEP[@]}" --out "$WORK/serial$r"
  touch "$WORK/sampling"
  python3 "$WORK/acct.py" sample "$WORK/sampling" "$WORK/sample$r.json" "${PIDS[@]}" &
  SAMPLER=$!
  python3 "$WORK/acct.py" run "$WORK/ray$r.json" "$BIN" "${SWEEP[@]}" --ray "127.0.0.1:$PORT" --out "$WORK/ray$r"
  rm "$WORK/sampling"; wait "$SAMPLER"
  python3 - "$WORK" "$r" <<'PYEOF'
import json, sys
w, r = sys.argv[1], sys.argv[2]
s, y, smp = (json.load(open(f"{w}/{n}{r}.json")) for n in ("serial", "ray", "sample"))
recs = [json.loads(l) for l in open(f"{w}/ray{r}/results.jsonl")]
run = next(x for x in recs if x["type"] == "ray_run")
pts = [x for x in recs if x["type"] == "ray_point"]
def virt(path):
    out = []
    for l in open(path):
        x = json.loads(l)
        if x["type"] == "replay_result":
            for k in ("wall_ns", "speedup", "requests_per_s_wall", "requests_per_s_cpu"):
                x.pop(k)
            out.append(x)
    return out
same = virt(f"{w}/serial{r}/results.jsonl") == virt(f"{w}/ray{r}/results.jsonl")
serial_points_cpu = sum(x["ios"] / x["requests_per_s_cpu"] for x in map(json.loads, open(f"{w}/serial{r}/results.jsonl")) if x["type"] == "replay_result")
ray_points_cpu = sum(x["ios"] / x["requests_per_s_cpu"] for x in recs if x["type"] == "replay_result")
points = run["task_cpu_ns_sum"] / 1e9
avail = y["total"]  # the two CPUs' seconds over the Ray run (= 2 x its wall)
others = max(0.0, avail - y["idle"] - y["steal"] - points - smp["ray_cpu"] - y["cpu"])
print(f"round {r}: serial {s['wall']:.1f} s (loadavg {' '.join(s['load'])}); Ray {y['wall']:.1f} s (loadavg {' '.join(y['load'])}): "
      f"**{y['wall'] / s['wall']:.2f} x**; records identical (virtual-time fields): {'yes' if same and run['done'] == 64 else 'NO'}")
print(f"  serial: smartcon's CPU {s['cpu']:.1f} s of {s['wall']:.1f} s; the replays' own threads {serial_points_cpu:.1f} s; host steal {100 * s['steal'] / s['total']:.1f}%, idle {100 * s['idle'] / s['total']:.0f}%")
print(f"  Ray: the replays' own threads {ray_points_cpu:.1f} s (x {ray_points_cpu / serial_points_cpu:.2f} the serial's); the two CPUs over its {y['wall']:.1f} s: {avail:.1f} CPU-s =")
print(f"       points (smartcon processes) {points:.1f} + Ray's processes {smp['ray_cpu']:.1f} + driver (smartcon --ray, Python, report) {y['cpu']:.1f}"
      f" + host steal {y['steal']:.1f} + idle {y['idle']:.1f} + other processes {others:.1f}")
first = run["first_start_ns"] / 1e9
last_end = max(p["start_ns"] + p["wall_ns"] for p in pts) / 1e9
print(f"  Ray's timeline: ray.init {run['connect_ns'] / 1e9:.1f} s; then the first point started after {first:.1f} s, the last ended after {last_end:.1f} s, "
      f"results.jsonl {run['wall_ns'] / 1e9 - last_end:.1f} s later; the rest (smartcon's plan, Python's start, the report) "
      f"{y['wall'] - run['wall_ns'] / 1e9 - run['connect_ns'] / 1e9:.1f} s; the points' wall summed {run['task_wall_ns_sum'] / 1e9:.1f} s")
PYEOF
  grep '"ray_run"' "$WORK/ray$r/results.jsonl"
done
"$PY" -m smartcon_ray overhead --address "127.0.0.1:$PORT" --smartcon "$BIN" --tasks 64
echo "loadavg after: $(load)"
