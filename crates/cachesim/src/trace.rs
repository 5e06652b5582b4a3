//! The compact binary trace format, its reader and writer, and conversion from lackey text.
//!
//! A trace is a sequence of records, each one memory access: an instruction fetch, a data
//! read, a data write or a data modify (read and write of the same bytes, as lackey reports
//! `M`), with the address of the instruction that made it, the accessed address and size.
//!
//! File layout (little endian):
//! ```text
//! magic "SCTRACE1" | record_count u64 | body_bytes u64 | checksum u64 | body
//! record: tag u8 = kind (bits 0-1) | pc_repeats (bit 2)
//!         size u8
//!         [pc delta, zigzag LEB128, unless pc_repeats]
//!         [address delta from the previous data address, zigzag LEB128, data kinds only]
//! ```
//! An instruction fetch's address is its pc, so it stores one delta; a data access usually
//! repeats the pc of the preceding fetch, so it stores one delta too: typical records are 3
//! to 5 bytes. The header is written last (the writer seeks back), so a trace whose writer
//! died has a zero header and is refused; the reader checks the file length against
//! `body_bytes` before reading, the record count at the end, and a checksum over the
//! decoded values, so a truncated or corrupt trace is an error and never a shorter run.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::error::{io, Error, ErrorKind, Result};

pub const MAGIC: &[u8; 8] = b"SCTRACE1";
pub const HEADER_BYTES: u64 = 32;

/// What an access does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessKind {
    Fetch = 0,
    Read = 1,
    Write = 2,
    Modify = 3,
}

impl AccessKind {
    fn from_bits(bits: u8) -> Self {
        match bits & 3 {
            0 => AccessKind::Fetch,
            1 => AccessKind::Read,
            2 => AccessKind::Write,
            _ => AccessKind::Modify,
        }
    }

    pub fn is_data(self) -> bool {
        self != AccessKind::Fetch
    }
}

/// One memory access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Record {
    /// Address of the instruction making the access (for a fetch, the fetched address).
    pub pc: u64,
    /// The accessed address.
    pub addr: u64,
    pub kind: AccessKind,
    pub size_bytes: u8,
}

impl Record {
    pub fn fetch(pc: u64, size_bytes: u8) -> Self {
        Record { pc, addr: pc, kind: AccessKind::Fetch, size_bytes }
    }

    pub fn data(pc: u64, addr: u64, kind: AccessKind, size_bytes: u8) -> Self {
        Record { pc, addr, kind, size_bytes }
    }
}

const CHECKSUM_SEED: u64 = 0x5c7a_ce01_d00d_f00d;

#[inline]
fn checksum_step(h: u64, r: &Record) -> u64 {
    let word = r.pc ^ r.addr.rotate_left(23) ^ ((r.kind as u64) << 8 | u64::from(r.size_bytes));
    (h.rotate_left(7) ^ word).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes a trace; call [`TraceWriter::finish`] or the file stays marked unfinished.
pub struct TraceWriter {
    out: BufWriter<File>,
    path: PathBuf,
    scratch: Vec<u8>,
    count: u64,
    body_bytes: u64,
    checksum: u64,
    last_pc: u64,
    last_addr: u64,
}

impl TraceWriter {
    pub fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|e| io(format_args!("cannot create {}", path.display()), e))?;
        Self::from_file(file, path)
    }

    /// A writer on a file the caller created (for example with `create_new`).
    pub fn from_file(file: File, path: &Path) -> Result<Self> {
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.write_all(&[0u8; HEADER_BYTES as usize])
            .map_err(|e| io(format_args!("cannot write {}", path.display()), e))?;
        Ok(TraceWriter {
            out,
            path: path.to_path_buf(),
            scratch: Vec::with_capacity(32),
            count: 0,
            body_bytes: 0,
            checksum: CHECKSUM_SEED,
            last_pc: 0,
            last_addr: 0,
        })
    }

    #[inline]
    pub fn push(&mut self, r: &Record) -> Result<()> {
        let s = &mut self.scratch;
        s.clear();
        let pc_repeats = r.pc == self.last_pc;
        s.push(r.kind as u8 | if pc_repeats { 4 } else { 0 });
        s.push(r.size_bytes);
        if !pc_repeats {
            put_varint(s, zigzag(r.pc.wrapping_sub(self.last_pc) as i64));
            self.last_pc = r.pc;
        }
        if r.kind.is_data() {
            put_varint(s, zigzag(r.addr.wrapping_sub(self.last_addr) as i64));
            self.last_addr = r.addr;
        }
        self.out.write_all(s).map_err(|e| io(format_args!("cannot write {}", self.path.display()), e))?;
        self.body_bytes += s.len() as u64;
        self.count += 1;
        self.checksum = checksum_step(self.checksum, r);
        Ok(())
    }

    pub fn records(&self) -> u64 {
        self.count
    }

    /// Writes the header and flushes; returns the record count.
    pub fn finish(mut self) -> Result<u64> {
        let path = self.path;
        let write = |e| io(format_args!("cannot write {}", path.display()), e);
        self.out.flush().map_err(write)?;
        let mut file = self.out.into_inner().map_err(|e| write(e.into_error()))?;
        file.seek(SeekFrom::Start(0)).map_err(write)?;
        let mut header = Vec::with_capacity(HEADER_BYTES as usize);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&self.count.to_le_bytes());
        header.extend_from_slice(&self.body_bytes.to_le_bytes());
        header.extend_from_slice(&self.checksum.to_le_bytes());
        file.write_all(&header).map_err(write)?;
        file.sync_all().map_err(|e| io(format_args!("cannot sync {}", path.display()), e))?;
        Ok(self.count)
    }
}

