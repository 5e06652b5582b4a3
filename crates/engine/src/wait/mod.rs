//! Polling waits: how a thread that polls the device decides *when* to look.
//!
//! `block`, `spin` and `sync` (in the ports) either sleep until the completion or look
//! continuously. The strategies here look at chosen instants instead (paper 002, Sec. 3):
//!
//! - [`fixed::FixedInterval`] (`poll`): a status poll every `interval`, the baseline of the
//!   paper's Fig. 1;
//! - [`hybrid::Hybrid`] (`hybrid`): the paper's dynamic interval polling with smartcon's
//!   additions: a sampling phase of fixed-interval polls, then sleep (or wait without
//!   polling) until the predicted completion minus this host's measured wake-up overshoot,
//!   then poll every `alpha`, correcting the prediction both ways ([`predictor`]);
//! - [`dip::Dip`] (`dip`): the paper's own wait: the same sampling and prediction, then a
//!   busy delay on the clock (no sleep, no poll) until the predicted completion, then
//!   polls every `alpha`;
//! - [`halfmean::HalfMean`] (`half-mean`): Linux's removed blk-mq hybrid polling, which
//!   slept half the mean completion time of the request's size bucket, then polled
//!   continuously;
//! - [`iopoll::IopollHybrid`] (`iopoll-hybrid`): Linux 6.13's hybrid IOPOLL, one sleep of
//!   half the ring's minimum completion time, then continuous polls, the minimum updated
//!   after each poll;
//! - [`pas::Pas`] (`pas`): DPAS (FAST '26), a per-class sleep adjusted every I/O from
//!   whether the first poll after waking found the request done, and a per-thread switch
//!   over polling, PAS and interrupts re-evaluated every 100 I/Os.
//!
//! [`reference::WakeMargin`] belongs to none of these: it is the reference wait's margin
//! (the emulator's yardstick, [`reference`]), asked of a port as
//! [`crate::target::PortWait::Reference`].
//!
//! The last two are the published adaptive rules of other systems, in-kernel there; they
//! are here so they run in the same jobs as smartcon's own (peers, not improvements).
//!
//! A policy sees the device only through [`Status`]: a poll, a sleep, a wait without
//! touching the device, a blocking wait for the completion, and the clock. Ports implement
//! it on real time (emulated devices charge each poll to the device's channel; files poll
//! io_uring's completion queue); tests implement it on virtual time, so every policy runs
//! deterministically there.
//!
//! Non-goals: more than one request in flight per thread (the callers are synchronous).

pub mod dip;
pub mod fixed;
pub mod halfmean;
pub mod hybrid;
pub mod iopoll;
pub mod pas;
pub mod predictor;
pub mod reference;

use smartcon_util::units::format_ns;
use smartcon_util::Op;

use crate::decision::{DeviceState, Strategy};
use crate::error::{Error, ErrorKind};

/// What a waiting thread can do about its in-flight request.
pub trait Status {
    /// Now, on the clock the device and the policy share.
    fn now_ns(&self) -> u64;
    /// One status poll of the device: true once the request is complete. On a device
    /// whose status is a register (emulated `poll_cost`), a poll takes the channel for a
    /// while and the thread waits for the read to return.
    fn poll(&mut self) -> Result<bool, Error>;
    /// Sleeps in the kernel until `at_ns`, or until the completion where the device can
    /// wake the thread (io_uring), whichever comes first. Returns when the thread runs
    /// again, which on a real host is later than `at_ns` by the wake-up overshoot.
    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error>;
    /// Busy-waits until `at_ns` without touching the device (reading the clock only).
    fn spin_until(&mut self, at_ns: u64);
    /// Sleeps until the device's completion wakes the thread (an interrupt: `block`'s
    /// wait). Returns once the request is done. A device that cannot wake a thread is
    /// polled back to back instead (the default).
    fn block(&mut self) -> Result<(), Error> {
        while !self.poll()? {
            std::hint::spin_loop();
        }
        Ok(())
    }
    /// The instant the device completes the awaited part, where the device knows it (a
    /// model does; a real device does not: `None`, the default). The reference wait of a
    /// group call watches the clock to it ([`crate::smartport::GroupCall::wait`]).
    fn done_ns(&self) -> Option<u64> {
        None
    }
    /// Whether something besides the awaited part wants the waiting thread now (a server's
    /// next request on its ring): a look, never a wait. A status that has such an event may
    /// return from [`Status::sleep_until`], [`Status::spin_until`] and [`Status::block`]
    /// early when it comes, and a wait that can give way to it
    /// ([`crate::smartport::GroupCall::wait_or_event`]) then ends without the part done.
    /// None by default.
    fn event(&mut self) -> bool {
        false
    }
    /// The waiting thread's CPU time so far, on the clock its CPU is counted on (the
    /// kernel's per-thread clock on the host, the simulated thread's on a virtual one), where
    /// the status can read it: `hybrid` measures what its sleeps cost it. `None` by default.
    fn thread_cpu_ns(&self) -> Option<u64> {
        None
    }
}

