//! Where an ETS task's accesses come from: a synthetic generator ([`crate::synth`]) or a
//! captured trace, either a `smartcon trace` file (`SCTRACE1`) or valgrind lackey's
//! `--trace-mem=yes` text (the format `smartcon trace convert` reads), told apart by the
//! file's first eight bytes.
//!
//! A synthetic source never ends; a trace ends at its last record, and a task whose trace
//! ends before its instruction budget simply stops there (the run reports the records and
//! instructions it actually simulated). A trace is verified as it is read: a truncated or
//! corrupt `SCTRACE1` file, or a lackey line that is neither a trace line nor a valgrind
//! `==pid==` line, is an error, never a shorter run.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::synth::{Synth, SynthKind};
use crate::trace::{parse_lackey_line, AccessKind, Record, TraceReader, MAGIC};

/// What a task runs.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskSource {
    /// An endless seeded synthetic stream.
    Synth { kind: SynthKind, working_set_bytes: u64, seed: u64 },
    /// A captured trace file, `SCTRACE1` or lackey text.
    Trace { path: PathBuf },
}

/// Lackey text read line by line, strictly (as `smartcon trace convert` does).
pub struct LackeyReader {
    input: BufReader<File>,
    path: PathBuf,
    raw: Vec<u8>,
    line: u64,
    last_pc: u64,
    records: u64,
}

/// Longest lackey line accepted (as in `trace convert`).
const LACKEY_LINE_BYTES_MAX: usize = 4096;

impl LackeyReader {
    fn new(input: File, path: &Path) -> Self {
        LackeyReader {
            input: BufReader::with_capacity(1 << 20, input),
            path: path.to_path_buf(),
            raw: Vec::new(),
            line: 0,
            last_pc: 0,
            records: 0,
        }
    }

    /// The next access; `None` at the end of the file (an error if it held none).
    pub fn next_record(&mut self) -> Result<Option<Record>> {
        loop {
            self.line += 1;
            let read = smartcon_util::paths::read_line_bounded(&mut self.input, &mut self.raw, LACKEY_LINE_BYTES_MAX)
                .map_err(|e| {
                Error::new(ErrorKind::Usage, format!("{}: line {}: {e}", self.path.display(), self.line))
            })?;
            if read == 0 {
                if self.records == 0 {
                    return Err(Error::new(
                        ErrorKind::Usage,
                        format!("{} holds no lackey trace lines", self.path.display()),
                    ));
                }
                return Ok(None);
            }
            let text = String::from_utf8_lossy(&self.raw);
            let text = text.trim_end_matches(['\n', '\r']);
            if let Some(r) = parse_lackey_line(text, self.last_pc) {
                if r.kind == AccessKind::Fetch {
                    self.last_pc = r.pc;
                }
                self.records += 1;
                return Ok(Some(r));
            }
            if !text.starts_with("==") && !text.trim().is_empty() {
                let shown: String = text.chars().take(60).collect();
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "{}: line {} is neither a smartcon trace nor lackey --trace-mem output: {shown:?}",
                        self.path.display(),
                        self.line
                    ),
                ));
            }
        }
    }
}

/// An open source of records.
pub enum RecordSource {
    Synth(Synth),
    Binary(Box<TraceReader>),
    Lackey(Box<LackeyReader>),
}

impl RecordSource {
    pub fn open(source: &TaskSource) -> Result<Self> {
        match source {
            TaskSource::Synth { kind, working_set_bytes, seed } => {
                Ok(RecordSource::Synth(Synth::new(*kind, *working_set_bytes, *seed)?))
            }
            TaskSource::Trace { path } => Self::open_trace(path),
        }
    }

