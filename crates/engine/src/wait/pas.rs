//! `pas`: DPAS (FAST '26), per-I/O adaptive sleep with a mode switch over polling, PAS
//! and interrupts, written from the artifact's kernel patch (github
//! DongDongJu/DPAS_FAST26, `kernel/block/blk-mq.c`: `blk_mq_poll_pas_nsecs`,
//! `blk_mq_poll_classic`, and the mode counting in `kernel/block/fops.c`), with its
//! default parameters. DPAS as the artifact runs it: `pas_enabled`,
//! `pas_adaptive_enabled = 1` and `switch_enabled`.
//!
//! ## The sleep (PAS), per request class (op x log2 size)
//!
//! Each class keeps a sleep `dur` (starting at 100 ns), a multiplier `adj`, steps `up` and
//! `dn`, and the outcomes of its last two sleeps. A request sleeps `dur` on a relative
//! timer, then polls. It wakes at `dur` plus the switch cost (the timer's overshoot and the
//! switch back), and its first poll tells which side of the completion that was:
//! *overslept* (done at the first poll: the sleep, switch included, was too long) or
//! *underslept* (more polls were needed: woke too early). Before the next sleep of the
//! class, `adj` is set from the two last outcomes:
//!
//! | before last, last | adj |
//! |---|---|
//! | overslept, overslept | adj - dn (shrinks faster each time) |
//! | overslept, underslept | 1 + up |
//! | underslept, overslept | 1 - dn |
//! | underslept, underslept | adj + up (grows faster each time) |
//!
//! (adj <= 0 resets to 1), then `dur *= adj`, at least 100 ns; hitting that floor counts
//! a *timer failure* (`tf`: even the shortest sleep oversleeps). DPAS1 adapts the steps:
//! two equal outcomes in a row heat `dn` up by 5% (at most 0.1) with `up = dn / 10`; two
//! different ones cool `up` down by 10% (at least 0.001) with `dn = 10 up`.
//!
//! ## The mode switch, per thread
//!
//! Modes CP (classic polling: no sleep), PAS, OL (overloaded: PAS, watching the queue
//! depth) and INT (interrupts: `block`), starting in PAS. Each mode counts its I/Os; when
//! a mode has run its count it is re-evaluated on the next polled I/O:
//! - PAS after 100 I/Os: a timer failure among them -> OL; else an average queue depth of
//!   exactly 1 (one request at a time: polling costs no one) -> CP; else stay;
//! - OL after 100: average depth <= 1 -> PAS; above -> INT;
//! - CP after 1,000 -> PAS (the sleep is re-learned from the class's last state);
//! - INT after 10,000 -> OL (counted at submission, as the patch does).
//!
//! The patch's queue depth is per CPU: the number of this CPU's requests between their
//! PAS decision and the end of their sleep. A user-space thread cannot see that; here it
//! is the requests in flight on the device (this one included) per online CPU, rounded
//! up, which is the same number when the threads are spread evenly over the CPUs (one
//! thread: 1).
//!
//! Per thread, not per CPU: the patch keeps its state per CPU because the submitting
//! thread runs there; smartcon's I/O thread is that context. Non-goals: the patch's EHP
//! and LHP modes and its logging; more than one request in flight per thread (so every
//! completion is the class's feedback, which in the patch only the first completion per
//! `dur` is).

use super::{Pending, Status, WaitPolicy, Waited};
use crate::error::Error;
use smartcon_util::Op;

/// `adj`, `up` and `dn` are fractions in millionths (the patch's `div`).
pub const DIV: i64 = 1_000_000;
/// The shortest sleep and the first one (`d_init`).
pub const DUR_NS_MIN: u64 = 100;
const UP_INIT: i64 = 10_000;
const DN_INIT: i64 = 100_000;
const HEAT_UP: i64 = 50_000;
const COOL_DN: i64 = 100_000;
const MIN_DN: i64 = 10_000;
const MAX_DN: i64 = 100_000;
const UPDN_RATIO: i64 = 10;
/// I/Os per evaluation of PAS and OL (`switch_param5`), of CP (`param6`), of INT (`param7`).
pub const PAS_IOS: u32 = 100;
pub const CP_IOS: u32 = 1_000;
pub const INT_IOS: u32 = 10_000;
/// Queue depth x 10 at or below which OL returns to PAS, above which it goes to INT.
const QD_X10_OL: u64 = 10;
const BUCKETS_PER_OP: usize = 16;

/// Which side of the completion the first poll after a sleep was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done at the first poll: the sleep (switch included) ran past the completion.
    Overslept,
    /// Not done at the first poll: woke too early.
    Underslept,
}

