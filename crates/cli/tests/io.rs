//! The `smartcon io`, `bench` and `devices` commands as a user runs them: bad input gives
//! exit 2 and one line naming the problem with nothing written; JSON records carry every
//! documented field; Ctrl-C stops a run cleanly and removes its temporary file.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn smartcon(home: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smartcon"));
    // Keep stored profiles of the user out of the tests.
    c.env("SMARTCON_HOME", home);
    c
}

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-cli-test-{name}-")).tempdir().unwrap()
}

fn run(args: &[&str]) -> Output {
    let home = scratch("home");
    smartcon(home.path()).args(args).output().unwrap()
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

#[test]
fn bad_input_exits_2_with_one_line_naming_the_problem_and_writes_nothing() {
    let dir_guard = scratch("bad");
    let dir = dir_guard.path().to_path_buf();
    let tmp = format!("tmp:4m@{}", dir.display());
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["io", "--target", "/nonexistent/smartcon/file"], "No such file"),
        (vec!["io", "--target", "emu:floppy"], "unknown preset"),
        (vec!["io", "--target", "emu:nvme,speed=3"], "unknown key"),
        (vec!["io", "--target", "emu:nvme", "--bs", "0"], "--bs"),
        (vec!["io", "--target", "emu:nvme", "--bs", "1t"], "out of range"),
        (vec!["io", "--target", "emu:nvme", "--bs", "1000"], "not a multiple"),
        (vec!["io", "--target", "emu:nvme", "--span", "2g"], "larger than"),
        (vec!["io", "--target", "emu:nvme", "--duration", "soon"], "duration"),
        (vec!["io", "--target", "emu:nvme", "--duration", "10"], "duration"),
        (vec!["io", "--target", "emu:nvme", "--strategy", "yolo"], "unknown strategy"),
        (vec!["io", "--target", "emu:nvme", "--op", "erase"], "unknown op"),
        (vec!["io", "--target", "emu:nvme", "--threads", "0"], "threads"),
        (vec!["io", "--target", &tmp, "--bs", "1000", "--op", "write"], "not a multiple"),
        (vec!["io", "--target", "/tmp", "--op", "read"], "directory"),
        (vec!["bench", "--targets", "emu:nvme,", "--sizes", "4k"], "empty item"),
        (vec!["bench", "--sizes", "4k,zero"], "--sizes"),
        (vec!["io", "--target", "emu:nvme", "--strategy", "hybrid", "--alpha", "0"], "--alpha"),
        (vec!["io", "--target", "emu:nvme", "--strategy", "hybrid", "--alpha=-5ns"], "--alpha"),
        (vec!["io", "--target", "emu:nvme", "--strategy", "hybrid", "--alpha", "1s"], "alpha"),
        (vec!["io", "--target", "emu:nvme", "--strategy", "poll", "--poll-interval", "0"], "--poll-interval"),
        (vec!["io", "--target", "emu:nvme", "--strategy", "poll", "--poll-interval", "20s"], "poll interval"),
        (
            vec!["io", "--target", "emu:nvme", "--strategy", "hybrid", "--sampling", "3s", "--duration", "1s"],
            "sampling phase",
        ),
        (vec!["bench", "--strategies", "hybrid", "--sampling", "1s", "--duration", "300ms"], "sampling phase"),
    ];
    for (args, needle) in cases {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in {stderr:?}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: one line, got {stderr:?}");
        assert!(out.stdout.is_empty(), "{args:?} printed results");
    }
    // The temporary file of the refused tmp: run was removed again.
    assert!(leftovers(&dir).is_empty(), "left behind: {:?}", leftovers(&dir));
}

