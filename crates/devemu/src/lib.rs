//! Emulated storage devices for smartcon.
//!
//! A device is a deterministic timing model ([`model::DeviceModel`]) in front of a backing
//! store ([`store::RamStore`]). The model is a pure function of the request and of explicit
//! time: it never reads a clock and uses no randomness, so the same code gives completion
//! instants in real time (the engine passes the monotonic clock) and in virtual time (tests,
//! simulators, trace replay).
//!
//! Non-goals: firmware effects (garbage collection, write amplification, thermal throttling)
//! and cache modelling inside the device. The presets stand in for device classes, not for one
//! product's every quirk.

pub mod device;
pub mod fault;
pub mod hdd;
pub mod model;
pub mod pages;
pub mod preset;
pub mod store;
pub mod table;

pub use device::{
    simulate_batch, simulate_batch_with_faults, Completion, Device, Discipline, FcfsDevice, Placed, Request, TimeError,
    VirtualFcfs,
};
pub use fault::FaultPlan;
pub use model::{ChannelSet, DeviceModel, Op, OpTiming, Schedule};
pub use preset::{parse_spec, preset, EmuSpec, Mechanism, Preset, PRESETS};
pub use store::RamStore;
pub use table::{LatencyTable, Pattern};

/// A bad specification, table or scenario: the workspace's error, of kind usage.
pub(crate) fn usage(message: impl Into<String>) -> smartcon_util::error::Error {
    smartcon_util::error::Error::new(smartcon_util::error::ErrorKind::Usage, message)
}