/// The fewest bytes a record takes (tag, size and a one-byte delta): a lower bound of a
/// trace's size, so a trace refused for lack of space could never have fitted.
pub const RECORD_BYTES_MIN: u64 = 3;
/// Records written between two looks at the stop flag: cheap, and well under a second.
const STOP_CHECK_RECORDS: u64 = 1 << 16;

/// Bytes free to an unprivileged writer on the file system holding `dir`.
pub fn free_bytes(dir: &Path) -> Result<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes())
        .map_err(|_| Error::new(ErrorKind::Io, format!("{} contains a NUL byte", dir.display())))?;
    // SAFETY: an all-zero statvfs is a valid value for the kernel to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and `st` a valid, writable statvfs for the whole call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(io(format_args!("cannot check free space of {}", dir.display()), e));
    }
    // fsblkcnt_t and c_ulong are 32 bits on some targets.
    Ok((st.f_bavail as u64).saturating_mul(st.f_frsize as u64))
}

/// Writes `record_count` records from `records` to a new file at `path` (never an
/// existing one): refuses before writing when the file system cannot hold even the
/// smallest possible encoding, looks at `stop` every 64 Ki records, and removes the
/// partial file on every error and on a stop, so nothing half-written is left. Errors name
/// the file. Returns the records written.
pub fn write_trace_file(
    path: &Path,
    records: impl Iterator<Item = Record>,
    record_count: u64,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<u64> {
    let planned_bytes_min = record_count.saturating_mul(RECORD_BYTES_MIN).saturating_add(HEADER_BYTES);
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let free = free_bytes(dir)?;
    if planned_bytes_min > free {
        return Err(Error::new(
            ErrorKind::Usage,
            format!(
                "{}: {record_count} records need at least {planned_bytes_min} bytes and {} has {free} free",
                path.display(),
                dir.display()
            ),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| io(format_args!("cannot create {}", path.display()), e))?;
    // An I/O error names the file already.
    let named = |e: Error| if e.kind == ErrorKind::Io { e } else { Error::with_source(e.kind, path.display(), e) };
    let result = (|| {
        let mut writer = TraceWriter::from_file(file, path)?;
        for (i, r) in records.take(record_count.try_into().unwrap_or(usize::MAX)).enumerate() {
            if (i as u64).is_multiple_of(STOP_CHECK_RECORDS) && stop.load(std::sync::atomic::Ordering::Relaxed) {
                return Err(Error::new(ErrorKind::Interrupted, "interrupted; the partial file was removed"));
            }
            writer.push(&r)?;
        }
        writer.finish()
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(path);
        named(e)
    })
}

/// Reads a trace record by record, verifying it as it goes and at the end.
pub struct TraceReader {
    input: File,
    path: PathBuf,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
    /// Bytes of the body consumed before `buf[0]`.
    consumed: u64,
    expected_count: u64,
    body_bytes: u64,
    expected_checksum: u64,
    count: u64,
    checksum: u64,
    last_pc: u64,
    last_addr: u64,
}

const READ_CHUNK_BYTES: usize = 1 << 20;
/// Longest record: tag, size and two 10-byte varints.
const RECORD_BYTES_MAX: usize = 22;

impl TraceReader {
    pub fn open(path: &Path) -> Result<Self> {
        let unreadable = |e: std::io::Error| io(format_args!("cannot read {}", path.display()), e);
        let mut input = smartcon_util::paths::open_input("", path)
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {}", path.display(), e.what)))?;
        let file_bytes = input.metadata().map_err(unreadable)?.len();
        let corrupt = |what: String| Error::new(ErrorKind::Usage, format!("{}: {what}", path.display()));
        if file_bytes < HEADER_BYTES {
            return Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "{}: truncated trace: {file_bytes} bytes, shorter than the {HEADER_BYTES}-byte header",
                    path.display()
                ),
            ));
        }
        let mut header = [0u8; HEADER_BYTES as usize];
        input.read_exact(&mut header).map_err(unreadable)?;
        if header[..8] == [0u8; 8] {
            return Err(corrupt("unfinished trace (its writer never wrote the header)".into()));
        }
        if &header[..8] != MAGIC {
            return Err(corrupt("not a smartcon trace (bad magic; lackey text needs `smartcon trace convert`)".into()));
        }
        let word = |i: usize| u64::from_le_bytes(header[i..i + 8].try_into().expect("8 bytes"));
        let (expected_count, body_bytes, expected_checksum) = (word(8), word(16), word(24));
        let actual_body = file_bytes - HEADER_BYTES;
        if actual_body < body_bytes {
            return Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "{}: truncated trace: body has {actual_body} of {body_bytes} bytes ({expected_count} records expected)",
                    path.display()
                ),
            ));
        }
        if actual_body > body_bytes {
            return Err(corrupt(format!("{} bytes after the last record", actual_body - body_bytes)));
        }
        Ok(TraceReader {
            input,
            path: path.to_path_buf(),
            buf: vec![0; READ_CHUNK_BYTES + RECORD_BYTES_MAX],
            pos: 0,
            len: 0,
            consumed: 0,
            expected_count,
            body_bytes,
            expected_checksum,
            count: 0,
            checksum: CHECKSUM_SEED,
            last_pc: 0,
            last_addr: 0,
        })
    }

    /// Records the header promises.
    pub fn expected_records(&self) -> u64 {
        self.expected_count
    }

    fn refill(&mut self) -> Result<()> {
        self.buf.copy_within(self.pos..self.len, 0);
        self.consumed += self.pos as u64;
        self.len -= self.pos;
        self.pos = 0;
        while self.len < self.buf.len() {
            let n = self
                .input
                .read(&mut self.buf[self.len..])
                .map_err(|e| io(format_args!("cannot read {}", self.path.display()), e))?;
            if n == 0 {
                break;
            }
            self.len += n;
        }
        Ok(())
    }

    fn corrupt(&self, what: &str) -> Error {
        Error::new(
            ErrorKind::Usage,
            format!("{}: corrupt trace at body byte {}: {what}", self.path.display(), self.consumed + self.pos as u64),
        )
    }

    #[inline]
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for i in 0..10 {
            let Some(&b) = self.buf[..self.len].get(self.pos) else {
                return Err(self.corrupt("record cut in the middle"));
            };
            self.pos += 1;
            // The tenth byte holds bit 63 only: more would be silently dropped, and a
            // changed byte would decode to the same value (a corruption nothing catches).
            if i == 9 && b > 1 {
                return Err(self.corrupt("varint overflows 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(self.corrupt("varint longer than 10 bytes"))
    }

    /// The next record, `None` after the last one (once the count and checksum verified).
    #[inline]
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        if self.count == self.expected_count {
            return self.verify_end().map(|_| None);
        }
        if self.len - self.pos < RECORD_BYTES_MAX {
            self.refill()?;
            if self.pos == self.len {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "{}: truncated trace: ended after {} of {} records",
                        self.path.display(),
                        self.count,
                        self.expected_count
                    ),
                ));
            }
        }
        let tag = self.buf[self.pos];
        if tag & !7 != 0 {
            return Err(self.corrupt(&format!("bad record tag {tag:#x}")));
        }
        let Some(&size_bytes) = self.buf[..self.len].get(self.pos + 1) else {
            return Err(self.corrupt("record cut in the middle"));
        };
        self.pos += 2;
        let kind = AccessKind::from_bits(tag);
        if tag & 4 == 0 {
            let d = unzigzag(self.varint()?);
            self.last_pc = self.last_pc.wrapping_add(d as u64);
        }
        let addr = if kind.is_data() {
            let d = unzigzag(self.varint()?);
            self.last_addr = self.last_addr.wrapping_add(d as u64);
            self.last_addr
        } else {
            self.last_pc
        };
        let r = Record { pc: self.last_pc, addr, kind, size_bytes };
        self.count += 1;
        self.checksum = checksum_step(self.checksum, &r);
        Ok(Some(r))
    }

    fn verify_end(&mut self) -> Result<()> {
        let body_read = self.consumed + self.pos as u64;
        if body_read != self.body_bytes {
            return Err(self.corrupt(&format!(
                "{} records end at body byte {body_read}, header says {}",
                self.count, self.body_bytes
            )));
        }
        if self.checksum != self.expected_checksum {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("{}: corrupt trace: checksum mismatch over {} records", self.path.display(), self.count),
            ));
        }
        Ok(())
    }

    /// Reads every record into memory (tests and small traces).
    pub fn read_all(path: &Path) -> Result<Vec<Record>> {
        let mut r = TraceReader::open(path)?;
        // A record takes at least 2 bytes: a corrupt count does not reserve memory the body
        // cannot fill.
        let mut out = Vec::with_capacity(r.expected_count.min(r.body_bytes / 2).min(1 << 24) as usize);
        while let Some(rec) = r.next_record()? {
            out.push(rec);
        }
        Ok(out)
    }
}

