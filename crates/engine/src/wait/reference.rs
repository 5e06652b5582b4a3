//! The reference wait: not a strategy a thread is told to use, but the yardstick of the
//! emulator (the real-time replay of crates/emulate, `emulate replay --real-time
//! --strategy block`). One I/O on an emulated target, the thread asleep on a kernel timer
//! until a margin before the model's completion instant, then watching the clock until the
//! instant itself ([`crate::clock::sleep_then_spin_until`]), so the completion is seen within
//! a clock read of the model's instant, which a timer alone cannot do (it wakes 35-70 us
//! late on a loaded VM, more than 2% of a 1.16 ms SD card write).
//!
//! The margin is [`WakeMargin`]: the p99 of this thread's recent wake-up overshoots. A port
//! is asked for this wait with [`crate::target::PortWait::Reference`]; a SmartPort opened
//! with [`crate::smartport::BlockWait::Reference`] asks for it wherever its strategy, fixed
//! or decided, is `block` (the replay does, for `block`, `smart` and `paper`); emulated ports
//! implement it (`EmuTarget::transfer_precise`, in smartcon-emutarget), ports on files and
//! block devices, whose completion instant is the kernel's and not a model's, wait as
//! `block` does.
//!
//! Non-goals: use as a `--strategy` (it spends CPU in every wait to be exact, which is what
//! the strategies are measured against, not one of them).

use crate::clock::{now_ns, sleep_until_ns};

/// The margin a reference waiter's timer is armed early by: the p99 of the wake-up
/// overshoot of this thread's last [`WakeMargin::WINDOW`] sleeps, plus a little slack for
/// the clock reads between the wake-up and the spin, at most [`WakeMargin::MAX_NS`].
#[derive(Debug, Clone)]
pub struct WakeMargin {
    recent_ns: [u64; WakeMargin::WINDOW],
    next: usize,
    filled: usize,
    margin_ns: u64,
    /// The margin never falls below this ([`WakeMargin::set_floor`]; 0 unless set).
    floor_ns: u64,
}

impl WakeMargin {
    pub const WINDOW: usize = 128;
    pub const SLACK_NS: u64 = 2_000;
    const CALIBRATION_SLEEP_NS: u64 = 200_000;
    /// Without SCHED_FIFO on a loaded host the p99 overshoot is milliseconds (the thread
    /// waits for a CPU): spinning that long only gets the spinner preempted in turn (the
    /// scheduler favours sleepers), so past this the margin stops growing.
    pub const MAX_NS: u64 = 200_000;

    /// A margin that has seen no sleep yet (0 ns until [`WakeMargin::record`] fills it).
    pub fn new() -> WakeMargin {
        WakeMargin { recent_ns: [0; Self::WINDOW], next: 0, filled: 0, margin_ns: 0, floor_ns: 0 }
    }

    /// Measures this thread's wake-up overshoot on the host's clock over sleeps like the
    /// ones it will take (under SCHED_FIFO if it runs so): 32 sleeps of 200 us, about 8 ms.
    pub fn calibrate() -> WakeMargin {
        let mut m = WakeMargin::new();
        for _ in 0..32 {
            let at = now_ns() + Self::CALIBRATION_SLEEP_NS;
            sleep_until_ns(at);
            m.record(now_ns().saturating_sub(at));
        }
        m.update();
        m
    }

    /// How early the timer is armed now.
    pub fn margin_ns(&self) -> u64 {
        self.margin_ns
    }

    /// From now on the margin is at least `floor_ns` (at most [`WakeMargin::MAX_NS`]): for a
    /// waiter whose earlier, fixed margin is the fidelity to keep (the FUSE server of
    /// `emulate mount` had 150 us), the measured p99 only ever widens it.
    pub fn set_floor(&mut self, floor_ns: u64) {
        self.floor_ns = floor_ns.min(Self::MAX_NS);
        self.margin_ns = self.margin_ns.max(self.floor_ns);
    }

    /// One more wake-up, `overshoot_ns` after its timer.
    pub fn record(&mut self, overshoot_ns: u64) {
        self.recent_ns[self.next] = overshoot_ns;
        self.next = (self.next + 1) % Self::WINDOW;
        self.filled = (self.filled + 1).min(Self::WINDOW);
        // Re-read the p99 every 16 sleeps: a selection over 128 values, off the waits' paths.
        if self.next.is_multiple_of(16) {
            self.update();
        }
    }

    fn update(&mut self) {
        let mut v = self.recent_ns[..self.filled].to_vec();
        self.margin_ns = (p99(&mut v) + Self::SLACK_NS).min(Self::MAX_NS).max(self.floor_ns);
    }
}

impl Default for WakeMargin {
    fn default() -> Self {
        Self::new()
    }
}

/// The 0.99 quantile of `v` by rank (the value at rank ceil(0.99 n)); 0 for none.
fn p99(v: &mut [u64]) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((0.99 * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    *v.select_nth_unstable(rank).1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wake_margin_is_the_recent_p99_overshoot_capped() {
        let mut m = WakeMargin::new();
        // 127 wake-ups 10 us late and one 90 us late: the p99 of 128 is the 127th value.
        for _ in 0..127 {
            m.record(10_000);
        }
        m.record(90_000);
        assert_eq!(m.margin_ns(), 10_000 + WakeMargin::SLACK_NS);
        // A loaded host: milliseconds late, the margin stops at the cap.
        for _ in 0..WakeMargin::WINDOW {
            m.record(5_000_000);
        }
        assert_eq!(m.margin_ns(), WakeMargin::MAX_NS);
    }

    #[test]
    fn a_floor_only_widens_the_margin() {
        let mut m = WakeMargin::new();
        m.set_floor(150_000);
        assert_eq!(m.margin_ns(), 150_000);
        // Quick wake-ups: the floor holds.
        for _ in 0..WakeMargin::WINDOW {
            m.record(10_000);
        }
        assert_eq!(m.margin_ns(), 150_000);
        // Slower ones than the floor: the p99 (and the cap) as without it.
        for _ in 0..WakeMargin::WINDOW {
            m.record(170_000);
        }
        assert_eq!(m.margin_ns(), 170_000 + WakeMargin::SLACK_NS);
        for _ in 0..WakeMargin::WINDOW {
            m.record(5_000_000);
        }
        assert_eq!(m.margin_ns(), WakeMargin::MAX_NS);
        m.set_floor(u64::MAX);
        assert_eq!(m.margin_ns(), WakeMargin::MAX_NS, "a floor past the cap is the cap");
    }
}
