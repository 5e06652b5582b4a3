//! Waiting on a clock: the virtual wait ([`wait_until`], registered in the domain so the
//! clock can jump past it) and the real-time waits of a served device request, one per way
//! of waiting ([`DeviceWait`], [`real_wait_until`], [`virtual_wait_until`]).
//!
//! The real-time `block` and `spin` waits are the engine's primitives
//! (`smartcon_engine::clock::{sleep_until_ns, spin_until_ns}`: a kernel timer at an
//! absolute instant, and a clock-reading busy loop with a pause hint), as its emulated
//! targets wait; they allocate nothing and make only async-signal-safe calls (through this
//! library's interposed `clock_gettime` and `clock_nanosleep`, which pass straight to libc
//! in real time). The engine's `block` sleeps on its io_uring's timeout, which has no timer
//! slack; a served request has no ring, so its `block` tightens the thread's timer slack
//! once ([`tighten_once`]) and sleeps in `clock_nanosleep`.
//!
//! Service layer: below the interposed calls; above the domain only.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use libc::timespec;
use smartcon_engine::clock;

use super::domain::{
    epoch_word, futex_wait, jump_if_idle, observe_ns, peek_ns, real_ns, register, settle_after_jump, to_ts, RECHECK_NS,
};

/// How a served request waits for the model's completion instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceWait {
    /// `block`: a timed kernel wait until the instant (the thread sleeps; the timer's
    /// interrupt wakes it, with this host's wake-up and context switch). Under virtual
    /// time, a registered wait: the thread is idle and the clock may jump.
    Block,
    /// `spin` (and `sync`, programmed I/O): busy-wait on the clock until the instant; past
    /// `budget_ns` the rest is a kernel wait, as the engine's spin falls back. Under
    /// virtual time the thread is running meanwhile, so the clock does not jump past it.
    Spin { budget_ns: u64 },
    /// The reference: the kernel for all but a final stretch, then a spin
    /// ([`real_sleep_until`]); also `hybrid`'s wait (sleep, then poll). Under virtual
    /// time, a registered wait.
    Precise,
}

/// Waits in real time until the real monotonic clock reads `deadline_ns`, as `wait` says.
/// Returns whether a spin reached its budget and slept for the rest.
pub fn real_wait_until(wait: DeviceWait, deadline_ns: u64) -> bool {
    match wait {
        DeviceWait::Block => {
            block_until(deadline_ns);
            false
        }
        DeviceWait::Spin { budget_ns } => {
            let (spin_to_ns, falls_back) = spin_plan(clock::now_ns(), deadline_ns, budget_ns);
            clock::spin_until_ns(spin_to_ns);
            if falls_back {
                block_until(deadline_ns);
            }
            falls_back
        }
        DeviceWait::Precise => {
            real_sleep_until(deadline_ns);
            false
        }
    }
}

/// A spin from `now_ns`: how far it spins, and whether it then sleeps for the rest (the
/// deadline lies past the budget).
fn spin_plan(now_ns: u64, deadline_ns: u64, budget_ns: u64) -> (u64, bool) {
    let give_up_ns = now_ns.saturating_add(budget_ns);
    if deadline_ns <= give_up_ns {
        (deadline_ns, false)
    } else {
        (give_up_ns, true)
    }
}

/// Waits until the virtual monotonic clock reads `target_ns`, as `wait` says. Returns
/// whether a spin reached its budget (of real time) and waited idle for the rest.
pub fn virtual_wait_until(wait: DeviceWait, target_ns: u64) -> bool {
    let DeviceWait::Spin { budget_ns } = wait else {
        wait_until(target_ns);
        return false;
    };
    let give_up_ns = real_ns(libc::CLOCK_MONOTONIC).saturating_add(budget_ns);
    while peek_ns() < target_ns {
        if real_ns(libc::CLOCK_MONOTONIC) >= give_up_ns {
            wait_until(target_ns);
            return true;
        }
        std::hint::spin_loop();
    }
    false
}

thread_local! {
    /// The calling thread's timer slack was tightened (a const initialiser: no allocation,
    /// no destructor).
    static SLACK_TIGHT: Cell<bool> = const { Cell::new(false) };
}

/// Tightens the calling thread's timer slack once (the kernel's default 50 us would make
/// every `block` wait late by up to that much), as the engine's own I/O threads do. A clone
/// helper shares its creator's TLS (crate::helper) and may keep the default slack.
fn tighten_once() {
    if !SLACK_TIGHT.try_with(|t| t.replace(true)).unwrap_or(true) {
        clock::tighten_timer_slack();
    }
}

/// A kernel wait until `deadline_ns` on the real monotonic clock; a signal that cuts it
/// short is slept past.
fn block_until(deadline_ns: u64) {
    tighten_once();
    while real_ns(libc::CLOCK_MONOTONIC) < deadline_ns {
        clock::sleep_until_ns(deadline_ns);
    }
}

/// Waits until the virtual monotonic clock reaches `target_ns`: a jump when every thread
/// of the domain is idle, else real time (woken early by a jump that reaches the target).
pub fn wait_until(target_ns: u64) {
    let reg = register(target_ns, false);
    let mut slept = false;
    loop {
        let word = reg.as_ref().map_or_else(epoch_word, |r| r.wake_word());
        let seen = word.load(Ordering::Acquire);
        let now = if reg.is_some() { jump_if_idle() } else { peek_ns() };
        if now >= target_ns {
            // Woken by another thread's jump to this very instant: its wake-up is not the
            // program's time (still registered, so no jump slips in meanwhile).
            if slept && reg.is_some() {
                settle_after_jump(target_ns);
            }
            return;
        }
        futex_wait(word, seen, (target_ns - now).min(RECHECK_NS));
        slept = true;
    }
}

