"""The Ray driver of smartcon's sweeps and fleet surveys.

smartcon computes the plan; this module only runs it. A sweep's plan is one ``plan_point``
record per point, each holding the smartcon arguments (with ``--json``) that run it; each
point is one Ray task that runs the ``smartcon`` binary on a worker and returns the
records it printed. A fleet survey is one task per alive node, pinned to it
(NodeAffinitySchedulingStrategy, not soft), that runs ``smartcon evaluate --fleet-host
NODE_ID`` on that node's own devices. The records come back as the tasks finish
(``ray.wait``); the driver writes them to ``results.jsonl`` in plan order, so a sweep on a
cluster writes the same file as the sweep run point after point on one machine, and then
calls ``smartcon report`` on it: there is no second renderer here.

Failures: a task whose worker or node is lost is retried by Ray (``max_retries``); one
that is still lost, or whose smartcon exits with an error, is a ``point_failed`` record
naming the point (or host) and why, and the driver exits 3. Ctrl-C (or SIGTERM) cancels
every task: each task stops its smartcon with SIGTERM (smartcon removes what it created
and exits) and removes its scratch directory; a smartcon that has not ended 20 s after
its SIGTERM is killed and ``smartcon cleanup`` removes what it recorded. Tasks that do not
end within a grace period are force-cancelled: the raylet then SIGKILLs their smartcon
with the worker (smartcon's PR_SET_PDEATHSIG is for a worker that dies otherwise), so the
driver runs ``smartcon cleanup`` on every node afterwards.

Non-goals: a scheduler, a queue or a result store of its own (Ray and one file are those).
"""

import argparse
import contextlib
import ctypes
import functools
import itertools
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

try:
    import ray
except ImportError:
    sys.exit(f"smartcon_ray: Ray is not installed for {sys.executable}: pip install 'ray[default]' (docs/distributed.md)")

EXIT_FAILED = 3
EXIT_INTERRUPTED = 130
# How long cancelled tasks get to stop their smartcon and clean up before force-cancel.
CANCEL_GRACE_S = 30
# How long a stopped smartcon gets to remove what it created before SIGKILL.
TERM_GRACE_S = 20
STDERR_TAIL_CHARS = 2000
# How often a task waiting for its smartcon returns to Python (where a cancel is raised).
POLL_S = 0.2
# A task's scratch directory in the node's TMPDIR: this, the worker's pid, a dash and a
# random part; it holds `smartcon.pid` while smartcon runs (run_cleanup finds both by them).
SCRATCH_PREFIX = "smartcon-ray-"
PID_FILE = "smartcon.pid"


