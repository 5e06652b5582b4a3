#!/usr/bin/env bash
# Seed 002's Fig. 5 as far as it goes outside the engine: OLTP (Debian PostgreSQL's pgbench,
# TPC-B-like) on an emulated Optane-class device (`smartcon emulate mount emu:optane`, ext4
# over a direct-I/O loop device over smartcon's FUSE file), beside the same on tmpfs and on
# the local disk. Each target gets a fresh cluster and `pgbench -i -s SCALE`; then, per
# strategy and client count, the server is started, `pgbench -T SECS` runs, the server stops.
#
#   SCALE=5 SECS=10 CLIENTS="1 4" ROUNDS=1 scripts/bench-pgbench.sh
#   TARGETS="emu:optane tmpfs disk" STRATEGIES="plain block spin hybrid smart" (the defaults)
#
# Strategies: `plain` is postgres alone; the others run the server under `smartcon run
# --strategy S`, which takes the waits of its O_DIRECT I/O. The cluster is set up so that
# PostgreSQL 15 writes its WAL with O_DIRECT (wal_level=minimal, max_wal_senders=0,
# wal_sync_method=open_datasync): each commit's WAL write is then a wait smartcon takes,
# and those are the only ones (table and index pages are buffered and fsynced by the
# kernel). Rounds alternate the order of the strategies.
#
# Root only (FUSE, losetup, mount; the server runs as the `postgres` user). Everything it
# makes (the mount, the servers, the work directories) is removed at the end, also on
# Ctrl-C or SIGTERM. After SIGKILL: the servers die with the script (parent-death signal),
# `smartcon cleanup` removes the mount, and /var/tmp/smartcon-pgbench.* and
# /dev/shm/smartcon-pgbench.* are left to delete by hand.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $(id -u) -ne 0 ]]; then
  echo "bench-pgbench: needs root (FUSE mount, losetup, mount); skipped" >&2
  exit 0
fi
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)}
if [[ -z $PGBIN || ! -x $PGBIN/postgres ]] || ! command -v pgbench >/dev/null || ! id postgres >/dev/null 2>&1; then
  echo "bench-pgbench: needs Debian's postgresql (postgres, initdb, pgbench, the postgres user); skipped" >&2
  exit 0
fi
command -v setpriv >/dev/null || { echo "bench-pgbench: setpriv (util-linux) is not installed" >&2; exit 1; }

SCALE=${SCALE:-5}
SECS=${SECS:-10}
CLIENTS=${CLIENTS:-"1 4"}
ROUNDS=${ROUNDS:-1}
TARGETS=${TARGETS:-"emu:optane tmpfs disk"}
STRATEGIES=${STRATEGIES:-"plain block spin hybrid smart"}
PORT=${PORT:-5439}
if [[ -z ${SMARTCON:-} ]]; then
  cargo build --release -q -p smartcon-cli
  SMARTCON=$PWD/target/release/smartcon
fi

DISKWORK=$(mktemp -d /var/tmp/smartcon-pgbench.XXXXXX)
SHMWORK=$(mktemp -d /dev/shm/smartcon-pgbench.XXXXXX)
chmod 755 "$DISKWORK" "$SHMWORK"
MNT=$DISKWORK/mnt
SOCK=$DISKWORK/sock
LOGS=$DISKWORK/logs
mkdir -p "$MNT" "$SOCK" "$LOGS"
chown postgres: "$SOCK" "$LOGS"
SERVER=""   # pid of the running server (or of `smartcon run` around it)
PGDATA=""
MOUNTED=0

