//! End to end: `smartcon evaluate --study acs` (seed 001) on a tiny ext2 file over a loop
//! and a zram device (root only; skipped with the reason otherwise). Structure and counts
//! only, never timings (the machine is shared): every cell's record has exactly the issue's
//! fields, the bars are there, the unmodified readers ran, and nothing is left behind.

use std::path::Path;
use std::process::{Command, Output};

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-acstest-{name}-")).tempdir().unwrap()
}

fn smartcon(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home).args(args).output().expect("run smartcon")
}

#[test]
fn acs_bad_input_exits_2_and_writes_nothing() {
    let dir_guard = scratch("bad");
    let dir = dir_guard.path().to_path_buf();
    let report = dir.join("r");
    let r = report.to_str().unwrap();
    for args in [
        // One round gives an interval only when read in two or more pieces.
        vec!["evaluate", "--study", "acs", "--tiny", "--rounds", "1", "--pieces", "1", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--pieces", "0", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--pieces", "600", "--out", r],
        vec!["evaluate", "--tiny", "--pieces", "4", "--out", r],
        vec!["evaluate", "--tiny", "--slice-reads", "8", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--slice-reads", "eight", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--file-size", "5000", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--schedulers", "cfq", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--targets", "emu:nvme", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--io-cpus", "4095", "--out", r],
        vec!["evaluate", "--study", "acs", "--tiny", "--targets", "loop,disk", "--out", r],
        vec!["evaluate", "--tiny", "--full", "--out", r],
        vec!["evaluate", "--schedulers", "bfq", "--out", r],
    ] {
        let out = smartcon(&dir, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!report.exists(), "{args:?} wrote the report directory");
    }
}

#[test]
fn acs_names_what_a_later_step_needs_before_it_creates_or_measures_anything() {
    let dir_guard = scratch("needs");
    let dir = dir_guard.path().to_path_buf();
    let home = dir.join("home");
    let report = dir.join("r");
    let r = report.to_str().unwrap();
    let args = ["evaluate", "--study", "acs", "--tiny", "--targets", "zram", "--out", r];
    // A copy of the binary without libsmartcon.so beside it (how seed 001's first default
    // run failed, at its unmodified readers, after 8 minutes of measurement): refused at once.
    let exe = dir.join("smartcon");
    std::fs::copy(env!("CARGO_BIN_EXE_smartcon"), &exe).unwrap();
    let out = output_of_fresh_copy(Command::new(&exe).env("SMARTCON_HOME", &home).args(args));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("libsmartcon.so:") && err.contains("cargo build --release"), "{err}");
    assert!(err.contains(&dir.display().to_string()), "names where it looked: {err}");
    assert!(!report.exists(), "a refused run claimed its report directory");
    let records = std::fs::read_dir(home.join("devices")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(records, 0, "a refused run created a device");
    // The tools, from PATH: none there, each named with its package.
    let empty = dir.join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = smartcon_with_path(&home, &empty, &args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for named in ["mkfs.ext2: ", "(install e2fsprogs)", "dd: ", "fio: "] {
        assert!(err.contains(named), "{named}: {err}");
    }
    assert!(!err.contains("losetup"), "zram alone needs no losetup: {err}");
    assert!(!report.exists(), "a refused run claimed its report directory");
}

fn smartcon_with_path(home: &Path, path: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_smartcon"))
        .env("SMARTCON_HOME", home)
        .env("PATH", path)
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn acs_tiny_measures_every_cell_and_leaves_nothing() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: the acs study creates loop and zram devices, which needs root");
        return;
    }
    if Command::new("mkfs.ext2").arg("-V").output().is_err() || Command::new("losetup").arg("-V").output().is_err() {
        eprintln!("skipped: mkfs.ext2 (e2fsprogs) or losetup (util-linux) is not installed");
        return;
    }
    let dir_guard = scratch("tiny");
    let dir = dir_guard.path().to_path_buf();
    let report = dir.join("r");
    // The reader pinned to the first CPU, every strategy alike.
    let args = [
        "evaluate",
        "--study",
        "acs",
        "--tiny",
        "--cpu-workers",
        "2",
        "--io-cpus",
        "0",
        "--out",
        report.to_str().unwrap(),
    ];
    let child = Command::new(env!("CARGO_BIN_EXE_smartcon"))
        .env("SMARTCON_HOME", &dir)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run smartcon");
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("noop-vs-noop: smart") && stdout.contains("host: a blocking wait costs"), "{stdout}");
    let text = std::fs::read_to_string(report.join("results.jsonl")).unwrap();
    let recs: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let of = |t: &str| recs.iter().filter(|r| r["type"] == t).collect::<Vec<_>>();
    let results = of("acs_result");
    let zram = !err.contains("zram skipped");
    // loop: 2 schedulers x 2 patterns x 4 strategies, and the 1 + N under none; zram: no
    // scheduler, both loads.
    let want = 16 + 8 + if zram { 16 } else { 0 };
    assert_eq!(results.len(), want, "{text}");
    for r in &results {
        let loop_dev = r["device"] == "loop";
        let keys = r.as_object().unwrap().len();
        assert_eq!(keys, if loop_dev && r["cpu_workers"] == 0 { 10 } else { 9 }, "{r}");
        assert!(r["mean_us"].as_f64().unwrap() > 0.0 && r["ci95_us"].as_f64().unwrap() >= 0.0, "{r}");
        assert!(["random", "sequential"].contains(&r["pattern"].as_str().unwrap()));
        assert!([0, 2].contains(&r["cpu_workers"].as_u64().unwrap()));
        if r["strategy"] == "block" {
            assert_eq!(r["improvement_pct"], 0.0, "block against itself: {r}");
        }
        // zram has no scheduler, and its records say so rather than "none".
        assert_eq!(r["scheduler"] == "no-scheduler", !loop_dev, "{r}");
        // Under bfq, "against block under the same scheduler" and "against block under bfq"
        // are the same comparison: equal to the last bit, and block's is 0.
        if r["scheduler"] == "bfq" {
            assert_eq!(r["improvement_pct"], r["improvement_vs_bfq_pct"], "{r}");
        }
    }
    // Every (device, scheduler, pattern, load) has each strategy once, with an interval.
    let mut groups: Vec<(String, String, String, u64)> = results
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap().to_string();
            (s("device"), s("scheduler"), s("pattern"), r["cpu_workers"].as_u64().unwrap())
        })
        .collect();
    groups.sort();
    groups.dedup();
    assert_eq!(groups.len(), want / 4, "{groups:?}");
    for (device, scheduler, pattern, workers) in &groups {
        let cell = |strategy: &str| {
            let v: Vec<_> = results
                .iter()
                .filter(|r| {
                    r["device"] == device.as_str()
                        && r["scheduler"] == scheduler.as_str()
                        && r["pattern"] == pattern.as_str()
                        && r["cpu_workers"] == *workers
                        && r["strategy"] == strategy
                })
                .collect();
            assert_eq!(v.len(), 1, "{device} {scheduler} {pattern} {workers} {strategy}: {v:?}");
            v[0]
        };
        for strategy in ["block", "spin", "sync", "smart"] {
            let ci = cell(strategy)["ci95_us"].as_f64().unwrap();
            assert!(ci.is_finite() && ci >= 0.0, "{device} {scheduler} {pattern} {strategy}");
        }
    }
    // Fig. 1: both bars on loop per pattern, one (no bfq) on zram and under the load, for
    // smart, spin and sync each.
    let bars = of("acs_bar");
    assert_eq!(bars.len(), 3 * (4 + 2 + if zram { 4 } else { 0 }), "{text}");
    assert_eq!(bars.iter().filter(|b| b["adaptive"] == "smart").count(), bars.len() / 3);
    // --tiny: at most 2 rounds, each repetition in 2 pieces, so 2 pairs a round; one round
    // already gives an interval, so a group past its 5 s budget ends after it.
    for b in &bars {
        let rounds = b["rounds"].as_u64().unwrap();
        assert!((1..=2).contains(&rounds) && b["pairs"].as_u64() == Some(2 * rounds), "{b}");
    }
    assert!(bars.iter().all(|b| b["interval_pct"].as_array().unwrap().len() == 2));
    // Each bar is its cell's improvement: noop-vs-noop against block under the same
    // scheduler (none; zram: none at all), anti-vs-noop against block under bfq.
    for b in &bars {
        let cell = results
            .iter()
            .find(|r| {
                r["device"] == b["device"]
                    && r["pattern"] == b["pattern"]
                    && r["cpu_workers"] == b["cpu_workers"]
                    && r["strategy"] == b["adaptive"]
                    && r["scheduler"] == if b["device"] == "loop" { "none" } else { "no-scheduler" }
            })
            .unwrap_or_else(|| panic!("no cell for {b}"));
        let key = if b["bar"] == "anti-vs-noop" { "improvement_vs_bfq_pct" } else { "improvement_pct" };
        let (want_pct, got) = (cell[key].as_f64().unwrap(), b["improvement_pct"].as_f64().unwrap());
        assert!((want_pct - got).abs() < 1e-9, "{b} against {cell}");
        let original = if b["bar"] == "anti-vs-noop" { "bfq" } else { cell["scheduler"].as_str().unwrap() };
        assert_eq!(b["original_scheduler"].as_str(), Some(original), "{b}");
    }
    // Each bar carries the machine's load, whether the stopping rule held, the median read
    // of both sides and the share of spins that slept (none for sync, which never spins).
    for b in &bars {
        let load = b["load_avg"].as_array().unwrap();
        assert!(load.len() == 2 && load.iter().all(|l| l.as_f64().unwrap() >= 0.0), "{b}");
        assert!(b["settled"].is_boolean(), "{b}");
        // Settled says how (the paired 95% interval by its effect or within +-2%), and only then.
        let by = b.get("settled_by").and_then(|v| v.as_str());
        assert_eq!(by.is_some(), b["settled"] == true, "{b}");
        assert!(by.is_none_or(|w| w == "effect" || w == "resolution"), "{b}");
        // The 95% interval of the same pairs holds the 90% one.
        let i90: Vec<f64> = b["interval_pct"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        let i95: Vec<f64> = b["interval95_pct"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert!(i95[0] <= i90[0] + 1e-9 && i95[1] >= i90[1] - 1e-9, "{b}");
        assert!(b["p50_us"].as_array().unwrap().iter().all(|p| p.as_f64().unwrap() > 0.0), "{b}");
        let slept = b["fell_back_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&slept), "{b}");
        if b["adaptive"] == "sync" {
            assert_eq!(slept, 0.0, "{b}");
        }
    }
    // The unmodified readers, where installed.
    let readers = of("acs_reader");
    if Command::new("dd").arg("--version").output().is_ok() {
        assert!(readers.iter().any(|r| r["reader"] == "dd" && r["strategy"] == "smart"), "{text}");
    }
    assert_eq!(of("acs_host").len(), 1);
    // Every device created is recorded; the loop device's scheduler, switched every turn,
    // was read back as it was before the study (bfq's idling included), before removal.
    let devices = of("acs_device");
    assert_eq!(devices.len(), if zram { 2 } else { 1 }, "{text}");
    for d in &devices {
        if d["device"] == "loop" {
            assert_eq!((d["has_scheduler"].as_bool(), d["restored"].as_bool()), (Some(true), Some(true)), "{d}");
            assert_eq!(d["scheduler_after"], d["scheduler_before"], "{d}");
            assert!(d["scheduler_before"]["scheduler"].is_string(), "{d}");
            assert_eq!(d["schedulers"], serde_json::json!(["none", "bfq"]), "{d}");
        } else {
            assert_eq!(d["device"], "zram");
            assert_eq!((d["has_scheduler"].as_bool(), d["restored"].is_null()), (Some(false), true), "{d}");
            assert!(d["scheduler_before"].is_null() && d["scheduler_after"].is_null(), "{d}");
        }
        // Gone now: the loop node no longer over our file (a zram node's number may be
        // reused at once by another run; the device records below cover zram).
        let node = d["node"].as_str().unwrap();
        let sys = Path::new("/sys/block").join(Path::new(node).file_name().unwrap());
        if d["device"] == "loop" {
            let back = std::fs::read_to_string(sys.join("loop/backing_file")).unwrap_or_default();
            assert!(!back.contains(&format!("smartcon-loop-{pid}-")), "{node} still over {back}");
        }
    }
    assert!(stdout.contains("scheduler before") && !stdout.contains("NOT restored"), "{stdout}");
    let summary = std::fs::read_to_string(report.join("summary.md")).unwrap();
    assert!(summary.contains("## Fig. 1") && summary.contains("reader pinned to CPU 0"), "{summary}");
    assert!(summary.contains("## Devices created (and removed)"), "{summary}");
    // Nothing left: no record, no mount, no loop device over our files.
    let records = std::fs::read_dir(dir.join("devices")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(records, 0, "device records left");
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    for tag in ["loop", "zram"] {
        assert!(!mounts.contains(&format!("smartcon-ext2-{tag}-{pid}-")), "an ext2 mount left: {mounts}");
    }
    let loops = Command::new("losetup").arg("-a").output().unwrap();
    assert!(!String::from_utf8_lossy(&loops.stdout).contains(&format!("smartcon-loop-{pid}-")), "a loop device left");
}

/// Runs a binary the test has just written. Another test's child, forked between our
/// copy's open and close, holds the file open for writing until it execs, and exec then
/// fails with ETXTBSY ("Text file busy"; the twenty-third session's CI): try again briefly.
fn output_of_fresh_copy(cmd: &mut Command) -> Output {
    for _ in 0..100 {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r.unwrap(),
        }
    }
    cmd.output().unwrap()
}