    /// A trace file, its format told by its first eight bytes: the `SCTRACE1` magic, or
    /// eight zero bytes (an unfinished trace, which the trace reader refuses with its own
    /// message), is a smartcon trace; anything else is read as lackey text.
    pub fn open_trace(path: &Path) -> Result<Self> {
        let open = || {
            smartcon_util::paths::open_input("", path)
                .map_err(|e| Error::new(ErrorKind::Io, format!("cannot read {}: {}", path.display(), e.what)))
        };
        let mut head = [0u8; 8];
        let mut file = open()?;
        let mut got = 0;
        while got < head.len() {
            match file.read(&mut head[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(crate::error::io(format_args!("cannot read {}", path.display()), e)),
            }
        }
        if got == head.len() && (&head == MAGIC || head == [0u8; 8]) {
            return Ok(RecordSource::Binary(Box::new(TraceReader::open(path)?)));
        }
        if got == 0 {
            return Err(Error::new(ErrorKind::Usage, format!("{} is empty", path.display())));
        }
        Ok(RecordSource::Lackey(Box::new(LackeyReader::new(open()?, path))))
    }

    /// Appends up to `n` records to `out`; fewer only at the end of a trace.
    #[inline]
    pub fn fill(&mut self, out: &mut Vec<Record>, n: usize) -> Result<()> {
        match self {
            RecordSource::Synth(s) => out.extend(s.by_ref().take(n)),
            RecordSource::Binary(r) => {
                for _ in 0..n {
                    match r.next_record()? {
                        Some(rec) => out.push(rec),
                        None => break,
                    }
                }
            }
            RecordSource::Lackey(r) => {
                for _ in 0..n {
                    match r.next_record()? {
                        Some(rec) => out.push(rec),
                        None => break,
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceWriter;

    fn tmp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("smartcon-source-{}-{name}", std::process::id()))
    }

    fn drain(source: &mut RecordSource) -> Result<Vec<Record>> {
        let mut all = Vec::new();
        loop {
            let before = all.len();
            source.fill(&mut all, 3)?;
            if all.len() - before < 3 {
                return Ok(all);
            }
        }
    }

    #[test]
    fn lackey_and_binary_traces_read_the_same_records() {
        let (text, bin) = (tmp("a.txt"), tmp("a.sct"));
        std::fs::write(
            &text,
            "==1== Lackey\nI  04016f00,3\n S 1ffefffa08,8\nI  04016f03,5\n L 04032e68,4\n M 1ffefffa00,8\n==1==\n",
        )
        .unwrap();
        let expected = vec![
            Record::fetch(0x4016f00, 3),
            Record::data(0x4016f00, 0x1ffefffa08, AccessKind::Write, 8),
            Record::fetch(0x4016f03, 5),
            Record::data(0x4016f03, 0x4032e68, AccessKind::Read, 4),
            Record::data(0x4016f03, 0x1ffefffa00, AccessKind::Modify, 8),
        ];
        let mut w = TraceWriter::create(&bin).unwrap();
        for r in &expected {
            w.push(r).unwrap();
        }
        w.finish().unwrap();
        for path in [&text, &bin] {
            let mut s = RecordSource::open(&TaskSource::Trace { path: path.clone() }).unwrap();
            assert_eq!(drain(&mut s).unwrap(), expected, "{}", path.display());
        }
        // A line that is not lackey output, and a file with no trace lines, are errors.
        std::fs::write(&text, "I  04016f00,3\nhello\n").unwrap();
        let mut s = RecordSource::open_trace(&text).unwrap();
        assert!(drain(&mut s).unwrap_err().message.contains("line 2"));
        std::fs::write(&text, "==1== nothing\n").unwrap();
        let mut s = RecordSource::open_trace(&text).unwrap();
        let e = drain(&mut s).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.ends_with("holds no lackey trace lines"), "{e}");
        std::fs::write(&text, "").unwrap();
        assert!(RecordSource::open_trace(&text).is_err());
        // A truncated binary trace is an error at open, not a shorter run.
        let bytes = std::fs::read(&bin).unwrap();
        std::fs::write(&bin, &bytes[..bytes.len() - 1]).unwrap();
        let e = RecordSource::open_trace(&bin).err().unwrap();
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("truncated trace"), "{e}");
        std::fs::remove_file(&text).unwrap();
        std::fs::remove_file(&bin).unwrap();
    }
}
