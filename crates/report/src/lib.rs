//! smartcon-report: everything smartcon shows a person, as functions from the libraries'
//! typed records to text, SVG and HTML. Tables for terminals ([`table`]), one-job printers
//! ([`printers`]), SVG charts ([`plot`]), and per study its text tables, markdown summary
//! and plots ([`evaluate`], [`polling`], [`merge`]); [`html`] puts a report folder's
//! summary and plots into one `report.html`.
//!
//! Like ripgrep's grep-printer, this is a library the CLI depends on, never the reverse:
//! no clap, no anyhow, no progress bars, no reading of flags. Functions return strings, or
//! write files and return typed errors ([`Error`], the engine's). Non-goals: measuring or
//! judging anything; the study crates do that and hand their records here.

pub mod bench;
pub mod ctx;
pub mod distributed;
pub mod ets;
pub mod evaluate;
pub mod html;
pub mod merge;
pub mod model;
pub mod plot;
pub mod polling;
pub mod printers;
pub mod probe;
pub mod table;
pub mod verdict_map;

pub use smartcon_engine::error::{Error, ErrorKind};

/// What every fallible renderer returns: the engine's typed error (kind `Io` for a file
/// that could not be written or drawn).
pub type Result<T> = std::result::Result<T, Error>;