/// The request being waited for.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    pub op: Op,
    pub bytes: u64,
    /// What was in flight on the device ahead of it when it was submitted.
    pub ahead: DeviceState,
    pub submit_ns: u64,
}

/// What a polling wait did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Waited {
    pub polls: u32,
    pub sleeps: u32,
    /// The instant the policy predicted for the completion, once it predicts (hybrid after
    /// its sampling phase).
    pub predicted_done_ns: Option<u64>,
    /// The instant the completion was seen.
    pub seen_ns: u64,
}

/// A way of waiting by polling; one instance per I/O thread (it keeps that thread's
/// statistics, so the hot path shares nothing).
pub trait WaitPolicy: Send {
    /// Waits until the request is complete.
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error>;
    /// Tells the policy, before an I/O, whether the CPUs are busy with other work (the
    /// System Monitor above the profile's CPU threshold). Policies that would poll for
    /// long can then give the CPU away instead.
    fn set_cpu_busy(&mut self, _busy: bool) {}
    /// This thread's measured wake-up overshoot, for policies that sleep and measure it.
    fn overshoot_ns(&self) -> Option<u64> {
        None
    }
    /// What this thread's timed sleeps cost it in CPU, for policies that measure it.
    fn sleep_cpu_ns(&self) -> Option<u64> {
        None
    }
}

/// The parameters of the polling strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollParams {
    /// `poll`: time between two polls; `hybrid`: the sampling phase's interval.
    pub interval_ns: u64,
    /// `hybrid`: the short interval of polls after the predicted completion, and the step
    /// by which an early catch shrinks the prediction (paper Sec. 3.2).
    pub alpha_ns: u64,
    /// `hybrid`: how long each thread samples with fixed-interval polls before predicting.
    pub sampling_ns: u64,
}

impl PollParams {
    /// The paper's best fixed interval (Sec. 5: 1 us) and an alpha of "a few dozens of
    /// nanoseconds" rounded up to what a clock read on a VM resolves.
    pub const DEFAULT: PollParams = PollParams { interval_ns: 1_000, alpha_ns: 100, sampling_ns: 20_000_000 };

    pub const INTERVAL_NS_MAX: u64 = 10_000_000;
    pub const ALPHA_NS_MAX: u64 = 100_000;

    /// Checks the parameters against the run they are for.
    pub fn validate(&self, duration_ns: u64) -> Result<(), Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        if self.interval_ns == 0 || self.interval_ns > Self::INTERVAL_NS_MAX {
            return usage(format!(
                "poll interval {} is out of range (more than 0, at most {})",
                format_ns(self.interval_ns as f64),
                format_ns(Self::INTERVAL_NS_MAX as f64)
            ));
        }
        if self.alpha_ns == 0 || self.alpha_ns > Self::ALPHA_NS_MAX {
            return usage(format!(
                "alpha {} is out of range (more than 0, at most {})",
                format_ns(self.alpha_ns as f64),
                format_ns(Self::ALPHA_NS_MAX as f64)
            ));
        }
        if self.sampling_ns >= duration_ns {
            return usage(format!(
                "the sampling phase ({}) is not shorter than the run ({}); shorten --sampling or lengthen --duration",
                format_ns(self.sampling_ns as f64),
                format_ns(duration_ns as f64)
            ));
        }
        Ok(())
    }
}