def _die_with_parent():
    """In the child, before exec: SIGTERM when the worker that started it dies."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _spawn_args(argv):
    """The command and preexec_fn that start ARGV so it gets SIGTERM when this worker dies.

    With util-linux's setpriv in front (it sets the death signal, then execs smartcon in
    the same pid) there is no preexec_fn, so subprocess starts the child with vfork (or
    posix_spawn) instead of a full fork of this large Python worker, which copies its page
    tables for every point. Without setpriv, the prctl runs in a forked child as before."""
    setpriv = shutil.which("setpriv")
    if setpriv:
        return [setpriv, "--pdeathsig", "TERM", "--"] + argv, None
    return argv, _die_with_parent


def _binary(spec):
    """The smartcon binary on this worker: a path, or ``ship:NAME`` in the working dir."""
    if spec.startswith("ship:"):
        path = os.path.join(os.getcwd(), spec[len("ship:"):])
        # The runtime environment's archive does not keep the mode bits.
        if not os.access(path, os.X_OK):
            os.chmod(path, 0o755)
        return path
    return spec


def _cleanup(binary):
    """`smartcon cleanup` on this node: removes what a killed smartcon left (its records)."""
    try:
        subprocess.run([binary, "cleanup"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       stdin=subprocess.DEVNULL, timeout=TERM_GRACE_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        pass


def _children_cpu_ns():
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return int((ru.ru_utime + ru.ru_stime) * 1e9)


@contextlib.contextmanager
def _scratch():
    """The task's scratch directory, removed when the task ends (run_cleanup removes it
    when the task's worker was killed first)."""
    path = tempfile.mkdtemp(prefix=f"{SCRATCH_PREFIX}{os.getpid()}-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _run(binary_spec, args, scratch=None):
    """Runs smartcon ARGS on this worker; returns (status, stdout, stderr tail, wall ns, CPU ns).
    With a scratch directory, smartcon's pid is written there while it runs.

    The CPU time is that of the children this worker reaped meanwhile: its smartcon (a
    worker runs one task at a time and starts no other process)."""
    binary = _binary(binary_spec)
    # ray.cancel interrupts a running task with _thread.interrupt_main, which does nothing
    # while SIGINT is ignored, and a worker inherits an ignored SIGINT from whatever
    # started its node (`ray start ... &` in a script ignores it): SIGINT raises
    # KeyboardInterrupt while this task runs, as in a worker of a node started by hand.
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return _run_interruptible(binary, args, scratch)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _run_interruptible(binary, args, scratch):
    cpu_before = _children_cpu_ns()
    started = time.monotonic_ns()
    argv, preexec = _spawn_args([binary] + list(args))
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        preexec_fn=preexec,
    )
    if scratch:
        with open(os.path.join(scratch, PID_FILE), "w") as f:
            f.write(str(proc.pid))
    try:
        while True:
            # In short waits, not one: ray.cancel interrupts a running task with
            # _thread.interrupt_main, which raises KeyboardInterrupt only once this thread
            # runs Python again; a wait for output that never comes (evaluate's quiet
            # minutes, a replay's) would hold it until the force-cancel, whose worker exit
            # makes the raylet SIGKILL smartcon before it removes what it created.
            try:
                out, err = proc.communicate(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                continue
    except BaseException:
        # Cancelled: stop smartcon the way Ctrl-C would, so it removes what it created,
        # then make sure it is gone (reading its pipes meanwhile, so it cannot block on them).
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=TERM_GRACE_S)
        except BaseException:
            proc.kill()
            proc.wait()
            # Killed before it cleaned up: what it recorded is removed by `smartcon
            # cleanup` (which touches only what a dead smartcon recorded).
            _cleanup(binary)
        raise
    wall_ns = time.monotonic_ns() - started
    return proc.returncode, out, err[-STDERR_TAIL_CHARS:], wall_ns, _children_cpu_ns() - cpu_before


def _records(text):
    return [json.loads(line) for line in text.splitlines() if line.strip().startswith("{")]


def _where():
    return ray.get_runtime_context().get_node_id(), socket.gethostname()


@ray.remote(num_cpus=1)
def run_point(point, binary_spec):
    """One sweep point: smartcon with the point's arguments, its records."""
    start_unix_ns = time.time_ns()
    node, host = _where()
    with _scratch() as scratch:
        status, out, err, wall_ns, cpu_ns = _run(binary_spec, point["args"], scratch)
    return {"status": status, "records": _records(out) if status == 0 else [], "stderr": err,
            "node": node, "host": host, "wall_ns": wall_ns, "cpu_ns": cpu_ns, "start_unix_ns": start_unix_ns}


@ray.remote(num_cpus=1)
def run_host(node_id, evaluate_args, binary_spec):
    """One fleet host: evaluate on this node, its fleet_host record; the report is scratch."""
    node, host = _where()
    if node != node_id:
        raise RuntimeError(f"pinned to node {node_id} but ran on {node}")
    start_unix_ns = time.time_ns()
    with _scratch() as scratch:
        args = ["evaluate", *evaluate_args, "--out", os.path.join(scratch, "report"), "--fleet-host", node_id]
        status, out, err, wall_ns, cpu_ns = _run(binary_spec, args, scratch)
    return {"status": status, "records": _records(out) if status == 0 else [], "stderr": err,
            "node": node, "host": host, "wall_ns": wall_ns, "cpu_ns": cpu_ns, "start_unix_ns": start_unix_ns}


