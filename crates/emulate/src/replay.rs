//! The discrete-event replay loop: arrivals (a trace's timestamps, or a closed-loop job)
//! meet the device model in virtual time, and the clock jumps from event to event, so idle
//! gaps cost nothing (the seed's idle time-skipping, without an OS to pause).
//!
//! Each step compares the next arrival with the device's next completion: the earlier one
//! happens (a completion first on a tie). The loop knows its next arrival before it asks,
//! so it peeks instead of simulating ahead and never rolls back; a driver that cannot know
//! (a co-simulated OS, as in the seed) uses the look-ahead and rollback of devemu::device,
//! which the property test holds equal to this batch order. A
//! closed-loop slot issues its next request `think` after its previous one completed.
//!
//! Non-goals: CPU time of the host application between I/Os other than `think`.

use std::collections::VecDeque;
use std::io::BufRead;
use std::time::Instant;

use serde::Serialize;
use smartcon_devemu::{Completion, Device, Discipline, EmuSpec, FaultPlan, Op, Request, TimeError, VirtualFcfs};

use crate::stats::{LatencyHist, LatencySummary};
use crate::trace::{TraceError, TraceIo, TraceReader};
use smartcon_engine::error::{Error, ErrorKind};

/// A closed-loop job: `qd` slots, each with one request outstanding, `ios` requests in all.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedLoop {
    pub op: Op,
    pub sequential: bool,
    pub bs_bytes: u64,
    pub qd: u32,
    pub ios: u64,
    pub think_ns: u64,
    pub seed: u64,
}

/// Limits beyond which a job is a mistake.
pub const QD_MAX: u32 = 4096;
pub const IOS_MAX: u64 = 1 << 32;

impl ClosedLoop {
    pub fn validate(&self, capacity_bytes: u64) -> Result<(), Error> {
        if self.qd == 0 || self.qd > QD_MAX {
            return Err(usage(format!("qd must be 1..={QD_MAX}")));
        }
        if self.ios == 0 || self.ios > IOS_MAX {
            return Err(usage(format!("ios must be 1..={IOS_MAX}")));
        }
        if self.bs_bytes == 0 || self.bs_bytes > capacity_bytes {
            return Err(usage(format!("bs must be 1..={capacity_bytes} (the device's capacity)")));
        }
        Ok(())
    }

    /// The request stream, by issue index: offsets uniform over the capacity in `bs`
    /// blocks (random, seeded xorshift) or consecutive (sequential, wrapping).
    pub fn requests(&self, capacity_bytes: u64) -> impl Iterator<Item = (Op, u64, u64)> + '_ {
        let blocks = (capacity_bytes / self.bs_bytes).max(1);
        // A power-of-two count of blocks (the presets' 1 GiB in 4 KiB) takes a mask, the
        // same value as the remainder without a 64-bit division per request.
        let mask = blocks.is_power_of_two().then_some(blocks - 1);
        let within = move |x: u64| match mask {
            Some(m) => x & m,
            None => x % blocks,
        };
        let mut state = self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..self.ios).map(move |i| {
            let block = if self.sequential {
                within(i)
            } else {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                within(state)
            };
            (self.op, block * self.bs_bytes, self.bs_bytes)
        })
    }
}

impl ClosedLoop {
    /// The same request stream as trace I/Os, all stamped 0 (the real-time replay paces a
    /// closed loop by completions).
    pub fn trace_ios(&self, capacity_bytes: u64) -> impl Iterator<Item = Result<TraceIo, TraceError>> + Send + '_ {
        self.requests(capacity_bytes)
            .map(|(op, offset, bytes)| Ok(TraceIo { arrival_ns: 0, op, offset, bytes, stream: 0 }))
    }
}

/// What to replay, held in memory (tests and small jobs; a trace file streams through
/// [`replay_trace`]).
#[derive(Debug, Clone)]
pub enum Workload {
    /// Open loop: arrivals at the trace's instants.
    Trace(Vec<TraceIo>),
    Closed(ClosedLoop),
}

/// One I/O's fate in virtual time, handed to an observer as it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IoRecord {
    /// The issue index.
    pub id: u64,
    pub op: Op,
    pub bytes: u64,
    pub arrival_ns: u64,
    pub complete_ns: u64,
    pub service_ns: u64,
    pub error: bool,
}

/// Per-op latency summaries.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PerOp {
    pub read: LatencySummary,
    pub write: LatencySummary,
}

/// The outcome of a virtual-time replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VirtualRun {
    pub device: String,
    pub ios: u64,
    pub all: LatencySummary,
    pub by_op: PerOp,
    /// From the first arrival to the last completion, in virtual time.
    pub sim_ns: u64,
    /// Wall time of the event loop (with a streamed trace: reading and parsing it too).
    pub wall_ns: u64,
    /// CPU time of the thread that ran it (the same work, without the time other
    /// processes took the CPU: the figure to compare on a shared host).
    pub cpu_ns: u64,
    pub bytes: u64,
    /// The largest request.
    pub bytes_max: u64,
    /// Busy channel time over channels x sim_ns.
    pub device_utilization: f64,
    pub rollbacks: u64,
    /// The most requests outstanding at once.
    pub outstanding_max: u64,
    /// Failed I/Os (fault scenario), reads and writes.
    pub errors: [u64; 2],
}

impl VirtualRun {
    pub fn speedup(&self) -> f64 {
        self.sim_ns as f64 / self.wall_ns.max(1) as f64
    }
}

/// Optional hooks of a replay: every completion, and progress (the I/Os issued so far,
/// every [`PROGRESS_EVERY`] issues).
#[derive(Default)]
pub struct Hooks<'a> {
    pub on_complete: Option<&'a mut dyn FnMut(&IoRecord)>,
    pub progress: Option<&'a mut dyn FnMut(u64)>,
}

/// Bad input (a job out of range, a trace that cannot be replayed): exit 2 in the CLI.
fn usage(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Usage, message)
}

/// How often [`Hooks::progress`] is called, in I/Os.
pub const PROGRESS_EVERY: u64 = 1 << 20;

/// Runs `workload` on a fresh device in virtual time. `keep_records` returns every I/O's
/// instants in issue order (memory per I/O: for tests and small runs).
pub fn run_virtual(spec: &EmuSpec, workload: &Workload, keep_records: bool) -> Result<VirtualRun, Error> {
    let (run, _) = run_virtual_records(spec, workload, keep_records, &FaultPlan::default())?;
    Ok(run)
}

/// [`run_virtual`] with a fault scenario, returning the records when kept.
pub fn run_virtual_records(
    spec: &EmuSpec,
    workload: &Workload,
    keep_records: bool,
    faults: &FaultPlan,
) -> Result<(VirtualRun, Vec<IoRecord>), Error> {
    let mut records = Vec::new();
    let mut keep = |r: &IoRecord| records.push(*r);
    let hooks = Hooks { on_complete: keep_records.then_some(&mut keep as &mut dyn FnMut(&IoRecord)), progress: None };
    let run = match workload {
        Workload::Trace(t) => replay_trace(spec, t.iter().map(|io| Ok(*io)), faults, hooks),
        Workload::Closed(c) => replay_closed(spec, c, faults, hooks),
    }?;
    records.sort_by_key(|r| r.id);
    Ok((run, records))
}

/// [`run_virtual`] with a fault scenario (crate::scenario): failed I/Os are counted per op
/// and keep their latency (a failed request still took its time). An empty `faults` takes
/// the spec's own scenario (`emu:PRESET,faults=FILE`), if it has one.
pub fn run_virtual_with_faults(spec: &EmuSpec, workload: &Workload, faults: &FaultPlan) -> Result<VirtualRun, Error> {
    Ok(run_virtual_records(spec, workload, false, faults)?.0)
}

