//! The workspace's one error type: a kind, the whole message, the errno where a system call
//! failed, and the error it was made from. The CLI prints it; the kind tells a usage or
//! setup problem (bad input, missing target: exit 2) from a run failure (verification
//! mismatch: exit 1).
//!
//! The message is the whole line, cause included ("IMG: No such file or directory"),
//! because every caller prints it that way and some 50 read the field. [`Error::source`]
//! additionally hands the cause itself to a caller that wants its type (an `io::Error`'s
//! kind, a TOML parser's span); a printer that walks the chain skips a cause whose text the
//! line already ends with (`smartcon`'s `report_error` does).
//!
//! Non-goals: one error type per crate, or an enum of every failure. The kinds are the few
//! a caller acts on differently; the message says the rest.

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

/// What an error was made from: any error that may cross threads.
pub type Source = Box<dyn std::error::Error + Send + Sync + 'static>;

#[derive(Debug)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
    /// The errno of the failed system call or I/O, where there was one: what the C ABI and
    /// the interposition library hand back to their callers.
    pub errno: Option<i32>,
    /// The error this one was made from, where there was one (its text is already in
    /// `message`); returned by [`std::error::Error::source`].
    pub source: Option<Source>,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), errno: None, source: None }
    }

    /// An error that carries the errno of the call that failed.
    pub fn os(kind: ErrorKind, errno: i32, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), errno: Some(errno), source: None }
    }

    /// "`context`: `cause`", keeping the cause as the source (and its errno, if it is an
    /// `io::Error` from a system call).
    pub fn with_source(kind: ErrorKind, context: impl fmt::Display, cause: impl Into<Source>) -> Error {
        let cause = cause.into();
        let errno = cause.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error);
        Error { kind, message: format!("{context}: {cause}"), errno, source: Some(cause) }
    }

    /// An error whose message is its cause's own text, keeping the cause as the source.
    pub fn from_source(kind: ErrorKind, cause: impl Into<Source>) -> Error {
        let cause = cause.into();
        let errno = cause.downcast_ref::<std::io::Error>().and_then(std::io::Error::raw_os_error);
        Error { kind, message: cause.to_string(), errno, source: Some(cause) }
    }

    /// The errno of the failed call, if the error came from one.
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno
    }

    pub fn io(kind: ErrorKind, path: &Path, e: std::io::Error) -> Error {
        Error::with_source(kind, path.display(), e)
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

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// The narrow parse errors of this crate are values their parsers' tests compare; each
/// becomes the one error as a usage error whose message is its own text and whose source is
/// itself.
macro_rules! usage_from {
    ($($narrow:ty),*) => {$(
        impl From<$narrow> for Error {
            fn from(e: $narrow) -> Error {
                Error::from_source(ErrorKind::Usage, e)
            }
        }
    )*};
}
usage_from!(crate::paths::PathError, crate::units::ParseError, crate::units::SizeError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_keeps_its_cause_and_errno() {
        let e = Error::io(ErrorKind::Target, Path::new("/x"), std::io::Error::from_raw_os_error(libc::ENOENT));
        assert_eq!(e.errno, Some(libc::ENOENT));
        assert!(e.message.starts_with("/x: "), "{}", e.message);
        let cause = std::error::Error::source(&e).expect("a source");
        assert!(e.message.ends_with(&cause.to_string()));
        assert_eq!(cause.downcast_ref::<std::io::Error>().unwrap().kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn a_narrow_parse_error_becomes_a_usage_error_with_itself_as_source() {
        let narrow = crate::units::parse_size("4x").unwrap_err();
        let e = Error::from(narrow.clone());
        assert_eq!(e.kind, ErrorKind::Usage);
        assert_eq!(e.message, narrow.to_string());
        let source = std::error::Error::source(&e).expect("a source");
        assert_eq!(source.downcast_ref::<crate::units::ParseError>(), Some(&narrow));
    }

    #[test]
    fn plain_errors_have_no_source() {
        let e = Error::new(ErrorKind::Usage, "bad");
        assert!(std::error::Error::source(&e).is_none());
        assert_eq!(e.to_string(), "bad");
        let e = Error::with_source(ErrorKind::Usage, "spec", "not a number");
        assert_eq!(e.to_string(), "spec: not a number");
        assert_eq!(e.errno, None);
        assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "not a number");
    }
}