impl Default for PollParams {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The policy object for a polling strategy; `None` for the others.
pub fn policy_for(strategy: Strategy, params: PollParams, start_ns: u64) -> Option<Box<dyn WaitPolicy>> {
    match strategy {
        Strategy::FixedPoll => Some(Box::new(fixed::FixedInterval::new(params.interval_ns))),
        Strategy::Hybrid => Some(Box::new(hybrid::Hybrid::new(params, start_ns))),
        Strategy::HalfMean => Some(Box::new(halfmean::HalfMean::new(start_ns))),
        Strategy::IopollHybrid => Some(Box::new(iopoll::IopollHybrid::new())),
        Strategy::Pas => Some(Box::new(pas::Pas::new(crate::profile::online_cpus()))),
        Strategy::Dip => Some(Box::new(dip::Dip::new(params, start_ns))),
        Strategy::Block | Strategy::Spin | Strategy::Sync => None,
    }
}

/// Polls every `interval_ns` from `from_ns` until the device says done; the building
/// block of every policy here. Bounded: a request that never completes ends in the
/// caller's error path only if the device errs, as a real driver's would.
pub fn poll_every(status: &mut dyn Status, from_ns: u64, interval_ns: u64, waited: &mut Waited) -> Result<(), Error> {
    let mut next = from_ns;
    loop {
        status.spin_until(next);
        waited.polls += 1;
        if status.poll()? {
            waited.seen_ns = status.now_ns();
            return Ok(());
        }
        next = next.max(status.now_ns()) + interval_ns;
    }
}

/// The shared start of the predicting policies (`hybrid`, `dip`): ends the sampling phase
/// at `sampling_end_ns`, then returns the predicted latency of `req`. While still sampling
/// there is none: the request is waited for by polling every `interval_ns`, its latency
/// is sampled, `waited` holds the wait, and `None` is returned.
pub fn predict_or_sample(
    predictor: &mut predictor::Predictor,
    sampling_end_ns: u64,
    interval_ns: u64,
    req: &Pending,
    status: &mut dyn Status,
    waited: &mut Waited,
) -> Result<Option<u64>, Error> {
    if !predictor.sampling_over() && status.now_ns() >= sampling_end_ns {
        predictor.end_sampling();
    }
    if let Some(latency) = predictor.predict(req.op, req.bytes, req.ahead.inflight_bytes) {
        return Ok(Some(latency));
    }
    poll_every(status, req.submit_ns + interval_ns, interval_ns, waited)?;
    predictor.sample(req.op, req.bytes, waited.seen_ns - req.submit_ns);
    Ok(None)
}

#[cfg(test)]
pub(crate) mod virt {
    //! A device on virtual time for the policies' tests.

    use super::Status;
    use crate::error::Error;

    /// Completes at `done_ns`; a sleep (or a block) wakes `overshoot_ns` late; a poll costs
    /// `poll_ns` of the thread's time and, while the request is in service, delays it by
    /// `poll_cost_ns` (the channel is the paper's PCIe link), at most half the time since
    /// the last poll (the channel's arbiter, as on emulated devices).
    pub struct VirtualDevice {
        pub now_ns: u64,
        pub done_ns: u64,
        pub overshoot_ns: u64,
        pub poll_ns: u64,
        pub poll_cost_ns: u64,
        pub polls: u32,
        /// The instant of every poll.
        pub poll_at_ns: Vec<u64>,
        pub slept_ns: u64,
        pub blocks: u32,
        /// What a sleep costs the thread in CPU, where the test gives the thread a CPU clock
        /// (`None`: it has none, [`Status::thread_cpu_ns`]'s default).
        pub sleep_cpu_ns: Option<u64>,
        /// The thread's CPU so far: its spins, polls and sleeps' cost.
        pub cpu_ns: u64,
        last_poll_ns: u64,
    }

    impl VirtualDevice {
        pub fn new(now_ns: u64, done_ns: u64, overshoot_ns: u64) -> Self {
            VirtualDevice {
                now_ns,
                done_ns,
                overshoot_ns,
                poll_ns: 20,
                poll_cost_ns: 0,
                polls: 0,
                poll_at_ns: Vec::new(),
                slept_ns: 0,
                blocks: 0,
                sleep_cpu_ns: None,
                cpu_ns: 0,
                last_poll_ns: now_ns,
            }
        }
    }

    impl Status for VirtualDevice {
        fn now_ns(&self) -> u64 {
            self.now_ns
        }
        fn poll(&mut self) -> Result<bool, Error> {
            self.polls += 1;
            self.poll_at_ns.push(self.now_ns);
            let done = self.now_ns >= self.done_ns;
            if !done {
                self.done_ns += self.poll_cost_ns.min((self.now_ns - self.last_poll_ns) / 2);
            }
            self.last_poll_ns = self.now_ns;
            self.now_ns += self.poll_ns;
            self.cpu_ns += self.poll_ns;
            Ok(done)
        }
        fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
            let wake = at_ns.max(self.now_ns) + self.overshoot_ns;
            self.slept_ns += wake - self.now_ns;
            self.now_ns = wake;
            self.cpu_ns += self.sleep_cpu_ns.unwrap_or(0);
            Ok(())
        }
        fn spin_until(&mut self, at_ns: u64) {
            self.cpu_ns += at_ns.saturating_sub(self.now_ns);
            self.now_ns = self.now_ns.max(at_ns);
        }
        fn thread_cpu_ns(&self) -> Option<u64> {
            self.sleep_cpu_ns.map(|_| self.cpu_ns)
        }
        fn block(&mut self) -> Result<(), Error> {
            self.blocks += 1;
            let wake = self.now_ns.max(self.done_ns) + self.overshoot_ns;
            self.slept_ns += wake - self.now_ns;
            self.now_ns = wake;
            Ok(())
        }
    }
}