/// Sleeps `ns` of virtual time from now.
pub fn sleep_virtual(ns: u64) {
    let (now, _) = observe_ns();
    wait_until(now.saturating_add(ns));
}

/// The shortest final stretch of a real-time device wait that is polled, not slept.
pub const SPIN_NS_MIN: u64 = 200_000;
/// The longest: a spin has a budget, past which the wait stays late rather than burn a
/// shared machine's CPU.
pub const SPIN_NS_MAX: u64 = 2_000_000;
const _: () = assert!(SPIN_NS_MIN <= SPIN_NS_MAX);

/// How late the kernel's wake-ups came lately (ns, a moving average over about 8 waits).
static OVERSLEEP_NS: AtomicU64 = AtomicU64::new(0);

/// The polled stretch for the lateness seen so far: twice the recent oversleep, within
/// [SPIN_NS_MIN, SPIN_NS_MAX], so a wake-up as late as the recent ones still lands before
/// the instant.
fn spin_ns_for(oversleep_ns: u64) -> u64 {
    oversleep_ns.saturating_mul(2).clamp(SPIN_NS_MIN, SPIN_NS_MAX)
}

/// The moving average after one more wake-up `late_ns` behind its timer.
fn oversleep_after(average_ns: u64, late_ns: u64) -> u64 {
    average_ns - average_ns / 8 + late_ns / 8
}

/// Sleeps in real time until the real monotonic clock reads `deadline_ns`: the kernel for
/// all but the final stretch, then a spin (a kernel wake-up on a busy machine comes late by
/// tens of us to milliseconds). The stretch follows how late the kernel's wake-ups have
/// come ([`spin_ns_for`]). The reference wait of a served request: it lands on the model's
/// instant, whatever the host, which is what a sweep's real-time check and a guest's device
/// need; `smartcon run --strategy` asks for the other waits ([`DeviceWait`]).
///
/// It is the engine's one "sleep, then spin to a deadline"
/// ([`clock::sleep_then_spin_until`], the wait of `EmuTarget::transfer_precise` too) on
/// [`RawClock`], the host's clock and timer by raw system calls, so it can run from any
/// interposed call without entering another; what stays here is the margin, a moving
/// average of this process's wake-ups rather than the replay's p99 of one thread's.
pub fn real_sleep_until(deadline_ns: u64) {
    let spin_ns = spin_ns_for(OVERSLEEP_NS.load(Ordering::Relaxed));
    let raw = RawClock { interrupted: AtomicBool::new(false) };
    let late_ns = clock::sleep_then_spin_until(&raw, deadline_ns, spin_ns);
    // A sleep a signal cut short says nothing of the kernel's lateness.
    if let (Some(late_ns), false) = (late_ns, raw.interrupted.load(Ordering::Relaxed)) {
        let average = OVERSLEEP_NS.load(Ordering::Relaxed);
        OVERSLEEP_NS.store(oversleep_after(average, late_ns), Ordering::Relaxed);
    }
}

/// The real monotonic clock and its timer through raw system calls (not this library's
/// interposed `clock_gettime` and `clock_nanosleep`, not libc's wrappers): async-signal-safe,
/// allocation-free, and reentrant from inside an interposed call. One per wait.
struct RawClock {
    /// The last sleep ended early (EINTR) instead of at its instant.
    interrupted: AtomicBool,
}

impl clock::Clock for RawClock {
    fn now_ns(&self) -> u64 {
        real_ns(libc::CLOCK_MONOTONIC)
    }
}

impl clock::Sleeper for RawClock {
    fn sleep_until(&self, at_ns: u64) {
        let ts = to_ts(at_ns);
        // SAFETY: a valid timespec; an absolute monotonic deadline; EINTR only shortens it.
        let r = unsafe {
            libc::syscall(
                libc::SYS_clock_nanosleep,
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &ts,
                std::ptr::null_mut::<timespec>(),
            )
        };
        self.interrupted.store(r != 0, Ordering::Relaxed);
    }

    fn spin_until(&self, at_ns: u64) {
        while real_ns(libc::CLOCK_MONOTONIC) < at_ns {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_polled_stretch_follows_late_wake_ups_within_its_budget() {
        assert_eq!(spin_ns_for(0), SPIN_NS_MIN);
        assert_eq!(spin_ns_for(300_000), 600_000);
        assert_eq!(spin_ns_for(u64::MAX), SPIN_NS_MAX);
        // Wake-ups 1 ms late, again and again: the average climbs to them (not past), and
        // falls back once they are punctual.
        let mut average = 0;
        for _ in 0..100 {
            average = oversleep_after(average, 1_000_000);
        }
        assert!((900_000..=1_000_000).contains(&average), "{average}");
        for _ in 0..100 {
            average = oversleep_after(average, 0);
        }
        assert!(average < 10_000, "{average}");
    }

    #[test]
    fn a_spin_stops_at_its_budget_and_sleeps_the_rest() {
        assert_eq!(spin_plan(100, 150, 100), (150, false));
        assert_eq!(spin_plan(100, 200, 100), (200, false), "the deadline at the budget's end: all spun");
        assert_eq!(spin_plan(100, 5_000, 100), (200, true));
        assert_eq!(spin_plan(u64::MAX - 1, u64::MAX, 10), (u64::MAX, false));
    }

    #[test]
    fn every_real_time_wait_ends_at_or_after_its_deadline() {
        for wait in [DeviceWait::Block, DeviceWait::Spin { budget_ns: 100_000 }, DeviceWait::Precise] {
            let deadline = real_ns(libc::CLOCK_MONOTONIC) + 300_000;
            real_wait_until(wait, deadline);
            assert!(real_ns(libc::CLOCK_MONOTONIC) >= deadline, "{wait:?}");
        }
    }
}
