//! Response-time prediction for dynamic interval polling (paper 002, Sec. 3.2), on
//! explicit times only, so it is tested on virtual time.
//!
//! Per request type and size class (op x power-of-two size) it keeps:
//!
//! - the samples of the sampling phase; when the phase ends (or, for a class first seen
//!   later, once it has [`SAMPLES_MIN`] samples), the estimate starts at their median less
//!   half the sampling interval (a fixed-interval poll sees a completion on average half an
//!   interval late);
//! - the estimate of the device time with nothing ahead, corrected by what the waiting
//!   thread sees at its first poll at the predicted instant:
//!   - caught at once (the request was done by then): shrink by alpha, as in the paper, and
//!     by twice as much every second catch in a row (alpha << streak/2, at most 1/8 of the
//!     estimate), so the estimate comes down from a slow phase in tens of I/Os rather than
//!     thousands (the paper's fixed alpha recovers from a 70 us step down in 700 I/Os);
//!   - late (polls at alpha were needed): grow by the error seen, as in the paper, so the
//!     estimate recovers upward after a fast phase (io_uring's hybrid IOPOLL estimate can
//!     only shrink). An error larger than max(4 alpha, estimate / 4) is a suspect: a single
//!     one (a stall) changes nothing; a second in a row is a step, and is applied;
//! - per op, a slope in ns per byte in flight ahead of the request on the same device, so
//!   a request queued behind others is predicted later; learned from the errors of requests
//!   that had a backlog, clamped at zero (a device with free channels serves a backlog in
//!   parallel and the slope decays to nothing), and bounded above by what the backlog would
//!   add on one first-come-first-served channel.
//!
//! Non-goals: per-offset or per-thread models; prediction of stalls (they are rare and are
//! handled by polling at alpha until the request is done).

use smartcon_util::Op;

/// Size classes: 2^0 .. 2^27 bytes (job sizes stop at 64 MiB).
const SIZE_CLASSES: usize = 28;
/// Samples a class needs before it is predicted.
pub const SAMPLES_MIN: usize = 8;
/// Samples kept per class (the median of the last this many).
const SAMPLES_KEPT: usize = 64;
/// A shrink step is at most this fraction of the estimate.
const SHRINK_FRACTION_MAX: u64 = 8;
/// Weight of a new slope observation (1 / this).
const SLOPE_GAIN: f64 = 8.0;

/// What the first poll at the predicted instant saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Feedback {
    /// Done by the predicted instant.
    CaughtAtOnce,
    /// Not done; seen `error_ns` after the predicted instant by polls at alpha.
    Late { error_ns: u64 },
}

#[derive(Debug, Clone)]
struct Class {
    samples: Vec<u64>,
    est_ns: Option<u64>,
    early_streak: u32,
    /// The last I/O was late by a suspect amount.
    suspect: bool,
}

impl Class {
    fn new() -> Class {
        Class { samples: Vec::new(), est_ns: None, early_streak: 0, suspect: false }
    }
}

/// The predictor of one I/O thread.
#[derive(Debug, Clone)]
pub struct Predictor {
    alpha_ns: u64,
    /// The sampling interval; samples are late by half of it on average.
    sample_interval_ns: u64,
    sampling_over: bool,
    classes: Vec<Class>,
    ns_per_byte_ahead: [f64; 2],
}

fn op_index(op: Op) -> usize {
    match op {
        Op::Read => 0,
        Op::Write => 1,
    }
}

/// The class of a request: its op and the power of two at or above its size.
pub fn class_of(op: Op, bytes: u64) -> usize {
    let log = (64 - bytes.max(1).saturating_sub(1).leading_zeros()) as usize;
    op_index(op) * SIZE_CLASSES + log.min(SIZE_CLASSES - 1)
}

impl Predictor {
    pub fn new(alpha_ns: u64, sample_interval_ns: u64) -> Predictor {
        Predictor {
            alpha_ns: alpha_ns.max(1),
            sample_interval_ns,
            sampling_over: false,
            classes: vec![Class::new(); 2 * SIZE_CLASSES],
            ns_per_byte_ahead: [0.0; 2],
        }
    }

    /// Records a sampling-phase response time (submission to the poll that saw it done).
    pub fn sample(&mut self, op: Op, bytes: u64, seen_latency_ns: u64) {
        let c = &mut self.classes[class_of(op, bytes)];
        if c.samples.len() == SAMPLES_KEPT {
            c.samples.remove(0);
        }
        c.samples.push(seen_latency_ns);
        if self.sampling_over && c.est_ns.is_none() && c.samples.len() >= SAMPLES_MIN {
            c.est_ns = Some(Self::initial(&c.samples, self.sample_interval_ns));
        }
    }

