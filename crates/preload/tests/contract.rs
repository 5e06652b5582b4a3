//! The system call contract under the library, call by call.
//!
//! c/contract.c does every operation twice with the same arguments: on one file through
//! libc (the library's wrappers when preloaded) and on an identical copy through
//! syscall(2), which no preload can reach, and reports each disagreement in result, errno,
//! offset or data (threads, signals, fork, dup, O_APPEND, end of file and unaligned
//! O_DIRECT included). It must report none, print the same transcript with and without the
//! library, and the library must actually have taken its I/O.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// A C compiler, or `None` after saying that the test skips.
fn c_compiler() -> Option<String> {
    let cc = cc();
    if cc.is_none() {
        eprintln!("skipped: no C compiler (cc, gcc or clang) on PATH");
    }
    cc
}

/// A fresh directory on a file system that takes O_DIRECT, or `None` after saying that the
/// test skips.
fn direct_dir(name: &str) -> Option<PathBuf> {
    let dir = temp_dir(name);
    if !direct_io_works(&dir) {
        eprintln!("skipped: {} refuses O_DIRECT", dir.display());
        return None;
    }
    Some(dir)
}

/// The comparison every contract program is held to: `program()` (a fresh command each
/// time) passes without the library; under it with `strategy` it reports no MISMATCH,
/// succeeds, and prints the same transcript. Returns the transcript and the library's
/// records (written to DIR/stats.jsonl).
fn with_and_without_the_library(
    what: &str,
    strategy: &str,
    dir: &Path,
    program: impl Fn() -> Command,
) -> (String, Vec<serde_json::Value>) {
    let plain = program().output().unwrap_or_else(|e| panic!("run {what}: {e}"));
    let plain_out = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert!(
        plain.status.success(),
        "{what} fails even without the library:\n{plain_out}{}",
        String::from_utf8_lossy(&plain.stderr)
    );
    let stats = dir.join("stats.jsonl");
    let pre = run_preloaded(&mut program(), strategy, &stats);
    let pre_out = String::from_utf8_lossy(&pre.stdout);
    let mismatches: Vec<&str> = pre_out.lines().filter(|l| l.starts_with("MISMATCH")).collect();
    assert!(mismatches.is_empty(), "under {strategy} the contract broke:\n{}", mismatches.join("\n"));
    assert!(
        pre.status.success(),
        "under {strategy}: {:?}\n{pre_out}\n{}",
        pre.status,
        String::from_utf8_lossy(&pre.stderr)
    );
    assert_eq!(plain_out, pre_out, "the transcript differs with the library");
    (plain_out, records(&stats))
}

fn contract_under(strategy: &str) {
    let Some(cc) = c_compiler() else { return };
    let Some(dir) = direct_dir(&format!("contract-{strategy}")) else { return };
    let exe = compile(&cc, "contract.c", &dir, &[]);
    let (_, recs) = with_and_without_the_library("contract", strategy, &dir, || {
        let mut c = Command::new(&exe);
        c.arg(&dir);
        c
    });
    // The parent and the forked child each wrote a record; the child did its own I/O.
    assert!(recs.len() >= 2, "expected the parent's and the child's records, got {recs:?}");
    let ios = total(&recs, "ios");
    // Thousands of positional reads (threads, the signal loop) plus the single calls.
    assert!(ios >= 3000, "only {ios} I/Os were taken");
    assert!(recs.iter().filter(|r| r["ios"].as_u64() == Some(100)).count() == 1, "the child's 100 preads: {recs:?}");
    // Unaligned buffers, offsets and lengths went to the real call (and got its EINVAL).
    assert!(total(&recs, "passed_through") >= 5, "unaligned calls were not passed through: {recs:?}");
    let by: u64 = recs
        .iter()
        .flat_map(|r| r["by_strategy"].as_object().cloned().unwrap_or_default())
        .map(|(_, v)| v.as_u64().unwrap_or(0))
        .sum();
    assert_eq!(by, ios, "every taken I/O has a strategy");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_contract_holds_under_smart() {
    contract_under("smart");
}

#[test]
fn the_contract_holds_under_spin() {
    contract_under("spin");
}

#[test]
fn the_contract_holds_under_block() {
    contract_under("block");
}

/// Without SMARTCON_PRELOAD_STRATEGY the library is inert: nothing taken, no record.
#[test]
fn the_library_is_inert_without_a_strategy() {
    let Some(cc) = c_compiler() else { return };
    let Some(dir) = direct_dir("inert") else { return };
    let exe = compile(&cc, "contract.c", &dir, &[]);
    let stats = dir.join("stats.jsonl");
    let out = Command::new(&exe)
        .arg(&dir)
        .env("LD_PRELOAD", library())
        .env("SMARTCON_PRELOAD_STATS", &stats)
        .output()
        .expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!stats.exists(), "an inert library wrote a record");
    let _ = std::fs::remove_dir_all(&dir);
}

