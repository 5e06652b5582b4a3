//! Regression tests for the CLI defects of issue 16 (items 3-6 and the "also" list): each
//! test runs the real binary on a scratch directory and pins one defect. Signal and device
//! tests need root (CI has it) and say why when they skip. No timing is asserted: waits are
//! bounded polls that only decide when to give up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-defects-{name}-")).tempdir().unwrap()
}

fn cmd(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smartcon"));
    c.env("SMARTCON_HOME", home).args(args);
    ends_with_the_test(&mut c);
    c
}

/// The child gets SIGTERM when the test's thread ends, a panic or a killed test run
/// included, so a `trace synth` of a billion accesses stops and removes its partial file
/// instead of writing on for minutes (one once left 14 GB in /tmp), and an `evaluate`
/// removes its devices.
fn ends_with_the_test(c: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs in the child between fork and exec and calls only prctl,
    // getppid and raise, which are async-signal-safe and touch no memory of the parent's.
    unsafe {
        c.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The test may have ended between fork and prctl: then no signal would come.
            if libc::getppid() != parent {
                libc::raise(libc::SIGTERM);
            }
            Ok(())
        });
    }
}

fn smartcon(home: &Path, args: &[&str]) -> Output {
    cmd(home, args).output().expect("run smartcon")
}

