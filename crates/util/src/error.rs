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
    /// Stopped by the process-wide stop flag (Ctrl-C, SIGTERM) in the middle of a long
    /// wait or fill: not a failure of the target, and nothing was measured by that step.
    Interrupted,
    /// A thread of the run panicked (a bug): the run stopped instead of hanging.
    Internal,
}

#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// The errno of the failed system call or I/O, where there was one: what the C ABI and
    /// the interposition library hand back to their callers.
    pub errno: Option<i32>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), errno: None }
    }

    /// An error that carries the errno of the call that failed.
    pub fn os(kind: ErrorKind, errno: i32, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), errno: Some(errno) }
    }

    /// The errno of the failed call, if the error came from one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno
    }

    pub fn io(kind: ErrorKind, path: &Path, e: std::io::Error) -> Error {
        Error { kind, message: format!("{}: {e}", path.display()), errno: e.raw_os_error() }
    }

    /// A run failure rather than a usage or setup error.
    pub fn is_run_failure(&self) -> bool {
        matches!(self.kind, ErrorKind::Io | ErrorKind::Verify | ErrorKind::Internal)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}
