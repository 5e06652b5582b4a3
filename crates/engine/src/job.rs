//! A job: N threads doing synchronous I/O on one target for a duration, each I/O waited
//! for by a fixed strategy or by the SmartCon decision, every I/O measured.
//!
//! The per-I/O path is: pick an offset, then one [`SmartTargetPort`] call, which enters
//! the in-flight counters (which return the backlog ahead), decides (one atomic load of the
//! System Monitor), submits and waits, leaves the counters and records the latency. No
//! allocation and no syscall beyond the I/O's own; the only shared writes are the target's
//! in-flight counters (and, on emulated devices, the channel lock a device queue would
//! take). `--verify` adds the pattern check.
//!
//! A worker that panics sets the run's halt flag through a guard while it unwinds, so the
//! others stop at their next I/O, and its join turns into an [`ErrorKind::Internal`]
//! error: the run ends with an error instead of hanging or taking the caller down.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use smartcon_util::rng::Rng;
use smartcon_util::Op;

use crate::clock::tighten_timer_slack;
use crate::decision::Strategy;
use crate::error::{Error, ErrorKind};
use crate::monitor::SystemMonitor;
use crate::profile::Profile;
use crate::smartport::{SmartPortOptions, SmartTargetPort};
use crate::stats::{JobResult, ThreadStats};
use crate::stop::{join, StopOnPanic};
use crate::target::{check_whole, AlignedBuf, Target};
use crate::verify;
use crate::wait::PollParams;

/// The seed of the pattern temporary files and `--verify` prefills are written with.
pub const FILL_SEED: u64 = 0x5eed_f111;

/// Limits on job parameters: beyond these the input is a mistake, not a workload.
pub const BS_BYTES_MAX: u64 = smartcon_util::units::IO_SIZE.max_bytes;
pub const THREADS_MAX: u32 = 256;
pub const DURATION_NS_MAX: u64 = 24 * 3600 * 1_000_000_000;
/// The default spin budget: past it a spinner sleeps (SmartCon spins for one I/O, not for
/// a disk's milliseconds).
pub const SPIN_BUDGET_NS_DEFAULT: u64 = 1_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    Seq,
    Rand,
}

impl Pattern {
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Seq => "seq",
            Pattern::Rand => "rand",
        }
    }
}

/// The warm-up (`JobSpec::warmup_ios`) of every turn of the interleaved comparisons (probe,
/// evaluate). A fresh thread and ring pay for their first I/O: in 20 ms runs of `smartcon
/// io` on the local disk the slowest I/O took 0.9-2.2 ms blocking and 0.33-0.46 ms
/// spinning, against 50-60 us typical, so in a 25 ms turn that one I/O alone would move
/// the turn's mean by several percent, against block.
pub const TURN_WARMUP_IOS: u32 = 8;

/// A fixed strategy or the SmartCon decision per I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StrategyChoice {
    Fixed(Strategy),
    Smart,
    /// The SmartCon decision, busy-waiting the `hybrid` way where it would spin.
    SmartHybrid,
    /// The paper's Decision Module as written (`decision::decide_paper`): declared device
    /// classes, Q = 0, machine-wide CPU utilization, no spin-cheaper branch.
    Paper,
    /// The same with Fig. 7's Q = 1.
    PaperQ1,
    /// smart without the port's checks of its own waits (`crate::learn`): the rule on the
    /// probe's thresholds alone, to measure what the checks change, in the same rounds.
    SmartStatic,
}

