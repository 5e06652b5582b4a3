//! Which CPUs a thread may run on, and pinning it (sched_getaffinity/sched_setaffinity on
//! the calling thread).

use std::io;

/// Builds a cpu_set_t from a list (ids at or beyond CPU_SETSIZE are skipped).
pub fn cpu_set(cpus: &[usize]) -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain data (zeroed is the empty set); CPU_SET writes within it
    // for ids below CPU_SETSIZE, which the filter guarantees.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus.iter().filter(|&&c| c < libc::CPU_SETSIZE as usize) {
            libc::CPU_SET(c, &mut set);
        }
        set
    }
}

fn cpus_of(set: &libc::cpu_set_t) -> Vec<usize> {
    // SAFETY: CPU_ISSET reads within the set for ids below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, set) }).collect()
}

fn current_set() -> io::Result<libc::cpu_set_t> {
    // SAFETY: zeroed cpu_set_t is valid; sched_getaffinity fills at most the size passed;
    // pid 0 is the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(set)
    }
}

fn set_current(set: &libc::cpu_set_t) -> io::Result<()> {
    // SAFETY: sched_setaffinity reads a valid cpu_set_t of the size given.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), set) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The CPUs the calling thread may run on, ascending.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    current_set().map(|s| cpus_of(&s))
}

/// Restricts the calling thread to `cpus` (EINVAL for an id beyond CPU_SETSIZE or a set
/// with no CPU the process's cpuset allows).
pub fn pin_current_thread(cpus: &[usize]) -> io::Result<()> {
    if cpus.is_empty() || cpus.iter().any(|&c| c >= libc::CPU_SETSIZE as usize) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    set_current(&cpu_set(cpus))
}

/// Puts the calling thread's previous mask back when dropped.
pub struct AffinityGuard {
    saved: libc::cpu_set_t,
}

impl AffinityGuard {
    /// Saves the current mask, then pins to `cpus`.
    pub fn pin(cpus: &[usize]) -> io::Result<AffinityGuard> {
        let saved = current_set()?;
        pin_current_thread(cpus)?;
        Ok(AffinityGuard { saved })
    }
}

impl Drop for AffinityGuard {
    fn drop(&mut self) {
        // Best effort: the mask was read from the kernel for this same thread.
        let _ = set_current(&self.saved);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinning_to_an_allowed_cpu_holds_and_the_guard_restores_the_mask() {
        let before = allowed_cpus().unwrap();
        assert!(!before.is_empty());
        let last = *before.last().unwrap();
        {
            let _g = AffinityGuard::pin(&[last]).unwrap();
            assert_eq!(allowed_cpus().unwrap(), vec![last]);
        }
        assert_eq!(allowed_cpus().unwrap(), before);
        assert_eq!(pin_current_thread(&[]).unwrap_err().raw_os_error(), Some(libc::EINVAL));
        assert_eq!(cpus_of(&cpu_set(&[0, 3, usize::MAX])), vec![0, 3]);
    }
}
