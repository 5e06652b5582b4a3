//! `iopoll-hybrid`: Linux 6.13's hybrid IOPOLL (`IORING_SETUP_HYBRID_IOPOLL`; in the
//! kernel `io_hybrid_iopoll_delay` and `io_uring_hybrid_poll` in io_uring/rw.c) as an
//! engine wait, so it runs beside `hybrid` and `half-mean` in the same job.
//!
//! The kernel keeps one number per ring, `hybrid_poll_time`, which starts out unknown
//! (`LLONG_MAX`). A request's first poll call sleeps once, on a relative timer, for half of
//! that number (not at all while it is unknown), then polls the device once; later calls
//! for the same request poll without sleeping. After *every* poll call, done or not, the
//! ring's number becomes `min(itself, now - request start - sleep asked)`. This file does
//! the same: one sleep of half the minimum, then continuous polls (the kernel's
//! `io_do_iopoll` loop calls the poll again as soon as the last returns), with the minimum
//! updated after each one.
//!
//! Ring-wide: smartcon gives every I/O thread its own io_uring and its own policy
//! instance, so the policy's minimum is its ring's, as in the kernel (a program with one
//! ring per thread has one minimum per thread too). It is not shared across threads.
//!
//! What follows from the kernel's rule, kept on purpose (this is a peer to measure, not one
//! to improve):
//! - the first poll of the very first request happens right after submission (io_uring
//!   polls in the same `io_uring_enter` that submits), and it counts: the minimum starts at
//!   the submission-to-first-poll time, a microsecond or less, and can only go down, so
//!   every later request sleeps about half of that;
//! - after a sleep, `now - start - sleep` is the wake-up's overshoot plus the polls, so a
//!   host whose timer wakes late never raises the minimum again; nothing moves it up when
//!   the device slows down.
//!
//! On a host where a short timer sleep costs a 15 us wake-up (the development VMs), the
//! result is a sleep of a few hundred ns that costs the full wake-up, every I/O.
//!
//! Non-goals: the kernel's `REQ_F_IOPOLL_STATE` across requests in flight together (one
//! request per thread here).

use super::{Pending, Status, WaitPolicy, Waited};
use crate::error::Error;

#[derive(Debug, Clone, Default)]
pub struct IopollHybrid {
    /// The ring's minimum of (poll instant - start - sleep asked); `None` = `LLONG_MAX`.
    min_ns: Option<u64>,
}

impl IopollHybrid {
    pub fn new() -> IopollHybrid {
        IopollHybrid::default()
    }

    /// The ring's current minimum completion time, once a poll has set it.
    pub fn min_ns(&self) -> Option<u64> {
        self.min_ns
    }

    /// The sleep the next request takes before its first poll: half the minimum.
    pub fn sleep_ns(&self) -> u64 {
        self.min_ns.map_or(0, |m| m / 2)
    }

    fn update(&mut self, runtime_ns: u64) {
        self.min_ns = Some(self.min_ns.map_or(runtime_ns, |m| m.min(runtime_ns)));
    }
}

impl WaitPolicy for IopollHybrid {
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error> {
        let mut waited = Waited::default();
        // io_hybrid_iopoll_delay: one relative sleep of half the minimum, if there is one
        // (a zero sleep is no sleep: the timer would expire at once).
        let mut slept_ns = self.sleep_ns();
        if slept_ns > 0 {
            let at = status.now_ns() + slept_ns;
            status.sleep_until(at)?;
            waited.sleeps += 1;
        }
        loop {
            waited.polls += 1;
            let done = status.poll()?;
            let now = status.now_ns();
            // io_uring_hybrid_poll: runtime = now - iopoll_start - sleep_time, after every
            // poll; only the request's first call slept.
            self.update(now.saturating_sub(req.submit_ns).saturating_sub(slept_ns));
            slept_ns = 0;
            if done {
                waited.seen_ns = now;
                return Ok(waited);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::virt::VirtualDevice;
    use smartcon_util::Op;

    fn pending(at: u64) -> Pending {
        Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: at }
    }

    #[test]
    fn the_first_request_polls_at_once_and_its_first_poll_sets_the_minimum() {
        let mut p = IopollHybrid::new();
        assert_eq!(p.min_ns(), None);
        assert_eq!(p.sleep_ns(), 0);
        // Submitted at 1_000, the first poll 300 ns later; 10 us of service, polls of 20 ns.
        let mut dev = VirtualDevice::new(1_300, 11_000, 0);
        let w = p.wait(&pending(1_000), &mut dev).unwrap();
        assert_eq!(w.sleeps, 0);
        assert_eq!(dev.poll_at_ns[0], 1_300);
        // Every poll updated it; the first (300 ns after the start, plus its own 20 ns) is the least.
        assert_eq!(p.min_ns(), Some(320));
        assert!(w.seen_ns >= 11_000);
    }

    #[test]
    fn a_request_sleeps_half_the_minimum_and_later_polls_do_not_raise_it() {
        let mut p = IopollHybrid { min_ns: Some(40_000) };
        assert_eq!(p.sleep_ns(), 20_000);
        // 10 us of service, no overshoot: the sleep (20 us) ends after the completion, the
        // first poll sees it, and runtime = 20_020 - 20_000 = 20 ns becomes the minimum.
        let mut dev = VirtualDevice::new(0, 10_000, 0);
        let w = p.wait(&pending(0), &mut dev).unwrap();
        assert_eq!((w.sleeps, w.polls), (1, 1));
        assert_eq!(dev.slept_ns, 20_000);
        assert_eq!(p.min_ns(), Some(20));
        // With a wake-up overshoot of 15 us the next one sleeps 10 ns, wakes 15 us late,
        // and the minimum stays: runtime after a sleep includes the overshoot.
        let mut dev = VirtualDevice::new(100_000, 150_000, 15_000);
        let w = p.wait(&pending(100_000), &mut dev).unwrap();
        assert_eq!(w.sleeps, 1);
        assert_eq!(dev.slept_ns, 10 + 15_000);
        assert_eq!(p.min_ns(), Some(20));
        assert!(w.seen_ns >= 150_000 && w.polls > 1);
    }

    #[test]
    fn the_minimum_only_goes_down_when_the_device_slows() {
        let mut p = IopollHybrid { min_ns: Some(8_000) };
        let mut t = 0;
        for service in [10_000, 80_000, 200_000] {
            let mut dev = VirtualDevice::new(t, t + service, 0);
            let w = p.wait(&pending(t), &mut dev).unwrap();
            assert!(p.min_ns().unwrap() <= 8_000);
            t = w.seen_ns;
        }
        // The first poll after the 4 us sleep came 4 us + 20 ns after it: runtime 20 ns.
        assert_eq!(p.min_ns(), Some(20));
    }
}
