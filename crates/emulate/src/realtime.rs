//! The reference system: the same arrivals through the engine's emulated target in real
//! time (real threads, io_uring timers, the RAM store moving the data), and how late its
//! completions are against the model.
//!
//! A closed-loop job runs `qd` threads, each issuing the next request of the same stream
//! the virtual replay used as soon as its previous one returned (plus `think`). A trace
//! runs a pool of threads as large as the virtual replay's largest backlog (at most
//! [`THREADS_MAX`]); each takes the next I/O and sleeps until its arrival instant.
//!
//! Waiting, every way through the thread's engine SmartPort
//! ([`smartcon_engine::smartport::SmartTargetPort::on_target`]), as a job's I/O does, so
//! `--strategy` means what it means everywhere: a fixed strategy (`block`, `spin`, `sync`,
//! `hybrid`) or a decision per I/O (`smart`, `paper`: the engine's `decide` on the model's
//! thresholds and the target's in-flight counters). `block`, whether fixed or decided, is
//! the reference wait (the port's [`BlockWait::Reference`], the seed's reference system,
//! `smartcon_engine::wait::reference`: a kernel timer for the model's instant, armed early
//! by the wake-up overshoot this thread measured, p99 of its recent sleeps, then the clock
//! is watched until the instant itself; a timer alone wakes 35-70 us late on a loaded VM,
//! more than 2% of a 1.16 ms SD card write). `spin` polls the status with a 1 ms budget
//! (past it the thread sleeps); `hybrid` is the port's own polling policy
//! (engine::wait::hybrid with the default parameters: sleeps until just before the
//! predicted completion, minus the measured wake-up overshoot, then polls; its port reads
//! an idle monitor, so it never takes the policy's busy branch, see `port_options`). The
//! port reports the model's completion instant of each I/O
//! ([`SmartTargetPort::last_done_ns`]) and counts what it decided, by strategy and by
//! reason.
//!
//! Lateness of one I/O = the instant the waiting thread got control back from the emulated
//! port ([`SmartTargetPort::last_seen_ns`], read before the SmartPort counts the I/O) minus
//! the model's completion instant for it ([`SmartTargetPort::last_done_ns`]). Within 2%
//! means lateness <= 2% of the model's latency for that I/O (Griffin et al.'s criterion, as
//! the seed uses it).
//! On a shared host other processes delay wake-ups; `fifo` runs the replay threads under
//! SCHED_FIFO (priority 1) so a timer's wake-up preempts them, as the seed's emulator runs
//! its simulation thread at the highest priority. The threads sleep or spin within a
//! bounded budget, so they cannot starve the host. Non-goals: CPU pinning.
//!
//! Faults: a spec with `faults=FILE` injects the scenario in real time, its windows counted
//! from the replay's start as in virtual time. A failed I/O (EIO from the target) is
//! counted per op and left out of the latency and lateness figures; request ids follow the
//! submission order, which is the arrival order with one thread (the same I/Os fail as in
//! the virtual run) and close to it with several.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use smartcon_devemu::{EmuSpec, Op};
use smartcon_emutarget::emu::EmuTarget;
use smartcon_engine::clock::{self, tighten_timer_slack};
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::smartport::{BlockWait, PortCounters, SmartPortOptions, SmartTargetPort, StrategyChoice};
use smartcon_engine::stats::Decisions;
use smartcon_engine::target::{check_whole, AlignedBuf, IoBuf};

use crate::replay::PerOp;
use crate::stats::{LatencyHist, LatencySummary};
use crate::trace::{TraceError, TraceIo};

/// The most threads a trace replay starts.
pub const THREADS_MAX: u64 = 64;

/// How the real run went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealTimeRun {
    pub strategy: &'static str,
    /// I/Os by the strategy they waited with and, for `smart` and `paper`, by the
    /// decision's reason.
    pub decisions: Decisions,
    /// `block` I/Os waited for with the reference wait (all of them).
    pub reference_waits: u64,
    /// I/Os whose thread had control back before the model's completion instant (none
    /// should: a wait that returned early).
    pub early: u64,
    pub threads: u64,
    pub fifo: bool,
    pub all: LatencySummary,
    pub by_op: PerOp,
    pub wall_ns: u64,
    /// Share (0..1) of I/Os whose lateness is within 2% of the model's latency.
    pub within_2pct: f64,
    /// Share of I/Os late by at most 20 us.
    pub within_20us: f64,
    pub lateness_ns_p50: u64,
    pub lateness_ns_p99: u64,
    /// Trace replays: how late threads started I/Os against the trace's instants (p99).
    pub start_late_ns_p99: u64,
    /// I/Os the fault scenario failed: reads, writes.
    pub errors: [u64; 2],
}

