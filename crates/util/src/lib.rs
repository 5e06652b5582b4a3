//! The small pieces several crates need, written once:
//!
//! - [`rng`]: the seeded xorshift64* generator every workload and test draws offsets from;
//! - [`stats`]: mean, standard deviation and median of a sample;
//! - [`procfs`]: the machine-wide CPU times of /proc/stat;
//! - [`affinity`]: which CPUs a thread may run on, and pinning it;
//! - [`loopmount`]: loop devices and mounts found, attached, detached and unmounted, and
//!   the one folder their creation records live in;
//! - [`paths`]: claimed outputs written beside and renamed, inputs opened without blocking;
//! - [`op`], [`units`] and [`error`]: the vocabulary every layer shares, the I/O kind, sizes
//!   and durations as people write them, and the workspace's one error type. They live here,
//!   at the bottom of the dependency graph, so the engine does not take them from its device
//!   emulator.
//!
//! Non-goals: anything with policy in it. These are leaf helpers with no dependency on the
//! rest of smartcon, so the engine, the device models and the simulators can all use them.

pub mod affinity;
pub mod error;
pub mod fuzz;
pub mod loopmount;
pub mod op;
pub mod paths;
pub mod procfs;
pub mod rng;
pub mod stats;
pub mod units;

pub use error::{Error, ErrorKind};
pub use op::Op;
