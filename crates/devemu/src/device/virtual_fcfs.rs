//! The virtual-time device under FCFS ([`VirtualFcfs`]): a request's channel, start and
//! completion fixed at its arrival, with no queue, look-ahead or rollback.

use std::collections::VecDeque;

use smartcon_util::error::Error;

use super::{fcfs_channels, Completion, Request, Streams, TimeError};
#[cfg(doc)]
use super::{Device, FcfsDevice};
use crate::fault::FaultPlan;
use crate::hdd::HeadState;
use crate::model::Op;
use crate::preset::EmuSpec;
use crate::table::Pattern;

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
