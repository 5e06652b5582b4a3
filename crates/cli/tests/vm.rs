//! `smartcon emulate vm` end to end: a User-Mode Linux guest boots on an emulated device,
//! runs a command whose exit status comes back, and what it fsyncs to ext4 is in the image
//! for a second run (virtual time, then real time). Skips with the reason when linux.uml
//! is not installed (Debian's user-mode-linux; scripts/test.sh installs it as root).
//! Asserts no wall-clock timing: the guest's own clock is checked only against the sleep it
//! was asked to make.

use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long one `smartcon` run of these tests may take (`SMARTCON_VM_TEST_DEADLINE_S`,
/// default 300 s; a run takes seconds) before the watchdog ends it.
fn deadline() -> Duration {
    let s = std::env::var("SMARTCON_VM_TEST_DEADLINE_S").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    Duration::from_secs(s)
}

/// Runs smartcon with `home` as SMARTCON_HOME. A watchdog: a run past [`deadline`] (a
/// hung guest) has the state of every process under it written into the panic message
/// (each thread's state, wait channel, system call, blocked and pending signals, kernel
/// stack and CPU time, twice a second apart, so a spin is told from a sleep), then
/// smartcon is sent SIGTERM (it ends its guest) and whatever is left under it SIGKILL:
/// a CI log then says where a guest hung instead of timing out without a word.
fn smartcon(home: &Path, args: &[&str]) -> Output {
    run_within(home, args, deadline()).unwrap_or_else(|hung| panic!("{}", hung.report))
}

/// A run the watchdog ended: what it found, and the processes it ended.
struct Hung {
    report: String,
    pids: Vec<u32>,
}

/// [`smartcon`] with the watchdog's limit given: Err when the run was ended at it.
fn run_within(home: &Path, args: &[&str], limit: Duration) -> Result<Output, Hung> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_smartcon"))
        .env("SMARTCON_HOME", home)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run smartcon");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for smartcon") {
            break status;
        }
        if start.elapsed() >= limit {
            let tree = descendants(child.id());
            let first = dump(&tree);
            std::thread::sleep(Duration::from_secs(1));
            let second = dump(&tree);
            // SAFETY: a signal to our own child, still unreaped (try_wait said running).
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            // smartcon ends its guest's process group and removes its files (about 7 s
            // for a guest that does not end on SIGTERM).
            let grace = Instant::now();
            while child.try_wait().ok().flatten().is_none() && grace.elapsed() < Duration::from_secs(20) {
                std::thread::sleep(Duration::from_millis(50));
            }
            for pid in &tree {
                // SAFETY: a signal to a process that was under our child a moment ago
                // (UML's, which smartcon did not end); a pid gone since is ESRCH.
                unsafe { libc::kill(*pid as libc::pid_t, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            // What a smartcon killed before its own clean-up left (its record, its
            // working directory): `smartcon cleanup` removes it.
            let _ = Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home).arg("cleanup").output();
            let err = String::from_utf8_lossy(&err.join().unwrap_or_default()).into_owned();
            let report = format!(
                "smartcon {args:?} ran past {limit:?} and was ended; its processes then:\n{first}\n\
                 one second later:\n{second}\nits stderr:\n{err}"
            );
            return Err(Hung { report, pids: tree });
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Ok(Output { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() })
}

/// Every process under `root` (children, their children, ...), from /proc.
fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { continue };
        // The parent is the second field after the command's closing parenthesis.
        let Some(ppid) = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut next = vec![root];
    while let Some(p) = next.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            out.push(c);
            next.push(c);
        }
    }
    out
}

