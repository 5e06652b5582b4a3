//! The timing model: per-op fixed latency plus transfer time, over independent channels.
//!
//! A request of `bytes` for `op` costs `fixed_ns + bytes / bandwidth` of service on one
//! channel. A device has `channels` identical channels; each request goes to the channel
//! that frees up first (ties to the lowest index) and starts at `max(arrival, free_at)`.
//! This is a multi-server FCFS queue, the simplest model that shows the backlog a
//! request waits behind, which SmartCon's size-plus-backlog rule is about.
//!
//! HDD presets add an average seek and half a rotation to the fixed part; that is all the
//! mechanics smartcon needs to place an HDD firmly in the "mainstream" class.

use serde::Serialize;

/// Read or write: the workspace's one op kind, from the bottom crate. Re-exported because
/// it is the type of this crate's requests.
pub use smartcon_util::Op;

/// Timing of one op kind.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct OpTiming {
    /// Latency independent of size: command processing, media access, seek + rotation.
    pub fixed_ns: u64,
    /// Sustained transfer rate of one channel.
    pub bandwidth_bytes_per_s: u64,
}

impl OpTiming {
    /// Service time of a request of `bytes` on one channel, rounded up to whole ns.
    #[inline]
    pub fn service_ns(&self, bytes: u64) -> u64 {
        assert!(self.bandwidth_bytes_per_s > 0, "bandwidth must be positive");
        // u64 arithmetic when it cannot overflow (any request below 18 GB): a u128 division
        // costs tens of ns, a noticeable share of a replay step.
        let transfer_ns = match bytes.checked_mul(1_000_000_000) {
            Some(n) => n.div_ceil(self.bandwidth_bytes_per_s),
            None => (bytes as u128 * 1_000_000_000).div_ceil(self.bandwidth_bytes_per_s as u128) as u64,
        };
        self.fixed_ns + transfer_ns
    }
}

/// A device's timing parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeviceModel {
    pub read: OpTiming,
    pub write: OpTiming,
    pub channels: u32,
    /// Time a status poll occupies a channel (0 = polls are free). Models the cost of
    /// polling a device register, which slows data transfer when polls come too often.
    pub poll_cost_ns: u64,
}

impl DeviceModel {
    #[inline]
    pub fn timing(&self, op: Op) -> &OpTiming {
        match op {
            Op::Read => &self.read,
            Op::Write => &self.write,
        }
    }

    /// The service time of one request, ignoring queueing: what the device "takes".
    #[inline]
    pub fn service_ns(&self, op: Op, bytes: u64) -> u64 {
        self.timing(op).service_ns(bytes)
    }
}

/// Where and when a request is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    pub channel: u32,
    pub start_ns: u64,
    pub complete_ns: u64,
}

/// Channel occupancy: the instant each channel becomes free.
#[derive(Debug, Clone)]
pub struct ChannelSet {
    free_at_ns: Vec<u64>,
}

/// A sane upper bound; more channels than this is a configuration mistake.
pub const CHANNELS_MAX: u32 = 1024;

impl ChannelSet {
    pub fn new(channels: u32) -> Self {
        assert!((1..=CHANNELS_MAX).contains(&channels), "channels out of range: {channels}");
        ChannelSet { free_at_ns: vec![0; channels as usize] }
    }

    /// Places a request arriving at `arrival_ns` needing `service_ns` on the channel that
    /// frees up first, and returns its schedule. Deterministic: ties go to the lowest index.
    pub fn schedule(&mut self, arrival_ns: u64, service_ns: u64) -> Schedule {
        self.schedule_with(arrival_ns, |_, start_ns| {
            start_ns.checked_add(service_ns).expect("a completion instant beyond u64 ns (584 years)")
        })
    }

