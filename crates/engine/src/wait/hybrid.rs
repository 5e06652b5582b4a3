//! `hybrid`: dynamic interval polling (paper 002, Sec. 3.2) with sleeping.
//!
//! 1. Sampling phase (the first `sampling` of each thread's run, and for any request class
//!    seen too rarely so far): fixed-interval polls every `interval`, response times
//!    recorded per op and size class ([`Predictor`]).
//! 2. Dynamic phase: predict the completion P = submission + estimate + backlog ahead.
//!    Sleep in the kernel until P minus this thread's measured wake-up overshoot (so it runs
//!    again on time), but only when that sleep is longer than half the overshoot estimate (a
//!    shorter one costs more than it saves); then wait without polling until P; poll; if
//!    not done, poll every `alpha` until done. The first poll's outcome corrects the
//!    prediction (caught at once: shrink; late: grow by the error).
//!
//! The overshoot is a running estimate of the 90th percentile of (woke - asked), tracked by
//! stochastic approximation (up by 9 steps when a sleep overshot the estimate, down by one
//! otherwise; a step is 1/64 of the estimate): it wakes the thread early for nine I/Os in
//! ten, so the completion is rarely missed, and a preemption's 4 ms moves it by one step
//! rather than poisoning a mean; a sleep far below the estimate closes an eighth of the
//! gap. Its first value is the first measured sleep. An estimate too high would stop the
//! thread from sleeping and so from measuring again: after [`EXPLORE_ON_TIME_AFTER`]
//! predicted I/Os without a sleep, it sleeps once to the usual target if that still lies
//! ahead (on time, so free), and after [`EXPLORE_AFTER`] until just before the prediction
//! (on a device faster than the wake-up that costs one late completion in that many); each
//! such re-measure that finds sleeping still does not pay doubles the wait for the next, up
//! to [`EXPLORE_AFTER_MAX`]. (On the
//! development VMs the overshoot grows with the sleep: 15 us for short sleeps, 25 us at
//! 50 us, with a long tail.)
//!
//! When the CPUs are busy with other work (the System Monitor above the profile's CPU
//! threshold, as SmartCon's Decision Module reads it), polling time is taken from the other
//! processes, and a poller that burned its share is preempted for milliseconds. Then
//! hybrid sleeps until the predicted completion itself (not before it) and polls once
//! awake: like `block`, it pays the wake-up instead of taking CPU.
//!
//! On a host where a kernel sleep costs more than the device takes (the 2-core KVM VMs
//! smartcon is developed on: about 16 us per timer sleep, measured by `smartcon bench
//! --hybrid`), hybrid never sleeps on a 10 us device and is fixed-alpha polling after a
//! predicted wait: spin's latency, and no CPU saved, because none can be.

use super::predictor::{Feedback, Predictor};
use super::{poll_every, predict_or_sample, Pending, PollParams, Status, WaitPolicy, Waited};
use crate::error::Error;

/// The overshoot quantile tracker: a step is this fraction of the estimate (at least
/// 100 ns); an overshoot above the estimate moves it up by `UP_STEPS` steps, one below it
/// down by one, which settles where 1 sleep in `UP_STEPS + 1` overshoots it.
const OVERSHOOT_STEP_FRACTION: u64 = 64;
const OVERSHOOT_UP_STEPS: u64 = 9;
/// Predicted I/Os without a sleep after which one sleep re-measures the overshoot, waking
/// just before the prediction (late by the overshoot if the estimate was right).
pub const EXPLORE_AFTER: u32 = 128;
/// The same where a sleep to the usual target still wakes in time: it costs no latency, so
/// it is taken more often.
pub const EXPLORE_ON_TIME_AFTER: u32 = 16;
/// Each re-measuring sleep that finds sleeping still does not pay doubles the wait for the
/// next, up to this: on a device faster than the wake-up (a 10 us one on a VM whose sleeps
/// wake 30 us late, with a millisecond tail) a re-measure every 128 I/Os cost 2-10% of
/// spin's IOPS in the simulation of issue 27's hosts; one every 4096 costs a tenth of that.
pub const EXPLORE_AFTER_MAX: u32 = 4096;