/// A closed-loop job in virtual time, in constant memory.
pub fn replay_closed(spec: &EmuSpec, job: &ClosedLoop, faults: &FaultPlan, hooks: Hooks) -> Result<VirtualRun, Error> {
    job.validate(spec.capacity_bytes)?;
    let slots: VecDeque<u64> = std::iter::repeat_n(0, u64::from(job.qd).min(job.ios) as usize).collect();
    let src = Closed { gen: job.requests(spec.capacity_bytes), slots, pending: job.ios, think_ns: job.think_ns };
    run_loop(spec, src, faults, hooks)
}

/// A trace in virtual time as it streams: I/Os in arrival order (a [`crate::trace::TraceReader`]
/// sorts within its window), in constant memory. The first error of the stream ends the
/// replay with its message.
pub fn replay_trace<I>(spec: &EmuSpec, ios: I, faults: &FaultPlan, hooks: Hooks) -> Result<VirtualRun, Error>
where
    I: Iterator<Item = Result<TraceIo, TraceError>>,
{
    run_loop(spec, Open { ios, next: None, first_ns: None, last_ns: 0 }, faults, hooks)
}

/// I/Os a reader thread parses into one chunk for [`replay_reader`] (32 KiB).
pub const BATCH_IOS: usize = 1024;
/// Chunks that exist at most between the parser and the replay ([`Handoff`]'s slots):
/// 256 KiB, whatever the trace's length. Issue 33 measured four chunks of 8192 I/Os on a
/// `std` bounded channel (1 MiB, a wake-up per chunk) against these at about the same CPU
/// time (alternated; docs/emulator.md).
///
/// [`Handoff`]: crate::handoff::Handoff
pub const CHUNK_SLOTS: usize = 8;

/// A trace file in virtual time as it streams, as [`replay_trace`] replays the reader's
/// iterator (the same run): a reader thread parses the trace into chunks of [`BATCH_IOS`]
/// I/Os ([`TraceReader::next_batch`]) and hands them over a [`crate::handoff::Handoff`]
/// (at most [`CHUNK_SLOTS`] chunks, reused) to this thread, which replays them (what
/// `smartcon emulate replay --trace` runs; [`replay_reader_inline`] with `--parse-inline`).
/// The parsing runs on another core; `cpu_ns` is the CPU time of both threads (and of the
/// file's reader thread, [`crate::trace_input::TraceInput`]).
pub fn replay_reader<R: BufRead + Send>(
    spec: &EmuSpec,
    reader: &mut TraceReader<R>,
    faults: &FaultPlan,
    hooks: Hooks,
) -> Result<VirtualRun, Error> {
    let handoff = crate::handoff::Handoff::<Vec<TraceIo>, TraceError>::new(CHUNK_SLOTS);
    let reader_cpu = reader.reader_cpu_clock();
    std::thread::scope(|scope| {
        let handoff = &handoff;
        let parser = scope.spawn(move || {
            // Ends the hand-over even if the parser panics (the replay then stops, and the
            // panic is raised by the join below).
            let _ends = crate::handoff::FinishOnDrop(handoff);
            let cpu0 = thread_cpu_ns();
            let end = loop {
                let Some(mut chunk) = handoff.take_empty(|| Vec::with_capacity(BATCH_IOS)) else {
                    break Ok(()); // the replay ended (an error of its own)
                };
                match reader.next_batch(&mut chunk, BATCH_IOS) {
                    Ok(()) if chunk.is_empty() => break Ok(()),
                    Ok(()) => handoff.put_full(chunk),
                    Err(e) => break Err(e),
                }
            };
            handoff.finish(end);
            thread_cpu_ns() - cpu0
        });
        let src = Chunks::new(Handed { handoff }, Vec::new());
        let run = run_chunks(spec, src, faults, hooks, false);
        handoff.close();
        let parser_cpu_ns = parser.join().expect("the trace parser thread panicked");
        // The file's reader thread, if any, has read its last block (the parser saw the end).
        let reader_cpu_ns = reader_cpu.map_or(0, |c| c.load(std::sync::atomic::Ordering::Relaxed));
        run.map(|r| VirtualRun { cpu_ns: r.cpu_ns + parser_cpu_ns + reader_cpu_ns, ..r })
    })
}

/// The replay's end of [`replay_reader`]'s hand-over: each chunk taken, the one before
/// handed back for reuse.
struct Handed<'a> {
    handoff: &'a crate::handoff::Handoff<Vec<TraceIo>, TraceError>,
}

impl ChunkSource for Handed<'_> {
    fn next_chunk(&mut self, ios: &mut Vec<TraceIo>) -> Result<(), Error> {
        let done = std::mem::take(ios);
        let done = (done.capacity() > 0).then_some(done);
        match self.handoff.next(done) {
            Ok(Some(chunk)) => *ios = chunk,
            Ok(None) => {} // the end: no chunk, no I/O
            Err(e) => return Err(usage(e.to_string())),
        }
        Ok(())
    }
}

/// A trace file in virtual time as it streams, parsed on this thread (`smartcon emulate
/// replay --parse-inline`; without it, [`replay_reader`]): the replay takes
/// the next chunk of [`INLINE_BATCH_IOS`] I/Os from the reader when it has replayed the
/// last. The same run as [`replay_reader`]'s (the tests hold them equal) in less memory: one
/// chunk of 8 KiB, no second thread (its stack, its malloc arena, [`CHUNK_SLOTS`] chunks),
/// for the parse's CPU time on this core. `cpu_ns` counts the file's reader thread too, if
/// any ([`crate::trace_input::TraceInput::direct`]).
pub fn replay_reader_inline<R: BufRead>(
    spec: &EmuSpec,
    reader: &mut TraceReader<R>,
    faults: &FaultPlan,
    hooks: Hooks,
) -> Result<VirtualRun, Error> {
    let src = Chunks::new(&mut *reader, Vec::with_capacity(INLINE_BATCH_IOS));
    let run = run_chunks(spec, src, faults, hooks, false)?;
    // The file's reader thread, if any, has read its last block (the parser saw the end).
    Ok(VirtualRun { cpu_ns: run.cpu_ns + reader.reader_cpu_ns(), ..run })
}

/// An in-memory trace replayed as a streamed one is, a chunk of [`BATCH_IOS`] at a time
/// (the bench's replay without parsing; `ios` in time order).
pub fn replay_parsed(spec: &EmuSpec, ios: &[TraceIo], faults: &FaultPlan, hooks: Hooks) -> Result<VirtualRun, Error> {
    if let Some(w) = ios.windows(2).find(|w| w[1].arrival_ns < w[0].arrival_ns) {
        return Err(usage(format!(
            "arrivals out of order: {} ns after {} ns (sort the trace)",
            w[1].arrival_ns, w[0].arrival_ns
        )));
    }
    let src = Chunks::new(SliceChunks { ios, size: BATCH_IOS }, Vec::new());
    run_chunks(spec, src, faults, hooks, false)
}

/// A trace in memory handed out in chunks of `size` I/Os, as a reader would.
struct SliceChunks<'a> {
    ios: &'a [TraceIo],
    size: usize,
}

impl ChunkSource for SliceChunks<'_> {
    fn next_chunk(&mut self, ios: &mut Vec<TraceIo>) -> Result<(), Error> {
        let n = self.size.min(self.ios.len());
        ios.clear();
        ios.extend_from_slice(&self.ios[..n]);
        self.ios = &self.ios[n..];
        Ok(())
    }
}

