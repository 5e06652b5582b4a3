//! The device with a queue discipline in explicit time: the requests in service and queued,
//! the look-ahead to the next completion and its rollback ([`Device`]), and the batch
//! reference that knows every arrival in advance ([`simulate_batch`]).

use std::collections::VecDeque;

use super::{Completion, Discipline, Request, Streams, TimeError};
use crate::fault::FaultPlan;
use crate::hdd::HeadState;
use crate::preset::EmuSpec;
use crate::table::Pattern;

#[derive(Debug, Clone, Copy)]
struct Queued {
    req: Request,
    pattern: Pattern,
    /// The discipline's key, computed at arrival (lower is served first).
    key: u64,
    /// Arrival order, the tie-break.
    seq: u64,
}

#[derive(Debug, Clone, Copy)]
struct InService {
    q: Queued,
    start_ns: u64,
    complete_ns: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Channel {
    busy: Option<InService>,
    head: HeadState,
}

/// The rules both the incremental and the batch simulation follow.
#[derive(Debug, Clone)]
struct Core {
    spec: EmuSpec,
    discipline: Discipline,
    now_ns: u64,
    channels: Vec<Channel>,
    /// Each channel's completion instant, u64::MAX when idle: the same as `channels[i].busy`,
    /// kept apart so that finding the next completion or an idle channel reads one cache
    /// line (the replay loop asks twice per request).
    done_at: Vec<u64>,
    queue: VecDeque<Queued>,
    streams: Streams,
    seq: u64,
    faults: FaultPlan,
}

impl Core {
    fn new(spec: EmuSpec, discipline: Discipline, faults: FaultPlan) -> Core {
        let channels = vec![Channel::default(); spec.model.channels as usize];
        let done_at = vec![u64::MAX; channels.len()];
        Core {
            spec,
            discipline,
            now_ns: 0,
            channels,
            done_at,
            queue: VecDeque::new(),
            streams: Streams::default(),
            seq: 0,
            faults,
        }
    }

    #[inline]
    fn start(&mut self, channel: usize, q: Queued, start_ns: u64) {
        let ch = &mut self.channels[channel];
        let service = self.spec.service_at_ns(q.req.op, q.req.offset, q.req.bytes, q.pattern, &mut ch.head, start_ns);
        let complete_ns = if self.faults.is_empty() {
            start_ns + service
        } else {
            self.faults.stalled_ns(start_ns + self.faults.spiked_ns(start_ns, service))
        };
        ch.busy = Some(InService { q, start_ns, complete_ns });
        self.done_at[channel] = complete_ns;
    }

    /// Puts a channel back as it was (a rollback).
    fn restore(&mut self, channel: usize, before: Channel) {
        self.channels[channel] = before;
        self.done_at[channel] = before.busy.map_or(u64::MAX, |s| s.complete_ns);
    }

    /// The busy channel that completes first (ties to the lowest index).
    #[inline]
    fn earliest(&self) -> Option<(usize, u64)> {
        let (mut index, mut best) = (0, u64::MAX);
        for (i, &t) in self.done_at.iter().enumerate() {
            if t < best {
                (index, best) = (i, t);
            }
        }
        (best != u64::MAX).then_some((index, best))
    }

    /// The queue index the discipline serves next.
    #[inline]
    fn pick(&self) -> Option<usize> {
        if self.queue.is_empty() {
            return None;
        }
        if self.discipline == Discipline::Fcfs {
            return Some(0);
        }
        let mut best = 0;
        for (i, q) in self.queue.iter().enumerate().skip(1) {
            let b = &self.queue[best];
            if (q.key, q.seq) < (b.key, b.seq) {
                best = i;
            }
        }
        Some(best)
    }

    #[inline]
    fn arrive(&mut self, req: Request) {
        // The model's clock only runs forward: [`Device::submit`] refuses an arrival in the
        // past with an error, and [`simulate_batch`] takes arrivals sorted; an arrival
        // before `now_ns` here would start a request before its channel's last event.
        assert!(
            req.arrival_ns >= self.now_ns,
            "arrival at {} ns before the model's time {} ns (arrivals must be in time order)",
            req.arrival_ns,
            self.now_ns
        );
        self.now_ns = req.arrival_ns;
        let pattern = self.streams.classify(req.stream, req.offset, req.bytes);
        let key = match self.discipline {
            Discipline::Fcfs => 0,
            Discipline::Sjf => self.spec.pattern_service_ns(req.op, pattern, req.bytes),
            Discipline::Priority => u64::from(u8::MAX - req.priority),
        };
        let q = Queued { req, pattern, key, seq: self.seq };
        self.seq += 1;
        match self.done_at.iter().position(|&t| t == u64::MAX) {
            Some(i) => self.start(i, q, req.arrival_ns),
            None => self.queue.push_back(q),
        }
    }