impl StrategyChoice {
    /// Every name `parse` takes: the fixed strategies, then the decisions.
    pub fn names() -> Vec<&'static str> {
        Strategy::ALL
            .iter()
            .map(|s| s.name())
            .chain(["smart", "smart-hybrid", "paper", "paper-q1", "smart-static"])
            .collect()
    }

    pub fn name(self) -> &'static str {
        match self {
            StrategyChoice::Fixed(s) => s.name(),
            StrategyChoice::Smart => "smart",
            StrategyChoice::SmartHybrid => "smart-hybrid",
            StrategyChoice::Paper => "paper",
            StrategyChoice::PaperQ1 => "paper-q1",
            StrategyChoice::SmartStatic => "smart-static",
        }
    }

    pub fn parse(text: &str) -> Option<StrategyChoice> {
        Some(match text {
            "smart" => StrategyChoice::Smart,
            "smart-hybrid" => StrategyChoice::SmartHybrid,
            "paper" => StrategyChoice::Paper,
            "paper-q1" => StrategyChoice::PaperQ1,
            "smart-static" => StrategyChoice::SmartStatic,
            _ => StrategyChoice::Fixed(*Strategy::ALL.iter().find(|s| s.name() == text)?),
        })
    }

    /// Whether the job needs the polling parameters.
    pub fn polls(self) -> bool {
        match self {
            StrategyChoice::Fixed(s) => s.is_polling(),
            StrategyChoice::Smart | StrategyChoice::SmartStatic | StrategyChoice::Paper | StrategyChoice::PaperQ1 => {
                false
            }
            StrategyChoice::SmartHybrid => true,
        }
    }

    /// The strategy for waits outside the measured I/O (prefill, read-back, fsync): the
    /// fixed strategy where it is a simple one, else block.
    pub fn simple(self) -> Strategy {
        match self {
            StrategyChoice::Fixed(s) if !s.is_polling() => s,
            _ => Strategy::Block,
        }
    }
}

#[derive(Debug, Clone)]
pub struct JobSpec {
    pub op: Op,
    pub pattern: Pattern,
    pub bs_bytes: u64,
    /// The region I/O goes to, from offset 0; `None` = the whole target.
    pub span_bytes: Option<u64>,
    pub strategy: StrategyChoice,
    pub threads: u32,
    pub duration_ns: u64,
    /// Stop after this many I/Os in all (whichever of this and the duration comes first).
    pub ios_max: Option<u64>,
    pub verify: bool,
    /// With `verify`, write the fill pattern over the span first. Off when the span
    /// already holds it (a second pass over the same data).
    pub prefill: bool,
    pub seed: u64,
    pub spin_budget_ns: u64,
    /// Writes only: each thread flushes (fsync) after every this many writes, waiting with
    /// the same strategy (Filebench varmail's fsync after appends). 0 = never.
    pub fsync_every: u32,
    /// The polling strategies' parameters (interval, alpha, sampling phase).
    pub poll: PollParams,
    /// The CPUs the I/O threads are pinned to (`None`: wherever the scheduler puts them;
    /// see [`crate::placement`] for why a comparison pins them).
    pub cpus: Option<Vec<usize>>,
    /// I/Os each thread does before its measurement starts (fio's ramp): the first I/Os
    /// on a fresh ring and thread pay one-time costs (page faults, a migration to the
    /// pinned CPU, the kernel's first-use paths) that a short turn would count in full.
    pub warmup_ios: u32,
}

impl JobSpec {
    pub fn new(op: Op, pattern: Pattern, bs_bytes: u64, strategy: StrategyChoice) -> JobSpec {
        JobSpec {
            op,
            pattern,
            bs_bytes,
            span_bytes: None,
            strategy,
            threads: 1,
            duration_ns: 1_000_000_000,
            ios_max: None,
            verify: false,
            prefill: true,
            seed: 1,
            spin_budget_ns: SPIN_BUDGET_NS_DEFAULT,
            fsync_every: 0,
            poll: PollParams::DEFAULT,
            cpus: None,
            warmup_ios: 0,
        }
    }