/// CPU time of the calling thread.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Where arrivals come from.
trait Arrivals {
    /// The next arrival's instant, without taking it.
    fn peek(&mut self) -> Result<Option<u64>, Error>;
    /// Takes the arrival [`Arrivals::peek`] returned.
    fn take(&mut self) -> TraceIo;
    /// A request completed (a closed-loop slot issues again).
    fn completed(&mut self, _complete_ns: u64) {}
    fn first_arrival_ns(&self) -> u64 {
        0
    }
}

struct Open<I> {
    ios: I,
    next: Option<TraceIo>,
    first_ns: Option<u64>,
    last_ns: u64,
}

impl<I: Iterator<Item = Result<TraceIo, TraceError>>> Arrivals for Open<I> {
    #[inline]
    fn peek(&mut self) -> Result<Option<u64>, Error> {
        if self.next.is_none() {
            match self.ios.next() {
                Some(Ok(io)) => {
                    if io.arrival_ns < self.last_ns {
                        return Err(usage(format!(
                            "arrivals out of order: {} ns after {} ns (sort the trace)",
                            io.arrival_ns, self.last_ns
                        )));
                    }
                    self.last_ns = io.arrival_ns;
                    self.first_ns.get_or_insert(io.arrival_ns);
                    self.next = Some(io);
                }
                Some(Err(e)) => return Err(usage(e.to_string())),
                None => return Ok(None),
            }
        }
        Ok(self.next.map(|io| io.arrival_ns))
    }

    #[inline]
    fn take(&mut self) -> TraceIo {
        self.next.take().expect("peeked")
    }

    fn first_arrival_ns(&self) -> u64 {
        self.first_ns.unwrap_or(0)
    }
}

/// I/Os [`replay_reader_inline`] takes from a [`TraceReader`] at a time (8 KiB; issue 33's
/// memory check, where 1,024 were 32 KiB).
pub const INLINE_BATCH_IOS: usize = 256;

/// Where [`Chunks`] gets its next run of I/Os: a reader on this thread, or the reader
/// thread's channel.
trait ChunkSource {
    /// Replaces `ios` with the next chunk; left empty at the end of the trace.
    fn next_chunk(&mut self, ios: &mut Vec<TraceIo>) -> Result<(), Error>;
}

impl<R: BufRead> ChunkSource for &mut TraceReader<R> {
    fn next_chunk(&mut self, ios: &mut Vec<TraceIo>) -> Result<(), Error> {
        self.next_batch(ios, INLINE_BATCH_IOS).map_err(|e| usage(e.to_string()))
    }
}

/// A trace's I/Os in chunks, as the replay loop takes them one by one.
struct Chunks<S> {
    source: S,
    /// The chunk; `ios[at..]` are still to be taken.
    ios: Vec<TraceIo>,
    at: usize,
    first_ns: Option<u64>,
}

impl<S: ChunkSource> Chunks<S> {
    fn new(source: S, ios: Vec<TraceIo>) -> Chunks<S> {
        Chunks { source, ios, at: 0, first_ns: None }
    }

    #[inline(never)]
    fn refill(&mut self) -> Result<(), Error> {
        self.source.next_chunk(&mut self.ios)?;
        self.at = 0;
        if let Some(io) = self.ios.first() {
            self.first_ns.get_or_insert(io.arrival_ns);
        }
        Ok(())
    }
}

impl<S: ChunkSource> Arrivals for Chunks<S> {
    #[inline(always)]
    fn peek(&mut self) -> Result<Option<u64>, Error> {
        if self.at == self.ios.len() {
            self.refill()?;
        }
        // The reader hands out arrivals that never decrease (a late one takes the last instant).
        Ok(self.ios.get(self.at).map(|io| io.arrival_ns))
    }

    #[inline(always)]
    fn take(&mut self) -> TraceIo {
        let io = self.ios[self.at];
        self.at += 1;
        io
    }

    fn first_arrival_ns(&self) -> u64 {
        self.first_ns.unwrap_or(0)
    }
}

struct Closed<G> {
    gen: G,
    /// The instants at which slots issue next, earliest first. A FIFO is enough (no heap):
    /// the loop takes completions in time order and every slot waits the same `think`, so
    /// each instant pushed is at least the last one.
    slots: VecDeque<u64>,
    /// Requests not yet given to a slot.
    pending: u64,
    think_ns: u64,
}

impl<G: Iterator<Item = (Op, u64, u64)>> Arrivals for Closed<G> {
    #[inline]
    fn peek(&mut self) -> Result<Option<u64>, Error> {
        Ok(self.slots.front().copied())
    }

    #[inline]
    fn take(&mut self) -> TraceIo {
        let at = self.slots.pop_front().expect("peeked");
        self.pending -= 1;
        let (op, offset, bytes) = self.gen.next().expect("ios bounded");
        TraceIo { arrival_ns: at, op, offset, bytes, stream: 0 }
    }

    #[inline]
    fn completed(&mut self, complete_ns: u64) {
        if self.pending > self.slots.len() as u64 {
            let at = complete_ns + self.think_ns;
            debug_assert!(self.slots.back().is_none_or(|&last| last <= at), "slots in time order");
            self.slots.push_back(at);
        }
    }
}

/// The device model as the loop drives it: [`Device`] for every discipline, and
/// [`VirtualFcfs`] for FCFS (completions fixed at arrival; the same I/Os, cheaper).
trait Model {
    fn peek_completion_ns(&self) -> Option<u64>;
    fn take_completion(&mut self) -> Option<Completion>;
    fn submit(&mut self, req: Request) -> Result<(), TimeError>;
    fn rollbacks(&self) -> u64;
}

impl Model for Device {
    #[inline]
    fn peek_completion_ns(&self) -> Option<u64> {
        Device::peek_completion_ns(self)
    }
    #[inline]
    fn take_completion(&mut self) -> Option<Completion> {
        Device::take_completion(self)
    }
    #[inline]
    fn submit(&mut self, req: Request) -> Result<(), TimeError> {
        Device::submit(self, req)
    }
    fn rollbacks(&self) -> u64 {
        Device::rollbacks(self)
    }
}

impl Model for VirtualFcfs {
    #[inline(always)]
    fn peek_completion_ns(&self) -> Option<u64> {
        VirtualFcfs::peek_completion_ns(self)
    }
    #[inline(always)]
    fn take_completion(&mut self) -> Option<Completion> {
        VirtualFcfs::take_completion(self)
    }
    #[inline(always)]
    fn submit(&mut self, req: Request) -> Result<(), TimeError> {
        VirtualFcfs::submit(self, req)
    }
    fn rollbacks(&self) -> u64 {
        0
    }
}

/// Which model runs the replay: [`VirtualFcfs`] under FCFS unless `general` asks for
/// [`Device`] (the tests hold the two equal).
fn run_loop<A: Arrivals>(spec: &EmuSpec, src: A, faults: &FaultPlan, hooks: Hooks) -> Result<VirtualRun, Error> {
    run_loop_on(spec, src, faults, hooks, false)
}

fn run_loop_on<A: Arrivals>(
    spec: &EmuSpec,
    src: A,
    faults: &FaultPlan,
    hooks: Hooks,
    general: bool,
) -> Result<VirtualRun, Error> {
    let faults = match &spec.faults {
        Some(own) if faults.is_empty() => own,
        _ => faults,
    };
    let wall = Instant::now();
    let cpu_start_ns = thread_cpu_ns();
    if spec.discipline == Discipline::Fcfs && !general {
        let dev = VirtualFcfs::with_faults(spec.clone(), faults.clone()).map_err(|e| usage(e.message))?;
        drive(spec, src, dev, hooks, wall, cpu_start_ns)
    } else {
        let dev = Device::with_faults(spec.clone(), spec.discipline, faults.clone());
        drive(spec, src, dev, hooks, wall, cpu_start_ns)
    }
}

