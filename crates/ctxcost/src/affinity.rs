//! CPU pinning with sched_setaffinity, and a guard that restores the caller's mask.
//!
//! The ring and the ping-pong must run on chosen CPUs, but the CLI process goes on after a
//! measurement, so the calling thread's previous mask is put back when the guard drops.

use crate::Error;

/// The CPUs the calling thread may run on, in ascending order.
pub fn allowed_cpus() -> Result<Vec<usize>, Error> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass the size of the set we own; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(Error::Os { what: "sched_getaffinity", source: std::io::Error::last_os_error() });
    }
    let cpus = (0..libc::CPU_SETSIZE as usize)
        // SAFETY: i is below CPU_SETSIZE, the set's capacity.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect();
    Ok(cpus)
}

/// Pins the calling thread (or a freshly forked child) to one CPU.
pub fn pin_current_thread(cpu: usize) -> Result<(), Error> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(Error::BadInput(format!("cpu {cpu} is beyond CPU_SETSIZE")));
    }
    // SAFETY: zeroed cpu_set_t is an empty set; CPU_SET stays within its capacity (checked).
    let rc = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if rc != 0 {
        return Err(Error::Os { what: "sched_setaffinity", source: std::io::Error::last_os_error() });
    }
    Ok(())
}

/// Restores the calling thread's mask on drop.
pub struct AffinityGuard {
    saved: libc::cpu_set_t,
}

impl AffinityGuard {
    /// Saves the current mask, then pins to `cpu`.
    pub fn pin(cpu: usize) -> Result<Self, Error> {
        // SAFETY: zeroed cpu_set_t is valid; we pass its true size.
        let mut saved: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above; pid 0 is the calling thread.
        let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut saved) };
        if rc != 0 {
            return Err(Error::Os { what: "sched_getaffinity", source: std::io::Error::last_os_error() });
        }
        pin_current_thread(cpu)?;
        Ok(AffinityGuard { saved })
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // SAFETY: restoring a mask we read from the kernel for this same thread.
        unsafe {
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.saved);
        }
    }
}
