//! The real-time device under FCFS ([`FcfsDevice`]): each request takes the channel of the
//! model's [`ChannelSet`] that frees first, its completion fixed at arrival.

use smartcon_util::error::Error;

use super::{fcfs_channels, Streams};
use crate::fault::FaultPlan;
use crate::hdd::HeadState;
use crate::model::{ChannelSet, Op, Schedule};
use crate::preset::EmuSpec;

/// The real-time form for FCFS: each request takes the channel that frees first (ties to
/// the lowest index) and its completion is fixed at arrival. One stream (the device's).
/// With a fault plan, its windows count from `origin_ns` and requests are numbered in
/// arrival order for the error draw (deterministic with one submitting thread).
#[derive(Debug, Clone)]
pub struct FcfsDevice {
    spec: EmuSpec,
    channels: ChannelSet,
    heads: Vec<HeadState>,
    streams: Streams,
    faults: FaultPlan,
    origin_ns: u64,
    next_id: u64,
}

impl FcfsDevice {
    pub fn new(spec: EmuSpec) -> Result<FcfsDevice, Error> {
        Self::with_faults(spec, FaultPlan::default(), 0)
    }

    /// A device that injects the plan's faults, its windows counted from `origin_ns`
    /// (validate the plan first).
    pub fn with_faults(spec: EmuSpec, faults: FaultPlan, origin_ns: u64) -> Result<FcfsDevice, Error> {
        let n = fcfs_channels(
            &spec,
            "needs the virtual-time replay (smartcon emulate replay); real time serves FCFS only",
        )?;
        Ok(FcfsDevice {
            channels: ChannelSet::new(spec.model.channels),
            spec,
            heads: vec![HeadState::default(); n],
            streams: Streams::default(),
            faults,
            origin_ns,
            next_id: 0,
        })
    }