/// What a replay adds up as its I/Os complete (or, in [`drive_chunks`], as they are placed:
/// every sum, count and histogram below is the same in any order).
struct Totals {
    errors: [u64; 2],
    lat: [LatencyHist; 2],
    /// The latest latency of each op and how many times in a row it came: recorded at once
    /// when another comes (a closed loop on a fixed-time model repeats one latency).
    run: [(u64, u64); 2],
    busy_ns: u128,
    bytes: u64,
    bytes_max: u64,
    last_complete_ns: u64,
    outstanding: u64,
    outstanding_max: u64,
    issued: u64,
}

impl Totals {
    fn new() -> Totals {
        Totals {
            errors: [0; 2],
            lat: [LatencyHist::new(), LatencyHist::new()],
            run: [(0, 0); 2],
            busy_ns: 0,
            bytes: 0,
            bytes_max: 0,
            last_complete_ns: 0,
            outstanding: 0,
            outstanding_max: 0,
            issued: 0,
        }
    }

    /// One I/O's outcome (not its count in `outstanding`).
    #[inline(always)]
    fn done(&mut self, op: Op, bytes: u64, arrival_ns: u64, start_ns: u64, complete_ns: u64, error: bool) {
        let w = (op == Op::Write) as usize;
        self.errors[w] += u64::from(error);
        let ns = complete_ns - arrival_ns;
        let run = &mut self.run[w];
        if run.0 == ns {
            run.1 += 1;
        } else {
            if run.1 > 0 {
                self.lat[w].record_n(run.0, run.1);
            }
            *run = (ns, 1);
        }
        self.busy_ns += (complete_ns - start_ns) as u128;
        self.bytes += bytes;
        self.last_complete_ns = self.last_complete_ns.max(complete_ns);
    }

    /// An I/O was issued.
    #[inline(always)]
    fn issued(&mut self, bytes: u64, hooks: &mut Hooks) {
        self.outstanding += 1;
        self.outstanding_max = self.outstanding_max.max(self.outstanding);
        self.counted(bytes, hooks);
    }

    /// An I/O was issued, its count in `outstanding_max` settled by the caller.
    #[inline(always)]
    fn counted(&mut self, bytes: u64, hooks: &mut Hooks) {
        self.bytes_max = self.bytes_max.max(bytes);
        self.issued += 1;
        if self.issued.is_multiple_of(PROGRESS_EVERY) {
            if let Some(p) = hooks.progress.as_mut() {
                p(self.issued);
            }
        }
    }

    fn into_run(
        mut self,
        spec: &EmuSpec,
        first_arrival_ns: u64,
        rollbacks: u64,
        wall: Instant,
        cpu_start_ns: u64,
    ) -> Result<VirtualRun, Error> {
        if self.issued == 0 {
            return Err(usage("nothing to replay: no reads or writes"));
        }
        for (hist, &(ns, n)) in self.lat.iter_mut().zip(&self.run) {
            if n > 0 {
                hist.record_n(ns, n);
            }
        }
        let sim_ns = self.last_complete_ns.saturating_sub(first_arrival_ns);
        let [reads, writes] = self.lat;
        let mut all = reads.clone();
        all.add(&writes);
        let channels = u128::from(spec.model.channels);
        Ok(VirtualRun {
            device: spec.label.clone(),
            ios: self.issued,
            all: all.summary(),
            by_op: PerOp { read: reads.summary(), write: writes.summary() },
            sim_ns,
            wall_ns: wall.elapsed().as_nanos() as u64,
            cpu_ns: thread_cpu_ns().saturating_sub(cpu_start_ns),
            bytes: self.bytes,
            bytes_max: self.bytes_max,
            device_utilization: if sim_ns == 0 {
                0.0
            } else {
                self.busy_ns as f64 / (channels * sim_ns as u128) as f64
            },
            rollbacks,
            outstanding_max: self.outstanding_max,
            errors: self.errors,
        })
    }
}

