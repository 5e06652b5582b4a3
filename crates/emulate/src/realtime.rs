//! The reference system: the same arrivals through the engine's emulated target in real
//! time (real threads, io_uring timers, the RAM store moving the data), and how late its
//! completions are against the model.
//!
//! A closed-loop job runs `qd` threads, each issuing the next request of the same stream
//! the virtual replay used as soon as its previous one returned (plus `think`). A trace
//! runs a pool of threads as large as the virtual replay's largest backlog (at most
//! [`THREADS_MAX`]); each takes the next I/O and sleeps until its arrival instant.
//!
//! Waiting, every way through the thread's engine port ([`ReplayWait`]): `block` is the
//! reference wait (the seed's reference system, `smartcon_engine::wait::reference`: a
//! kernel timer for the model's instant, armed early by the wake-up overshoot this thread
//! measured, p99 of its recent sleeps, then the clock is watched until the instant itself;
//! a timer alone wakes 35-70 us late on a loaded VM, more than 2% of a 1.16 ms SD card
//! write), `spin` (polls the status; past a 1 ms budget it sleeps), or `hybrid`
//! (engine::wait::hybrid: sleeps until just before the predicted completion, minus the
//! measured wake-up overshoot, then polls). Not through a SmartPort: the replay's strategy
//! is fixed (nothing to decide), and the lateness it measures needs the model's completion
//! instant of each I/O, which the port's outcome carries and a SmartPort's byte count does
//! not.
//!
//! Lateness of one I/O = the instant the waiting thread got control back minus the model's
//! completion instant for it (WaitOutcome::done_ns). Within 2% means lateness <= 2% of the
//! model's latency for that I/O (Griffin et al.'s criterion, as the seed uses it).
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
use std::sync::Mutex;

use serde::Serialize;
use smartcon_devemu::{EmuSpec, Op};
use smartcon_emutarget::emu::EmuTarget;
use smartcon_engine::clock::{now_ns, sleep_until_ns, tighten_timer_slack};
use smartcon_engine::decision::{DeviceState, Strategy};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::target::{AlignedBuf, IoBuf, PortWait, Target};
use smartcon_engine::wait::hybrid::Hybrid;
use smartcon_engine::wait::reference::WakeMargin;
use smartcon_engine::wait::PollParams;

use crate::replay::PerOp;
use crate::stats::{LatencyHist, LatencySummary};
use crate::trace::{TraceError, TraceIo};

/// The most threads a trace replay starts.
pub const THREADS_MAX: u64 = 64;

/// How the real run went.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealTimeRun {
    pub strategy: &'static str,
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

/// How a replay thread waits, from the replay's `--strategy`; every way goes through the
/// thread's engine port ([`smartcon_engine::target::Port`]), as a job's I/O does.
enum ReplayWait {
    /// `block`: the reference wait ([`smartcon_engine::wait::reference`]), a timer armed
    /// early by this thread's recent wake-up overshoot, then the clock watched to the model's
    /// instant: the emulator's yardstick, which the other ways are compared with.
    Reference(Box<WakeMargin>),
    /// `hybrid`: the engine's dynamic interval polling ([`smartcon_engine::wait::hybrid`]).
    Hybrid(Hybrid),
    /// `spin`, `sync`: the port's own waits (a spin budget of 1 ms), as a job's.
    Simple(Strategy),
}

