//! What the study runs beside or through the engine, kept apart from the I/O core:
//!
//! - [`load`]: the paper's CPU-intensive and I/O-intensive co-runners;
//! - [`workload`]: the IOZone- and Filebench-like workload tables;
//! - [`postmark`]: the Postmark-like small-file transaction workload;
//! - [`blockdev`]: loop, zram and loop-with-a-file-system devices that smartcon creates
//!   and removes again;
//! - [`merge`]: the merge device of the second paper (temporal merge, page-unit acks,
//!   pipelined post-I/O work) on an emulated device.
//!
//! The engine ([`smartcon_engine`]) knows nothing of these; they use its targets, ring,
//! decision and statistics like any application would.

pub mod blockdev;
pub mod leftovers;
pub mod load;
pub mod merge;
pub mod postmark;
pub mod workload;