    /// [`ChannelSet::schedule`] for a device whose service depends on where and when the
    /// request starts (a head position, a fault window): `complete(channel, start_ns)`
    /// returns the completion instant, which occupies the channel until then.
    pub fn schedule_with(&mut self, arrival_ns: u64, complete: impl FnOnce(u32, u64) -> u64) -> Schedule {
        let (index, free_at) = self
            .free_at_ns
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|&(i, t)| (t.max(arrival_ns), i))
            .expect("at least one channel");
        let start_ns = free_at.max(arrival_ns);
        let complete_ns = complete(index as u32, start_ns);
        // Time runs forward on a channel: a request never completes before it starts (a
        // model that says so is wrong, and the channel would free up in the past).
        assert!(complete_ns >= start_ns, "completion at {complete_ns} ns before the start at {start_ns} ns");
        self.free_at_ns[index] = complete_ns;
        Schedule { channel: index as u32, start_ns, complete_ns }
    }

    /// Occupies `channel` for `busy_ns` from `at_ns` (a status poll), delaying what follows.
    pub fn occupy(&mut self, channel: u32, at_ns: u64, busy_ns: u64) {
        let slot = &mut self.free_at_ns[channel as usize];
        *slot = (*slot).max(at_ns).saturating_add(busy_ns);
    }

    /// How many channels.
    pub fn len(&self) -> u32 {
        self.free_at_ns.len() as u32
    }

    /// Never: a set has at least one channel.
    pub fn is_empty(&self) -> bool {
        self.free_at_ns.is_empty()
    }

    /// The instant `channel` becomes free.
    pub fn free_at_ns(&self, channel: u32) -> u64 {
        self.free_at_ns[channel as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(channels: u32) -> DeviceModel {
        DeviceModel {
            read: OpTiming { fixed_ns: 10_000, bandwidth_bytes_per_s: 1_000_000_000 },
            write: OpTiming { fixed_ns: 20_000, bandwidth_bytes_per_s: 500_000_000 },
            channels,
            poll_cost_ns: 0,
        }
    }

    #[test]
    fn service_time_is_fixed_plus_transfer() {
        let m = model(1);
        // 4096 B at 1 GB/s = 4096 ns.
        assert_eq!(m.service_ns(Op::Read, 4096), 14_096);
        // 4096 B at 0.5 GB/s = 8192 ns.
        assert_eq!(m.service_ns(Op::Write, 4096), 28_192);
        // Rounds up: 1 B at 1 GB/s is 1 ns; at 3 B/s it is ceil(1e9/3).
        let slow = OpTiming { fixed_ns: 0, bandwidth_bytes_per_s: 3 };
        assert_eq!(slow.service_ns(1), 333_333_334);
    }

    #[test]
    fn one_channel_queues_requests_back_to_back() {
        let m = model(1);
        let mut ch = ChannelSet::new(1);
        let s = m.service_ns(Op::Read, 4096);
        let a = ch.schedule(0, s);
        let b = ch.schedule(1_000, s);
        let c = ch.schedule(100_000, s);
        assert_eq!(a, Schedule { channel: 0, start_ns: 0, complete_ns: 14_096 });
        assert_eq!(b, Schedule { channel: 0, start_ns: 14_096, complete_ns: 28_192 });
        // Arrives after the channel is idle: starts at arrival.
        assert_eq!(c, Schedule { channel: 0, start_ns: 100_000, complete_ns: 114_096 });
    }

    #[test]
    fn channels_serve_in_parallel_and_ties_go_low() {
        let mut ch = ChannelSet::new(2);
        let a = ch.schedule(0, 10_000);
        let b = ch.schedule(0, 10_000);
        let c = ch.schedule(0, 10_000);
        assert_eq!((a.channel, a.complete_ns), (0, 10_000));
        assert_eq!((b.channel, b.complete_ns), (1, 10_000));
        // Both busy until 10 us; the third waits on channel 0.
        assert_eq!((c.channel, c.start_ns, c.complete_ns), (0, 10_000, 20_000));
        let d = ch.schedule(5_000, 1_000);
        assert_eq!((d.channel, d.start_ns, d.complete_ns), (1, 10_000, 11_000));
    }

    #[test]
    #[should_panic(expected = "before the start")]
    fn a_completion_before_its_start_is_caught() {
        let mut ch = ChannelSet::new(1);
        ch.schedule_with(1_000, |_, start_ns| start_ns - 1);
    }

    #[test]
    #[should_panic(expected = "beyond u64")]
    fn a_completion_past_the_end_of_time_is_caught() {
        let mut ch = ChannelSet::new(1);
        ch.schedule(u64::MAX - 10, 11);
    }

    #[test]
    fn polls_delay_the_channel() {
        let mut ch = ChannelSet::new(1);
        let a = ch.schedule(0, 10_000);
        ch.occupy(a.channel, 2_000, 500);
        assert_eq!(ch.free_at_ns(0), 10_500);
        let b = ch.schedule(0, 1_000);
        assert_eq!(b.start_ns, 10_500);
    }
}
