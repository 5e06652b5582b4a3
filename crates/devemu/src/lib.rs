//! Emulated storage devices (work in progress).
pub mod units;
