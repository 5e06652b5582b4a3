//! The small pieces several crates need, written once:
//!
//! - [`rng`]: the seeded xorshift64* generator every workload and test draws offsets from;
//! - [`stats`]: mean, standard deviation and median of a sample;
//! - [`procfs`]: the machine-wide CPU times of /proc/stat;
//! - [`affinity`]: which CPUs a thread may run on, and pinning it;
//! - [`loopmount`]: loop devices and mounts found, attached, detached and unmounted, and
//!   the one folder their creation records live in;
//! - [`paths`]: claimed outputs written beside and renamed, inputs opened without blocking.
//!
//! Non-goals: anything with policy in it. These are leaf helpers with no dependency on the
//! rest of smartcon, so the engine, the device models and the simulators can all use them.

pub mod affinity;
pub mod fuzz;
pub mod loopmount;
pub mod paths;
pub mod procfs;
pub mod rng;
pub mod stats;
