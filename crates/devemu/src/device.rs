//! A stateful device in explicit time: channels, a queue discipline, per-channel heads,
//! look-ahead to the next completion and rollback (the fifth seed's emulator server).
//!
//! The state is the set of requests in service (one per channel), the queue of requests
//! waiting for a channel, and each channel's head. Requests are dispatched to the lowest
//! idle channel when they arrive, and when a channel frees up the discipline picks the next
//! queued request for it (FCFS: the oldest; SJF: the shortest nominal service; priority:
//! the highest priority, then the oldest). Service is not preemptive.
//!
//! [`Device::next_completion_ns`] simulates ahead: it completes the earliest request in
//! service and dispatches the next queued one to its channel, remembering what it changed.
//! If a request then arrives before that instant, it could have changed the dispatch (a
//! shorter job, a higher priority) or completes earlier on a free channel, so
//! [`Device::submit`] rolls the state back to the arrival instant and re-simulates from
//! there. Events at the same instant: completions first (lowest channel first), then
//! arrivals. [`simulate_batch`] runs the same rules knowing every arrival in advance; the
//! property test holds the two equal.
//!
//! [`FcfsDevice`] is the real-time form: with FCFS a request's completion is fixed when it
//! arrives (it takes the channel that frees first), so the engine gets its instant at
//! submission without look-ahead.
//!
//! Non-goals: preemption, and queue limits (the caller bounds its queue depth).

use std::collections::VecDeque;

use serde::Serialize;
use smartcon_util::error::Error;

use crate::fault::FaultPlan;
use crate::hdd::HeadState;
use crate::model::{ChannelSet, Op, Schedule};
use crate::preset::EmuSpec;
use crate::table::Pattern;
use crate::usage;

/// How queued requests are picked when a channel frees up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Discipline {
    #[default]
    Fcfs,
    /// Shortest (nominal) job first.
    Sjf,
    /// Highest `priority` first, FCFS among equals.
    Priority,
}

impl Discipline {
    pub fn name(self) -> &'static str {
        match self {
            Discipline::Fcfs => "fcfs",
            Discipline::Sjf => "sjf",
            Discipline::Priority => "priority",
        }
    }

    pub fn parse(text: &str) -> Option<Discipline> {
        match text {
            "fcfs" => Some(Discipline::Fcfs),
            "sjf" => Some(Discipline::Sjf),
            "priority" => Some(Discipline::Priority),
            _ => None,
        }
    }
}

/// A request as the device sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    pub arrival_ns: u64,
    pub op: Op,
    pub offset: u64,
    pub bytes: u64,
    /// Higher is served first under [`Discipline::Priority`].
    pub priority: u8,
    /// Sequential detection is per stream (a thread, a file, a process).
    pub stream: u32,
}

/// A finished request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Completion {
    pub id: u64,
    pub op: Op,
    pub bytes: u64,
    pub pattern: Pattern,
    pub channel: u32,
    pub arrival_ns: u64,
    pub start_ns: u64,
    pub complete_ns: u64,
    /// The fault plan failed this request (it still took its time).
    pub error: bool,
}

/// Misuse of the explicit-time interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimeError {
    /// An arrival earlier than an instant the device already committed.
    ArrivalInPast { arrival_ns: u64, now_ns: u64 },
    /// An arrival after the looked-ahead completion, which must be taken first.
    CompletionPending { arrival_ns: u64, completion_ns: u64 },
}

impl std::fmt::Display for TimeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TimeError::ArrivalInPast { arrival_ns, now_ns } => {
                write!(f, "arrival at {arrival_ns} ns is before the device's time {now_ns} ns")
            }
            TimeError::CompletionPending { arrival_ns, completion_ns } => {
                write!(f, "arrival at {arrival_ns} ns: take the completion at {completion_ns} ns first")
            }
        }
    }
}

impl std::error::Error for TimeError {}

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

/// Per-stream sequential detection: the byte after the stream's last request.
#[derive(Debug, Clone, Default)]
struct Streams {
    last_end: Vec<Option<u64>>,
}

impl Streams {
    #[inline]
    fn classify(&mut self, stream: u32, offset: u64, bytes: u64) -> Pattern {
        let i = stream as usize;
        if i >= self.last_end.len() {
            self.last_end.resize(i + 1, None);
        }
        let pattern = if self.last_end[i] == Some(offset) { Pattern::Sequential } else { Pattern::Random };
        self.last_end[i] = Some(offset + bytes);
        pattern
    }
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

/// A request whose completion is fixed, waiting for it (in [`VirtualFcfs`]).
#[derive(Debug, Clone, Copy)]
struct Pending {
    id: u64,
    arrival_ns: u64,
    start_ns: u64,
    complete_ns: u64,
    bytes: u64,
    op: Op,
    pattern: Pattern,
    error: bool,
}

/// Service times of a model whose service depends only on (op, pattern, size): the last
/// size asked for each op and pattern, with its time (a trace or a job repeats its sizes,
/// and the model's time costs a 64-bit division).
#[derive(Debug, Clone)]
struct ServiceMemo {
    /// (bytes, service ns) per [op][pattern]; u64::MAX bytes: nothing yet.
    last: [[(u64, u64); 2]; 2],
    /// The model moves no head: its service is a function of (op, pattern, bytes).
    pure: bool,
}

impl ServiceMemo {
    fn new(spec: &EmuSpec) -> ServiceMemo {
        ServiceMemo { last: [[(u64::MAX, 0); 2]; 2], pure: !matches!(spec.mechanism, crate::Mechanism::Hdd(_)) }
    }