impl ReplayWait {
    /// The wait of `strategy`; a `block` waiter measures its wake-up first (about 8 ms).
    fn for_strategy(strategy: Strategy) -> ReplayWait {
        match strategy {
            Strategy::Block => ReplayWait::Reference(Box::new(WakeMargin::calibrate())),
            Strategy::Hybrid => ReplayWait::Hybrid(Hybrid::new(PollParams::DEFAULT, now_ns())),
            other => ReplayWait::Simple(other),
        }
    }
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
    strategy: Strategy,
    fifo: bool,
) -> Result<RealTimeRun, Error>
where
    I: Iterator<Item = Result<TraceIo, TraceError>> + Send,
{
    // Time for every thread to start (and a block waiter to measure its wake-up).
    let base_ns = now_ns() + 20_000_000;
    // Fault windows count from the replay's start, as in virtual time.
    let target = EmuTarget::with_fault_origin(spec.clone(), base_ns)?;
    let threads = threads.clamp(1, THREADS_MAX.max(closed.map_or(0, |(qd, _)| u64::from(qd))));
    let buf_bytes = bytes_max.max(4096).next_multiple_of(4096) as usize;
    let source = Mutex::new(ios);
    let shared = Mutex::new(Shared {
        lat: [LatencyHist::new(), LatencyHist::new()],
        lateness: LatencyHist::new(),
        start_late: LatencyHist::new(),
        within_2pct: 0,
        within_20us: 0,
    });
    let failed = [AtomicU64::new(0), AtomicU64::new(0)];
    let wall = std::time::Instant::now();
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
                    let mut port = target.open_port()?;
                    let mut wait = ReplayWait::for_strategy(strategy);
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
                                    sleep_until_ns(now_ns() + think_ns);
                                }
                            }
                            None => {
                                let at = base_ns + r.arrival_ns;
                                // In slices, so a stop request is seen while waiting for a
                                // late arrival (a trace may idle for minutes).
                                while now_ns() + 100_000_000 < at && !smartcon_engine::stop::requested() {
                                    sleep_until_ns(now_ns() + 100_000_000);
                                }
                                if smartcon_engine::stop::requested() {
                                    break;
                                }
                                sleep_until_ns(at);
                                start_late_ns = now_ns().saturating_sub(at);
                            }
                        }
                        first = false;
                        let t0 = now_ns();
                        let data = &mut buf.as_mut_slice()[..r.bytes as usize];
                        let result = match &mut wait {
                            ReplayWait::Reference(margin) => port.transfer(
                                io_buf(r.op, data),
                                r.offset,
                                PortWait::Reference { margin: margin.as_mut() },
                            ),
                            // Sleep until just before the predicted completion, then poll:
                            // the wake-up overshoot is hidden.
                            ReplayWait::Hybrid(h) => {
                                let wait = PortWait::Poll { policy: h, ahead: DeviceState::default() };
                                port.transfer(io_buf(r.op, data), r.offset, wait)
                            }
                            ReplayWait::Simple(s) => port.io(r.op, data, r.offset, *s, 1_000_000),
                        };
                        let outcome = match result {
                            Err(e) if e.kind == ErrorKind::Io && e.errno == Some(libc::EIO) && faulty => {
                                failed[(r.op == Op::Write) as usize].fetch_add(1, Ordering::Relaxed);
                                continue;
                            }
                            other => other?,
                        };
                        let t1 = now_ns();
                        let model_ns = outcome.done_ns.saturating_sub(t0);
                        let lateness_ns = t1.saturating_sub(outcome.done_ns);
                        let mut s = shared.lock().unwrap_or_else(|e| e.into_inner());
                        s.lat[(r.op == Op::Write) as usize].record(t1 - t0);
                        s.lateness.record(lateness_ns);
                        s.start_late.record(start_late_ns);
                        s.within_2pct += u64::from(lateness_ns as f64 <= 0.02 * model_ns as f64);
                        s.within_20us += u64::from(lateness_ns <= 20_000);
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "a replay thread panicked"))))
            .collect()
    });
    let wall_ns = wall.elapsed().as_nanos() as u64;
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
        let r = run_real_time(&spec, ios, 2, 4096, Some((2, 0)), Strategy::Spin, false).unwrap();
        assert_eq!(r.all.ios, 40);
        assert_eq!(r.threads, 2);
        // A thread never sees its I/O before the model's instant, so latency >= the table's.
        assert!(r.all.lat_ns_p50 >= 5_700 && r.all.lat_ns_max >= r.all.lat_ns_p50);
        assert!((0.0..=1.0).contains(&r.within_2pct) && (0.0..=1.0).contains(&r.within_20us));
        // An open-loop trace: I/Os start no earlier than their instants.
        let at = |t| TraceIo { arrival_ns: t, op: Op::Write, offset: t * 8, bytes: 4096, stream: 0 };
        let trace = [at(0), at(100_000), at(200_000)];
        let r = run_real_time(&spec, trace.iter().map(|io| Ok(*io)), 2, 4096, None, Strategy::Block, false).unwrap();
        assert_eq!(r.all.ios, 3);
        assert!(r.all.lat_ns_p50 >= 1_160_100);
        // A stream's error ends the replay with it.
        let broken = [Ok(at(0)), Err(crate::trace::TraceError { path: None, line_number: 7, message: "bad".into() })];
        let e = run_real_time(&spec, broken.into_iter(), 1, 4096, None, Strategy::Spin, false).unwrap_err();
        assert!(e.message.contains("line 7"), "{}", e.message);
    }
}
