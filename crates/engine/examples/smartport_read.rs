//! Reads a file through a SmartPort and prints what the port decided.
//!
//! ```text
//! cargo run --release -p smartcon-engine --example smartport_read -- FILE [--bs BYTES] [--strategy NAME]
//! ```
//!
//! The file is opened with O_DIRECT (buffered, with a note, where the file system refuses
//! it) and read front to back in `--bs` chunks (default 4096) through one port, which
//! decides per read how to wait (default `smart`). Then: I/Os, bytes, how many reads took
//! each strategy and each branch of the decision, and the latency's p50 and p99.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::process::ExitCode;

use smartcon_engine::decision::{Reason, Strategy};
use smartcon_engine::smartport::{SmartPort, SmartPortOptions, StrategyChoice};
use smartcon_engine::target::AlignedBuf;

fn usage(msg: &str) -> ExitCode {
    eprintln!("smartport_read: {msg}");
    eprintln!("usage: smartport_read FILE [--bs BYTES] [--strategy {}]", StrategyChoice::names().join("|"));
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let (mut path, mut bs, mut strategy) = (None, 4096usize, StrategyChoice::Smart);
    while let Some(a) = args.next() {
        match a.to_str() {
            Some("--bs") => match args.next().and_then(|v| v.to_str()?.parse().ok()).filter(|&n: &usize| n > 0) {
                Some(n) => bs = n,
                None => return usage("--bs needs a positive byte count"),
            },
            Some("--strategy") => match args.next().and_then(|v| StrategyChoice::parse(v.to_str()?)) {
                Some(s) => strategy = s,
                None => return usage("unknown --strategy"),
            },
            _ if path.is_none() => path = Some(a),
            _ => return usage("one file only"),
        }
    }
    let Some(path) = path else { return usage("give a file to read") };
    let Ok(cpath) = CString::new(path.as_bytes()) else { return usage("the path has a NUL byte") };
    // SAFETY: a valid NUL-terminated path; the result is checked and the fd closed below.
    let mut fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDONLY | libc::O_DIRECT | libc::O_CLOEXEC) };
    if fd < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        eprintln!("note: the file system refuses O_DIRECT; reading buffered (the page cache may answer)");
        // SAFETY: as above.
        fd = unsafe { libc::open(cpath.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    }
    if fd < 0 {
        eprintln!("smartport_read: {}: {}", path.to_string_lossy(), std::io::Error::last_os_error());
        return ExitCode::from(2);
    }
    let code = read_all(fd, bs, strategy);
    // SAFETY: the fd is ours; the port (dropped inside read_all) never closes it.
    unsafe { libc::close(fd) };
    code
}

fn read_all(fd: libc::c_int, bs: usize, strategy: StrategyChoice) -> ExitCode {
    let options = SmartPortOptions { strategy, ..Default::default() };
    let mut port = match SmartPort::open(fd, options) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("smartport_read: {e}");
            return ExitCode::from(2);
        }
    };
    for note in port.notes() {
        eprintln!("note: {note}");
    }
    let mut buf = AlignedBuf::new(bs);
    let mut offset = 0u64;
    loop {
        match port.read_at(buf.as_mut_slice(), offset) {
            Ok(n) => {
                offset += n as u64;
                // A short read is the end of the file (under O_DIRECT the next offset
                // would not even be aligned).
                if n < bs {
                    break;
                }
            }
            Err(e) => {
                eprintln!("smartport_read: at offset {offset}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    let c = port.counters();
    println!(
        "device {}  direct {}  block {} B  strategy {}  thresholds {}",
        port.device_id(),
        port.direct(),
        port.block_bytes(),
        port.strategy().name(),
        port.profile_source()
    );
    println!("read {} bytes in {} I/Os of {bs} B", c.bytes, c.ios);
    for s in Strategy::ALL.iter().filter(|s| c.by_strategy[s.index()] > 0) {
        println!("  waited {:<10} {:>10} I/Os", s.name(), c.by_strategy[s.index()]);
    }
    for r in Reason::ALL.iter().filter(|r| c.by_reason[r.index()] > 0) {
        println!("  because {:<18} {:>10} I/Os", r.name(), c.by_reason[r.index()]);
    }
    if c.spin_fallbacks > 0 {
        println!("  spin budget ran out {} times", c.spin_fallbacks);
    }
    if c.ios > 0 {
        println!(
            "latency p50 {:.1} us  p99 {:.1} us",
            c.hist.value_at_quantile(0.5) as f64 / 1e3,
            c.hist.value_at_quantile(0.99) as f64 / 1e3
        );
    }
    ExitCode::SUCCESS
}