/// The strategies a real-time replay takes: the fixed ones a replay thread can wait with,
/// and the decisions.
pub const STRATEGIES: [&str; 6] = ["block", "spin", "sync", "hybrid", "smart", "paper"];

/// The replay's `--strategy`: one of [`STRATEGIES`].
pub fn parse_strategy(text: &str) -> Option<StrategyChoice> {
    STRATEGIES.contains(&text).then(|| StrategyChoice::parse(text)).flatten()
}

/// The port a replay thread waits through: a spin budget of 1 ms, and `block` (fixed or
/// decided) done as the reference wait.
fn port_options(strategy: StrategyChoice) -> SmartPortOptions {
    let block_wait = match strategy {
        // Never blocks: no margin to calibrate (about 8 ms of sleeps per thread).
        StrategyChoice::Fixed(s) if s != Strategy::Block => BlockWait::Kernel,
        _ => BlockWait::Reference,
    };
    // A fixed strategy reads no CPU figure, except hybrid's busy branch: told the others'
    // demand is past the threshold, it sleeps to the predicted completion and pays the
    // wake-up (4.8-4.9% of emu:nvme reads within 2% of the model against 23.7-31.6% without
    // it, docs/emulator.md). The replay's hybrid is the accuracy of the policy's own wait, as
    // before it went through a SmartPort: a monitor that reads idle. The decisions read the
    // process-wide monitor, as a job's do.
    let monitor = match strategy {
        StrategyChoice::Fixed(_) => Some(Arc::new(SystemMonitor::fixed(0))),
        _ => None,
    };
    SmartPortOptions { strategy, spin_budget_ns: 1_000_000, block_wait, monitor, ..Default::default() }
}

/// The buffer of an `op` on `data`.
fn io_buf(op: Op, data: &mut [u8]) -> IoBuf<'_> {
    match op {
        Op::Read => IoBuf::Read(data),
        Op::Write => IoBuf::Write(data),
    }
}

/// Puts the calling thread under SCHED_FIFO at priority 1.
fn enter_fifo() -> Result<(), Error> {
    let param = libc::sched_param { sched_priority: 1 };
    // SAFETY: pid 0 is the calling thread; `param` is a valid sched_param for the call.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc != 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(Error::os(
            ErrorKind::Setup,
            errno,
            "cannot run the replay threads under SCHED_FIFO (needs root or CAP_SYS_NICE); drop --fifo",
        ));
    }
    Ok(())
}

/// What the replay threads measured, shared (each records after its I/O is timed).
struct Shared {
    lat: [LatencyHist; 2],
    lateness: LatencyHist,
    start_late: LatencyHist,
    within_2pct: u64,
    within_20us: u64,
    early: u64,
    /// What the threads' ports counted, merged as each thread ends.
    counters: PortCounters,
}