    #[inline(always)]
    fn service_ns(
        &mut self,
        spec: &EmuSpec,
        req: &Request,
        pattern: Pattern,
        head: &mut HeadState,
        start_ns: u64,
    ) -> u64 {
        let (op, offset, bytes) = (req.op, req.offset, req.bytes);
        if !self.pure {
            return spec.service_at_ns(op, offset, bytes, pattern, head, start_ns);
        }
        let slot = &mut self.last[op as usize][pattern as usize];
        if slot.0 != bytes {
            *slot = (bytes, spec.service_at_ns(op, offset, bytes, pattern, head, start_ns));
        }
        slot.1
    }
}

/// The virtual-time device under FCFS, as [`Device`] gives it but cheaper: with FCFS a
/// request's channel, start and completion are fixed when it arrives (it takes the channel
/// that frees first, ties to the lowest index, as [`FcfsDevice`] places it), so there is no
/// queue to dispatch from and nothing to look ahead or roll back. Each channel keeps its
/// requests in a FIFO (they complete in the order they were given to it); the next
/// completion is the earliest channel's first one, ties to the lowest channel, which is the
/// order in which [`Device`] completes them. The replay's test holds every I/O equal to
/// [`Device`]'s, with and without faults.
#[derive(Debug, Clone)]
pub struct VirtualFcfs {
    spec: EmuSpec,
    faults: FaultPlan,
    streams: Streams,
    heads: Vec<HeadState>,
    /// The instant each channel finishes the last request given to it.
    free_at: Vec<u64>,
    /// The completion instant of each channel's first waiting request (u64::MAX: none).
    first_done: Vec<u64>,
    waiting: Vec<VecDeque<Pending>>,
    /// The earliest of `first_done` and its channel (lowest on ties).
    next: (u64, usize),
    now_ns: u64,
    memo: ServiceMemo,
}

/// The one check of the devices that serve FCFS only ([`VirtualFcfs`], [`FcfsDevice`]):
/// `spec`'s discipline must be FCFS, else a usage error `LABEL: queue=NAME WHY`. Returns the
/// number of channels, which sizes their per-channel state.
fn fcfs_channels(spec: &EmuSpec, why: &str) -> Result<usize, Error> {
    if spec.discipline != Discipline::Fcfs {
        return Err(usage(format!("{}: queue={} {why}", spec.label, spec.discipline.name())));
    }
    Ok(spec.model.channels as usize)
}

impl VirtualFcfs {
    /// A device for `spec` (its discipline must be FCFS) that injects `faults`.
    pub fn with_faults(spec: EmuSpec, faults: FaultPlan) -> Result<VirtualFcfs, Error> {
        let n = fcfs_channels(&spec, "is Device's; VirtualFcfs serves FCFS only")?;
        Ok(VirtualFcfs {
            memo: ServiceMemo::new(&spec),
            spec,
            faults,
            streams: Streams::default(),
            heads: vec![HeadState::default(); n],
            free_at: vec![0; n],
            first_done: vec![u64::MAX; n],
            waiting: vec![VecDeque::new(); n],
            next: (u64::MAX, 0),
            now_ns: 0,
        })
    }

    /// The next completion's instant (None when nothing is outstanding).
    #[inline(always)]
    pub fn peek_completion_ns(&self) -> Option<u64> {
        (self.next.0 != u64::MAX).then_some(self.next.0)
    }

    /// Takes the next completion (the caller takes every completion before an arrival
    /// after it, as with [`Device`], for the same order).
    #[inline(always)]
    pub fn take_completion(&mut self) -> Option<Completion> {
        let (at, channel) = self.next;
        if at == u64::MAX {
            return None;
        }
        let queue = &mut self.waiting[channel];
        let p = queue.pop_front().expect("a channel with a first completion has a waiting request");
        self.first_done[channel] = queue.front().map_or(u64::MAX, |q| q.complete_ns);
        let (mut best, mut index) = (self.first_done[0], 0);
        for (i, &t) in self.first_done.iter().enumerate().skip(1) {
            if t < best {
                (best, index) = (t, i);
            }
        }
        self.next = (best, index);
        Some(Completion {
            id: p.id,
            op: p.op,
            bytes: p.bytes,
            pattern: p.pattern,
            channel: channel as u32,
            arrival_ns: p.arrival_ns,
            start_ns: p.start_ns,
            complete_ns: p.complete_ns,
            error: p.error,
        })
    }

