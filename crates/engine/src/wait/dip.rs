//! `dip`: dynamic interval polling as paper 002 (Sec. 3.2) has it. After a sampling phase
//! of fixed-interval polls, the driver "calculates the predicted finish time and waits
//! without polling until the time has come. No context switch occurs": a busy delay on the
//! clock that never reads the device's status, so on a device whose status is a register
//! on the data channel (`poll_cost`, Fig. 1) it takes no channel time from the transfer.
//! At the predicted instant it polls; if the request is not done, it polls every alpha
//! until it is. The feedback is the paper's (caught at the first poll: shrink by alpha;
//! late: grow by the error), through the same [`Predictor`] as `hybrid`, so the two
//! differ only in how they wait before the prediction: `hybrid` sleeps in the kernel (the
//! Linux-style variant: CPU given back, a wake-up paid), `dip` keeps the CPU.
//!
//! The predictor's additions to the paper (the doubling shrink, the suspect rule, the
//! bytes-ahead slope) are documented in [`super::predictor`]; they apply to both.
//!
//! Non-goals: sleeping of any kind, and the System Monitor's busy-CPU signal (the paper's
//! driver has neither); use `hybrid` for those.

use super::predictor::{Feedback, Predictor};
use super::{poll_every, predict_or_sample, Pending, PollParams, Status, WaitPolicy, Waited};
use crate::error::Error;

pub struct Dip {
    params: PollParams,
    sampling_end_ns: u64,
    predictor: Predictor,
}

impl Dip {
    pub fn new(params: PollParams, start_ns: u64) -> Dip {
        Dip {
            params,
            sampling_end_ns: start_ns + params.sampling_ns,
            predictor: Predictor::new(params.alpha_ns, params.interval_ns),
        }
    }

    pub fn predictor(&self) -> &Predictor {
        &self.predictor
    }
}

impl WaitPolicy for Dip {
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
        // Wait without polling: the clock only.
        status.spin_until(predicted);
        waited.polls += 1;
        if status.poll()? {
            waited.seen_ns = status.now_ns();
            self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::CaughtAtOnce);
            return Ok(waited);
        }
        let alpha = self.params.alpha_ns;
        let first = status.now_ns();
        poll_every(status, first + alpha, alpha, &mut waited)?;
        let error_ns = waited.seen_ns.saturating_sub(predicted);
        self.predictor.feedback(req.op, req.bytes, ahead_bytes, Feedback::Late { error_ns });
        Ok(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::fixed::FixedInterval;
    use crate::wait::virt::VirtualDevice;
    use smartcon_util::Op;

    const PARAMS: PollParams = PollParams { interval_ns: 1_000, alpha_ns: 100, sampling_ns: 1_000_000 };

    fn pending(t: u64) -> Pending {
        Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: t }
    }

    /// `n` back-to-back I/Os of 10 us on a device whose polls take 200 ns of the channel;
    /// each with how much the polls delayed its completion.
    fn run(p: &mut dyn WaitPolicy, t: &mut u64, n: usize) -> Vec<(Waited, VirtualDevice, u64)> {
        (0..n)
            .map(|_| {
                let mut dev = VirtualDevice::new(*t, *t + 10_000, 15_000);
                dev.poll_cost_ns = 200;
                let w = p.wait(&pending(*t), &mut dev).unwrap();
                let stretch_ns = dev.done_ns - (*t + 10_000);
                *t = w.seen_ns;
                (w, dev, stretch_ns)
            })
            .collect()
    }

    #[test]
    fn never_reads_the_status_before_the_predicted_instant_and_never_sleeps() {
        let mut d = Dip::new(PARAMS, 0);
        let mut t = 0;
        run(&mut d, &mut t, 150);
        let dynamic = run(&mut d, &mut t, 200);
        for (w, dev, _) in &dynamic {
            let predicted = w.predicted_done_ns.expect("predicted after the sampling phase");
            assert!(dev.poll_at_ns.iter().all(|&at| at >= predicted), "{:?} before {predicted}", dev.poll_at_ns);
            assert_eq!((w.sleeps, dev.slept_ns), (0, 0));
        }
        // So its polls barely take the channel: per I/O a few polls and a few hundred ns of
        // delay, where a poll every 1 us (the paper's best fixed interval) polls ten times
        // and delays each transfer by about 2 us.
        let mut fixed = FixedInterval::new(1_000);
        let fixed_runs = run(&mut fixed, &mut t, 100);
        let mean = |v: &[(Waited, VirtualDevice, u64)], f: &dyn Fn(&(Waited, VirtualDevice, u64)) -> u64| {
            v.iter().map(f).sum::<u64>() as f64 / v.len() as f64
        };
        let tail = &dynamic[100..];
        let polls = |x: &(Waited, VirtualDevice, u64)| u64::from(x.0.polls);
        let stretch = |x: &(Waited, VirtualDevice, u64)| x.2;
        assert!(mean(tail, &polls) <= 3.0, "dip polls {} per I/O", mean(tail, &polls));
        assert!(mean(&fixed_runs, &polls) >= 8.0);
        assert!(mean(tail, &stretch) <= 400.0, "dip delays the transfer by {} ns", mean(tail, &stretch));
        assert!(mean(&fixed_runs, &stretch) >= 1_500.0, "{}", mean(&fixed_runs, &stretch));
    }
}