    /// Checks the spec against the target; returns the span to use.
    pub fn validate(&self, target: &dyn Target) -> Result<u64, Error> {
        let usage = |m: String| Err(Error::new(ErrorKind::Usage, m));
        let block = target.block_bytes();
        // The bounds every `--bs` is parsed with (a job built by code is held to them too).
        if let Err(e) = smartcon_util::units::IO_SIZE.check(self.bs_bytes) {
            return usage(format!("block size: {e}"));
        }
        if !self.bs_bytes.is_multiple_of(block) {
            return usage(format!(
                "block size {} is not a multiple of {}'s logical block size {block} (O_DIRECT needs aligned sizes and offsets)",
                self.bs_bytes,
                target.label()
            ));
        }
        let capacity = target.capacity_bytes();
        let span = self.span_bytes.unwrap_or(capacity);
        if span > capacity {
            return usage(format!("span {span} is larger than {} ({capacity} bytes)", target.label()));
        }
        if !span.is_multiple_of(block) {
            return usage(format!("span {span} is not a multiple of the logical block size {block}"));
        }
        if span < self.bs_bytes * self.threads as u64 {
            return usage(format!(
                "span {span} is too small for {} thread(s) of {}-byte I/O",
                self.threads, self.bs_bytes
            ));
        }
        if self.threads == 0 || self.threads > THREADS_MAX {
            return usage(format!("threads must be 1..={THREADS_MAX}"));
        }
        if self.duration_ns == 0 || self.duration_ns > DURATION_NS_MAX {
            return usage("duration must be more than 0 and at most 24 h".into());
        }
        if self.spin_budget_ns == 0 || self.spin_budget_ns > 10_000_000_000 {
            return usage("spin budget must be more than 0 and at most 10 s".into());
        }
        if self.strategy.polls() {
            self.poll.validate(self.duration_ns)?;
        }
        if self.verify && !self.bs_bytes.is_multiple_of(verify::UNIT_BYTES) {
            return usage(format!(
                "--verify checks data in {}-byte units; block size {} is not a multiple of that",
                verify::UNIT_BYTES,
                self.bs_bytes
            ));
        }
        if self.fsync_every > 0 && self.op != Op::Write {
            return usage("fsync applies to write jobs only".into());
        }
        Ok(span)
    }
}

/// A tiny seeded generator for offsets (xorshift64*), one per thread.
/// Which slots a write job has written, so the read-back knows what to expect.
struct WrittenMap(Vec<AtomicU64>);

impl WrittenMap {
    fn new(slots: u64) -> WrittenMap {
        WrittenMap((0..slots.div_ceil(64)).map(|_| AtomicU64::new(0)).collect())
    }

    fn set(&self, slot: u64) {
        self.0[(slot / 64) as usize].fetch_or(1 << (slot % 64), Ordering::Relaxed);
    }

    /// A write to `slot` failed: what the device holds there is unknown, so the read-back
    /// must not expect the pattern (a failed write is never counted as written).
    fn clear(&self, slot: u64) {
        self.0[(slot / 64) as usize].fetch_and(!(1 << (slot % 64)), Ordering::Relaxed);
    }

    fn get(&self, slot: u64) -> bool {
        self.0[(slot / 64) as usize].load(Ordering::Relaxed) & (1 << (slot % 64)) != 0
    }
}

struct Shared<'a> {
    target: &'a dyn Target,
    spec: &'a JobSpec,
    profile: &'a Profile,
    monitor: &'a SystemMonitor,
    /// The caller's stop (Ctrl-C).
    stop: &'a AtomicBool,
    /// This run's own stop: set by a worker that failed or panicked (never the caller's
    /// flag, which outlives the run).
    halt: AtomicBool,
    span: u64,
    written: Option<WrittenMap>,
    /// Only with `ios_max`: an unbounded job must not share a counter on every I/O.
    ios_left: Option<AtomicU64>,
    /// Workers that finished their setup (the start line; see [`Shared::start_line`]).
    ready: AtomicU32,
}

/// How long a worker waits between two looks at the start line.
const START_LINE_POLL_NS: u64 = 50_000;

impl Shared<'_> {
    /// The caller's flag, the process-wide one (a library caller's own flag may not be the
    /// one the signal handler sets) or this run's halt.
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || crate::stop::requested() || self.halt.load(Ordering::Relaxed)
    }

    /// Waits until every worker finished its setup, so the measurements start together.
    /// Unlike a `Barrier` it gives up when the run halts: a worker that panicked or failed
    /// before arriving must not leave the others waiting forever.
    fn start_line(&self) {
        self.ready.fetch_add(1, Ordering::SeqCst);
        while self.ready.load(Ordering::SeqCst) < self.spec.threads && !self.stopped() {
            std::thread::sleep(std::time::Duration::from_nanos(START_LINE_POLL_NS));
        }
    }

    fn port_options(&self) -> SmartPortOptions {
        SmartPortOptions {
            strategy: self.spec.strategy,
            spin_budget_ns: self.spec.spin_budget_ns,
            poll: self.spec.poll,
            block_wait: crate::smartport::BlockWait::Kernel,
            profile: Some(self.profile.clone()),
            monitor: Some(Arc::new(self.monitor.clone())),
            inflight: None,
            time: None,
        }
    }
}

