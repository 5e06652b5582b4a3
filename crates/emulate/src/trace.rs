//! Trace formats a user already has: `blkparse` text output (blktrace) and fio's
//! `write_iolog` (versions 2 and 3).
//!
//! - blkparse (default output format): `MAJ,MIN CPU SEQ SEC.NSEC PID ACTION RWBS SECTOR +
//!   COUNT [PROCESS]`. The arrival is the issue to the driver (action `D`); a trace without
//!   `D` events (captured above the scheduler) uses the queue events (`Q`). Requests with no
//!   data (flushes, zero-length) and discards are skipped; the stream is the PID. The
//!   summary blkparse prints at the end (from a line starting `CPU` or `Total`) ends the
//!   events.
//! - fio v2 (`fio version 2 iolog`): `FILE ACTION [OFFSET LENGTH]`; `wait` lines (`FILE wait
//!   USEC`) advance the clock, so requests between waits arrive together.
//! - fio v3 (`fio version 3 iolog`): `USEC FILE ACTION [OFFSET LENGTH]`, the timestamp in
//!   microseconds since the start (fio's log_io_u writes utime_since_now).
//!   For fio, actions add/open/close, sync, datasync and trim are skipped; the stream is the
//!   file.
//!
//! Every line that is neither an event nor something documented as skipped is an error
//! naming its line number. Non-goals: blktrace's binary format (run blkparse first), and
//! merging, requeues or completions in the trace (the device model decides completions).

use std::collections::HashMap;
use std::fmt;

use smartcon_devemu::Op;

/// One I/O of a trace: when it arrives, relative to the trace's first I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceIo {
    pub arrival_ns: u64,
    pub op: Op,
    pub offset: u64,
    pub bytes: u64,
    pub stream: u32,
}

/// Which format a trace is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    Blkparse,
    FioV2,
    FioV3,
}

impl TraceFormat {
    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::FioV2 => "fio-iolog-v2",
            TraceFormat::FioV3 => "fio-iolog-v3",
        }
    }
}

/// A line the parser cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// 1-based; 0 when the problem is the whole file (empty, unreadable).
    pub line_number: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line_number == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line_number, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

fn bad(line_number: usize, message: impl Into<String>) -> TraceError {
    TraceError { line_number, message: message.into() }
}

/// A parsed trace: its I/Os sorted by arrival, and what was skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    pub ios: Vec<TraceIo>,
    pub skipped: u64,
}

/// Detects the format from the first meaningful line and parses.
pub fn parse(text: &str) -> Result<Trace, TraceError> {
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    match first {
        Some("fio version 2 iolog") => parse_fio(text, false),
        Some("fio version 3 iolog") => parse_fio(text, true),
        Some(l) if l.starts_with("fio version") => Err(bad(1, format!("unsupported fio iolog version {l:?}"))),
        Some(_) => parse_blkparse(text),
        None => Err(bad(0, "the trace is empty")),
    }
}

fn finish(format: TraceFormat, mut ios: Vec<TraceIo>, skipped: u64) -> Result<Trace, TraceError> {
    if ios.is_empty() {
        return Err(bad(0, format!("the {} trace has no reads or writes", format.name())));
    }
    // Stable: I/Os stamped with the same instant keep the trace's order.
    ios.sort_by_key(|io| io.arrival_ns);
    let t0 = ios[0].arrival_ns;
    for io in &mut ios {
        io.arrival_ns -= t0;
    }
    Ok(Trace { format, ios, skipped })
}

fn parse_u64(line_number: usize, what: &str, text: &str) -> Result<u64, TraceError> {
    text.parse().map_err(|_| bad(line_number, format!("{what} {text:?} is not a whole number")))
}

/// `SEC.NSEC` (blkparse prints nine digits) as ns.
fn parse_seconds_ns(line_number: usize, text: &str) -> Result<u64, TraceError> {
    let err = || bad(line_number, format!("time {text:?} is not SECONDS.NANOSECONDS"));
    let (s, frac) = text.split_once('.').unwrap_or((text, ""));
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return Err(err());
    }
    let secs: u64 = s.parse().map_err(|_| err())?;
    let frac_ns: u64 = if frac.is_empty() { 0 } else { format!("{frac:0<9}").parse().map_err(|_| err())? };
    secs.checked_mul(1_000_000_000).and_then(|n| n.checked_add(frac_ns)).ok_or_else(err)
}

