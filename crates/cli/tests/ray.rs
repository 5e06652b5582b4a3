//! Studies beyond one machine (issue 24) on two Ray nodes on this host: `ray start --head
//! --num-cpus 1` and a second `ray start --address ... --num-cpus 1`, both `--block` in
//! their own process groups, stopped by their pids at the end (also when a check fails).
//!
//! The checks, in one test so the two nodes start once: a deterministic replay sweep
//! (virtual time, presets x channels) gives the serial run's records; `fleet --quick` gives
//! one report with a table per node (its host costs, Pareto share, local-disk gain and
//! thresholds), and a Ctrl-C in the middle of it leaves nothing on either node (no
//! smartcon, tmp file, zram device, record or scratch directory); Ctrl-C cancels a sweep
//! too; killing the second node's raylet mid-sweep still completes the sweep or names the
//! lost points. Each node has its own SMARTCON_HOME, as two hosts would. Skips (saying
//! why) when Ray is not installed: scripts/test.sh installs it into .venv-ray (or set
//! SMARTCON_RAY_PYTHON). No timing is asserted.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use smartcon_util::error::{Error, ErrorKind};

const BIN: &str = env!("CARGO_BIN_EXE_smartcon");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// The Python with Ray, or why there is none (a setup error: the test skips).
fn python() -> Result<PathBuf, Error> {
    let python = std::env::var_os("SMARTCON_RAY_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(".venv-ray/bin/python"));
    let ok = Command::new(&python)
        .args(["-c", "import ray"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(python)
    } else {
        Err(Error::new(
            ErrorKind::Setup,
            format!("{} cannot import ray (scripts/test.sh installs it into .venv-ray)", python.display()),
        ))
    }
}

/// The parent pid of every process, from /proc.
fn parents() -> Vec<(u32, u32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The fields after the command name, which is in parentheses and may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else { continue };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            out.push((pid, ppid));
        }
    }
    out
}

