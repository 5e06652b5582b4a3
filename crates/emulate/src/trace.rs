//! Trace formats a user already has, read as a stream: `blkparse` text output (blktrace),
//! fio's `write_iolog` (versions 2 and 3), and the public block-trace CSVs of MSR Cambridge
//! (SNIA IOTTA), Alibaba cloud block storage and Tencent cloud block storage (SNIA IOTTA).
//!
//! - blkparse (default output format): `MAJ,MIN CPU SEQ SEC.NSEC PID ACTION RWBS SECTOR +
//!   COUNT [PROCESS]`. The arrival is the issue to the driver (action `D`); a trace without
//!   `D` events in its first [`DETECT_LINES`] lines (captured above the scheduler) uses the
//!   queue events (`Q`). Requests with no data (flushes, zero-length) and discards are
//!   skipped; the stream is the PID, the device `MAJ,MIN`. The summary blkparse prints at
//!   the end (from a line starting `CPU` or `Total`) ends the events.
//! - fio v2 (`fio version 2 iolog`): `FILE ACTION [OFFSET LENGTH]`; `wait` lines (`FILE wait
//!   USEC`) advance the clock, so requests between waits arrive together.
//! - fio v3 (`fio version 3 iolog`): `USEC FILE ACTION [OFFSET LENGTH]`, the timestamp in
//!   microseconds since the start (fio's log_io_u writes utime_since_now).
//!   For fio, actions add/open/close, sync, datasync and trim are skipped; the stream and
//!   the device are the file.
//! - MSR Cambridge (`msr`): `Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime`,
//!   the timestamp in Windows filetime (100 ns ticks), Type `Read` or `Write`, offset and
//!   size in bytes; the recorded ResponseTime is ignored (the model decides). The stream
//!   and the device are `HOSTNAME_DISKNUMBER`, as the trace files are named (`hm_0`).
//! - Alibaba (`alibaba`): `device_id,opcode,offset,length,timestamp`, opcode `R` or `W`,
//!   offset and length in bytes, the timestamp in microseconds.
//! - Tencent (`tencent`): `Timestamp,Offset,Size,IOType,VolumeID`, the timestamp in
//!   seconds, offset and size in 512-byte sectors, IOType 0 (read) or 1 (write).
//!   For the CSVs the device is the volume (device_id, VolumeID) and so is the stream;
//!   zero-length requests are skipped and a header line naming the columns is allowed.
//!
//! The reader holds a bounded window of I/Os ([`TraceOptions::reorder_window`]) and hands
//! them out by timestamp, so a trace that is out of order by fewer records than the window
//! is replayed in order; an I/O older than one already handed out is replayed at that
//! instant and counted ([`TraceStats::late`]). Memory is bounded: the window, one line (at
//! most [`LINE_BYTES_MAX`]), the first [`DETECT_LINES`] lines while detecting, and one
//! entry per distinct stream (at most [`STREAMS_MAX`]; beyond, streams share entries).
//! Gzip input (`.gz`, detected by its magic bytes) is decompressed as it streams.
//!
//! Every line that is neither an event nor something documented as skipped is an error
//! naming its line number. Non-goals: blktrace's binary format (run blkparse first), and
//! merging, requeues or completions in the trace (the device model decides completions).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::BufRead;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub use crate::trace_input::TraceInput;
use smartcon_devemu::Op;
use smartcon_engine::error::{Error, ErrorKind};

const YEAR_NS: u64 = 365 * 24 * 3600 * 1_000_000_000;
/// The longest time from a trace's first I/O to its last that a replay takes: ten years,
/// beyond any published trace (MSR Cambridge spans a week, Alibaba's a month). The device
/// model adds queueing and service times to arrivals in u64 nanoseconds; an arrival near
/// the end of that range (an iolog `wait 18446744073709551`) wrapped them, and the replay
/// reported 80 us of simulated time for a gap of 584 years.
pub const TRACE_SPAN_NS_MAX: u64 = 10 * YEAR_NS;

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
    Msr,
    Alibaba,
    Tencent,
}

impl TraceFormat {
    pub const ALL: [TraceFormat; 6] = [
        TraceFormat::Blkparse,
        TraceFormat::FioV2,
        TraceFormat::FioV3,
        TraceFormat::Msr,
        TraceFormat::Alibaba,
        TraceFormat::Tencent,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TraceFormat::Blkparse => "blkparse",
            TraceFormat::FioV2 => "fio-iolog-v2",
            TraceFormat::FioV3 => "fio-iolog-v3",
            TraceFormat::Msr => "msr",
            TraceFormat::Alibaba => "alibaba",
            TraceFormat::Tencent => "tencent",
        }
    }

    pub fn parse(text: &str) -> Option<TraceFormat> {
        Self::ALL.into_iter().find(|f| f.name() == text)
    }
}

/// A line the parser cannot read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceError {
    /// The file, when the trace came from one.
    pub path: Option<String>,
    /// 1-based; 0 when the problem is the whole file (empty, unreadable).
    pub line_number: usize,
    pub message: String,
}

impl fmt::Display for TraceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(p) = &self.path {
            write!(f, "{p}: ")?;
        }
        if self.line_number == 0 {
            write!(f, "{}", self.message)
        } else {
            write!(f, "line {}: {}", self.line_number, self.message)
        }
    }
}

impl std::error::Error for TraceError {}

fn bad(line_number: usize, message: impl Into<String>) -> TraceError {
    TraceError { path: None, line_number, message: message.into() }
}

/// The longest line a trace may have (a binary file read as text fails here, not by
/// growing a buffer without end).
pub const LINE_BYTES_MAX: usize = 4096;
/// Lines read ahead to detect the format (and blkparse's arrival event).
pub const DETECT_LINES: usize = 10_000;
/// Distinct streams tracked for sequential detection; more share entries.
pub const STREAMS_MAX: usize = 1 << 16;
/// The default reorder window, in I/Os.
pub const REORDER_WINDOW_DEFAULT: usize = 4096;
/// The largest reorder window.
pub const REORDER_WINDOW_MAX: usize = 1 << 20;

/// How to read a trace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceOptions {
    /// None: detect from the first lines.
    pub format: Option<TraceFormat>,
    /// Keep only this device's I/Os (the device as each format names it, module docs).
    pub device_filter: Option<String>,
    /// I/Os held to reorder by timestamp (at least 1).
    pub reorder_window: usize,
    /// Offsets beyond this capacity are folded into it ([`fold_into`]).
    pub capacity_bytes: Option<u64>,
    /// The most lines read: a trace from standard input has no size, and an endless
    /// stream of valid lines must end too (`--trace-lines-max` raises it).
    pub lines_max: u64,
}

/// The default of [`TraceOptions::lines_max`]: a billion lines, 20 times the longest MSR
/// Cambridge volume (src1_0, about 45 M lines), about 12 minutes at the replay's rate.
pub const TRACE_LINES_MAX_DEFAULT: u64 = 1_000_000_000;

impl Default for TraceOptions {
    fn default() -> TraceOptions {
        TraceOptions {
            format: None,
            device_filter: None,
            reorder_window: REORDER_WINDOW_DEFAULT,
            capacity_bytes: None,
            lines_max: TRACE_LINES_MAX_DEFAULT,
        }
    }
}

/// What the reader saw so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TraceStats {
    /// Lines read (the trace's own numbering).
    pub lines: u64,
    /// Bytes read from the (decompressed) input.
    pub bytes_read: u64,
    /// I/Os handed out.
    pub ios: u64,
    /// Events documented as skipped (flushes, discards, opens, zero-length requests).
    pub skipped: u64,
    /// I/Os of other devices (`device_filter`).
    pub filtered: u64,
    /// I/Os older than one already handed out (beyond the reorder window): replayed at the
    /// instant last handed out.
    pub late: u64,
    /// I/Os whose offsets were folded into the emulated capacity.
    pub folded: u64,
    /// The most I/Os held in the reorder window at once.
    pub window_max: u64,
}

/// Folds an I/O of a trace taken on a larger device into `capacity_bytes` (block-aligned
/// modulo, keeping distances within the span); returns whether it moved.
#[inline]
pub fn fold_into(io: &mut TraceIo, capacity_bytes: u64) -> Result<bool, Error> {
    if io.bytes > capacity_bytes {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("an I/O of {} bytes is larger than the emulated device ({capacity_bytes} bytes)", io.bytes),
        ));
    }
    if io.offset.saturating_add(io.bytes) > capacity_bytes {
        let room = capacity_bytes - io.bytes;
        io.offset = (io.offset % (room + 1)) / 512 * 512;
        return Ok(true);
    }
    Ok(false)
}

/// Whether two stream keys are equal, not by a call to memcmp (a key is a few bytes:
/// `/dev/sda`, a PID): a key of 8 to 16 bytes (`/dev/nvme0n1`) as its first and last eight
/// bytes (two loads and a compare each), a shorter or longer one a byte at a time.
#[inline(always)]
fn same_key(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let word = |s: &[u8], i: usize| u64::from_le_bytes(s[i..i + 8].try_into().expect("eight bytes"));
        return (word(a, 0) ^ word(b, 0)) | (word(a, n - 8) ^ word(b, n - 8)) == 0;
    }
    a.iter().zip(b).fold(0, |d, (x, y)| d | (x ^ y)) == 0
}

/// Dense stream numbers for the keys a format names streams by (a PID, a file, a volume).
#[derive(Debug, Default, Clone, PartialEq)]
struct Streams {
    ids: HashMap<Vec<u8>, u32>,
    last: Option<(Vec<u8>, u32)>,
    /// The key met last before `last` (another one), and its stream: a trace that alternates
    /// two volumes (Alibaba's, MSR's disks) finds them here, not in the map.
    before: Option<(Vec<u8>, u32)>,
}

impl Streams {
    #[inline(always)]
    fn id(&mut self, key: &[u8]) -> u32 {
        if let Some((k, id)) = &self.last {
            if same_key(k, key) {
                return *id;
            }
        }
        self.lookup(key)
    }

    /// The last key's stream if the last key is `a`, `sep`, `b` joined (checked a byte at a
    /// time, the key not built).
    #[inline(always)]
    fn last_if_joined(&self, a: &[u8], sep: u8, b: &[u8]) -> Option<u32> {
        let (k, id) = self.last.as_ref()?;
        if k.len() != a.len() + 1 + b.len() {
            return None;
        }
        let (ka, rest) = k.split_at(a.len());
        let d = ka.iter().zip(a).fold(rest[0] ^ sep, |d, (x, y)| d | (x ^ y));
        let d = rest[1..].iter().zip(b).fold(d, |d, (x, y)| d | (x ^ y));
        (d == 0).then_some(*id)
    }

    /// [`Streams::id`] of a key other than the last one (which becomes the one before).
    #[inline(never)]
    fn lookup(&mut self, key: &[u8]) -> u32 {
        // A key's stream never changes once given, so the two kept are always right.
        if let Some((k, id)) = &self.before {
            if same_key(k, key) {
                let id = *id;
                std::mem::swap(&mut self.last, &mut self.before);
                return id;
            }
        }
        let id = match self.ids.get(key) {
            Some(&id) => id,
            None if self.ids.len() < STREAMS_MAX => {
                let id = self.ids.len() as u32;
                self.ids.insert(key.to_vec(), id);
                id
            }
            // Full: the key shares an entry (FNV-1a of the key).
            None => {
                let h =
                    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
                (h % STREAMS_MAX as u64) as u32
            }
        };
        std::mem::swap(&mut self.last, &mut self.before);
        match &mut self.last {
            Some((k, last_id)) => {
                k.clear();
                k.extend_from_slice(key);
                *last_id = id;
            }
            None => self.last = Some((key.to_vec(), id)),
        }
        id
    }
}

#[inline]
fn parse_u64(n: usize, what: &str, text: &[u8]) -> Result<u64, TraceError> {
    // Up to 19 digits cannot overflow: no checked arithmetic in the loop (every field of
    // every line goes through here).
    if text.is_empty() || text.len() > 19 {
        return parse_u64_long(n, what, text);
    }
    let mut v: u64 = 0;
    for &b in text {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(not_a_number(n, what, text));
        }
        v = v * 10 + u64::from(d);
    }
    Ok(v)
}

/// [`parse_u64`] of an empty or 20-digit (or longer) field: checked.
#[cold]
fn parse_u64_long(n: usize, what: &str, text: &[u8]) -> Result<u64, TraceError> {
    let err = || not_a_number(n, what, text);
    if text.is_empty() || text.len() > 20 {
        return Err(err());
    }
    let mut v: u64 = 0;
    for &b in text {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return Err(err());
        }
        v = v.checked_mul(10).and_then(|v| v.checked_add(u64::from(d))).ok_or_else(err)?;
    }
    Ok(v)
}

#[cold]
fn not_a_number(n: usize, what: &str, text: &[u8]) -> TraceError {
    bad(n, format!("{what} {:?} is not a whole number", String::from_utf8_lossy(text)))
}

fn scaled(n: usize, what: &str, v: u64, by: u64) -> Result<u64, TraceError> {
    v.checked_mul(by).ok_or_else(|| bad(n, format!("{what} {v} is out of range")))
}

/// `SEC.NSEC` (blkparse prints nine digits) as ns.
fn parse_seconds_ns(n: usize, text: &[u8]) -> Result<u64, TraceError> {
    let err = || bad(n, format!("time {:?} is not SECONDS.NANOSECONDS", String::from_utf8_lossy(text)));
    let (s, frac) = match text.iter().position(|&b| b == b'.') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, &text[..0]),
    };
    if frac.len() > 9 || !frac.iter().all(u8::is_ascii_digit) {
        return Err(err());
    }
    let secs = parse_u64(n, "time", s).map_err(|_| err())?;
    let mut frac_ns = 0u64;
    for i in 0..9 {
        frac_ns = frac_ns * 10 + frac.get(i).map_or(0, |&d| u64::from(d - b'0'));
    }
    secs.checked_mul(1_000_000_000).and_then(|v| v.checked_add(frac_ns)).ok_or_else(err)
}

/// Splits on spaces, tabs (any byte up to b' ') into `out` (at most `out.len()` fields; returns how many).
#[inline]
fn split_ws<'a>(line: &'a [u8], out: &mut [&'a [u8]]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < line.len() && n < out.len() {
        while i < line.len() && line[i] <= b' ' {
            i += 1;
        }
        if i == line.len() {
            break;
        }
        let start = i;
        while i < line.len() && line[i] > b' ' {
            i += 1;
        }
        out[n] = &line[start..i];
        n += 1;
    }
    n
}

/// Splits on commas (fields trimmed of spaces) into `out`; returns the number of fields in
/// the line, which may be more than `out.len()`.
fn split_csv<'a>(line: &'a [u8], out: &mut [&'a [u8]]) -> usize {
    let mut n = 0;
    for field in line.split(|&b| b == b',') {
        if n < out.len() {
            out[n] = field.trim_ascii();
        }
        n += 1;
    }
    n
}

fn lossy(line: &[u8]) -> String {
    let s = String::from_utf8_lossy(&line[..line.len().min(80)]).into_owned();
    if line.len() > 80 {
        format!("{s}...")
    } else {
        s
    }
}

fn is_maj_min(field: &[u8]) -> bool {
    match field.iter().position(|&b| b == b',') {
        Some(i) => {
            let (a, b) = (&field[..i], &field[i + 1..]);
            !a.is_empty() && !b.is_empty() && a.iter().all(u8::is_ascii_digit) && b.iter().all(u8::is_ascii_digit)
        }
        None => false,
    }
}

/// The format a line is in, if it tells: `Ok(Some((format, is_header)))`.
fn detect_line(n: usize, line: &[u8]) -> Result<Option<(TraceFormat, bool)>, TraceError> {
    let text = String::from_utf8_lossy(line);
    let t = text.trim();
    match t {
        "fio version 2 iolog" => return Ok(Some((TraceFormat::FioV2, true))),
        "fio version 3 iolog" => return Ok(Some((TraceFormat::FioV3, true))),
        _ if t.starts_with("fio version") => return Err(bad(n, format!("unsupported fio iolog version {t:?}"))),
        _ => {}
    }
    let mut ws = [&b""[..]; 7];
    if split_ws(line, &mut ws) >= 7 && is_maj_min(ws[0]) {
        return Ok(Some((TraceFormat::Blkparse, false)));
    }
    let lower = t.to_ascii_lowercase().replace(' ', "");
    match lower.as_str() {
        "timestamp,hostname,disknumber,type,offset,size,responsetime" => return Ok(Some((TraceFormat::Msr, true))),
        "device_id,opcode,offset,length,timestamp" => return Ok(Some((TraceFormat::Alibaba, true))),
        "timestamp,offset,size,iotype,volumeid" => return Ok(Some((TraceFormat::Tencent, true))),
        _ => {}
    }
    let mut f = [&b""[..]; 7];
    let numeric = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    match split_csv(line, &mut f) {
        7 if numeric(f[0]) && (f[3].eq_ignore_ascii_case(b"read") || f[3].eq_ignore_ascii_case(b"write")) => {
            Ok(Some((TraceFormat::Msr, false)))
        }
        5 if (f[1] == b"R" || f[1] == b"W") && numeric(f[2]) && numeric(f[4]) => {
            Ok(Some((TraceFormat::Alibaba, false)))
        }
        5 if numeric(f[0]) && (f[3] == b"0" || f[3] == b"1") && numeric(f[1]) => {
            Ok(Some((TraceFormat::Tencent, false)))
        }
        _ => Ok(None),
    }
}

/// What one line holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Io { time_ns: u64, op: Op, offset: u64, bytes: u64, stream: u32 },
    Skip,
    Filtered,
    Nothing,
    End,
}

/// The lines of the common shape, parsed in one pass over the bytes of the reader's buffer
/// (no copy of the line, no field array, no search for the line's end first: the parser
/// finds the newline where its last field ends, or with one vector search where the rest
/// of the line is read by nobody): a blkparse event with the default fields (an arrival, a
/// skipped request or another stage), a fio v2 `FILE read|write OFFSET LENGTH`, `FILE wait
/// USEC` or skipped action, a fio v3 `USEC FILE read|write OFFSET LENGTH`, an MSR, Alibaba
/// or Tencent record with plain fields. Each returns the event and the bytes of the line
/// with its newline, or None, having changed nothing, for any other line (a field with
/// spaces, an error, a number of 20 digits, a blank line or a header, a line not whole in
/// the buffer or longer than [`LINE_BYTES_MAX`]), which then goes through the general
/// parser; where both read a line they give the same event
/// (`trace::tests::the_fast_lines_parse_as_the_general_parser_does`).
mod fast {
    use super::{Event, Streams, LINE_BYTES_MAX};
    use smartcon_devemu::Op;