/// A usage error: exit 2 and exactly one line on stderr containing `what`.
fn assert_one_line_exit_2(out: &Output, what: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(what), "{err:?} names {what:?}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Item 6: a cache that cannot be allocated was a SIGABRT with a backtrace.
#[test]
fn huge_cache_sizes_are_one_line_and_exit_2() {
    let dir_guard = scratch("cachesize");
    let dir = dir_guard.path().to_path_buf();
    let trace = dir.join("t.trace");
    let t = trace.to_str().unwrap();
    let out =
        smartcon(&dir, &["trace", "synth", "--kind", "loop", "--working-set", "64k", "--accesses", "1000", "--out", t]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_one_line_exit_2(&smartcon(&dir, &["cachesim", "--trace", t, "--ll", "1t,16"]), "--ll");
    assert_one_line_exit_2(&smartcon(&dir, &["cachesim", "--trace", t, "--l2", "64g,16"]), "maximum");
    assert_one_line_exit_2(&smartcon(&dir, &["ets", "--llc", "1t", "--quick"]), "--llc");
}

/// "Also": `ets --threads 0` was accepted.
#[test]
fn ets_refuses_zero_threads() {
    let dir_guard = scratch("threads");
    let dir = dir_guard.path().to_path_buf();
    let out = dir.join("out");
    assert_one_line_exit_2(
        &smartcon(&dir, &["ets", "--threads", "0", "--quick", "--out", out.to_str().unwrap()]),
        "--threads",
    );
    assert!(!out.exists(), "nothing written");
}

/// Sends `signal` to a child and waits (bounded) for it to end; a child that outlives the
/// bound is killed and the test fails: it did not honour the signal.
fn signal_and_wait(child: &mut std::process::Child, signal: libc::c_int) -> std::process::ExitStatus {
    // SAFETY: kill with a pid we spawned and still own (not yet reaped).
    unsafe { libc::kill(child.id() as libc::pid_t, signal) };
    for _ in 0..600 {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    panic!("smartcon ignored signal {signal} for a minute");
}

/// Waits (bounded) until `path` exists and holds at least `bytes`.
fn wait_for_file(path: &Path, bytes: u64) {
    for _ in 0..600 {
        if std::fs::metadata(path).map(|m| m.len() >= bytes).unwrap_or(false) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    panic!("{} never reached {bytes} bytes", path.display());
}

/// Item 3: `trace synth` wrote 84 GB, ignored SIGTERM and SIGINT, and left its partial file.
#[test]
fn trace_synth_checks_space_stops_on_a_signal_and_leaves_nothing() {
    let dir_guard = scratch("synth");
    let dir = dir_guard.path().to_path_buf();
    let out = dir.join("big.trace");
    let o = out.to_str().unwrap();
    let synth =
        |n: &'static str| ["trace", "synth", "--kind", "random", "--working-set", "1m", "--accesses", n, "--out", o];
    let r = smartcon(&dir, &synth("99999999999999999"));
    assert_one_line_exit_2(&r, "big.trace");
    assert!(String::from_utf8_lossy(&r.stderr).contains("free"));
    assert!(!out.exists(), "nothing written when it cannot fit");
    assert_one_line_exit_2(&smartcon(&dir, &synth("18446744073709551615")), "--accesses");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut child = cmd(&dir, &synth("1000000000")).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        // Written under a temporary name beside it, renamed only when whole (issue 29).
        let tmp = dir.join(format!(".big.trace.smartcon-{}.tmp", child.id()));
        wait_for_file(&tmp, 1 << 20);
        let status = signal_and_wait(&mut child, signal);
        assert!(!status.success(), "an interrupted trace is not a success");
        assert!(!out.exists() && !tmp.exists(), "partial trace removed after signal {signal}");
    }
}

fn tiny_evaluate(out: &Path) -> Vec<String> {
    let args = "evaluate --tiny --targets emu:nvme,size=16m --workloads iozone-rand-read --loads bm-only \
                --strategies block --skip-polling --duration 5ms --out";
    let mut v: Vec<String> = args.split_whitespace().map(String::from).collect();
    v.push(out.display().to_string());
    v
}

/// Item 4: two `evaluate` runs with the same `--out` both exited 0 with a corrupt report.
#[test]
fn two_evaluates_racing_for_one_out_dir_exactly_one_wins() {
    let dir_guard = scratch("race");
    let dir = dir_guard.path().to_path_buf();
    // Store the device profile first, so the racers do not also race to probe.
    let first = dir.join("first");
    let a: Vec<String> = tiny_evaluate(&first);
    let out = smartcon(&dir, &a.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!first.join(".smartcon-claim").exists(), "the claim ends with the run");
    for round in 0..8 {
        let report = dir.join(format!("r{round}"));
        let a = tiny_evaluate(&report);
        let spawn = || {
            cmd(&dir, &a.iter().map(String::as_str).collect::<Vec<_>>())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (c1, c2) = (spawn(), spawn());
        let outs = [c1.wait_with_output().unwrap(), c2.wait_with_output().unwrap()];
        let codes: Vec<Option<i32>> = outs.iter().map(|o| o.status.code()).collect();
        assert!(codes.contains(&Some(0)) && codes.contains(&Some(2)), "round {round}: exit codes {codes:?}");
        let loser = outs.iter().find(|o| o.status.code() == Some(2)).unwrap();
        let err = String::from_utf8_lossy(&loser.stderr);
        assert!(err.contains("in use by another") || err.contains("not empty"), "{err}");
        let text = std::fs::read_to_string(report.join("results.jsonl")).unwrap();
        assert!(
            text.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()),
            "round {round}: valid JSON Lines"
        );
    }
}

/// What the creation records under `home/devices` name: (backing files, mount points, zram ids).
fn recorded(home: &Path) -> (Vec<PathBuf>, Vec<PathBuf>, Vec<String>) {
    let (mut backing, mut mounts, mut zram) = (Vec::new(), Vec::new(), Vec::new());
    for e in std::fs::read_dir(home.join("devices")).into_iter().flatten().filter_map(|e| e.ok()) {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        let l: Vec<&str> = text.lines().collect();
        match l.get(3..) {
            Some(["loop", b, ..]) => backing.push(record_path(b)),
            Some(["mount", m, ..]) => mounts.push(record_path(m)),
            Some(["zram", id, ..]) => zram.push(id.to_string()),
            _ => {}
        }
    }
    (backing, mounts, zram)
}

/// A record's path field: `x:HEX` (the path's bytes; records keep paths as bytes since
/// issue 29), or the plain path of older records.
fn record_path(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    match field.strip_prefix("x:") {
        Some(h) => {
            let bytes: Vec<u8> =
                (0..h.len() / 2).map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap()).collect();
            PathBuf::from(std::ffi::OsStr::from_bytes(&bytes))
        }
        None => PathBuf::from(field),
    }
}

/// Evaluate on a loop ramdisk, a zram device and ext4 on a loop ramdisk, running until
/// killed; returns once all four creation records exist and the devices are in use.
fn evaluate_on_ramdisks(home: &Path) -> Option<std::process::Child> {
    if !is_root()
        || Command::new("mkfs.ext4").arg("-V").output().is_err()
        || !Path::new("/sys/class/zram-control").exists()
    {
        eprintln!("skipped: needs root, mkfs.ext4 (e2fsprogs) and the zram module");
        return None;
    }
    let out = home.join("report");
    let args = [
        "evaluate",
        "--tiny",
        "--targets",
        "loop:16m,zram:16m,loopfs:32m",
        "--workloads",
        "iozone-rand-read,postmark",
        "--loads",
        "bm-only",
        "--strategies",
        "block,spin",
        "--skip-polling",
        "--duration",
        "5s",
        "--out",
        out.to_str().unwrap(),
    ];
    let mut child = cmd(home, &args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    for _ in 0..600 {
        let (b, m, z) = recorded(home);
        // The report directory is claimed before the devices are made (issue 29), so the
        // mount itself is what says the devices are in use.
        let mounted = std::fs::read_to_string("/proc/self/mounts")
            .is_ok_and(|t| m.iter().all(|p| t.contains(&format!(" {} ", p.display()))));
        if b.len() == 2 && m.len() == 1 && z.len() == 1 && mounted && out.join(".smartcon-claim").exists() {
            return Some(child);
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("evaluate never created its three ramdisks");
}

fn loop_attached(backing: &Path) -> bool {
    let out = Command::new("losetup").arg("-a").output().unwrap();
    String::from_utf8_lossy(&out.stdout).contains(&backing.display().to_string())
}

/// Nothing the records named is left: no loop device, image, mount or zram device.
fn assert_nothing_left(backing: &[PathBuf], mounts: &[PathBuf], zram: &[String], home: &Path) {
    let proc_mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    for b in backing {
        assert!(!b.exists() && !loop_attached(b), "{} left behind", b.display());
    }
    for m in mounts {
        assert!(!proc_mounts.contains(&m.display().to_string()) && !m.exists(), "{} left mounted", m.display());
    }
    for id in zram {
        assert!(!Path::new(&format!("/sys/block/zram{id}")).exists(), "zram{id} left behind");
    }
    let records = std::fs::read_dir(home.join("devices")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(records, 0, "records removed with what they named");
}

/// Item 5: after SIGKILL nothing can clean up in-process; `smartcon cleanup` removes what
/// the creation records name, and leaves a live run's devices alone.
#[test]
fn cleanup_removes_what_a_killed_evaluate_left_and_spares_a_live_one() {
    let dir_guard = scratch("kill9");
    let dir = dir_guard.path().to_path_buf();
    let Some(mut child) = evaluate_on_ramdisks(&dir) else { return };
    let (backing, mounts, zram) = recorded(&dir);
    let live = smartcon(&dir, &["cleanup"]);
    assert!(live.status.success(), "{}", String::from_utf8_lossy(&live.stderr));
    assert!(String::from_utf8_lossy(&live.stderr).contains("still running"));
    assert!(backing.iter().all(|b| b.exists() && loop_attached(b)), "a live run's devices are not touched");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(backing.iter().all(|b| loop_attached(b)), "SIGKILL left the loop devices (the case to clean up)");
    let out = smartcon(&dir, &["cleanup"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed mount") && text.contains("removed zram device"), "{text}");
    assert_nothing_left(&backing, &mounts, &zram, &dir);
    let again = smartcon(&dir, &["cleanup"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to clean up"));
}

/// Item 5: a second Ctrl-C during cleanup re-raised SIGINT and left devices behind; now every
/// further signal waits for the removal, and the run exits 130.
#[test]
fn repeated_interrupts_leave_no_device_behind_and_exit_130() {
    let dir_guard = scratch("sigint2");
    let dir = dir_guard.path().to_path_buf();
    let Some(mut child) = evaluate_on_ramdisks(&dir) else { return };
    let (backing, mounts, zram) = recorded(&dir);
    // SAFETY: kill with a pid we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let mut status = None;
    for _ in 0..600 {
        // SAFETY: as above; the child is reaped only by try_wait below.
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
        if let Some(s) = child.try_wait().unwrap() {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("evaluate did not end after repeated SIGINT");
    });
    assert_eq!(status.code(), Some(130));
    assert_nothing_left(&backing, &mounts, &zram, &dir);
}

/// "Also": the exit status after an interrupt was 0, 1 or 2 by command; it is 130.
#[test]
fn an_interrupt_exits_130_whatever_the_command() {
    let dir_guard = scratch("exit130");
    let dir = dir_guard.path().to_path_buf();
    let trace = dir.join("t.trace");
    let commands: [Vec<&str>; 3] = [
        vec!["io", "--target", "emu:nvme,size=16m", "--duration", "60s"],
        vec![
            "trace",
            "synth",
            "--kind",
            "loop",
            "--working-set",
            "1m",
            "--accesses",
            "1000000000",
            "--out",
            trace.to_str().unwrap(),
        ],
        vec!["ets", "--quick", "--threads", "1"],
    ];
    for args in &commands {
        for signal in [libc::SIGINT, libc::SIGTERM] {
            let mut child = cmd(&dir, args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
            // Let it get going (not a timing assertion: any moment of the run must give 130).
            std::thread::sleep(std::time::Duration::from_millis(300));
            let status = signal_and_wait(&mut child, signal);
            assert_eq!(status.code(), Some(130), "{args:?} after signal {signal}");
        }
    }
    assert!(!trace.exists());
}

/// "Also": `probe --out /nonexist/p.json` created the directory and said smart would use
/// the file; a missing parent is refused, and only the stored path is called smart's.
#[test]
fn probe_out_needs_an_existing_directory_and_tells_the_truth() {
    let dir_guard = scratch("probeout");
    let dir = dir_guard.path().to_path_buf();
    let missing = dir.join("nonexist");
    let p = missing.join("p.json");
    let probe =
        |out: &str| smartcon(&dir, &["probe", "emu:nvme,size=16m", "--duration", "5ms", "--sizes", "4k", "--out", out]);
    assert_one_line_exit_2(&probe(p.to_str().unwrap()), "not a directory");
    assert!(!missing.exists(), "no directory created");
    let elsewhere = dir.join("p.json");
    let out = probe(elsewhere.to_str().unwrap());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("smart uses it") && text.contains("--profile"), "{text}");
}

/// "Also": a corrupt stored profile aborted even `--strategy block`, which does not read it.
#[test]
fn a_corrupt_stored_profile_only_stops_strategies_that_need_it() {
    let dir_guard = scratch("corruptprofile");
    let dir = dir_guard.path().to_path_buf();
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("profiles/emu_nvme_size_16m.json"), b"{ not json").unwrap();
    let io = |strategy: &str| {
        smartcon(&dir, &["io", "--target", "emu:nvme,size=16m", "--strategy", strategy, "--duration", "20ms"])
    };
    let block = io("block");
    assert!(block.status.success(), "{}", String::from_utf8_lossy(&block.stderr));
    assert!(String::from_utf8_lossy(&block.stderr).contains("warning"));
    assert_eq!(io("smart").status.code(), Some(2), "smart needs the profile");
    let bench = smartcon(
        &dir,
        &[
            "bench",
            "--targets",
            "emu:nvme,size=16m",
            "--sizes",
            "4k",
            "--ops",
            "read",
            "--strategies",
            "block,spin",
            "--duration",
            "10ms",
        ],
    );
    assert!(bench.status.success(), "{}", String::from_utf8_lossy(&bench.stderr));
}

/// "Also": `evaluate --rounds 0` and `--plot` onto an existing file or a directory were
/// accepted; each is one line, exit 2, nothing written.
#[test]
fn zero_rounds_and_plots_onto_existing_paths_are_refused() {
    let dir_guard = scratch("plots");
    let dir = dir_guard.path().to_path_buf();
    let report = dir.join("report");
    let mut a = tiny_evaluate(&report);
    a.extend(["--rounds".to_string(), "0".to_string()]);
    assert_one_line_exit_2(&smartcon(&dir, &a.iter().map(String::as_str).collect::<Vec<_>>()), "--rounds");
    assert!(!report.exists(), "nothing written");
    let existing = dir.join("old.svg");
    std::fs::write(&existing, b"keep me").unwrap();
    let bench = |plot: &Path| {
        smartcon(
            &dir,
            &[
                "bench",
                "--targets",
                "emu:nvme,size=16m",
                "--sizes",
                "4k",
                "--ops",
                "read",
                "--strategies",
                "block",
                "--duration",
                "10ms",
                "--sweep-interval",
                "1us",
                "--plot",
                plot.to_str().unwrap(),
            ],
        )
    };
    assert_one_line_exit_2(&bench(&existing), "exists");
    assert_one_line_exit_2(&bench(&dir), "directory");
    assert_one_line_exit_2(&bench(&dir.join("no/such.svg")), "not a directory");
    assert_one_line_exit_2(&smartcon(&dir, &["ctx", "--plot", dir.to_str().unwrap(), "--force"]), "directory");
    assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
}

/// `smartcon cleanup` is the one command after a SIGKILL: it also removes what a killed
/// `emulate mount` left (its FUSE mount and loop device), from the mount's record.
#[test]
fn cleanup_also_removes_a_killed_emulate_mount() {
    if !is_root() || !Path::new("/dev/fuse").exists() || Command::new("losetup").arg("-V").output().is_err() {
        eprintln!("skipped: needs root, /dev/fuse and losetup (util-linux)");
        return;
    }
    let dir_guard = scratch("kill9-mount");
    let dir = dir_guard.path().to_path_buf();
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mut child =
        cmd(&dir, &["emulate", "mount", "emu:nvram", mnt.to_str().unwrap(), "--fs", "none", "--size", "16m"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
    // The mount is up once it prints its loop device (bounded: the server gives up on its own).
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while std::io::BufRead::read_line(&mut out, &mut line).unwrap_or(0) > 0 {
        seen.push_str(&line);
        if line.contains("/dev/loop") {
            break;
        }
        line.clear();
    }
    let Some(dev) = seen
        .split_whitespace()
        .find(|w| w.starts_with("/dev/loop"))
        .map(|w| w.trim_end_matches([',', '.', ':']).to_string())
    else {
        let _ = child.kill();
        panic!("emulate mount never printed its loop device: {seen}");
    };
    let loop_name = dev.trim_start_matches("/dev/").to_string();
    child.kill().unwrap();
    child.wait().unwrap();
    let fuse_mounted =
        || std::fs::read_to_string("/proc/mounts").unwrap().lines().any(|l| l.contains(dir.to_str().unwrap()));
    let attached = || Path::new(&format!("/sys/block/{loop_name}/loop/backing_file")).exists();
    assert!(fuse_mounted() && attached(), "SIGKILL left the FUSE mount and {dev} (the case to clean up)");
    let out = smartcon(&dir, &["cleanup"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("removed what pid"), "{text}");
    assert!(!fuse_mounted(), "FUSE still mounted after cleanup");
    assert!(!attached(), "{dev} still attached after cleanup");
}

/// Issue 21: loop devices, zram devices and `emulate mount`'s stacks are recorded in one
/// folder (`$SMARTCON_HOME/devices`); a mount record an older build left in the mounts'
/// folder after a SIGKILL is still found and removed by `cleanup`, with its working
/// directory and server log, next to one in the current folder. Needs no root: the dead
/// servers' records name no device.
#[test]
fn cleanup_finds_mount_records_in_the_one_folder_and_the_old_one() {
    let home_guard = scratch("record-folders");
    let home = home_guard.path().to_path_buf();
    // A pid that has exited: the records' servers are dead.
    let mut gone = Command::new("true").spawn().unwrap();
    gone.wait().unwrap();
    let pid = gone.id();
    let mut works = Vec::new();
    for (folder, name) in [("mounts", "m-1-old"), ("devices", "m-2-new")] {
        let dir = home.join(folder);
        let work = dir.join(name);
        std::fs::create_dir_all(&work).unwrap();
        let record = serde_json::json!({
            "pid": pid, "spec": "emu:sdcard", "dir": home.join(format!("{name}-dir")), "work": work,
            "fuse_mount": null, "backing": null, "loop_device": null, "ext4_mounted": false, "state": "ready",
        });
        std::fs::write(dir.join(format!("{name}.json")), record.to_string()).unwrap();
        std::fs::write(dir.join(format!("server-{pid}.log")), "accuracy report\n").unwrap();
        works.push(work);
    }
    let out = smartcon(&home, &["cleanup"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(text.matches(&format!("removed what pid {pid} left")).count(), 2, "{text}");
    for folder in ["mounts", "devices"] {
        let left: Vec<_> = std::fs::read_dir(home.join(folder)).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(left.is_empty(), "{folder}: {left:?} left after cleanup ({text})");
    }
    let again = smartcon(&home, &["cleanup"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("nothing to clean up"));
}
