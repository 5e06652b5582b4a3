//! The workspace's one error type, from the bottom crate (`smartcon_util::error`).
//! Re-exported here because some 75 files across the workspace name it by this path;
//! new code may use either.

pub use smartcon_util::error::{Error, ErrorKind};