    const ONES: u64 = 0x0101_0101_0101_0101;
    const POW10: [u64; 10] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000, 100_000_000, 1_000_000_000];

    /// Eight bytes of `text` from `at`, little-endian (the first byte lowest), if there are.
    #[inline(always)]
    fn eight(text: &[u8], at: usize) -> Option<u64> {
        let chunk: [u8; 8] = text.get(at..at + 8)?.try_into().ok()?;
        Some(u64::from_le_bytes(chunk))
    }

    /// 1 to 19 digits from `text[*i..]` (up to 19 cannot overflow), moving `i` past them.
    /// Eight bytes at a time where the text has them (SWAR: a mask of the non-digits, then
    /// the digits summed in pairs, fours and eights by three multiplications); the text
    /// may go on past the line, whose end (a newline) is not a digit.
    #[inline(always)]
    fn digits(text: &[u8], i: &mut usize) -> Option<u64> {
        let start = *i;
        let mut v = 0u64;
        while let Some(x) = eight(text, *i) {
            // Each byte's value less b'0': a digit is a byte now below 10.
            let x = x ^ (0x30 * ONES);
            let non_digit = (x | ((x & (0x7F * ONES)) + (0x76 * ONES))) & (0x80 * ONES);
            let k = (non_digit.trailing_zeros() / 8) as usize;
            if k > 0 {
                // The k digits to the top bytes (zeros below: leading zeros), then summed.
                let y = x << (8 * (8 - k));
                let y = ((y & (0x0F * ONES)).wrapping_mul(2561)) >> 8;
                let y = ((y & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
                let y = ((y & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32;
                v = v.wrapping_mul(POW10[k]).wrapping_add(y);
                *i += k;
            }
            if k < 8 {
                return (1..=19).contains(&(*i - start)).then_some(v);
            }
        }
        while let Some(&b) = text.get(*i) {
            let d = b.wrapping_sub(b'0');
            if d > 9 {
                break;
            }
            v = v.wrapping_mul(10).wrapping_add(u64::from(d));
            *i += 1;
        }
        (1..=19).contains(&(*i - start)).then_some(v)
    }

    /// Skips what the general splitter takes as a separator inside a line (any byte up to
    /// b' ' but the newline, which ends the line); false when there was none.
    #[inline(always)]
    fn separators(text: &[u8], i: &mut usize) -> bool {
        let start = *i;
        while text.get(*i).is_some_and(|&b| b <= b' ' && b != b'\n') {
            *i += 1;
        }
        *i > start
    }

    /// A field of `text` from `i` up to the next separator (a byte up to b' ', which the
    /// newline is), eight bytes at a time where the text has them.
    #[inline(always)]
    fn word<'a>(text: &'a [u8], i: &mut usize) -> &'a [u8] {
        let start = *i;
        while let Some(x) = eight(text, *i) {
            // A byte above b' ' has its top bit set in (b & 0x7F) + 0x5F or in itself.
            let separator = !(x | ((x & (0x7F * ONES)) + (0x5F * ONES))) & (0x80 * ONES);
            if separator != 0 {
                *i += (separator.trailing_zeros() / 8) as usize;
                return &text[start..*i];
            }
            *i += 8;
        }
        while text.get(*i).is_some_and(|&b| b > b' ') {
            *i += 1;
        }
        &text[start..*i]
    }

    /// `b` at `text[*i]`, moving past it.
    #[inline(always)]
    fn expect(text: &[u8], i: &mut usize, b: u8) -> Option<()> {
        (text.get(*i) == Some(&b)).then(|| *i += 1)
    }

    /// The bytes of a line whose newline is at `at`: the line is whole, and no longer than
    /// the general reader takes one ([`LINE_BYTES_MAX`] bytes before its newline).
    #[inline(always)]
    fn newline(text: &[u8], at: usize) -> Option<usize> {
        (at <= LINE_BYTES_MAX && text.get(at) == Some(&b'\n')).then_some(at + 1)
    }

    /// Where the next comma or newline is, from `from` (within the longest line). A byte
    /// at a time: the fields it crosses are a few bytes long (`hm`, `Read`, a response
    /// time), shorter than a vector search's set-up.
    #[inline(always)]
    fn comma_or_newline(text: &[u8], from: usize) -> Option<usize> {
        let mut at = from;
        while at <= LINE_BYTES_MAX {
            match *text.get(at)? {
                b',' | b'\n' => return Some(at),
                _ => at += 1,
            }
        }
        None
    }

    /// A CSV field up to the next comma in the line, and the comma.
    #[inline(always)]
    fn until_comma<'a>(text: &'a [u8], i: &mut usize) -> Option<&'a [u8]> {
        let start = *i;
        let at = comma_or_newline(text, start)?;
        (text[at] == b',').then_some(())?;
        *i = at + 1;
        Some(&text[start..at])
    }

    /// The end of a line whose rest the general parser does not read (a blkparse stage or
    /// a skipped action): past its newline, which must be within the longest line.
    #[inline(always)]
    fn line_end(text: &[u8], from: usize) -> Option<usize> {
        let end = text.len().min(LINE_BYTES_MAX + 1);
        memchr::memchr(b'\n', text.get(from..end)?).map(|at| from + at + 1)
    }

    /// At least one separator ([`separators`]).
    #[inline(always)]
    fn gap(text: &[u8], i: &mut usize) -> Option<()> {
        separators(text, i).then_some(())
    }

    /// A field of at least one byte ([`word`]).
    #[inline(always)]
    fn field<'a>(text: &'a [u8], i: &mut usize) -> Option<&'a [u8]> {
        let w = word(text, i);
        (!w.is_empty()).then_some(w)
    }

    /// A whole field of digits: [`digits`], then a separator or the newline.
    #[inline(always)]
    fn number(text: &[u8], i: &mut usize) -> Option<u64> {
        let v = digits(text, i)?;
        text.get(*i).is_some_and(|&b| b <= b' ').then_some(v)
    }

    /// CSV: ASCII whitespace up to the newline (the general parser trims the line).
    #[inline(always)]
    fn trailing_space(text: &[u8], i: &mut usize) {
        while text.get(*i).is_some_and(|&b| b != b'\n' && b.is_ascii_whitespace()) {
            *i += 1;
        }
    }

    fn matches(filter: Option<&[u8]>, device: &[u8]) -> bool {
        filter.is_none_or(|d| d == device)
    }

    /// How a parsed line ends before its I/O, if it does: an empty request is skipped, and
    /// another device's is filtered out (in that order, as the general parser does).
    #[inline(always)]
    fn dropped(bytes: u64, filter: Option<&[u8]>, device: &[u8], used: usize) -> Option<(Event, usize)> {
        if bytes == 0 {
            Some((Event::Skip, used))
        } else if !matches(filter, device) {
            Some((Event::Filtered, used))
        } else {
            None
        }
    }

    /// [`fio_v2`] in the shape [`super::TraceReader::fast_run`] takes.
    #[inline(always)]
    pub(super) fn fio_v2_line(
        text: &[u8],
        clock_ns: &mut u64,
        streams: &mut Streams,
        filter: Option<&[u8]>,
        _: u8,
    ) -> Option<(Event, usize)> {
        fio_v2(text, clock_ns, streams, filter)
    }

    /// A fio v3 line at the start of `text` (the reader's buffer from the line on).
    #[inline(always)]
    pub(super) fn fio_v3(
        text: &[u8],
        clock_ns: &mut u64,
        streams: &mut Streams,
        filter: Option<&[u8]>,
    ) -> Option<(Event, usize)> {
        let mut i = 0;
        let us = digits(text, &mut i)?;
        separators(text, &mut i).then_some(())?;
        let file = word(text, &mut i);
        (!file.is_empty() && separators(text, &mut i)).then_some(())?;
        let op = match word(text, &mut i) {
            b"read" => Op::Read,
            b"write" => Op::Write,
            _ => return None,
        };
        separators(text, &mut i).then_some(())?;
        let offset = digits(text, &mut i)?;
        separators(text, &mut i).then_some(())?;
        let bytes = digits(text, &mut i)?;
        // Nothing after the length but separators (a carriage return is one).
        separators(text, &mut i);
        let used = newline(text, i)?;
        fio_v3_io(FioV3 { us, file, op, offset, bytes }, used, clock_ns, streams, filter)
    }

    /// The fields of a fio v3 line, read.
    struct FioV3<'a> {
        us: u64,
        file: &'a [u8],
        op: Op,
        offset: u64,
        bytes: u64,
    }

    /// A fio v3 line's event from its fields (the line is `used` bytes with its newline).
    #[inline(always)]
    fn fio_v3_io(
        f: FioV3<'_>,
        used: usize,
        clock_ns: &mut u64,
        streams: &mut Streams,
        filter: Option<&[u8]>,
    ) -> Option<(Event, usize)> {
        // A length (zero is the general parser's error).
        if f.bytes == 0 {
            return None;
        }
        let time_ns = f.us.checked_mul(1_000)?;
        *clock_ns = time_ns;
        if !matches(filter, f.file) {
            return Some((Event::Filtered, used));
        }
        let (op, offset, bytes) = (f.op, f.offset, f.bytes);
        Some((Event::Io { time_ns, op, offset, bytes, stream: streams.id(f.file) }, used))
    }

    /// A blkparse line at the start of `text`: the arrival event `action` with `R` or `W`
    /// and `SECTOR + COUNT` (an I/O), another stage (nothing), or a flush or discard (a
    /// skip); `blkparse -f` formats and the summary go to the general parser.
    #[inline(always)]
    pub(super) fn blkparse(
        text: &[u8],
        action: u8,
        streams: &mut Streams,
        filter: Option<&[u8]>,
    ) -> Option<(Event, usize)> {
        let mut i = 0;
        separators(text, &mut i);
        let device_at = i;
        digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        digits(text, &mut i)?;
        let device = &text[device_at..i];
        gap(text, &mut i)?;
        // The CPU and the sequence number: read by nobody.
        field(text, &mut i)?;
        gap(text, &mut i)?;
        field(text, &mut i)?;
        gap(text, &mut i)?;
        // SECONDS.NANOSECONDS, up to nine digits after the point (none is zero).
        let secs = digits(text, &mut i)?;
        let mut frac_ns = 0;
        if text.get(i) == Some(&b'.') {
            i += 1;
            let frac_at = i;
            if text.get(i).is_some_and(u8::is_ascii_digit) {
                frac_ns = digits(text, &mut i)?;
            }
            let k = i - frac_at;
            frac_ns = frac_ns.checked_mul(*POW10.get(9usize.checked_sub(k)?)?)?;
        }
        let time_ns = secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)?;
        gap(text, &mut i)?;
        let pid_at = i;
        digits(text, &mut i)?;
        let pid = &text[pid_at..i];
        gap(text, &mut i)?;
        let stage = field(text, &mut i)?;
        gap(text, &mut i)?;
        let rwbs = field(text, &mut i)?;
        if stage != [action] {
            // Another stage of the same requests: the general parser reads no further than a
            // seventh field.
            return Some((Event::Nothing, line_end(text, i)?));
        }
        let op = if rwbs.contains(&b'D') {
            None // discard
        } else if rwbs.contains(&b'W') {
            Some(Op::Write)
        } else if rwbs.contains(&b'R') {
            Some(Op::Read)
        } else {
            None
        };
        let Some(op) = op else {
            return Some((Event::Skip, line_end(text, i)?));
        };
        gap(text, &mut i)?;
        let sector = number(text, &mut i)?;
        gap(text, &mut i)?;
        (field(text, &mut i)? == b"+").then_some(())?;
        gap(text, &mut i)?;
        let sectors = number(text, &mut i)?;
        // The process and what follows: read by nobody.
        let used = line_end(text, i)?;
        let (offset, bytes) = (sector.checked_mul(512)?, sectors.checked_mul(512)?);
        if let Some(dropped) = dropped(bytes, filter, device, used) {
            return Some(dropped);
        }
        Some((Event::Io { time_ns, op, offset, bytes, stream: streams.id(pid) }, used))
    }

    /// A fio v2 line at the start of `text`: `FILE read|write OFFSET LENGTH`, `FILE wait
    /// USEC` (the clock advances: nothing else) or a skipped action.
    #[inline(always)]
    pub(super) fn fio_v2(
        text: &[u8],
        clock_ns: &mut u64,
        streams: &mut Streams,
        filter: Option<&[u8]>,
    ) -> Option<(Event, usize)> {
        let mut i = 0;
        let file = field(text, &mut i)?;
        gap(text, &mut i)?;
        let op = match word(text, &mut i) {
            b"read" => Op::Read,
            b"write" => Op::Write,
            b"wait" => {
                gap(text, &mut i)?;
                let us = digits(text, &mut i)?;
                separators(text, &mut i);
                let used = newline(text, i)?;
                *clock_ns = us.checked_mul(1_000).and_then(|ns| clock_ns.checked_add(ns))?;
                return Some((Event::Nothing, used));
            }
            b"add" | b"open" | b"close" | b"sync" | b"datasync" | b"trim" => {
                return Some((Event::Skip, line_end(text, i)?));
            }
            _ => return None,
        };
        gap(text, &mut i)?;
        let offset = digits(text, &mut i)?;
        gap(text, &mut i)?;
        let bytes = digits(text, &mut i)?;
        separators(text, &mut i);
        let used = newline(text, i)?;
        if bytes == 0 {
            return None;
        }
        if !matches(filter, file) {
            return Some((Event::Filtered, used));
        }
        Some((Event::Io { time_ns: *clock_ns, op, offset, bytes, stream: streams.id(file) }, used))
    }

    /// A Tencent line at the start of `text`.
    #[inline(always)]
    pub(super) fn tencent(text: &[u8], streams: &mut Streams, filter: Option<&[u8]>) -> Option<(Event, usize)> {
        let mut i = 0;
        let secs = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let sector = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let sectors = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let op = match text.get(i) {
            Some(b'0') => Op::Read,
            Some(b'1') => Op::Write,
            _ => return None,
        };
        i += 1;
        expect(text, &mut i, b',')?;
        let device_at = i;
        digits(text, &mut i)?;
        let device = &text[device_at..i];
        trailing_space(text, &mut i);
        let used = newline(text, i)?;
        let (offset, bytes) = (sector.checked_mul(512)?, sectors.checked_mul(512)?);
        let time_ns = secs.checked_mul(1_000_000_000)?;
        if let Some(dropped) = dropped(bytes, filter, device, used) {
            return Some(dropped);
        }
        Some((Event::Io { time_ns, op, offset, bytes, stream: streams.id(device) }, used))
    }

    #[inline(always)]
    pub(super) fn msr(text: &[u8], streams: &mut Streams, filter: Option<&[u8]>) -> Option<(Event, usize)> {
        let mut i = 0;
        let ticks = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let host = until_comma(text, &mut i)?;
        // The general parser trims fields: a host with spaces at its ends goes there.
        if host.first().is_none_or(u8::is_ascii_whitespace) || host.last().is_none_or(u8::is_ascii_whitespace) {
            return None;
        }
        let disk_at = i;
        digits(text, &mut i)?;
        let disk = &text[disk_at..i];
        expect(text, &mut i, b',')?;
        let op = match until_comma(text, &mut i)? {
            t if t.eq_ignore_ascii_case(b"read") => Op::Read,
            t if t.eq_ignore_ascii_case(b"write") => Op::Write,
            _ => return None,
        };
        let offset = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let bytes = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        // The response time (ignored, a carriage return before the newline with it) is the
        // last field: no comma after it.
        let used = newline(text, comma_or_newline(text, i)?)?;
        msr_io(Msr { ticks, host, disk, op, offset, bytes }, used, streams, filter)
    }

    /// The fields of an MSR Cambridge line, read (the host not trimmed: no space at its ends).
    struct Msr<'a> {
        ticks: u64,
        host: &'a [u8],
        disk: &'a [u8],
        op: Op,
        offset: u64,
        bytes: u64,
    }

    /// An MSR line's event from its fields (the line is `used` bytes with its newline).
    #[inline(always)]
    fn msr_io(f: Msr<'_>, used: usize, streams: &mut Streams, filter: Option<&[u8]>) -> Option<(Event, usize)> {
        let Msr { ticks, host, disk, op, offset, bytes } = f;
        const KEY_MAX: usize = 128;
        let len = host.len() + 1 + disk.len();
        if len > KEY_MAX {
            return None;
        }
        // The stream of the last key, when HOST_DISK is it, without building the key (a
        // 128-byte array zeroed and filled per line); else the key built, as before.
        let stream = match streams.last_if_joined(host, b'_', disk) {
            Some(id) if filter.is_none() => {
                if bytes == 0 {
                    return Some((Event::Skip, used));
                }
                id
            }
            _ => {
                let mut key = [0u8; KEY_MAX];
                key[..host.len()].copy_from_slice(host);
                key[host.len()] = b'_';
                key[host.len() + 1..len].copy_from_slice(disk);
                let device = &key[..len];
                if let Some(dropped) = dropped(bytes, filter, device, used) {
                    return Some(dropped);
                }
                // Refused (the general parser's error) before the stream is counted.
                ticks.checked_mul(100)?;
                streams.id(device)
            }
        };
        let time_ns = ticks.checked_mul(100)?;
        Some((Event::Io { time_ns, op, offset, bytes, stream }, used))
    }

    #[inline(always)]
    pub(super) fn alibaba(text: &[u8], streams: &mut Streams, filter: Option<&[u8]>) -> Option<(Event, usize)> {
        let mut i = 0;
        digits(text, &mut i)?;
        let device = &text[..i];
        expect(text, &mut i, b',')?;
        let op = match text.get(i) {
            Some(b'R' | b'r') => Op::Read,
            Some(b'W' | b'w') => Op::Write,
            _ => return None,
        };
        i += 1;
        expect(text, &mut i, b',')?;
        let offset = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let bytes = digits(text, &mut i)?;
        expect(text, &mut i, b',')?;
        let us = digits(text, &mut i)?;
        trailing_space(text, &mut i);
        let used = newline(text, i)?;
        alibaba_io(Alibaba { device, op, offset, bytes, us }, used, streams, filter)
    }

    /// The fields of an Alibaba line, read.
    struct Alibaba<'a> {
        device: &'a [u8],
        op: Op,
        offset: u64,
        bytes: u64,
        us: u64,
    }

    /// An Alibaba line's event from its fields (the line is `used` bytes with its newline).
    #[inline(always)]
    fn alibaba_io(f: Alibaba<'_>, used: usize, streams: &mut Streams, filter: Option<&[u8]>) -> Option<(Event, usize)> {
        let Alibaba { device, op, offset, bytes, us } = f;
        let time_ns = us.checked_mul(1_000)?;
        if let Some(dropped) = dropped(bytes, filter, device, used) {
            return Some(dropped);
        }
        Some((Event::Io { time_ns, op, offset, bytes, stream: streams.id(device) }, used))
    }

    /// Bytes the vector parsers need in the buffer from a line's start: the 64 they classify
    /// at once, and the eight-byte loads of a number of up to 19 digits that starts before
    /// byte 64 (a line nearer the buffer's end goes to the byte-wise parser).
    pub(super) const VEC_BYTES: usize = 96;

    /// The first 64 bytes of a line classified at once, a bit a byte (bit k: byte k).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub(super) struct Classes {
        /// Bytes up to b' ' (the separators of the whitespace formats, and the newline).
        pub(super) sep: u64,
        pub(super) comma: u64,
        pub(super) newline: u64,
    }

    /// [`Classes`] of 64 bytes, 16 at a time (SSE2, which every x86-64 processor has: no
    /// detection at run time).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    pub(super) fn classify(bytes: &[u8; 64]) -> Classes {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let (mut sep, mut comma, mut newline) = (0u64, 0u64, 0u64);
        for k in 0..4 {
            // SAFETY: the intrinsics need SSE2, which this build enables (the cfg above); the
            // load reads the 16 bytes from 16 * k (k < 4) of `bytes`, which holds 64, and an
            // unaligned load (loadu) reads them from any address.
            let [s, c, n] = unsafe {
                let v = _mm_loadu_si128(bytes.as_ptr().add(16 * k).cast::<__m128i>());
                let space = _mm_set1_epi8(b' ' as i8);
                // Unsigned: max(b, b' ') == b' ' exactly when b <= b' '.
                let at_most_space = _mm_cmpeq_epi8(_mm_max_epu8(v, space), space);
                [
                    _mm_movemask_epi8(at_most_space),
                    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b',' as i8))),
                    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8))),
                ]
            };
            let bits = |m: i32| u64::from(m as u16) << (16 * k);
            sep |= bits(s);
            comma |= bits(c);
            newline |= bits(n);
        }
        Classes { sep, comma, newline }
    }

    /// [`Classes`] of 64 bytes a byte at a time (other processors; the tests hold the two equal).
    #[cfg_attr(all(target_arch = "x86_64", target_feature = "sse2"), allow(dead_code))]
    #[inline(always)]
    pub(super) fn classify_bytes(bytes: &[u8; 64]) -> Classes {
        let mut c = Classes { sep: 0, comma: 0, newline: 0 };
        for (k, &b) in bytes.iter().enumerate() {
            c.sep |= u64::from(b <= b' ') << k;
            c.comma |= u64::from(b == b',') << k;
            c.newline |= u64::from(b == b'\n') << k;
        }
        c
    }

    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    #[inline(always)]
    pub(super) fn classify(bytes: &[u8; 64]) -> Classes {
        classify_bytes(bytes)
    }

    /// The separators (bytes up to b' ', the newline one of them) and the newlines of 64
    /// bytes, as [`classify`] has them, without the commas (the whitespace formats: two
    /// comparisons a vector, not three).
    #[cfg(all(target_arch = "x86_64", target_feature = "sse2"))]
    #[inline(always)]
    pub(super) fn classify_ws(bytes: &[u8; 64]) -> (u64, u64) {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_max_epu8, _mm_movemask_epi8, _mm_set1_epi8,
        };
        let (mut sep, mut newline) = (0u64, 0u64);
        for k in 0..4 {
            // SAFETY: as in `classify`: SSE2 is enabled by this build (the cfg above), and the
            // unaligned load reads the 16 bytes from 16 * k (k < 4) of the 64 of `bytes`.
            let [s, n] = unsafe {
                let v = _mm_loadu_si128(bytes.as_ptr().add(16 * k).cast::<__m128i>());
                let space = _mm_set1_epi8(b' ' as i8);
                [
                    _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_max_epu8(v, space), space)),
                    _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8))),
                ]
            };
            sep |= u64::from(s as u16) << (16 * k);
            newline |= u64::from(n as u16) << (16 * k);
        }
        (sep, newline)
    }

    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse2")))]
    #[inline(always)]
    pub(super) fn classify_ws(bytes: &[u8; 64]) -> (u64, u64) {
        let c = classify_bytes(bytes);
        (c.sep, c.newline)
    }

    /// The first `k` (1..=8) bytes of the eight in `x` (little-endian) as a number, if all
    /// are digits: shifted to the top (zeros below, read as leading zeros), then summed in
    /// pairs, fours and eights by three multiplications.
    #[inline(always)]
    fn digits_of(x: u64, k: usize) -> Option<u64> {
        debug_assert!((1..=8).contains(&k));
        let x = (x ^ (0x30 * ONES)) << (8 * (8 - k));
        // A digit is a byte now below 10 (no carry between bytes: at most 0x7F + 0x76).
        if (x | ((x & (0x7F * ONES)) + (0x76 * ONES))) & (0x80 * ONES) != 0 {
            return None;
        }
        let y = (x.wrapping_mul(2561)) >> 8;
        let y = ((y & 0x00FF_00FF_00FF_00FF).wrapping_mul(6_553_601)) >> 16;
        Some(((y & 0x0000_FFFF_0000_FFFF).wrapping_mul(42_949_672_960_001)) >> 32)
    }

    /// The field `head[start..end]` of a line's head (a field ending before byte 64) as a
    /// number if it is 1 to 19 digits (up to 19 cannot overflow), read eight bytes at a
    /// time: the loads at `i & 63` (the same `i`, which is below 64), within the head's bytes
    /// by its type, so without a bounds check.
    #[inline(always)]
    fn number_in_head(head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<u64> {
        let at = |i: usize| {
            let i = i & 63;
            u64::from_le_bytes(head[i..i + 8].try_into().expect("eight bytes"))
        };
        number_with(at, start, end)
    }

    #[inline(always)]
    fn number_with(at: impl Fn(usize) -> u64, start: usize, end: usize) -> Option<u64> {
        match end - start {
            k @ 1..=8 => digits_of(at(start), k),
            k @ 9..=16 => {
                let high = digits_of(at(start), k - 8);
                let low = digits_of(at(end - 8), 8);
                Some(high? * 100_000_000 + low?)
            }
            k @ 17..=19 => {
                let high = digits_of(at(start), k - 16);
                let (mid, low) = (digits_of(at(end - 16), 8), digits_of(at(end - 8), 8));
                Some(high? * 10_000_000_000_000_000 + mid? * 100_000_000 + low?)
            }
            _ => None,
        }
    }

    /// How the vector parsers read a field of a line's head as a number: eight bytes at a
    /// time ([`Swar`], on any processor) or sixteen at once ([`Ssse3`], where the processor
    /// has it). Both read the same numbers and refuse the same fields (1 to 19 digits, as
    /// [`number_in_head`]; `trace::tests::the_ssse3_numbers_are_the_swar_ones`).
    pub(super) trait Digits: Copy {
        /// The field `head[start..end]` (`start <= end < 64`) as a number, if it is 1 to 19
        /// digits.
        fn number(self, head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<u64>;
    }

    /// [`Digits`] by [`number_in_head`].
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Swar;

    impl Digits for Swar {
        #[inline(always)]
        fn number(self, head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<u64> {
            number_in_head(head, start, end)
        }
    }

    /// [`Digits`] by SSSE3 for a field of up to 16 digits (longer: [`number_in_head`]). Only
    /// [`Ssse3::detect`] makes one, on a processor that has SSSE3: holding one is the proof
    /// that its instructions may run. Its numbers are inlined only into code compiled for
    /// SSSE3 ([`super::TraceReader::fast_run`]'s loop for it); elsewhere each is a call.
    #[cfg(target_arch = "x86_64")]
    #[derive(Debug, Clone, Copy)]
    pub(super) struct Ssse3(());

    #[cfg(target_arch = "x86_64")]
    impl Ssse3 {
        /// An [`Ssse3`] if this processor has SSSE3 (detected at run time).
        pub(super) fn detect() -> Option<Ssse3> {
            std::is_x86_feature_detected!("ssse3").then_some(Ssse3(()))
        }
    }

    #[cfg(target_arch = "x86_64")]
    impl Digits for Ssse3 {
        #[inline(always)]
        fn number(self, head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<u64> {
            let k = end.wrapping_sub(start);
            if k.wrapping_sub(1) >= 16 {
                return number_in_head(head, start, end); // none, or 17 to 19 digits
            }
            let s = start & 63; // the same start (below 64): the 16 bytes lie within the head
            let bytes: &[u8; 16] = head[s..s + 16].try_into().expect("16 bytes");
            // SAFETY: `self` exists, so `Ssse3::detect` found SSSE3 on this processor
            // (digits16_ssse3's contract); `k` is 1..=16 (checked above).
            unsafe { digits16_ssse3(bytes, k) }
        }
    }

    /// For each count `k` of digits (0..=16), the byte shuffle that moves the first `k` of
    /// 16 bytes to the top `k` (0x80: a zero byte below them, read as leading zeros).
    #[cfg(target_arch = "x86_64")]
    static ALIGN_DIGITS: [[u8; 16]; 17] = {
        let mut t = [[0x80u8; 16]; 17];
        let mut k = 0;
        while k <= 16 {
            let mut i = 16 - k;
            while i < 16 {
                t[k][i] = (i - (16 - k)) as u8;
                i += 1;
            }
            k += 1;
        }
        t
    };

    /// The first `k` (1..=16) of `bytes` as a number, if all are digits: less b'0', checked
    /// below 10, moved to the top of the vector (`pshufb`), then summed in pairs (`pmaddubsw`
    /// by 10 and 1), fours (`pmaddwd` by 100 and 1) and eights (`pmaddwd` by 10,000 and 1):
    /// two numbers of eight digits, the first the high one.
    ///
    /// Not compiled for SSSE3 itself but always inlined, so that its intrinsics inline into
    /// the caller compiled for it ([`super::TraceReader::fast_run`]'s loop: a function of its
    /// own was not inlined into the fio v3 loop, and its calls were a sixth of the reader's
    /// time). Elsewhere (the tests) they are calls, to the same instructions.
    ///
    /// # Safety
    /// The processor has SSSE3 (an [`Ssse3`] exists).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn digits16_ssse3(bytes: &[u8; 16], k: usize) -> Option<u64> {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_cvtsi128_si32, _mm_loadu_si128, _mm_madd_epi16, _mm_maddubs_epi16,
            _mm_min_epu8, _mm_movemask_epi8, _mm_packs_epi32, _mm_set1_epi16, _mm_set1_epi8, _mm_setr_epi16,
            _mm_shuffle_epi8, _mm_srli_si128, _mm_sub_epi8,
        };
        debug_assert!((1..=16).contains(&k));
        // SAFETY: the unaligned loads read the 16 bytes of `bytes` and the 16 of a row of
        // ALIGN_DIGITS (`k` <= 16 indexes one, checked by the index); the other intrinsics
        // need SSE2 (every x86-64 processor) and SSSE3, which the caller's processor has
        // (this function's contract: an `Ssse3` exists).
        unsafe {
            let d = _mm_sub_epi8(_mm_loadu_si128(bytes.as_ptr().cast::<__m128i>()), _mm_set1_epi8(b'0' as i8));
            // A digit is a byte now at most 9 (unsigned): min(d, 9) == d.
            let digit = _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(9)), d)) as u32;
            let need = (1u32 << k) - 1;
            if digit & need != need {
                return None;
            }
            let d = _mm_shuffle_epi8(d, _mm_loadu_si128(ALIGN_DIGITS[k].as_ptr().cast::<__m128i>()));
            // The bytes 10, 1, 10, 1, ...: a pair's first digit is its tens.
            let pairs = _mm_maddubs_epi16(d, _mm_set1_epi16(0x010A));
            let fours = _mm_madd_epi16(pairs, _mm_setr_epi16(100, 1, 100, 1, 100, 1, 100, 1));
            let fours = _mm_packs_epi32(fours, fours); // each at most 9,999: no saturation
            let eights = _mm_madd_epi16(fours, _mm_setr_epi16(10_000, 1, 10_000, 1, 10_000, 1, 10_000, 1));
            let high = u64::from(_mm_cvtsi128_si32(eights) as u32);
            let low = u64::from(_mm_cvtsi128_si32(_mm_srli_si128::<4>(eights)) as u32);
            Some(high * 100_000_000 + low)
        }
    }

    /// The bit of the next field boundary in `mask`, cleared: its position (64 if none).
    #[inline(always)]
    fn take(mask: &mut u64) -> usize {
        let at = mask.trailing_zeros() as usize;
        *mask &= mask.wrapping_sub(1);
        at
    }

    /// A line's first 64 bytes, when its newline is among them: the classes, with the bits
    /// from the newline on cleared, and the newline's position.
    #[inline(always)]
    fn line_classes(text: &[u8]) -> Option<(&[u8; VEC_BYTES], Classes, usize)> {
        let head: &[u8; VEC_BYTES] = text.get(..VEC_BYTES)?.try_into().expect("VEC_BYTES bytes");
        let c = classify(head[..64].try_into().expect("64 bytes"));
        if c.newline == 0 {
            return None;
        }
        let end = c.newline.trailing_zeros() as usize;
        let line = (1u64 << end) - 1;
        Some((head, Classes { sep: c.sep & line, comma: c.comma & line, newline: c.newline }, end))
    }

    /// A CSV line's head ([`VEC_BYTES`] bytes), its fields' starts and ends, and its
    /// newline's position ([`csv_fields`]).
    type CsvLine<'a, const N: usize> = (&'a [u8; VEC_BYTES], [(usize, usize); N], usize);

    /// The head and the `N` fields of a CSV line (N - 1 commas): each field's start and end (the last one
    /// ends at the newline), and the newline's position. None for another line.
    #[inline(always)]
    fn csv_fields<const N: usize>(text: &[u8]) -> Option<CsvLine<'_, N>> {
        let (head, c, end) = line_classes(text)?;
        let mut commas = c.comma;
        let mut f = [(0, 0); N];
        let mut start = 0;
        for field in &mut f[..N - 1] {
            let at = take(&mut commas);
            *field = (start, at);
            start = at + 1;
        }
        f[N - 1] = (start, end);
        (commas == 0 && start <= end).then_some((head, f, end))
    }

    /// A line's head ([`VEC_BYTES`] bytes) with the separators of its first 64 bytes up to its
    /// newline and the newline's position, when the newline is among them ([`classify_ws`]).
    #[inline(always)]
    fn ws_head(text: &[u8]) -> Option<(&[u8; VEC_BYTES], u64, usize)> {
        let head: &[u8; VEC_BYTES] = text.get(..VEC_BYTES)?.try_into().expect("VEC_BYTES bytes");
        let (sep, newline) = classify_ws(head[..64].try_into().expect("64 bytes"));
        if newline == 0 {
            return None;
        }
        let end = newline.trailing_zeros() as usize;
        Some((head, sep & ((1u64 << end) - 1), end))
    }

    /// The 5 fields of a line split by runs of separators, the first at the line's start:
    /// each field's start and end, from the separators `sep` of its bytes before the
    /// newline at `end` (< 64). None for another line.
    #[inline(always)]
    fn ws_fields5(sep: u64, end: usize) -> Option<[(usize, usize); 5]> {
        let word = !sep & ((1u64 << end) - 1);
        let (mut starts, mut ends) = (word & !(word << 1), (word << 1) & !word);
        if starts & 1 == 0 {
            return None;
        }
        let mut f = [(0, 0); 5];
        for field in &mut f {
            *field = (take(&mut starts), take(&mut ends));
        }
        // 5 fields, no more (a missing one: its start is 64).
        (starts == 0 && f[4].0 < 64).then_some(f)
    }

    /// [`fio_v3`], the line's fields found by [`classify`] (a line longer than 63 bytes, or
    /// near the buffer's end, or of another shape: by [`fio_v3`] itself, which gives the same
    /// event for any line this one reads: `trace::tests::the_vector_parsers_read_as_the_bytewise_ones`).
    #[inline(always)]
    pub(super) fn fio_v3_vec<D: Digits>(
        text: &[u8],
        clock_ns: &mut u64,
        streams: &mut Streams,
        filter: Option<&[u8]>,
        digits: D,
    ) -> Option<(Event, usize)> {
        let Some((head, sep, end)) = ws_head(text) else {
            return fio_v3(text, clock_ns, streams, filter);
        };
        fio_v3_classified(text, head, sep, end, clock_ns, streams, filter, digits)
    }

    /// [`fio_v3_vec`] from the line's head, the separators before its newline and the
    /// newline's position (< 64), however they were classified.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn fio_v3_classified<D: Digits>(
        text: &[u8],
        head: &[u8; VEC_BYTES],
        sep: u64,
        end: usize,
        clock_ns: &mut u64,
        streams: &mut Streams,
        filter: Option<&[u8]>,
        digits: D,
    ) -> Option<(Event, usize)> {
        let Some([t, file, op, offset, bytes]) = ws_fields5(sep, end) else {
            return fio_v3(text, clock_ns, streams, filter);
        };
        let Some(op) = op_word(head, op.0, op.1) else {
            return fio_v3(text, clock_ns, streams, filter);
        };
        let (Some(us), Some(offset), Some(bytes)) = (
            digits.number(head, t.0, t.1),
            digits.number(head, offset.0, offset.1),
            digits.number(head, bytes.0, bytes.1),
        ) else {
            return fio_v3(text, clock_ns, streams, filter);
        };
        fio_v3_io(FioV3 { us, file: &head[file.0..file.1], op, offset, bytes }, end + 1, clock_ns, streams, filter)
    }

    /// The op of a fio line's field `head[start..end]` (`start <= end < 64`): `read` or
    /// `write`, else None. Without a branch on which of the two it is: the field's first
    /// eight bytes are compared as a word with each (a match of the bytes `read` and `write`
    /// made a branch that a trace's mixed reads and writes mispredicted, about 4% of a
    /// streamed fio v3 replay's CPU samples at the `w`'s compare).
    #[inline(always)]
    pub(super) fn op_word(head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<Op> {
        op_word_folded(head, start, end, 0)
    }

    /// [`op_word`] in any case (MSR's `Read`, `write`, `WRITE`): each byte's 0x20 bit set
    /// before the compare, which maps a byte to a lowercase letter only from that letter
    /// or its capital, as `eq_ignore_ascii_case` compares them.
    #[inline(always)]
    pub(super) fn op_word_any_case(head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<Op> {
        op_word_folded(head, start, end, 0x2020_2020_2020_2020)
    }

    #[inline(always)]
    fn op_word_folded(head: &[u8; VEC_BYTES], start: usize, end: usize, fold: u64) -> Option<Op> {
        const READ: u64 = u32::from_le_bytes(*b"read") as u64;
        const WRITE: u64 = u64::from_le_bytes(*b"write\0\0\0");
        let s = start & 63; // the same start (below 64): the eight bytes lie within the head
        let w = u64::from_le_bytes(head[s..s + 8].try_into().expect("eight bytes")) | fold;
        let len = end.wrapping_sub(start);
        // Which of the two the length names, then one compare of length and bytes with it,
        // the choices made by arithmetic on that bit (`&&`s and an `if` on the two matches
        // were compiled back into a branch per word; `select_unpredictable` is past the
        // MSRV).
        let write = len == 5;
        let bit = u64::from(write);
        let mask = 0xFFFF_FFFF | (0xFF_0000_0000 * bit);
        let want = READ ^ ((READ ^ WRITE) & bit.wrapping_neg());
        if ((w & mask) ^ want) | (len ^ (4 + bit as usize)) as u64 != 0 {
            return None;
        }
        Some(if write { Op::Write } else { Op::Read })
    }

    /// The op of an Alibaba line's field `head[start..end]` (`start <= end < 64`): `R` or
    /// `r` a read, `W` or `w` a write, else None; as [`op_word`], without a branch on which.
    #[inline(always)]
    pub(super) fn op_letter(head: &[u8; VEC_BYTES], start: usize, end: usize) -> Option<Op> {
        let b = head[start & 63] | 0x20; // b'R' and b'r' to b'r' only, b'W' and b'w' to b'w'
        let write = b == b'w';
        let want = b'r' ^ ((b'r' ^ b'w') & u8::from(write).wrapping_neg());
        if (b ^ want) as usize | (end.wrapping_sub(start) ^ 1) != 0 {
            return None;
        }
        Some(if write { Op::Write } else { Op::Read })
    }

    /// [`msr`], the line's fields found by [`classify`] (else by [`msr`] itself).
    #[inline(always)]
    pub(super) fn msr_vec<D: Digits>(
        text: &[u8],
        streams: &mut Streams,
        filter: Option<&[u8]>,
        digits: D,
    ) -> Option<(Event, usize)> {
        let Some((head, [ticks, host, disk, op, offset, bytes, _], end)) = csv_fields::<7>(text) else {
            return msr(text, streams, filter);
        };
        let hostname = &text[host.0..host.1];
        let Some(op) = op_word_any_case(head, op.0, op.1) else {
            return msr(text, streams, filter);
        };
        let (Some(ticks), Some(_), Some(offset), Some(bytes)) = (
            digits.number(head, ticks.0, ticks.1),
            digits.number(head, disk.0, disk.1),
            digits.number(head, offset.0, offset.1),
            digits.number(head, bytes.0, bytes.1),
        ) else {
            return msr(text, streams, filter);
        };
        if hostname.first().is_none_or(u8::is_ascii_whitespace) || hostname.last().is_none_or(u8::is_ascii_whitespace) {
            return None; // as msr: the general parser trims fields
        }
        let f = Msr { ticks, host: hostname, disk: &text[disk.0..disk.1], op, offset, bytes };
        msr_io(f, end + 1, streams, filter)
    }

    /// [`alibaba`], the line's fields found by [`classify`] (else by [`alibaba`] itself).
    #[inline(always)]
    pub(super) fn alibaba_vec<D: Digits>(
        text: &[u8],
        streams: &mut Streams,
        filter: Option<&[u8]>,
        digits: D,
    ) -> Option<(Event, usize)> {
        let Some((head, [device, op, offset, bytes, us], end)) = csv_fields::<5>(text) else {
            return alibaba(text, streams, filter);
        };
        let Some(op) = op_letter(head, op.0, op.1) else {
            return alibaba(text, streams, filter);
        };
        // A carriage return before the newline (more whitespace: by alibaba).
        let us_end = if us.1 > us.0 && text[us.1 - 1] == b'\r' { us.1 - 1 } else { us.1 };
        let (Some(_), Some(offset), Some(bytes), Some(us)) = (
            digits.number(head, device.0, device.1),
            digits.number(head, offset.0, offset.1),
            digits.number(head, bytes.0, bytes.1),
            digits.number(head, us.0, us_end),
        ) else {
            return alibaba(text, streams, filter);
        };
        alibaba_io(Alibaba { device: &text[device.0..device.1], op, offset, bytes, us }, end + 1, streams, filter)
    }
}

/// A trace read line by line: an iterator of I/Os in arrival order (within the window),
/// arrivals relative to the first I/O handed out. Errors end the iteration.
pub struct TraceReader<R: BufRead> {
    input: R,
    path: Option<String>,
    format: TraceFormat,
    options: TraceOptions,
    /// Lines read while detecting, handed to the parser first.
    ahead: VecDeque<Vec<u8>>,
    line: Vec<u8>,
    line_number: usize,
    header_pending: bool,
    /// blkparse: the action taken as the arrival (b'D' or b'Q').
    blk_action: u8,
    fio_clock_ns: u64,
    streams: Streams,
    /// Held I/Os sorted by (arrival, order read).
    window: Ring,
    t0: Option<u64>,
    last_out_ns: u64,
    input_done: bool,
    failed: bool,
    /// An error met after the I/Os of a batch, for the next call ([`TraceReader::next_batch`]).
    deferred: Option<TraceError>,
    stats: TraceStats,
    /// Every line through the general parser (the tests compare the two ways).
    general_only: bool,
    /// The fast parsers' numbers by SSSE3 (where the processor has it; else eight bytes at
    /// a time).
    #[cfg(target_arch = "x86_64")]
    ssse3: Option<fast::Ssse3>,
    /// The processor has BMI1, BMI2, LZCNT and POPCNT: the fast run's loop compiled for them
    /// is taken ([`TraceReader::fast_run_bmi`]).
    #[cfg(target_arch = "x86_64")]
    bmi: bool,
    /// The CPU time of the thread that reads the file's blocks ([`TraceInput`]), if any.
    reader_cpu: Option<Arc<AtomicU64>>,
}

impl TraceReader<TraceInput> {
    /// Opens a trace file (`-` is standard input), gzip or not, read through the page cache
    /// ([`TraceInput::file`]); a gzip file's decompressor reads from it.
    pub fn open(path: &Path, options: TraceOptions) -> Result<Self, TraceError> {
        Self::open_from(path, options, false)
    }

    /// As [`TraceReader::open`], the file read by `O_DIRECT` ([`TraceInput::direct`]: not
    /// through the page cache, so a trace of GBs does not fill it); an error for standard
    /// input and where the file system refuses the flag.
    pub fn open_direct(path: &Path, options: TraceOptions) -> Result<Self, TraceError> {
        Self::open_from(path, options, true)
    }

    fn open_from(path: &Path, options: TraceOptions, direct: bool) -> Result<Self, TraceError> {
        let name = path.display().to_string();
        let with_path = |e: TraceError| TraceError { path: Some(name.clone()), ..e };
        let mut raw = if path.as_os_str() == "-" {
            if direct {
                return Err(with_path(bad(0, "O_DIRECT reads a file, not standard input")));
            }
            TraceInput::buffered(Box::new(std::io::stdin()))
        } else {
            // Non-blocking, regular files only: a FIFO or a device is refused, not read.
            let file = smartcon_util::paths::open_input("", path).map_err(|e| with_path(bad(0, e.what)))?;
            if direct {
                TraceInput::direct(file).map_err(|e| with_path(bad(0, e.to_string())))?
            } else {
                TraceInput::file(file)
            }
        };
        let reader_cpu = raw.reader_cpu_ns();
        let head = raw.fill_buf().map_err(|e| with_path(bad(0, format!("cannot read: {e}"))))?;
        // A gzip trace's decompressor reads from the file's buffer (or blocks); otherwise
        // the parser reads that buffer itself (a second buffer around it, as before issue
        // 33's memory check, was 64 KiB more for nothing).
        let input = if head.starts_with(&[0x1f, 0x8b]) {
            TraceInput::buffered(Box::new(flate2::bufread::MultiGzDecoder::new(raw)))
        } else {
            raw
        };
        let mut r = TraceReader::new(input, options).map_err(with_path)?;
        r.path = Some(name);
        r.reader_cpu = Some(reader_cpu);
        Ok(r)
    }
}

/// [`TraceReader::fast_run`]'s loop for the reader's format, its parser inlined into it (a
/// call per line returned the event through memory, and the format was matched per line),
/// the vector parsers' numbers read by `digits` ([`fast::Digits`]). A macro, not a generic
/// function, so that its closures are written in (and compiled for the processor features
/// of) the function that uses it.
macro_rules! fast_run_formats {
    ($reader:ident, $out:ident, $max:ident, $digits:expr) => {{
        let digits = $digits;
        match $reader.format {
            TraceFormat::Blkparse => $reader.fast_run_of($out, $max, |text, _, streams, filter, action| {
                fast::blkparse(text, action, streams, filter)
            }),
            TraceFormat::FioV2 => $reader.fast_run_of($out, $max, fast::fio_v2_line),
            TraceFormat::FioV3 => $reader.fast_run_of($out, $max, |text, clock, streams, filter, _| {
                fast::fio_v3_vec(text, clock, streams, filter, digits)
            }),
            TraceFormat::Msr => $reader
                .fast_run_of($out, $max, |text, _, streams, filter, _| fast::msr_vec(text, streams, filter, digits)),
            TraceFormat::Alibaba => $reader.fast_run_of($out, $max, |text, _, streams, filter, _| {
                fast::alibaba_vec(text, streams, filter, digits)
            }),
            TraceFormat::Tencent => {
                $reader.fast_run_of($out, $max, |text, _, streams, filter, _| fast::tencent(text, streams, filter))
            }
        }
    }};
}

impl<R: BufRead> TraceReader<R> {
    /// Detects the format (unless given) from the first lines and prepares to read.
    pub fn new(input: R, options: TraceOptions) -> Result<Self, TraceError> {
        if options.reorder_window == 0 || options.reorder_window > REORDER_WINDOW_MAX {
            return Err(bad(0, format!("the reorder window must be 1..={REORDER_WINDOW_MAX} I/Os")));
        }
        let window = Ring::with_limit(options.reorder_window.saturating_add(OWED_MAX));
        let mut r = TraceReader {
            input,
            path: None,
            format: options.format.unwrap_or(TraceFormat::Blkparse),
            options,
            ahead: VecDeque::new(),
            line: Vec::with_capacity(256),
            line_number: 0,
            header_pending: false,
            blk_action: b'D',
            fio_clock_ns: 0,
            streams: Streams::default(),
            window,
            t0: None,
            last_out_ns: 0,
            input_done: false,
            failed: false,
            deferred: None,
            stats: TraceStats::default(),
            general_only: false,
            #[cfg(target_arch = "x86_64")]
            ssse3: fast::Ssse3::detect(),
            #[cfg(target_arch = "x86_64")]
            bmi: std::is_x86_feature_detected!("bmi1")
                && std::is_x86_feature_detected!("bmi2")
                && std::is_x86_feature_detected!("lzcnt")
                && std::is_x86_feature_detected!("popcnt"),
            reader_cpu: None,
        };
        r.detect()?;
        Ok(r)
    }

    pub fn format(&self) -> TraceFormat {
        self.format
    }

    pub fn stats(&self) -> TraceStats {
        self.stats
    }

    /// The CPU time so far of the thread that reads the file for this reader (0 when there
    /// is none): a replay counts it with the parser's and its own.
    pub fn reader_cpu_ns(&self) -> u64 {
        self.reader_cpu.as_ref().map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// Where [`TraceReader::reader_cpu_ns`] reads (for a caller that lends the reader out).
    pub(crate) fn reader_cpu_clock(&self) -> Option<Arc<AtomicU64>> {
        self.reader_cpu.clone()
    }

    /// Reads one raw line into `buf` (without its newline); false at the end.
    fn read_raw(&mut self, buf: &mut Vec<u8>) -> Result<bool, TraceError> {
        buf.clear();
        let n = self.stats.lines as usize + 1;
        // At most one byte more than a line may have: a longer line is an error, not a
        // buffer that grows (std's read_until finds the newline a word at a time).
        // From the reader's buffer, as `take(LINE_BYTES_MAX + 1).read_until(b'\n')` would,
        // without the Take adapter and with the memchr crate's vector search (std's
        // read_until searched a word at a time: 8% of a streamed replay).
        let mut read = 0usize;
        loop {
            let avail = match self.input.fill_buf() {
                Ok(avail) => avail,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(bad(n, format!("cannot read: {e}"))),
            };
            if avail.is_empty() {
                break;
            }
            let room = LINE_BYTES_MAX + 1 - buf.len();
            let window = &avail[..avail.len().min(room)];
            let (used, done) = match memchr::memchr(b'\n', window) {
                Some(i) => (i + 1, true),
                None => (window.len(), window.len() == room),
            };
            buf.extend_from_slice(&window[..used]);
            self.input.consume(used);
            read += used;
            if done {
                break;
            }
        }
        if read == 0 {
            return Ok(false);
        }
        self.stats.bytes_read += read as u64;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if buf.len() > LINE_BYTES_MAX {
            return Err(bad(n, format!("longer than {LINE_BYTES_MAX} bytes: not a text trace")));
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        self.stats.lines += 1;
        Ok(true)
    }

    fn detect(&mut self) -> Result<(), TraceError> {
        let mut detected = self.options.format.map(|f| (f, false));
        let mut first_meaningful = true;
        let mut any_d = false;
        let mut saw_q = false;
        while self.ahead.len() < DETECT_LINES {
            let mut buf = Vec::new();
            if !self.read_raw(&mut buf)? {
                break;
            }
            let n = self.stats.lines as usize;
            if first_meaningful && !buf.trim_ascii().is_empty() {
                first_meaningful = false;
                match detect_line(n, &buf)? {
                    Some((f, header)) if self.options.format.is_none_or(|given| given == f) => {
                        detected = Some((f, header));
                        self.header_pending = header;
                    }
                    // A header of the given format's family (fio) is still a header.
                    Some((f, header)) if header && matches!(f, TraceFormat::FioV2 | TraceFormat::FioV3) => {
                        self.header_pending = true;
                    }
                    Some(_) => {}
                    None if detected.is_none() => {
                        let names: Vec<&str> = TraceFormat::ALL.iter().map(|f| f.name()).collect();
                        return Err(bad(
                            n,
                            format!(
                                "unknown trace format: {:?} is a line of none of {} (or give --format)",
                                lossy(&buf),
                                names.join(", ")
                            ),
                        ));
                    }
                    None => {}
                }
            }
            if detected.is_some_and(|(f, _)| f == TraceFormat::Blkparse) {
                let mut f = [&b""[..]; 6];
                if split_ws(&buf, &mut f) == 6 {
                    any_d |= f[5] == b"D";
                    saw_q |= f[5] == b"Q";
                }
            } else if detected.is_some() && self.ahead.len() > 1 {
                self.ahead.push_back(buf);
                break; // only blkparse looks further ahead
            }
            self.ahead.push_back(buf);
        }
        let Some((format, _)) = detected else {
            return Err(bad(0, "the trace is empty"));
        };
        self.format = format;
        self.blk_action = if any_d || !saw_q { b'D' } else { b'Q' };
        self.line_number = 0;
        Ok(())
    }

    fn next_line(&mut self) -> Result<bool, TraceError> {
        self.line_number += 1;
        let more = if let Some(l) = self.ahead.pop_front() {
            self.line = l;
            true
        } else {
            let mut buf = std::mem::take(&mut self.line);
            let more = self.read_raw(&mut buf)?;
            self.line = buf;
            more
        };
        // Counted on lines read, so a trace of exactly `lines_max` lines ends normally.
        if more && self.line_number as u64 > self.options.lines_max {
            return Err(bad(
                self.line_number,
                format!("more than {} lines; raise --trace-lines-max to read a longer trace", self.options.lines_max),
            ));
        }
        Ok(more)
    }

    fn device_matches(&self, device: &[u8]) -> bool {
        self.options.device_filter.as_deref().is_none_or(|d| d.as_bytes() == device)
    }

    /// Parses the current line.
    fn event(&mut self) -> Result<Event, TraceError> {
        let n = self.line_number;
        let line = std::mem::take(&mut self.line);
        let result = self.event_of(n, &line);
        self.line = line;
        result
    }

    fn event_of(&mut self, n: usize, raw: &[u8]) -> Result<Event, TraceError> {
        let line = raw.trim_ascii();
        if line.is_empty() {
            return Ok(Event::Nothing);
        }
        if self.header_pending {
            self.header_pending = false;
            return Ok(Event::Nothing);
        }
        match self.format {
            TraceFormat::Blkparse => self.blkparse(n, line),
            TraceFormat::FioV2 | TraceFormat::FioV3 => self.fio(n, line),
            TraceFormat::Msr | TraceFormat::Alibaba | TraceFormat::Tencent => self.csv(n, line),
        }
    }

    fn blkparse(&mut self, n: usize, line: &[u8]) -> Result<Event, TraceError> {
        if line.starts_with(b"CPU") || line.starts_with(b"Total") {
            return Ok(Event::End); // the summary
        }
        let mut f = [&b""[..]; 11];
        let count = split_ws(line, &mut f);
        if !is_maj_min(f[0]) {
            return Err(bad(n, format!("not a blkparse event (expected MAJ,MIN first): {:?}", lossy(line))));
        }
        if count < 7 {
            return Err(bad(n, "a blkparse event needs at least 7 fields"));
        }
        let time_ns = parse_seconds_ns(n, f[3])?;
        parse_u64(n, "pid", f[4])?;
        if f[5] != [self.blk_action] {
            return Ok(Event::Nothing); // other stages of the same requests
        }
        let rwbs = f[6];
        let op = if rwbs.contains(&b'D') {
            None // discard
        } else if rwbs.contains(&b'W') {
            Some(Op::Write)
        } else if rwbs.contains(&b'R') {
            Some(Op::Read)
        } else {
            None
        };
        // Data requests carry `SECTOR + COUNT`; flushes may not.
        let (Some(op), true) = (op, count >= 10 && f[8] == b"+") else {
            return Ok(Event::Skip);
        };
        let sector = parse_u64(n, "sector", f[7])?;
        let sectors = parse_u64(n, "sector count", f[9])?;
        if sectors == 0 {
            return Ok(Event::Skip);
        }
        if !self.device_matches(f[0]) {
            return Ok(Event::Filtered);
        }
        let stream = self.streams.id(f[4]);
        let (offset, bytes) = (scaled(n, "sector", sector, 512)?, scaled(n, "sector count", sectors, 512)?);
        Ok(Event::Io { time_ns, op, offset, bytes, stream })
    }

    fn fio(&mut self, n: usize, line: &[u8]) -> Result<Event, TraceError> {
        let v3 = self.format == TraceFormat::FioV3;
        let mut all = [&b""[..]; 6];
        let count = split_ws(line, &mut all);
        let (f, count) = if v3 {
            let us = parse_u64(n, "timestamp (us)", all[0])?;
            self.fio_clock_ns = us.checked_mul(1_000).ok_or_else(|| bad(n, "timestamp too large"))?;
            (&all[1..], count - 1)
        } else {
            (&all[..], count)
        };
        if count < 2 {
            return Err(bad(n, "expected FILE ACTION [OFFSET LENGTH]"));
        }
        let op = match f[1] {
            b"read" => Op::Read,
            b"write" => Op::Write,
            b"add" | b"open" | b"close" | b"sync" | b"datasync" | b"trim" => return Ok(Event::Skip),
            b"wait" if !v3 => {
                let us = parse_u64(n, "wait (us)", f[2])?;
                // Checked: a wrapped or saturated clock would replay as a wrong time.
                self.fio_clock_ns =
                    us.checked_mul(1_000).and_then(|ns| self.fio_clock_ns.checked_add(ns)).ok_or_else(|| {
                        bad(n, format!("wait {us} us takes the clock past {} s", u64::MAX / 1_000_000_000))
                    })?;
                return Ok(Event::Nothing);
            }
            other => return Err(bad(n, format!("unknown fio iolog action {:?}", lossy(other)))),
        };
        if count != 4 {
            return Err(bad(n, format!("{} needs OFFSET LENGTH", op.name())));
        }
        let offset = parse_u64(n, "offset", f[2])?;
        let bytes = parse_u64(n, "length", f[3])?;
        if bytes == 0 {
            return Err(bad(n, "zero-length I/O"));
        }
        if !self.device_matches(f[0]) {
            return Ok(Event::Filtered);
        }
        let stream = self.streams.id(f[0]);
        Ok(Event::Io { time_ns: self.fio_clock_ns, op, offset, bytes, stream })
    }

    fn csv(&mut self, n: usize, line: &[u8]) -> Result<Event, TraceError> {
        let mut f = [&b""[..]; 7];
        let fields = split_csv(line, &mut f);
        let (want, columns) = match self.format {
            TraceFormat::Msr => (7, "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime"),
            TraceFormat::Alibaba => (5, "device_id,opcode,offset,length,timestamp"),
            _ => (5, "Timestamp,Offset,Size,IOType,VolumeID"),
        };
        if fields != want {
            let name = self.format.name();
            return Err(bad(n, format!("{name} lines have {want} fields ({columns}), this one {fields}")));
        }
        let (time_ns, op, offset, bytes, device): (u64, Op, u64, u64, &[u8]) = match self.format {
            TraceFormat::Msr => {
                let ticks = parse_u64(n, "timestamp (filetime)", f[0])?;
                let op = match f[3] {
                    t if t.eq_ignore_ascii_case(b"read") => Op::Read,
                    t if t.eq_ignore_ascii_case(b"write") => Op::Write,
                    t => return Err(bad(n, format!("type {:?} is neither Read nor Write", lossy(t)))),
                };
                parse_u64(n, "disk number", f[2])?;
                let offset = parse_u64(n, "offset", f[4])?;
                let bytes = parse_u64(n, "size", f[5])?;
                // HOSTNAME_DISKNUMBER, as the trace files are named.
                let mut key = [0u8; 128];
                let (h, d) = (f[1], f[2]);
                if h.len() + 1 + d.len() > key.len() {
                    return Err(bad(n, "hostname too long"));
                }
                key[..h.len()].copy_from_slice(h);
                key[h.len()] = b'_';
                key[h.len() + 1..h.len() + 1 + d.len()].copy_from_slice(d);
                let device = &key[..h.len() + 1 + d.len()];
                if bytes == 0 {
                    return Ok(Event::Skip);
                }
                if !self.device_matches(device) {
                    return Ok(Event::Filtered);
                }
                let stream = self.streams.id(device);
                let time_ns = scaled(n, "timestamp (filetime)", ticks, 100)?;
                return Ok(Event::Io { time_ns, op, offset, bytes, stream });
            }
            TraceFormat::Alibaba => {
                parse_u64(n, "device_id", f[0])?;
                let op = match f[1] {
                    b"R" | b"r" => Op::Read,
                    b"W" | b"w" => Op::Write,
                    t => return Err(bad(n, format!("opcode {:?} is neither R nor W", lossy(t)))),
                };
                let offset = parse_u64(n, "offset", f[2])?;
                let bytes = parse_u64(n, "length", f[3])?;
                let us = parse_u64(n, "timestamp (us)", f[4])?;
                (scaled(n, "timestamp (us)", us, 1_000)?, op, offset, bytes, f[0])
            }
            _ => {
                let secs = parse_u64(n, "timestamp (s)", f[0])?;
                let sector = parse_u64(n, "offset (sectors)", f[1])?;
                let sectors = parse_u64(n, "size (sectors)", f[2])?;
                let op = match f[3] {
                    b"0" => Op::Read,
                    b"1" => Op::Write,
                    t => return Err(bad(n, format!("IOType {:?} is neither 0 (read) nor 1 (write)", lossy(t)))),
                };
                parse_u64(n, "VolumeID", f[4])?;
                let offset = scaled(n, "offset (sectors)", sector, 512)?;
                let bytes = scaled(n, "size (sectors)", sectors, 512)?;
                (scaled(n, "timestamp (s)", secs, 1_000_000_000)?, op, offset, bytes, f[4])
            }
        };
        if bytes == 0 {
            return Ok(Event::Skip);
        }
        if !self.device_matches(device) {
            return Ok(Event::Filtered);
        }
        let stream = self.streams.id(device);
        Ok(Event::Io { time_ns, op, offset, bytes, stream })
    }

    /// The next line's event by the [`fast`] parsers, straight from the reader's buffer,
    /// if the whole line is there and of their shape (else None, nothing read).
    #[inline]
    fn fast_event(&mut self) -> Option<Event> {
        if self.general_only
            || !self.ahead.is_empty()
            || self.header_pending
            || self.line_number as u64 >= self.options.lines_max
        {
            return None;
        }
        let avail = self.input.fill_buf().ok()?;
        let filter = self.options.device_filter.as_deref().map(str::as_bytes);
        let (event, used) = match self.format {
            TraceFormat::Blkparse => fast::blkparse(avail, self.blk_action, &mut self.streams, filter),
            TraceFormat::FioV2 => fast::fio_v2(avail, &mut self.fio_clock_ns, &mut self.streams, filter),
            TraceFormat::FioV3 => {
                fast::fio_v3_vec(avail, &mut self.fio_clock_ns, &mut self.streams, filter, fast::Swar)
            }
            TraceFormat::Msr => fast::msr_vec(avail, &mut self.streams, filter, fast::Swar),
            TraceFormat::Alibaba => fast::alibaba_vec(avail, &mut self.streams, filter, fast::Swar),
            TraceFormat::Tencent => fast::tencent(avail, &mut self.streams, filter),
        }?;
        self.input.consume(used);
        self.stats.bytes_read += used as u64;
        self.stats.lines += 1;
        self.line_number += 1;
        Some(event)
    }

    /// Reads until the window is full or the input ends.
    fn fill(&mut self) -> Result<(), TraceError> {
        while !self.input_done && self.window.len() < self.options.reorder_window {
            let event = match self.fast_event() {
                Some(event) => event,
                None => {
                    if !self.next_line()? {
                        self.input_done = true;
                        break;
                    }
                    self.event()?
                }
            };
            self.take_event(event)?;
        }
        Ok(())
    }

    /// Counts or admits one line's event.
    #[inline]
    fn take_event(&mut self, event: Event) -> Result<(), TraceError> {
        match event {
            Event::Io { time_ns, op, offset, bytes, stream } => admit(
                &mut self.window,
                &mut self.stats,
                self.options.capacity_bytes,
                self.line_number,
                TraceIo { arrival_ns: time_ns, op, offset, bytes, stream },
            ),
            Event::Skip => {
                self.stats.skipped += 1;
                Ok(())
            }
            Event::Filtered => {
                self.stats.filtered += 1;
                Ok(())
            }
            Event::Nothing => Ok(()),
            Event::End => {
                self.input_done = true;
                Ok(())
            }
        }
    }

    fn next_io(&mut self) -> Result<Option<TraceIo>, TraceError> {
        if self.window.len() < self.options.reorder_window {
            self.fill()?;
        }
        let Some(io) = self.window.pop_front() else {
            if self.stats.ios == 0 {
                return Err(bad(0, format!("the {} trace has no reads or writes", self.format.name())));
            }
            return Ok(None);
        };
        hand_out(io, &mut self.t0, &mut self.last_out_ns, &mut self.stats, self.line_number).map(Some)
    }

    /// The next I/Os into `out` (cleared first; at most `max` of them, at least one until
    /// the trace ends): the same I/Os, in the same order and with the same stats and error,
    /// as the iterator hands out one by one, for a caller that takes many at once (the
    /// replay: no `Option<Result<..>>` per record, and the lines of the fast parsers' shape
    /// parsed in a run straight from the reader's buffer). Empty `out`: the end. An error
    /// comes after the I/Os read before it, on the next call.
    pub fn next_batch(&mut self, out: &mut Vec<TraceIo>, max: usize) -> Result<(), TraceError> {
        out.clear();
        if let Some(e) = self.deferred.take() {
            return Err(e);
        }
        if self.failed {
            return Ok(());
        }
        if let Err(e) = self.batch_into(out, max.max(1)) {
            self.failed = true;
            let e = TraceError { path: self.path.clone(), ..e };
            if out.is_empty() {
                return Err(e);
            }
            self.deferred = Some(e);
        }
        Ok(())
    }

    fn batch_into(&mut self, out: &mut Vec<TraceIo>, max: usize) -> Result<(), TraceError> {
        while out.len() < max {
            // An I/O is handed out when the window holds its full count (or the input ended),
            // as the iterator does: the same reordering, the same late ones.
            if self.window.len() >= self.options.reorder_window || self.input_done {
                let Some(io) = self.window.pop_front() else {
                    if self.stats.ios == 0 {
                        return Err(bad(0, format!("the {} trace has no reads or writes", self.format.name())));
                    }
                    break;
                };
                out.push(hand_out(io, &mut self.t0, &mut self.last_out_ns, &mut self.stats, self.line_number)?);
                continue;
            }
            if self.fast_run(out, max)? {
                continue;
            }
            if !self.next_line()? {
                self.input_done = true;
                continue;
            }
            let event = self.event()?;
            self.take_event(event)?;
        }
        Ok(())
    }

    /// Lines of the [`fast`] parsers' shape, parsed in a run from the reader's buffer (one
    /// `fill_buf` and one `consume` for all of them), each admitted to the window and, when
    /// the window holds its count, the window's first I/O handed out into `out`. False when
    /// the next line is not theirs (or not whole in the buffer): the general parser reads it.
    ///
    /// The hand-out is deferred while the I/Os come in order: an I/O at or after the
    /// window's last is pushed onto its end, and the I/O the window would hand out then (its
    /// first) is owed, not moved; the owed ones are moved into `out` together, before an
    /// I/O that goes back in time is inserted, and at the end of the run. Pushing onto the
    /// end never changes which I/O is first, so the I/Os owed are the ones the iterator
    /// hands out one at a time, in the same order, and an I/O going back in time meets the
    /// window the iterator has (the same reordering, the same late ones; the tests hold
    /// every I/O, stat and error equal). Only once the origin is known and when nothing in
    /// the window, nor the I/O pushed, lies beyond [`TRACE_SPAN_NS_MAX`] from it: then no
    /// owed hand-out can fail, so none has to happen at its own line. The window holds up
    /// to `max` and at most [`OWED_MAX`] I/Os more than its count meanwhile.
    fn fast_run(&mut self, out: &mut Vec<TraceIo>, max: usize) -> Result<bool, TraceError> {
        if self.general_only || !self.ahead.is_empty() || self.header_pending {
            return Ok(false);
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(ssse3) = self.ssse3 {
            if self.bmi {
                // SAFETY: `fast_run_bmi` needs SSSE3 (`ssse3` exists) and BMI1, BMI2, LZCNT
                // and POPCNT, which were detected on this processor (`bmi`).
                return unsafe { self.fast_run_bmi(out, max, ssse3) };
            }
            // SAFETY: `fast_run_ssse3` needs SSSE3, which `Ssse3::detect` found on this
            // processor (`ssse3` exists).
            return unsafe { self.fast_run_ssse3(out, max, ssse3) };
        }
        fast_run_formats!(self, out, max, fast::Swar)
    }

    /// [`TraceReader::fast_run`] compiled for SSSE3: the vector parsers' numbers by it,
    /// inlined into the loop (its closures are compiled for SSSE3 as it is, so the numbers
    /// inline into them).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "ssse3")]
    unsafe fn fast_run_ssse3(
        &mut self,
        out: &mut Vec<TraceIo>,
        max: usize,
        ssse3: fast::Ssse3,
    ) -> Result<bool, TraceError> {
        fast_run_formats!(self, out, max, ssse3)
    }

    /// [`TraceReader::fast_run_ssse3`] compiled for BMI1, BMI2, LZCNT and POPCNT too
    /// (`tzcnt` without its zero case, `blsr`, `bzhi` and `shlx` for the field masks). Not
    /// for AVX: a copy compiled for AVX and AVX2 too was as fast alone, but under `perf
    /// record` (10 kHz of interrupts) it ran at 13-14 M/s against 19-20 with `pay`, an SSE
    /// function it calls, at 20-24% of the samples against 4% (a state transition between
    /// VEX and legacy SSE code is the likely cause; not examined further).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "ssse3,bmi1,bmi2,lzcnt,popcnt")]
    unsafe fn fast_run_bmi(
        &mut self,
        out: &mut Vec<TraceIo>,
        max: usize,
        ssse3: fast::Ssse3,
    ) -> Result<bool, TraceError> {
        fast_run_formats!(self, out, max, ssse3)
    }

    /// [`TraceReader::fast_run`] with the format's parser `parse` (text, fio clock, streams,
    /// device filter, blkparse arrival action).
    #[inline(always)]
    fn fast_run_of<P>(&mut self, out: &mut Vec<TraceIo>, max: usize, parse: P) -> Result<bool, TraceError>
    where
        P: Fn(&[u8], &mut u64, &mut Streams, Option<&[u8]>, u8) -> Option<(Event, usize)>,
    {
        let lines_left = self.options.lines_max.saturating_sub(self.line_number as u64);
        let Ok(avail) = self.input.fill_buf() else {
            return Ok(false); // the general path reads again and reports the error
        };
        let filter = self.options.device_filter.as_deref().map(str::as_bytes);
        let count = self.options.reorder_window;
        // The latest arrival an I/O may have to be pushed with its hand-out owed (None: no
        // hand-out is owed in this run).
        let defer_until = self
            .t0
            .map(|t0| t0.saturating_add(TRACE_SPAN_NS_MAX))
            .filter(|&until| self.window.back().is_none_or(|io| io.arrival_ns <= until));
        let (mut at, mut lines, mut owed) = (0usize, 0u64, 0usize);
        let mut result = Ok(());
        while lines < lines_left && out.len() + owed < max && owed < OWED_MAX {
            let text = &avail[at..];
            let event = parse(text, &mut self.fio_clock_ns, &mut self.streams, filter, self.blk_action);
            let Some((event, used)) = event else { break };
            at += used;
            lines += 1;
            self.line_number += 1;
            match event {
                Event::Io { time_ns, op, mut offset, bytes, stream } => {
                    // The I/O kept in registers (a fold through `&mut io` put it on the stack,
                    // and the window's push read it back in 16-byte halves, which a store
                    // of its fields cannot forward: 15% of a streamed replay's CPU).
                    if self.options.capacity_bytes.is_some_and(|cap| offset.saturating_add(bytes) > cap) {
                        match fold_moved(offset, bytes, &mut self.stats, self.options.capacity_bytes, self.line_number)
                        {
                            Ok(moved) => offset = moved,
                            Err(e) => result = Err(e),
                        }
                    }
                    let io = TraceIo { arrival_ns: time_ns, op, offset, bytes, stream };
                    if result.is_ok()
                        && defer_until.is_some_and(|until| io.arrival_ns <= until)
                        && self.window.back().is_none_or(|last| last.arrival_ns <= io.arrival_ns)
                    {
                        self.window.push_back(io);
                        let held = self.window.len() - owed;
                        self.stats.window_max = self.stats.window_max.max(held as u64);
                        owed += usize::from(held >= count);
                        continue;
                    }
                    // Back in time, beyond the span or an error: what is owed first, then
                    // as the iterator does.
                    pay(&mut self.window, self.t0, &mut self.last_out_ns, &mut self.stats, out, owed);
                    owed = 0;
                    if result.is_ok() {
                        insert(&mut self.window, &mut self.stats, io);
                        if self.window.len() >= count {
                            let io = self.window.pop_front().expect("a full window");
                            match hand_out(io, &mut self.t0, &mut self.last_out_ns, &mut self.stats, self.line_number) {
                                Ok(io) => out.push(io),
                                Err(e) => result = Err(e),
                            }
                        }
                    }
                    if result.is_err() {
                        break;
                    }
                }
                Event::Skip => self.stats.skipped += 1,
                Event::Filtered => self.stats.filtered += 1,
                // A blkparse stage other than the arrival's, a fio v2 wait (its clock moved).
                Event::Nothing => {}
                // The summary that ends a blkparse trace goes to the general parser.
                Event::End => unreachable!("a fast parser's event"),
            }
        }
        pay(&mut self.window, self.t0, &mut self.last_out_ns, &mut self.stats, out, owed);
        self.input.consume(at);
        self.stats.bytes_read += at as u64;
        self.stats.lines += lines;
        result.map(|()| lines > 0)
    }
}

/// Hands out the window's first `owed` I/Os into `out` ([`TraceReader::fast_run`]): as
/// [`hand_out`] does one at a time, which cannot fail for them (the origin `t0` is known and
/// none lies beyond the span from it).
#[inline]
fn pay(
    window: &mut Ring,
    t0: Option<u64>,
    last_out_ns: &mut u64,
    stats: &mut TraceStats,
    out: &mut Vec<TraceIo>,
    owed: usize,
) {
    if owed == 0 {
        return;
    }
    let t0 = t0.expect("owed only once the origin is known");
    let (mut last, mut late) = (*last_out_ns, 0u64);
    // Each I/O moved with its arrival made relative, in one pass (a copy of the window's
    // slots into `out`, then a pass over them, went through the chunk twice: 256 KiB each
    // way per chunk, more than the first-level cache holds).
    let (first, second) = window.front(owed);
    for part in [first, second] {
        out.extend(part.iter().map(|&io| {
            let mut t = io.arrival_ns.saturating_sub(t0);
            debug_assert!(t <= TRACE_SPAN_NS_MAX);
            if io.arrival_ns < t0 || t < last {
                late += 1;
                t = last;
            }
            last = t;
            TraceIo { arrival_ns: t, ..io }
        }));
    }
    window.drop_front(owed);
    *last_out_ns = last;
    stats.late += late;
    stats.ios += owed as u64;
}

/// I/Os that [`TraceReader::fast_run`] holds in the window beyond its count, their hand-out
/// owed: the window's ring holds at most its count and these, so that the default window
/// (4,096 I/Os) takes 4,352 slots (136 KiB), not the next power of two, 8,192 (256 KiB;
/// issue 33's memory check, where the ring was a third of what a streamed trace took above
/// a closed loop).
pub(crate) const OWED_MAX: usize = 256;

/// The most slots a window's ring takes at its first I/O ([`Ring::grow`]): 16,384 (512 KiB).
const RING_AT_ONCE: usize = 1 << 14;

/// The reorder window: a ring of I/Os, doubled when full (16 slots at first) up to its
/// limit, then doubled again only if it has to be (a VecDeque's push was a call per I/O,
/// its growth not inlined, 3% of a streamed replay). Not a power of two at its limit: a
/// slot wraps by a compare and a subtraction, not a mask.
#[derive(Debug, Clone, Default)]
struct Ring {
    /// The slots.
    buf: Vec<TraceIo>,
    /// The slot of the first I/O.
    head: usize,
    len: usize,
    /// The size the doubling stops at once (the window's count and [`OWED_MAX`]; 0: none).
    limit: usize,
}

impl Ring {
    fn with_limit(limit: usize) -> Ring {
        Ring { limit, ..Ring::default() }
    }

    #[inline(always)]
    fn len(&self) -> usize {
        self.len
    }

    /// The slots held (the tests bound the memory by it).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The slot of the `i`-th I/O, `i <= buf.len()`.
    #[inline(always)]
    fn slot(&self, i: usize) -> usize {
        let at = self.head + i;
        if at >= self.buf.len() {
            at - self.buf.len()
        } else {
            at
        }
    }

    /// The `i`-th I/O, `i < len`.
    #[inline(always)]
    fn get(&self, i: usize) -> TraceIo {
        debug_assert!(i < self.len);
        self.buf[self.slot(i)]
    }

    #[inline(always)]
    fn back(&self) -> Option<TraceIo> {
        (self.len > 0).then(|| self.get(self.len - 1))
    }

    #[inline(always)]
    fn push_back(&mut self, io: TraceIo) {
        if self.len == self.buf.len() {
            self.grow();
        }
        let at = self.slot(self.len);
        // Field by field: a copy of the whole I/O was compiled to two 16-byte loads of the
        // I/O just stored field by field on the stack, which the processor cannot forward
        // (15% of a streamed replay's CPU).
        let slot = &mut self.buf[at];
        slot.arrival_ns = io.arrival_ns;
        slot.op = io.op;
        slot.offset = io.offset;
        slot.bytes = io.bytes;
        slot.stream = io.stream;
        self.len += 1;
    }

    /// Twice the slots (16 at first; the limit instead if that passes it the first time),
    /// the I/Os moved to the front in order. A limit of at most [`RING_AT_ONCE`] slots is
    /// taken at once: the doublings on the way (16 to 2,048 slots for the default window)
    /// were 128 KiB of the heap freed but still resident (issue 33's memory check).
    #[cold]
    fn grow(&mut self) {
        let mut size = (self.buf.len() * 2).max(16);
        if self.buf.len() < self.limit && (size > self.limit || self.limit <= RING_AT_ONCE) {
            size = self.limit;
        }
        let mut buf = Vec::with_capacity(size);
        buf.extend((0..self.len).map(|i| self.get(i)));
        let pad = TraceIo { arrival_ns: 0, op: Op::Read, offset: 0, bytes: 0, stream: 0 };
        buf.resize(size, pad);
        (self.buf, self.head) = (buf, 0);
    }

    #[inline(always)]
    fn pop_front(&mut self) -> Option<TraceIo> {
        if self.len == 0 {
            return None;
        }
        let io = self.buf[self.head];
        self.head = self.slot(1);
        self.len -= 1;
        Some(io)
    }

    /// Puts `io` at position `i <= len`, the I/Os from `i` on one place later.
    fn insert(&mut self, i: usize, io: TraceIo) {
        debug_assert!(i <= self.len);
        self.push_back(io);
        for j in (i..self.len - 1).rev() {
            let (from, to) = (self.slot(j), self.slot(j + 1));
            self.buf[to] = self.buf[from];
        }
        let at = self.slot(i);
        self.buf[at] = io;
    }

    /// The first `n <= len` I/Os, in order: the slots from the head on, then the ones
    /// wrapped around to the start.
    #[inline(always)]
    fn front(&self, n: usize) -> (&[TraceIo], &[TraceIo]) {
        debug_assert!(n <= self.len);
        let first = (self.buf.len() - self.head).min(n);
        (&self.buf[self.head..self.head + first], &self.buf[..n - first])
    }

    /// Drops the first `n <= len` I/Os.
    #[inline(always)]
    fn drop_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        self.head = self.slot(n);
        self.len -= n;
    }
}

/// Folds a parsed I/O's offset into the capacity, counting it (an I/O larger than the
/// capacity is an error of its line).
#[inline(always)]
fn fold(
    io: &mut TraceIo,
    stats: &mut TraceStats,
    capacity_bytes: Option<u64>,
    line_number: usize,
) -> Result<(), TraceError> {
    if let Some(cap) = capacity_bytes {
        if fold_into(io, cap).map_err(|e| bad(line_number, e.message))? {
            stats.folded += 1;
        }
    }
    Ok(())
}

/// [`fold`] of an I/O that does not fit within the capacity as it is (out of line: the
/// rare case): its offset moved, or the error of its line.
#[cold]
#[inline(never)]
fn fold_moved(
    offset: u64,
    bytes: u64,
    stats: &mut TraceStats,
    capacity_bytes: Option<u64>,
    line_number: usize,
) -> Result<u64, TraceError> {
    let mut io = TraceIo { arrival_ns: 0, op: Op::Read, offset, bytes, stream: 0 };
    fold(&mut io, stats, capacity_bytes, line_number)?;
    Ok(io.offset)
}

/// Puts an I/O into the reorder window by arrival, after equal ones (stable).
#[inline(always)]
fn insert(window: &mut Ring, stats: &mut TraceStats, io: TraceIo) {
    // In order, the common case, is a push and one comparison (VecDeque::insert at the end
    // was 4% of a streamed replay).
    if window.back().is_none_or(|last| last.arrival_ns <= io.arrival_ns) {
        window.push_back(io);
    } else {
        let mut i = window.len() - 1;
        while i > 0 && window.get(i - 1).arrival_ns > io.arrival_ns {
            i -= 1;
        }
        window.insert(i, io);
    }
    stats.window_max = stats.window_max.max(window.len() as u64);
}

/// Puts a parsed I/O into the reorder window by arrival, after equal ones (stable), folding
/// its offset into the capacity first.
#[inline(always)]
fn admit(
    window: &mut Ring,
    stats: &mut TraceStats,
    capacity_bytes: Option<u64>,
    line_number: usize,
    mut io: TraceIo,
) -> Result<(), TraceError> {
    fold(&mut io, stats, capacity_bytes, line_number)?;
    insert(window, stats, io);
    Ok(())
}

/// An I/O leaving the window: its arrival made relative to the first one handed out, and
/// one older than the last handed out replayed at that instant (late).
#[inline(always)]
fn hand_out(
    mut io: TraceIo,
    t0: &mut Option<u64>,
    last_out_ns: &mut u64,
    stats: &mut TraceStats,
    line_number: usize,
) -> Result<TraceIo, TraceError> {
    let t0 = *t0.get_or_insert(io.arrival_ns);
    let mut t = io.arrival_ns.saturating_sub(t0);
    if t > TRACE_SPAN_NS_MAX {
        return Err(bad(
            line_number,
            format!(
                "an I/O arrives {} s after the trace's first, beyond the {} years a replay spans (by this line)",
                t / 1_000_000_000,
                TRACE_SPAN_NS_MAX / YEAR_NS
            ),
        ));
    }
    if io.arrival_ns < t0 || t < *last_out_ns {
        stats.late += 1;
        t = *last_out_ns;
    }
    io.arrival_ns = t;
    *last_out_ns = t;
    stats.ios += 1;
    Ok(io)
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = Result<TraceIo, TraceError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.next_io() {
            Ok(io) => io.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(TraceError { path: self.path.clone(), ..e }))
            }
        }
    }
}