/// Counts of what a lackey conversion saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LackeyStats {
    pub records: u64,
    /// Lines that were not trace lines (valgrind's own `==pid==` lines, program output).
    pub other_lines: u64,
}

/// Parses one lackey `--trace-mem=yes` line: `I  addr,size`, ` L addr,size`, ` S ...`, ` M ...`.
/// Returns `None` for a line that is not a trace line.
pub fn parse_lackey_line(line: &str, last_pc: u64) -> Option<Record> {
    let bytes = line.as_bytes();
    if bytes.len() < 4 {
        return None;
    }
    let kind = match (bytes[0], bytes[1]) {
        (b'I', b' ') => AccessKind::Fetch,
        (b' ', b'L') => AccessKind::Read,
        (b' ', b'S') => AccessKind::Write,
        (b' ', b'M') => AccessKind::Modify,
        _ => return None,
    };
    let rest = line[2..].trim();
    let (addr, size) = rest.split_once(',')?;
    let addr = u64::from_str_radix(addr, 16).ok()?;
    let size: u8 = size.trim().parse().ok()?;
    if size == 0 {
        return None;
    }
    Some(match kind {
        AccessKind::Fetch => Record::fetch(addr, size),
        _ => Record::data(last_pc, addr, kind, size),
    })
}