/// Runs a job. `stop` ends it early (Ctrl-C); what was measured until then is returned
/// with `interrupted` set. A worker that fails ends the run with its error; one that
/// panics ends it with an [`ErrorKind::Internal`] error.
pub fn run_job(
    target: &dyn Target,
    spec: &JobSpec,
    profile: &Profile,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<JobResult, Error> {
    let span = spec.validate(target)?;
    let slots = span / spec.bs_bytes;
    if spec.verify && spec.prefill {
        prefill(target, span, stop)?;
    }
    let shared = Shared {
        target,
        spec,
        profile,
        monitor,
        stop,
        halt: AtomicBool::new(false),
        span,
        written: (spec.verify && spec.op == Op::Write).then(|| WrittenMap::new(slots)),
        ios_left: spec.ios_max.map(AtomicU64::new),
        ready: AtomicU32::new(0),
    };
    let results: Vec<Result<ThreadStats, Error>> = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(spec.threads as usize);
        let mut spawn_error = None;
        for t in 0..spec.threads {
            let shared = &shared;
            match std::thread::Builder::new()
                .name(format!("smartcon-io-{t}"))
                .spawn_scoped(s, move || worker(shared, t))
            {
                Ok(h) => handles.push(h),
                Err(e) => {
                    shared.halt.store(true, Ordering::SeqCst);
                    spawn_error = Some(Error::new(ErrorKind::Setup, format!("cannot start I/O thread {t}: {e}")));
                    break;
                }
            }
        }
        let mut results: Vec<_> = handles.into_iter().map(|h| join(h, "I/O").and_then(|r| r)).collect();
        results.extend(spawn_error.map(Err));
        results
    });
    let mut stats = Vec::with_capacity(results.len());
    // The first error in thread order, but a panic (Internal) over the errors it caused.
    let mut failed: Option<Error> = None;
    for r in results {
        match r {
            Ok(t) => stats.push(t),
            Err(e) => {
                if failed.as_ref().is_none_or(|f| f.kind != ErrorKind::Internal && e.kind == ErrorKind::Internal) {
                    failed = Some(e);
                }
            }
        }
    }
    if let Some(e) = failed {
        return Err(e);
    }
    if let Some(written) = &shared.written {
        read_back(&shared, written)?;
    }
    let interrupted = stop.load(Ordering::Relaxed) || crate::stop::requested();
    Ok(JobResult::from_threads(target, spec, profile, &stats, interrupted))
}

/// Writes the pattern over the span so reads can be checked (skipped where the target was
/// created filled, like temporary files). It stops at the next 1 MiB chunk when the
/// caller's or the process-wide flag is set; the workers then see the same flag and do no
/// I/O, so nothing reads the part left unfilled. The units are [`verify::UNIT_BYTES`],
/// the same as every read checks, whatever its size.
fn prefill(target: &dyn Target, span: u64, stop: &AtomicBool) -> Result<(), Error> {
    let mut port = target.open_port()?;
    let chunk = (1u64 << 20).min(span);
    let mut buf = AlignedBuf::new(chunk as usize);
    let mut off = 0;
    while off < span && !stop.load(Ordering::Relaxed) && !crate::stop::requested() {
        let len = chunk.min(span - off) as usize;
        let b = &mut buf.as_mut_slice()[..len];
        verify::fill(b, off, verify::UNIT_BYTES, FILL_SEED);
        port.io(Op::Write, b, off, Strategy::Block, SPIN_BUDGET_NS_DEFAULT)?;
        off += len as u64;
    }
    Ok(())
}

