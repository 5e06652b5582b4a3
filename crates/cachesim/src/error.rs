//! Typed errors of the cache simulator.
//!
//! Every error names what was wrong (the geometry, the byte offset in a trace, the line of
//! lackey text) so the CLI can print one line and exit 2. The library never prints.

use std::fmt;

/// What went wrong, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// A cache geometry that is not a power of two, does not divide, or has zero ways.
    Geometry,
    /// A trace that ends before its header says it does.
    TraceTruncated,
    /// A trace whose bytes do not decode (bad magic, bad record, checksum mismatch).
    TraceCorrupt,
    /// A line of lackey output that is not a trace line where one was expected.
    Lackey,
    /// An operating-system error while reading or writing a file.
    Io,
    /// A bad parameter for a generator, a scheduler or an estimator.
    Parameter,
    /// An external tool (valgrind) is missing, failed, or wrote nothing usable.
    Tool,
    /// The caller's stop flag ended a run whose partial result would be wrong.
    Interrupted,
}

/// An error with the detail a person needs to fix the input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub detail: String,
}

impl Error {
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Self {
        Error { kind, detail: detail.into() }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.detail)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::new(ErrorKind::Io, e.to_string())
    }
}

pub type Result<T> = std::result::Result<T, Error>;