#[test]
fn permission_denied_is_a_setup_error() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        eprintln!("skipped: running as root, which bypasses file permissions");
        return;
    }
    let dir_guard = scratch("perm");
    let dir = dir_guard.path().to_path_buf();
    let f = dir.join("locked");
    std::fs::write(&f, vec![0u8; 1 << 20]).unwrap();
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let out = run(&["io", "--target", f.to_str().unwrap(), "--duration", "100ms"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"));
}

const RESULT_FIELDS: &[&str] = &[
    "type",
    "target",
    "op",
    "pattern",
    "bs_bytes",
    "strategy",
    "threads",
    "ios",
    "iops",
    "bw_bytes_per_s",
    "lat_ns_mean",
    "lat_ns_p50",
    "lat_ns_p99",
    "lat_ns_p999",
    "lat_ns_max",
    "cpu_user_pct",
    "cpu_sys_pct",
    "ctx_voluntary",
    "ctx_involuntary",
    "decisions",
];

#[test]
fn json_records_parse_and_carry_every_field() {
    for strategy in ["block", "spin", "sync", "smart"] {
        let out = run(&[
            "io",
            "--target",
            "emu:optane,size=16m",
            "--strategy",
            strategy,
            "--duration",
            "100ms",
            "--threads",
            "2",
            "--json",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 1);
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        for f in RESULT_FIELDS {
            assert!(v.get(f).is_some(), "{strategy}: field {f} missing in {v}");
        }
        assert_eq!(v["type"], "result");
        assert_eq!(v["strategy"], strategy);
        assert!(v["ios"].as_u64().unwrap() > 0);
        let by_strategy = v["decisions"]["by_strategy"].as_object().unwrap();
        let counted: u64 = by_strategy.values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(counted, v["ios"].as_u64().unwrap(), "every I/O is counted by strategy");
        if strategy == "smart" {
            let reasons: u64 =
                v["decisions"]["by_reason"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
            assert_eq!(reasons, counted, "every smart decision has a reason");
        } else {
            assert_eq!(by_strategy.keys().collect::<Vec<_>>(), vec![strategy]);
        }
    }
}

#[test]
fn smart_never_spins_on_a_hard_disk_and_bench_json_has_a_summary() {
    let out = run(&["bench", "--targets", "emu:hdd", "--sizes", "4k", "--ops", "read", "--duration", "60ms", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let records: Vec<serde_json::Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(records.iter().filter(|r| r["type"] == "result").count(), 4);
    let smart = records.iter().find(|r| r["strategy"] == "smart").unwrap();
    assert!(smart["decisions"]["by_strategy"].get("spin").is_none(), "{smart}");
    assert!(smart["decisions"]["by_reason"]["mainstream_device"].as_u64().unwrap() > 0);
    assert_eq!(records.last().unwrap()["type"], "summary");
}

#[test]
fn verify_through_the_cli_on_a_temporary_file_and_the_file_is_removed() {
    let dir_guard = scratch("verify");
    let dir = dir_guard.path().to_path_buf();
    let target = format!("tmp:8m@{}", dir.display());
    for op in ["write", "read"] {
        let out = run(&[
            "io",
            "--target",
            &target,
            "--op",
            op,
            "--bs",
            "16k",
            "--threads",
            "3",
            "--duration",
            "150ms",
            "--verify",
        ]);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("matched"));
    }
    assert!(leftovers(&dir).is_empty());
}

#[test]
fn devices_lists_every_preset_with_its_source() {
    let out = run(&["devices"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for p in ["emu:nvram", "emu:optane", "emu:nvme", "emu:sata-ssd", "emu:hdd"] {
        assert!(text.matches(p).count() >= 2, "{p} in table and sources");
    }
}

#[test]
fn ctrl_c_stops_cleanly_prints_what_was_measured_and_removes_the_temp_file() {
    let dir_guard = scratch("sigint");
    let dir = dir_guard.path().to_path_buf();
    let home = scratch("home");
    let child = smartcon(home.path())
        .args(["io", "--target", &format!("tmp:8m@{}", dir.display()), "--duration", "60s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the temporary file exists (the run has started), then interrupt.
    for _ in 0..200 {
        if !leftovers(&dir).is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(25));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: sending SIGINT to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().unwrap();
    // 130 after an interrupt, for every command (issue 16), with the measurement printed.
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["interrupted"], true);
    assert!(v["duration_ns"].as_u64().unwrap() < 30_000_000_000);
    assert!(leftovers(&dir).is_empty(), "temp file left: {:?}", leftovers(&dir));
}

#[test]
fn writing_to_a_block_device_the_tool_did_not_create_is_refused() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: creating a loop device needs root");
        return;
    }
    let dir_guard = scratch("loop");
    let dir = dir_guard.path().to_path_buf();
    let backing = dir.join("backing.img");
    std::fs::write(&backing, vec![0x5au8; 8 << 20]).unwrap();
    let out = Command::new("losetup").args(["-f", "--show"]).arg(&backing).output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        eprintln!("skipped: losetup could not create a loop device here");
        return;
    };
    let dev = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let refused = run(&["io", "--target", &dev, "--op", "write", "--duration", "100ms"]);
    // Read the device back through the kernel (not the backing file, which the loop
    // driver may cache differently): the refused run must have written nothing.
    let untouched = std::fs::read(&dev).map(|d| d.iter().all(|&b| b == 0x5a));
    let allowed = run(&["io", "--target", &dev, "--op", "write", "--duration", "100ms", "--bs", "4k", "--destructive"]);
    let _ = Command::new("losetup").args(["-d", &dev]).status();
    assert_eq!(refused.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--destructive"));
    assert!(untouched.unwrap(), "the refused run changed the device");
    assert!(allowed.status.success(), "{}", String::from_utf8_lossy(&allowed.stderr));
}