/// A whole trace in memory (small traces and tests): its I/Os in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub format: TraceFormat,
    pub ios: Vec<TraceIo>,
    pub skipped: u64,
}

/// Detects the format from the first meaningful line and parses a whole trace held in
/// memory, with a window as large as the trace (fully sorted).
pub fn parse(text: &str) -> Result<Trace, TraceError> {
    let options = TraceOptions { reorder_window: REORDER_WINDOW_MAX, ..TraceOptions::default() };
    let mut r = TraceReader::new(text.as_bytes(), options)?;
    let ios = r.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok(Trace { format: r.format(), ios, skipped: r.stats().skipped })
}

/// Reads a whole trace file (gzip or not) into memory.
pub fn load(path: &Path) -> Result<Trace, TraceError> {
    let options = TraceOptions { reorder_window: REORDER_WINDOW_MAX, ..TraceOptions::default() };
    let mut r = TraceReader::open(path, options)?;
    let ios = r.by_ref().collect::<Result<Vec<_>, _>>()?;
    Ok(Trace { format: r.format(), ios, skipped: r.stats().skipped })
}

impl<R: BufRead> TraceReader<R> {
    /// Every line through the general parser and every I/O through the window one at a
    /// time: the reading as it was before the fast paths (for the tests to compare with).
    #[cfg(test)]
    pub(crate) fn general_only(mut self) -> Self {
        self.general_only = true;
        self
    }
}

