//! smartcon-cachesim: a trace-driven cache simulator built for the elastic-time-slicing
//! study (Jammula et al., seeds/003).
//!
//! Layers, bottom up: [`geometry`] validates a cache shape; [`policy`] holds LRU, DRRIP and
//! SHiP behind one trait; [`cache`] is one set-associative cache; [`hierarchy`] is the
//! Table II machine with its in-order timing model and a cachegrind-like mode; [`trace`] is
//! the binary trace format and lackey conversion; [`synth`] generates traces; [`estimator`]
//! is Algorithm 1 with its ground truth; [`sched`] runs UTS and ETS round-robin; [`ets`] is the
//! ETS study and its metrics; [`study`] simulates a whole trace, describes one and compares
//! with cachegrind.
//!
//! The library knows nothing of the CLI, prints nothing, spawns processes only in
//! [`capture`] (valgrind) and has no randomness that is not seeded.

pub mod cache;
pub mod capture;
pub mod error;
pub mod estimator;
pub mod ets;
pub mod geometry;
pub mod hierarchy;
pub mod policy;
pub mod sched;
pub mod shared;
pub mod source;
pub mod study;
pub mod synth;
pub mod trace;

pub use error::{Error, ErrorKind, Result};