    /// Places a request; arrivals may come slightly out of order from racing threads, so an
    /// arrival is never earlier than the latest start it could follow.
    pub fn schedule(&mut self, op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> Schedule {
        self.schedule_checked(op, offset, bytes, arrival_ns).0
    }

    /// [`FcfsDevice::schedule`], and whether the fault plan fails the request (it still
    /// takes its time on the channel, as a device reports an error at completion).
    pub fn schedule_checked(&mut self, op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> (Schedule, bool) {
        let pattern = self.streams.classify(0, offset, bytes);
        let id = self.next_id;
        self.next_id += 1;
        let (spec, heads, faults, origin_ns) = (&self.spec, &mut self.heads, &self.faults, self.origin_ns);
        let schedule = self.channels.schedule_with(arrival_ns, |channel, start_ns| {
            let service = spec.service_at_ns(op, offset, bytes, pattern, &mut heads[channel as usize], start_ns);
            if faults.is_empty() {
                start_ns + service
            } else {
                // The plan's windows are relative to the origin (the target's opening).
                let at = start_ns.saturating_sub(origin_ns);
                let spiked = faults.spiked_ns(at, service);
                (faults.stalled_ns(at + spiked) + origin_ns).max(start_ns + spiked)
            }
        });
        let failed = !self.faults.is_empty()
            && self.faults.fails(id, op, offset, bytes, arrival_ns.saturating_sub(self.origin_ns));
        (schedule, failed)
    }

    /// Occupies `channel` for `busy_ns` from `at_ns` (a status poll), delaying what follows.
    pub fn occupy(&mut self, channel: u32, at_ns: u64, busy_ns: u64) {
        self.channels.occupy(channel, at_ns, busy_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{req, simulate_batch, Discipline, Request};
    use super::*;
    use crate::preset::parse_spec;

    #[test]
    fn fcfs_device_matches_the_event_simulation() {
        // The engine's real-time scheduler and the DES agree under FCFS, for every model.
        for text in ["emu:sdcard,channels=4", "emu:hdd", "emu:nvme", "emu:hdd,channels=2,speedup=3"] {
            let spec = parse_spec(text).unwrap();
            let mut arrivals: Vec<Request> = (0..200u64)
                .map(|i| {
                    req(
                        i,
                        i * 3_000 + (i * 7 % 5) * 100_000,
                        if i % 3 == 0 { Op::Write } else { Op::Read },
                        (i * 104_729 % 4096) * 4096 * (i % 2) + i * 4096 * ((i + 1) % 2),
                        4096 << (i % 3),
                        0,
                    )
                })
                .collect();
            arrivals.sort_by_key(|r| r.arrival_ns);
            let batch = simulate_batch(&spec, Discipline::Fcfs, &arrivals);
            let mut fcfs = FcfsDevice::new(spec.clone()).unwrap();
            for r in &arrivals {
                let c = batch.iter().find(|c| c.id == r.id).expect("every request completes");
                let s = fcfs.schedule(r.op, r.offset, r.bytes, r.arrival_ns);
                assert_eq!(
                    (s.channel, s.start_ns, s.complete_ns),
                    (c.channel, c.start_ns, c.complete_ns),
                    "{text} #{}",
                    r.id
                );
            }
        }
        assert!(FcfsDevice::new(parse_spec("emu:nvme,queue=sjf").unwrap()).is_err());
    }

    /// FcfsDevice's scheduler as it was before it was built on [`ChannelSet`] (its own copy
    /// of the channel choice), kept here as the reference the new form must match.
    struct FcfsBefore {
        spec: EmuSpec,
        free_at_ns: Vec<u64>,
        heads: Vec<HeadState>,
        streams: Streams,
        faults: FaultPlan,
        origin_ns: u64,
        next_id: u64,
    }

    impl FcfsBefore {
        fn schedule_checked(&mut self, op: Op, offset: u64, bytes: u64, arrival_ns: u64) -> (Schedule, bool) {
            let (index, free_at) = self
                .free_at_ns
                .iter()
                .copied()
                .enumerate()
                .min_by_key(|&(i, t)| (t.max(arrival_ns), i))
                .expect("at least one channel");
            let pattern = self.streams.classify(0, offset, bytes);
            let start_ns = free_at.max(arrival_ns);
            let service = self.spec.service_at_ns(op, offset, bytes, pattern, &mut self.heads[index], start_ns);
            let id = self.next_id;
            self.next_id += 1;
            let (complete_ns, failed) = if self.faults.is_empty() {
                (start_ns + service, false)
            } else {
                let at = |t: u64| t.saturating_sub(self.origin_ns);
                let spiked = self.faults.spiked_ns(at(start_ns), service);
                let complete = self.faults.stalled_ns(at(start_ns) + spiked) + self.origin_ns;
                (complete.max(start_ns + spiked), self.faults.fails(id, op, offset, bytes, at(arrival_ns)))
            };
            self.free_at_ns[index] = complete_ns;
            (Schedule { channel: index as u32, start_ns, complete_ns }, failed)
        }

        fn occupy(&mut self, channel: u32, at_ns: u64, busy_ns: u64) {
            let slot = &mut self.free_at_ns[channel as usize];
            *slot = (*slot).max(at_ns) + busy_ns;
        }
    }

    #[test]
    fn fcfs_device_on_channel_set_keeps_the_schedule_it_had() {
        // A seeded stream as racing submitters make it: arrivals mostly in order but some a
        // little early, sequential runs and random jumps, reads and writes of 512 B to
        // 256 KiB, status polls in between; with and without a fault plan, over every kind of
        // model (HDD heads, SD-card table, NVMe channels).
        let plan = crate::fault::parse_scenario(
            "seed = 11\n[[error]]\nop = \"write\"\nprobability = 0.2\n\
             [[spike]]\nstart = \"1ms\"\nend = \"3ms\"\nfactor = 2.5\n\
             [[stall]]\nstart = \"4ms\"\nduration = \"300us\"\n",
        )
        .unwrap();
        for text in ["emu:sdcard,channels=4", "emu:hdd", "emu:hdd,channels=2,speedup=3", "emu:nvme", "emu:optane"] {
            for faults in [FaultPlan::default(), plan.clone()] {
                let seed = 0x5eed ^ text.len() as u64 ^ faults.is_empty() as u64;
                let mut rng = smartcon_util::rng::Rng::new(seed);
                let spec = parse_spec(text).unwrap();
                let origin_ns = 250_000;
                let mut now = FcfsDevice::with_faults(spec.clone(), faults.clone(), origin_ns).unwrap();
                let mut before = FcfsBefore {
                    spec: spec.clone(),
                    free_at_ns: vec![0; spec.model.channels as usize],
                    heads: vec![HeadState::default(); spec.model.channels as usize],
                    streams: Streams::default(),
                    faults,
                    origin_ns,
                    next_id: 0,
                };
                let (mut t, mut next_offset) = (origin_ns, 0u64);
                let mut failures = 0;
                for i in 0..3_000 {
                    t += rng.below(40_000);
                    let arrival = t.saturating_sub(if rng.percent(10) { rng.below(5_000) } else { 0 });
                    let op = if rng.percent(30) { Op::Write } else { Op::Read };
                    let bytes = 512 << rng.below(10);
                    let offset = if rng.percent(50) { next_offset } else { rng.below(1 << 20) * 4096 };
                    next_offset = offset + bytes;
                    let a = now.schedule_checked(op, offset, bytes, arrival);
                    let b = before.schedule_checked(op, offset, bytes, arrival);
                    assert_eq!(a, b, "{text} seed {seed:#x} request {i}");
                    failures += a.1 as u32;
                    if rng.percent(5) {
                        now.occupy(a.0.channel, a.0.start_ns, 700);
                        before.occupy(b.0.channel, b.0.start_ns, 700);
                    }
                }
                // The fault plan was exercised (its write errors drawn), not skipped.
                assert_eq!(failures > 0, !before.faults.is_empty(), "{text}");
            }
        }
    }

    #[test]
    fn fcfs_device_applies_the_plan_from_its_origin() {
        use crate::fault::{ErrorRule, Spike, Stall};
        let spec = parse_spec("emu:nvram,lat=1us,bw=1t,channels=1").unwrap();
        // 1 us + 4 ns of transfer.
        let origin = 1_000_000;
        let plan = FaultPlan {
            seed: 1,
            errors: vec![ErrorRule {
                op: Some(Op::Write),
                range: Some((8192, 12288)),
                window_ns: None,
                probability: 1.0,
            }],
            spikes: vec![Spike { start_ns: 10_000, end_ns: 20_000, factor: 5.0 }],
            stalls: vec![Stall { start_ns: 30_000, duration_ns: 50_000 }],
        };
        let mut dev = FcfsDevice::with_faults(spec, plan, origin).unwrap();
        let (s, failed) = dev.schedule_checked(Op::Read, 0, 4096, origin);
        assert_eq!((s.complete_ns - origin, failed), (1_004, false));
        // A write on the failing range fails (reads there do not).
        assert!(dev.schedule_checked(Op::Write, 8192, 4096, origin + 2_000).1);
        assert!(!dev.schedule_checked(Op::Read, 8192, 4096, origin + 4_000).1);
        // Inside the spike window: five times as long.
        let (s, _) = dev.schedule_checked(Op::Read, 0, 4096, origin + 10_000);
        assert_eq!(s.complete_ns - origin, 15_020);
        // Completing inside the stall: out at its end, and the channel stays busy until then.
        let (s, _) = dev.schedule_checked(Op::Read, 0, 4096, origin + 30_000);
        assert_eq!(s.complete_ns - origin, 80_000);
        let (s, _) = dev.schedule_checked(Op::Read, 0, 4096, origin + 31_000);
        assert_eq!(s.complete_ns - origin, 81_004);
    }
}