/// Each thread of `pids`: command, state, wait channel, system call (or "running"), the
/// signal lines of its status, its CPU time (schedstat) and its kernel stack.
fn dump(pids: &[u32]) -> String {
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let mut text = String::new();
    for pid in pids {
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
            let d = t.path();
            let stat = read(&d.join("stat"));
            let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).unwrap_or("?");
            let signals: Vec<String> = read(&d.join("status"))
                .lines()
                .filter(|l| ["SigPnd", "ShdPnd", "SigBlk", "TracerPid"].iter().any(|k| l.starts_with(k)))
                .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
                .collect();
            text += &format!(
                "{} {} state {state} wchan {} syscall {} cpu_ns {} {}\n",
                d.display(),
                read(&d.join("comm")).trim(),
                read(&d.join("wchan")).trim(),
                read(&d.join("syscall")).trim(),
                read(&d.join("schedstat")).split_whitespace().next().unwrap_or("?"),
                signals.join(", ")
            );
            for l in read(&d.join("stack")).lines().take(12) {
                text += &format!("    {l}\n");
            }
        }
    }
    text
}

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-vm-test-{name}-")).tempdir().unwrap()
}

fn uml_available() -> bool {
    let found = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .chain([PathBuf::from("/usr/bin")])
        .any(|d| d.join("linux.uml").is_file());
    if !found {
        eprintln!("skipping: linux.uml is not installed (apt-get install user-mode-linux)");
    }
    found && mkfs_available()
}

fn mkfs_available() -> bool {
    let ok = Command::new("mkfs.ext4").arg("-V").output().is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("skipping: mkfs.ext4 is missing (apt-get install e2fsprogs)");
    }
    ok
}

fn json_record(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["type"] == "emulate_vm")
        .unwrap_or_else(|| panic!("no emulate_vm record in {text}\nstderr: {}", String::from_utf8_lossy(&out.stderr)))
}

/// `smartcon emulate vm VM_ARGS... --virtual-time --json -- sh -c SCRIPT` with `home` as
/// SMARTCON_HOME: a shell script in a guest on virtual time. The guest's exit status must
/// be `code`; returns the run's record.
fn guest_script(home: &Path, vm_args: &[&str], script: &str, code: i32) -> Value {
    let args = [&["emulate", "vm"][..], vm_args, &["--virtual-time", "--json", "--", "sh", "-c", script]].concat();
    let out = smartcon(home, &args);
    assert_eq!(out.status.code(), Some(code), "{args:?}: stderr: {}", String::from_utf8_lossy(&out.stderr));
    json_record(&out)
}

/// No record and no working directory of `home`'s runs is left in its `vms` folder.
fn assert_nothing_left(home: &Path) {
    let left: Vec<_> =
        std::fs::read_dir(home.join("vms")).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "records left: {left:?}");
}

#[test]
fn a_guest_returns_its_status_and_fsynced_data_survives_into_a_second_run() {
    if !uml_available() {
        return;
    }
    let home_guard = scratch("home");
    let home = home_guard.path().to_path_buf();
    let image = home.join("disk.img");
    let image_arg = image.to_str().unwrap();
    // Virtual time: the guest writes and fsyncs a file on ext4, sleeps 3 s of its own
    // time, and exits 5.
    let script = "printf 'kept across runs\\n' > kept && sync kept && sleep 3; exit 5";
    let r = guest_script(&home, &["emu:nvme", "--size", "64m", "--image", image_arg], script, 5);
    assert_eq!(r["exit_code"], 5);
    assert_eq!(r["virtual_time"], true);
    // The guest's clock saw its sleep (virtual time still counts it).
    assert!(r["guest_ns"].as_u64().unwrap() >= 3_000_000_000, "{r}");
    // The device served the guest's requests (mount, the file, the journal).
    assert!(r["device"]["writes"].as_u64().unwrap() > 0, "{r}");
    assert!(image.is_file(), "--image is kept");
    // UML ran in a session of its own whose autogroup (what weighs against the host's
    // other sessions) got nice -20, as root where the kernel has autogroups; the caller's
    // own autogroup is left as it was.
    let own_autogroup = std::fs::read_to_string("/proc/self/autogroup").ok();
    let autogroups_on =
        std::fs::read_to_string("/proc/sys/kernel/sched_autogroup_enabled").is_ok_and(|t| t.trim() == "1");
    // SAFETY: geteuid has no preconditions.
    if own_autogroup.is_some() && autogroups_on && unsafe { libc::geteuid() } == 0 {
        assert_eq!(r["host_autogroup_nice"], -20, "{r}");
        assert_eq!(std::fs::read_to_string("/proc/self/autogroup").ok(), own_autogroup);
    } else {
        eprintln!("not checked: the guest's autogroup nice (needs root and the kernel's autogroups)");
    }

    // Real time, the same image: the file is there (it was mounted, not formatted again).
    let out = smartcon(&home, &["emulate", "vm", "emu:nvme", "--image", image_arg, "--json", "--", "cat", "kept"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("kept across runs\n"), "{out:?}");
    // The real-time reference runs in the host's round-robin class where allowed (root);
    // the virtual-time run above does not.
    let real = json_record(&out);
    assert_eq!(r["host_round_robin"], false, "{r}");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        // Whether the class is open here at all, asked of a child (chrt, util-linux).
        let rt_allowed = Command::new("chrt").args(["-r", "1", "true"]).status().is_ok_and(|s| s.success());
        if rt_allowed {
            assert_eq!(real["host_round_robin"], true, "{real}");
            // ... on one host CPU, as the virtual-time run: the same one, the last allowed.
            assert!(real["host_cpu"].is_u64(), "{real}");
            assert_eq!(real["host_cpu"], r["host_cpu"], "{r}");
        } else {
            eprintln!("not checked: the reference's real-time class (chrt -r 1 is refused here)");
        }
    }

    assert_nothing_left(&home);
}