@ray.remote(num_cpus=1)
def run_nothing(binary_spec):
    """The overhead probe's task: smartcon --version (one process start)."""
    status, _, _, wall_ns, _ = _run(binary_spec, ["--version"])
    return status, wall_ns


def _progress(done, total, started, what):
    secs = time.monotonic() - started
    print(f"smartcon_ray: points {done}/{total} done after {secs:.0f} s: {what}", file=sys.stderr, flush=True)


def _reason(error):
    name = type(error).__name__
    text = str(error).strip().splitlines()
    return f"{name}: {text[-1] if text else ''}".strip()


def _connect(args):
    # The tasks are this module's functions, sent by value with the tasks (cloudpickle), so
    # the nodes need Ray but not smartcon_ray installed. Not as a runtime_env py_modules:
    # a job with a runtime environment needs workers of its own, started and set up after
    # the driver connects, where one without can take the node's idle workers at once.
    env = {}
    if os.environ.get("SMARTCON_RAY_PY_MODULES"):
        env["py_modules"] = [os.path.dirname(os.path.abspath(__file__))]
    else:
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    binary_spec = os.path.abspath(args.smartcon)
    if args.ship:
        # The binary travels in the job's runtime environment (uploaded once, unpacked on
        # every node that runs a task) instead of being found by its path on every node.
        ship_dir = tempfile.mkdtemp(prefix="smartcon-ship-")
        shutil.copy2(binary_spec, os.path.join(ship_dir, "smartcon"))
        # emulate sweep's programs load the interposition library from beside the binary
        # (or from deps/ beside it, where a workspace `cargo test` leaves it: smartcon looks
        # in both, preload-contract's launch::library_in).
        here = os.path.dirname(binary_spec)
        for library in (os.path.join(here, "libsmartcon.so"), os.path.join(here, "deps", "libsmartcon.so")):
            if os.path.exists(library):
                shutil.copy2(library, os.path.join(ship_dir, "libsmartcon.so"))
                break
        env["working_dir"] = ship_dir
        binary_spec = "ship:smartcon"
        args._ship_dir = ship_dir
    connecting = time.monotonic_ns()
    try:
        ray.init(address=args.address, runtime_env=env or None, log_to_driver=False,
                 logging_level="ERROR", configure_logging=True)
    except (ConnectionError, RuntimeError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"smartcon_ray: cannot join the Ray cluster at {args.address}: {first}", file=sys.stderr)
        raise SystemExit(2)
    # The run's clock starts once connected (ns: monotonic; unix_ns: to place the tasks).
    now = time.monotonic_ns()
    return binary_spec, {"ns": now, "unix_ns": time.time_ns(), "connect_ns": now - connecting}


_INTERRUPT = {"asked": False}


def _defer_interrupt(signum, frame):
    """Ctrl-C while the tasks are being submitted: noted, acted on once they all are (a
    KeyboardInterrupt in the middle of the submissions would leave no results.jsonl)."""
    _INTERRUPT["asked"] = True


def _submitting():
    """From here on, a Ctrl-C is deferred (see _defer_interrupt) and _collect acts on it."""
    signal.signal(signal.SIGINT, _defer_interrupt)