/// Every process below `root`, with its command name.
fn descendants(root: u32) -> Vec<(u32, String)> {
    let all = parents();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(all.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found[1..]
        .iter()
        .map(|p| (*p, std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default().trim().to_string()))
        .collect()
}

/// Two Ray nodes of one cluster on this host, ended by their pids when dropped.
struct Cluster {
    python: PathBuf,
    dir: PathBuf,
    home: PathBuf,
    address: String,
    nodes: Vec<Child>,
}

impl Cluster {
    /// `ray` for node `node` (0: the head), with that node's own SMARTCON_HOME, as two
    /// hosts would have: its stored host cost, its devices' records.
    fn ray(&self, node: usize) -> Command {
        let ray = self.python.parent().map_or(PathBuf::from("ray"), |d| d.join("ray"));
        let mut c = Command::new(ray);
        // The tasks' scratch directories go to TMPDIR: under the cluster's, to be checked.
        c.env("RAY_USAGE_STATS_ENABLED", "0")
            .env("SMARTCON_HOME", self.node_home(node))
            .env("TMPDIR", self.dir.join("tmp"));
        c.process_group(0);
        c.stdout(Stdio::null()).stderr(Stdio::null());
        c
    }

    /// Starts the two nodes; a start that dies on the way (under heavy load Ray's raylet
    /// has given up waiting for its Python agents and exited) is stopped and tried again,
    /// three times at most: the test is about smartcon on Ray, not Ray's start-up.
    fn start(python: PathBuf) -> Cluster {
        let mut why = String::new();
        for attempt in 1..=3 {
            match Cluster::try_start(python.clone()) {
                Ok(c) => return c,
                Err(e) => {
                    eprintln!("ray test: the cluster's start {attempt} of 3 failed: {e}");
                    why = e.to_string();
                }
            }
        }
        panic!("the Ray cluster did not start in 3 tries: {why}");
    }

    fn try_start(python: PathBuf) -> Result<Cluster, Error> {
        let id = std::process::id();
        // A short directory: Ray's sockets live under it (a socket path has ~107 bytes).
        let dir = PathBuf::from(format!("/tmp/scray-{id}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let home = dir.join("home");
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        // Ports above Ray's default worker range (10002-19999), apart for parallel runs.
        let port = 30_000 + (id % 10_000) * 3;
        let mut c = Cluster { python, dir, home, address: format!("127.0.0.1:{port}"), nodes: Vec::new() };
        let head = c
            .ray(0)
            .args(["start", "--head", "--block", "--num-cpus", "1", "--include-dashboard=false"])
            .args(["--disable-usage-stats", "--port", &port.to_string()])
            .args(["--ray-client-server-port", &(port + 1).to_string()])
            .args(["--dashboard-agent-listen-port", &(port + 2).to_string()])
            .arg("--temp-dir")
            .arg(c.dir.join("t"))
            .spawn()
            .expect("ray start --head");
        c.nodes.push(head);
        c.wait_nodes(1)?;
        let worker = c
            .ray(1)
            .args(["start", "--block", "--num-cpus", "1", "--disable-usage-stats", "--address", &c.address])
            .args(["--dashboard-agent-listen-port", &(port + 3).to_string()])
            .spawn()
            .expect("ray start --address");
        c.nodes.push(worker);
        c.wait_nodes(2)?;
        Ok(c)
    }

    /// The alive nodes' ids, as the cluster reports them; none if the asking Python has
    /// not answered in 60 s (ray.init retries for minutes where no cluster answers).
    fn node_ids(&self) -> Vec<String> {
        let script = format!(
            "import ray; ray.init(address='{}', logging_level='ERROR'); print('\\n'.join(n['NodeID'] for n in ray.nodes() if n['Alive']))",
            self.address
        );
        let Ok(mut child) = Command::new(&self.python)
            .args(["-c", &script])
            .env("RAY_USAGE_STATS_ENABLED", "0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
        else {
            return Vec::new();
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let out = child.wait_with_output();
        out.map(|o| String::from_utf8_lossy(&o.stdout).lines().map(String::from).collect()).unwrap_or_default()
    }

    /// Waits (180 s at most) for `n` alive nodes while every `ray start --block` still runs.
    fn wait_nodes(&mut self, n: usize) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            for node in &mut self.nodes {
                if let Some(status) = node.try_wait().unwrap() {
                    return Err(Error::new(ErrorKind::Setup, format!("a `ray start --block` exited early ({status})")));
                }
            }
            if self.node_ids().len() >= n {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::new(
                    ErrorKind::Setup,
                    format!("the Ray cluster at {} did not reach {n} nodes in 180 s", self.address),
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    fn node_home(&self, node: usize) -> PathBuf {
        self.dir.join(format!("home-{node}"))
    }

    /// The records of what the node's smartcon runs created (devices, claimed outputs):
    /// none once they have removed it.
    fn node_records(&self, node: usize) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for sub in ["devices", "outputs"] {
            let Ok(entries) = std::fs::read_dir(self.node_home(node).join(sub)) else { continue };
            out.extend(entries.flatten().map(|e| e.path()));
        }
        out
    }

    fn smartcon(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("SMARTCON_HOME", &self.home)
            .env("SMARTCON_RAY_PYTHON", &self.python)
            .env("PYTHONPATH", repo().join("python"))
            .env("RAY_USAGE_STATS_ENABLED", "0");
        c
    }

    /// smartcon processes anywhere below the nodes (the tasks' runs).
    fn smartcons(&self) -> Vec<u32> {
        let mut out = Vec::new();
        for node in &self.nodes {
            out.extend(descendants(node.id()).into_iter().filter(|(_, c)| c == "smartcon").map(|(p, _)| p));
        }
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Worker node first, then the head: SIGTERM makes `ray start --block` stop its own
        // processes; whatever is left of its process group after 30 s is killed.
        for node in self.nodes.iter_mut().rev() {
            // SAFETY: kill(2) on our own child, not yet reaped (try_wait below reaps it).
            unsafe { libc::kill(node.id() as i32, libc::SIGTERM) };
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for node in self.nodes.iter_mut().rev() {
            while node.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(200));
            }
            let left = descendants(node.id());
            // SAFETY: the process group our child leads (process_group(0)); a negative pid
            // signals that group only.
            unsafe { libc::kill(-(node.id() as i32), libc::SIGKILL) };
            for (pid, _) in left {
                // SAFETY: kill(2) on a pid that was below our node (reparented after it ended).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            let _ = node.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn records(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn of_type<'a>(r: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    r.iter().filter(|v| v["type"] == t).collect()
}

/// A replay record without the fields that measure this host's speed (wall and CPU time):
/// what remains is the virtual-time result, which must not depend on where it ran.
fn virtual_part(v: &serde_json::Value) -> serde_json::Value {
    let mut v = v.clone();
    for k in ["wall_ns", "speedup", "requests_per_s_wall", "requests_per_s_cpu"] {
        v.as_object_mut().unwrap().remove(k).unwrap_or_else(|| panic!("replay_result has {k}"));
    }
    v
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{:?}: {err}", out.status);
    err
}

const SWEEP: [&str; 12] = [
    "emulate",
    "replay",
    "--device",
    "emu:nvme",
    "--device",
    "emu:sata-ssd",
    "--channels",
    "1,2,4",
    "--qd",
    "8",
    "--ios",
    "20000",
];

#[test]
fn sweeps_and_fleets_on_two_ray_nodes() {
    let python = match python() {
        Ok(p) => p,
        Err(why) => return eprintln!("skipped: {why}"),
    };
    let started = Instant::now();
    let phase = |what: &str| eprintln!("ray test: {what} after {:.0} s", started.elapsed().as_secs_f64());
    let cluster = Cluster::start(python);
    phase("two nodes up");
    let dir = cluster.dir.clone();

    // 1. The same sweep serially and on Ray: the same records, in plan order.
    let serial = dir.join("serial");
    ok(&cluster.smartcon(&SWEEP).args(["--out"]).arg(&serial).output().unwrap());
    let on_ray = dir.join("ray");
    let err = ok(&cluster.smartcon(&SWEEP).args(["--ray", &cluster.address, "--out"]).arg(&on_ray).output().unwrap());
    assert!(err.contains("points 6/6 done"), "progress counts points: {err}");
    let (s, r) = (records(&serial.join("results.jsonl")), records(&on_ray.join("results.jsonl")));
    let (s, r) = (of_type(&s, "replay_result"), of_type(&r, "replay_result"));
    assert_eq!(s.len(), 6);
    let devices: Vec<&str> = s.iter().map(|v| v["device"].as_str().unwrap()).collect();
    assert_eq!(devices[..3], ["emu:nvme,channels=1", "emu:nvme,channels=2", "emu:nvme,channels=4"]);
    assert_eq!(
        s.iter().map(|v| virtual_part(v)).collect::<Vec<_>>(),
        r.iter().map(|v| virtual_part(v)).collect::<Vec<_>>()
    );
    // Where the time went: every point's smartcon CPU time and start, summed in ray_run.
    let all = records(&on_ray.join("results.jsonl"));
    let (points, run) = (of_type(&all, "ray_point"), of_type(&all, "ray_run"));
    assert_eq!((points.len(), run.len()), (6, 1));
    let cpu: u64 = points.iter().map(|p| p["cpu_ns"].as_u64().expect("ray_point cpu_ns")).sum();
    assert!(cpu > 0 && run[0]["task_cpu_ns_sum"].as_u64() == Some(cpu), "{:?}", run[0]);
    let first = points.iter().map(|p| p["start_ns"].as_i64().expect("ray_point start_ns")).min();
    assert_eq!(run[0]["first_start_ns"].as_i64(), first, "{:?}", run[0]);
    for d in [&serial, &on_ray] {
        let md = std::fs::read_to_string(d.join("summary.md")).unwrap();
        assert_eq!(md.matches("| emu:").count(), 6, "{md}");
        assert!(d.join("report.html").exists() && d.join("replay-channels.svg").exists());
    }

    phase("the sweeps compared");
    // 1b. emulate sweep's runs (the program at each factor) as tasks, put together by the
    //     report as the serial sweep puts them: a row per factor asked for. Shipped.
    // Beside the binary, or in deps/ where a workspace `cargo test` leaves it (smartcon
    // looks in both).
    let bin_dir = Path::new(BIN).parent().unwrap();
    if bin_dir.join("libsmartcon.so").exists() || bin_dir.join("deps/libsmartcon.so").exists() {
        let sweep = dir.join("sweep");
        let args = ["emulate", "sweep", "--device", "emu:sdcard", "--speedups", "1,10", "--tree-size", "1m"];
        // The binary and the library travel in the runtime environment here (by path elsewhere).
        let ray = ["--ray", &cluster.address, "--ray-ship", "--out"];
        ok(&cluster.smartcon(&args).args(ray).arg(&sweep).output().unwrap());
        let runs = records(&sweep.join("results.jsonl"));
        assert_eq!(of_type(&runs, "emulate_sweep_point").len(), 3, "x1, x10 and x1 in real time");
        let md = std::fs::read_to_string(sweep.join("summary.md")).unwrap();
        assert!(md.contains("| 1 | ") && md.contains("| 10 | ") && md.contains("1 x in real time"), "{md}");
    } else {
        eprintln!(
            "emulate sweep on Ray skipped: no libsmartcon.so beside {BIN} or in its deps/ (cargo build --release)"
        );
    }

    phase("emulate sweep on Ray");
    // 2. A fleet survey, `fleet --quick` as a user runs it: one task pinned to each node runs
    //    evaluate's 2-minute matrix on the node's own targets (emu:optane, a tmp file on
    //    /var/tmp, a zram device when root), one report with a table per host.
    let fleet = dir.join("fleet");
    let out = cluster.smartcon(&["fleet", "--ray", &cluster.address, "--quick", "--out"]).arg(&fleet).output().unwrap();
    let err = ok(&out);
    assert!(err.contains("points 2/2 done"), "progress counts hosts: {err}");
    let all = records(&fleet.join("results.jsonl"));
    let hosts = of_type(&all, "fleet_host");
    let mut ids: Vec<String> = hosts.iter().map(|h| h["node_id"].as_str().unwrap().to_string()).collect();
    let mut nodes = cluster.node_ids();
    ids.sort();
    nodes.sort();
    assert_eq!(ids, nodes, "one fleet_host per node, named by its node id");
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap().trim().to_string();
    let positive = |h: &serde_json::Value, k: &str| h[k].as_f64().is_some_and(|x| x > 0.0);
    let mut zram = None;
    for h in &hosts {
        assert_eq!(h["host"].as_str(), Some(hostname.as_str()), "named by the host's name: {h}");
        // The host's blocking and wake-up cost, its paired Pareto share, its local disk's
        // 4 KiB gains (the tmp file on /var/tmp), the thresholds of every target.
        for k in ["block_cpu_ns", "wakeup_overshoot_ns_p50", "local_disk_4k_spin_gain", "local_disk_4k_smart_gain"] {
            assert!(positive(h, k), "{k} in {h}");
        }
        let (judged, front) = (h["pareto_judged"].as_u64().unwrap(), h["pareto_front"].as_u64().unwrap());
        assert!(judged > 0 && front <= judged && h["pareto_share"].as_f64().is_some(), "{h}");
        let targets: Vec<&str> =
            h["thresholds"].as_array().unwrap().iter().map(|t| t["target"].as_str().unwrap()).collect();
        assert!(targets.contains(&"emu:optane") && targets.iter().any(|t| t.starts_with("tmp:")), "{h}");
        // The zram device when it could be created (root), on both nodes or on neither.
        let has_zram = targets.iter().any(|t| t.starts_with("/dev/zram"));
        assert!(zram.is_none_or(|z| z == has_zram) && targets.len() == 2 + usize::from(has_zram), "{h}");
        zram = Some(has_zram);
        assert!(
            positive(h, "cells") && h["thresholds"].as_array().unwrap().iter().all(|t| t["class"].is_string()),
            "{h}"
        );
    }
    let md = std::fs::read_to_string(fleet.join("summary.md")).unwrap();
    assert_eq!(md.matches("\n### ").count(), 2, "{md}");
    for id in &ids {
        assert!(md.contains(&format!("### {hostname} (Ray node {id})")), "a table per host: {md}");
    }
    for row in [
        "| blocking wait: CPU of the waiting thread |",
        "| wake-up: a timed sleep wakes late by",
        "| smart on the Pareto front (paired",
        "| local disk, 4 KiB random reads: spin over block |",
    ] {
        assert_eq!(md.matches(row).count(), 2, "{row} in each host's table: {md}");
    }
    let scratch: Vec<_> = std::fs::read_dir(dir.join("tmp")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(scratch.is_empty(), "the tasks removed their scratch directories: {scratch:?}");
    for node in 0..2 {
        assert!(cluster.node_records(node).is_empty(), "node {node} left {:?}", cluster.node_records(node));
    }
    let zram = zram == Some(true);
    eprintln!("fleet --quick: zram {}", if zram { "probed on both nodes" } else { "not available (not root?)" });

    phase("the fleet");
    // 2b. Ctrl-C while both hosts' evaluate runs, once each has created its tmp file (and its
    //     zram device, when the survey above had one): exit 130, and nothing is left on
    //     either node: no smartcon, no tmp file, no zram device, no record, no scratch.
    let stopped = dir.join("fleet-stopped");
    let log = dir.join("fleet-stopped.log");
    let mut run = cluster
        .smartcon(&["fleet", "--ray", &cluster.address, "--quick", "--out"])
        .arg(&stopped)
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let tmp_files = |pid: u32| -> Vec<PathBuf> {
        let own = [format!("smartcon-{pid}-"), format!(".smartcon-{pid}-")];
        let Ok(entries) = std::fs::read_dir("/var/tmp") else { return Vec::new() };
        entries
            .flatten()
            .filter(|e| own.iter().any(|o| e.file_name().to_string_lossy().starts_with(o.as_str())))
            .map(|e| e.path())
            .collect()
    };
    let zram_records =
        |node: usize| cluster.node_records(node).iter().filter(|p| p.to_string_lossy().ends_with("-z0.rec")).count();
    let deadline = Instant::now() + Duration::from_secs(300);
    let evaluates = loop {
        let pids = cluster.smartcons();
        let created = pids.len() == 2
            && pids.iter().all(|p| !tmp_files(*p).is_empty())
            && (!zram || (0..2).all(|n| zram_records(n) == 1));
        if created {
            break pids;
        }
        assert!(Instant::now() < deadline, "the two evaluates did not create their targets in 300 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let zram_devices: Vec<String> = (0..2)
        .flat_map(|n| cluster.node_records(n))
        .filter(|p| p.to_string_lossy().ends_with("-z0.rec"))
        .filter_map(|p| {
            std::fs::read_to_string(p).ok()?.lines().skip_while(|l| *l != "zram").nth(1).map(|n| format!("zram{n}"))
        })
        .collect();
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    let status = run.wait().unwrap();
    let err = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted: cancelling 2 tasks"), "{err}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.smartcons().is_empty() {
        assert!(Instant::now() < deadline, "smartcon still runs on a node after the cancel: {:?}", cluster.smartcons());
        std::thread::sleep(Duration::from_millis(200));
    }
    for pid in &evaluates {
        assert!(tmp_files(*pid).is_empty(), "evaluate {pid} left {:?}", tmp_files(*pid));
    }
    assert_eq!(zram_devices.len(), if zram { 2 } else { 0 }, "{zram_devices:?}");
    for z in &zram_devices {
        assert!(!Path::new("/sys/block").join(z).exists(), "/dev/{z} is still there: {err}");
    }
    for node in 0..2 {
        assert!(cluster.node_records(node).is_empty(), "node {node} left {:?}", cluster.node_records(node));
    }
    let scratch: Vec<_> = std::fs::read_dir(dir.join("tmp")).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(scratch.is_empty(), "no scratch directory left: {scratch:?}");
    let c = records(&stopped.join("results.jsonl"));
    assert_eq!(of_type(&c, "point_failed").len(), 2, "both hosts named as cancelled");
    eprintln!(
        "fleet --quick cancelled: {}",
        if err.contains("force-cancelled") {
            "force-cancelled, then smartcon cleanup"
        } else {
            "each task stopped its evaluate"
        }
    );

    phase("Ctrl-C of the fleet");
    // 3. Ctrl-C: the sweep is cancelled, exits 130 and leaves no smartcon on any node.
    let long = ["--channels", "1,2,4,8", "--ios", "2000000"];
    let mut args: Vec<&str> = SWEEP[..6].to_vec();
    args.extend(["--qd", "8"]);
    args.extend(long);
    let cancelled = dir.join("cancelled");
    let mut run = cluster
        .smartcon(&args)
        .args(["--ray", &cluster.address, "--out"])
        .arg(&cancelled)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while cluster.smartcons().is_empty() {
        assert!(Instant::now() < deadline, "no task started in 120 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    // SAFETY: kill(2) on our own child, not yet reaped.
    unsafe { libc::kill(run.id() as i32, libc::SIGINT) };
    assert_eq!(run.wait().unwrap().code(), Some(130));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !cluster.smartcons().is_empty() {
        assert!(Instant::now() < deadline, "smartcon still runs on a node after the cancel: {:?}", cluster.smartcons());
        std::thread::sleep(Duration::from_millis(200));
    }
    let c = records(&cancelled.join("results.jsonl"));
    assert_eq!(of_type(&c, "replay_result").len() + of_type(&c, "point_failed").len(), 8);

    phase("Ctrl-C of a sweep");
    // 4. The second node's raylet is killed while it runs a point: Ray retries that point
    //    on the head, or the report names it.
    let lost = dir.join("lost");
    let lost_log = dir.join("lost.log");
    // Points long enough (about 2 s each at this host's 20-30 M virtual I/Os a second) for
    // the watch below, which looks every 100 ms, to see one running on the second node: at
    // 2 M I/Os a point took about 0.1 s, and a CI run saw the whole sweep end before the
    // watch saw any.
    let mut args: Vec<&str> = SWEEP[..6].to_vec();
    args.extend(["--qd", "8", "--channels", "1,2,4,8", "--ios", "40000000"]);
    let mut run = cluster
        .smartcon(&args)
        .args(["--ray", &cluster.address, "--out"])
        .arg(&lost)
        .stderr(std::fs::File::create(&lost_log).unwrap())
        .spawn()
        .unwrap();
    let worker = cluster.nodes[1].id();
    let deadline = Instant::now() + Duration::from_secs(120);
    while !descendants(worker).iter().any(|(_, c)| c == "smartcon") {
        if let Some(status) = run.try_wait().unwrap() {
            // The sweep ended without a point on the second node: say where its points ran.
            let placed: Vec<String> = records(&lost.join("results.jsonl"))
                .iter()
                .filter(|r| r["type"] == "ray_point")
                .map(|r| format!("{} on {}", r["point"], r["node"]))
                .collect();
            panic!(
                "the sweep ended ({status}) before a point ran on the second node: {placed:?}\n{}",
                std::fs::read_to_string(&lost_log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no point started on the second node in 120 s\n{}",
            std::fs::read_to_string(&lost_log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let raylet = descendants(worker).into_iter().find(|(_, c)| c == "raylet").expect("the second node's raylet").0;
    // SAFETY: kill(2) on the raylet our `ray start` child started (found below it just now).
    unsafe { libc::kill(raylet as i32, libc::SIGKILL) };
    let status = run.wait().unwrap();
    let l = records(&lost.join("results.jsonl"));
    let (done, failed) = (of_type(&l, "replay_result"), of_type(&l, "point_failed"));
    assert_eq!(done.len() + failed.len(), 8, "every point done or named");
    assert_eq!(status.success(), failed.is_empty(), "{status:?}");
    let md = std::fs::read_to_string(lost.join("summary.md")).unwrap();
    for f in &failed {
        assert!(md.contains(f["point"].as_str().unwrap()), "the report names {f}");
    }
    eprintln!("raylet killed: {} points done, {} named as lost", done.len(), failed.len());
    phase("the killed raylet");
}