/// SMARTCON_PRELOAD_INHERIT=0: the program's own I/O is taken, but a program it executes
/// runs untouched (the variables are gone from its environment).
#[test]
fn exec_drops_the_library_when_asked() {
    let dir = temp_dir("inherit");
    let stats = dir.join("stats.jsonl");
    let out = Command::new("sh")
        .args(["-c", "env | grep -c '^SMARTCON_PRELOAD_\\|^LD_PRELOAD=' || true"])
        .env("LD_PRELOAD", library())
        .env("SMARTCON_PRELOAD_STRATEGY", "smart")
        .env("SMARTCON_PRELOAD_STATS", &stats)
        .env("SMARTCON_PRELOAD_INHERIT", "0")
        .output()
        .expect("run sh");
    // sh and its forks loaded the library (their records, the forks' written as they
    // executed env and grep); env and grep ran without it: no pid has a second record.
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "the variables reached the child");
    assert!(!records(&stats).is_empty(), "sh wrote no record");
    assert!(!a_pid_executed_under_the_library(&records(&stats)), "{:?}", records(&stats));

    let stats2 = dir.join("stats2.jsonl");
    let out = Command::new("sh")
        .args(["-c", "env | grep -c '^SMARTCON_PRELOAD_STRATEGY=smart$'"])
        .env("LD_PRELOAD", library())
        .env("SMARTCON_PRELOAD_STRATEGY", "smart")
        .env("SMARTCON_PRELOAD_STATS", &stats2)
        .output()
        .expect("run sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "1", "carried on by default");
    // A fork of sh wrote at exec, then the program it executed wrote again: same pid.
    assert!(a_pid_executed_under_the_library(&records(&stats2)), "{:?}", records(&stats2));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Whether some pid wrote two records: an image before exec and the program after it.
fn a_pid_executed_under_the_library(recs: &[serde_json::Value]) -> bool {
    let mut pids: Vec<u64> = recs.iter().filter_map(|r| r["pid"].as_u64()).collect();
    let n = pids.len();
    pids.sort_unstable();
    pids.dedup();
    pids.len() < n
}

/// preadv2/pwritev2 (c/contract_v2.c): flags 0 and RWF_HIPRI taken, RWF_NOWAIT, RWF_DSYNC
/// and several buffers passed through, each call's result, errno, offset and data the raw
/// system call's. Before the library took them, none was taken (`ios` was 0).
fn contract_v2_under(strategy: &str) {
    let Some(cc) = c_compiler() else { return };
    let Some(dir) = direct_dir(&format!("contract-v2-{strategy}")) else { return };
    let exe = compile(&cc, "contract_v2.c", &dir, &[]);
    let (_, recs) = with_and_without_the_library("contract_v2", strategy, &dir, || {
        let mut c = Command::new(&exe);
        c.arg(&dir);
        c
    });
    // 1,200 reads and 1,200 writes with each of flags 0 and RWF_HIPRI, plus the single calls.
    let ios = total(&recs, "ios");
    assert!(ios >= 4800, "only {ios} preadv2/pwritev2 calls were taken: {recs:?}");
    assert!(total(&recs, "hipri") >= 2400, "RWF_HIPRI calls not counted: {recs:?}");
    let by = |reason: &str| recs.iter().map(|r| r["passed_through_by"][reason].as_u64().unwrap_or(0)).sum::<u64>();
    assert!(by("rwf_flags") >= 1200, "RWF_NOWAIT calls were not passed through by reason: {recs:?}");
    assert!(by("vectored") >= 2, "two-buffer calls: {recs:?}");
    // The raw system calls of the other side were seen and named, not taken.
    let raw: u64 = recs.iter().map(|r| r["not_taken"]["raw_syscall"].as_u64().unwrap_or(0)).sum();
    assert!(raw >= 6000, "the syscall(2) side was not named: {recs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_preadv2_contract_holds_under_smart() {
    contract_v2_under("smart");
}

#[test]
fn the_preadv2_contract_holds_under_spin() {
    contract_v2_under("spin");
}

#[test]
fn the_preadv2_contract_holds_under_block() {
    contract_v2_under("block");
}

/// libaio (c/contract_aio.c): requests on O_DIRECT descriptors with aio_rw_flags 0 and
/// RWF_HIPRI are taken (their io_getevents wait is the strategy's; the kernel does the I/O),
/// RWF_NOWAIT and eventfd requests pass through, and every request's result, every call's
/// return and the data are the raw system calls'. Before, none was taken (`ios` was 0 and
/// every request was named as libaio).
fn contract_aio_under(strategy: &str) {
    let Some(cc) = c_compiler() else { return };
    let Some(dir) = direct_dir(&format!("contract-aio-{strategy}")) else { return };
    let Some(exe) = compile_with_libaio(&cc, "contract_aio.c", &dir) else { return };
    let (_, recs) = with_and_without_the_library("contract_aio", strategy, &dir, || {
        let mut c = Command::new(&exe);
        c.arg(&dir);
        c
    });
    // 1,200 reads and 1,200 writes with each of flags 0 and RWF_HIPRI, plus the single ones.
    let ios = total(&recs, "ios");
    assert!(ios >= 4800, "only {ios} libaio requests were taken: {recs:?}");
    assert!(total(&recs, "hipri") >= 2400, "RWF_HIPRI requests not counted: {recs:?}");
    let waited = |s: &str| recs.iter().map(|r| r["by_strategy"][s].as_u64().unwrap_or(0)).sum::<u64>();
    match strategy {
        "spin" => assert_eq!(waited("spin"), ios, "spin polls every taken request's ring: {recs:?}"),
        "block" => assert_eq!(waited("block"), ios, "{recs:?}"),
        _ => assert_eq!(waited("spin") + waited("block"), ios, "smart decides every request: {recs:?}"),
    }
    // The RWF_NOWAIT reads and the eventfd request were named, and so was the raw side.
    let libaio: u64 = recs.iter().map(|r| r["not_taken"]["libaio"].as_u64().unwrap_or(0)).sum();
    assert!(libaio >= 1200 + 6000, "RWF_NOWAIT and the syscall(2) side were not named as libaio: {recs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Compiles `source` linked with libaio, or says why it skips (no libaio.h or libaio.so).
fn compile_with_libaio(cc: &str, source: &str, dir: &Path) -> Option<PathBuf> {
    let probe = Command::new(cc)
        .args(["-x", "c", "-o"])
        .arg(dir.join("probe-libaio"))
        .args(["-", "-laio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin
                .take()
                .expect("stdin")
                .write_all(b"#include <libaio.h>\nint main(void){io_context_t c=0;return io_setup(1,&c);}\n")?;
            c.wait()
        });
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("skipped: libaio's header or library is missing (apt-get install libaio-dev)");
        return None;
    }
    Some(compile(cc, source, dir, &["-laio"]))
}

#[test]
fn the_libaio_contract_holds_under_smart() {
    contract_aio_under("smart");
}

#[test]
fn the_libaio_contract_holds_under_spin() {
    contract_aio_under("spin");
}

#[test]
fn the_libaio_contract_holds_under_block() {
    contract_aio_under("block");
}

/// The same contract from Python (python/contract.py): os.preadv/os.pwritev with flags 0,
/// RWF_HIPRI and RWF_NOWAIT (CPython's preadv2/pwritev2) and libaio through ctypes, against
/// syscall(2). Identical transcripts; over 1,000 of each taken kind counted.
fn contract_python_under(strategy: &str) {
    let python = ["python3", "python"].into_iter().find(|p| {
        Command::new(p).args(["-c", "import os; os.preadv; os.RWF_HIPRI"]).output().is_ok_and(|o| o.status.success())
    });
    let Some(python) = python else {
        eprintln!("skipped: no python3 with os.preadv and RWF_HIPRI (Python 3.7+ on Linux)");
        return;
    };
    let Some(dir) = direct_dir(&format!("contract-py-{strategy}")) else { return };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/contract.py");
    let (plain_out, recs) = with_and_without_the_library("contract.py", strategy, &dir, || {
        let mut c = Command::new(python);
        c.arg(&script).arg(&dir);
        c
    });
    let ios = total(&recs, "ios");
    let libaio = !plain_out.contains("libaio: skipped");
    // preadv2 reads and pwritev2 writes with flags 0 and RWF_HIPRI: 4 x 1,200; libaio the same.
    let want = if libaio { 9600 } else { 4800 };
    assert!(ios >= want, "only {ios} of {want} were taken: {recs:?}");
    assert!(total(&recs, "hipri") >= want / 2, "RWF_HIPRI calls not counted: {recs:?}");
    let by = |reason: &str| recs.iter().map(|r| r["passed_through_by"][reason].as_u64().unwrap_or(0)).sum::<u64>();
    assert!(by("rwf_flags") >= 1200, "RWF_NOWAIT calls were not passed through by reason: {recs:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_python_contract_holds_under_smart() {
    contract_python_under("smart");
}

#[test]
fn the_python_contract_holds_under_spin() {
    contract_python_under("spin");
}

#[test]
fn the_python_contract_holds_under_block() {
    contract_python_under("block");
}