#[test]
fn bad_vm_flags_are_one_line_and_exit_2() {
    let home_guard = scratch("flags");
    let home = home_guard.path().to_path_buf();
    for args in [
        &["emulate", "vm", "emu:hdd", "--cpu-speed", "0", "--virtual-time", "--", "true"][..],
        &["emulate", "vm", "emu:hdd", "--cpu-speed", "2", "--", "true"][..],
        &["emulate", "vm", "emu:nosuch", "--", "true"][..],
        &["emulate", "vm", "emu:hdd,size=1g", "--size", "2g", "--", "true"][..],
    ] {
        let out = smartcon(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim().lines().count(), 1, "{args:?}");
    }
}

#[test]
fn every_guest_request_is_in_the_lateness_histogram_once_and_page_pieces_join() {
    if !uml_available() {
        return;
    }
    let home_guard = scratch("late");
    let home = home_guard.path().to_path_buf();
    // 1 MiB direct write and read back on the raw device: UML's ubd thread issues each as
    // page-sized calls, which join their request on the model.
    let script = "dd if=/dev/zero of=/dev/ubda bs=1M count=1 oflag=direct status=none && \
                  dd if=/dev/ubda of=/dev/null bs=1M count=1 iflag=direct status=none";
    let r = guest_script(&home, &["emu:hdd", "--size", "64m", "--fs", "none"], script, 0);
    let d = &r["device"];
    let requests = d["reads"].as_u64().unwrap() + d["writes"].as_u64().unwrap();
    let joined = d["pieces_joined"].as_u64().unwrap();
    let counts: u64 = d["lateness"]["counts"].as_array().unwrap().iter().map(|c| c.as_u64().unwrap()).sum();
    // Each guest request is counted once, when it returns (its last piece), not each of
    // its page pieces: the pieces on the model less those that continued another.
    assert_eq!(counts, requests - joined, "each guest request is counted once: {d}");
    assert_eq!(
        d["lateness"]["edges_ppm"].as_array().unwrap().len() + 1,
        d["lateness"]["counts"].as_array().unwrap().len()
    );
    // 2 x 256 pages; all but the first of each request continue the one before.
    assert!(joined >= 2 * 200, "{d}");
    // The pieces already due when issued are some of the joined ones.
    let due = d["pieces_due_before_issue"].as_u64().expect("the field is recorded");
    assert!(due <= joined, "{d}");
    let share = r["within_2pct"].as_f64().expect("a share when requests were served");
    assert!((0.0..=1.0).contains(&share), "{r}");
    assert_nothing_left(&home);
}

