//! Time. The engine reads CLOCK_MONOTONIC (a vDSO call, no syscall); models take explicit
//! instants, so the same device code runs on virtual time in tests and simulation.

/// Nanoseconds on CLOCK_MONOTONIC, the clock io_uring's absolute timeouts use.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time consumed so far by the calling thread, in ns.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Asks the kernel to fire this thread's sleeps on time (the default slack is 50 us, which
/// would make every timed sleep late by up to that much).
pub fn tighten_timer_slack() {
    // SAFETY: prctl with PR_SET_TIMERSLACK takes a plain integer.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
}