pub struct Hybrid {
    params: PollParams,
    sampling_end_ns: u64,
    predictor: Predictor,
    overshoot_ns: Option<u64>,
    since_sleep: u32,
    /// The current wait between re-measuring sleeps: [`EXPLORE_AFTER`], doubled by each one
    /// that finds sleeping still does not pay, back to the start when a sleep pays.
    explore_after: u32,
    cpu_busy: bool,
}

impl Hybrid {
    pub fn new(params: PollParams, start_ns: u64) -> Hybrid {
        Hybrid {
            params,
            sampling_end_ns: start_ns + params.sampling_ns,
            predictor: Predictor::new(params.alpha_ns, params.interval_ns),
            overshoot_ns: None,
            since_sleep: 0,
            explore_after: EXPLORE_AFTER,
            cpu_busy: false,
        }
    }

    pub fn predictor(&self) -> &Predictor {
        &self.predictor
    }

    fn record_overshoot(&mut self, asked_ns: u64, woke_ns: u64) {
        if woke_ns < asked_ns {
            return; // woken by the completion, not by the timer
        }
        let seen = woke_ns - asked_ns;
        self.overshoot_ns = Some(match self.overshoot_ns {
            None => seen,
            Some(est) => {
                let step = (est / OVERSHOOT_STEP_FRACTION).max(100);
                if seen > est {
                    est + OVERSHOOT_UP_STEPS * step
                } else {
                    // Far below: close an eighth of the gap, so an estimate pushed up by a
                    // burst of preemptions comes back within a few sleeps.
                    est.saturating_sub(step.max((est - seen) / 8))
                }
            }
        });
    }
}