    fn initial(samples: &[u64], interval_ns: u64) -> u64 {
        let mut s = samples.to_vec();
        s.sort_unstable();
        s[s.len() / 2].saturating_sub(interval_ns / 2)
    }

    /// Ends the sampling phase: every class with enough samples is predicted from now on.
    pub fn end_sampling(&mut self) {
        self.sampling_over = true;
        for c in &mut self.classes {
            if c.est_ns.is_none() && c.samples.len() >= SAMPLES_MIN {
                c.est_ns = Some(Self::initial(&c.samples, self.sample_interval_ns));
            }
        }
    }

    pub fn sampling_over(&self) -> bool {
        self.sampling_over
    }

    /// The predicted time from submission to completion, or `None` while the class is
    /// still being sampled.
    pub fn predict(&self, op: Op, bytes: u64, ahead_bytes: u64) -> Option<u64> {
        let est = self.classes[class_of(op, bytes)].est_ns?;
        // A byte ahead delays this request at most as much as one of its own (one channel,
        // first come first served): a bound that keeps a poisoned slope from putting a
        // thread to sleep far past its completion.
        let extra = (self.ns_per_byte_ahead[op_index(op)] * ahead_bytes as f64)
            .min(est as f64 * ahead_bytes as f64 / bytes.max(1) as f64);
        Some(est + extra as u64)
    }

    /// The estimate with nothing ahead (for reports and tests).
    pub fn estimate_ns(&self, op: Op, bytes: u64) -> Option<u64> {
        self.classes[class_of(op, bytes)].est_ns
    }

