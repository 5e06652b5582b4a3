//! Regression tests for the CLI defects of issue 16 (items 3-6 and the "also" list): each
//! test runs the real binary on a scratch directory and pins one defect. Signal and device
//! tests need root (CI has it) and say why when they skip. No timing is asserted: waits are
//! bounded polls that only decide when to give up.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("smartcon-defects-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cmd(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_smartcon"));
    c.env("SMARTCON_HOME", home).args(args);
    c
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
    let dir = scratch("cachesize");
    let trace = dir.join("t.trace");
    let t = trace.to_str().unwrap();
    let out = smartcon(&dir, &["trace", "synth", "--kind", "loop", "--working-set", "64k", "--accesses", "1000", "--out", t]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_one_line_exit_2(&smartcon(&dir, &["cachesim", "--trace", t, "--ll", "1t,16"]), "--ll");
    assert_one_line_exit_2(&smartcon(&dir, &["cachesim", "--trace", t, "--l2", "64g,16"]), "maximum");
    assert_one_line_exit_2(&smartcon(&dir, &["ets", "--llc", "1t", "--quick"]), "--llc");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// "Also": `ets --threads 0` was accepted.
#[test]
fn ets_refuses_zero_threads() {
    let dir = scratch("threads");
    let out = dir.join("out");
    assert_one_line_exit_2(
        &smartcon(&dir, &["ets", "--threads", "0", "--quick", "--out", out.to_str().unwrap()]),
        "--threads",
    );
    assert!(!out.exists(), "nothing written");
    std::fs::remove_dir_all(&dir).unwrap();
}
