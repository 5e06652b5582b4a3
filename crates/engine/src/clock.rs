//! Time. The engine reads CLOCK_MONOTONIC (a vDSO call, no syscall); models take explicit
//! instants, so the same device code runs on virtual time in tests and simulation.
//!
//! The ports, the waits and the emulated-device target read the time through a [`Clock`]
//! and wait through a [`Sleeper`], both injected; [`RealClock`] (the default everywhere) is
//! the monotonic clock and the kernel's timers, and the simulation
//! (`smartcon_emutarget::sim`) injects a virtual one.
//! [`sleep_then_spin_until`] is the one "sleep, then spin to a deadline" wait: whoever must
//! see an instant more precisely than a timer wakes goes through it. A waiter that an event
//! also wakes (a server whose ring brings the next request while it waits to answer the
//! last one) is an [`EventWait`], and waits through its SmartPort
//! (`SmartPort::wait_earliest`), whose reference wait is the same sleep and spin.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// Whether the busy-wait loops put a PAUSE (`std::hint::spin_loop`) in each turn: on by
/// default; `--no-pause` turns it off to measure what the hint changes (SmartCon Sec. 7.8,
/// Fig. 20). Process-wide, set once before a run.
static SPIN_PAUSE: AtomicBool = AtomicBool::new(true);

/// Sets whether the busy-wait loops pause (see [`spin_hint`]).
pub fn set_spin_pause(on: bool) {
    SPIN_PAUSE.store(on, Ordering::Relaxed);
}