#[test]
fn a_vm_sweep_gives_the_tables_columns_per_scheduler() {
    if !uml_available() {
        return;
    }
    let home_guard = scratch("sweep");
    let home = home_guard.path().to_path_buf();
    let out = smartcon(
        &home,
        &[
            "emulate",
            "sweep",
            "--vm",
            "--speedups",
            "1,10",
            "--tree-size",
            "256k",
            "--schedulers",
            "none",
            "--no-real-time",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let r: Value = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|r| r["type"] == "emulate_vm_sweep")
        .unwrap_or_else(|| panic!("no emulate_vm_sweep record in {text}"));
    let points = r["points"].as_array().unwrap();
    assert_eq!(points.len(), 2, "{r}");
    let (one, ten) = (&points[0], &points[1]);
    assert_eq!((one["speedup"].as_f64(), ten["speedup"].as_f64()), (Some(1.0), Some(10.0)));
    assert_eq!(one["speedup_over_1x"].as_f64(), Some(1.0));
    // The ideal is the 1 x time over the speed-up; the speed-up over 1 x is the ratio.
    let base = one["predicted_ns"].as_f64().unwrap();
    assert!((ten["ideal_ns"].as_f64().unwrap() - base / 10.0).abs() <= 1.0, "{r}");
    let ratio = base / ten["predicted_ns"].as_f64().unwrap();
    assert!((ten["speedup_over_1x"].as_f64().unwrap() - ratio).abs() < 1e-9, "{r}");
    assert!(points.iter().all(|p| p["writes"].as_u64().unwrap() > 0 && p["scheduler"] == "none"), "{r}");
    // One progress line per point on stderr.
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().filter(|l| l.contains("/2] none")).count(), 2, "{err}");
    assert_nothing_left(&home);
}

#[test]
fn bad_sweep_vm_flags_are_one_line_and_exit_2() {
    let home_guard = scratch("sweepflags");
    let home = home_guard.path().to_path_buf();
    for args in [
        &["emulate", "sweep", "--full"][..],
        &["emulate", "sweep", "--vm", "--fio", "--plot", "x.svg"][..],
        &["emulate", "sweep", "--vm", "--device", "emu:hdd,speedup=2"][..],
        &["emulate", "sweep", "--vm", "--schedulers", "cfq"][..],
    ] {
        let out = smartcon(&home, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!String::from_utf8_lossy(&out.stderr).trim().is_empty(), "{args:?}");
    }
}

/// The watchdog itself: a guest that outlives its limit (a real-time `sleep 100`, ended at
/// 6 s) is reported with its UML processes' states and kernel stacks, and none of them is
/// left running.
#[test]
fn the_watchdog_reports_where_a_guest_was_and_ends_it() {
    if !uml_available() {
        return;
    }
    let home_guard = scratch("watchdog");
    let home = home_guard.path().to_path_buf();
    let args = ["emulate", "vm", "emu:nvme", "--size", "64m", "--fs", "none", "--", "sleep", "100"];
    let Err(hung) = run_within(&home, &args, Duration::from_secs(6)) else {
        panic!("a 100 s sleep ended within 6 s");
    };
    assert!(hung.report.contains("linux.uml") && hung.report.contains("wchan"), "{}", hung.report);
    assert!(hung.report.contains("one second later"), "{}", hung.report);
    assert!(!hung.pids.is_empty(), "{}", hung.report);
    // Ended: no process of the guest runs any more (gone, a zombie not reaped yet by
    // whoever inherited it, or the pid reused by another program).
    let running = |pid: &u32| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().next()).unwrap_or("");
        stat.contains("(linux.uml)") && !matches!(state, "Z" | "X" | "")
    };
    let start = Instant::now();
    while hung.pids.iter().any(running) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<_> = hung.pids.iter().filter(|p| running(p)).collect();
    assert!(left.is_empty(), "still running: {left:?}: {}", hung.report);
    assert_nothing_left(&home);
}
