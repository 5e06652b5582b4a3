//! `smartcon ets` with the pieces added for seed 003's Fig. 3, 6 and 9, as a user runs them:
//! a captured trace as an ETS task (a lackey text file the test writes, and a real lackey
//! capture of a small program when valgrind is installed), the uniform slices of Fig. 3,
//! and `ets shared` (two cores on one LLC, the error per sharer), with their bad inputs
//! refused in one line with exit 2.

use std::path::Path;
use std::process::{Command, Output};

/// A scratch directory of this test, removed when the guard is dropped (also when the
/// test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-ets-traces-{name}-")).tempdir().unwrap()
}

fn smartcon(args: &[&str]) -> Output {
    let home = scratch("home");
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home.path()).args(args).output().unwrap()
}

fn json_lines(out: &Output) -> Vec<serde_json::Value> {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn of_type<'a>(records: &'a [serde_json::Value], t: &str) -> Vec<&'a serde_json::Value> {
    records.iter().filter(|r| r["type"] == t).collect()
}

/// Trace lines (accesses) and `I` lines (instructions) of a lackey file.
fn lackey_counts(path: &Path) -> (u64, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut accesses = 0;
    let mut fetches = 0;
    for line in text.lines() {
        if line.starts_with("I  ") {
            fetches += 1;
            accesses += 1;
        } else if line.starts_with(" L ") || line.starts_with(" S ") || line.starts_with(" M ") {
            accesses += 1;
        }
    }
    (accesses, fetches)
}

/// A lackey file of `n` rounds over `lines` cache lines: three fetches and one load each.
fn write_lackey(path: &Path, rounds: u64, lines: u64) {
    use std::fmt::Write;
    let mut text = String::from("==42== Lackey, an example Valgrind tool\n");
    for i in 0..rounds * lines {
        let pc = 0x400000 + 12 * (i % 1000);
        let _ = writeln!(text, "I  {:08x},4\nI  {:08x},4\nI  {:08x},4", pc, pc + 4, pc + 8);
        let _ = writeln!(text, " L {:08x},8", 0x10_0000_0000u64 + 64 * (i % lines));
    }
    text.push_str("==42== \n");
    std::fs::write(path, text).unwrap();
}

fn ets_task<'a>(records: &'a [serde_json::Value], task: &str) -> &'a serde_json::Value {
    of_type(records, "ets_task").into_iter().find(|r| r["task"] == task).unwrap()
}