/// How [`mixed_trace`] ends.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tail {
    /// Valid to the end.
    Clean,
    /// A line the format's parser refuses.
    BadLine,
    /// From two thirds on, the arrivals jump eleven years ahead (beyond the span a replay
    /// takes: an error when the first of them is handed out).
    BeyondSpan,
    /// A 2 GiB request (larger than a 1 GiB capacity: an error when it is folded).
    TooLarge,
}

/// A seeded trace of `n` records in `format` for the tests: 4 KiB to 256 KiB requests on
/// offsets up to 4 GiB (folded into a 1 GiB capacity), two devices and streams, lines the
/// format skips (other actions, zero sizes, flushes, other stages), and (but fio v2, which
/// has no timestamps) records going back in time, 1 in 25 (Tencent's seconds stand for
/// milliseconds): by up to 8 records' worth or by
/// up to 2,000 (more than a window of 16 or 300 holds, then late).
#[cfg(test)]
pub(crate) fn mixed_trace(format: TraceFormat, seed: u64, n: usize, tail: Tail) -> String {
    let mut rng = smartcon_util::rng::Rng::new(seed);
    let mut out = String::from(match format {
        TraceFormat::FioV2 => "fio version 2 iolog\n/dev/a add\n/dev/b add\n",
        TraceFormat::FioV3 => "fio version 3 iolog\n0 /dev/a add\n",
        TraceFormat::Msr => "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n",
        _ => "",
    });
    const ELEVEN_YEARS_US: u64 = 11 * 365 * 24 * 3600 * 1_000_000;
    let (mut us, mut seq) = (1_000u64, 0u64);
    for i in 0..n {
        let step = rng.below(20);
        us += step;
        let jump = if tail == Tail::BeyondSpan && i >= 2 * n / 3 { ELEVEN_YEARS_US } else { 0 };
        let back = match rng.below(25) {
            0 => rng.below(8 * 10),
            1 => rng.below(2_000 * 10),
            _ => 0,
        };
        let t = us.saturating_sub(back) + jump;
        let second = rng.percent(30);
        let write = rng.percent(30);
        let bytes = 4096u64 << rng.below(7);
        let offset = rng.below(1 << 20) * 4096;
        let skip = rng.percent(4);
        let line = match format {
            TraceFormat::Blkparse => {
                seq += 1;
                let (dev, pid) = if second { ("8,16", 4163) } else { ("8,0", 4162) };
                let rwbs = if write { "W" } else { "R" };
                let (ts, ns) = (t / 1_000_000, t % 1_000_000 * 1_000);
                let sector = offset / 512;
                let count = bytes / 512;
                let mut l =
                    format!("  {dev}    1 {seq:8} {ts:5}.{ns:09} {pid:5}  Q  {rwbs} {sector} + {count} [fio]\n");
                seq += 1;
                if skip {
                    l.push_str(&format!("  {dev}    0 {seq:8} {ts:5}.{ns:09} {pid:5}  D  FN [kworker]\n"));
                } else {
                    l.push_str(&format!(
                        "  {dev}    1 {seq:8} {ts:5}.{ns:09} {pid:5}  D  {rwbs} {sector} + {count} [fio]\n"
                    ));
                }
                l
            }
            TraceFormat::FioV2 => {
                let file = if second { "/dev/b" } else { "/dev/a" };
                let mut l = String::new();
                if step > 10 || jump > 0 && i == 2 * n / 3 {
                    l.push_str(&format!("{file} wait {}\n", step + jump * u64::from(i == 2 * n / 3)));
                }
                let action = if skip {
                    "sync"
                } else if write {
                    "write"
                } else {
                    "read"
                };
                l.push_str(&format!("{file} {action} {offset} {bytes}\n"));
                l
            }
            TraceFormat::FioV3 => {
                let file = if second { "/dev/b" } else { "/dev/a" };
                let action = if skip {
                    "trim"
                } else if write {
                    "write"
                } else {
                    "read"
                };
                format!("{t} {file} {action} {offset} {bytes}\n")
            }
            TraceFormat::Msr => {
                let op = if write { "Write" } else { "Read" };
                let size = if skip { 0 } else { bytes };
                format!("{},hm,{},{op},{offset},{size},1398\n", 128_166_372_000_000_000 + t * 10, u8::from(second))
            }
            TraceFormat::Alibaba => {
                let op = if write { 'W' } else { 'R' };
                let size = if skip { 0 } else { bytes };
                format!("{},{op},{offset},{size},{}\n", if second { 7 } else { 419 }, 1_577_808_000_000_000 + t)
            }
            TraceFormat::Tencent => {
                let size = if skip { 0 } else { bytes / 512 };
                // Seconds: a millisecond of the others' time is a second here (else every
                // record of a short trace would fall in the same second).
                format!(
                    "{},{},{size},{},{}\n",
                    1_538_323_200 + (t - jump) / 1_000 + jump / 1_000_000,
                    offset / 512,
                    u8::from(write),
                    if second { 27 } else { 1283 }
                )
            }
        };
        out.push_str(&line);
    }
    let last = match (tail, format) {
        // The summary ends the events: the event after it is not read.
        (Tail::Clean, TraceFormat::Blkparse) => {
            out.push_str("\nCPU0 (8,0):\n Reads Queued:     1,    4KiB\n  8,0 1 1 0.5 1 D R 0 + 8 [x]\n");
            return out;
        }
        (Tail::Clean | Tail::BeyondSpan, _) => return out,
        (Tail::BadLine, TraceFormat::Blkparse) => "  8,0 1 2 zero 1 D R 8 + 8 [x]".to_string(),
        (Tail::BadLine, TraceFormat::FioV2) => "/dev/a frobnicate 0 1".to_string(),
        (Tail::BadLine, TraceFormat::FioV3) => format!("{us} /dev/a read x 4096"),
        (Tail::BadLine, TraceFormat::Msr) => "1,hm,1,Erase,0,512,1".to_string(),
        (Tail::BadLine, TraceFormat::Alibaba) => "419,X,0,4096,2".to_string(),
        (Tail::BadLine, TraceFormat::Tencent) => "1,2,8,2,1283".to_string(),
        (Tail::TooLarge, TraceFormat::Blkparse) => {
            format!("  8,0 1 {} {}.000000000 4162 D R 0 + 4194304 [x]", seq + 1, us / 1_000_000)
        }
        (Tail::TooLarge, TraceFormat::FioV2) => "/dev/a read 0 2147483648".to_string(),
        (Tail::TooLarge, TraceFormat::FioV3) => format!("{us} /dev/a read 0 2147483648"),
        (Tail::TooLarge, TraceFormat::Msr) => format!("{},hm,0,Read,0,2147483648,1", 128_166_372_000_000_000 + us * 10),
        (Tail::TooLarge, TraceFormat::Alibaba) => format!("419,R,0,2147483648,{}", 1_577_808_000_000_000 + us),
        (Tail::TooLarge, TraceFormat::Tencent) => format!("{},0,4194304,0,1283", 1_538_323_200 + us / 1_000),
    };
    // The bad line, then more good ones (the error ends the reading at it).
    let more = mixed_trace(format, seed + 1, 50, Tail::Clean);
    let more = more.lines().filter(|l| !l.starts_with("fio") && !l.starts_with("Timestamp") && !l.ends_with(" add"));
    format!("{out}{last}\n{}\n", more.collect::<Vec<_>>().join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read};

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

    fn read_with(text: &str, options: TraceOptions) -> Result<(Vec<TraceIo>, TraceStats), TraceError> {
        let mut r = TraceReader::new(text.as_bytes(), options)?;
        let ios = r.by_ref().collect::<Result<Vec<_>, _>>()?;
        Ok((ios, r.stats()))
    }

    #[test]
    fn a_trace_longer_than_the_line_limit_ends_with_an_error() {
        // Standard input has no size: an endless stream of valid lines must end too.
        let mut text = String::from("fio version 2 iolog\n/dev/x add\n/dev/x open\n");
        for i in 0..20 {
            text.push_str(&format!("/dev/x read {} 4096\n", i * 4096));
        }
        let ok = TraceOptions { lines_max: 23, ..TraceOptions::default() };
        assert_eq!(read_with(&text, ok).unwrap().0.len(), 20);
        let short = TraceOptions { lines_max: 10, ..TraceOptions::default() };
        let e = read_with(&text, short).unwrap_err().to_string();
        assert!(e.contains("more than 10 lines") && e.contains("--trace-lines-max"), "{e}");
    }

    #[test]
    fn blkparse_takes_driver_issues_and_skips_flushes_and_discards() {
        let t = parse(BLK).unwrap();
        assert_eq!(t.format, TraceFormat::Blkparse);
        // Streams are numbered densely in order of appearance (PID 4162, then 4163).
        assert_eq!(
            t.ios,
            vec![
                TraceIo { arrival_ns: 0, op: Op::Read, offset: 2048 * 512, bytes: 4096, stream: 0 },
                TraceIo { arrival_ns: 97_500, op: Op::Write, offset: 4096 * 512, bytes: 8192, stream: 1 },
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
    fn an_arrival_beyond_ten_years_is_refused_with_its_line() {
        let huge = "fio version 2 iolog\n/dev/sdb add\n/dev/sdb open\n/dev/sdb read 0 4096\n/dev/sdb wait 18446744073709551\n/dev/sdb read 4096 4096\n";
        let e = parse(huge).unwrap_err().to_string();
        assert!(e.contains("18446744073 s") && e.contains("10 years"), "{e}");
        // Nine years of waits are a (strange but) valid trace.
        let nine = format!(
            "fio version 2 iolog\n/dev/sdb add\n/dev/sdb read 0 4096\n/dev/sdb wait {}\n/dev/sdb read 4096 4096\n",
            9 * YEAR_NS / 1_000
        );
        let t = parse(&nine).unwrap();
        assert_eq!(t.ios[1].arrival_ns, 9 * YEAR_NS);
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

    /// Lines as the MSR Cambridge README (SNIA IOTTA) describes them: filetime stamps,
    /// Read/Write, bytes, the response time last (ignored).
    const MSR: &str = "\
128166372003061629,hm,1,Read,3154152960,32768,8742
128166372003062629,hm,1,Write,3154185728,4096,1231
128166372003064629,hm,0,Write,1048576,4096,2001
128166372003065629,hm,1,Read,3154189824,0,100
";

    #[test]
    fn msr_cambridge_filetime_ticks_and_hostname_disk_devices() {
        let t = parse(MSR).unwrap();
        assert_eq!(t.format, TraceFormat::Msr);
        assert_eq!(t.skipped, 1, "the zero-size request");
        // Filetime counts 100 ns ticks.
        assert_eq!(t.ios.iter().map(|io| io.arrival_ns).collect::<Vec<_>>(), vec![0, 100_000, 300_000]);
        assert_eq!((t.ios[0].op, t.ios[0].offset, t.ios[0].bytes), (Op::Read, 3154152960, 32768));
        assert_eq!(t.ios[1].op, Op::Write);
        assert_ne!(t.ios[0].stream, t.ios[2].stream, "disks are streams");
        // The device filter names HOSTNAME_DISKNUMBER, as the trace files are named.
        let only = TraceOptions { device_filter: Some("hm_0".into()), ..TraceOptions::default() };
        let (ios, stats) = read_with(MSR, only).unwrap();
        assert_eq!((ios.len(), stats.filtered), (1, 2));
        // A header line naming the columns is allowed.
        let with_header = format!("Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n{MSR}");
        assert_eq!(parse(&with_header).unwrap().ios.len(), 3);
        let e = parse("128166372003061629,hm,1,Read,3154152960,32768,8742\n128166372003061630,hm,1,Erase,0,512,1\n")
            .unwrap_err();
        assert_eq!(e.line_number, 2);
        assert!(e.message.contains("Erase"), "{e}");
        let e = parse("128166372003061629,hm,1,Read,3154152960,32768,8742\n1,hm,1,Read,0,512\n").unwrap_err();
        assert_eq!(e.line_number, 2);
    }

    /// Lines as Alibaba's block-traces README describes them: device_id, opcode R/W,
    /// offset and length in bytes, timestamp in microseconds.
    const ALIBABA: &str = "\
419,W,8792731648,16384,1577808144360767
419,R,4096,4096,1577808144360800
7,R,1073741824,65536,1577808144361767
";

    #[test]
    fn alibaba_microseconds_and_device_filter() {
        let t = parse(ALIBABA).unwrap();
        assert_eq!(t.format, TraceFormat::Alibaba);
        assert_eq!(t.ios.iter().map(|io| io.arrival_ns).collect::<Vec<_>>(), vec![0, 33_000, 1_000_000]);
        assert_eq!((t.ios[0].op, t.ios[0].offset, t.ios[0].bytes), (Op::Write, 8792731648, 16384));
        let only = TraceOptions { device_filter: Some("7".into()), ..TraceOptions::default() };
        let (ios, stats) = read_with(ALIBABA, only).unwrap();
        assert_eq!((ios.len(), ios[0].bytes, stats.filtered), (1, 65536, 2));
        let e = parse("419,W,0,4096,1\n419,X,0,4096,2\n").unwrap_err();
        assert_eq!(e.line_number, 2);
    }

    /// Lines as the Tencent CBS README (SNIA IOTTA) describes them: seconds, sectors,
    /// IOType 0 read / 1 write, VolumeID.
    const TENCENT: &str = "\
1538323200,2466120,8,1,1283
1538323200,13446248,16,0,1283
1538323201,81920,8,0,27
";

    #[test]
    fn tencent_seconds_and_sectors() {
        let t = parse(TENCENT).unwrap();
        assert_eq!(t.format, TraceFormat::Tencent);
        assert_eq!(t.ios.iter().map(|io| io.arrival_ns).collect::<Vec<_>>(), vec![0, 0, 1_000_000_000]);
        assert_eq!((t.ios[0].op, t.ios[0].offset, t.ios[0].bytes), (Op::Write, 2466120 * 512, 4096));
        assert_eq!(t.ios[1].op, Op::Read);
        let e = parse("1538323200,2466120,8,1,1283\n1538323200,2466120,8,2,1283\n").unwrap_err();
        assert_eq!(e.line_number, 2);
    }

    #[test]
    fn unknown_formats_and_binary_input_are_one_error() {
        let e = parse("hello,world\n").unwrap_err();
        assert_eq!(e.line_number, 1);
        assert!(e.message.contains("unknown trace format"), "{e}");
        // /dev/zero as a trace: one endless line, refused at the line limit.
        let zeros = vec![0u8; 3 * LINE_BYTES_MAX];
        let e = TraceReader::new(&zeros[..], TraceOptions::default()).err().unwrap();
        assert_eq!(e.line_number, 1);
        assert!(e.message.contains("not a text trace"), "{e}");
        // A format given on the command line wins over detection (and then fails on it).
        let msr = TraceOptions { format: Some(TraceFormat::Msr), ..TraceOptions::default() };
        let e = read_with(ALIBABA, msr).unwrap_err();
        assert_eq!(e.line_number, 1);
        assert!(e.message.contains("7 fields"), "{e}");
    }

    #[test]
    fn the_window_reorders_what_it_holds_and_counts_what_it_cannot() {
        let text = "fio version 3 iolog\n10 f read 0 4096\n30 f read 0 4096\n20 f read 0 4096\n5 f read 0 4096\n";
        // A window of 4 holds all: sorted, the earliest (5 us) is the origin.
        let (ios, stats) = read_with(text, TraceOptions { reorder_window: 4, ..TraceOptions::default() }).unwrap();
        assert_eq!(ios.iter().map(|io| io.arrival_ns).collect::<Vec<_>>(), vec![0, 5_000, 15_000, 25_000]);
        assert_eq!(stats.late, 0);
        // A window of 1 reorders nothing: the 20 and 5 us I/Os are late, replayed at 30 us.
        let (ios, stats) = read_with(text, TraceOptions { reorder_window: 1, ..TraceOptions::default() }).unwrap();
        assert_eq!(ios.iter().map(|io| io.arrival_ns).collect::<Vec<_>>(), vec![0, 20_000, 20_000, 20_000]);
        assert_eq!(stats.late, 2);
        assert_eq!(stats.window_max, 1);
    }

    /// An endless generator of iolog lines, as a reader.
    struct Lines {
        next: u64,
        total: u64,
        pending: Vec<u8>,
        at: usize,
    }

    impl Read for Lines {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            if self.at == self.pending.len() {
                self.pending.clear();
                self.at = 0;
                if self.next == 0 {
                    self.pending.extend_from_slice(b"fio version 3 iolog\n");
                }
                while self.pending.len() < 4096 && self.next < self.total {
                    let i = self.next;
                    // Arrivals jitter backwards by up to 3 records' worth.
                    let us = i * 10 + [0, 25, 5, 17][(i % 4) as usize];
                    let op = if i.is_multiple_of(3) { "write" } else { "read" };
                    self.pending
                        .extend_from_slice(format!("{us} f{} {op} {} 4096\n", i % 5, (i % 1000) * 4096).as_bytes());
                    self.next += 1;
                }
            }
            let n = out.len().min(self.pending.len() - self.at);
            out[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    #[test]
    fn a_long_stream_is_read_in_bounded_memory() {
        // 2 M records streamed through a window of 64: what the reader holds is counted,
        // and it does not grow with the records.
        let total = 2_000_000;
        let options = TraceOptions { reorder_window: 64, ..TraceOptions::default() };
        let input = BufReader::with_capacity(8192, Lines { next: 0, total, pending: Vec::new(), at: 0 });
        let mut r = TraceReader::new(input, options).unwrap();
        let (mut n, mut last) = (0u64, 0u64);
        while let Some(io) = r.next() {
            let io = io.unwrap();
            assert!(io.arrival_ns >= last, "in order");
            last = io.arrival_ns;
            n += 1;
            if n % 100_000 == 0 {
                assert!(r.window.len() <= 64 && r.window.capacity() <= 64 + OWED_MAX, "{}", r.window.capacity());
                assert!(r.ahead.is_empty() && r.line.capacity() <= LINE_BYTES_MAX + 1);
                assert_eq!(r.streams.ids.len(), 5);
            }
        }
        let s = r.stats();
        assert_eq!((n, s.ios, s.late), (total, total, 0));
        assert!(s.window_max <= 64);
        assert_eq!(r.streams.ids.len(), 5);
    }

    /// A reader of `text` handing out at most `chunk` bytes a read, so that lines straddle
    /// the buffer's end (the fast path then falls back to copying the line).
    struct Chunked<'a> {
        text: &'a [u8],
        chunk: usize,
    }

    impl Read for Chunked<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.chunk).min(self.text.len());
            out[..n].copy_from_slice(&self.text[..n]);
            self.text = &self.text[n..];
            Ok(n)
        }
    }

    /// How [`read_all`] reads a trace.
    #[derive(Debug, Clone, Copy)]
    enum Way {
        /// The iterator, every line through the general parser.
        General,
        /// The iterator, fast lines by the fast parsers.
        Fast,
        /// [`TraceReader::next_batch`], batches of this many I/Os.
        Batches(usize),
        /// As `Batches`, the fast run's loop for SSSE3 alone even where the processor has
        /// what [`TraceReader::fast_run_bmi`] needs (the two loops compared).
        BatchesSsse3Loop(usize),
    }

    /// Every I/O (or the error) and the stats of a whole trace, read one of the [`Way`]s.
    fn read_all(text: &[u8], options: &TraceOptions, way: Way) -> (Vec<Result<TraceIo, TraceError>>, TraceStats) {
        read_all_in(text, options, way, 777, 1000)
    }

    /// [`read_all`] from a reader that hands out `chunk` bytes a read into a buffer of `buffer`.
    fn read_all_in(
        text: &[u8],
        options: &TraceOptions,
        way: Way,
        chunk: usize,
        buffer: usize,
    ) -> (Vec<Result<TraceIo, TraceError>>, TraceStats) {
        let input = BufReader::with_capacity(buffer, Chunked { text, chunk });
        let mut r = match TraceReader::new(input, options.clone()) {
            Ok(r) => r,
            Err(e) => return (vec![Err(e)], TraceStats::default()),
        };
        r.general_only = matches!(way, Way::General);
        #[cfg(target_arch = "x86_64")]
        if matches!(way, Way::BatchesSsse3Loop(_)) {
            r.bmi = false;
        }
        let (Way::Batches(max) | Way::BatchesSsse3Loop(max)) = way else {
            let ios = r.by_ref().collect();
            return (ios, r.stats());
        };
        let (mut ios, mut batch) = (Vec::new(), Vec::new());
        loop {
            match r.next_batch(&mut batch, max) {
                Ok(()) if batch.is_empty() => break,
                Ok(()) => {
                    assert!(batch.len() <= max);
                    ios.extend(batch.iter().map(|&io| Ok(io)));
                }
                Err(e) => ios.push(Err(e)),
            }
        }
        (ios, r.stats())
    }

    /// Lines of each format, three in ten with odd fields the fast parsers must refuse or
    /// read as the general parser does: spaces and tabs, control bytes, signs, 19 and 20
    /// digits, zero sizes, other actions, case, extra and missing fields, a carriage return.
    fn odd_lines(format: TraceFormat, rng: &mut smartcon_util::rng::Rng) -> String {
        let mut out = String::new();
        let mut t = 1_000u64;
        for _ in 0..3_000 {
            t += rng.below(50);
            let odd = rng.percent(30);
            // The clean field, or in an odd line now and then one of the odd ones.
            let mut f = |clean: String, odd_ones: &[&str]| {
                if odd && rng.percent(35) {
                    odd_ones[rng.below(odd_ones.len() as u64) as usize].to_string()
                } else {
                    clean
                }
            };
            const NUM: &[&str] = &[
                "0",
                "007",
                "1234567890123456789",
                "12345678901234567890",
                "99999999999999999999",
                "-1",
                "+5",
                "1x",
                "",
            ];
            let offset = (t % 1000 * 4096).to_string();
            let sep = |f: &mut dyn FnMut(String, &[&str]) -> String| f(" ".into(), &["  ", "\t", "\x01", "\r", ""]);
            let line = match format {
                TraceFormat::Blkparse => {
                    // blkparse prints nine digits after the point; fewer are read too.
                    let (s, ns) = (t / 1_000_000, t % 1_000_000 * 1_000);
                    let time = match t % 3 {
                        0 => format!("{s}.{ns:09}"),
                        1 => format!("{s}.{:06}", ns / 1_000),
                        _ => format!("{s}.{}", ns / 100_000_000),
                    };
                    [
                        f("".into(), &["  ", "\t", "\x01"]),
                        f(["8,0", "8,16"][(t % 2) as usize].into(), &["8", "8,", ",0", "8,0x", "", "8;0"]),
                        sep(&mut f),
                        f("1".into(), &["", "x"]),
                        sep(&mut f),
                        f(t.to_string(), &["", "-"]),
                        sep(&mut f),
                        f(
                            time,
                            &[
                                "5",
                                "5.",
                                ".5",
                                "5.1234567890",
                                "5.12345678",
                                "1.2.3",
                                "x",
                                "5.x",
                                "12345678901234567890.0",
                                "18446744073.709551616",
                                "18446744074.0",
                                "1234567890123456789.1",
                            ],
                        ),
                        sep(&mut f),
                        f(["4162", "4163", "007"][(t % 3) as usize].into(), NUM),
                        sep(&mut f),
                        f(["Q", "D", "D", "C", "G"][(t % 5) as usize].into(), &["DD", "", "d", "Q\x01"]),
                        sep(&mut f),
                        f(["R", "W", "WS", "RM", "FN", "D", "N", "RA"][(t % 8) as usize].into(), &["", "WD", "rw"]),
                        sep(&mut f),
                        f((t % 1000 * 8).to_string(), NUM),
                        sep(&mut f),
                        f("+".into(), &["++", "-", "", "+5"]),
                        sep(&mut f),
                        f(["8", "16", "0"][(t % 3) as usize].into(), NUM),
                        f(" [fio]".into(), &["", " [a b]", " [x]\x01", "\r", " 7 8 9 10 11 12", "x"]),
                    ]
                    .concat()
                }
                TraceFormat::FioV2 => {
                    let file = f(["/dev/nvme0n1", "/dev/sdb"][(t % 2) as usize].into(), &["f", "", " /dev/sdb"]);
                    let action = f(
                        ["read", "write", "read", "wait", "read", "add"][(t % 6) as usize].into(),
                        &["trim", "READ", "sync", "reads", "frobnicate", "close", "wait"],
                    );
                    let rest = if action == "wait" {
                        f(
                            (t % 40).to_string(),
                            &["", "x", "18446744073709551", "12345678901234567890", "5 6", "1234567890123456789"],
                        )
                    } else {
                        [f(offset, NUM), sep(&mut f), f("4096".into(), NUM)].concat()
                    };
                    [file, sep(&mut f), action, sep(&mut f), rest, f("".into(), &[" ", " 7", "\r", "\x01", "x"])]
                        .concat()
                }
                TraceFormat::Tencent => format!(
                    "{},{},{},{},{}{}",
                    f((1_538_323_200 + t / 1_000).to_string(), NUM),
                    f((t % 1000 * 8).to_string(), NUM),
                    f(["8", "16", "0", "8"][(t % 4) as usize].into(), NUM),
                    f(["0", "1"][(t % 2) as usize].into(), &["2", "", " 1", "01", "R"]),
                    f(["1283", "27"][(t % 2) as usize].into(), &[" 27", "x", "", "12345678901234567890", "007"]),
                    f("".into(), &["\r", " ", "\t", "\x01", ",1"]),
                ),
                TraceFormat::FioV3 => [
                    f(t.to_string(), NUM),
                    f(" ".into(), &["  ", "\t", "\x01", ""]),
                    f(["/dev/nvme0n1", "/dev/sdb"][(t % 2) as usize].into(), &["f", ""]),
                    f(" ".into(), &["  ", "\t", "\x01", ""]),
                    f(["read", "write", "read"][(t % 3) as usize].into(), &["wait", "trim", "READ", "add", "reads"]),
                    f(" ".into(), &["  ", "\t", ""]),
                    f(offset, NUM),
                    f(" ".into(), &["  ", "\t", "\x01", ""]),
                    f("4096".into(), NUM),
                    f("".into(), &[" ", " 7", "\r", "\x01", "x"]),
                ]
                .concat(),
                TraceFormat::Msr => format!(
                    "{},{},{},{},{},{},{}{}",
                    f((128166372000000000 + t).to_string(), NUM),
                    f("hm".into(), &["src1", " hm", "hm ", "", "h m"]),
                    f((t % 2).to_string(), &[" 1", "x", "12345678901234567890"]),
                    f(["Read", "Write"][(t % 2) as usize].into(), &["read", "WRITE", " Read", "Erase", ""]),
                    f(offset, NUM),
                    f("4096".into(), NUM),
                    f("8742".into(), &["", "x y", "1,2"]),
                    f("".into(), &["\r", " ", ","]),
                ),
                _ => format!(
                    "{},{},{},{},{}{}",
                    f(["419", "7"][(t % 2) as usize].into(), &[" 7", "x", ""]),
                    f(["R", "W", "R"][(t % 3) as usize].into(), &["r", "w", "X", "RW", " R"]),
                    f(offset, NUM),
                    f("4096".into(), NUM),
                    f((1577808144360767 + t).to_string(), NUM),
                    f("".into(), &["\r", " ", "\t", "\x01", ",1"]),
                ),
            };
            // Now and then an odd line cut short anywhere (a field missing, or cut).
            let mut line = line;
            if odd && rng.percent(10) {
                line.truncate(rng.below(line.len() as u64) as usize);
            }
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    #[test]
    fn the_fast_lines_parse_as_the_general_parser_does() {
        let mut rng = smartcon_util::rng::Rng::new(33);
        let mut fast_lines = 0;
        for format in TraceFormat::ALL {
            for filter in [None, Some("/dev/sdb"), Some("hm_1"), Some("7"), Some("8,16"), Some("27")] {
                let options = TraceOptions {
                    format: Some(format),
                    device_filter: filter.map(String::from),
                    reorder_window: 16,
                    ..TraceOptions::default()
                };
                // Line by line: the general parser's event (or error) against the fast one's,
                // from the same state, wherever the fast one reads the line.
                let text = odd_lines(format, &mut rng);
                let mut general = TraceReader::new(&b"\n"[..], options.clone()).unwrap();
                let filter = filter.map(str::as_bytes);
                for (n, line) in text.lines().enumerate() {
                    let line = line.as_bytes();
                    let clock_before = general.fio_clock_ns;
                    let (mut clock, mut streams) = (clock_before, general.streams.clone());
                    // The line with its newline and more after it (digits, letters: the fast
                    // parsers read eight bytes at a time and must stop at the newline), with a
                    // carriage return before the newline (the reader drops one), or alone.
                    // Every fourth line with a long tail: the vector parsers classify 64 bytes
                    // (and read a line at most 63 bytes long) where the buffer holds 96.
                    let ending: &[u8] = match n % 4 {
                        0 => b"\n",
                        1 => b"\r\n12345678 9abcdefgh,12345678",
                        2 => b"\n12345678 9abcdefgh,12345678",
                        _ => b"\n1 /dev/sdb read 4096 4096\n2,hm,1,Read,0,512,7\n3,R,0,4096,9\n12345678 9abcdefgh,12345678,\n",
                    };
                    let text = [line, ending].concat();
                    let action = general.blk_action;
                    // The numbers by either way, every other line (both read as the
                    // general parser does).
                    let digits = AnyDigits::all()[n % AnyDigits::all().len()];
                    let parse = |text: &[u8], clock: &mut u64, streams: &mut Streams| match format {
                        TraceFormat::Blkparse => fast::blkparse(text, action, streams, filter),
                        TraceFormat::FioV2 => fast::fio_v2(text, clock, streams, filter),
                        TraceFormat::FioV3 => fast::fio_v3_vec(text, clock, streams, filter, digits),
                        TraceFormat::Msr => fast::msr_vec(text, streams, filter, digits),
                        TraceFormat::Alibaba => fast::alibaba_vec(text, streams, filter, digits),
                        TraceFormat::Tencent => fast::tencent(text, streams, filter),
                    };
                    // Without its newline the line is not whole in the buffer: refused.
                    assert_eq!(parse(line, &mut clock.clone(), &mut streams.clone()), None);
                    let fast = parse(&text, &mut clock, &mut streams);
                    let before = general.streams.clone();
                    let want = general.event_of(n + 1, line);
                    let shown = String::from_utf8_lossy(line);
                    match fast {
                        Some((event, used)) => {
                            fast_lines += 1;
                            assert_eq!(want, Ok(event), "{format:?} {shown:?}");
                            assert_eq!(used, line.len() + ending.iter().position(|&b| b == b'\n').unwrap() + 1);
                            assert_eq!((clock, &streams), (general.fio_clock_ns, &general.streams), "{shown:?}");
                        }
                        // Refused: nothing changed.
                        None => assert!(streams == before && clock == clock_before, "{shown:?}"),
                    }
                }
                // A whole trace (the odd lines end it with an error at some line, so the
                // valid prefix of each is read too): the same I/Os, stats and error.
                let header = match format {
                    // blkparse has none, but the reader looks ahead this many lines to detect
                    // (they go through the general parser): blank ones, so that the fast
                    // parser reads the trace's lines.
                    TraceFormat::Blkparse => "\n".repeat(DETECT_LINES),
                    TraceFormat::FioV2 => "fio version 2 iolog\n".into(),
                    TraceFormat::FioV3 => "fio version 3 iolog\n".into(),
                    TraceFormat::Msr => "Timestamp,Hostname,DiskNumber,Type,Offset,Size,ResponseTime\n".into(),
                    TraceFormat::Alibaba => "device_id,opcode,offset,length,timestamp\n".into(),
                    TraceFormat::Tencent => "Timestamp,Offset,Size,IOType,VolumeID\n".into(),
                };
                // A line valid alone, before a read (a line of a blkparse stage, a fio v2
                // wait or a skipped one alone would be a trace without reads or writes; a
                // blkparse line before an issue event and without the blank lines: the issue
                // is the arrival event, as in the whole trace).
                let (before, after) = match format {
                    TraceFormat::Blkparse => ("", "  8,0 1 1 0.5 1 D R 0 + 8 [x]\n"),
                    TraceFormat::FioV2 => (header.as_str(), "/dev/x read 0 4096\n"),
                    _ => (header.as_str(), ""),
                };
                let unfiltered = TraceOptions { device_filter: None, ..options.clone() };
                let valid: String = text
                    .lines()
                    .filter(|l| {
                        TraceReader::new(format!("{before}{l}\n{after}").as_bytes(), unfiltered.clone())
                            .is_ok_and(|mut r| r.all(|io| io.is_ok()))
                    })
                    .map(|l| format!("{l}\n"))
                    .collect();
                for whole in [format!("{header}{valid}"), format!("{header}{text}")] {
                    let (a, sa) = read_all(whole.as_bytes(), &options, Way::General);
                    // The iterator with the fast lines, and batches of one I/O, of a prime
                    // count and of more than the window (the replay's way).
                    for way in
                        [Way::Fast, Way::Batches(1), Way::Batches(7), Way::Batches(100), Way::BatchesSsse3Loop(100)]
                    {
                        let (b, sb) = read_all(whole.as_bytes(), &options, way);
                        assert_eq!(a, b, "{format:?} {filter:?} {way:?}");
                        assert_eq!(sa, sb, "{format:?} {filter:?} {way:?}");
                    }
                }
                assert!(valid.lines().count() > 1_000, "{format:?}: {}", valid.lines().count());
            }
        }
        // The fast parsers read most lines (the odd ones are a minority).
        assert!(fast_lines > 12 * 1_000, "{fast_lines}");
    }

    /// A line of a vector parser's format, clean or made odd: a field cut, dropped, doubled,
    /// lengthened (past 19 digits, past the 64 bytes classified), bytes replaced by
    /// separators, commas, newlines, carriage returns, controls, letters or bytes above 127,
    /// garbage after the last field.
    fn adversarial_line(format: TraceFormat, rng: &mut smartcon_util::rng::Rng) -> Vec<u8> {
        let t = rng.below(1 << 40);
        let digits = |rng: &mut smartcon_util::rng::Rng| -> String {
            match rng.below(6) {
                0 => "0".into(),
                1 => rng.below(10).to_string(),
                2 => rng.below(1 << 20).to_string(),
                3 => (rng.below(1 << 62) + (1 << 61)).to_string(),
                4 => "9".repeat(1 + rng.below(22) as usize),
                _ => format!("{:0width$}", rng.below(1000), width = 1 + rng.below(20) as usize),
            }
        };
        let mut fields: Vec<String> = match format {
            TraceFormat::FioV3 => vec![
                t.to_string(),
                ["/dev/nvme0n1", "/dev/sdb", "f", &"x".repeat(40)][rng.below(4) as usize].into(),
                ["read", "write", "READ", "wait", "reads", "writ"][rng.below(6) as usize].into(),
                digits(rng),
                digits(rng),
            ],
            TraceFormat::Msr => vec![
                (128_166_372_000_000_000 + t).to_string(),
                ["hm", "src1", " hm", "hm ", "", &"h".repeat(30)][rng.below(6) as usize].into(),
                rng.below(3).to_string(),
                ["Read", "Write", "read", "WRITE", "Rea", "Erase"][rng.below(6) as usize].into(),
                digits(rng),
                digits(rng),
                rng.below(10_000).to_string(),
            ],
            _ => vec![
                rng.below(1000).to_string(),
                ["R", "W", "r", "w", "X", "RW", ""][rng.below(7) as usize].into(),
                digits(rng),
                digits(rng),
                (1_577_808_000_000_000 + t).to_string(),
            ],
        };
        if rng.percent(40) {
            // Odd: one or two of these.
            for _ in 0..=rng.below(2) {
                let k = rng.below(fields.len() as u64) as usize;
                match rng.below(6) {
                    0 => drop(fields.remove(k)),
                    1 => fields.insert(k, fields[k].clone()),
                    2 => fields[k] = format!("{}{}", fields[k], "7".repeat(rng.below(40) as usize)),
                    3 => {
                        let keep = rng.below(fields[k].len() as u64 + 1) as usize;
                        fields[k].truncate(keep);
                    }
                    4 => fields[k] = digits(rng),
                    _ => fields[k] = String::new(),
                }
            }
        }
        let sep = if format == TraceFormat::FioV3 { " " } else { "," };
        let mut line = fields.join(sep).into_bytes();
        if rng.percent(30) {
            // Bytes replaced by ones the parsers treat apart.
            const ODD: &[u8] = b" \t\r\x01,\n\x0b.x9-+\x7f\x80\xff";
            for _ in 0..=rng.below(3) {
                if !line.is_empty() {
                    let at = rng.below(line.len() as u64) as usize;
                    line[at] = ODD[rng.below(ODD.len() as u64) as usize];
                }
            }
        }
        match rng.below(8) {
            0 => line.extend_from_slice(b"\r"),
            1 => line.extend_from_slice(b" \r"),
            2 => line.extend_from_slice(b"  garbage"),
            3 => line.extend_from_slice(b",1"),
            4 => line.extend_from_slice(b"\t"),
            _ => {}
        }
        line
    }

    /// The vector parsers' numbers read either way this processor can: eight bytes at a
    /// time, and by SSSE3 where it has it.
    #[derive(Debug, Clone, Copy)]
    enum AnyDigits {
        Swar,
        #[cfg(target_arch = "x86_64")]
        Ssse3(fast::Ssse3),
    }

    impl AnyDigits {
        fn all() -> Vec<AnyDigits> {
            let mut all = vec![AnyDigits::Swar];
            #[cfg(target_arch = "x86_64")]
            match fast::Ssse3::detect() {
                Some(ssse3) => all.push(AnyDigits::Ssse3(ssse3)),
                None => eprintln!("no SSSE3 on this processor: its numbers are not tested here"),
            }
            all
        }
    }

    impl fast::Digits for AnyDigits {
        fn number(self, head: &[u8; fast::VEC_BYTES], start: usize, end: usize) -> Option<u64> {
            match self {
                AnyDigits::Swar => fast::Swar.number(head, start, end),
                #[cfg(target_arch = "x86_64")]
                AnyDigits::Ssse3(ssse3) => ssse3.number(head, start, end),
            }
        }
    }

    #[test]
    fn the_ssse3_numbers_are_the_swar_ones() {
        use fast::Digits;
        // Fields anywhere in a line's head (start..end below 64): 0 to 21 digits with leading
        // zeros, the largest numbers of 16, 17, 19 and 20 digits (u64::MAX and beyond: 20
        // are refused, as they may not fit), and non-digits at any place, in random bytes
        // around. Each way against the number parsed as text.
        let ways = AnyDigits::all();
        #[cfg(target_arch = "x86_64")]
        assert!(ways.len() == 2 || !std::is_x86_feature_detected!("ssse3"));
        let mut rng = smartcon_util::rng::Rng::new(33);
        let edge: [&[u8]; 10] = [
            b"9999999999999999",
            b"99999999999999999",
            b"9999999999999999999",
            b"18446744073709551615",
            b"18446744073709551616",
            b"0000000000000000",
            b"0000000000000000001",
            b"1000000000000000",
            b"0",
            b"",
        ];
        let (mut read, mut refused) = ([0usize; 20], 0);
        for round in 0..200_000 {
            let mut head = [0u8; fast::VEC_BYTES];
            for b in &mut head {
                *b = if rng.percent(50) { rng.below(256) as u8 } else { b'0' + rng.below(10) as u8 };
            }
            let field: Vec<u8> = if round < edge.len() * 64 {
                edge[round % edge.len()].to_vec()
            } else {
                let k = rng.below(22) as usize;
                let mut f: Vec<u8> = (0..k).map(|_| b'0' + rng.below(10) as u8).collect();
                if k > 0 && rng.percent(40) {
                    let zeros = rng.below(k as u64 + 1) as usize;
                    f[..zeros].fill(b'0');
                }
                if k > 0 && rng.percent(30) {
                    let at = rng.below(k as u64) as usize;
                    f[at] = b"/:;\x00\xff \n,.-+a"[rng.below(12) as usize];
                }
                f
            };
            if field.len() > 63 {
                continue;
            }
            let start = if round < edge.len() * 64 { round / edge.len() } else { rng.below(64) as usize };
            let start = start.min(63 - field.len());
            head[start..start + field.len()].copy_from_slice(&field);
            let end = start + field.len();
            let want = std::str::from_utf8(&field)
                .ok()
                .filter(|f| (1..=19).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()))
                .map(|f| f.parse::<u64>().expect("19 digits fit"));
            for &way in &ways {
                assert_eq!(
                    way.number(&head, start, end),
                    want,
                    "{way:?} {:?} at {start}",
                    String::from_utf8_lossy(&field)
                );
            }
            match want {
                Some(_) => read[field.len()] += 1,
                None => refused += 1,
            }
        }
        // Every length read (1 to 19 digits), and many refused.
        assert!(read[1..].iter().all(|&n| n > 100) && read[0] == 0, "{read:?}");
        assert!(refused > 20_000, "{refused} refused");
    }

    #[test]
    fn the_vector_parsers_read_as_the_bytewise_ones() {
        // The classes of 64 bytes: SSE2 against a byte at a time, on random bytes and runs of
        // the classified ones.
        let mut rng = smartcon_util::rng::Rng::new(64);
        for _ in 0..20_000 {
            let mut bytes = [0u8; 64];
            for b in &mut bytes {
                *b = match rng.below(3) {
                    0 => rng.below(256) as u8,
                    1 => b" \n,\r\t\x00\x1f\x20\x21\x80\xff0"[rng.below(12) as usize],
                    _ => b'a' + rng.below(26) as u8,
                };
            }
            assert_eq!(fast::classify(&bytes), fast::classify_bytes(&bytes), "{bytes:?}");
            let c = fast::classify_bytes(&bytes);
            assert_eq!(fast::classify_ws(&bytes), (c.sep, c.newline), "{bytes:?}");
        }
        // Lines, clean and adversarial, with what follows them in the buffer (other lines,
        // garbage, nothing): the same event, bytes used, clock and streams, or both refusing.
        let (mut vector_read, mut refused) = (0, 0);
        for format in [TraceFormat::FioV3, TraceFormat::Msr, TraceFormat::Alibaba] {
            for filter in [None, Some(&b"/dev/sdb"[..]), Some(b"hm_1"), Some(b"7")] {
                let mut streams = Streams::default();
                let mut clock = 5_000u64;
                for _ in 0..20_000 {
                    let line = adversarial_line(format, &mut rng);
                    let mut text = line.clone();
                    if rng.percent(95) {
                        text.push(b'\n');
                    }
                    let more = rng.below(120) as usize + if rng.percent(80) { 60 } else { 0 };
                    for _ in 0..more {
                        text.push(b"1 /dev/a read 0 4096\n,hm,Rx"[rng.below(27) as usize]);
                    }
                    let (mut c2, mut s2) = (clock, streams.clone());
                    let bytewise = match format {
                        TraceFormat::FioV3 => fast::fio_v3(&text, &mut c2, &mut s2, filter),
                        TraceFormat::Msr => fast::msr(&text, &mut s2, filter),
                        _ => fast::alibaba(&text, &mut s2, filter),
                    };
                    let shown = String::from_utf8_lossy(&text);
                    // The vector parser with its numbers read each way: all the same.
                    let (mut c1, mut s1, mut vector) = (clock, streams.clone(), None);
                    for digits in AnyDigits::all() {
                        (c1, s1) = (clock, streams.clone());
                        vector = match format {
                            TraceFormat::FioV3 => fast::fio_v3_vec(&text, &mut c1, &mut s1, filter, digits),
                            TraceFormat::Msr => fast::msr_vec(&text, &mut s1, filter, digits),
                            _ => fast::alibaba_vec(&text, &mut s1, filter, digits),
                        };
                        assert_eq!(vector, bytewise, "{format:?} {filter:?} {digits:?} {shown:?}");
                        assert_eq!((c1, &s1), (c2, &s2), "{format:?} {digits:?} {shown:?}");
                    }
                    // Lines the vector path classifies (whole in the first 64 bytes of a
                    // buffer of 96 or more), to show that it reads many and refuses many.
                    let vector_path = text.len() >= fast::VEC_BYTES && text[..64].contains(&b'\n');
                    match vector {
                        Some(_) if vector_path => vector_read += 1,
                        None => refused += 1,
                        _ => {}
                    }
                    (clock, streams) = (c1, s1);
                }
            }
        }
        assert!(vector_read > 20_000 && refused > 20_000, "{vector_read} read, {refused} refused");
    }

    #[test]
    fn an_op_word_is_read_or_write_only() {
        // The word compare against the bytes' match: `read` and `write`, every one-byte
        // change of them (each place, each byte value), each cut short or run on by a byte,
        // and random short words, anywhere in a head full of other bytes.
        let by_match = |w: &[u8]| match w {
            b"read" => Some(Op::Read),
            b"write" => Some(Op::Write),
            _ => None,
        };
        let mut words: Vec<Vec<u8>> = Vec::new();
        for base in [&b"read"[..], b"write"] {
            words.push(base.to_vec());
            for at in 0..base.len() {
                for b in 0..=255u8 {
                    let mut w = base.to_vec();
                    w[at] = b;
                    words.push(w);
                }
            }
            for b in 0..=255u8 {
                let mut w = base.to_vec();
                w.push(b);
                words.push(w);
            }
            for cut in 0..base.len() {
                words.push(base[..cut].to_vec());
            }
        }
        let mut rng = smartcon_util::rng::Rng::new(33);
        const ALPHABET: &[u8] = b"readwit\0 ";
        for _ in 0..20_000 {
            let n = rng.below(9) as usize;
            words.push((0..n).map(|_| ALPHABET[rng.below(ALPHABET.len() as u64) as usize]).collect());
        }
        for w in
            [&b"Read"[..], b"READ", b"rEaD", b"Write", b"WRITE", b"wRiTe", b"R", b"r", b"W", b"w", b"x", b"RR", b""]
        {
            words.push(w.to_vec());
        }
        for b in 0..=255u8 {
            words.push(vec![b]);
        }
        let by_any_case = |w: &[u8]| {
            if w.eq_ignore_ascii_case(b"read") {
                Some(Op::Read)
            } else if w.eq_ignore_ascii_case(b"write") {
                Some(Op::Write)
            } else {
                None
            }
        };
        let by_letter = |w: &[u8]| match w {
            b"R" | b"r" => Some(Op::Read),
            b"W" | b"w" => Some(Op::Write),
            _ => None,
        };
        let (mut reads, mut writes, mut any_case, mut letters) = (0, 0, 0, 0);
        for w in &words {
            let start = rng.below(64 - w.len() as u64) as usize;
            let mut head = [0u8; fast::VEC_BYTES];
            for b in head.iter_mut() {
                *b = b"readwrite"[rng.below(9) as usize];
            }
            head[start..start + w.len()].copy_from_slice(w);
            let (end, shown) = (start + w.len(), String::from_utf8_lossy(w));
            let want = by_match(w);
            assert_eq!(fast::op_word(&head, start, end), want, "{shown:?}");
            reads += usize::from(want == Some(Op::Read));
            writes += usize::from(want == Some(Op::Write));
            // MSR's (any case) and Alibaba's (one letter, either case).
            let want = by_any_case(w);
            assert_eq!(fast::op_word_any_case(&head, start, end), want, "{shown:?}");
            any_case += usize::from(want.is_some() && by_match(w).is_none());
            let want = by_letter(w);
            assert_eq!(fast::op_letter(&head, start, end), want, "{shown:?}");
            letters += usize::from(want.is_some());
        }
        assert!(reads >= 1 && writes >= 1, "{reads} reads, {writes} writes");
        assert!(any_case >= 6 && letters >= 4, "{any_case} in other cases, {letters} letters");
    }

    #[test]
    fn every_format_reads_in_batches_as_the_general_iterator_does() {
        // The reading before the fast paths (every line through the general parser, every
        // I/O through the window one at a time) against the iterator with the fast parsers
        // and batches of 1, 7 and 1,024 I/Os (the replay's: the window's hand-outs deferred
        // while the I/Os come in order), over traces with records back in time (reordered
        // or late), skipped lines, folded offsets, a bad line, arrivals beyond the span and a
        // request larger than the capacity; read in 777-byte pieces (lines across the
        // buffer's end) and from a buffer of 64 KiB (long runs of fast lines).
        let mut compared = 0;
        for format in TraceFormat::ALL {
            for (k, tail) in [Tail::Clean, Tail::BadLine, Tail::BeyondSpan, Tail::TooLarge].into_iter().enumerate() {
                // blkparse has two lines a record: more than the reader looks ahead to detect
                // (those go through the general parser), so that the fast one reads the rest.
                let records = if format == TraceFormat::Blkparse { DETECT_LINES / 2 + 3_000 } else { 3_000 };
                let text = mixed_trace(format, 40 + k as u64, records, tail);
                for (window, capacity, filter) in [
                    (1, None, None),
                    (16, Some(1 << 30), None),
                    (300, Some(1 << 30), None),
                    (4096, None, None),
                    (16, Some(1 << 30), Some(["8,0", "/dev/a", "/dev/a", "hm_0", "419", "1283"])),
                ] {
                    let device = filter.map(|f| f[TraceFormat::ALL.iter().position(|&x| x == format).unwrap()]);
                    let options = TraceOptions {
                        reorder_window: window,
                        capacity_bytes: capacity,
                        device_filter: device.map(String::from),
                        ..TraceOptions::default()
                    };
                    let (want, want_stats) = read_all(text.as_bytes(), &options, Way::General);
                    let errors = want.iter().filter(|io| io.is_err()).count();
                    let expect_error = match tail {
                        Tail::Clean => false,
                        Tail::BadLine => true,
                        Tail::BeyondSpan => true,
                        Tail::TooLarge => capacity.is_some(),
                    };
                    assert_eq!(
                        errors,
                        usize::from(expect_error),
                        "{format:?} {tail:?} window {window}: {:?}",
                        want.last()
                    );
                    // A window larger than the trace hands nothing out before an error.
                    if window < 3_000 || !expect_error {
                        assert!(want.len() > 1_000, "{format:?} {tail:?} {options:?} {}", want.len());
                    }
                    if window < 4096 && format != TraceFormat::FioV2 {
                        assert!(want_stats.late > 0, "{format:?} {tail:?} window {window}");
                    }
                    for way in [
                        Way::Fast,
                        Way::Batches(1),
                        Way::Batches(7),
                        Way::Batches(1024),
                        Way::BatchesSsse3Loop(7),
                        Way::BatchesSsse3Loop(1024),
                    ] {
                        for (chunk, buffer) in [(777, 1000), (1 << 16, 1 << 16)] {
                            let (got, stats) = read_all_in(text.as_bytes(), &options, way, chunk, buffer);
                            let at = want.iter().zip(&got).position(|(a, b)| a != b);
                            assert!(
                                want == got,
                                "{format:?} {tail:?} window {window} {way:?} {chunk}: first differs at {at:?}: {:?} against {:?}",
                                at.map(|i| &want[i]),
                                at.and_then(|i| got.get(i))
                            );
                            assert_eq!(want_stats, stats, "{format:?} {tail:?} window {window} {way:?} {chunk}");
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 6 * 4 * 5 * 6 * 2);
    }

    #[test]
    fn the_window_ring_holds_what_a_vecdeque_holds() {
        // Seeded pushes, inserts (front, middle, back), pops and moves of the front, across
        // the ring's wrap and its growth: the same I/Os in the same order as a VecDeque.
        let (mut ring, mut deque) = (Ring::default(), VecDeque::new());
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut moved, mut want) = (Vec::new(), Vec::new());
        for n in 0..20_000u64 {
            let io = TraceIo { arrival_ns: n, op: Op::Write, offset: n * 512, bytes: 512, stream: n as u32 };
            match next() % 16 {
                0..=9 => {
                    ring.push_back(io);
                    deque.push_back(io);
                }
                10 | 11 => {
                    let at = (next() % (deque.len() as u64 + 1)) as usize;
                    ring.insert(at, io);
                    deque.insert(at, io);
                }
                12 | 13 => assert_eq!(ring.pop_front(), deque.pop_front()),
                _ => {
                    let k = (next() % (deque.len() as u64 + 1)).min(3) as usize;
                    let (first, second) = ring.front(k);
                    moved.extend_from_slice(first);
                    moved.extend_from_slice(second);
                    ring.drop_front(k);
                    want.extend(deque.drain(..k));
                }
            }
            assert_eq!(ring.len(), deque.len());
            assert_eq!(ring.back(), deque.back().copied());
        }
        assert!(moved.len() > 1_000 && moved == want);
        let held: Vec<TraceIo> = (0..ring.len()).map(|i| ring.get(i)).collect();
        assert_eq!(held, Vec::from(deque));
        assert!(held.len() > 1_000, "{}", held.len());
        assert!(ring.capacity().is_power_of_two() && ring.capacity() < 4 * held.len());
    }

    #[test]
    fn a_ring_with_a_limit_stops_doubling_there_and_holds_what_a_vecdeque_holds() {
        // A limit that is not a power of two: the ring wraps at it, and grows past it (by
        // doubling) only when it has to.
        let (mut ring, mut deque) = (Ring::with_limit(100), VecDeque::new());
        let io = |n: u64| TraceIo { arrival_ns: n, op: Op::Read, offset: n, bytes: 512, stream: 0 };
        for n in 0..10_000u64 {
            // Up to 100 held: pushes and pops, inserts in the middle, across many wraps.
            if deque.len() == 100 || (n % 7 == 3 && !deque.is_empty()) {
                assert_eq!(ring.pop_front(), deque.pop_front());
            }
            if n % 5 == 0 {
                let at = deque.len() / 2;
                ring.insert(at, io(n));
                deque.insert(at, io(n));
            } else {
                ring.push_back(io(n));
                deque.push_back(io(n));
            }
            assert_eq!(ring.back(), deque.back().copied());
        }
        assert_eq!(ring.capacity(), 100, "no more slots than the limit");
        let held: Vec<TraceIo> = (0..ring.len()).map(|i| ring.get(i)).collect();
        assert_eq!(held, Vec::from(deque.clone()));
        let (first, second) = ring.front(ring.len());
        assert_eq!([first, second].concat(), held, "the front's two slices in order");
        for n in 0..50 {
            ring.push_back(io(n));
            deque.push_back(io(n));
        }
        assert_eq!(ring.capacity(), 200, "past the limit only when full");
        let held: Vec<TraceIo> = (0..ring.len()).map(|i| ring.get(i)).collect();
        assert_eq!(held, Vec::from(deque));
    }

    #[test]
    fn a_stream_key_is_the_last_one_only_when_every_byte_is() {
        // The last key's check (`same_key`): keys of its length that differ in one byte
        // (first, middle, last), its prefixes and its extensions are other streams.
        let mut s = Streams::default();
        let base = s.id(b"/dev/sda");
        assert_eq!(s.id(b"/dev/sda"), base);
        let mut others = Vec::new();
        for key in [&b"/dev/sdb"[..], b"xdev/sda", b"/dev-sda", b"/dev/sd", b"/dev/sda1", b"", b"/dev/sda"] {
            others.push(s.id(key));
            assert_eq!(s.id(key), *others.last().unwrap(), "{key:?} again");
        }
        assert_eq!(others.last(), Some(&base));
        let distinct: std::collections::HashSet<u32> = others.iter().copied().collect();
        assert_eq!(distinct.len(), others.len(), "{others:?}");
        assert!(!others[..others.len() - 1].contains(&base));
        // Keys of every length up to 20 (the word compare of 8 to 16 bytes, the byte loop
        // either side) against each with one byte changed.
        for n in 0..=20usize {
            let key: Vec<u8> = (0..n).map(|i| b'a' + i as u8).collect();
            assert!(same_key(&key, &key.clone()), "{n}");
            for at in 0..n {
                let mut other = key.clone();
                other[at] ^= 0x20;
                assert!(!same_key(&key, &other), "{n} {at}");
                assert_ne!(s.id(&other), s.id(&key), "{n} {at}");
                assert_eq!(s.id(&key), s.id(&key.clone()), "{n} {at}");
            }
            assert!(!same_key(&key, &key[..n.saturating_sub(1)]) || n == 0, "{n}");
        }
        // Keys in turn from a few (two alternating, as Alibaba's volumes, then any order):
        // each key's first stream, every time, as a map of the keys met gives it.
        let mut s = Streams::default();
        let mut first: HashMap<Vec<u8>, u32> = HashMap::new();
        let mut rng = smartcon_util::rng::Rng::new(7);
        for i in 0..2_000u64 {
            let k = if i < 200 { i % 2 } else { rng.below(5) };
            let key = format!("dev{k}").into_bytes();
            let id = s.id(&key);
            assert_eq!(*first.entry(key).or_insert(id), id, "{i}");
        }
        assert_eq!(first.len(), 5);
        let distinct: std::collections::HashSet<u32> = first.values().copied().collect();
        assert_eq!(distinct.len(), 5);
        // MSR's HOST_DISK checked against the last key without being built.
        let hm1 = s.id(b"hm_1");
        assert_eq!(s.last_if_joined(b"hm", b'_', b"1"), Some(hm1));
        assert_eq!(s.last_if_joined(b"h", b'm', b"_1"), Some(hm1), "the same bytes joined");
        for (a, sep, b) in
            [(&b"hm"[..], b'-', &b"1"[..]), (b"hx", b'_', b"1"), (b"xm", b'_', b"1"), (b"hm", b'_', b"2")]
        {
            assert_eq!(s.last_if_joined(a, sep, b), None, "{a:?} {sep} {b:?}");
        }
        for (a, b) in [(&b"hm"[..], &b"11"[..]), (b"hm", b""), (b"h", b"1")] {
            assert_eq!(s.last_if_joined(a, b'_', b), None, "{a:?} {b:?}");
        }
    }

    #[test]
    fn streams_beyond_the_limit_share_entries() {
        let mut s = Streams::default();
        for pid in 0..(STREAMS_MAX as u64 + 1000) {
            let id = s.id(pid.to_string().as_bytes());
            assert!((id as usize) < STREAMS_MAX);
        }
        assert_eq!(s.ids.len(), STREAMS_MAX);
    }

    #[test]
    fn gzip_input_is_read_as_it_streams() {
        use std::io::Write;
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-emulate-gz-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("hm_1.csv.gz");
        let mut gz = flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
        gz.write_all(MSR.as_bytes()).unwrap();
        gz.finish().unwrap();
        let t = load(&path).unwrap();
        assert_eq!((t.format, t.ios.len()), (TraceFormat::Msr, 3));
        // Every format, detected, through the fast parsers in the replay's batches from the
        // decompressing reader: as the general parser reads the plain text (an error, with
        // its line, at the end of a bad one).
        for format in TraceFormat::ALL {
            for tail in [Tail::Clean, Tail::BadLine] {
                let text = mixed_trace(format, 9, DETECT_LINES / 2 + 3_000, tail);
                let path = dir.join(format!("{}.gz", format.name()));
                let mut gz =
                    flate2::write::GzEncoder::new(std::fs::File::create(&path).unwrap(), flate2::Compression::fast());
                gz.write_all(text.as_bytes()).unwrap();
                gz.finish().unwrap();
                let options = TraceOptions { reorder_window: 64, ..TraceOptions::default() };
                let (want, want_stats) = read_all(text.as_bytes(), &options, Way::General);
                let mut r = TraceReader::open(&path, options).unwrap();
                assert_eq!(r.format(), format);
                let (mut got, mut batch) = (Vec::new(), Vec::new());
                loop {
                    match r.next_batch(&mut batch, 1024) {
                        Ok(()) if batch.is_empty() => break,
                        Ok(()) => got.extend(batch.iter().map(|&io| Ok(io))),
                        // The file's name before the line, as the plain reader has none.
                        Err(e) => got.push(Err(TraceError { path: None, ..e })),
                    }
                }
                assert!(want.len() > 1_000, "{format:?} {tail:?}");
                assert_eq!(want.last().unwrap().is_err(), tail == Tail::BadLine, "{format:?} {tail:?}");
                assert!(want == got, "{format:?} {tail:?}");
                assert_eq!(want_stats, r.stats(), "{format:?} {tail:?}");
            }
        }
    }
}

#[cfg(test)]
mod file_tests {
    use super::*;

    #[test]
    fn load_names_the_file_and_replays_end_to_end() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-emulate-trace-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("t.iolog");
        std::fs::write(&path, "fio version 3 iolog\n0 f add\n10 f write 0 4096\n20 f write 4096 4096\n30 f oops\n")
            .unwrap();
        let e = load(&path).unwrap_err();
        assert_eq!(e.line_number, 5);
        assert!(e.to_string().contains("t.iolog: line 5: "), "{e}");
        std::fs::write(&path, "fio version 3 iolog\n0 f add\n10 f write 0 4096\n5000 f write 4096 4096\n").unwrap();
        let t = load(&path).unwrap();
        let spec = smartcon_devemu::parse_spec("emu:sdcard").unwrap();
        let run = crate::replay::run_virtual(&spec, &crate::replay::Workload::Trace(t.ios), false).unwrap();
        // The second write starts where the first ended (sequential) after an idle gap.
        assert_eq!(run.by_op.write.lat_ns_max, 1_160_100);
        assert_eq!(run.by_op.write.ios, 2);
        assert_eq!(run.sim_ns, 4_990_000 + 11_500);
    }
}