/// blkparse text output.
pub fn parse_blkparse(text: &str) -> Result<Trace, TraceError> {
    // (action, io) for every read/write event; pick D or Q after the pass.
    let mut events: Vec<(u8, TraceIo)> = Vec::new();
    let mut skipped = 0;
    for (index, raw) in text.lines().enumerate() {
        let n = index + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if line.starts_with("CPU") || line.starts_with("Total") {
            break; // the summary
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let dev_ok = f[0].split_once(',').is_some_and(|(a, b)| a.parse::<u32>().is_ok() && b.parse::<u32>().is_ok());
        if !dev_ok {
            return Err(bad(n, format!("not a blkparse event (expected MAJ,MIN first): {line:?}")));
        }
        if f.len() < 7 {
            return Err(bad(n, "a blkparse event needs at least 7 fields"));
        }
        let time_ns = parse_seconds_ns(n, f[3])?;
        let pid = parse_u64(n, "pid", f[4])? as u32;
        let action = f[5];
        let rwbs = f[6];
        if action != "D" && action != "Q" {
            continue; // other stages of the same requests
        }
        let op = if rwbs.contains('D') {
            None // discard
        } else if rwbs.contains('W') {
            Some(Op::Write)
        } else if rwbs.contains('R') {
            Some(Op::Read)
        } else {
            None
        };
        // Data requests carry `SECTOR + COUNT`; flushes may not.
        let (Some(op), true) = (op, f.len() >= 10 && f[8] == "+") else {
            skipped += 1;
            continue;
        };
        let sector = parse_u64(n, "sector", f[7])?;
        let count = parse_u64(n, "sector count", f[9])?;
        if count == 0 {
            skipped += 1;
            continue;
        }
        let io = TraceIo { arrival_ns: time_ns, op, offset: sector * 512, bytes: count * 512, stream: pid };
        events.push((action.as_bytes()[0], io));
    }
    let use_d = events.iter().any(|(a, _)| *a == b'D');
    let want = if use_d { b'D' } else { b'Q' };
    let ios: Vec<TraceIo> = events.iter().filter(|(a, _)| *a == want).map(|(_, io)| *io).collect();
    finish(TraceFormat::Blkparse, ios, skipped)
}

/// fio write_iolog v2 or v3.
pub fn parse_fio(text: &str, v3: bool) -> Result<Trace, TraceError> {
    let format = if v3 { TraceFormat::FioV3 } else { TraceFormat::FioV2 };
    let mut streams: HashMap<String, u32> = HashMap::new();
    let mut ios = Vec::new();
    let mut skipped = 0;
    let mut clock_ns: u64 = 0;
    let mut header_seen = false;
    for (index, raw) in text.lines().enumerate() {
        let n = index + 1;
        let line = raw.trim();
        if line.is_empty() {
            continue;
        }
        if !header_seen {
            header_seen = true; // parse() checked it
            continue;
        }
        let mut f: Vec<&str> = line.split_whitespace().collect();
        if v3 {
            let us = parse_u64(n, "timestamp (us)", f[0])?;
            clock_ns = us.checked_mul(1_000).ok_or_else(|| bad(n, "timestamp too large"))?;
            f.remove(0);
        }
        if f.len() < 2 {
            return Err(bad(n, "expected FILE ACTION [OFFSET LENGTH]"));
        }
        let next = streams.len() as u32;
        let stream = *streams.entry(f[0].to_string()).or_insert(next);
        let op = match f[1] {
            "read" => Op::Read,
            "write" => Op::Write,
            "add" | "open" | "close" | "sync" | "datasync" | "trim" => {
                skipped += 1;
                continue;
            }
            "wait" if !v3 => {
                let us = parse_u64(n, "wait (us)", f.get(2).copied().unwrap_or(""))?;
                clock_ns += us * 1_000;
                continue;
            }
            other => return Err(bad(n, format!("unknown fio iolog action {other:?}"))),
        };
        if f.len() != 4 {
            return Err(bad(n, format!("{} needs OFFSET LENGTH", f[1])));
        }
        let offset = parse_u64(n, "offset", f[2])?;
        let bytes = parse_u64(n, "length", f[3])?;
        if bytes == 0 {
            return Err(bad(n, "zero-length I/O"));
        }
        ios.push(TraceIo { arrival_ns: clock_ns, op, offset, bytes, stream });
    }
    finish(format, ios, skipped)
}

/// Reads and parses a trace file.
pub fn load(path: &std::path::Path) -> Result<Trace, TraceError> {
    let text = std::fs::read_to_string(path).map_err(|e| bad(0, format!("cannot read {}: {e}", path.display())))?;
    parse(&text).map_err(|e| TraceError { message: format!("{}: {}", path.display(), e.message), ..e })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLK: &str = "\
  8,0    1        1     0.000000000  4162  Q   R 2048 + 8 [fio]
  8,0    1        2     0.000001200  4162  G   R 2048 + 8 [fio]
  8,0    1        3     0.000002500  4162  D   R 2048 + 8 [fio]
  8,0    1        4     0.000090000  4162  C   R 2048 + 8 [0]
  8,0    0        5     0.000100000  4163  D  WS 4096 + 16 [kworker]
  8,0    0        6     0.000100500  4163  D  FN [kworker]
  8,0    0        7     0.000200000  4163  D   D 8192 + 8 [fstrim]

CPU0 (8,0):
 Reads Queued:           1,        4KiB\t Writes Queued:           0,        0KiB
";

    #[test]
    fn blkparse_takes_driver_issues_and_skips_flushes_and_discards() {
        let t = parse(BLK).unwrap();
        assert_eq!(t.format, TraceFormat::Blkparse);
        assert_eq!(
            t.ios,
            vec![
                TraceIo { arrival_ns: 0, op: Op::Read, offset: 2048 * 512, bytes: 4096, stream: 4162 },
                TraceIo { arrival_ns: 97_500, op: Op::Write, offset: 4096 * 512, bytes: 8192, stream: 4163 },
            ]
        );
        assert_eq!(t.skipped, 2);
        // Without D events the queue events are the arrivals.
        let q_only: String = BLK.lines().filter(|l| !l.contains(" D ")).collect::<Vec<_>>().join("\n");
        assert_eq!(parse(&q_only).unwrap().ios.len(), 1);
    }

    #[test]
    fn blkparse_bad_lines_name_their_number() {
        let e = parse("  8,0 1 1 0.0 1 D R 8 + 8 [x]\n  8,0 1 2 zero 1 D R 8 + 8 [x]\n").unwrap_err();
        assert_eq!(e.line_number, 2);
        let e = parse("  8,0 1 1 0.0 1 D R 8 + 8 [x]\nhello world\n").unwrap_err();
        assert_eq!(e.line_number, 2);
        let e = parse("  8,0 1 1 0.0 1 D R x + 8 [x]\n").unwrap_err();
        assert_eq!(e.line_number, 1);
        assert!(parse("\n\n").is_err());
    }

    #[test]
    fn fio_v2_waits_and_v3_timestamps() {
        let v2 = "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb read 0 4096\n/dev/sdb wait 250\n\
                  /dev/sdb write 8192 4096\n/dev/sdb close\n";
        let t = parse(v2).unwrap();
        assert_eq!(t.format, TraceFormat::FioV2);
        assert_eq!(t.ios.len(), 2);
        assert_eq!((t.ios[1].arrival_ns, t.ios[1].op, t.ios[1].offset), (250_000, Op::Write, 8192));
        let v3 = "fio version 3 iolog\n2 f add\n872 f open\n878 f write 0 16384\n888 g read 4096 4096\n\
                  10001677 f close\n";
        let t = parse(v3).unwrap();
        assert_eq!(t.format, TraceFormat::FioV3);
        assert_eq!(t.ios[0].arrival_ns, 0);
        assert_eq!(t.ios[1].arrival_ns, 10_000);
        assert_ne!(t.ios[0].stream, t.ios[1].stream);
        assert_eq!(parse("fio version 3 iolog\n1 f read 0\n").unwrap_err().line_number, 2);
        assert_eq!(parse("fio version 3 iolog\n1 f read 0 4096\nx f read 0 4096\n").unwrap_err().line_number, 3);
        assert_eq!(parse("fio version 2 iolog\nf frobnicate 0 1\n").unwrap_err().line_number, 2);
        assert!(parse("fio version 9 iolog\n").is_err());
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    #[test]
    fn load_names_the_file_and_replays_end_to_end() {
        let dir = std::env::temp_dir().join(format!("smartcon-emulate-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.iolog");
        std::fs::write(&path, "fio version 3 iolog\n0 f add\n10 f write 0 4096\n20 f write 4096 4096\n30 f oops\n")
            .unwrap();
        let e = load(&path).unwrap_err();
        assert_eq!(e.line_number, 5);
        assert!(e.to_string().contains("t.iolog") && e.to_string().starts_with("line 5"), "{e}");
        std::fs::write(&path, "fio version 3 iolog\n0 f add\n10 f write 0 4096\n5000 f write 4096 4096\n").unwrap();
        let t = load(&path).unwrap();
        let spec = smartcon_devemu::parse_spec("emu:sdcard").unwrap();
        let run = crate::replay::run_virtual(&spec, &crate::replay::Workload::Trace(t.ios), false).unwrap();
        // The second write starts where the first ended (sequential) after an idle gap.
        assert_eq!(run.by_op.write.lat_ns_max, 1_160_100);
        assert_eq!(run.by_op.write.ios, 2);
        assert_eq!(run.sim_ns, 4_990_000 + 11_500);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
