//! A port's `sync` wait is the plain pread, which is the library's own interposed function.
//! That call is the library's, not the program's: it goes to the real pread at once and is
//! not counted as passed through. (Before, every inline read on a very fast device went
//! through the interposer twice and its record said "passed through (reentrant)" once per
//! I/O it had taken: 24,414 of 24,414 for dd over zram in seed 001's reader step.)

mod common;

use std::process::Command;

use common::*;

/// Blocks dd reads.
const BLOCKS: u64 = 64;

#[test]
fn smarts_inline_reads_are_taken_once_and_not_counted_as_passed_through() {
    if Command::new("dd").arg("--version").output().is_err() {
        eprintln!("skipped: dd is not installed");
        return;
    }
    let dir = temp_dir("sync-path");
    if !direct_io_works(&dir) {
        eprintln!("skipped: {} refuses O_DIRECT", dir.display());
        return;
    }
    let file = dir.join("data");
    std::fs::write(&file, vec![7u8; (BLOCKS * 4096) as usize]).unwrap();
    // A profile of the file's device that makes smart read inline (`sync`, the very fast
    // device's branch) whatever the machine's load.
    let home = home_where_smart_reads_inline(&dir, &file);
    let stats = dir.join("stats.jsonl");
    let mut dd = Command::new("dd");
    dd.arg(format!("if={}", file.display()))
        .args(["of=/dev/null", "bs=4096", "iflag=direct", &format!("count={BLOCKS}")])
        .env("SMARTCON_HOME", &home);
    let out = run_preloaded(&mut dd, "smart", &stats);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let recs = records(&stats);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    assert_eq!(r["ios"].as_u64(), Some(BLOCKS), "{r}");
    assert_eq!(r["by_strategy"]["sync"].as_u64(), Some(BLOCKS), "every read inline: {r}");
    assert_eq!(r["passed_through"].as_u64(), Some(0), "the library's own plain calls counted as the program's: {r}");
    let _ = std::fs::remove_dir_all(&dir);
}
