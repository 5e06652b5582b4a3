//! The smartcon engine: real I/O with a per-I/O choice of how the thread waits.
//!
//! Layers, bottom up: [`ring`] (one io_uring per thread, block or spin on it), [`target`]
//! (the `Port` and `Target` traits; files and block devices on the ring),
//! [`decision`] (the pure SmartCon Decision Module), [`monitor`] (the System Monitor),
//! [`smartport`] ("decide, then wait" per I/O: the one glue every caller goes through),
//! [`profile`] (per-device thresholds, the Device Monitor's output), [`job`] (threads doing
//! I/O for a duration) and [`stats`] (histograms, CPU, context switches, decisions).
//!
//! Emulated devices (a devemu model behind a `Port`) and the seeded simulation are in
//! `smartcon-emutarget`, a crate above this one and devemu: the engine does not depend on
//! its device emulator (`scripts/check-crate-layers.sh` checks it).
//!
//! Non-goals: queue depths above one per thread (the paper's callers are synchronous), a
//! kernel patch, or NVMe poll queues (absent on the machines this runs on).

pub mod clock;
pub mod decision;
pub mod error;
pub mod host;
pub mod job;
pub mod learn;
pub mod monitor;
pub mod profile;
pub mod ring;
pub mod smartport;
pub mod stats;
pub mod stop;
pub mod target;
pub mod verify;
pub mod wait;

pub mod placement;