as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
stop_server() {
  [[ -n $SERVER ]] || return 0
  as_pg "$PGBIN/pg_ctl" -D "$PGDATA" stop -m "${1:-fast}" -w -t 60 >/dev/null 2>&1 || kill "$SERVER" 2>/dev/null || true
  wait "$SERVER" 2>/dev/null || true
  SERVER=""
}
cleanup() {
  set +e
  stop_server immediate
  if [[ $MOUNTED -eq 1 ]]; then "$SMARTCON" emulate umount "$MNT" >/dev/null 2>&1; fi
  rm -rf "$DISKWORK" "$SHMWORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# $1 strategy, $2 log file. The server's parent-death signal is SIGKILL, so a killed
# script takes it along (its backends notice the postmaster's death and exit).
start_server() {
  local strategy=$1 log=$2
  local cmd=("$PGBIN/postgres" -D "$PGDATA" -k "$SOCK" -p "$PORT" -c listen_addresses=)
  if [[ $strategy != plain ]]; then
    cmd=("$SMARTCON" run --strategy "$strategy" -- "${cmd[@]}")
  fi
  TMPDIR=$LOGS setpriv --reuid=postgres --regid=postgres --init-groups --pdeathsig=KILL "${cmd[@]}" >"$log" 2>&1 &
  SERVER=$!
  for _ in $(seq 300); do
    "$PGBIN/pg_isready" -q -h "$SOCK" -p "$PORT" && return 0
    kill -0 "$SERVER" 2>/dev/null || break
    sleep 0.1
  done
  echo "bench-pgbench: the server did not start ($strategy); its log:" >&2
  cat "$log" >&2
  exit 1
}

init_cluster() { # $1: the directory to hold the cluster
  PGDATA=$1/pgdata
  mkdir -p "$PGDATA"
  chown postgres: "$PGDATA"
  chmod 700 "$PGDATA"
  as_pg "$PGBIN/initdb" -D "$PGDATA" -A trust -U postgres --no-sync >"$LOGS/initdb.log" 2>&1
  cat >>"$PGDATA/postgresql.conf" <<EOF
# bench-pgbench.sh: WAL with O_DIRECT (PostgreSQL <= 15: wal_level=minimal, no senders,
# an open_* sync method), so each commit's WAL write is a wait smartcon run can take.
wal_level = minimal
max_wal_senders = 0
wal_sync_method = open_datasync
shared_buffers = 64MB
max_connections = 20
EOF
  start_server plain "$LOGS/init-server.log"
  pgbench -i -q -s "$SCALE" -h "$SOCK" -p "$PORT" -U postgres postgres >"$LOGS/pgbench-init.log" 2>&1
  stop_server
}

RESULTS=$DISKWORK/results.txt
: >"$RESULTS"
echo "bench-pgbench: $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs, $("$PGBIN/postgres" --version), scale $SCALE, ${SECS} s a run" >&2
for target in $TARGETS; do
  case $target in
    emu:*)
      "$SMARTCON" emulate mount "$target" "$MNT" --fs ext4 --size 1g --detach >"$LOGS/mount.log"
      MOUNTED=1
      init_cluster "$MNT" ;;
    tmpfs) init_cluster "$SHMWORK" ;;
    disk) init_cluster "$DISKWORK" ;;
    *) echo "bench-pgbench: unknown target $target (emu:PRESET, tmpfs or disk)" >&2; exit 2 ;;
  esac
  read -r -a order <<<"$STRATEGIES"
  for round in $(seq "$ROUNDS"); do
    if (( round % 2 == 0 )); then
      for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do t=${order[i]}; order[i]=${order[j]}; order[j]=$t; done
    fi
    for strategy in "${order[@]}"; do
      for c in $CLIENTS; do
        log=$LOGS/server-$round-$strategy-$c.log
        start_server "$strategy" "$log"
        load=$(cut -d' ' -f1 /proc/loadavg)
        out=$(pgbench -n -c "$c" -j "$(( c < 2 ? c : 2 ))" -T "$SECS" -h "$SOCK" -p "$PORT" -U postgres postgres 2>&1)
        stop_server
        tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)/\1/p' <<<"$out")
        lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
        taken=$(sed -n 's/^smartcon run: \([0-9]*\) I\/Os taken.*, p50 \([0-9.]* us\), p99 \([0-9.]* us\).*/\1 I\/Os, p50 \2, p99 \3/p' "$log")
        line="| $target | $strategy | $c | $round | ${tps:-?} | ${lat:-?} | ${taken:--} | $load |"
        echo "$line" >>"$RESULTS"
        echo "bench-pgbench: $line" >&2
        grep -h '^smartcon run:' "$log" | sed 's/^/bench-pgbench:   /' >&2 || true
        [[ -n $tps ]] || { echo "$out" >&2; exit 1; }
      done
    done
  done
  if [[ $target == emu:* ]]; then
    "$SMARTCON" emulate umount "$MNT" >"$LOGS/umount.log" 2>&1
    MOUNTED=0
    sed -n '/^accuracy report/,$p' "$LOGS/umount.log" >&2
  else
    rm -rf "$PGDATA"
  fi
done

echo "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; scale $SCALE; ${SECS} s a run"
echo
echo "| target | strategy | clients | round | tps | latency average (ms) | WAL waits smartcon took | load average at start |"
echo "|---|---|---|---|---|---|---|---|"
cat "$RESULTS"