    /// Corrects the class's estimate after a predicted wait.
    pub fn feedback(&mut self, op: Op, bytes: u64, ahead_bytes: u64, feedback: Feedback) {
        let alpha = self.alpha_ns;
        let slope = &mut self.ns_per_byte_ahead[op_index(op)];
        let c = &mut self.classes[class_of(op, bytes)];
        let Some(est) = c.est_ns else { return };
        match feedback {
            Feedback::CaughtAtOnce => {
                c.suspect = false;
                let step = (alpha << (c.early_streak / 2).min(20)).min((est / SHRINK_FRACTION_MAX).max(alpha));
                c.early_streak += 1;
                if ahead_bytes > 0 && *slope > 0.0 {
                    // The backlog's share came early: take the step off the slope.
                    *slope = (*slope - step as f64 / ahead_bytes as f64).max(0.0);
                } else {
                    c.est_ns = Some(est.saturating_sub(step).max(1));
                }
            }
            Feedback::Late { error_ns } => {
                c.early_streak = 0;
                let suspect_above = (4 * alpha).max(est / 4);
                if error_ns > suspect_above && !c.suspect {
                    // Perhaps a stall: wait for a second one before believing it.
                    c.suspect = true;
                    return;
                }
                c.suspect = false;
                if ahead_bytes > 0 {
                    let predicted_extra = *slope * ahead_bytes as f64;
                    let seen_per_byte = (predicted_extra + error_ns as f64) / ahead_bytes as f64;
                    *slope += (seen_per_byte - *slope) / SLOPE_GAIN;
                } else {
                    c.est_ns = Some(est + error_ns);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALPHA: u64 = 100;
    const INTERVAL: u64 = 1_000;

    /// One predicted I/O on a device whose true latency is `true_ns`, as the hybrid waits
    /// for it: first poll at the prediction, then polls every alpha. Returns the error.
    fn step(p: &mut Predictor, true_ns: u64, ahead_bytes: u64) -> i64 {
        let pred = p.predict(Op::Read, 4096, ahead_bytes).unwrap();
        let fb = if true_ns <= pred {
            Feedback::CaughtAtOnce
        } else {
            // Seen at the first alpha multiple at or after the completion.
            let polls = (true_ns - pred).div_ceil(ALPHA);
            Feedback::Late { error_ns: polls * ALPHA }
        };
        p.feedback(Op::Read, 4096, ahead_bytes, fb);
        pred as i64 - true_ns as i64
    }

    fn sampled(latency_ns: u64) -> Predictor {
        let mut p = Predictor::new(ALPHA, INTERVAL);
        for i in 0..16 {
            // Fixed-interval sampling sees the completion up to one interval late.
            p.sample(Op::Read, 4096, latency_ns + (i * 137) % INTERVAL);
        }
        p.end_sampling();
        p
    }

    fn median_abs(errors: &[i64]) -> u64 {
        let mut a: Vec<u64> = errors.iter().map(|e| e.unsigned_abs()).collect();
        a.sort_unstable();
        a[a.len() / 2]
    }

    #[test]
    fn classes_split_by_op_and_power_of_two() {
        assert_eq!(class_of(Op::Read, 4096), class_of(Op::Read, 3000));
        assert_ne!(class_of(Op::Read, 4096), class_of(Op::Read, 4097));
        assert_ne!(class_of(Op::Read, 4096), class_of(Op::Write, 4096));
        assert_eq!(class_of(Op::Write, 1), SIZE_CLASSES);
    }

    #[test]
    fn no_prediction_until_sampled() {
        let mut p = Predictor::new(ALPHA, INTERVAL);
        for _ in 0..SAMPLES_MIN - 1 {
            p.sample(Op::Read, 4096, 10_000);
        }
        p.end_sampling();
        assert_eq!(p.predict(Op::Read, 4096, 0), None);
        // A class that reaches its sample count after the phase is predicted from then on.
        p.sample(Op::Read, 4096, 10_000);
        assert_eq!(p.predict(Op::Read, 4096, 0), Some(10_000 - INTERVAL / 2));
    }

    #[test]
    fn converges_on_a_fixed_latency() {
        let mut p = sampled(10_000);
        let errors: Vec<i64> = (0..400).map(|_| step(&mut p, 10_000, 0)).collect();
        let tail = &errors[100..];
        assert!(median_abs(tail) <= 2 * ALPHA, "median error {} ns", median_abs(tail));
        assert!(tail.iter().all(|e| e.unsigned_abs() <= 2_000), "{:?}", &tail[..20]);
    }

    #[test]
    fn follows_a_step_up_and_a_step_down() {
        let mut p = sampled(10_000);
        for _ in 0..100 {
            step(&mut p, 10_000, 0);
        }
        // Step up to 80 us (a slower phase): within a few I/Os the estimate is there.
        let up: Vec<i64> = (0..100).map(|_| step(&mut p, 80_000, 0)).collect();
        assert!(median_abs(&up[10..]) <= 2 * ALPHA, "after step up: {:?}", &up[..12]);
        // And back down to 10 us: the estimate comes down in tens of I/Os, not thousands.
        let down: Vec<i64> = (0..200).map(|_| step(&mut p, 10_000, 0)).collect();
        let settled = down.iter().position(|e| e.unsigned_abs() <= 1_000).unwrap();
        assert!(settled <= 40, "took {settled} I/Os to come down: {:?}", &down[..20]);
        assert!(median_abs(&down[60..]) <= 2 * ALPHA);
    }

    #[test]
    fn a_single_outlier_does_not_move_the_estimate() {
        let mut p = sampled(10_000);
        for _ in 0..200 {
            step(&mut p, 10_000, 0);
        }
        let before = p.estimate_ns(Op::Read, 4096).unwrap();
        // A stall: one I/O takes 500 us.
        step(&mut p, 500_000, 0);
        let after = p.estimate_ns(Op::Read, 4096).unwrap();
        assert_eq!(before, after, "one stall must not poison the estimate");
        let next: Vec<i64> = (0..50).map(|_| step(&mut p, 10_000, 0)).collect();
        assert!(median_abs(&next) <= 2 * ALPHA);
    }

    #[test]
    fn a_backlog_ahead_is_predicted_later() {
        let mut p = sampled(10_000);
        for _ in 0..100 {
            step(&mut p, 10_000, 0);
        }
        // One channel: each 4 KiB ahead adds 10 us.
        let per_byte = 10_000.0 / 4096.0;
        let errors: Vec<i64> = (0..400)
            .map(|i| {
                let ahead = (i % 4) * 4096;
                step(&mut p, 10_000 + (per_byte * ahead as f64) as u64, ahead)
            })
            .collect();
        assert!(median_abs(&errors[200..]) <= 1_000, "median error {} ns", median_abs(&errors[200..]));
        let with = p.predict(Op::Read, 4096, 3 * 4096).unwrap();
        let without = p.predict(Op::Read, 4096, 0).unwrap();
        assert!(with > without + 20_000, "backlog adds time: {with} vs {without}");
    }

    #[test]
    fn a_backlog_adds_at_most_one_channels_worth() {
        let mut p = sampled(10_000);
        // A stall seen twice in a row with a backlog teaches a steep slope...
        for _ in 0..4 {
            p.feedback(Op::Read, 4096, 4096, Feedback::Late { error_ns: 10_000_000 });
        }
        let est = p.estimate_ns(Op::Read, 4096).unwrap();
        // ...but 3 requests of 4 KiB ahead add at most 3 of this request's own time.
        assert!(p.predict(Op::Read, 4096, 3 * 4096).unwrap() <= 4 * est);
    }

    #[test]
    fn a_backlog_served_in_parallel_teaches_no_slope() {
        let mut p = sampled(10_000);
        let errors: Vec<i64> = (0..300).map(|i| step(&mut p, 10_000, (i % 4) * 4096)).collect();
        assert!(median_abs(&errors[100..]) <= 2 * ALPHA);
    }
}