/// Replays `ios` (the I/Os the virtual run replayed, streamed again) on a real emulated
/// target with `threads` threads, in constant memory: latencies and lateness go into
/// histograms. `closed` is a closed loop's (qd, think); a trace's I/Os start at their
/// instants. `bytes_max` is the largest request (the buffer size).
#[allow(clippy::too_many_arguments)]
pub fn run_real_time<I>(
    spec: &EmuSpec,
    ios: I,
    threads: u64,
    bytes_max: u64,
    closed: Option<(u32, u64)>,
    strategy: StrategyChoice,
    fifo: bool,
) -> Result<RealTimeRun, Error>
where
    I: Iterator<Item = Result<TraceIo, TraceError>> + Send,
{
    // One clock for the replay: the target's, which its ports, their waits and the model's
    // instants are on (the host's: this is the real-time reference), and which the threads
    // below read and sleep on for arrivals and think times.
    let time = clock::real();
    // Time for every thread to start (and a block waiter to measure its wake-up).
    let base_ns = time.now_ns() + 20_000_000;
    // Fault windows count from the replay's start, as in virtual time.
    let target = EmuTarget::with_time(spec.clone(), time.clone(), base_ns)?;
    let time = &*time;
    let threads = threads.clamp(1, THREADS_MAX.max(closed.map_or(0, |(qd, _)| u64::from(qd))));
    let buf_bytes = bytes_max.max(4096).next_multiple_of(4096) as usize;
    let source = Mutex::new(ios);
    let shared = Mutex::new(Shared {
        lat: [LatencyHist::new(), LatencyHist::new()],
        lateness: LatencyHist::new(),
        start_late: LatencyHist::new(),
        within_2pct: 0,
        within_20us: 0,
        early: 0,
        counters: PortCounters::new(),
    });
    let failed = [AtomicU64::new(0), AtomicU64::new(0)];
    let wall_start_ns = time.now_ns();
    let faulty = spec.faults.is_some();
    let results: Vec<Result<(), Error>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (target, source, shared, failed) = (&target, &source, &shared, &failed);
                scope.spawn(move || -> Result<(), Error> {
                    // The default 50 us slack would make every timed wait late by that much.
                    tighten_timer_slack();
                    if fifo {
                        enter_fifo()?;
                    }
                    // Opened on this thread (under SCHED_FIFO if asked): a block waiter's
                    // margin is measured here, about 8 ms.
                    let mut port = SmartTargetPort::on_target(target, port_options(strategy))?;
                    let mut buf = AlignedBuf::new(buf_bytes);
                    let mut first = true;
                    loop {
                        // SIGINT/SIGTERM set the engine's stop flag: the replay ends within a
                        // sleep slice, and the caller reports what was measured as interrupted.
                        if smartcon_engine::stop::requested() {
                            break;
                        }
                        let next = source.lock().unwrap_or_else(|e| e.into_inner()).next();
                        let r = match next {
                            None => break,
                            Some(Ok(r)) => r,
                            Some(Err(e)) => return Err(e.into()),
                        };
                        let mut start_late_ns = 0;
                        match closed {
                            Some((_, think_ns)) => {
                                if !first && think_ns > 0 {
                                    time.sleep_until(time.now_ns() + think_ns);
                                }
                            }
                            None => {
                                let at = base_ns + r.arrival_ns;
                                // In slices, so a stop request is seen while waiting for a
                                // late arrival (a trace may idle for minutes).
                                while time.now_ns() + 100_000_000 < at && !smartcon_engine::stop::requested() {
                                    time.sleep_until(time.now_ns() + 100_000_000);
                                }
                                if smartcon_engine::stop::requested() {
                                    break;
                                }
                                time.sleep_until(at);
                                start_late_ns = time.now_ns().saturating_sub(at);
                            }
                        }
                        first = false;
                        let t0 = time.now_ns();
                        let data = &mut buf.as_mut_slice()[..r.bytes as usize];
                        let moved = match port.transfer(io_buf(r.op, data), r.offset) {
                            Err(e) if e.kind == ErrorKind::Io && e.errno == Some(libc::EIO) && faulty => {
                                failed[(r.op == Op::Write) as usize].fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            other => other?,
                        };
                        check_whole(moved, r.bytes as usize, r.op, r.offset)?;
                        // The instant the wait ended, read by the port as soon as the
                        // emulated port returned (where this loop read it before the replay
                        // went through a SmartPort): the port's own counting afterwards is
                        // not the emulator's lateness.
                        let t1 = port.last_seen_ns();
                        let done_ns = port.last_done_ns();
                        let model_ns = done_ns.saturating_sub(t0);
                        let lateness_ns = t1.saturating_sub(done_ns);
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        s.lat[(r.op == Op::Write) as usize].record(t1 - t0);
                        s.lateness.record(lateness_ns);
                        s.start_late.record(start_late_ns);
                        s.within_2pct += u64::from(lateness_ns as f64 <= 0.02 * model_ns as f64);
                        s.within_20us += u64::from(lateness_ns <= 20_000);
                        s.early += u64::from(t1 < done_ns);
                    }
                    let counted = port.finish();
                    shared.lock().unwrap_or_else(|e| e.into_inner()).counters.merge(&counted);
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "a replay thread panicked"))))
            .collect()
    });
    let wall_ns = time.now_ns().saturating_sub(wall_start_ns);
    for r in results {
        r?;
    }
    let s = shared.into_inner().unwrap_or_else(|e| e.into_inner());
    let [reads, writes] = &s.lat;
    let mut all = reads.clone();
    all.add(writes);
    let n = all.count().max(1) as f64;
    Ok(RealTimeRun {
        strategy: strategy.name(),
        decisions: Decisions::of_counts(&s.counters.by_strategy, &s.counters.by_reason),
        reference_waits: s.counters.reference_waits,
        early: s.early,
        threads,
        fifo,
        all: all.summary(),
        by_op: PerOp { read: reads.summary(), write: writes.summary() },
        wall_ns,
        within_2pct: s.within_2pct as f64 / n,
        within_20us: s.within_20us as f64 / n,
        lateness_ns_p50: s.lateness.quantile(0.5),
        lateness_ns_p99: s.lateness.quantile(0.99),
        start_late_ns_p99: s.start_late.quantile(0.99),
        errors: failed.map(|f| f.into_inner()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::ClosedLoop;
    use smartcon_devemu::parse_spec;

    fn ring_available() -> bool {
        match smartcon_engine::ring::Ring::new() {
            Ok(_) => true,
            Err(e) => {
                eprintln!("skipping: io_uring is not available here ({})", e.message);
                false
            }
        }
    }

    #[test]
    fn real_time_replays_every_io_and_never_completes_early() {
        if !ring_available() {
            return;
        }
        let spec = parse_spec("emu:sdcard,channels=2").unwrap();
        let closed =
            ClosedLoop { op: Op::Read, sequential: false, bs_bytes: 4096, qd: 2, ios: 40, think_ns: 0, seed: 3 };
        let ios = closed.trace_ios(spec.capacity_bytes);
        let spin = StrategyChoice::Fixed(Strategy::Spin);
        let r = run_real_time(&spec, ios, 2, 4096, Some((2, 0)), spin, false).unwrap();
        assert_eq!(r.all.ios, 40);
        assert_eq!(r.threads, 2);
        assert_eq!((r.decisions.count(Strategy::Spin), r.reference_waits, r.early), (40, 0, 0));
        // A thread never sees its I/O before the model's instant, so latency >= the table's.
        assert!(r.all.lat_ns_p50 >= 5_700 && r.all.lat_ns_max >= r.all.lat_ns_p50);
        assert!((0.0..=1.0).contains(&r.within_2pct) && (0.0..=1.0).contains(&r.within_20us));
        // An open-loop trace: I/Os start no earlier than their instants.
        let at = |t| TraceIo { arrival_ns: t, op: Op::Write, offset: t * 8, bytes: 4096, stream: 0 };
        let trace = [at(0), at(100_000), at(200_000)];
        let block = StrategyChoice::Fixed(Strategy::Block);
        let r = run_real_time(&spec, trace.iter().map(|io| Ok(*io)), 2, 4096, None, block, false).unwrap();
        assert_eq!(r.all.ios, 3);
        assert!(r.all.lat_ns_p50 >= 1_160_100);
        // `block` is the reference wait, every time, not the kernel's wake-up.
        assert_eq!((r.decisions.count(Strategy::Block), r.reference_waits, r.early), (3, 3, 0));
        // A stream's error ends the replay with it.
        let broken = [Ok(at(0)), Err(crate::trace::TraceError { path: None, line_number: 7, message: "bad".into() })];
        let e = run_real_time(&spec, broken.into_iter(), 1, 4096, None, spin, false).unwrap_err();
        assert!(e.message.contains("line 7"), "{}", e.message);
    }

    #[test]
    fn smart_and_paper_decide_every_io_and_block_the_reference_way() {
        if !ring_available() {
            return;
        }
        // Writes of 4 KiB and 128 KiB: both sides of the model's size threshold.
        let spec = parse_spec("emu:nvme,channels=2").unwrap();
        for (choice, name) in [(StrategyChoice::Smart, "smart"), (StrategyChoice::Paper, "paper")] {
            let mut ios = Vec::new();
            for bs in [4096u64, 131072] {
                let job =
                    ClosedLoop { op: Op::Write, sequential: false, bs_bytes: bs, qd: 2, ios: 30, think_ns: 0, seed: 5 };
                ios.extend(job.trace_ios(spec.capacity_bytes).map(|io| io.unwrap()));
            }
            let r = run_real_time(&spec, ios.into_iter().map(Ok), 2, 131072, Some((2, 0)), choice, false).unwrap();
            assert_eq!(r.strategy, name);
            assert_eq!(r.all.ios, 60, "{name}");
            // Every I/O went through the decision: one reason and one strategy each.
            assert_eq!(r.decisions.by_reason.values().sum::<u64>(), 60, "{name}: {:?}", r.decisions);
            assert_eq!(r.decisions.by_strategy.values().sum::<u64>(), 60, "{name}: {:?}", r.decisions);
            // Whatever was decided, no thread had its I/O back before the model's instant,
            // and every decided block was the reference wait.
            assert_eq!(r.early, 0, "{name}");
            assert_eq!(r.reference_waits, r.decisions.count(Strategy::Block), "{name}: {:?}", r.decisions);
        }
        // Others are refused by name.
        assert_eq!(parse_strategy("smart"), Some(StrategyChoice::Smart));
        assert_eq!(parse_strategy("hybrid"), Some(StrategyChoice::Fixed(Strategy::Hybrid)));
        assert_eq!(parse_strategy("dip"), None);
        assert_eq!(parse_strategy("smart-hybrid"), None);
    }
}