    /// A request arrives (arrivals in time order).
    #[inline(always)]
    pub fn submit(&mut self, req: Request) -> Result<(), TimeError> {
        let placed = self.place(&req)?;
        let queue = &mut self.waiting[placed.channel];
        if queue.is_empty() {
            self.first_done[placed.channel] = placed.complete_ns;
            if (placed.complete_ns, placed.channel) < self.next {
                self.next = (placed.complete_ns, placed.channel);
            }
        }
        queue.push_back(Pending {
            id: req.id,
            arrival_ns: req.arrival_ns,
            start_ns: placed.start_ns,
            complete_ns: placed.complete_ns,
            bytes: req.bytes,
            op: req.op,
            pattern: placed.pattern,
            error: placed.error,
        });
        Ok(())
    }

    /// A request arrives (arrivals in time order) and is placed as [`VirtualFcfs::submit`]
    /// places it (the same channel, start, completion and error), but not kept: for a driver
    /// that accounts the completion itself, from the returned instants. Such a driver uses
    /// `place` only, never [`VirtualFcfs::submit`] (its completions would never be taken).
    #[inline(always)]
    pub fn place(&mut self, req: &Request) -> Result<Placed, TimeError> {
        let arrival = req.arrival_ns;
        if arrival < self.now_ns {
            return Err(TimeError::ArrivalInPast { arrival_ns: arrival, now_ns: self.now_ns });
        }
        self.now_ns = arrival;
        let pattern = self.streams.classify(req.stream, req.offset, req.bytes);
        // The channel that frees first (an idle one: the lowest), as ChannelSet places it:
        // every channel compared, without a branch on which is idle (where the first idle
        // one lies is a coin toss on a busy device, a mispredicted branch per request).
        let (mut start_ns, mut channel) = (self.free_at[0].max(arrival), 0);
        for (i, &t) in self.free_at.iter().enumerate().skip(1) {
            let k = t.max(arrival);
            let earlier = k < start_ns;
            start_ns = if earlier { k } else { start_ns };
            channel = if earlier { i } else { channel };
        }
        let service = self.memo.service_ns(&self.spec, req, pattern, &mut self.heads[channel], start_ns);
        let (complete_ns, error) = if self.faults.is_empty() {
            (start_ns + service, false)
        } else {
            (
                self.faults.stalled_ns(start_ns + self.faults.spiked_ns(start_ns, service)),
                self.faults.fails(req.id, req.op, req.offset, req.bytes, arrival),
            )
        };
        self.free_at[channel] = complete_ns;
        Ok(Placed { channel, pattern, start_ns, complete_ns, error })
    }

    /// The number of channels.
    pub fn channels(&self) -> usize {
        self.free_at.len()
    }

    /// The channels busy at `at_ns` (at or after the last arrival): each has exactly one
    /// request in service then (started at or before `at_ns`, completing after it), and
    /// an idle one none. A channel's requests run back to back from one that found it idle,
    /// which started at its arrival, so the channel is busy from then until its last
    /// completion: busy at `at_ns` exactly when that completion is after it.
    #[inline(always)]
    pub fn busy_at(&self, at_ns: u64) -> usize {
        self.free_at.iter().map(|&t| usize::from(t > at_ns)).sum()
    }
}

/// Where and when a request runs, fixed at its arrival ([`VirtualFcfs::place`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    pub channel: usize,
    pub pattern: Pattern,
    pub start_ns: u64,
    /// The instant it completes (after the fault plan's spikes and stalls).
    pub complete_ns: u64,
    /// The fault plan fails it (it still takes its time on the channel).
    pub error: bool,
}

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
    use super::*;
    use crate::preset::parse_spec;
    use proptest::prelude::*;

    fn req(id: u64, arrival_ns: u64, op: Op, offset: u64, bytes: u64, priority: u8) -> Request {
        Request { id, arrival_ns, op, offset, bytes, priority, stream: 0 }
    }

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

    #[test]
    #[should_panic(expected = "arrivals must be in time order")]
    fn a_batch_with_arrivals_out_of_time_order_is_caught() {
        // Unsorted, the batch would serve the second request before the model's clock.
        let spec = parse_spec("emu:nvme").unwrap();
        let arrivals = [req(0, 50_000, Op::Read, 0, 4096, 0), req(1, 10_000, Op::Read, 4096, 4096, 0)];
        simulate_batch(&spec, Discipline::Fcfs, &arrivals);
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

    #[test]
    fn the_fcfs_only_devices_refuse_another_discipline_with_one_check() {
        let sjf = parse_spec("emu:hdd,queue=sjf").unwrap();
        let e = FcfsDevice::with_faults(sjf.clone(), FaultPlan::default(), 0).expect_err("refused");
        assert_eq!(
            e.message,
            "emu:hdd,queue=sjf: queue=sjf needs the virtual-time replay (smartcon emulate replay); real time serves FCFS only"
        );
        let e = VirtualFcfs::with_faults(sjf, FaultPlan::default()).expect_err("refused");
        assert!(e.message.contains("queue=sjf") && e.message.contains("FCFS only"), "{}", e.message);
        let fcfs = parse_spec("emu:hdd,channels=2").unwrap();
        assert!(FcfsDevice::with_faults(fcfs.clone(), FaultPlan::default(), 0).is_ok());
        assert!(VirtualFcfs::with_faults(fcfs, FaultPlan::default()).is_ok());
    }
}