fn read_back(shared: &Shared<'_>, written: &WrittenMap) -> Result<(), Error> {
    let spec = shared.spec;
    let mut port = shared.target.open_port()?;
    let mut buf = AlignedBuf::new(spec.bs_bytes as usize);
    let unit = verify::unit_bytes(spec.bs_bytes);
    let strategy = spec.strategy.simple();
    for slot in 0..shared.span / spec.bs_bytes {
        if !written.get(slot) {
            continue;
        }
        let off = slot * spec.bs_bytes;
        port.io(Op::Read, buf.as_mut_slice(), off, strategy, spec.spin_budget_ns)?;
        verify::check(buf.as_slice(), off, unit, spec.seed)
            .map_err(|m| Error::new(ErrorKind::Verify, m.to_string()))?;
    }
    Ok(())
}

fn worker(shared: &Shared<'_>, index: u32) -> Result<ThreadStats, Error> {
    // Unwinding from here on stops the other workers at their next I/O.
    let _halt_on_panic = StopOnPanic(&shared.halt);
    let result = measure(shared, index);
    if result.is_err() {
        shared.halt.store(true, Ordering::SeqCst);
    }
    result
}

fn measure(shared: &Shared<'_>, index: u32) -> Result<ThreadStats, Error> {
    let spec = shared.spec;
    let _registration = shared.monitor.register_current_thread();
    tighten_timer_slack();
    let pinned = spec.cpus.as_deref().map_or(Ok(()), crate::placement::pin_current_thread);
    let port = pinned.and_then(|()| SmartTargetPort::on_target(shared.target, shared.port_options()));
    let mut buf = AlignedBuf::new(spec.bs_bytes as usize);
    if port.is_err() {
        shared.halt.store(true, Ordering::SeqCst);
    }
    // Every thread reaches the start line, also when its setup failed, so no one waits.
    shared.start_line();
    let mut port = port?;
    let bs = spec.bs_bytes;
    let slots = shared.span / bs;
    let threads = spec.threads as u64;
    // Sequential: each thread walks its own contiguous share of the span.
    let (first, count) = (slots * index as u64 / threads, slots / threads);
    let mut next = 0u64;
    let mut rng = Rng::new(spec.seed ^ ((index as u64 + 1) << 32));
    let unit = verify::unit_bytes(bs);
    port.reset_counters();
    let mut end_ns = port.counters().start_ns + spec.duration_ns;
    let mut warm_left = spec.warmup_ios;
    loop {
        if shared.stopped() {
            break;
        }
        if let Some(left) = &shared.ios_left {
            if left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_err() {
                break;
            }
        }
        let slot = match spec.pattern {
            Pattern::Seq => {
                let s = first + next;
                next = (next + 1) % count.max(1);
                s
            }
            Pattern::Rand => rng.below(slots),
        };
        let offset = slot * bs;
        if spec.verify && spec.op == Op::Write {
            verify::fill(buf.as_mut_slice(), offset, unit, spec.seed);
        }
        let moved = match spec.op {
            Op::Read => port.read_at(buf.as_mut_slice(), offset),
            Op::Write => port.write_at(buf.as_slice(), offset),
        };
        let moved = match moved {
            // A long emulated wait cut short by the process-wide stop: the run ends as
            // interrupted with what it measured, like a stop between two I/Os.
            Err(e) if e.kind == ErrorKind::Interrupted => break,
            other => other.and_then(|m| check_whole(m, bs as usize, spec.op, offset).map(|()| m)),
        };
        if let (Err(_), Some(w), Op::Write) = (&moved, &shared.written, spec.op) {
            w.clear(slot);
        }
        moved?;
        if spec.verify {
            match (&shared.written, spec.op) {
                (Some(w), Op::Write) => w.set(slot),
                (_, Op::Read) => verify::check(buf.as_slice(), offset, unit, FILL_SEED)
                    .map_err(|m| Error::new(ErrorKind::Verify, m.to_string()))?,
                _ => {}
            }
        }
        if warm_left > 0 {
            warm_left -= 1;
            if warm_left == 0 {
                // The measurement starts now: time, CPU, context switches and counts.
                port.reset_counters();
                end_ns = port.counters().start_ns + spec.duration_ns;
            }
            continue;
        }
        if spec.fsync_every > 0 && port.counters().ios.is_multiple_of(spec.fsync_every as u64) {
            port.fsync()?;
        }
        // On the port's clock, as `end_ns` is (its counters' start).
        if port.now_ns() >= end_ns {
            break;
        }
    }
    Ok(port.finish())
}