#[test]
fn a_lackey_file_runs_as_an_ets_task_and_every_uniform_slice_is_reported() {
    let dir_guard = scratch("file");
    let dir = dir_guard.path().to_path_buf();
    let trace = dir.join("loop.lackey");
    // 200,000 rounds of 4 records over 8,192 lines (512 KiB): 600,000 instructions.
    write_lackey(&trace, 25, 8_192);
    let (accesses, fetches) = lackey_counts(&trace);
    let task = format!("trace:{}", trace.display());
    let out = smartcon(&[
        "ets",
        "--tasks",
        &format!("{task},loop:128k"),
        "--instructions",
        "1000000",
        "--slices",
        "2.5,5,7.5",
        "--no-sweep",
        "--json",
    ]);
    let records = json_lines(&out);
    let r = ets_task(&records, &task);
    assert_eq!(r["records_ets"].as_u64(), Some(accesses), "every access of the file, no more");
    assert_eq!(r["instructions"].as_u64(), Some(1_000_000), "the plan's budget, which the trace stays under");
    assert!(fetches < 1_000_000);
    let slices: Vec<f64> = r["uniform"].as_array().unwrap().iter().map(|p| p["slice_ms"].as_f64().unwrap()).collect();
    assert_eq!(slices, vec![2.5, 5.0, 7.5, 10.0]);
    let at10 = &r["uniform"][3];
    assert_eq!(at10["cpi_over_uts_10"].as_f64(), Some(1.0));
    assert_eq!(at10["ipc"], r["ipc_uts_10"]);
    let summary = of_type(&records, "ets_summary")[0];
    assert_eq!(summary["uniform_cpi_over_uts_10_geomean"].as_array().unwrap().len(), 4);
    let foreign = dir.join("notes.txt");
    std::fs::write(&foreign, "these are notes, not a trace\n").unwrap();
    let foreign_task = format!("trace:{},loop:1m", foreign.display());
    // A missing or foreign trace, and a bad slice, are one line and exit 2 before any run.
    for (args, needle) in [
        (vec!["ets", "--tasks", "trace:/nonexistent/x,loop:1m", "--quick"], "/nonexistent/x"),
        (vec!["ets", "--tasks", &foreign_task, "--quick"], "lackey"),
        (vec!["ets", "--slices", "5,abc", "--quick"], "--slices"),
        (vec!["ets", "--slices", "0.1", "--quick"], "--slices"),
    ] {
        let out = smartcon(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}

/// valgrind lackey's own output of a real program, as `--log-file` writes it, runs as a
/// task: the task simulates exactly the file's accesses. Skips, saying why, without valgrind.
#[test]
fn a_real_lackey_capture_runs_as_an_ets_task() {
    if Command::new("valgrind").arg("--version").output().map(|o| !o.status.success()).unwrap_or(true) {
        eprintln!("skipping: valgrind is not installed (scripts/test.sh installs it as root on Debian)");
        return;
    }
    let dir_guard = scratch("lackey");
    let dir = dir_guard.path().to_path_buf();
    let trace = dir.join("true.lackey");
    let capture = Command::new("valgrind")
        .args(["--tool=lackey", "--trace-mem=yes"])
        .arg(format!("--log-file={}", trace.display()))
        .arg("/bin/true")
        .output()
        .unwrap();
    assert!(capture.status.success(), "{}", String::from_utf8_lossy(&capture.stderr));
    let (accesses, fetches) = lackey_counts(&trace);
    assert!(accesses > 10_000, "{accesses} accesses");
    let task = format!("trace:{}", trace.display());
    let budget = (fetches + 1_000_000).to_string();
    let out =
        smartcon(&["ets", "--tasks", &format!("{task},stream"), "--instructions", &budget, "--no-sweep", "--json"]);
    let records = json_lines(&out);
    let r = ets_task(&records, &task);
    assert_eq!(r["records_ets"].as_u64(), Some(accesses));
    let shared = smartcon(&[
        "ets",
        "shared",
        "--pairs",
        &format!("{task}+loop:256k"),
        "--partition",
        "ways",
        "--llc",
        "1m",
        "--instructions",
        &budget,
        "--json",
    ]);
    let records = json_lines(&shared);
    let sharer = of_type(&records, "ets_shared").into_iter().find(|r| r["task"] == task.as_str()).unwrap();
    assert_eq!(sharer["records"].as_u64(), Some(accesses));
    assert_eq!(sharer["instructions"].as_u64(), Some(fetches));
}

#[test]
fn shared_reports_each_sharer_per_partition_and_refuses_bad_groups() {
    let out = smartcon(&[
        "ets",
        "shared",
        "--pairs",
        "loop:512k+stream,loop:384k+loop:384k",
        "--llc",
        "1m",
        "--instructions",
        "4000000",
        "--json",
    ]);
    let records = json_lines(&out);
    let sharers = of_type(&records, "ets_shared");
    assert_eq!(sharers.len(), 8, "2 groups x 2 sharers x 2 partitions");
    for partition in ["ways", "global"] {
        let mine: Vec<_> = sharers.iter().filter(|r| r["partition"] == partition).collect();
        // The stream never reuses a line: no CS misses and no estimate, whatever its
        // neighbour's count; the loop that fits its share has them.
        let stream = mine.iter().find(|r| r["task"] == "stream").unwrap();
        assert_eq!((stream["cs_misses_exact"].as_u64(), stream["cs_misses_estimated"].as_u64()), (Some(0), Some(0)));
        assert!(stream["estimation_error_pct"].is_null());
        let the_loop = mine.iter().find(|r| r["task"] == "loop:512k").unwrap();
        assert!(the_loop["cs_misses_exact"].as_u64().unwrap() > 0, "{the_loop}");
        assert_eq!(the_loop["sharing_with"], serde_json::json!(["stream"]));
        let summary =
            of_type(&records, "ets_shared_summary").into_iter().find(|s| s["partition"] == partition).unwrap();
        assert_eq!(summary["sharers"].as_u64(), Some(4));
        assert_eq!(summary["estimation_sharers"].as_u64(), Some(3));
    }
    for (args, needle) in [
        (vec!["ets", "shared", "--pairs", "loop:1m"], "2 to 8 tasks"),
        (vec!["ets", "shared", "--partition", "lru"], "--partition"),
        (vec!["ets", "shared", "--llc", "3m"], "--llc"),
        (vec!["ets", "shared", "--slice", "0"], "--slice"),
        (vec!["ets", "shared", "--pairs", "loop:1m+loop:1m+loop:1m", "--partition", "ways"], "split evenly"),
    ] {
        let out = smartcon(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
}
