//! read(2)/write(2) under the library leave the file offset and the data exactly as the
//! real calls do, whichever way the port waits.
//!
//! The library does an interposed read/write on a taken descriptor at the file offset
//! through its port: under `sync` (and smart's inline choice) read(2)/write(2) themselves,
//! under a ring wait an lseek, a positional I/O and an lseek past it (io_uring's own
//! "current position", offset -1, is not advanced for an O_DIRECT request that completes
//! asynchronously, which is how a disk completes: a port relying on it leaves the offset
//! behind, and every check below after the first read reports it).
//!
//! c/offset.c makes each call on one file through libc and on an identical copy through
//! syscall(2) and compares results, errno, data and offsets after every call (reads in a
//! row, the program's lseeks between them, writes read back, a short read at end of file,
//! reads past it, misaligned O_DIRECT offset, buffer and length refused with EINVAL and the
//! offset unchanged), then the files. It must report no mismatch and print the same
//! transcript with and without the library, and the library must have taken its calls.

mod common;

use std::process::Command;

use common::*;

/// Runs c/offset.c under the library with `strategy` (`sync`: smart on a device profiled
/// very fast, every I/O inline).
fn offsets_under(strategy: &str) {
    let Some(cc) = cc() else {
        eprintln!("skipped: no C compiler (cc, gcc or clang) on PATH");
        return;
    };
    let dir = temp_dir(&format!("offset-{strategy}"));
    if !direct_io_works(&dir) {
        eprintln!("skipped: {} refuses O_DIRECT", dir.display());
        return;
    }
    let exe = compile(&cc, "offset.c", &dir, &[]);
    let plain = Command::new(&exe).arg(&dir).output().expect("run offset");
    let plain_out = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(plain.status.success(), "offset fails even without the library:\n{plain_out}");
    let stats = dir.join("stats.jsonl");
    let mut cmd = Command::new(&exe);
    cmd.arg(&dir);
    let pre = if strategy == "sync" {
        // A file in `dir`, so the device is the one the program's files are on.
        let probe = dir.join("probe");
        std::fs::write(&probe, vec![0u8; 4096]).unwrap();
        cmd.env("SMARTCON_HOME", home_where_smart_reads_inline(&dir, &probe));
        run_preloaded(&mut cmd, "smart", &stats)
    } else {
        cmd.env("SMARTCON_HOME", dir.join("home"));
        run_preloaded(&mut cmd, strategy, &stats)
    };
    let pre_out = String::from_utf8_lossy(&pre.stdout).into_owned();
    let mismatches: Vec<&str> = pre_out.lines().filter(|l| l.starts_with("MISMATCH")).collect();
    assert!(mismatches.is_empty(), "under {strategy}:\n{}", mismatches.join("\n"));
    assert!(
        pre.status.success(),
        "under {strategy}: {:?}\n{pre_out}\n{}",
        pre.status,
        String::from_utf8_lossy(&pre.stderr)
    );
    assert_eq!(plain_out, pre_out, "under {strategy} the transcript differs from the real calls'");
    let taken: u64 = pre_out
        .lines()
        .find_map(|l| l.strip_prefix("taken: "))
        .and_then(|n| n.parse().ok())
        .expect("the program's count of calls to be taken");
    let recs = records(&stats);
    assert_eq!(recs.len(), 1, "{recs:?}");
    let r = &recs[0];
    // The aligned calls went through the port (one more if the read at the misaligned end
    // of file did: it is 0 bytes, which O_DIRECT allows there).
    let ios = r["ios"].as_u64().unwrap_or(0);
    assert!((taken..=taken + 1).contains(&ios), "{ios} I/Os taken, expected {taken}: {r}");
    // The four misaligned calls (offset twice, buffer, length) got the kernel's EINVAL
    // through the real call; the port's own plain calls were not counted as the program's.
    assert_eq!(r["passed_through"].as_u64(), Some(4), "{r}");
    if strategy != "smart" {
        assert_eq!(r["by_strategy"][strategy].as_u64(), Some(ios), "every I/O waited by {strategy}: {r}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn read_and_write_keep_the_offset_under_block() {
    offsets_under("block");
}

#[test]
fn read_and_write_keep_the_offset_under_spin() {
    offsets_under("spin");
}

#[test]
fn read_and_write_keep_the_offset_under_sync() {
    offsets_under("sync");
}

#[test]
fn read_and_write_keep_the_offset_under_smart() {
    offsets_under("smart");
}
