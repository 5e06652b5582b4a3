//! CPU pinning with sched_setaffinity, and a guard that restores the caller's mask.
//!
//! The ring and the ping-pong must run on chosen CPUs, but the CLI process goes on after a
//! measurement, so the calling thread's previous mask is put back when the guard drops.

use crate::{bad_input, os, Error};

/// The CPUs the calling thread may run on, in ascending order.
pub fn allowed_cpus() -> Result<Vec<usize>, Error> {
    smartcon_util::affinity::allowed_cpus().map_err(|source| os("sched_getaffinity", source))
}

/// Pins the calling thread (or a freshly forked child) to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<(), Error> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(bad_input(format!("cpu {cpu} is beyond CPU_SETSIZE")));
    }
    smartcon_util::affinity::pin_current_thread(&[cpu]).map_err(|source| os("sched_setaffinity", source))
}

/// Restores the calling thread's mask on drop.
pub struct AffinityGuard {
    _restores_on_drop: smartcon_util::affinity::AffinityGuard,
}

impl AffinityGuard {
    /// Saves the current mask, then pins to `cpu`.
    pub fn pin(cpu: usize) -> Result<Self, Error> {
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(bad_input(format!("cpu {cpu} is beyond CPU_SETSIZE")));
        }
        smartcon_util::affinity::AffinityGuard::pin(&[cpu])
            .map(|g| AffinityGuard { _restores_on_drop: g })
            .map_err(|source| os("sched_setaffinity", source))
    }
}
