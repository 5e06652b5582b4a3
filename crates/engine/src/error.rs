//! Typed errors with context. The CLI prints them; the kind tells a usage or setup problem
//! (bad input, missing target: exit 2) from a run failure (verification mismatch: exit 1).

use std::fmt;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Bad parameters: sizes, spans, strategies that cannot work on this target.
    Usage,
    /// The target cannot be opened or used (missing, permission, not aligned).
    Target,
    /// Refused for safety (writing to a block device without --destructive).
    Refused,
    /// A profile is missing, malformed or for another device.
    Profile,
    /// The kernel lacks a feature (io_uring disabled).
    Setup,
    /// An I/O failed during the run.
    Io,
    /// Data read back is not what was written.
    Verify,
}

#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into() }
    }

    pub fn io(kind: ErrorKind, path: &Path, e: std::io::Error) -> Error {
        Error::new(kind, format!("{}: {e}", path.display()))
    }

    /// A run failure rather than a usage or setup error.
    pub fn is_run_failure(&self) -> bool {
        matches!(self.kind, ErrorKind::Io | ErrorKind::Verify)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