def _running(pid):
    """Whether process PID exists and is no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


@ray.remote(num_cpus=0)
def run_cleanup(binary_spec):
    """On the node it is pinned to, after tasks were force-cancelled: waits for the
    smartcon of every task whose worker is gone to end (SIGKILL after the grace), runs
    `smartcon cleanup` and removes those tasks' scratch directories."""
    binary = _binary(binary_spec)
    # The pid still names that smartcon, not a process that got the number since.
    name = os.path.basename(binary)[:15]

    def alive(pid):
        try:
            with open(f"/proc/{pid}/comm") as f:
                return f.read().strip() == name and _running(pid)
        except OSError:
            return False

    tmp = tempfile.gettempdir()
    orphans = []
    for name in os.listdir(tmp):
        worker = name[len(SCRATCH_PREFIX):].split("-")[0]
        if name.startswith(SCRATCH_PREFIX) and worker.isdigit() and not _running(worker):
            orphans.append(os.path.join(tmp, name))
    deadline = time.monotonic() + TERM_GRACE_S
    for path in orphans:
        try:
            with open(os.path.join(path, PID_FILE)) as f:
                pid = int(f.read())
        except (OSError, ValueError):
            continue
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            while alive(pid) and time.monotonic() < deadline + 5:
                time.sleep(0.1)
    _cleanup(binary)
    for path in orphans:
        shutil.rmtree(path, ignore_errors=True)


def _cleanup_everywhere(binary_spec, cancelled):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    # The force-cancelled tasks end once their workers are gone (so run_cleanup sees them gone).
    ray.wait(cancelled, num_returns=len(cancelled), timeout=CANCEL_GRACE_S)
    refs = [run_cleanup.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False))
            .remote(binary_spec) for n in ray.nodes() if n["Alive"]]
    print(f"smartcon_ray: smartcon cleanup on {len(refs)} nodes (tasks were force-cancelled)", file=sys.stderr, flush=True)
    ray.wait(refs, num_returns=len(refs), timeout=CANCEL_GRACE_S)


def _collect(refs, names, started, binary_spec, backlog=None):
    """Waits for every task; returns ({index: result}, {index: reason}, interrupted).

    `backlog`, if given, yields (index, submit) for points not submitted yet: one is
    submitted (`submit()` returns its ref) each time a task ends, so no more tasks are
    pending than were submitted at first. Points never submitted count as cancelled on an
    interrupt.
    """
    pending = list(refs)
    results, failed = {}, {}
    total = len(names)
    interrupted = False
    try:
        # The Ctrl-C stays deferred here too and is acted on between waits: raised inside
        # Ray's C code it may come out as another exception, and no results.jsonl is left.
        while pending:
            if _INTERRUPT["asked"]:
                raise KeyboardInterrupt
            done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
            for ref in done:
                for index, submit in itertools.islice(backlog or (), 1):
                    new = submit()
                    refs[new] = index
                    pending.append(new)
                index = refs[ref]
                try:
                    r = ray.get(ref)
                except ray.exceptions.RayError as e:
                    failed[index] = (_reason(e), "?")
                else:
                    if r["status"] == 0:
                        results[index] = r
                    else:
                        tail = r["stderr"].strip().splitlines()
                        failed[index] = (f"smartcon exited {r['status']}: {tail[-1] if tail else ''}", r["node"])
                _progress(len(results) + len(failed), total, started, names[index])
    except KeyboardInterrupt:
        interrupted = True
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"smartcon_ray: interrupted: cancelling {len(pending)} tasks", file=sys.stderr, flush=True)
        for ref in pending:
            ray.cancel(ref, force=False)
        # Graceful first: each task stops its smartcon (which cleans up) and its scratch.
        _, still = ray.wait(pending, num_returns=len(pending), timeout=CANCEL_GRACE_S)
        for ref in still:
            ray.cancel(ref, force=True)
        if still:
            # A force-cancelled task's worker exits and the raylet SIGKILLs its smartcon:
            # what that smartcon recorded is removed by `smartcon cleanup` on every node.
            _cleanup_everywhere(binary_spec, still)
    # Every point is done or named: also those whose result arrived as the interrupt did,
    # and those never submitted.
    for index in names:
        if index not in results:
            failed.setdefault(index, ("cancelled (interrupted)", "?"))
    return results, failed, interrupted


