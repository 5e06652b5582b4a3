#!/usr/bin/env bash
# The 64-point virtual-time replay sweep (4 presets x 16 channel counts, a closed-loop job
# of IOS requests per point) serially and on two local Ray nodes of one CPU each, and
# Ray's per-task overhead; the figures of docs/distributed.md. Starts the two nodes itself
# (`ray start --block`, each in its own process group) and stops them by pid on exit.
#
#   IOS=3000000 scripts/bench-ray.sh
#
# Needs Ray in .venv-ray (scripts/test.sh installs it) or SMARTCON_RAY_PYTHON.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${SMARTCON_RAY_PYTHON:-$PWD/.venv-ray/bin/python}
"$PY" -c "import ray" 2>/dev/null || { echo "bench-ray: $PY cannot import ray (run scripts/test.sh)" >&2; exit 1; }
IOS=${IOS:-3000000}
cargo build --release -q -p smartcon-cli
BIN=$PWD/target/release/smartcon
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
echo "host: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
"$BIN" "${SWEEP[@]}" --out "$WORK/serial" 2>/dev/null >/dev/null
t1=$(date +%s.%N)
echo "serial: 64 points in $(echo "$t1 - $t0" | bc) s; loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
t0=$(date +%s.%N)
"$BIN" "${SWEEP[@]}" --ray "127.0.0.1:$PORT" --out "$WORK/ray" 2>/dev/null >/dev/null
t1=$(date +%s.%N)
echo "ray, 2 nodes x 1 CPU: 64 points in $(echo "$t1 - $t0" | bc) s (smartcon's whole command); loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
grep '"ray_run"' "$WORK/ray/results.jsonl"
same=$(diff <(grep replay_result "$WORK/serial/results.jsonl" | "$PY" -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); [r.pop(k) for k in ('wall_ns','speedup','requests_per_s_wall','requests_per_s_cpu')]; print(json.dumps(r))") \
  <(grep replay_result "$WORK/ray/results.jsonl" | "$PY" -c "
import json,sys
for l in sys.stdin:
    r=json.loads(l); [r.pop(k) for k in ('wall_ns','speedup','requests_per_s_wall','requests_per_s_cpu')]; print(json.dumps(r))") >/dev/null && echo yes || echo NO)
echo "records identical to the serial run's (virtual-time fields): $same"
"$PY" -m smartcon_ray overhead --address "127.0.0.1:$PORT" --smartcon "$BIN" --tasks 64
echo "loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