    /// Completes the request on `channel` and dispatches the next one to it. Returns the
    /// completion and the queue entry it took (index, entry) so that it can be undone.
    #[inline]
    fn complete(&mut self, channel: usize) -> (Completion, Option<(usize, Queued)>) {
        let s = self.channels[channel].busy.take().expect("complete() on a busy channel");
        debug_assert!(s.complete_ns >= self.now_ns, "a completion in the model's past");
        self.done_at[channel] = u64::MAX;
        self.now_ns = s.complete_ns;
        let done = Completion {
            id: s.q.req.id,
            op: s.q.req.op,
            bytes: s.q.req.bytes,
            pattern: s.q.pattern,
            channel: channel as u32,
            arrival_ns: s.q.req.arrival_ns,
            start_ns: s.start_ns,
            complete_ns: s.complete_ns,
            error: !self.faults.is_empty()
                && self.faults.fails(s.q.req.id, s.q.req.op, s.q.req.offset, s.q.req.bytes, s.q.req.arrival_ns),
        };
        let taken = self.dispatch(channel, s.complete_ns);
        (done, taken)
    }

    /// Starts the queued request the discipline picks on the freed `channel`.
    #[inline]
    fn dispatch(&mut self, channel: usize, at_ns: u64) -> Option<(usize, Queued)> {
        let i = self.pick()?;
        // FCFS takes the front: a pop, not a general removal (the common case, and the
        // replay loop's hot path).
        let q = if i == 0 { self.queue.pop_front() } else { self.queue.remove(i) }.expect("picked index exists");
        self.start(channel, q, at_ns);
        Some((i, q))
    }
}

/// What one look-ahead step changed, to roll it back.
#[derive(Debug, Clone, Copy)]
struct Ahead {
    completion: Completion,
    channel: usize,
    channel_before: Channel,
    taken: Option<(usize, Queued)>,
    now_before_ns: u64,
}

/// The incremental device: arrivals one at a time, look-ahead, rollback.
#[derive(Debug, Clone)]
pub struct Device {
    core: Core,
    ahead: Option<Ahead>,
    rollbacks: u64,
}

impl Device {
    pub fn new(spec: EmuSpec, discipline: Discipline) -> Device {
        Self::with_faults(spec, discipline, FaultPlan::default())
    }

    /// A device that injects the plan's faults (validate the plan first).
    pub fn with_faults(spec: EmuSpec, discipline: Discipline, faults: FaultPlan) -> Device {
        Device { core: Core::new(spec, discipline, faults), ahead: None, rollbacks: 0 }
    }

    pub fn spec(&self) -> &EmuSpec {
        &self.core.spec
    }

    /// How many times an arrival undid a look-ahead.
    pub fn rollbacks(&self) -> u64 {
        self.rollbacks
    }

    /// Requests in service or queued.
    pub fn outstanding(&self) -> usize {
        // A look-ahead completed one request the caller has not taken yet.
        self.core.queue.len()
            + self.core.channels.iter().filter(|c| c.busy.is_some()).count()
            + usize::from(self.ahead.is_some())
    }

    fn undo(&mut self) {
        if let Some(a) = self.ahead.take() {
            if let Some((i, q)) = a.taken {
                self.core.queue.insert(i, q);
            }
            self.core.restore(a.channel, a.channel_before);
            self.core.now_ns = a.now_before_ns;
        }
    }

    /// Simulates ahead to the next completion and returns its instant (None when idle).
    pub fn next_completion_ns(&mut self) -> Option<u64> {
        if self.ahead.is_none() {
            let (channel, _) = self.core.earliest()?;
            let channel_before = self.core.channels[channel];
            let now_before_ns = self.core.now_ns;
            let (completion, taken) = self.core.complete(channel);
            self.ahead = Some(Ahead { completion, channel, channel_before, taken, now_before_ns });
        }
        self.ahead.map(|a| a.completion.complete_ns)
    }