def _write(out_dir, kind, address, nodes, names, results, failed, extra_records, started, binary):
    path = os.path.join(out_dir, "results.jsonl")
    lines = []
    for index in sorted(results):
        lines += [json.dumps(r, separators=(",", ":")) for r in results[index]["records"]]
    for index in sorted(failed):
        reason, node = failed[index]
        lines.append(json.dumps({"type": "point_failed", "point": names[index], "node": node, "reason": reason}))
    lines += [json.dumps(r) for r in extra_records]
    # Where each point ran and how long its smartcon took (the records themselves are
    # smartcon's, untouched, so that they equal a serial run's).
    # start_ns: when the task began, after the driver connected (the nodes' clocks against
    # the driver's: exact on one host, within the clocks' skew across hosts).
    for index in sorted(results):
        r = results[index]
        lines.append(json.dumps({"type": "ray_point", "point": names[index], "node": r["node"],
                                 "host": r["host"], "wall_ns": r["wall_ns"], "cpu_ns": r["cpu_ns"],
                                 "start_ns": r["start_unix_ns"] - started["unix_ns"]}))
    run = {"type": "ray_run", "kind": kind, "address": address, "nodes": nodes, "points": len(names),
           "done": len(results), "failed": len(failed),
           "nodes_used": len({r["node"] for r in results.values()}),
           "connect_ns": started["connect_ns"],
           "wall_ns": time.monotonic_ns() - started["ns"],
           "first_start_ns": min((r["start_unix_ns"] - started["unix_ns"] for r in results.values()), default=None),
           "task_wall_ns_sum": sum(r["wall_ns"] for r in results.values()),
           "task_cpu_ns_sum": sum(r["cpu_ns"] for r in results.values())}
    lines.append(json.dumps(run))
    with open(path, "x") as f:
        f.write("\n".join(lines) + "\n")
    # The report is smartcon's own renderer, beside results.jsonl.
    subprocess.run([binary, "report", path], check=False)
    return path


def sweep(args):
    with open(args.plan) as f:
        plan = [json.loads(line) for line in f if line.strip()]
    for p in plan:
        if p.get("type") != "plan_point" or "--json" not in p.get("args", []):
            raise SystemExit(f"smartcon_ray: {args.plan}: not a smartcon plan (plan_point records with --json)")
    binary_spec, started = _connect(args)
    nodes = sum(1 for n in ray.nodes() if n["Alive"])
    print(f"smartcon_ray: {len(plan)} points on {nodes} nodes", file=sys.stderr, flush=True)
    names = {p["index"]: p["name"] for p in plan}
    # SPREAD: the first points go one to each node. Under the default (hybrid) policy a
    # point may queue at the busy head while the other node's freed CPU is not yet in the
    # head's view; with only as many points pending as CPUs, a CI run once saw no point of
    # an 8-point sweep start on the second node in 120 s.
    task = run_point.options(max_retries=args.retries, retry_exceptions=False, scheduling_strategy="SPREAD")
    _submitting()
    # No more tasks pending than the cluster has CPUs: each point goes to whichever node
    # frees a CPU first. With all 64 submitted at once the head node's raylet kept a queue
    # of its own, and on two local nodes the other one ran 25 points with 70 ms between
    # them and sat idle for the last 3.6 s of an 18 s sweep (docs/distributed.md).
    window = max(1, int(ray.cluster_resources().get("CPU", nodes)))
    backlog = ((p["index"], functools.partial(task.remote, p, binary_spec)) for p in plan)
    refs = {submit(): index for index, submit in itertools.islice(backlog, window)}
    results, failed, interrupted = _collect(refs, names, time.monotonic(), binary_spec, backlog)
    _write(args.out, "sweep", args.address, nodes, names, results, failed, [], started, args.smartcon)
    return EXIT_INTERRUPTED if interrupted else (EXIT_FAILED if failed else 0)