/// One turn of a busy-wait loop: the PAUSE hint, unless `--no-pause` turned it off (then
/// nothing: the loop re-reads its condition at once).
#[inline]
pub fn spin_hint() {
    if SPIN_PAUSE.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// Where a port, a wait or a device model reads the time.
pub trait Clock: Send + Sync {
    /// Now, in nanoseconds, on the clock every instant of this run is on.
    fn now_ns(&self) -> u64;
    /// The calling thread's CPU time so far on this clock's time line, where it has one (the
    /// host's per-thread clock; a simulated thread's). `None` by default.
    fn thread_cpu_ns(&self) -> Option<u64> {
        None
    }
}

/// How a thread waits on its clock.
pub trait Sleeper: Send + Sync {
    /// Sleeps on a timer until `at_ns` (returns later, by the host's wake-up overshoot).
    fn sleep_until(&self, at_ns: u64);
    /// Busy-waits until `at_ns`, reading nothing but the clock.
    fn spin_until(&self, at_ns: u64);
    /// Sleeps until the device's interrupt at `at_ns` wakes the thread (a blocking wait).
    /// On the real host the emulated ports use their ring's timer instead, whose cost is the
    /// one a blocking I/O pays; this is the fallback and the virtual clock's path.
    fn block_until(&self, at_ns: u64) {
        self.sleep_until(at_ns)
    }
}

/// A clock and the sleeper that waits on it, as one injected handle.
pub trait Time: Clock + Sleeper {
    /// Whether this is the host's own clock (the ports then block on their io_uring).
    fn is_real(&self) -> bool {
        false
    }
}

/// The shared handle the engine passes around.
pub type SharedTime = Arc<dyn Time>;

/// CLOCK_MONOTONIC and the kernel's timers: the default.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealClock;

impl Clock for RealClock {
    #[inline]
    fn now_ns(&self) -> u64 {
        now_ns()
    }
    fn thread_cpu_ns(&self) -> Option<u64> {
        Some(thread_cpu_ns())
    }
}

impl Sleeper for RealClock {
    fn sleep_until(&self, at_ns: u64) {
        sleep_until_ns(at_ns)
    }
    #[inline]
    fn spin_until(&self, at_ns: u64) {
        spin_until_ns(at_ns)
    }
}

impl Time for RealClock {
    fn is_real(&self) -> bool {
        true
    }
}

/// A clock that moves only when a thread sleeps or spins on it, to the instant asked (a
/// test's: a port, a wait or a server held on time the test sets, where no thread really
/// waits). Not a model of any host: the simulation's clock is `smartcon_emutarget::sim`'s.
#[derive(Debug, Default)]
pub struct ManualClock(pub AtomicU64);

impl Clock for ManualClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

impl Sleeper for ManualClock {
    fn sleep_until(&self, at_ns: u64) {
        self.0.fetch_max(at_ns, Ordering::Relaxed);
    }
    fn spin_until(&self, at_ns: u64) {
        self.0.fetch_max(at_ns, Ordering::Relaxed);
    }
}

impl Time for ManualClock {}

/// The real clock as a shared handle (one allocation per process).
pub fn real() -> SharedTime {
    static REAL: OnceLock<SharedTime> = OnceLock::new();
    REAL.get_or_init(|| Arc::new(RealClock)).clone()
}

/// Waits until `deadline_ns` precisely: asleep on a timer until `margin_ns` before it, then
/// spinning on the clock to the deadline itself. A timer alone wakes late by the host's
/// overshoot (tens of us on a VM); with a margin at least that overshoot the deadline is seen
/// within a clock read. Returns how late the timer woke against `deadline_ns - margin_ns`
/// when the thread slept (what the caller's margin must cover), `None` when the deadline
/// was within the margin and the wait was all spin.
pub fn sleep_then_spin_until(time: &(impl Clock + Sleeper + ?Sized), deadline_ns: u64, margin_ns: u64) -> Option<u64> {
    let wake_ns = deadline_ns.saturating_sub(margin_ns);
    let mut overshoot = None;
    if wake_ns > time.now_ns() {
        time.sleep_until(wake_ns);
        overshoot = Some(time.now_ns().saturating_sub(wake_ns));
    }
    time.spin_until(deadline_ns);
    overshoot
}

/// A waiter that something besides its clock can wake (a server's ring, which brings the
/// next request): what a SmartPort's held calls sleep on (`SmartPort::wait_earliest`).
pub trait EventWait {
    /// Sleeps until `at_ns` or until the event comes, whichever is first; returns at once
    /// (after handing over whatever the waiter has queued) when `at_ns` has passed.
    fn sleep_until_or_event(&mut self, at_ns: u64) -> Result<(), crate::error::Error>;
    /// Whether the event has come: a look, never a wait (it runs in the spin).
    fn event_seen(&mut self) -> bool;
}

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

/// Busy-waits until `at_ns` with a pause hint ([`spin_hint`]), reading nothing but the clock.
#[inline]
pub fn spin_until_ns(at_ns: u64) {
    while now_ns() < at_ns {
        spin_hint();
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

/// Timed sleeps of `asked_ns` as [`sleep_overshoots_ns`] takes them, with what they cost the
/// sleeping thread: its CPU (CLOCK_THREAD_CPUTIME_ID) and voluntary switches
/// (getrusage(RUSAGE_THREAD)) over the `count` sleeps, per sleep.
#[derive(Debug, Clone, PartialEq)]
pub struct SleepRun {
    /// The overshoots in ns, sorted.
    pub overshoots_ns: Vec<u64>,
    pub cpu_ns_per_sleep: f64,
    pub switches_per_sleep: f64,
}

/// [`sleep_overshoots_ns`] with the sleeps' CPU and switches ([`SleepRun`]).
pub fn sleep_run(asked_ns: u64, count: usize) -> SleepRun {
    let switches = || {
        // SAFETY: an all-zero rusage is a valid value of this plain C struct.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: RUSAGE_THREAD with a valid, writable out pointer.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
        ru.ru_nvcsw as u64
    };
    let (s0, c0) = (switches(), thread_cpu_ns());
    let overshoots_ns = sleep_overshoots_ns(asked_ns, count);
    let (c1, s1) = (thread_cpu_ns(), switches());
    let n = count.max(1) as f64;
    SleepRun {
        overshoots_ns,
        cpu_ns_per_sleep: c1.saturating_sub(c0) as f64 / n,
        switches_per_sleep: s1.saturating_sub(s0) as f64 / n,
    }
}