    /// The next completion's instant without simulating ahead: the earliest request in
    /// service completes first (a queued one starts only when a channel frees). A driver
    /// that knows its next arrival compares with this and never needs a rollback.
    #[inline]
    pub fn peek_completion_ns(&self) -> Option<u64> {
        match self.ahead {
            Some(a) => Some(a.completion.complete_ns),
            None => self.core.earliest().map(|(_, t)| t),
        }
    }

    /// Commits and returns the next completion (the caller promises no arrival before it).
    #[inline]
    pub fn take_completion(&mut self) -> Option<Completion> {
        if let Some(a) = self.ahead.take() {
            return Some(a.completion);
        }
        // Nothing looked ahead: complete directly, with nothing to remember for a rollback.
        let (channel, _) = self.core.earliest()?;
        Some(self.core.complete(channel).0)
    }

    /// A request arrives. A look-ahead past its arrival is rolled back first.
    #[inline]
    pub fn submit(&mut self, req: Request) -> Result<(), TimeError> {
        if let Some(a) = self.ahead {
            if req.arrival_ns < a.completion.complete_ns {
                self.undo();
                self.rollbacks += 1;
            } else {
                return Err(TimeError::CompletionPending {
                    arrival_ns: req.arrival_ns,
                    completion_ns: a.completion.complete_ns,
                });
            }
        }
        if req.arrival_ns < self.core.now_ns {
            return Err(TimeError::ArrivalInPast { arrival_ns: req.arrival_ns, now_ns: self.core.now_ns });
        }
        self.core.arrive(req);
        Ok(())
    }
}

/// The reference: every arrival known in advance, no look-ahead, no rollback. Arrivals must
/// be sorted by time.
pub fn simulate_batch(spec: &EmuSpec, discipline: Discipline, arrivals: &[Request]) -> Vec<Completion> {
    simulate_batch_with_faults(spec, discipline, arrivals, &FaultPlan::default())
}

/// [`simulate_batch`] with a fault plan.
pub fn simulate_batch_with_faults(
    spec: &EmuSpec,
    discipline: Discipline,
    arrivals: &[Request],
    faults: &FaultPlan,
) -> Vec<Completion> {
    let mut core = Core::new(spec.clone(), discipline, faults.clone());
    let mut out = Vec::with_capacity(arrivals.len());
    let mut next = 0;
    loop {
        let c = core.earliest();
        let a = arrivals.get(next);
        match (c, a) {
            (Some((ch, t)), Some(r)) if t <= r.arrival_ns => out.push(core.complete(ch).0),
            (_, Some(r)) => {
                core.arrive(*r);
                next += 1;
            }
            (Some((ch, _)), None) => out.push(core.complete(ch).0),
            (None, None) => return out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::req;
    use super::*;
    use crate::model::Op;
    use crate::preset::parse_spec;
    use proptest::prelude::*;

    /// The paper's server loop: after every event simulate ahead; an arrival before the
    /// predicted completion rolls it back.
    fn incremental(
        spec: &EmuSpec,
        discipline: Discipline,
        arrivals: &[Request],
        faults: &FaultPlan,
    ) -> (Vec<Completion>, u64) {
        let mut dev = Device::with_faults(spec.clone(), discipline, faults.clone());
        let mut out = Vec::new();
        let mut next = 0;
        loop {
            let c = dev.next_completion_ns();
            match (c, arrivals.get(next)) {
                (Some(t), Some(r)) if t <= r.arrival_ns => out.push(dev.take_completion().unwrap()),
                (_, Some(r)) => {
                    dev.submit(*r).unwrap();
                    next += 1;
                }
                (Some(_), None) => out.push(dev.take_completion().unwrap()),
                (None, None) => return (out, dev.rollbacks()),
            }
        }
    }

    #[test]
    fn sdcard_ch1_reproduces_every_row_of_the_seed_table() {
        let spec = parse_spec("emu:sdcard").unwrap();
        for row in crate::table::SDCARD_ROWS {
            for (op, pattern) in [
                (Op::Read, Pattern::Random),
                (Op::Write, Pattern::Random),
                (Op::Read, Pattern::Sequential),
                (Op::Write, Pattern::Sequential),
            ] {
                // QD1: each request arrives when the previous completes; random requests
                // jump, sequential ones continue.
                let mut dev = Device::new(spec.clone(), Discipline::Fcfs);
                let mut t = 0;
                let mut total = 0;
                let n = 16u64;
                for i in 0..n {
                    let offset = match pattern {
                        Pattern::Sequential => i * row.size_bytes,
                        Pattern::Random => (i * 7919 % 1000) * (1 << 20),
                    };
                    dev.submit(req(i, t, op, offset, row.size_bytes, 0)).unwrap();
                    let c = dev.take_completion().unwrap();
                    // The first sequential request has no predecessor: it is random.
                    if pattern == Pattern::Random || i > 0 {
                        assert_eq!(c.pattern, pattern);
                        total += c.complete_ns - c.arrival_ns;
                    }
                    t = c.complete_ns;
                }
                let counted = if pattern == Pattern::Random { n } else { n - 1 };
                assert_eq!(
                    total / counted,
                    row.latency_ns[crate::table::column(op, pattern)],
                    "{row:?} {op:?} {pattern:?}"
                );
                assert_eq!(total % counted, 0);
            }
        }
    }

    #[test]
    fn sjf_arrival_rolls_back_a_look_ahead() {
        let spec = parse_spec("emu:sdcard").unwrap();
        let mut dev = Device::new(spec, Discipline::Sjf);
        // A random write occupies the channel for 1.16 ms; a second write queues.
        dev.submit(req(0, 0, Op::Write, 0, 4096, 0)).unwrap();
        dev.submit(req(1, 10, Op::Write, 1 << 20, 4096, 0)).unwrap();
        // Looking ahead completes #0 and dispatches #1 at 1.16 ms.
        assert_eq!(dev.next_completion_ns(), Some(1_160_100));
        // A short read arrives before that: SJF must serve it before #1.
        dev.submit(req(2, 20, Op::Read, 2 << 20, 4096, 0)).unwrap();
        assert_eq!(dev.rollbacks(), 1);
        let order: Vec<u64> = std::iter::from_fn(|| dev.take_completion()).map(|c| c.id).collect();
        assert_eq!(order, vec![0, 2, 1]);
        // FCFS would have kept the arrival order.
        let fcfs = simulate_batch(
            &parse_spec("emu:sdcard").unwrap(),
            Discipline::Fcfs,
            &[
                req(0, 0, Op::Write, 0, 4096, 0),
                req(1, 10, Op::Write, 1 << 20, 4096, 0),
                req(2, 20, Op::Read, 2 << 20, 4096, 0),
            ],
        );
        assert_eq!(fcfs.iter().map(|c| c.id).collect::<Vec<_>>(), vec![0, 1, 2]);
    }

    #[test]
    fn peek_agrees_with_the_look_ahead() {
        let mut dev = Device::new(parse_spec("emu:hdd,channels=2,queue=sjf").unwrap(), Discipline::Sjf);
        for i in 0..6 {
            dev.submit(req(i, i * 10, Op::Read, i * (100 << 20), 4096, 0)).unwrap();
        }
        while let Some(t) = dev.peek_completion_ns() {
            assert_eq!(dev.next_completion_ns(), Some(t));
            assert_eq!(dev.peek_completion_ns(), Some(t));
            assert_eq!(dev.take_completion().unwrap().complete_ns, t);
        }
        assert_eq!(dev.outstanding(), 0);
    }

    #[test]
    fn misuse_is_a_typed_error() {
        let mut dev = Device::new(parse_spec("emu:nvme").unwrap(), Discipline::Fcfs);
        dev.submit(req(0, 1_000, Op::Read, 0, 4096, 0)).unwrap();
        let t = dev.next_completion_ns().unwrap();
        assert!(matches!(dev.submit(req(1, t + 1, Op::Read, 0, 4096, 0)), Err(TimeError::CompletionPending { .. })));
        dev.take_completion().unwrap();
        assert!(matches!(dev.submit(req(1, 5, Op::Read, 0, 4096, 0)), Err(TimeError::ArrivalInPast { .. })));
    }

    #[test]
    #[should_panic(expected = "arrivals must be in time order")]
    fn a_batch_with_arrivals_out_of_time_order_is_caught() {
        // Unsorted, the batch would serve the second request before the model's clock.
        let spec = parse_spec("emu:nvme").unwrap();
        let arrivals = [req(0, 50_000, Op::Read, 0, 4096, 0), req(1, 10_000, Op::Read, 4096, 4096, 0)];
        simulate_batch(&spec, Discipline::Fcfs, &arrivals);
    }

    fn arrivals_strategy() -> impl Strategy<Value = Vec<(u64, bool, u64, u8, u8, bool)>> {
        // (gap, write, offset block, size shift, priority, continue previous)
        prop::collection::vec((0u64..3_000_000, any::<bool>(), 0u64..2048, 0u8..5, 0u8..4, any::<bool>()), 1..60)
    }

    fn build(raw: &[(u64, bool, u64, u8, u8, bool)]) -> Vec<Request> {
        let mut t = 0;
        let mut last_end = 0;
        raw.iter()
            .enumerate()
            .map(|(i, &(gap, write, block, shift, priority, cont))| {
                // Many arrivals at the same instant too: gap 0 is common at small values.
                t += if gap < 300_000 { 0 } else { gap / 100 };
                let bytes = 512u64 << (shift * 2);
                let offset = if cont { last_end } else { block * 65536 };
                last_end = offset + bytes;
                Request {
                    id: i as u64,
                    arrival_ns: t,
                    op: if write { Op::Write } else { Op::Read },
                    offset,
                    bytes,
                    priority,
                    stream: 0,
                }
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
        #[test]
        fn rollback_equals_batch_for_every_model(raw in arrivals_strategy()) {
            let arrivals = build(&raw);
            for name in ["nvram", "optane", "nvme", "sata-ssd", "hdd", "sdcard"] {
                for channels in [1, 3] {
                    for discipline in [Discipline::Fcfs, Discipline::Sjf, Discipline::Priority] {
                        let spec = parse_spec(&format!("emu:{name},channels={channels},speedup=2")).unwrap();
                        let batch = simulate_batch(&spec, discipline, &arrivals);
                        let (inc, _) = incremental(&spec, discipline, &arrivals, &FaultPlan::default());
                        prop_assert_eq!(batch.len(), arrivals.len());
                        prop_assert_eq!(&inc, &batch, "{} ch{} {:?}", name, channels, discipline);
                    }
                }
            }
        }
    }

    #[test]
    fn rollbacks_happen_in_the_property_workload() {
        // Guard against a vacuous property: the incremental path does roll back.
        let raw: Vec<_> = (0..50u64)
            .map(|i| (i * 997 % 3_000_000, i % 2 == 0, i * 31 % 2048, (i % 5) as u8, (i % 4) as u8, i % 3 == 0))
            .collect();
        let arrivals = build(&raw);
        let spec = parse_spec("emu:sdcard,channels=2").unwrap();
        let (inc, rollbacks) = incremental(&spec, Discipline::Sjf, &arrivals, &FaultPlan::default());
        assert!(rollbacks > 0);
        assert_eq!(inc, simulate_batch(&spec, Discipline::Sjf, &arrivals));
        // With faults too: spikes and stalls move instants, errors mark requests, and the
        // rollback still agrees with the batch.
        let plan = FaultPlan {
            seed: 9,
            errors: vec![crate::fault::ErrorRule { op: None, range: None, window_ns: None, probability: 0.3 }],
            spikes: vec![crate::fault::Spike { start_ns: 0, end_ns: 200_000, factor: 4.0 }],
            stalls: vec![crate::fault::Stall { start_ns: 300_000, duration_ns: 2_000_000 }],
        };
        let (inc, _) = incremental(&spec, Discipline::Sjf, &arrivals, &plan);
        let batch = simulate_batch_with_faults(&spec, Discipline::Sjf, &arrivals, &plan);
        assert_eq!(inc, batch);
        assert!(batch.iter().any(|c| c.error) && batch.iter().any(|c| !c.error));
        let inside: Vec<_> = batch.iter().filter(|c| (300_000..2_300_000).contains(&c.complete_ns)).collect();
        assert!(inside.is_empty(), "{inside:?}");
        assert_ne!(batch, simulate_batch(&spec, Discipline::Sjf, &arrivals));
    }
}
