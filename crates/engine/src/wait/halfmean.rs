//! Linux's blk-mq hybrid polling (removed in 6.6, 2023) as a baseline: the completion
//! times of each size bucket are averaged over a window of 100 ms; a request sleeps half
//! the bucket's mean of the previous window, then polls continuously. Before the first
//! window closes it polls from the start, as the kernel did without statistics. Buckets
//! follow `blk_mq_poll_stats_bkt`: op x log2(size) from 512 B, eight per op.
//!
//! The sleep is not corrected for the wake-up overshoot and the estimate is not fed back:
//! those are what `hybrid` adds.

use super::{poll_every, Pending, Status, WaitPolicy, Waited};
use crate::error::Error;
use smartcon_util::Op;

/// The statistics window of the kernel's poll stats callback.
pub const WINDOW_NS: u64 = 100_000_000;
const BUCKETS_PER_OP: usize = 8;

#[derive(Clone, Copy, Default)]
struct Bucket {
    sum_ns: u64,
    count: u64,
    mean_ns: Option<u64>,
}

pub struct HalfMean {
    window_end_ns: u64,
    buckets: [Bucket; 2 * BUCKETS_PER_OP],
}

fn bucket_of(op: Op, bytes: u64) -> usize {
    let log = 63 - bytes.max(512).leading_zeros() as usize;
    let b = (log - 9).min(BUCKETS_PER_OP - 1);
    match op {
        Op::Read => b,
        Op::Write => BUCKETS_PER_OP + b,
    }
}

impl HalfMean {
    pub fn new(start_ns: u64) -> HalfMean {
        HalfMean { window_end_ns: start_ns + WINDOW_NS, buckets: [Bucket::default(); 2 * BUCKETS_PER_OP] }
    }

    fn roll_window(&mut self, now_ns: u64) {
        if now_ns < self.window_end_ns {
            return;
        }
        for b in &mut self.buckets {
            if let Some(mean) = b.sum_ns.checked_div(b.count) {
                b.mean_ns = Some(mean);
            }
            b.sum_ns = 0;
            b.count = 0;
        }
        self.window_end_ns = now_ns + WINDOW_NS;
    }
}

impl WaitPolicy for HalfMean {
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error> {
        let mut waited = Waited::default();
        let b = bucket_of(req.op, req.bytes);
        let mut from = req.submit_ns;
        if let Some(mean) = self.buckets[b].mean_ns {
            let wake = req.submit_ns + mean / 2;
            if wake > status.now_ns() {
                status.sleep_until(wake)?;
                waited.sleeps += 1;
            }
            from = status.now_ns();
        }
        // Continuous polling: the next poll as soon as the last returns.
        poll_every(status, from, 0, &mut waited)?;
        let bucket = &mut self.buckets[b];
        bucket.sum_ns += waited.seen_ns - req.submit_ns;
        bucket.count += 1;
        self.roll_window(waited.seen_ns);
        Ok(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::virt::VirtualDevice;

    #[test]
    fn sleeps_half_the_previous_windows_mean_then_polls() {
        let mut h = HalfMean::new(0);
        let mut t = 0;
        // First window: no statistics, so no sleep.
        while t < WINDOW_NS + 20_000 {
            let req = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: t };
            let mut dev = VirtualDevice::new(t, t + 20_000, 5_000);
            let w = h.wait(&req, &mut dev).unwrap();
            if t < WINDOW_NS {
                assert_eq!(w.sleeps, 0);
            }
            t = w.seen_ns;
        }
        let req = Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: t };
        let mut dev = VirtualDevice::new(t, t + 20_000, 5_000);
        let w = h.wait(&req, &mut dev).unwrap();
        assert_eq!(w.sleeps, 1);
        // Slept to half the mean (about 10 us) plus the overshoot, then polled the rest.
        assert!((15_000..15_100).contains(&dev.slept_ns), "{}", dev.slept_ns);
        assert!(w.polls > 1);
        // Another size has its own bucket, still without statistics.
        let req = Pending { op: Op::Read, bytes: 65536, ahead: DeviceState::default(), submit_ns: w.seen_ns };
        let mut dev = VirtualDevice::new(w.seen_ns, w.seen_ns + 20_000, 5_000);
        assert_eq!(h.wait(&req, &mut dev).unwrap().sleeps, 0);
    }
}
