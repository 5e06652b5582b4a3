//! A device request in service as its waiting thread sees it: the page-level status a poll
//! reads (the channel held by a register read), the sleeps and spins on the device's clock,
//! and the bound on a wait that does not look at the device.

use smartcon_devemu::pages::PageTransfer;
use smartcon_engine::error::Error;
use smartcon_engine::wait::Status;

use super::MergeDevice;

/// A merged request in service, as the waiting thread sees it.
pub(super) struct PageStatus<'a> {
    pub(super) dev: &'a MergeDevice,
    pub(super) channel: u32,
    pub(super) transfer: PageTransfer,
    /// Pages that must be acknowledged for `poll` to say done.
    pub(super) want: u32,
    pub(super) acked: u32,
    pub(super) last_poll_ns: u64,
    /// No sleep or clock-only wait goes past this instant (see [`WAIT_BOUND_NS_MIN`]).
    pub(super) wait_bound_ns: u64,
}

impl Status for PageStatus<'_> {
    fn now_ns(&self) -> u64 {
        self.dev.time.now_ns()
    }

    fn poll(&mut self) -> Result<bool, Error> {
        let now = self.dev.time.now_ns();
        let cost = self.dev.model.poll_cost_ns;
        if cost > 0 {
            // As smartcon_emutarget::emu: the register read holds the channel, at most half the time.
            let delay = cost.min(now.saturating_sub(self.last_poll_ns) / 2);
            self.acked = self.transfer.stall(now, delay);
            if delay > 0 && self.acked < self.transfer.pages() {
                self.dev.channels.lock().unwrap().occupy(self.channel, now, delay);
            }
            self.last_poll_ns = now;
            self.dev.time.spin_until(now + cost);
        } else {
            self.acked = self.transfer.acked(now);
        }
        Ok(self.acked >= self.want)
    }

    fn sleep_until(&mut self, at_ns: u64) -> Result<(), Error> {
        self.dev.time.sleep_until(at_ns.min(self.wait_bound_ns));
        Ok(())
    }

    fn spin_until(&mut self, at_ns: u64) {
        self.dev.time.spin_until(at_ns.min(self.wait_bound_ns));
    }

    /// `block`'s wait: asleep until the wanted pages' instant, as the device's interrupt
    /// would wake the thread (no register read: nothing is charged to the channel). The
    /// instant is the model's, not a prediction: no wait bound.
    fn block(&mut self) -> Result<(), Error> {
        while self.acked < self.want {
            let at = self.transfer.page_done_ns(self.want - 1);
            self.dev.time.block_until(at);
            self.acked = self.transfer.acked(self.dev.time.now_ns());
        }
        Ok(())
    }

    fn thread_cpu_ns(&self) -> Option<u64> {
        self.dev.time.thread_cpu_ns()
    }
}

/// A wait that does not look at the device (a sleep, or a spin on the clock) ends at most
/// this long after the submission, or [`WAIT_BOUND_SERVICES`] times the nominal service of
/// the largest merged request if that is longer; then the policy polls. A prediction
/// poisoned by a long preemption (the 2-core development VMs, shared, stall threads for
/// milliseconds) would otherwise park the leader, and with it every waiter, for as long as
/// the bad estimate says; with the bound the worst case is one bounded wait and a poll,
/// and the predictor's early-catch feedback brings the estimate back down. A driver knows
/// its device's nominal latency from the datasheet; this is no hint about the completion.
pub const WAIT_BOUND_NS_MIN: u64 = 10_000_000;
pub const WAIT_BOUND_SERVICES: u64 = 64;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::merge::{MergeConfig, Polling, PAGE_BYTES};
    use smartcon_devemu::parse_spec;
    use smartcon_devemu::Op;
    use smartcon_engine::clock::now_ns;

    /// A one-page read on channel 0 submitted at `now`, bounded 1 ms later.
    fn one_page_read(dev: &MergeDevice, now: u64) -> PageStatus<'_> {
        let timing = *dev.model.timing(Op::Read);
        PageStatus {
            dev,
            channel: 0,
            transfer: PageTransfer::new(now, &timing, PAGE_BYTES, 1),
            want: 1,
            acked: 0,
            last_poll_ns: now,
            wait_bound_ns: now + 1_000_000,
        }
    }

    /// Regression: a prediction far in the future (a poisoned estimate) must not hold the
    /// leader, and everyone parked behind it, beyond the wait bound. Without the bound these
    /// calls would not return for years; no duration is asserted.
    #[test]
    fn clock_only_waits_end_at_the_wait_bound() {
        let spec = parse_spec("emu:optane,channels=1,size=16m").unwrap();
        let dev = MergeDevice::new(&spec, MergeConfig::new(true, false, Polling::Dynamic)).unwrap();
        assert_eq!(dev.wait_bound_ns, WAIT_BOUND_NS_MIN);
        let now = now_ns();
        let mut status = one_page_read(&dev, now);
        status.spin_until(u64::MAX);
        status.sleep_until(u64::MAX).unwrap();
        assert!(now_ns() >= now + 1_000_000);
        assert!(status.poll().unwrap(), "a 10 us request is done after the 1 ms bound");
    }

    /// Hybrid inside a merged call measures its sleeps on the thread's CPU clock, which the
    /// request's status passes through from the device's clock (the host's here).
    #[test]
    fn the_status_reads_the_thread_cpu_clock_of_the_device_clock() {
        let spec = parse_spec("emu:optane,channels=1,size=16m").unwrap();
        let dev = MergeDevice::new(&spec, MergeConfig::new(true, false, Polling::Dynamic)).unwrap();
        let status = one_page_read(&dev, now_ns());
        let before = smartcon_engine::clock::thread_cpu_ns();
        let read = status.thread_cpu_ns().expect("the host's clock has a thread CPU clock");
        assert!(read >= before && read <= smartcon_engine::clock::thread_cpu_ns());
    }
}
