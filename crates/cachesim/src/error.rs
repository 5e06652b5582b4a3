//! The cache simulator's errors: the workspace's one error type (`smartcon_util::error`).
//!
//! Every error names what was wrong (the geometry, the byte offset in a trace, the line of
//! lackey text) so the CLI can print one line and exit 2. The library never prints. The
//! kinds used here: `Usage` for what the caller gave (a cache geometry, a parameter, a trace
//! or lackey file that is truncated or does not decode: the message says which), `Io` for a
//! file the system would not read or write (the `io::Error` as the `source()`), `Setup` for
//! an external tool (valgrind) that is missing or failed, and `Interrupted` for the caller's
//! stop flag.

pub use smartcon_util::error::{Error, ErrorKind};

pub type Result<T> = std::result::Result<T, Error>;

/// "CONTEXT: the reason", the `io::Error` kept as the source.
pub(crate) fn io(context: impl std::fmt::Display, e: std::io::Error) -> Error {
    Error::with_source(ErrorKind::Io, context, e)
}