/// Converts lackey text to records. `strict` refuses any line that is neither a trace line
/// nor a valgrind `==pid==` line (for files); capture passes `false` because the traced
/// program's own stderr shares the stream. Lines longer than 4 KiB are refused.
pub fn convert_lackey<R: BufRead>(
    mut input: R,
    strict: bool,
    mut sink: impl FnMut(&Record) -> Result<()>,
    mut other: impl FnMut(&str),
) -> Result<LackeyStats> {
    let mut stats = LackeyStats::default();
    let mut last_pc = 0u64;
    let mut raw = Vec::new();
    for index in 0.. {
        // Bounded: a file without newlines (or /dev/zero behind a symlink) is an error at
        // 4 KiB, not a line that grows until the memory is gone.
        let read = smartcon_util::paths::read_line_bounded(
            &mut input,
            &mut raw,
            if strict { 4096 } else { smartcon_util::paths::LINE_BYTES_MAX },
        )
        .map_err(|e| Error::new(ErrorKind::Usage, format!("line {}: {e}", index + 1)))?;
        if read == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim_end_matches(['\n', '\r']);
        match parse_lackey_line(line, last_pc) {
            Some(r) => {
                if r.kind == AccessKind::Fetch {
                    last_pc = r.pc;
                }
                sink(&r)?;
                stats.records += 1;
            }
            None => {
                if strict && !line.starts_with("==") && !line.trim().is_empty() {
                    let shown: String = line.chars().take(60).collect();
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("line {} is not lackey --trace-mem output: {shown:?}", index + 1),
                    ));
                }
                stats.other_lines += 1;
                other(line);
            }
        }
    }
    Ok(stats)
}

/// Converts a lackey text file into a trace file; nothing is left behind on error.
pub fn convert_lackey_file(input: &Path, output: &Path) -> Result<LackeyStats> {
    convert_lackey_file_until(input, output, &std::sync::atomic::AtomicBool::new(false))
}