impl WaitPolicy for Hybrid {
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error> {
        let mut waited = Waited::default();
        let sampled = predict_or_sample(
            &mut self.predictor,
            self.sampling_end_ns,
            self.params.interval_ns,
            req,
            status,
            &mut waited,
        )?;
        // Sampling phase: the request was waited for by fixed-interval polling.
        let Some(latency) = sampled else { return Ok(waited) };
        let ahead_bytes = req.ahead.inflight_bytes;
        let predicted = req.submit_ns + latency;
        waited.predicted_done_ns = Some(predicted);
        let alpha = self.params.alpha_ns;
        let overshoot = self.overshoot_ns.unwrap_or(0);
        let now = status.now_ns();
        let mut wake_at = predicted.saturating_sub(overshoot + alpha);
        // Sleep only if the sleep is long enough to pay for itself: its CPU cost is about the
        // median overshoot, which is below the 90th percentile tracked; half of that is the
        // bar (unknown yet: try once).
        let mut sleep = wake_at > now + overshoot / 2;
        if sleep {
            self.explore_after = EXPLORE_AFTER;
        }
        let mut exploring = false;
        self.since_sleep += 1;
        if self.cpu_busy {
            // Give the CPU away until the completion is due; the overshoot is paid.
            wake_at = predicted;
            sleep = wake_at > now;
        } else if !sleep && wake_at > now && self.since_sleep >= EXPLORE_ON_TIME_AFTER {
            // A sleep that still wakes in time, though it may not pay: it re-measures for free.
            sleep = true;
        } else if !sleep && self.since_sleep >= self.explore_after && predicted > now + 2 * alpha {
            wake_at = predicted - alpha;
            sleep = true;
            exploring = true;
        }
        if sleep {
            self.since_sleep = 0;
            status.sleep_until(wake_at)?;
            waited.sleeps += 1;
            let woke = status.now_ns();
            if !self.cpu_busy {
                // Under contention the wake-up waits for a CPU: not this host's overshoot.
                self.record_overshoot(wake_at, woke);
            }
            if exploring {
                // Would the usual sleep pay now, with the overshoot just measured? If not,
                // wait twice as long before the next re-measure.
                let o = self.overshoot_ns.unwrap_or(0);
                let pays = predicted.saturating_sub(o + alpha) > now + o / 2;
                if !pays {
                    self.explore_after = self.explore_after.saturating_mul(2).min(EXPLORE_AFTER_MAX);
                }
            }
            if woke < wake_at {
                // The device woke us (io_uring): it is done, or nearly.
                waited.polls += 1;
                if status.poll()? {
                    waited.seen_ns = status.now_ns();
                    self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::CaughtAtOnce);
                    return Ok(waited);
                }
            }
        }
        status.spin_until(predicted);
        waited.polls += 1;
        if status.poll()? {
            waited.seen_ns = status.now_ns();
            // Woken past the prediction (on purpose when the CPUs are busy, by the overshoot's
            // tail otherwise), "done at the first poll" says nothing about the estimate:
            // shrinking on it walked the estimate down by as many steps as sleeps overshot,
            // so a run with more preemptions predicted earlier and spun longer (its CPU with
            // the machine's load of the moment, issue 27's five runs).
            if waited.seen_ns <= predicted + alpha {
                self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::CaughtAtOnce);
            }
            return Ok(waited);
        }
        let first = status.now_ns();
        poll_every(status, first + alpha, alpha, &mut waited)?;
        let error_ns = waited.seen_ns.saturating_sub(predicted);
        self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::Late { error_ns });
        Ok(waited)
    }

    fn set_cpu_busy(&mut self, busy: bool) {
        self.cpu_busy = busy;
    }

    fn overshoot_ns(&self) -> Option<u64> {
        self.overshoot_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::virt::VirtualDevice;
    use smartcon_util::Op;

    const PARAMS: PollParams = PollParams { interval_ns: 1_000, alpha_ns: 100, sampling_ns: 1_000_000 };

    /// Runs `n` back-to-back I/Os of `service_ns` on a virtual device from `*t`.
    fn run(h: &mut Hybrid, t: &mut u64, n: usize, service_ns: u64, overshoot_ns: u64) -> Vec<(Waited, VirtualDevice)> {
        (0..n)
            .map(|_| {
                let req = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: *t };
                let mut dev = VirtualDevice::new(*t, *t + service_ns, overshoot_ns);
                let w = h.wait(&req, &mut dev).unwrap();
                assert!(w.seen_ns >= *t + service_ns, "never seen before it is done");
                *t = w.seen_ns;
                (w, dev)
            })
            .collect()
    }

    #[test]
    fn samples_then_sleeps_and_wakes_on_time() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        let sampling = run(&mut h, &mut t, 200, 80_000, 5_000);
        assert!(sampling.iter().take(12).all(|(w, _)| w.sleeps == 0 && w.predicted_done_ns.is_none()));
        let dynamic = run(&mut h, &mut t, 200, 80_000, 5_000);
        let tail = &dynamic[100..];
        // It sleeps through most of the 80 us and sees the completion within a few alphas.
        assert!(tail.iter().all(|(w, _)| w.sleeps == 1));
        let late: Vec<u64> = tail.iter().map(|(w, d)| w.seen_ns - d.done_ns).collect();
        assert!(late.iter().all(|&l| l <= 1_000), "{late:?}");
        // The overshoot was learned, so the wake-up lands before the completion.
        let o = h.overshoot_ns().unwrap();
        assert!((4_000..=7_000).contains(&o), "overshoot {o}");
        assert!(tail.iter().all(|(_, d)| d.slept_ns >= 70_000));
    }

    #[test]
    fn does_not_sleep_when_the_wait_is_shorter_than_the_overshoot() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        let sampling = run(&mut h, &mut t, 100, 10_000, 16_000);
        let dynamic = run(&mut h, &mut t, 200, 10_000, 16_000);
        // One sleep to learn the overshoot, then only the re-measuring one after
        // EXPLORE_AFTER I/Os (then twice as many): a 16 us wake-up on a 10 us device.
        let sleeps: u32 = sampling.iter().chain(&dynamic).map(|(w, _)| w.sleeps).sum();
        assert!((1..=2 + 200 / EXPLORE_AFTER).contains(&sleeps), "{sleeps} sleeps");
        let on_time = dynamic.iter().filter(|(w, d)| w.seen_ns - d.done_ns <= 1_000).count();
        assert!(on_time >= 200 - 2, "{on_time} of 200 seen within 1 us");
        assert!(dynamic.iter().all(|(w, _)| w.predicted_done_ns.is_some()));
    }

    #[test]
    fn re_measures_ever_more_rarely_while_sleeping_does_not_pay() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 10_000, 16_000);
        let dynamic = run(&mut h, &mut t, 20_000, 10_000, 16_000);
        // 128, 256, ... 4096, then every 4096: 5 + 3 re-measures in 20,000 I/Os, not 156.
        let sleeps: u32 = dynamic.iter().map(|(w, _)| w.sleeps).sum();
        assert!((6..=12).contains(&sleeps), "{sleeps} sleeps in 20000 I/Os");
        assert_eq!(h.explore_after, EXPLORE_AFTER_MAX);
        // A device slow enough that sleeping pays resets it.
        run(&mut h, &mut t, 300, 80_000, 16_000);
        assert_eq!(h.explore_after, EXPLORE_AFTER);
    }

    #[test]
    fn sleeps_to_the_prediction_when_the_cpus_are_busy() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 10_000, 16_000);
        run(&mut h, &mut t, 50, 10_000, 16_000);
        h.set_cpu_busy(true);
        let busy = run(&mut h, &mut t, 50, 10_000, 16_000);
        // Every I/O sleeps (the 10 us device is shorter than the wake-up, but polling would
        // take the CPU from the other work) and is seen at the first poll after waking.
        assert!(busy.iter().all(|(w, _)| w.sleeps == 1 && w.polls == 1));
        assert!(busy.iter().all(|(_, d)| d.slept_ns >= 16_000));
        // Waking late on purpose teaches the predictor nothing: the estimate holds.
        let est = h.predictor().estimate_ns(Op::Read, 4096).unwrap();
        assert!((9_000..=10_500).contains(&est), "estimate {est}");
    }

    #[test]
    fn a_burst_of_late_wake_ups_does_not_move_the_estimate() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 80_000, 5_000);
        run(&mut h, &mut t, 200, 80_000, 5_000);
        let before = h.predictor().estimate_ns(Op::Read, 4096).unwrap();
        // Preemptions: 30 sleeps in a row wake 40 us late, past the prediction. The first
        // poll then comes late, and "done by then" says nothing about the device time.
        let mut late = 0;
        let mut lowest = before;
        for _ in 0..30 {
            let (w, d) = run(&mut h, &mut t, 1, 80_000, 40_000).pop().unwrap();
            late += usize::from(w.seen_ns > d.done_ns + 1_000);
            lowest = lowest.min(h.predictor().estimate_ns(Op::Read, 4096).unwrap());
        }
        assert!(late >= 5, "{late} woke late");
        // Taking them as "caught at once" walked it down by the doubling step, tens of us.
        assert!(lowest + 1_000 >= before, "the estimate walked down from {before} to {lowest}");
        let after = h.predictor().estimate_ns(Op::Read, 4096).unwrap();
        assert!((78_000..=81_000).contains(&after), "estimate {after}");
    }

    #[test]
    fn polls_far_less_than_fixed_interval_polling() {
        let mut h = Hybrid::new(PARAMS, 0);
        let mut t = 0;
        run(&mut h, &mut t, 100, 40_000, 3_000);
        let dynamic = run(&mut h, &mut t, 100, 40_000, 3_000);
        let polls: u32 = dynamic.iter().map(|(w, _)| w.polls).sum();
        // Fixed 1 us polling would poll 40 times per I/O.
        assert!(polls <= 100 * 4, "{polls} polls for 100 I/Os");
    }
}