def fleet(args):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    binary_spec, started = _connect(args)
    nodes = [n for n in ray.nodes() if n["Alive"]]
    names, refs = {}, {}
    _submitting()
    for i, n in enumerate(nodes):
        names[i] = n.get("NodeManagerHostname", "?") + " " + n["NodeID"][:12]
        # The whole node for its evaluate: every CPU Ray knows of there.
        cpus = max(1, int(n["Resources"].get("CPU", 1)))
        pin = NodeAffinitySchedulingStrategy(node_id=n["NodeID"], soft=False)
        task = run_host.options(num_cpus=cpus, scheduling_strategy=pin, max_retries=args.retries,
                                retry_exceptions=False)
        refs[task.remote(n["NodeID"], args.evaluate, binary_spec)] = i
    print(f"smartcon_ray: evaluate on {len(nodes)} nodes", file=sys.stderr, flush=True)
    results, failed, interrupted = _collect(refs, names, time.monotonic(), binary_spec)
    _write(args.out, "fleet", args.address, len(nodes), names, results, failed, [], started, args.smartcon)
    return EXIT_INTERRUPTED if interrupted else (EXIT_FAILED if failed else 0)


def overhead(args):
    """Ray's cost per task: one task at a time (round trip), and many at once (throughput)."""
    binary_spec, _ = _connect(args)
    ray.get(run_nothing.remote(binary_spec))  # workers started, binary found
    local = []
    for _ in range(args.tasks):
        t = time.monotonic_ns()
        subprocess.run([args.smartcon, "--version"], stdout=subprocess.DEVNULL, check=True)
        local.append(time.monotonic_ns() - t)
    round_trips = []
    for _ in range(args.tasks // 4 or 1):
        t = time.monotonic_ns()
        ray.get(run_nothing.remote(binary_spec))
        round_trips.append(time.monotonic_ns() - t)
    t = time.monotonic_ns()
    statuses = ray.get([run_nothing.remote(binary_spec) for _ in range(args.tasks)])
    batch_ns = time.monotonic_ns() - t
    cpus = int(ray.cluster_resources().get("CPU", 1))
    local.sort()
    round_trips.sort()
    record = {"type": "ray_overhead", "tasks": args.tasks, "cpus": cpus,
              "nodes": sum(1 for n in ray.nodes() if n["Alive"]),
              "local_process_ns_p50": local[len(local) // 2],
              "round_trip_ns_p50": round_trips[len(round_trips) // 2],
              "batch_ns": batch_ns,
              # CPU-seconds of the cluster each task took beyond the process it ran.
              "per_task_overhead_ns": batch_ns * cpus / args.tasks - local[len(local) // 2],
              "failed": sum(1 for s, _ in statuses if s != 0)}
    print(json.dumps(record))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m smartcon_ray",
                                     description="Run smartcon's sweeps and fleet surveys on a Ray cluster.")
    sub = parser.add_subparsers(dest="mode", required=True)
    for mode in ("sweep", "fleet", "overhead"):
        p = sub.add_parser(mode)
        p.add_argument("--address", required=True, help="the Ray cluster (host:port or auto)")
        p.add_argument("--smartcon", required=True, help="the smartcon binary (its path on every node unless --ship)")
        p.add_argument("--ship", action="store_true", help="ship the binary in the runtime environment")
        p.add_argument("--retries", type=int, default=2, help="retries of a task whose worker or node was lost")
        if mode != "overhead":
            p.add_argument("--out", required=True, help="the report directory (results.jsonl goes here)")
        if mode == "sweep":
            p.add_argument("--plan", required=True, help="the plan_point records smartcon wrote")
        if mode == "fleet":
            p.add_argument("evaluate", nargs="*", help="evaluate flags for every host (after --)")
        if mode == "overhead":
            p.add_argument("--tasks", type=int, default=64)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        code = {"sweep": sweep, "fleet": fleet, "overhead": overhead}[args.mode](args)
    finally:
        if getattr(args, "_ship_dir", None):
            shutil.rmtree(args._ship_dir, ignore_errors=True)
    if ray.is_initialized():
        if os.environ.get("SMARTCON_RAY_SHUTDOWN") == "1":
            ray.shutdown()
        else:
            # ray.shutdown() (also run at exit) takes seconds: the cluster notices the
            # driver's exit and ends the job's workers itself. Everything this driver wrote
            # is closed by now; flush what is buffered and leave at once.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    return code
