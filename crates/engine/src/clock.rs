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

/// Sleeps until `at_ns` on CLOCK_MONOTONIC (a kernel hrtimer; with the tightened slack it
/// fires on time, and the thread runs again after the host's wake-up overshoot).
pub fn sleep_until_ns(at_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; EINTR (a signal such as Ctrl-C) just ends the sleep early,
    // which every caller tolerates because it re-reads the clock.
    unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) };
}

/// Busy-waits until `at_ns` with a pause hint, reading nothing but the clock.
#[inline]
pub fn spin_until_ns(at_ns: u64) {
    while now_ns() < at_ns {
        std::hint::spin_loop();
    }
}

/// How late `clock_nanosleep` wakes this thread for a sleep of `asked_ns`, over `count`
/// sleeps with the tightened timer slack: the overshoots in ns, sorted. It is the host's
/// wake-up cost as a sleeping waiter sees it (timer interrupt, a halted vCPU's exit,
/// scheduling), and it takes about `count * (asked_ns + overshoot)`.
pub fn sleep_overshoots_ns(asked_ns: u64, count: usize) -> Vec<u64> {
    tighten_timer_slack();
    let mut v: Vec<u64> = (0..count)
        .map(|_| {
            let at = now_ns() + asked_ns;
            sleep_until_ns(at);
            now_ns().saturating_sub(at)
        })
        .collect();
    v.sort_unstable();
    v
}
