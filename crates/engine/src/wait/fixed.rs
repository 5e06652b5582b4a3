//! Fixed-interval polling (paper 002, Sec. 3.1, Fig. 1): a status poll every `interval`
//! from submission until the device says done. Short intervals see the completion sooner
//! but, on a device whose status is a register on the data channel, each poll takes
//! channel time from the transfer; `smartcon bench --sweep-interval` draws the curve.

use super::{poll_every, Pending, Status, WaitPolicy, Waited};
use crate::error::Error;

pub struct FixedInterval {
    interval_ns: u64,
}

impl FixedInterval {
    pub fn new(interval_ns: u64) -> FixedInterval {
        FixedInterval { interval_ns: interval_ns.max(1) }
    }
}

impl WaitPolicy for FixedInterval {
    fn wait(&mut self, req: &Pending, status: &mut dyn Status) -> Result<Waited, Error> {
        let mut waited = Waited::default();
        poll_every(status, req.submit_ns + self.interval_ns, self.interval_ns, &mut waited)?;
        Ok(waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::DeviceState;
    use crate::wait::virt::VirtualDevice;
    use smartcon_util::Op;

    fn pending() -> Pending {
        Pending { op: Op::Read, bytes: 4096, ahead: DeviceState::default(), submit_ns: 0 }
    }

    #[test]
    fn polls_on_the_interval_and_sees_the_completion_at_the_next_one() {
        let mut dev = VirtualDevice::new(0, 10_300, 0);
        dev.poll_ns = 0;
        let w = FixedInterval::new(1_000).wait(&pending(), &mut dev).unwrap();
        assert_eq!(w.seen_ns, 11_000);
        assert_eq!(w.polls, 11);
        assert_eq!(w.sleeps, 0);
    }

    #[test]
    fn polls_that_cost_channel_time_delay_the_completion() {
        // 10 us of service; every poll before completion takes 250 ns of the channel.
        let seen = |interval: u64| {
            let mut dev = VirtualDevice::new(0, 10_000, 0);
            dev.poll_cost_ns = 250;
            FixedInterval::new(interval).wait(&pending(), &mut dev).unwrap().seen_ns
        };
        // Polling every 500 ns steals half the channel: the request takes about twice as long;
        // every 2 us costs much less, and every 8 us mostly waits for the next poll.
        assert!(seen(500) > 19_000, "{}", seen(500));
        assert!(seen(2_000) < 14_000, "{}", seen(2_000));
        assert!(seen(8_000) >= 16_000);
    }
}
