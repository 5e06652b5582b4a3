//! A port's `sync` wait is the plain pread, which is the library's own interposed function.
//! That call is the library's, not the program's: it goes to the real pread at once and is
//! not counted as passed through. (Before, every inline read on a very fast device went
//! through the interposer twice and its record said "passed through (reentrant)" once per
//! I/O it had taken: 24,414 of 24,414 for dd over zram in seed 001's reader step.)

mod common;

use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Command;

use common::*;
use smartcon_engine::decision::{DeviceClass, Strategy};
use smartcon_engine::profile::Profile;
use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};

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
    // The device as the library will name it, and a profile there that makes smart read
    // inline (`sync`, the very fast device's branch) whatever the machine's load.
    let f = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(&file).unwrap();
    let options = SmartPortOptions { strategy: StrategyChoice::Fixed(Strategy::Block), ..Default::default() };
    let device = SmartPort::open(f.as_raw_fd(), options).unwrap().device_id().to_string();
    drop(f);
    let home = dir.join("home");
    // The name smartcon_engine::profile::profile_path gives the device's profile.
    let name: String =
        device.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c } else { '_' }).collect();
    let profile = Profile { class: DeviceClass::VeryFast, ..Profile::paper_default(&device) };
    profile.save(&home.join("profiles").join(format!("{name}.json"))).unwrap();
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
