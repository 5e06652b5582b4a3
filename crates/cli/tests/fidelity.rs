//! The pieces added for docs/fidelity.md, as a user runs them: `io --no-pause` spins
//! without the PAUSE hint and still completes its I/O; `evaluate --study window` refuses
//! the flags it does not take with exit 2 and one line, and its quick run prints one row
//! per window (50 to 1,000 ms, SmartCon Sec. 4.2) with the truth it measured, and writes
//! the same table to its `--out` report.

use std::process::{Command, Output};

/// A scratch directory, removed when dropped (also when the test panics).
fn scratch(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new().prefix(&format!("smartcon-fidelity-{name}-")).tempdir().unwrap()
}

fn run(args: &[&str]) -> Output {
    let home = scratch("home");
    Command::new(env!("CARGO_BIN_EXE_smartcon")).env("SMARTCON_HOME", home.path()).args(args).output().unwrap()
}

#[test]
fn io_without_pause_spins_and_completes() {
    for pause in [false, true] {
        let mut args = vec!["io", "--target", "emu:nvram", "--strategy", "spin", "--duration", "100ms", "--json"];
        if !pause {
            args.push("--no-pause");
        }
        let out = run(&args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let record: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
        assert!(record["ios"].as_u64().unwrap() > 0, "pause {pause}: {stdout}");
        // Spinning: every I/O was waited for by the spin branch, none slept.
        assert_eq!(record["decisions"]["by_strategy"]["spin"].as_u64(), record["ios"].as_u64(), "{stdout}");
    }
}

#[test]
fn window_study_refuses_other_flags_with_exit_2() {
    for extra in [["--tiny"].as_slice(), &["--targets", "emu:nvme"], &["--paper-loads"]] {
        let mut args = vec!["evaluate", "--study", "window"];
        args.extend_from_slice(extra);
        let out = run(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("--study window"), "{err}");
    }
}

/// Regression: `--study window` ignored `--out` (neither refused nor used); it writes its
/// report there now, the table it printed.
#[test]
fn window_study_prints_a_row_per_window_and_writes_its_report_to_out() {
    let dir = scratch("window");
    let out_dir = dir.path().join("report");
    let out = run(&["evaluate", "--study", "window", "--quick", "--out", out_dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(stdout.starts_with(&summary), "the printed table is the report's: {stdout}");
    let rows = std::fs::read_to_string(out_dir.join("results.jsonl")).unwrap();
    assert_eq!(rows.lines().filter(|l| l.contains("\"window_row\"")).count(), 5, "{rows}");
    // A second run refuses the now non-empty report directory with one line, exit 2.
    let again = run(&["evaluate", "--study", "window", "--quick", "--out", out_dir.to_str().unwrap()]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&again.stderr).lines().count(), 1);
    assert!(stdout.contains("truth (/proc/stat"), "{stdout}");
    for w in ["| 50 ms |", "| 100 ms |", "| 200 ms |", "| 500 ms |", "| 1000 ms |"] {
        let row = stdout.lines().find(|l| l.starts_with(w)).unwrap_or_else(|| panic!("no row {w}: {stdout}"));
        // Two quick cycles leave 2 x 2 phases of 1 s steady readings every 10 ms: at least
        // one reading per phase, whatever the machine's load.
        let readings: usize = row.split('|').nth(2).unwrap().trim().parse().unwrap();
        assert!(readings >= 4, "{row}");
    }
}