/// The adaptive sleep of one request class.
#[derive(Debug, Clone, Copy)]
pub struct SleepState {
    dur_ns: u64,
    adj: i64,
    up: i64,
    dn: i64,
    before_last: Outcome,
    last: Outcome,
    /// A feedback arrived since the last update.
    update_req: bool,
}

impl Default for SleepState {
    fn default() -> Self {
        SleepState {
            dur_ns: DUR_NS_MIN,
            adj: DIV,
            up: UP_INIT,
            dn: DN_INIT,
            before_last: Outcome::Overslept,
            last: Outcome::Underslept,
            update_req: false,
        }
    }
}

impl SleepState {
    pub fn dur_ns(&self) -> u64 {
        self.dur_ns
    }

    /// Records the outcome of a sleep of this class.
    pub fn record(&mut self, outcome: Outcome) {
        self.before_last = self.last;
        self.last = outcome;
        self.update_req = true;
    }

    /// The sleep for the next request, updated from the feedback since the last one.
    /// Returns it and whether the update hit the floor (a timer failure).
    pub fn next_sleep(&mut self) -> (u64, bool) {
        if !std::mem::take(&mut self.update_req) {
            return (self.dur_ns, false);
        }
        use Outcome::*;
        let same = self.before_last == self.last;
        self.adj = match (self.before_last, self.last) {
            (Overslept, Overslept) => self.adj - self.dn,
            (Overslept, Underslept) => DIV + self.up,
            (Underslept, Overslept) => DIV - self.dn,
            (Underslept, Underslept) => self.adj + self.up,
        };
        if self.adj <= 0 {
            self.adj = DIV;
        }
        let dur = (self.dur_ns as i128 * self.adj as i128 / DIV as i128) as u64;
        let floored = dur < DUR_NS_MIN;
        self.dur_ns = dur.max(DUR_NS_MIN);
        // DPAS1: heat the steps up on two equal outcomes, cool them down otherwise.
        if same {
            self.dn = (self.dn * (DIV + HEAT_UP) / DIV).min(MAX_DN);
            self.up = self.dn / UPDN_RATIO;
        } else {
            self.up = (self.up * (DIV - COOL_DN) / DIV).max(MIN_DN / UPDN_RATIO);
            self.dn = self.up * UPDN_RATIO;
        }
        (self.dur_ns, floored)
    }
}

/// How DPAS waits for the I/Os of a mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Classic polling: no sleep.
    Cp,
    /// Adaptive sleep, then poll.
    Pas,
    /// Overloaded: PAS while the queue depth is watched.
    Ol,
    /// Interrupts: the thread blocks until the completion wakes it.
    Int,
}

/// The mode switch of one thread (the patch's per-CPU `blk_switch`).
#[derive(Debug, Clone)]
pub struct Switch {
    mode: Mode,
    /// I/Os in the current mode since it was entered or last re-evaluated.
    count: u32,
    /// Sum of the queue depths seen by PAS and OL I/Os since then.
    qd_sum: u64,
    /// Timer failures since then.
    tf: u32,
}

impl Default for Switch {
    fn default() -> Self {
        Switch { mode: Mode::Pas, count: 0, qd_sum: 0, tf: 0 }
    }
}

impl Switch {
    pub fn mode(&self) -> Mode {
        self.mode
    }

    fn enter(&mut self, mode: Mode) {
        *self = Switch { mode, ..Switch::default() };
    }

    /// Submission (fops.c): counts the I/O in its mode and returns how it is waited for.
    /// INT goes to OL once it has run its count; that I/O still blocks.
    pub fn on_submit(&mut self) -> Mode {
        let mode = self.mode;
        self.count += 1;
        if mode == Mode::Int && self.count >= INT_IOS {
            self.enter(Mode::Ol);
        }
        mode
    }

    /// A polled I/O's decision (blk_mq_poll_pas_nsecs): adds its queue depth, then
    /// re-evaluates a mode that has run its count. Returns the mode the I/O waits in and
    /// whether the class's sleep must be re-learned (CP -> PAS).
    pub fn on_poll(&mut self, qd: u64) -> (Mode, bool) {
        if self.mode != Mode::Cp {
            self.qd_sum += qd;
        }
        let qd_x10 = |s: &Switch| s.qd_sum * 10 / u64::from(s.count.max(1));
        match self.mode {
            Mode::Cp if self.count >= CP_IOS => {
                self.enter(Mode::Pas);
                return (Mode::Pas, true);
            }
            Mode::Pas if self.count >= PAS_IOS => {
                let avg = qd_x10(self);
                if self.tf > 0 {
                    self.enter(Mode::Ol);
                } else if avg == 10 {
                    self.enter(Mode::Cp);
                    return (Mode::Cp, false);
                } else {
                    self.enter(Mode::Pas);
                }
            }
            Mode::Ol if self.count >= PAS_IOS => {
                let avg = qd_x10(self);
                self.enter(if avg <= QD_X10_OL { Mode::Pas } else { Mode::Int });
            }
            _ => {}
        }
        (self.mode, false)
    }