/// [`convert_lackey_file`] that ends (with an error, the output removed) once `stop` is set.
pub fn convert_lackey_file_until(
    input: &Path,
    output: &Path,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<LackeyStats> {
    let file = smartcon_util::paths::open_input("", input)
        .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {}", input.display(), e.what)))?;
    let mut writer = TraceWriter::create(output)?;
    let sink = |r: &Record| {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::new(ErrorKind::Interrupted, "interrupted; nothing written"));
        }
        writer.push(r)
    };
    let result = convert_lackey(BufReader::with_capacity(1 << 20, file), true, sink, |_| {});
    match result {
        Ok(stats) if stats.records > 0 => {
            writer.finish()?;
            Ok(stats)
        }
        Ok(_) => {
            drop(writer);
            let _ = std::fs::remove_file(output);
            Err(Error::new(ErrorKind::Usage, format!("{} holds no lackey trace lines", input.display())))
        }
        Err(e) => {
            drop(writer);
            let _ = std::fs::remove_file(output);
            // The converter knows lines, not files: name the file its line numbers are in.
            Err(match e.kind {
                ErrorKind::Usage => Error::with_source(e.kind, input.display(), e),
                _ => e,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("smartcon-trace-{}-{name}", std::process::id()))
    }

    fn sample() -> Vec<Record> {
        vec![
            Record::fetch(0x400000, 4),
            Record::data(0x400000, 0x7fff_0000_1000, AccessKind::Read, 8),
            Record::fetch(0x400004, 15),
            Record::data(0x400004, 0x1000, AccessKind::Write, 4),
            Record::data(0x400004, 0x1008, AccessKind::Modify, 64),
            Record::fetch(0x3ff000, 2),
            Record::data(0x3ff000, u64::MAX - 7, AccessKind::Read, 8),
        ]
    }

    #[test]
    fn round_trip_and_compactness() {
        let path = tmp("rt");
        let mut w = TraceWriter::create(&path).unwrap();
        for r in sample() {
            w.push(&r).unwrap();
        }
        assert_eq!(w.finish().unwrap(), 7);
        assert_eq!(TraceReader::read_all(&path).unwrap(), sample());
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len < HEADER_BYTES + 7 * 12, "{len} bytes");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn truncated_and_corrupt_traces_are_errors() {
        let path = tmp("bad");
        let mut w = TraceWriter::create(&path).unwrap();
        for _ in 0..100 {
            for r in sample() {
                w.push(&r).unwrap();
            }
        }
        w.finish().unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // Every truncation point is detected.
        for cut in [0, 10, 31, 32, 33, bytes.len() / 2, bytes.len() - 1] {
            std::fs::write(&path, &bytes[..cut]).unwrap();
            let e = TraceReader::read_all(&path).unwrap_err();
            assert_eq!(e.kind, ErrorKind::Usage, "cut at {cut}: {e}");
            assert!(e.message.contains("truncated trace"), "cut at {cut}: {e}");
        }
        // A flipped bit in the body is detected.
        let mut flipped = bytes.clone();
        let i = bytes.len() - 20;
        flipped[i] ^= 0x10;
        std::fs::write(&path, &flipped).unwrap();
        let e = TraceReader::read_all(&path).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("corrupt trace"), "{e}");
        // Extra bytes and a bad magic are detected.
        let mut longer = bytes.clone();
        longer.push(0);
        std::fs::write(&path, &longer).unwrap();
        let e = TraceReader::read_all(&path).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.ends_with("1 bytes after the last record"), "{e}");
        std::fs::write(&path, b"I  0400d7d4,8\n this is lackey text, not a trace").unwrap();
        assert!(TraceReader::read_all(&path).unwrap_err().message.contains("magic"));
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn lackey_text_converts_and_reads_back() {
        let text = "==123== Lackey, an example Valgrind tool\nI  04016f00,3\n S 1ffefffa08,8\nI  04016f03,5\n L 04032e68,4\n M 1ffefffa00,8\n==123== \n";
        let (input, output) = (tmp("lk.txt"), tmp("lk.sct"));
        std::fs::write(&input, text).unwrap();
        let stats = convert_lackey_file(&input, &output).unwrap();
        assert_eq!(stats, LackeyStats { records: 5, other_lines: 2 });
        let got = TraceReader::read_all(&output).unwrap();
        assert_eq!(
            got,
            vec![
                Record::fetch(0x4016f00, 3),
                Record::data(0x4016f00, 0x1ffefffa08, AccessKind::Write, 8),
                Record::fetch(0x4016f03, 5),
                Record::data(0x4016f03, 0x4032e68, AccessKind::Read, 4),
                Record::data(0x4016f03, 0x1ffefffa00, AccessKind::Modify, 8),
            ]
        );
        std::fs::write(&input, "I  04016f00,3\nhello\n").unwrap();
        let e = convert_lackey_file(&input, &output).unwrap_err();
        assert!(e.message.contains("line 2"), "{e}");
        assert!(!output.exists(), "nothing written on error");
        std::fs::remove_file(&input).unwrap();
    }
}