/// The per-request loop: each step takes the next completion or the next arrival, whichever
/// comes first (a completion at an arrival's instant first).
fn drive<A: Arrivals, M: Model>(
    spec: &EmuSpec,
    mut src: A,
    mut dev: M,
    mut hooks: Hooks,
    wall: Instant,
    cpu_start_ns: u64,
) -> Result<VirtualRun, Error> {
    let mut t = Totals::new();
    loop {
        let arrival = src.peek()?;
        // The arrival is known here, so compare it with the next completion without
        // simulating ahead; the look-ahead (and a rollback) is for drivers that do not know
        // their next arrival (devemu::device).
        let completion = dev.peek_completion_ns();
        let take = match (completion, arrival) {
            (Some(c), Some(a)) => c <= a,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        if take {
            let done: Completion = dev.take_completion().expect("looked ahead");
            t.outstanding -= 1;
            t.done(done.op, done.bytes, done.arrival_ns, done.start_ns, done.complete_ns, done.error);
            if let Some(f) = hooks.on_complete.as_mut() {
                f(&IoRecord {
                    id: done.id,
                    op: done.op,
                    bytes: done.bytes,
                    arrival_ns: done.arrival_ns,
                    complete_ns: done.complete_ns,
                    service_ns: done.complete_ns - done.start_ns,
                    error: done.error,
                });
            }
            src.completed(done.complete_ns);
        } else {
            let io = src.take();
            let req = Request {
                id: t.issued,
                arrival_ns: io.arrival_ns,
                op: io.op,
                offset: io.offset,
                bytes: io.bytes,
                priority: 0,
                stream: io.stream,
            };
            dev.submit(req)?;
            t.issued(io.bytes, &mut hooks);
        }
    }
    t.into_run(spec, src.first_arrival_ns(), dev.rollbacks(), wall, cpu_start_ns)
}

/// A trace's chunks replayed: by [`drive_chunks`] where that gives the same run (FCFS, no
/// observer of completions: the command's replay), else by the per-request loop.
/// `per_request` asks for the loop (the tests hold the two equal).
fn run_chunks<S: ChunkSource>(
    spec: &EmuSpec,
    src: Chunks<S>,
    faults: &FaultPlan,
    hooks: Hooks,
    per_request: bool,
) -> Result<VirtualRun, Error> {
    if per_request || spec.discipline != Discipline::Fcfs || hooks.on_complete.is_some() {
        return run_loop(spec, src, faults, hooks);
    }
    let faults = match &spec.faults {
        Some(own) if faults.is_empty() => own,
        _ => faults,
    };
    let wall = Instant::now();
    let cpu_start_ns = thread_cpu_ns();
    let dev = VirtualFcfs::with_faults(spec.clone(), faults.clone()).map_err(|e| usage(e.message))?;
    drive_chunks(spec, src, dev, hooks, wall, cpu_start_ns)
}

/// The open loop on [`VirtualFcfs`] a chunk at a time: each arrival of the chunk is placed
/// on its channel in one call ([`VirtualFcfs::place`]: channel, start and completion fixed
/// at arrival) and its outcome added up at once, instead of a completion event taken later.
/// Only the count of requests outstanding depends on when they complete, and under FCFS it
/// is known at an arrival without keeping any completion: the requests still queued (their
/// start after the arrival; starts never decrease in arrival order, so they leave a FIFO of
/// start instants from its front) plus one in service on each busy channel
/// ([`VirtualFcfs::busy_at`]), with completions at the arrival's instant retired first, as
/// the per-request loop takes them first. That count is needed only when it could raise the
/// maximum (at most the queue plus every channel), so it is mostly not computed.
/// The run is the per-request loop's (`the_chunk_path_replays_as_the_per_request_loop`);
/// there are no completion records, so it is for replays without an observer.
fn drive_chunks<S: ChunkSource>(
    spec: &EmuSpec,
    mut src: Chunks<S>,
    mut dev: VirtualFcfs,
    mut hooks: Hooks,
    wall: Instant,
    cpu_start_ns: u64,
) -> Result<VirtualRun, Error> {
    let mut t = Totals::new();
    // The start instants of the requests that waited for a channel, in arrival order (which
    // is start order), those still ahead of the current arrival.
    let mut queued: VecDeque<u64> = VecDeque::new();
    let channels = dev.channels() as u64;
    loop {
        if src.at == src.ios.len() {
            src.refill()?;
            if src.ios.is_empty() {
                break;
            }
        }
        for io in &src.ios[src.at..] {
            let arrival = io.arrival_ns;
            while queued.front().is_some_and(|&s| s <= arrival) {
                queued.pop_front();
            }
            // At most every channel busy, the queue and this one: below the maximum, the
            // count cannot raise it.
            if queued.len() as u64 + channels + 1 > t.outstanding_max {
                let now = queued.len() as u64 + dev.busy_at(arrival) as u64 + 1;
                t.outstanding_max = t.outstanding_max.max(now);
            }
            let req = Request {
                id: t.issued,
                arrival_ns: arrival,
                op: io.op,
                offset: io.offset,
                bytes: io.bytes,
                priority: 0,
                stream: io.stream,
            };
            let p = dev.place(&req).map_err(|e| usage(e.to_string()))?;
            t.done(io.op, io.bytes, arrival, p.start_ns, p.complete_ns, p.error);
            if p.start_ns > arrival {
                queued.push_back(p.start_ns);
            }
            t.counted(io.bytes, &mut hooks);
        }
        src.at = src.ios.len();
    }
    t.into_run(spec, src.first_arrival_ns(), 0, wall, cpu_start_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::TraceOptions;
    use smartcon_devemu::parse_spec;

    fn job(op: Op, sequential: bool, bs: u64, qd: u32, ios: u64) -> Workload {
        Workload::Closed(ClosedLoop { op, sequential, bs_bytes: bs, qd, ios, think_ns: 0, seed: 7 })
    }

    #[test]
    fn sdcard_ch1_1s_reproduces_the_seed_table_in_virtual_time() {
        // Ch1-1S and Ch4-1S: at QD1 every request finds a free channel.
        for spec in [parse_spec("emu:sdcard").unwrap(), parse_spec("emu:sdcard,channels=4").unwrap()] {
            for row in smartcon_devemu::table::SDCARD_ROWS {
                for (op, seq, col) in
                    [(Op::Read, false, 0), (Op::Write, false, 1), (Op::Read, true, 2), (Op::Write, true, 3)]
                {
                    let run = run_virtual(&spec, &job(op, seq, row.size_bytes, 1, 1000), false).unwrap();
                    let s = if op == Op::Read { run.by_op.read } else { run.by_op.write };
                    // A sequential job's first request has no predecessor and is random; the
                    // table's sequential figure is every later one.
                    let expect = if seq {
                        let first = row.latency_ns[col - 2] as f64;
                        (first + 999.0 * row.latency_ns[col] as f64) / 1000.0
                    } else {
                        row.latency_ns[col] as f64
                    };
                    assert!(
                        (s.lat_ns_mean - expect).abs() < 1e-6,
                        "{row:?} {op:?} seq={seq}: {} vs {expect}",
                        s.lat_ns_mean
                    );
                    assert_eq!(s.lat_ns_p50, row.latency_ns[col]);
                    // QD1 with no think time: one channel is always busy.
                    let busy = 1.0 / f64::from(spec.model.channels);
                    assert!((run.device_utilization - busy).abs() < 1e-9);
                }
            }
        }
    }

    #[test]
    fn idle_gaps_are_skipped_and_queueing_shows_at_depth() {
        let spec = parse_spec("emu:sdcard,channels=4").unwrap();
        // Four writes at once on four channels: no queueing; a fifth waits.
        let at = |t, off| TraceIo { arrival_ns: t, op: Op::Write, offset: off, bytes: 4096, stream: 0 };
        let trace =
            vec![at(0, 0), at(0, 1 << 20), at(0, 2 << 20), at(0, 3 << 20), at(0, 4 << 20), at(3_600_000_000_000, 0)];
        let (run, records) = run_virtual_records(&spec, &Workload::Trace(trace), true, &FaultPlan::default()).unwrap();
        assert_eq!(records[4].complete_ns, 2 * 1_160_100);
        // An hour of idle is simulated, not waited for.
        assert_eq!(run.sim_ns, 3_600_000_000_000 + 1_160_100);
        assert!(run.speedup() > 1e6);
        assert_eq!(run.outstanding_max, 5);
    }

    #[test]
    fn faults_fail_requests_and_stretch_latency() {
        let spec = parse_spec("emu:sdcard").unwrap();
        let plan = crate::scenario::parse(
            "seed = 1\n[[error]]\nop = \"write\"\nprobability = 0.5\n\
             [[spike]]\nstart = \"0s\"\nend = \"1s\"\nfactor = 2.0\n",
        )
        .unwrap();
        let w = job(Op::Write, false, 4096, 1, 400);
        let run = run_virtual_with_faults(&spec, &w, &plan).unwrap();
        assert!((150..250).contains(&run.errors[1]), "{:?}", run.errors);
        assert_eq!(run.errors[0], 0);
        // 400 writes at twice the table's time all start inside the 1 s window.
        assert_eq!(run.by_op.write.lat_ns_p50, 2 * 1_160_100);
        let clean = run_virtual(&spec, &w, false).unwrap();
        assert_eq!(clean.errors, [0, 0]);
        assert_eq!(clean.by_op.write.lat_ns_p50, 1_160_100);
    }

    #[test]
    fn closed_loop_think_time_and_qd() {
        let spec = parse_spec("emu:sdcard").unwrap();
        let mut c =
            ClosedLoop { op: Op::Write, sequential: false, bs_bytes: 4096, qd: 1, ios: 10, think_ns: 100_000, seed: 1 };
        let run = run_virtual(&spec, &Workload::Closed(c.clone()), false).unwrap();
        assert_eq!(run.sim_ns, 10 * 1_160_100 + 9 * 100_000);
        c.qd = 4;
        c.think_ns = 0;
        let run = run_virtual(&spec, &Workload::Closed(c.clone()), false).unwrap();
        // One channel, four outstanding: each waits behind three.
        assert_eq!(run.by_op.write.lat_ns_max, 4 * 1_160_100);
        assert_eq!(run.sim_ns, 10 * 1_160_100);
        c.qd = 0;
        assert!(run_virtual(&spec, &Workload::Closed(c), false).is_err());
    }

    #[test]
    fn histogram_percentiles_match_the_exact_ones_on_a_million_ios() {
        // emu:hdd at QD4: seeks and rotation make latencies spread over decades (no table
        // of a few values), so the summary comes from the histogram.
        let spec = parse_spec("emu:hdd").unwrap();
        let job =
            ClosedLoop { op: Op::Read, sequential: false, bs_bytes: 4096, qd: 4, ios: 1_000_000, think_ns: 0, seed: 5 };
        let mut exact: Vec<u64> = Vec::with_capacity(1_000_000);
        let mut keep = |r: &IoRecord| exact.push(r.complete_ns - r.arrival_ns);
        let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
        let run = replay_closed(&spec, &job, &FaultPlan::default(), hooks).unwrap();
        let e = LatencySummary::of(&mut exact);
        let h = run.all;
        assert_eq!((h.ios, h.lat_ns_max), (e.ios, e.lat_ns_max));
        assert!((h.lat_ns_mean - e.lat_ns_mean).abs() < 1e-6 * e.lat_ns_mean);
        // The histogram's precision (3 significant digits): at most 0.1% above.
        for (a, x) in [(h.lat_ns_p50, e.lat_ns_p50), (h.lat_ns_p99, e.lat_ns_p99), (h.lat_ns_p999, e.lat_ns_p999)] {
            assert!(a >= x && a - x <= x / 1000, "histogram {a} vs exact {x}");
        }
        // Many distinct values: the percentiles above came from the histogram itself.
        exact.sort_unstable();
        exact.dedup();
        assert!(exact.len() > 100 * crate::stats::DISTINCT_MAX, "{}", exact.len());
    }

    /// The closed loop as it was written with a min-heap of slot instants, driving the
    /// device directly: the reference the FIFO of slots is held to.
    fn closed_by_heap(spec: &EmuSpec, job: &ClosedLoop) -> Vec<(u64, u64, u64)> {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let mut dev = Device::new(spec.clone(), spec.discipline);
        let mut slots: BinaryHeap<Reverse<u64>> = (0..u64::from(job.qd).min(job.ios)).map(|_| Reverse(0)).collect();
        let mut gen = job.requests(spec.capacity_bytes);
        let (mut pending, mut issued, mut out) = (job.ios, 0u64, Vec::new());
        loop {
            let arrival = slots.peek().map(|r| r.0);
            let take = match (dev.peek_completion_ns(), arrival) {
                (Some(c), Some(a)) => c <= a,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            if take {
                let d = dev.take_completion().unwrap();
                out.push((d.id, d.arrival_ns, d.complete_ns));
                if pending > slots.len() as u64 {
                    slots.push(Reverse(d.complete_ns + job.think_ns));
                }
            } else {
                let Reverse(at) = slots.pop().unwrap();
                pending -= 1;
                let (op, offset, bytes) = gen.next().unwrap();
                let req = Request { id: issued, arrival_ns: at, op, offset, bytes, priority: 0, stream: 0 };
                dev.submit(req).unwrap();
                issued += 1;
            }
        }
        out
    }

    #[test]
    fn closed_loop_slots_in_a_fifo_replay_as_the_heap_did() {
        // Disks (seek-dependent times, SJF reordering) and tables at several depths and
        // think times: every I/O's arrival and completion equal, in completion order.
        for (device, qd, think_ns, sequential) in [
            ("emu:nvme", 32, 0, false),
            ("emu:hdd,queue=sjf", 8, 0, false),
            ("emu:hdd", 4, 25_000, false),
            ("emu:sdcard,channels=4", 16, 30_000, true),
            ("emu:nvme,queue=sjf", 3, 7, false),
        ] {
            let spec = parse_spec(device).unwrap();
            let job = ClosedLoop { op: Op::Read, sequential, bs_bytes: 4096, qd, ios: 20_000, think_ns, seed: 3 };
            let mut got = Vec::new();
            let mut keep = |r: &IoRecord| got.push((r.id, r.arrival_ns, r.complete_ns));
            let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
            replay_closed(&spec, &job, &FaultPlan::default(), hooks).unwrap();
            let want = closed_by_heap(&spec, &job);
            assert_eq!(got.len(), 20_000, "{device}");
            assert!(got == want, "{device} qd{qd} think {think_ns} ns: the replays differ");
        }
    }

    /// A replay on the general device ([`Device`]) and on the FCFS one ([`VirtualFcfs`]):
    /// the run (wall and CPU time zeroed) and every completion, in completion order.
    fn on_both(spec: &EmuSpec, w: &Workload, faults: &FaultPlan) -> [(VirtualRun, Vec<IoRecord>); 2] {
        [true, false].map(|general| {
            let mut got = Vec::new();
            let mut keep = |r: &IoRecord| got.push(*r);
            let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
            let mut run = match w {
                Workload::Trace(t) => {
                    let src = Open { ios: t.iter().map(|io| Ok(*io)), next: None, first_ns: None, last_ns: 0 };
                    run_loop_on(spec, src, faults, hooks, general)
                }
                Workload::Closed(c) => {
                    let slots = std::iter::repeat_n(0, u64::from(c.qd).min(c.ios) as usize).collect();
                    let src =
                        Closed { gen: c.requests(spec.capacity_bytes), slots, pending: c.ios, think_ns: c.think_ns };
                    run_loop_on(spec, src, faults, hooks, general)
                }
            }
            .unwrap();
            (run.wall_ns, run.cpu_ns) = (0, 0);
            (run, got)
        })
    }

    /// A seeded open-loop trace with bursts at one instant, idle gaps, sequential runs on
    /// several streams, reads and writes of 512 B to 256 KiB.
    fn bursty_trace(seed: u64, n: usize) -> Vec<TraceIo> {
        let mut rng = smartcon_util::rng::Rng::new(seed);
        let (mut t, mut next) = (0u64, [0u64; 3]);
        (0..n)
            .map(|_| {
                t += match rng.below(10) {
                    0..=3 => 0,
                    4..=8 => rng.below(30_000),
                    _ => rng.below(20_000_000),
                };
                let stream = rng.below(3) as u32;
                let bytes = 512 << rng.below(10);
                let offset = if rng.percent(40) { next[stream as usize] } else { rng.below(1 << 17) * 4096 };
                next[stream as usize] = offset + bytes;
                let op = if rng.percent(30) { Op::Write } else { Op::Read };
                TraceIo { arrival_ns: t, op, offset, bytes, stream }
            })
            .collect()
    }

    #[test]
    fn the_fcfs_device_replays_every_io_as_the_general_one() {
        let plan = crate::scenario::parse(
            "seed = 4\n[[error]]\nprobability = 0.3\n\
             [[spike]]\nstart = \"2ms\"\nend = \"9ms\"\nfactor = 3.0\n\
             [[stall]]\nstart = \"12ms\"\nduration = \"2ms\"\n",
        )
        .unwrap();
        let closed = |qd, think_ns, sequential, op| {
            Workload::Closed(ClosedLoop { op, sequential, bs_bytes: 4096, qd, ios: 30_000, think_ns, seed: 9 })
        };
        let mut cases = 0;
        for device in [
            "emu:nvme",
            "emu:optane",
            "emu:nvram,channels=3",
            "emu:sata-ssd,speedup=3",
            "emu:hdd",
            "emu:hdd,channels=2",
            "emu:sdcard,channels=4",
        ] {
            let spec = parse_spec(device).unwrap();
            // Some workload kept requests waiting for a channel (the FIFOs were exercised).
            let mut queued = false;
            for w in [
                closed(32, 0, false, Op::Read),
                closed(5, 20_000, false, Op::Write),
                closed(16, 0, true, Op::Read),
                Workload::Trace(bursty_trace(device.len() as u64, 20_000)),
            ] {
                for faults in [FaultPlan::default(), plan.clone()] {
                    let [(general, want), (fcfs, got)] = on_both(&spec, &w, &faults);
                    assert_eq!(want.len(), got.len(), "{device}");
                    assert!(want == got, "{device} {w:?}: the completions differ");
                    assert_eq!(general, fcfs, "{device}");
                    cases += 1;
                    queued |= general.outstanding_max > u64::from(spec.model.channels);
                    // The faults struck (errors drawn, not skipped).
                    assert_eq!(faults.is_empty(), general.errors == [0, 0], "{device} {:?}", general.errors);
                }
            }
            assert!(queued, "{device}");
        }
        assert_eq!(cases, 7 * 4 * 2);
    }

    #[test]
    fn progress_is_reported_and_a_stream_error_ends_the_replay() {
        let spec = parse_spec("emu:nvme").unwrap();
        let job = ClosedLoop {
            op: Op::Read,
            sequential: false,
            bs_bytes: 4096,
            qd: 8,
            ios: 3 * PROGRESS_EVERY,
            think_ns: 0,
            seed: 1,
        };
        let mut seen = Vec::new();
        let mut progress = |n: u64| seen.push(n);
        let hooks = Hooks { on_complete: None, progress: Some(&mut progress) };
        replay_closed(&spec, &job, &FaultPlan::default(), hooks).unwrap();
        assert_eq!(seen, vec![PROGRESS_EVERY, 2 * PROGRESS_EVERY, 3 * PROGRESS_EVERY]);
        let io = TraceIo { arrival_ns: 0, op: Op::Read, offset: 0, bytes: 4096, stream: 0 };
        let bad = TraceError { path: Some("t.csv".into()), line_number: 3, message: "bad".into() };
        let e =
            replay_trace(&spec, [Ok(io), Err(bad)].into_iter(), &FaultPlan::default(), Hooks::default()).unwrap_err();
        assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Usage, "t.csv: line 3: bad"));
        // Out of order (a source that does not sort) is refused, not replayed backwards.
        let later = TraceIo { arrival_ns: 10, ..io };
        let e =
            replay_trace(&spec, [Ok(later), Ok(io)].into_iter(), &FaultPlan::default(), Hooks::default()).unwrap_err();
        assert!(e.message.contains("out of order"), "{e}");
    }

    #[test]
    fn a_trace_in_batches_replays_as_its_iterator_does() {
        // A fio v3 iolog with bursts (queueing), records back in time within and beyond the
        // window (reordered, late), skipped actions, two files (streams), and an error at
        // the end: the batched replay gives every completion and the run as the iterator's.
        let mut rng = smartcon_util::rng::Rng::new(7);
        let mut text = String::from("fio version 3 iolog\n0 /dev/a add\n");
        let mut us = 10u64;
        for i in 0..20_001u64 {
            us += rng.below(4);
            let back = if rng.percent(2) { rng.below(us.min(400)) } else { 0 };
            let file = ["/dev/a", "/dev/b"][rng.below(2) as usize];
            let op = if rng.percent(70) { "read" } else { "write" };
            if i % 997 == 0 {
                text.push_str(&format!("{us} {file} trim 0 4096\n"));
            }
            text.push_str(&format!("{} {file} {op} {} 4096\n", us - back, rng.below(1 << 16) * 4096));
        }
        let spec = parse_spec("emu:nvme").unwrap();
        for (window, tail) in [(64, ""), (1, ""), (4096, ""), (64, "12 /dev/a read x 4096\n")] {
            let whole = format!("{text}{tail}");
            let options = TraceOptions { reorder_window: window, ..TraceOptions::default() };
            let mut records = [Vec::new(), Vec::new()];
            let [by_iterator, by_batches] = &mut records;
            let mut keep = |r: &IoRecord| by_iterator.push(*r);
            let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
            let reader = TraceReader::new(whole.as_bytes(), options.clone()).unwrap();
            let a = replay_trace(&spec, reader, &FaultPlan::default(), hooks);
            let mut keep = |r: &IoRecord| by_batches.push(*r);
            let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
            let mut reader = TraceReader::new(whole.as_bytes(), options).unwrap();
            let b = replay_reader(&spec, &mut reader, &FaultPlan::default(), hooks);
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    assert!(tail.is_empty());
                    assert_eq!(reader.stats().late > 0, window < 4096, "window {window}: {:?}", reader.stats());
                    let same = |r: VirtualRun| VirtualRun { wall_ns: 0, cpu_ns: 0, ..r };
                    assert_eq!(same(a), same(b), "window {window}");
                }
                (Err(a), Err(b)) => {
                    assert!(!tail.is_empty(), "{a}");
                    assert_eq!((a.kind, a.message), (b.kind, b.message));
                }
                (a, b) => panic!("window {window}: {a:?} against {b:?}"),
            }
            // The arrivals outrun the device (about one every 1.5 us): at the error, most are
            // still queued.
            assert!(records[0].len() > if tail.is_empty() { 20_000 } else { 2_000 }, "{}", records[0].len());
            assert_eq!(records[0], records[1], "window {window}");
        }
    }

    #[test]
    fn every_format_replays_in_batches_as_the_general_iterator_did() {
        // Each format's trace with records back in time, skipped lines and folded offsets,
        // clean and ending in a bad line: the replay of the reading before the fast paths
        // (the general parser, the window one I/O at a time, the iterator) against the
        // command's (fast parsers, batches, deferred hand-outs): every completion and the run.
        use crate::trace::{mixed_trace, Tail, TraceFormat};
        let spec = parse_spec("emu:nvme").unwrap();
        for format in TraceFormat::ALL {
            for tail in [Tail::Clean, Tail::BadLine] {
                let text = mixed_trace(format, 7, 6_000, tail);
                for window in [16, 4096] {
                    let options = TraceOptions {
                        reorder_window: window,
                        capacity_bytes: Some(1 << 30),
                        ..TraceOptions::default()
                    };
                    let mut records = [Vec::new(), Vec::new()];
                    let [before, now] = &mut records;
                    let mut keep = |r: &IoRecord| before.push(*r);
                    let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
                    let reader = TraceReader::new(text.as_bytes(), options.clone()).unwrap().general_only();
                    let a = replay_trace(&spec, reader, &FaultPlan::default(), hooks);
                    let mut keep = |r: &IoRecord| now.push(*r);
                    let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
                    let mut reader = TraceReader::new(text.as_bytes(), options).unwrap();
                    let b = replay_reader(&spec, &mut reader, &FaultPlan::default(), hooks);
                    match (a, b) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!(tail, Tail::Clean);
                            let same = |r: VirtualRun| VirtualRun { wall_ns: 0, cpu_ns: 0, ..r };
                            assert_eq!(same(a), same(b), "{format:?} window {window}");
                            let stats = reader.stats();
                            assert!(stats.folded > 0 && stats.skipped > 0, "{format:?}: {stats:?}");
                            assert_eq!(stats.late > 0, window < 4096 && format != TraceFormat::FioV2, "{format:?}");
                        }
                        (Err(a), Err(b)) => {
                            assert_eq!(tail, Tail::BadLine, "{a}");
                            assert_eq!((a.kind, a.message), (b.kind, b.message));
                        }
                        (a, b) => panic!("{format:?} window {window}: {a:?} against {b:?}"),
                    }
                    assert!(records[0].len() > 1_000, "{format:?} {tail:?} {}", records[0].len());
                    assert!(records[0] == records[1], "{format:?} {tail:?} window {window}: the completions differ");
                }
            }
        }
    }

    #[test]
    fn the_reader_thread_replays_ties_as_the_per_record_path() {
        // Arrivals at whole multiples of the model's service time, in bursts at one instant:
        // completions fall on arrivals (the tie rule: a completion at an arrival's instant is
        // taken first) and several channels complete at once (the lowest first). The reader
        // thread's replay, the inline batches and the general iterator give every completion
        // and the run alike.
        use std::collections::HashSet;
        for device in ["emu:nvme", "emu:sdcard,channels=4", "emu:optane"] {
            let spec = parse_spec(device).unwrap();
            let one = TraceIo { arrival_ns: 0, op: Op::Read, offset: 0, bytes: 4096, stream: 0 };
            let (_, r) = run_virtual_records(&spec, &Workload::Trace(vec![one]), true, &FaultPlan::default()).unwrap();
            let service = r[0].complete_ns;
            assert!(service > 0);
            let mut rng = smartcon_util::rng::Rng::new(11);
            let mut text = String::new();
            let mut k = 0u64;
            for i in 0..30_000u64 {
                k += rng.below(3);
                let t = k * service;
                let op = if rng.percent(30) { "W" } else { "R" };
                let sector = rng.below(1 << 18) * 8;
                text.push_str(&format!(
                    "8,0 0 {i} {}.{:09} 100 D {op} {sector} + 8 [fio]\n",
                    t / 1_000_000_000,
                    t % 1_000_000_000
                ));
            }
            for window in [1, 4096] {
                let options =
                    TraceOptions { reorder_window: window, capacity_bytes: Some(1 << 30), ..TraceOptions::default() };
                let mut records: [Vec<IoRecord>; 3] = Default::default();
                let [a, b, c] = &mut records;
                let mut keep = |r: &IoRecord| a.push(*r);
                let reader = TraceReader::new(text.as_bytes(), options.clone()).unwrap().general_only();
                let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
                let one_by_one = replay_trace(&spec, reader, &FaultPlan::default(), hooks).unwrap();
                let mut keep = |r: &IoRecord| b.push(*r);
                let mut reader = TraceReader::new(text.as_bytes(), options.clone()).unwrap();
                let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
                let inline = replay_reader_inline(&spec, &mut reader, &FaultPlan::default(), hooks).unwrap();
                let mut keep = |r: &IoRecord| c.push(*r);
                let mut reader = TraceReader::new(text.as_bytes(), options).unwrap();
                let hooks = Hooks { on_complete: Some(&mut keep), progress: None };
                let piped = replay_reader(&spec, &mut reader, &FaultPlan::default(), hooks).unwrap();
                assert_eq!(reader.stats().ios, 30_000);
                let same = |r: VirtualRun| VirtualRun { wall_ns: 0, cpu_ns: 0, ..r };
                assert_eq!(same(one_by_one.clone()), same(inline), "{device}");
                assert_eq!(same(one_by_one), same(piped), "{device}");
                assert!(records[0] == records[1] && records[0] == records[2], "{device} window {window}");
                // The ties were there: completions at an arrival's instant, arrivals together,
                // and completions at one instant.
                let arrivals: HashSet<u64> = records[0].iter().map(|r| r.arrival_ns).collect();
                let on_arrival = records[0].iter().filter(|r| arrivals.contains(&r.complete_ns)).count();
                assert!(on_arrival > 20, "{device}: {on_arrival}");
                assert!(arrivals.len() < 25_000, "{device}: {}", arrivals.len());
                let at_once = records[0].windows(2).filter(|w| w[0].complete_ns == w[1].complete_ns).count();
                assert!(at_once > 100, "{device}: {at_once}");
            }
        }
    }

    #[test]
    fn the_chunk_path_replays_as_the_per_request_loop() {
        // Open-loop traces from idle (one request at a time) to far beyond the device (deep
        // queues), on FCFS presets of 1 to 8 channels, with and without faults, in chunks
        // of 1, 7 and 8,192: the chunk path (each arrival placed in one call, outcomes added
        // up at placement) gives the run of the per-request loop, every field alike.
        let plan = crate::scenario::parse(
            "seed = 4\n[[error]]\nprobability = 0.3\n\
             [[spike]]\nstart = \"2ms\"\nend = \"9ms\"\nfactor = 3.0\n\
             [[stall]]\nstart = \"12ms\"\nduration = \"2ms\"\n",
        )
        .unwrap();
        let mut depths = Vec::new();
        for device in ["emu:nvme", "emu:optane", "emu:nvram,channels=3", "emu:hdd", "emu:sdcard,channels=4"] {
            let spec = parse_spec(device).unwrap();
            let base = bursty_trace(device.len() as u64, 20_000);
            // Arrival gaps times 1/64 (deep queues) up to 64 (mostly idle).
            for (num, den) in [(1, 64), (1, 4), (1, 1), (64, 1)] {
                let trace: Vec<TraceIo> =
                    base.iter().map(|io| TraceIo { arrival_ns: io.arrival_ns * num / den, ..*io }).collect();
                for faults in [FaultPlan::default(), plan.clone()] {
                    for size in [1, 7, 8192] {
                        let [per_request, chunked] = [true, false].map(|per_request| {
                            let src = Chunks::new(SliceChunks { ios: &trace, size }, Vec::new());
                            let run = run_chunks(&spec, src, &faults, Hooks::default(), per_request).unwrap();
                            VirtualRun { wall_ns: 0, cpu_ns: 0, ..run }
                        });
                        assert_eq!(per_request, chunked, "{device} gaps x {num}/{den} chunks of {size}");
                        assert_eq!(faults.is_empty(), chunked.errors == [0, 0], "{device}");
                    }
                    let src = Chunks::new(SliceChunks { ios: &trace, size: 8192 }, Vec::new());
                    depths.push(run_chunks(&spec, src, &faults, Hooks::default(), false).unwrap().outstanding_max);
                }
            }
            // Completions at an arrival's instant: groups of `channels` 4 KiB reads, one group
            // each service time, so each group completes as the next arrives (retired first).
            let one = TraceIo { arrival_ns: 0, op: Op::Read, offset: 0, bytes: 4096, stream: 0 };
            let (_, r) = run_virtual_records(&spec, &Workload::Trace(vec![one]), true, &FaultPlan::default()).unwrap();
            let (service, n) = (r[0].complete_ns, u64::from(spec.model.channels));
            let ties: Vec<TraceIo> = (0..6_000u64)
                .map(|i| TraceIo { arrival_ns: i / n * service, offset: i * 4096 % (1 << 28), ..one })
                .collect();
            let [per_request, chunked] = [true, false].map(|per_request| {
                let src = Chunks::new(SliceChunks { ios: &ties, size: 7 }, Vec::new());
                let run = run_chunks(&spec, src, &FaultPlan::default(), Hooks::default(), per_request).unwrap();
                VirtualRun { wall_ns: 0, cpu_ns: 0, ..run }
            });
            assert_eq!(per_request, chunked, "{device}: ties");
            if device == "emu:nvme" {
                assert_eq!(chunked.outstanding_max, n, "{device}: a completion at an arrival's instant retires first");
            }
            // The command's path (the reader thread, no observer) against the iterator's loop.
            let text: String = std::iter::once("fio version 3 iolog\n0 /dev/a add\n".to_string())
                .chain(base.iter().map(|io| {
                    let op = if io.op == Op::Write { "write" } else { "read" };
                    format!("{} /dev/a {op} {} {}\n", io.arrival_ns / 1000, io.offset, io.bytes)
                }))
                .collect();
            let options = TraceOptions { capacity_bytes: Some(spec.capacity_bytes), ..TraceOptions::default() };
            let reader = TraceReader::new(text.as_bytes(), options.clone()).unwrap();
            let a = replay_trace(&spec, reader, &FaultPlan::default(), Hooks::default()).unwrap();
            let mut reader = TraceReader::new(text.as_bytes(), options).unwrap();
            let b = replay_reader(&spec, &mut reader, &FaultPlan::default(), Hooks::default()).unwrap();
            let same = |r: VirtualRun| VirtualRun { wall_ns: 0, cpu_ns: 0, ..r };
            assert_eq!(a.ios, 20_000);
            assert_eq!(same(a), same(b), "{device}: the command's path");
        }
        // The depths spanned a burst's few (bursts of up to about ten at one instant) to
        // thousands queued.
        assert!(depths.iter().any(|&d| d <= 12) && depths.iter().any(|&d| d > 10_000), "{depths:?}");
    }
}