    /// A sleep update hit the floor.
    pub fn timer_failure(&mut self) {
        self.tf += 1;
    }
}

fn bucket_of(op: Op, bytes: u64) -> usize {
    let sectors = (bytes / 512).max(1);
    let b = (63 - sectors.leading_zeros() as usize).min(BUCKETS_PER_OP - 1);
    match op {
        Op::Read => b,
        Op::Write => BUCKETS_PER_OP + b,
    }
}

pub struct Pas {
    cpus: u64,
    switch: Switch,
    classes: [SleepState; 2 * BUCKETS_PER_OP],
}

impl Pas {
    /// A policy for a machine with `cpus` online CPUs (the queue depth's divisor).
    pub fn new(cpus: u32) -> Pas {
        Pas { cpus: u64::from(cpus.max(1)), switch: Switch::default(), classes: [SleepState::default(); 32] }
    }

    pub fn mode(&self) -> Mode {
        self.switch.mode()
    }

    /// The sleep the next request of this class would start from.
    pub fn dur_ns(&self, op: Op, bytes: u64) -> u64 {
        self.classes[bucket_of(op, bytes)].dur_ns
    }
}

impl WaitPolicy for Pas {
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error> {
        let mut waited = Waited::default();
        if self.switch.on_submit() == Mode::Int {
            status.block()?;
            waited.seen_ns = status.now_ns();
            return Ok(waited);
        }
        let qd = (u64::from(req.ahead.inflight_count) + 1).div_ceil(self.cpus);
        let class = &mut self.classes[bucket_of(req.op, req.bytes)];
        let (mode, relearn) = self.switch.on_poll(qd);
        if relearn {
            // restart_pas_stat's effect: the next sleep is an update (from the class's last
            // two outcomes), as in the patch's CP -> PAS.
            class.update_req = true;
        }
        let sleep = if mode == Mode::Cp {
            None
        } else {
            let (dur, floored) = class.next_sleep();
            if floored {
                self.switch.timer_failure();
            }
            Some(dur)
        };
        if let Some(dur) = sleep {
            let at = status.now_ns() + dur;
            status.sleep_until(at)?;
            waited.sleeps += 1;
        }
        // blk_mq_poll_classic: poll back to back; after a sleep the first poll's result is
        // the class's feedback.
        let mut first = true;
        loop {
            waited.polls += 1;
            if status.poll()? {
                waited.seen_ns = status.now_ns();
                if sleep.is_some() {
                    class.record(if first { Outcome::Overslept } else { Outcome::Underslept });
                }
                return Ok(waited);
            }
            first = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::virt::VirtualDevice;

    #[test]
    fn an_early_wake_lengthens_the_sleep_and_an_overslept_one_shortens_it() {
        let mut s = SleepState::default();
        assert_eq!(s.next_sleep(), (DUR_NS_MIN, false), "no feedback yet: the first sleep");
        // Woke too early twice: the sleep grows, faster the second time.
        s.dur_ns = 10_000;
        s.record(Outcome::Underslept);
        let (a, _) = s.next_sleep();
        s.record(Outcome::Underslept);
        let (b, _) = s.next_sleep();
        assert!(a > 10_000 && b > a, "{a} {b}");
        assert!(b - a > a - 10_000, "grows faster: {a} {b}");
        // Then overslept: shortened (1 - dn), and further on a second overslept sleep.
        s.record(Outcome::Overslept);
        let (c, _) = s.next_sleep();
        assert!(c < b, "{b} -> {c}");
        s.record(Outcome::Overslept);
        let (d, _) = s.next_sleep();
        assert!(d < c && c - d > b - c, "shrinks faster: {b} {c} {d}");
        // Without a new feedback the sleep holds.
        assert_eq!(s.next_sleep(), (d, false));
    }

    #[test]
    fn oversleeping_down_to_the_floor_is_a_timer_failure() {
        let mut s = SleepState { dur_ns: 1_000, ..SleepState::default() };
        let mut floored = false;
        for _ in 0..100 {
            s.record(Outcome::Overslept);
            let (d, f) = s.next_sleep();
            assert!(d >= DUR_NS_MIN);
            floored |= f;
        }
        assert!(floored);
        assert_eq!(s.dur_ns(), DUR_NS_MIN);
    }

    #[test]
    fn the_sleep_settles_around_the_device_time_less_the_switch() {
        // 50 us of service, a wake-up 5 us late: PAS learns to sleep about 45 us.
        let mut p = Pas::new(2);
        let mut t = 0;
        let mut slept = Vec::new();
        for _ in 0..90 {
            let req = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: t };
            let mut dev = VirtualDevice::new(t, t + 50_000, 5_000);
            let w = p.wait(&req, &mut dev).unwrap();
            assert_eq!(w.sleeps, 1);
            slept.push(dev.slept_ns);
            t = w.seen_ns;
        }
        assert_eq!(p.mode(), Mode::Pas);
        let tail = &slept[60..];
        assert!(tail.iter().all(|&s| (30_000..=60_000).contains(&s)), "{tail:?}");
    }

    fn feed(sw: &mut Switch, n: u32, qd: u64, failures: bool) -> Vec<Mode> {
        (0..n)
            .map(|_| {
                if sw.on_submit() == Mode::Int {
                    return Mode::Int;
                }
                let (m, _) = sw.on_poll(qd);
                if failures && m != Mode::Cp {
                    sw.timer_failure();
                }
                m
            })
            .collect()
    }

    #[test]
    fn the_switch_goes_to_polling_after_100_lone_ios_and_back_after_1000() {
        let mut sw = Switch::default();
        assert_eq!(sw.mode(), Mode::Pas);
        let modes = feed(&mut sw, PAS_IOS - 1, 1, false);
        assert!(modes.iter().all(|&m| m == Mode::Pas));
        // The 100th I/O re-evaluates: depth 1 on average, no timer failure -> CP.
        assert_eq!(feed(&mut sw, 1, 1, false), [Mode::Cp]);
        let modes = feed(&mut sw, CP_IOS - 1, 1, false);
        assert!(modes.iter().all(|&m| m == Mode::Cp));
        assert_eq!(feed(&mut sw, 1, 1, false), [Mode::Pas], "CP re-evaluates after 1000");
    }

    #[test]
    fn timer_failures_go_overloaded_and_a_deep_queue_goes_to_interrupts() {
        let mut sw = Switch::default();
        // 100 PAS I/Os whose sleeps hit the floor -> OL.
        feed(&mut sw, PAS_IOS - 1, 1, true);
        assert_eq!(feed(&mut sw, 1, 1, false), [Mode::Ol]);
        // OL with one request at a time -> back to PAS.
        feed(&mut sw, PAS_IOS - 1, 1, false);
        assert_eq!(feed(&mut sw, 1, 1, false), [Mode::Pas]);
        // A queue of 2 per CPU in PAS: neither CP nor OL, it stays PAS.
        feed(&mut sw, PAS_IOS - 1, 2, false);
        assert_eq!(feed(&mut sw, 1, 2, false), [Mode::Pas]);
        assert_eq!(sw.mode(), Mode::Pas);
        // Timer failures again -> OL; then OL at depth 2 -> INT, which blocks for 10,000 I/Os.
        feed(&mut sw, PAS_IOS - 1, 2, true);
        assert_eq!(feed(&mut sw, 1, 2, false), [Mode::Ol]);
        feed(&mut sw, PAS_IOS - 1, 2, false);
        assert_eq!(feed(&mut sw, 1, 2, false), [Mode::Int]);
        let ints = feed(&mut sw, INT_IOS - 1, 2, false);
        assert!(ints.iter().all(|&m| m == Mode::Int));
        assert_eq!(sw.mode(), Mode::Int);
        assert_eq!(feed(&mut sw, 1, 2, false), [Mode::Int]);
        assert_eq!(sw.mode(), Mode::Ol, "the 10,000th interrupt I/O switches to OL");
    }

    #[test]
    fn interrupt_mode_blocks_and_polling_mode_does_not_sleep() {
        let mut p = Pas::new(1);
        p.switch.enter(Mode::Int);
        let req = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: 0 };
        let mut dev = VirtualDevice::new(0, 10_000, 3_000);
        let w = p.wait(&req, &mut dev).unwrap();
        assert_eq!((w.polls, dev.blocks, w.seen_ns), (0, 1, 13_000));
        p.switch.enter(Mode::Cp);
        let mut dev = VirtualDevice::new(0, 10_000, 3_000);
        let w = p.wait(&req, &mut dev).unwrap();
        assert_eq!((w.sleeps, dev.slept_ns), (0, 0));
        assert!(w.seen_ns >= 10_000 && w.seen_ns <= 10_040);
    }
}
