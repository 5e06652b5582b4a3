//! `smartcon host`'s measuring: this machine as a [`HostModel`] (issue 27, item 1).
//!
//! Each figure of the model comes from one place, and what another command already
//! measures is taken from it rather than measured a second way:
//!
//! - sleep overshoot by requested length: timed sleeps at smartcon's 1 ns timer slack
//!   ([`smartcon_engine::clock::sleep_overshoots_ns`], the one the evaluate header uses);
//! - wake-up across cores, and what an idle core adds: one-way eventfd wake-ups with the
//!   woken thread's CPU polling (a PM QoS request as root), then left to halt
//!   ([`smartcon_ctxcost::oneway`]); the waker's CPU per wake-up from the same pings;
//! - the context switch's direct and indirect cost: `smartcon ctx`'s profile when
//!   `host.json` holds one, else `ctx`'s own ring on a small plan (two processes, the L2
//!   size), whose profile the caller stores beside the model;
//! - the CPU a blocking wait burns and a spin's overhead: the probe's host wait cost
//!   ([`HostWaitCost`], `host-wait.json`), measured and stored by the probe's function when
//!   absent;
//! - the blocking cost of io_uring's wait against the plain pread: 4 KiB random O_DIRECT
//!   reads on a temporary file on the local disk, `block` against `sync` in interleaved
//!   rounds, idle and with a spinning cruncher on every core.
//!
//! Non-goals: printing and storing (the CLI), device thresholds (the probe).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use smartcon_ctxcost::oneway::{one_way_wakeups, quantile, OneWay};
use smartcon_ctxcost::HostProfile;
use smartcon_emutarget::target::{self, OpenOptions, TargetSpec};
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::host::{
    BlockPath, BlockWaitPoint, HostModel, Quantiles, SleepCpuPoint, SleepIoPoint, SleepPoint, SleepingSpinShare,
    HOST_JSON_CTX_KEY, HOST_MODEL_VERSION,
};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice, TURN_WARMUP_IOS};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{online_cpus, HostWaitCost, Profile};
use smartcon_engine::stats::JobResult;
use smartcon_util::stats::{median, PairedRatio};
use smartcon_util::Op;

use crate::{turn_order, Event, Progress};

/// The requested sleep lengths, shortest first (a fast SSD's read to a SATA SSD's).
pub const SLEEP_REQUESTED_NS: [u64; 5] = [5_000, 10_000, 20_000, 50_000, 100_000];

/// The device times of the blocking-wait curve: a device whose waits never sleep (its
/// completion is due before the thread gets to sleep), an Optane-class device and one just
/// above it, the middle, an NVMe read. The 1 us end is the probe's host wait cost
/// (`block_cpu_ns`), not measured again.
///
/// Until the seventeenth session the curve was 10.5, 30.5 and 80.5 us. On that session's
/// host a wait went to sleep on 0.3 % of the I/Os of a 6.5 us device, 27 % of an 8.5 us
/// one's, 77 % of a 10.5 us one's and all of a 12.5 us one's (the submission and the timer's
/// arming take about 10 us of the thread's own CPU there): a step, on which an Optane
/// read's 10.0 us sits, so a point half a microsecond off measured another mix of waits.
pub const BLOCK_WAIT_DEVICE_NS: [u64; 5] = [6_000, 10_000, 12_000, 30_000, 80_000];

/// How close two of a `ctx` ring's batches must be to its fastest for the ring to stop
/// before its fifth (the figure is the fastest batch; noise only adds time).
pub const CTX_FLOOR_TOL: f64 = 0.01;

/// The emulated device time of a 4 KiB read on `emu:nvram` beyond its `lat` (its transfer).
const NVRAM_4K_TRANSFER_NS: u64 = 512;

/// A spinner's turns are this many times a blocking turn: its share is counted in the
/// scheduler's slices (about 3 ms each on a shared core of the team's VM), and a 120 ms
/// turn held a few dozen of them (turns of one run read 0.26-0.43 apart).
pub const SPIN_TURN_FACTOR: u64 = 3;

/// Turns of 120 ms per device time and load of the blocking-wait curve. A blocking wait's
/// lateness has a tail of scheduler slices (milliseconds; beside a cruncher p99 4-35 ms on
/// the team's VM), rare enough that a 120 ms turn holds a handful: the mean, which sets a
/// run's IOPS, is taken over all turns' I/Os together, and five turns hold 600 ms of them
/// per device and load (three gave 360 ms, issue 27's fifth session).
pub const WAIT_TURNS: usize = 5;

/// The sleeping spinner's turns beside the crunchers (the figure of
/// [`SleepingSpinShare`]): it spins on the clock and, every this long of wall time, sleeps
/// [`SLEEPING_SPIN_SLEEP_NS`]: 125 sleeps a second, about the rate of `smart`'s spin check
/// on emu:optane beside the crunchers (0.0021 sleeps per I/O at 55,000 IOPS: 116 a second,
/// the nineteenth session's quiet run).
pub const SLEEPING_SPIN_EVERY_NS: u64 = 8_000_000;
/// Each of its sleeps: long enough to leave the core (a 20 us clock_nanosleep switched on
/// every sleep on this machine; a 5 us one on none).
pub const SLEEPING_SPIN_SLEEP_NS: u64 = 20_000;

/// The device times of hybrid's sleep-and-I/O turns beside the crunchers
/// ([`SleepIoPoint`]): an Optane read, where hybrid's sleeps beside the crunchers cost most
/// against a sleep loop, and an NVMe read; two of the blocking-wait curve's devices.
pub const SLEEP_IO_DEVICE_NS: [u64; 2] = [10_000, 80_000];

/// hybrid's sampling phase in those turns, and the warm-up that keeps it out of the figures
/// (its I/Os are waited for by polling).
const SLEEP_IO_SAMPLING_NS: u64 = 3_000_000;

/// What to measure and for how long.
#[derive(Debug, Clone)]
pub struct HostPlan {
    /// Sleeps per requested length.
    pub sleep_count: usize,
    /// Wake-ups per core state.
    pub pings: usize,
    /// The gap between wake-ups: long enough for an idle CPU to halt.
    pub ping_gap_ns: u64,
    /// Rounds of the io_uring against pread comparison per load (each runs both once).
    pub block_rounds: usize,
    pub block_turn_ns: u64,
    /// Turns per device time and load of the blocking-wait curve, and each turn's time; the
    /// turns of one device are pooled (every I/O of all of them), see [`pooled`].
    pub wait_turns: usize,
    pub wait_turn_ns: u64,
    /// Turns of the spinner's share, alone and beside a cruncher (medians taken; each turn
    /// [`SPIN_TURN_FACTOR`] x `wait_turn_ns`).
    pub spin_turns: usize,
    /// Turns of the sleeping spinner beside the crunchers (each as long as a spinner's).
    pub sleeping_spin_turns: usize,
    /// Turns per device time of hybrid's sleep and I/O beside the crunchers (each
    /// `wait_turn_ns`, after a warm-up over its sampling phase).
    pub sleep_io_turns: usize,
    /// The temporary file for that comparison.
    pub temp_bytes: u64,
    pub temp_dir: Option<PathBuf>,
    /// `host.json` as stored: `smartcon ctx`'s figures are taken from it when it has them.
    pub ctx_profile: Option<PathBuf>,
    pub quick: bool,
}

impl HostPlan {
    /// The full plan (about 10-25 s on the team's VM) or the quick one (a few seconds; the
    /// figures are coarse: for tests).
    pub fn new(quick: bool) -> HostPlan {
        HostPlan {
            sleep_count: if quick { 50 } else { 1000 },
            pings: if quick { 20 } else { 300 },
            ping_gap_ns: 1_000_000,
            block_rounds: if quick { 1 } else { 10 },
            block_turn_ns: if quick { 50_000_000 } else { 200_000_000 },
            wait_turns: if quick { 1 } else { WAIT_TURNS },
            wait_turn_ns: if quick { 30_000_000 } else { 120_000_000 },
            spin_turns: if quick { 1 } else { 3 },
            sleeping_spin_turns: if quick { 1 } else { 3 },
            sleep_io_turns: if quick { 1 } else { 2 },
            temp_bytes: if quick { 8 << 20 } else { 64 << 20 },
            temp_dir: None,
            ctx_profile: None,
            quick,
        }
    }

    /// Steps reported through [`Event::Done`], for a progress bar.
    pub fn steps(&self) -> u64 {
        SLEEP_REQUESTED_NS.len() as u64 + 2 + 1 + 1 + 2 + 2
    }
}

/// One load's rounds of io_uring's blocking wait against pread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockPathLoad {
    /// `idle` or `beside_spinners`.
    pub load: &'static str,
    pub rounds: usize,
    pub block_iops: Vec<f64>,
    pub sync_iops: Vec<f64>,
    /// pread's IOPS over io_uring's, the geometric mean of the per-round ratios.
    pub sync_over_block: f64,
    /// io_uring's mean wait minus pread's, ns per I/O: pread's median mean wait times
    /// `sync_over_block - 1` (the paired ratio carries the comparison; a single round's
    /// difference swings with the machine's other load).
    pub uring_extra_ns: f64,
}

/// Everything `smartcon host` measured, the model and how each figure was obtained.
#[derive(Debug, Clone, Serialize)]
pub struct HostMeasurement {
    pub model: HostModel,
    /// `smartcon ctx`'s profile when it was measured now (small plan), to be stored.
    #[serde(skip)]
    pub ctx_measured: Option<HostProfile>,
    pub ctx_source: String,
    pub wait_source: String,
    /// One-way wake-ups, the woken thread's CPU polled (busy) and idle.
    pub wakeup_busy: Quantiles,
    pub wakeup_idle: Quantiles,
    pub waker_cpu_busy_ns: f64,
    pub waker_cpu_idle_ns: f64,
    /// How the woken core was kept polling (`pm_qos` or `sched_idle_poller`).
    pub polled_by: &'static str,
    pub block_path_target: String,
    pub block_path: Vec<BlockPathLoad>,
    /// The blocking wait's turns per device time and load, each turn's own figures (the
    /// model holds all turns pooled).
    pub block_wait_turns: Vec<BlockWaitTurns>,
    /// The spinner's CPU share beside a cruncher per core, per turn.
    pub spin_shares: Vec<f64>,
    /// The crunchers' summed CPU share in each of those turns (their CPU over the turn's
    /// time; the model's share is all threads' together, see `fair_share`).
    pub crunchers_shares: Vec<f64>,
    /// The spinner's CPU share with nothing of ours beside it, per turn.
    pub spin_shares_alone: Vec<f64>,
    /// The sleeping spinner beside the crunchers, per turn: its CPU share, the crunchers'
    /// summed share, its sleeps per second (the model holds the turns pooled).
    pub sleeping_spin_shares: Vec<f64>,
    pub sleeping_spin_crunchers_shares: Vec<f64>,
    pub sleeping_spin_rates: Vec<f64>,
    /// hybrid's sleep-and-I/O turns beside the crunchers, per device time: each turn's CPU
    /// per I/O and sleeps per I/O, and the predicted I/Os' share (1: it slept to its
    /// prediction on every I/O after the warm-up, the busy branch the figure is of).
    pub sleep_io_turns: Vec<SleepIoTurns>,
    /// Each step's wall time, in the order they ran (what the 30 s budget goes to).
    pub steps: Vec<StepTime>,
    pub elapsed_ns: u64,
}

/// One device time's hybrid turns beside the crunchers, turn by turn.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SleepIoTurns {
    pub device_ns: f64,
    pub cpu_ns: Vec<f64>,
    pub sleeps_per_io: Vec<f64>,
    pub switches_per_io: Vec<f64>,
}

/// One step of `smartcon host` and its wall time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepTime {
    pub step: String,
    pub ns: u64,
}

/// Times the steps a progress callback sees: each [`Event::Starting`] until its
/// [`Event::Done`] (a step started inside another, as the probe's host wait cost may, is
/// timed on its own and its time left in the outer one too).
#[derive(Default)]
struct StepClock {
    open: Vec<(String, std::time::Instant)>,
    done: Vec<StepTime>,
}

impl StepClock {
    fn see(&mut self, e: &Event<'_>) {
        match e {
            Event::Starting(what) => self.open.push((what.to_string(), std::time::Instant::now())),
            Event::Done => {
                if let Some((step, t)) = self.open.pop() {
                    self.done.push(StepTime { step, ns: t.elapsed().as_nanos() as u64 });
                }
            }
            _ => {}
        }
    }
}

fn quantiles_of(sorted: &[u64]) -> Quantiles {
    let q = |p: f64| quantile(sorted, p) as f64;
    let mean = sorted.iter().map(|&x| x as f64).sum::<f64>() / sorted.len().max(1) as f64;
    Quantiles::new(q(0.5), q(0.9), q(0.99)).with_mean(mean)
}

fn stopped(stop: &AtomicBool) -> Result<(), Error> {
    if stop.load(Ordering::Relaxed) {
        return Err(Error::new(ErrorKind::Usage, "interrupted: no host model written"));
    }
    Ok(())
}

fn ctx_err(e: Error) -> Error {
    match e.kind {
        ErrorKind::Interrupted => Error::new(ErrorKind::Usage, "interrupted: no host model written"),
        _ => Error::with_source(ErrorKind::Setup, "context-switch measurement", e),
    }
}

/// `smartcon ctx`'s figures as the model holds them: the direct cost (two processes, the
/// pipe work subtracted) and the indirect one, what a switch costs beyond the direct one
/// when each process works through an L2-sized array (the refill of the cache the other
/// process polluted; the indirect point nearest the L2 size).
pub fn switch_costs_ns(p: &HostProfile) -> (Option<f64>, Option<f64>) {
    let direct = p.ctx_direct_ns();
    let l2 = p.cache.l2_bytes.unwrap_or(1 << 20);
    let with_refill = p.indirect.iter().min_by_key(|i| i.array_bytes.abs_diff(l2)).map(|i| i.us_per_switch * 1e3);
    let indirect = match (direct, with_refill) {
        (Some(d), Some(w)) => Some((w - d).max(0.0)),
        _ => None,
    };
    (direct, indirect)
}

/// The context-switch figures: from the stored profile, else measured now with `ctx`'s
/// ring on a small plan.
fn context_switch(plan: &HostPlan, stop: &AtomicBool) -> Result<(Option<HostProfile>, HostProfile, String), Error> {
    if let Some(path) = plan.ctx_profile.as_deref().filter(|p| p.exists()) {
        if let Ok(p) = HostProfile::read(path) {
            let how = if p.quick { "smartcon ctx --quick" } else { "smartcon ctx" };
            return Ok((None, p.clone(), format!("{} ({how}, stored)", path.display())));
        }
    }
    let cpus = smartcon_ctxcost::affinity::allowed_cpus().map_err(ctx_err)?;
    let cache = smartcon_ctxcost::cache::read_cache_sizes();
    // ctx's full budget (best of 5 batches of 100 ms): the quick one's 30 ms batches gave
    // 0 to 1.2 us for the direct cost in three runs on a loaded 2-core VM.
    let mut cplan = smartcon_ctxcost::Plan::new(plan.quick, &cache, &cpus);
    cplan.direct_procs = vec![2];
    cplan.set_array_sizes(vec![cache.l2_bytes.unwrap_or(1 << 20)]).map_err(ctx_err)?;
    cplan.perf_loops = 0;
    // Each ring stops once two of its batches hold the floor within 1 %
    // (`smartcon_ctxcost::ring::floor_seen_twice`): on a quiet machine the second batch.
    cplan.budget.floor_tol = Some(CTX_FLOOR_TOL);
    cplan.validate().map_err(ctx_err)?;
    let p = smartcon_ctxcost::measure(&cplan, stop, &mut |_: &str| {}).map_err(ctx_err)?;
    let budget = if plan.quick { "quick budget" } else { "ctx's full budget" };
    Ok((Some(p.clone()), p, format!("measured now: smartcon ctx's ring, 2 processes, L2-sized arrays, {budget}")))
}

/// Runs io_uring's blocking wait (`block`) and pread (`sync`) in interleaved rounds.
fn block_path_rounds(
    t: &dyn target::Target,
    plan: &HostPlan,
    load: &'static str,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<BlockPathLoad, Error> {
    let strategies = [Strategy::Block, Strategy::Sync];
    let p = Profile::paper_default(&t.device_id());
    let mut iops: [Vec<f64>; 2] = Default::default();
    for round in 0..plan.block_rounds {
        for i in turn_order(strategies.len(), round) {
            stopped(stop)?;
            let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(strategies[i]));
            js.duration_ns = plan.block_turn_ns;
            js.warmup_ios = TURN_WARMUP_IOS;
            js.seed = 1 + round as u64;
            iops[i].push(run_job(t, &js, &p, monitor, stop)?.iops);
        }
        if PairedRatio::of(&iops[1], &iops[0]).is_some_and(|r| narrow_enough(&r, BLOCK_PATH_HALF_WIDTH)) {
            break;
        }
    }
    let Some(ratio) = PairedRatio::of(&iops[1], &iops[0]) else {
        return Err(Error::new(
            ErrorKind::Io,
            format!("{}: no I/O completed comparing io_uring with pread", t.label()),
        ));
    };
    let mut sync_wait_ns: Vec<f64> = iops[1].iter().filter(|x| **x > 0.0).map(|x| 1e9 / x).collect();
    Ok(BlockPathLoad {
        load,
        rounds: ratio.rounds,
        block_iops: iops[0].clone(),
        sync_iops: iops[1].clone(),
        sync_over_block: ratio.gmean,
        uring_extra_ns: median(&mut sync_wait_ns) * (ratio.gmean - 1.0),
    })
}

/// The 90% interval of io_uring against pread, relative to its geometric mean, at which the
/// rounds stop before [`HostPlan::block_rounds`]: the choice between the two (issue 27's
/// item 5) matters where they differ by more than that, and where they differ by less
/// either one does. Quiet, the seventeenth session's idle rounds reached +-4.8 % at the
/// tenth round (the ones beside the spinners +-7.8 %: all ten are taken there).
pub const BLOCK_PATH_HALF_WIDTH: f64 = 0.05;
/// Rounds before the interval may stop them (with fewer, Student's t on a handful of
/// log ratios says little about the next).
pub const BLOCK_PATH_ROUNDS_MIN: usize = 4;

/// Whether a paired ratio is known to within `half_width` of its geometric mean (both ends
/// of its 90% interval) over at least [`BLOCK_PATH_ROUNDS_MIN`] rounds.
fn narrow_enough(r: &PairedRatio, half_width: f64) -> bool {
    r.rounds >= BLOCK_PATH_ROUNDS_MIN && r.hi <= r.gmean * (1.0 + half_width) && r.lo >= r.gmean * (1.0 - half_width)
}

/// How far apart a spinner's turns may be (their share of a core) for the next turns to be
/// skipped: two turns agreeing within this pin the share better than the scheduler's
/// balancing moves a 2 s cell's (0.67-0.73 in the seventeenth session's quiet cells).
pub const SPIN_SHARE_SPREAD_MAX: f64 = 0.01;

/// Whether turns' figures agree: at least two, all within `spread` of each other.
fn settled(values: &[f64], spread: f64) -> bool {
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    values.len() >= 2 && hi - lo <= spread
}

/// The figures of a blocking (or spinning) 4 KiB read job: one turn, or turns pooled.
#[derive(Debug, Clone, Copy)]
struct Turn {
    /// CPU per I/O (user + system).
    cpu_ns: f64,
    /// The lateness quantiles past the model's service time, and its mean.
    late: Quantiles,
    /// The thread's CPU share of the turn.
    share: f64,
    /// Its CPU time and the turn's time, ns (a share of turns pooled is the one over the
    /// other, summed).
    busy_ns: f64,
    duration_ns: f64,
    /// Voluntary context switches per I/O: the share of blocking waits that slept.
    sleeps_per_io: f64,
    /// Its CPU time over its involuntary switches: how long it held the core at a time
    /// (`None` when nothing preempted it).
    slice_ns: Option<f64>,
}

impl Turn {
    /// The figures of a job's result (`None` when no I/O completed).
    fn of(r: &JobResult) -> Option<Turn> {
        if r.ios == 0 {
            return None;
        }
        let share = (r.cpu_user_pct + r.cpu_sys_pct) / 100.0;
        let cpu_ns = share * r.duration_ns as f64 / r.ios as f64;
        let service = r.model_service_ns.unwrap_or(0) as f64;
        let late = |q: f64| (r.latency_hist.value_at_quantile(q) as f64 - service).max(0.0);
        let (p50, p90) = (late(0.5), late(0.9).max(late(0.5)));
        let q = Quantiles::new(p50, p90, late(0.99).max(p90)).with_mean((r.lat_ns_mean - service).max(0.0));
        let slice_ns = (r.ctx_involuntary > 0).then(|| share * r.duration_ns as f64 / r.ctx_involuntary as f64);
        let busy_ns = share * r.duration_ns as f64;
        let sleeps_per_io = r.ctx_voluntary as f64 / r.ios as f64;
        Some(Turn { cpu_ns, late: q, share, busy_ns, duration_ns: r.duration_ns as f64, sleeps_per_io, slice_ns })
    }
}

/// One turn of a 4 KiB random read job with `strategy` (its result, with no I/O too).
fn wait_turn(
    t: &dyn target::Target,
    strategy: Strategy,
    turn: usize,
    turn_ns: u64,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<JobResult, Error> {
    stopped(stop)?;
    run_job(t, &turn_job(strategy, turn, turn_ns), &Profile::paper_default(&t.device_id()), monitor, stop)
}

/// The job of one turn: 4 KiB random reads with `strategy` for `turn_ns`, after
/// [`TURN_WARMUP_IOS`], seeded by the turn.
fn turn_job(strategy: Strategy, turn: usize, turn_ns: u64) -> JobSpec {
    let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(strategy));
    js.duration_ns = turn_ns;
    js.warmup_ios = TURN_WARMUP_IOS;
    js.seed = 1 + turn as u64;
    js
}

/// Turns of one device pooled: every I/O of every turn together (the CPU per I/O is the
/// summed CPU over the summed I/Os, the lateness quantiles and mean those of all I/Os).
///
/// The mean is what sets a run's IOPS, and a blocking wait's lateness has a millisecond
/// tail (scheduler slices) that a 120 ms turn holds a handful of. The median of the turns'
/// means, which this replaced, drops the turn that met the most of it: it is biased low
/// for any right-skewed lateness, and swung 65-595 us between two devices of one run.
fn pooled(turns: &[JobResult]) -> Option<Turn> {
    let (first, rest) = turns.split_first()?;
    let mut all = first.clone();
    for r in rest {
        all.merge(r);
    }
    Turn::of(&all)
}

/// One turn of a spinner that sleeps now and then: it spins on the clock and every `every_ns`
/// of wall time sleeps `sleep_ns` (clock_nanosleep at smartcon's timer slack), for
/// `turn_ns`. Returns its CPU time, the turn's wall time and its sleeps.
fn sleeping_spin_turn(turn_ns: u64, every_ns: u64, sleep_ns: u64, stop: &AtomicBool) -> (f64, f64, u64) {
    use smartcon_engine::clock::{now_ns, sleep_until_ns, thread_cpu_ns, tighten_timer_slack};
    tighten_timer_slack();
    let (t0, c0) = (now_ns(), thread_cpu_ns());
    let mut next = t0 + every_ns;
    let mut sleeps = 0;
    loop {
        let t = now_ns();
        if t >= t0 + turn_ns || stop.load(Ordering::Relaxed) {
            break;
        }
        if t >= next {
            sleep_until_ns(t + sleep_ns);
            sleeps += 1;
            next = now_ns() + every_ns;
        } else {
            std::hint::spin_loop();
        }
    }
    let (c1, t1) = (thread_cpu_ns(), now_ns());
    (c1.saturating_sub(c0) as f64, t1.saturating_sub(t0) as f64, sleeps)
}

/// One `hybrid` turn of 4 KiB random reads on `t`: `turn_ns` measured after a warm-up that
/// covers its sampling phase ([`SLEEP_IO_SAMPLING_NS`], twice as many I/Os as the device
/// completes in it and [`TURN_WARMUP_IOS`]).
fn hybrid_turn(
    t: &dyn target::Target,
    turn: usize,
    turn_ns: u64,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<JobResult, Error> {
    stopped(stop)?;
    let device_ns = t.model_service_ns(Op::Read, 4096).unwrap_or(10_000).max(1_000);
    let mut js = turn_job(Strategy::Hybrid, turn, turn_ns);
    js.poll.sampling_ns = SLEEP_IO_SAMPLING_NS;
    js.warmup_ios += (2 * SLEEP_IO_SAMPLING_NS / device_ns) as u32;
    run_job(t, &js, &Profile::paper_default(&t.device_id()), monitor, stop)
}

/// One device's blocking turns as `host_measurement` records them: what the pooled figure
/// was taken from, turn by turn (the spread of a tail over 120 ms turns).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockWaitTurns {
    pub device_ns: f64,
    /// `alone` or `beside_cruncher`.
    pub load: &'static str,
    /// Per turn: CPU per I/O, and the lateness quantiles with their mean.
    pub cpu_ns: Vec<f64>,
    pub late: Vec<Quantiles>,
}

/// The blocking wait by device time, alone and beside a cruncher per core, and the share of
/// its core a spinner gets beside the crunchers (on the 10 us device): what the simulation
/// needs beyond the 1 us host wait cost (issue 27's calibration found a blocking wait on a
/// 10 us device burning 55 us of CPU against 33 on a 1 us one, a blocked thread waiting
/// long for a cruncher's core, and a spinner holding 70% of its core, not half).
///
/// The devices' turns are interleaved (turn 1 of every device, then turn 2, ...), so a
/// burst of the machine's other load lands on all device times alike, not on one.
fn block_wait_curve(
    plan: &HostPlan,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
) -> Result<BlockWaitCurve, Error> {
    let targets = BLOCK_WAIT_DEVICE_NS
        .iter()
        .map(|ns| {
            let lat = ns - NVRAM_4K_TRANSFER_NS;
            target::open(&target::parse_target(&format!("emu:nvram,lat={lat}ns,size=16m"))?, OpenOptions::default())
        })
        .collect::<Result<Vec<_>, Error>>()?;
    let no_io =
        |t: &dyn target::Target| Error::new(ErrorKind::Io, format!("{}: no I/O completed in a wait", t.label()));
    // Every device's blocking turns, interleaved; pooled per device.
    let blocking = |load: &'static str| -> Result<(Vec<Turn>, Vec<BlockWaitTurns>), Error> {
        let mut runs: Vec<Vec<JobResult>> = vec![Vec::with_capacity(plan.wait_turns); targets.len()];
        for turn in 0..plan.wait_turns {
            for (t, v) in targets.iter().zip(&mut runs) {
                v.push(wait_turn(t.as_ref(), Strategy::Block, turn, plan.wait_turn_ns, monitor, stop)?);
            }
        }
        let mut points = Vec::with_capacity(targets.len());
        let mut record = Vec::with_capacity(targets.len());
        for (t, v) in targets.iter().zip(&runs) {
            points.push(pooled(v).ok_or_else(|| no_io(t.as_ref()))?);
            let each: Vec<Turn> = v.iter().filter_map(Turn::of).collect();
            record.push(BlockWaitTurns {
                device_ns: t.model_service_ns(Op::Read, 4096).unwrap_or(0) as f64,
                load,
                cpu_ns: each.iter().map(|x| x.cpu_ns).collect(),
                late: each.iter().map(|x| x.late).collect(),
            });
        }
        Ok((points, record))
    };
    // A spinner's share is counted in the scheduler's slices (milliseconds on a shared
    // core): its turns are longer, so that each holds tens of them. Beside the crunchers
    // each turn also takes their CPU over the turn (`fair_share`).
    let spinning = |t: &dyn target::Target,
                    load: Option<&smartcon_workloads::load::CpuLoad>|
     -> Result<(Vec<Turn>, Vec<f64>), Error> {
        let mut v = Vec::with_capacity(plan.spin_turns);
        let mut crunchers = Vec::with_capacity(plan.spin_turns);
        // Each turn's estimate: every thread's share beside the crunchers, the spinner's
        // own alone; once two agree within SPIN_SHARE_SPREAD_MAX the rest are skipped.
        let mut each = Vec::with_capacity(plan.spin_turns);
        for turn in 0..plan.spin_turns {
            let before = load.map(|l| l.snapshot());
            let r = wait_turn(t, Strategy::Spin, turn, plan.wait_turn_ns * SPIN_TURN_FACTOR, monitor, stop)?;
            if let (Some(a), Some(b), Some(x)) = (before, load.map(|l| l.snapshot()), Turn::of(&r)) {
                let cpu = (b.user_ns + b.sys_ns).saturating_sub(a.user_ns + a.sys_ns) as f64;
                let c = cpu / b.at_ns.saturating_sub(a.at_ns).max(1) as f64;
                let n = load.map_or(1, |l| l.workers());
                each.push((x.share + c) / (n + 1) as f64);
                crunchers.push(c);
                v.push(x);
            } else if let Some(x) = Turn::of(&r) {
                each.push(x.share);
                v.push(x);
            }
            if settled(&each, SPIN_SHARE_SPREAD_MAX) {
                break;
            }
        }
        if v.is_empty() {
            return Err(no_io(t));
        }
        Ok((v, crunchers))
    };
    progress(Event::Starting("blocking wait by device time and a spinner's share, alone"));
    let (alone, mut turns) = blocking("alone")?;
    // The machine's own load: what a spinner gets of its core with nothing of ours beside
    // it, and what the System Monitor reads of the others meanwhile.
    let (spin_alone, _) = spinning(targets[0].as_ref(), None)?;
    let shares_alone: Vec<f64> = spin_alone.iter().map(|x| x.share).collect();
    let background_busy_pct = monitor.cpu_utilization_pct() as f64;
    progress(Event::Done);
    progress(Event::Starting("blocking wait by device time and a spinner's share, beside a cruncher per core"));
    let load = smartcon_workloads::load::CpuLoad::start(online_cpus().max(1))?;
    std::thread::sleep(std::time::Duration::from_millis(20));
    let (beside, beside_turns) = blocking("beside_cruncher")?;
    turns.extend(beside_turns);
    let (spin_beside, crunchers) = spinning(targets[0].as_ref(), Some(&load))?;
    let shares: Vec<f64> = spin_beside.iter().map(|x| x.share).collect();
    let cruncher_count = load.workers();
    // A spinner that sleeps now and then, beside the same crunchers: its own share (it is
    // not like them to the scheduler, so every thread's mean is not its share).
    let mut sleeping = SleepingSpin::default();
    for _ in 0..plan.sleeping_spin_turns {
        stopped(stop)?;
        let a = load.snapshot();
        let (cpu, wall, sleeps) = sleeping_spin_turn(
            plan.wait_turn_ns * SPIN_TURN_FACTOR,
            SLEEPING_SPIN_EVERY_NS,
            SLEEPING_SPIN_SLEEP_NS,
            stop,
        );
        let b = load.snapshot();
        let c = (b.user_ns + b.sys_ns).saturating_sub(a.user_ns + a.sys_ns) as f64
            / b.at_ns.saturating_sub(a.at_ns).max(1) as f64;
        sleeping.cpu_ns += cpu;
        sleeping.wall_ns += wall;
        sleeping.sleeps += sleeps;
        sleeping.shares.push(cpu / wall.max(1.0));
        sleeping.crunchers.push(c);
        sleeping.rates.push(sleeps as f64 * 1e9 / wall.max(1.0));
    }
    // hybrid's sleep to its prediction and the I/O after it, beside the same crunchers
    // (the System Monitor reads the CPUs busy: hybrid's busy branch, a sleep per I/O).
    let mut sleep_io = Vec::with_capacity(SLEEP_IO_DEVICE_NS.len());
    for &device in &SLEEP_IO_DEVICE_NS {
        let Some(i) = BLOCK_WAIT_DEVICE_NS.iter().position(|&d| d == device) else { continue };
        let t = targets[i].as_ref();
        let runs = (0..plan.sleep_io_turns)
            .map(|turn| hybrid_turn(t, turn, plan.wait_turn_ns, monitor, stop))
            .collect::<Result<Vec<_>, Error>>()?;
        let each: Vec<(Turn, f64)> = runs
            .iter()
            .filter_map(|r| {
                let sleeps = r.polling.as_ref().map_or(0.0, |p| p.sleeps_per_io);
                Turn::of(r).map(|x| (x, sleeps))
            })
            .collect();
        let all = pooled(&runs).ok_or_else(|| no_io(t))?;
        sleep_io.push((
            t.model_service_ns(Op::Read, 4096).unwrap_or(device) as f64,
            all,
            SleepIoTurns {
                device_ns: t.model_service_ns(Op::Read, 4096).unwrap_or(device) as f64,
                cpu_ns: each.iter().map(|(x, _)| x.cpu_ns).collect(),
                sleeps_per_io: each.iter().map(|(_, s)| *s).collect(),
                switches_per_io: each.iter().map(|(x, _)| x.sleeps_per_io).collect(),
            },
        ));
    }
    // What a timed sleep (hybrid's) costs the sleeping thread on a cruncher's core: its
    // CPU, not its lateness (a pure sleep loop's lateness there is not what hybrid meets,
    // docs/simulate.md, seventeenth session).
    let mut sleep_beside = Vec::with_capacity(SLEEP_REQUESTED_NS.len());
    for &asked in &SLEEP_REQUESTED_NS {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        sleep_beside.push(smartcon_engine::clock::sleep_run(asked, plan.sleep_count));
    }
    drop(load);
    let share = if crunchers.len() == spin_beside.len() {
        fair_share(&spin_beside, &crunchers, cruncher_count)
    } else {
        pooled_share(&spin_beside)
    };
    let share_alone = pooled_share(&spin_alone);
    let spin_slice_ns = spin_slice(&spin_beside, &spin_alone);
    progress(Event::Done);
    let points = targets
        .iter()
        .zip(alone.iter().zip(&beside))
        .map(|(t, (a, b))| BlockWaitPoint {
            device_ns: t.model_service_ns(Op::Read, 4096).unwrap_or(0) as f64,
            cpu_ns: a.cpu_ns,
            late: a.late,
            cpu_beside_cruncher_ns: b.cpu_ns,
            late_beside_cruncher: b.late,
            sleeps_per_wait: Some(a.sleeps_per_io),
            sleeps_per_wait_beside_cruncher: Some(b.sleeps_per_io),
        })
        .collect();
    Ok(BlockWaitCurve {
        points,
        turns,
        shares,
        crunchers_shares: crunchers,
        shares_alone,
        share,
        share_alone,
        background_busy_pct,
        spin_slice_ns,
        sleep_beside,
        sleeping,
        sleep_io,
    })
}

/// The sleeping spinner's turns beside the crunchers.
#[derive(Debug, Default)]
struct SleepingSpin {
    cpu_ns: f64,
    wall_ns: f64,
    sleeps: u64,
    shares: Vec<f64>,
    crunchers: Vec<f64>,
    rates: Vec<f64>,
}

impl SleepingSpin {
    /// The model's figure: the turns pooled (their CPU over their time, their sleeps over
    /// it), `None` without a turn or a sleep.
    fn model(&self) -> Option<SleepingSpinShare> {
        (self.wall_ns > 0.0 && self.sleeps > 0).then(|| SleepingSpinShare {
            sleeps_per_s: self.sleeps as f64 * 1e9 / self.wall_ns,
            share: (self.cpu_ns / self.wall_ns).clamp(0.01, 0.99),
        })
    }
}

/// The model's [`SleepIoPoint`]s from hybrid's turns beside the crunchers, the cold I/O
/// path against the sleep loop's CPU beside them at the device time (`sleep_cpu_beside`,
/// the model's interpolation of [`SleepCpuPoint`]s).
fn sleep_io_points(
    turns: &[(f64, Turn, SleepIoTurns)],
    sleep_cpu_beside: impl Fn(f64) -> Option<f64>,
) -> Vec<SleepIoPoint> {
    turns
        .iter()
        .map(|(device_ns, t, _)| SleepIoPoint {
            device_ns: *device_ns,
            cpu_beside_cruncher_ns: t.cpu_ns,
            late_beside_cruncher: t.late,
            switches_beside_cruncher: t.sleeps_per_io.min(1.5),
            cold_io_beside_cruncher_ns: sleep_cpu_beside(*device_ns).map(|s| t.cpu_ns - s),
        })
        .collect()
}

/// The share of a core one of `n` crunchers and the spinner each get, over the spinner's
/// turns beside them: the spinner's share and the crunchers' summed share per turn
/// (`crunchers[i]`, their CPU over the turn's time), all `n + 1` threads' CPU over `n + 1`
/// threads, time-weighted over the turns.
///
/// Why not the spinner's own share (the seventeenth session's estimate): the spinner and
/// the crunchers are equal-weight threads that never sleep, one more of them than cores.
/// Which of them the scheduler leaves alone on a core, and for how long, is chance: the
/// seventeenth session's quiet run had its spinner at 0.50, 0.56 and 0.75 of a core in
/// three 360 ms turns, and at 0.67-0.73 in the bench's 2 s cells a minute later. In the long
/// run each gets the same share; their mean over a turn is that share, whoever of them the
/// turn happened to leave alone. Where other users' load takes CPU it takes it from all of
/// them, and the mean keeps it.
fn fair_share(spinner: &[Turn], crunchers: &[f64], n: usize) -> f64 {
    let (mut cpu, mut time) = (0.0, 0.0);
    for (t, c) in spinner.iter().zip(crunchers) {
        cpu += t.busy_ns + c * t.duration_ns;
        time += t.duration_ns * (n + 1) as f64;
    }
    if time > 0.0 {
        cpu / time
    } else {
        0.0
    }
}

/// How long a spinner holds its core at a time: its turns' CPU over their involuntary
/// switches, pooled, from the turns beside the crunchers, or, where none was preempted
/// there, from the turns alone (a machine whose own load shares the core).
///
/// Until the eighteenth session the median of both sets of turns' slices: on a quiet
/// machine a lone spinner is preempted only by the kernel's housekeeping (5-10 times in
/// 2 s in the bench's cells), which is no slice of a shared core. The seventeenth session's
/// quiet host.json had 38 ms where the bench's spinners beside the crunchers held the core
/// 5.3-5.9 ms at a time (which turns gave the 38 ms was not recorded).
fn spin_slice(beside: &[Turn], alone: &[Turn]) -> Option<f64> {
    let pooled = |turns: &[Turn]| {
        let (busy, switches) = turns
            .iter()
            .filter_map(|t| t.slice_ns.map(|s| (t.busy_ns, t.busy_ns / s)))
            .fold((0.0, 0.0), |(b, n), (x, k)| (b + x, n + k));
        (switches > 0.0).then(|| (busy / switches).max(1_000.0))
    };
    pooled(beside).or_else(|| pooled(alone))
}

/// A spinner's share of its core over its turns together: their CPU over their time.
///
/// Until the seventeenth session the model took the median of the turns' shares. Beside a
/// cruncher per core (three always-runnable threads on two CPUs) the share of a 360 ms turn
/// depends on how often the scheduler's balancing moved the threads in it: the sixteenth
/// session's turns held 0.50, 0.68 and 0.52 of the core, and the median, 0.515, dropped the
/// turn with the most of it, where the bench's 2 s cells a minute later held 0.62-0.64.
fn pooled_share(turns: &[Turn]) -> f64 {
    let (busy, time) = turns.iter().fold((0.0, 0.0), |(b, t), x| (b + x.busy_ns, t + x.duration_ns));
    if time > 0.0 {
        busy / time
    } else {
        0.0
    }
}

/// What [`block_wait_curve`] measured.
struct BlockWaitCurve {
    points: Vec<BlockWaitPoint>,
    turns: Vec<BlockWaitTurns>,
    shares: Vec<f64>,
    crunchers_shares: Vec<f64>,
    shares_alone: Vec<f64>,
    /// All threads' share beside the crunchers ([`fair_share`]), the turns alone pooled
    /// ([`pooled_share`]).
    share: f64,
    share_alone: f64,
    background_busy_pct: f64,
    spin_slice_ns: Option<f64>,
    /// Timed sleeps beside the crunchers, one run per requested length of
    /// [`SLEEP_REQUESTED_NS`]: what they cost the sleeping thread.
    sleep_beside: Vec<smartcon_engine::clock::SleepRun>,
    sleeping: SleepingSpin,
    /// hybrid's turns beside the crunchers per device time: the device time, the turns
    /// pooled, the turns one by one.
    sleep_io: Vec<(f64, Turn, SleepIoTurns)>,
}

/// The model's [`SleepCpuPoint`]s from the sleep runs alone and beside the crunchers, one
/// per requested length (beside: where that run was taken).
fn sleep_cpu_points(
    asked: &[u64],
    alone: &[smartcon_engine::clock::SleepRun],
    beside: &[smartcon_engine::clock::SleepRun],
) -> Vec<SleepCpuPoint> {
    asked
        .iter()
        .zip(alone)
        .enumerate()
        .map(|(i, (&ns, a))| SleepCpuPoint {
            requested_ns: ns as f64,
            cpu_ns: a.cpu_ns_per_sleep,
            switches_per_sleep: a.switches_per_sleep,
            cpu_beside_cruncher_ns: beside.get(i).map(|b| b.cpu_ns_per_sleep),
            switches_per_sleep_beside_cruncher: beside.get(i).map(|b| b.switches_per_sleep),
        })
        .collect()
}

/// A UTC date of a Unix time, `YYYY-MM-DD` (days to civil date, Howard Hinnant's method).
pub fn utc_date(unix_s: u64) -> String {
    let z = (unix_s / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + (m <= 2) as i64;
    format!("{y:04}-{m:02}-{d:02}")
}

/// Measures this machine. `progress` gets a [`Event::Starting`] and [`Event::Done`] per
/// step and a note where a stored figure is taken instead of measured.
pub fn measure(
    plan: &HostPlan,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
) -> Result<HostMeasurement, Error> {
    let started = std::time::Instant::now();
    let clock = std::cell::RefCell::new(StepClock::default());
    let outer = progress;
    let progress = &mut |e: Event<'_>| {
        clock.borrow_mut().see(&e);
        outer(e)
    };
    progress(Event::Steps(plan.steps()));
    // Open the temporary file first: a directory that cannot take it fails before the rest.
    let spec = TargetSpec::Temp { size_bytes: plan.temp_bytes, dir: plan.temp_dir.clone() };
    progress(Event::Starting("temporary file for io_uring against pread"));
    let file = target::open(&spec, OpenOptions::default())?;
    // Not a step of the bar (no Done): timed here.
    {
        let mut c = clock.borrow_mut();
        if let Some((step, t)) = c.open.pop() {
            c.done.push(StepTime { step, ns: t.elapsed().as_nanos() as u64 });
        }
    }

    let mut sleep = Vec::with_capacity(SLEEP_REQUESTED_NS.len());
    let mut sleep_alone = Vec::with_capacity(SLEEP_REQUESTED_NS.len());
    for &asked in &SLEEP_REQUESTED_NS {
        stopped(stop)?;
        progress(Event::Starting(&format!("sleep overshoot, {} us sleeps", asked / 1000)));
        let run = smartcon_engine::clock::sleep_run(asked, plan.sleep_count);
        sleep.push(SleepPoint { requested_ns: asked as f64, overshoot: quantiles_of(&run.overshoots_ns) });
        sleep_alone.push(run);
        progress(Event::Done);
    }

    let cpus = smartcon_ctxcost::affinity::allowed_cpus().map_err(ctx_err)?;
    let (wake_busy, wake_idle) = if let [a, b, ..] = cpus[..] {
        progress(Event::Starting("wake-up across cores, the woken core polling"));
        let busy = one_way_wakeups(a, b, true, plan.pings, plan.ping_gap_ns, stop).map_err(ctx_err)?;
        progress(Event::Done);
        progress(Event::Starting("wake-up across cores, the woken core idle"));
        let idle = one_way_wakeups(a, b, false, plan.pings, plan.ping_gap_ns, stop).map_err(ctx_err)?;
        progress(Event::Done);
        (busy, idle)
    } else {
        return Err(Error::new(
            ErrorKind::Setup,
            "one allowed CPU: a wake-up across cores cannot be measured (run without a CPU mask)",
        ));
    };
    let med = |v: &OneWay| quantile(&v.waker_cpu_ns, 0.5) as f64;
    let (wakeup_busy, wakeup_idle) = (quantiles_of(&wake_busy.latencies_ns), quantiles_of(&wake_idle.latencies_ns));

    stopped(stop)?;
    progress(Event::Starting("context switch (smartcon ctx)"));
    let (ctx_measured, ctx, ctx_source) = context_switch(plan, stop)?;
    let (switch_direct_ns, switch_indirect_ns) = switch_costs_ns(&ctx);
    progress(Event::Done);

    stopped(stop)?;
    progress(Event::Starting("blocking wait's CPU (the probe's host wait cost)"));
    let (wait, wait_source) = match HostWaitCost::stored() {
        Some(w) => (w, format!("{} (stored)", HostWaitCost::path().display())),
        None => {
            let w = crate::probe::ensure_host_wait_cost(monitor, plan.ctx_profile.as_deref(), stop, progress)?;
            (w, format!("measured now by the probe's host wait cost, stored in {}", HostWaitCost::path().display()))
        }
    };
    progress(Event::Done);

    let mut block_path = Vec::with_capacity(2);
    progress(Event::Starting("io_uring against pread, idle"));
    block_path.push(block_path_rounds(file.as_ref(), plan, "idle", monitor, stop)?);
    progress(Event::Done);
    progress(Event::Starting("io_uring against pread, a spinner on every core"));
    {
        let load = smartcon_workloads::load::CpuLoad::start(online_cpus().max(1))?;
        std::thread::sleep(std::time::Duration::from_millis(20));
        block_path.push(block_path_rounds(file.as_ref(), plan, "beside_spinners", monitor, stop)?);
        drop(load);
    }
    progress(Event::Done);
    let block_path_target = file.label().to_string();
    drop(file);

    let curve = block_wait_curve(plan, monitor, stop, progress)?;
    let spin_share = curve.share.clamp(0.01, 0.99);
    // A share within 2% of the whole core is the whole core (the clock reads' own noise).
    let share_alone = curve.share_alone.clamp(0.01, 1.0);
    let share_alone = if share_alone > 0.98 { 1.0 } else { share_alone };

    let now_s = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let model = HostModel {
        version: HOST_MODEL_VERSION,
        name: "measured".into(),
        source: format!(
            "smartcon host{} on {}; block_cpu_ns and spin_overhead_ns from {wait_source}; switch costs from {ctx_source}; block_path on {block_path_target}",
            if plan.quick { " --quick" } else { "" },
            utc_date(now_s),
        ),
        cores: online_cpus(),
        sleep,
        wakeup: wakeup_busy,
        idle_wake_extra_ns: (wakeup_idle.p50_ns - wakeup_busy.p50_ns).max(0.0),
        block_cpu_ns: wait.block_cpu_ns,
        waker_cpu_ns: med(&wake_idle),
        spin_overhead_ns: wait.spin_overhead_ns,
        switch_direct_ns,
        switch_indirect_ns,
        block_path: BlockPath {
            uring_extra_idle_ns: block_path[0].uring_extra_ns,
            uring_extra_beside_spinners_ns: block_path[1].uring_extra_ns,
        },
        block_wait: curve.points,
        spin_share_beside_cruncher: spin_share,
        spin_share_alone: share_alone,
        background_busy_pct: curve.background_busy_pct.clamp(0.0, 100.0),
        spin_slice_ns: curve.spin_slice_ns,
        filled: Vec::new(),
        sleep_cpu: sleep_cpu_points(&SLEEP_REQUESTED_NS, &sleep_alone, &curve.sleep_beside),
        spin_share_sleeping: curve.sleeping.model(),
        sleep_io: Vec::new(),
    };
    let sleep_io = sleep_io_points(&curve.sleep_io, |ns| model.sleep_cpu_at(ns, true));
    let model = HostModel { sleep_io, ..model };
    model.validate()?;
    Ok(HostMeasurement {
        model,
        ctx_measured,
        ctx_source,
        wait_source,
        wakeup_busy,
        wakeup_idle,
        waker_cpu_busy_ns: med(&wake_busy),
        waker_cpu_idle_ns: med(&wake_idle),
        polled_by: wake_busy.polled_by.unwrap_or("none"),
        block_path_target,
        block_path,
        block_wait_turns: curve.turns,
        spin_shares: curve.shares,
        crunchers_shares: curve.crunchers_shares,
        spin_shares_alone: curve.shares_alone,
        sleeping_spin_shares: curve.sleeping.shares,
        sleeping_spin_crunchers_shares: curve.sleeping.crunchers,
        sleeping_spin_rates: curve.sleeping.rates,
        sleep_io_turns: curve.sleep_io.into_iter().map(|(_, _, r)| r).collect(),
        steps: clock.into_inner().done,
        elapsed_ns: started.elapsed().as_nanos() as u64,
    })
}

/// `host.json` as stored (version 2): the model's fields, and `smartcon ctx`'s profile
/// nested under `"ctx"` (version 1 put the two side by side), so `smartcon model`, the probe
/// and the simulation each read their part of one file.
pub fn stored_json(model: &HostModel, ctx: Option<&HostProfile>) -> Result<serde_json::Value, Error> {
    let bad = |e: serde_json::Error| Error::new(ErrorKind::Internal, format!("host model does not serialize: {e}"));
    let mut out = serde_json::to_value(model).map_err(bad)?;
    let obj = out.as_object_mut().ok_or_else(|| Error::new(ErrorKind::Internal, "host model is not a JSON object"))?;
    if let Some(p) = ctx {
        obj.insert(HOST_JSON_CTX_KEY.into(), serde_json::to_value(p).map_err(bad)?);
    }
    Ok(out)
}

/// The ctx profile a stored `host.json` holds, if it holds a readable one.
pub fn stored_ctx(path: &Path) -> Option<HostProfile> {
    path.exists().then(|| HostProfile::read(path).ok()).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression (issue 27's fifth session): the blocking wait's lateness was the median of
    /// three turns' means, which drops the turn that met the most of a millisecond tail. The
    /// pooled figure is the mean over every I/O of every turn, what a run's IOPS follows.
    #[test]
    fn pooled_turns_keep_the_tail_a_median_of_turns_drops() {
        use smartcon_emutarget::sim::{self, SimConfig};
        let spec = smartcon_devemu::parse_spec("emu:nvme").unwrap();
        let job = JobSpec {
            duration_ns: 50_000_000,
            span_bytes: Some(16 << 20),
            ..JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(Strategy::Block))
        };
        // Two turns on a host with a short tail, one on a host with a long one (noisy-cloud's
        // wake-up p99 is hundreds of us): the middle turn is a short-tailed one.
        let turn = |host: &str, seed: u64| {
            let cfg = SimConfig::new(seed, HostModel::preset(host).unwrap());
            sim::run_cell(&spec, &job, &cfg).unwrap().record.result
        };
        let turns = [turn("bare-metal", 1), turn("noisy-cloud", 2), turn("bare-metal", 3)];
        let each: Vec<Turn> = turns.iter().map(|r| Turn::of(r).unwrap()).collect();
        let p = pooled(&turns).unwrap();
        let ios: Vec<f64> = turns.iter().map(|r| r.ios as f64).collect();
        let weighted = |f: &dyn Fn(&Turn) -> f64| {
            each.iter().zip(&ios).map(|(t, n)| f(t) * n).sum::<f64>() / ios.iter().sum::<f64>()
        };
        let mean = |t: &Turn| t.late.mean_ns.unwrap();
        // The pooled mean is the I/O-weighted mean of the turns' (histogram rounding aside),
        // and the CPU per I/O the summed CPU over the summed I/Os.
        let close = |a: f64, b: f64| (a - b).abs() <= 0.01 * b.abs().max(1.0);
        assert!(close(mean(&p), weighted(&mean)), "{p:?} against {each:?}");
        assert!(close(p.cpu_ns, weighted(&|t: &Turn| t.cpu_ns)), "{p:?} against {each:?}");
        // The median of the turns' means is a short-tailed turn's, below the pooled mean.
        let mut means: Vec<f64> = each.iter().map(mean).collect();
        let med = median(&mut means);
        assert!(mean(&each[1]) > 2.0 * med, "the long-tailed turn stands out: {each:?}");
        assert!(mean(&p) > 1.2 * med, "pooled {} against the median of turns {med}", mean(&p));
        assert!(pooled(&[]).is_none());
    }

    /// Regression (seventeenth session): the spinner's share was the median of its turns'
    /// shares; the sixteenth session's turns beside a cruncher held 0.50, 0.68 and 0.52 of
    /// the core, the median 0.515 where the bench's 2 s cells held 0.62-0.64. The share is now
    /// their CPU over their time.
    #[test]
    fn a_spinners_share_is_its_turns_pooled_not_their_median() {
        let turn = |share: f64, duration_ns: f64| spin_turn(share, duration_ns, None);
        let turns = [turn(0.496, 360e6), turn(0.681, 360e6), turn(0.515, 360e6)];
        let pooled = pooled_share(&turns);
        assert!((pooled - (0.496 + 0.681 + 0.515) / 3.0).abs() < 1e-9, "{pooled}");
        let mut shares: Vec<f64> = turns.iter().map(|t| t.share).collect();
        assert!(pooled - median(&mut shares) > 0.04, "{pooled}");
        // Turns of different lengths weigh by their time.
        let pooled = pooled_share(&[turn(0.5, 100e6), turn(0.8, 300e6)]);
        assert!((pooled - 0.725).abs() < 1e-9, "{pooled}");
        assert_eq!(pooled_share(&[]), 0.0);
    }

    fn spin_turn(share: f64, duration_ns: f64, slice_ns: Option<f64>) -> Turn {
        Turn {
            cpu_ns: 10_000.0,
            late: Quantiles::new(0.0, 0.0, 0.0),
            share,
            busy_ns: share * duration_ns,
            duration_ns,
            sleeps_per_io: 0.0,
            slice_ns,
        }
    }

    /// Eighteenth session: the spinner's own share beside the crunchers swings with which
    /// thread the scheduler left alone on a core (the seventeenth session's quiet turns:
    /// 0.50, 0.56, 0.75); every thread's CPU over the threads does not. Fails on the
    /// spinner's own share pooled (0.60 here).
    #[test]
    fn the_share_beside_the_crunchers_is_every_threads_not_the_spinners_alone() {
        let turns = [spin_turn(0.50, 360e6, None), spin_turn(0.56, 360e6, None), spin_turn(0.75, 360e6, None)];
        // Two crunchers on two cores, quiet: they held what the spinner left of both cores.
        let crunchers = [1.49, 1.43, 1.24];
        let fair = fair_share(&turns, &crunchers, 2);
        assert!((fair - 0.663).abs() < 0.002, "{fair}");
        assert!((pooled_share(&turns) - 0.603).abs() < 0.001);
        // Other users' load took a third of the machine: the share falls with it.
        let loaded = fair_share(&turns, &[0.84, 0.78, 0.59], 2);
        assert!((loaded - 0.447).abs() < 0.002, "{loaded}");
        // Turns weigh by their time; none gives 0.
        let weighted = fair_share(&[spin_turn(0.5, 100e6, None), spin_turn(0.8, 300e6, None)], &[1.5, 1.2], 2);
        assert!((weighted - (100.0 * 2.0 + 300.0 * 2.0) / (400.0 * 3.0)).abs() < 1e-9, "{weighted}");
        assert_eq!(fair_share(&[], &[], 2), 0.0);
    }

    /// Eighteenth session: the slice is the turns beside the crunchers', pooled; a quiet
    /// machine's lone turns (preempted by housekeeping now and then) do not lengthen it.
    /// Fails on the median of both sets.
    #[test]
    fn a_sleeping_spinners_share_is_its_own_turns_pooled() {
        // Its turns' CPU over their time and its sleeps over it; not every thread's mean
        // (the crunchers' shares do not enter it: it is not like them to the scheduler).
        let mut s = SleepingSpin::default();
        for (cpu, wall, sleeps, c) in [(0.5e9, 1e9, 100, 1.5), (0.3e9, 0.5e9, 40, 1.4)] {
            s.cpu_ns += cpu;
            s.wall_ns += wall;
            s.sleeps += sleeps;
            s.shares.push(cpu / wall);
            s.crunchers.push(c);
        }
        let m = s.model().unwrap();
        assert!((m.share - 0.8 / 1.5).abs() < 1e-12, "{}", m.share);
        assert!((m.sleeps_per_s - 140.0 / 1.5).abs() < 1e-9, "{}", m.sleeps_per_s);
        // No sleep, no figure: the model keeps the pure spinner's share.
        assert!(SleepingSpin { cpu_ns: 1e9, wall_ns: 1e9, ..Default::default() }.model().is_none());
        assert!(SleepingSpin::default().model().is_none());
    }

    #[test]
    fn hybrids_sleep_and_io_point_keeps_the_turns_and_the_cold_path_against_the_sleep_loop() {
        let turn = |cpu_ns: f64, switches: f64| Turn {
            cpu_ns,
            late: Quantiles::new(12_000.0, 14_000.0, 30_000.0),
            share: 0.5,
            busy_ns: 1e8,
            duration_ns: 2e8,
            sleeps_per_io: switches,
            slice_ns: None,
        };
        let rec =
            |d: f64| SleepIoTurns { device_ns: d, cpu_ns: vec![], sleeps_per_io: vec![], switches_per_io: vec![] };
        let turns =
            vec![(10_000.0, turn(18_500.0, 0.55), rec(10_000.0)), (80_000.0, turn(13_100.0, 1.0), rec(80_000.0))];
        let pts = sleep_io_points(&turns, |ns| (ns < 50_000.0).then_some(12_800.0));
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[0].cpu_beside_cruncher_ns, 18_500.0);
        assert_eq!(pts[0].switches_beside_cruncher, 0.55);
        assert_eq!(pts[0].late_beside_cruncher.p50_ns, 12_000.0);
        assert!((pts[0].cold_io_beside_cruncher_ns.unwrap() - 5_700.0).abs() < 1e-9);
        // No sleep loop measured at that length: no cold-path figure, the point stays.
        assert_eq!(pts[1].cold_io_beside_cruncher_ns, None);
        assert_eq!(pts[1].cpu_beside_cruncher_ns, 13_100.0);
    }

    #[test]
    fn the_spinners_slice_is_its_turns_beside_the_crunchers() {
        let beside = [spin_turn(0.6, 360e6, Some(5e6)), spin_turn(0.7, 360e6, Some(6e6))];
        let alone = [spin_turn(1.0, 360e6, Some(180e6)), spin_turn(1.0, 360e6, Some(360e6))];
        let s = spin_slice(&beside, &alone).unwrap();
        // 216 + 252 ms of CPU over 43.2 + 42 switches.
        assert!((s - (216e6 + 252e6) / (216e6 / 5e6 + 252e6 / 6e6)).abs() < 1.0, "{s}");
        assert!(s < 6e6);
        // No preemption beside the crunchers (a lone core): the turns alone, then none.
        let unpreempted = [spin_turn(1.0, 360e6, None)];
        assert_eq!(spin_slice(&unpreempted, &alone), Some((720e6) / (2.0 + 1.0)));
        assert_eq!(spin_slice(&unpreempted, &unpreempted), None);
    }

    /// Eighteenth session: the io_uring-against-pread rounds stop once their interval is
    /// narrow; the spinner's turns once two agree.
    #[test]
    fn rounds_stop_once_the_interval_is_narrow_and_turns_once_two_agree() {
        // The seventeenth session's quiet idle rounds (pread, io_uring IOPS).
        let sync = [16497.0, 15926.0, 18308.0, 18115.0, 15947.0, 17991.0, 19527.0, 20210.0, 19560.0, 19541.0];
        let block = [20522.0, 17282.0, 19175.0, 17835.0, 18577.0, 17789.0, 19674.0, 19761.0, 19120.0, 19548.0];
        let at = |n: usize| PairedRatio::of(&sync[..n], &block[..n]).unwrap();
        assert!(!narrow_enough(&at(3), 0.5), "never before four rounds");
        assert!(!narrow_enough(&at(9), BLOCK_PATH_HALF_WIDTH), "{:?}", at(9));
        assert!(narrow_enough(&at(10), BLOCK_PATH_HALF_WIDTH), "{:?}", at(10));
        // Equal rounds are narrow at once (four of them).
        let same = PairedRatio::of(&[1.0; 4], &[1.0; 4]).unwrap();
        assert!(narrow_enough(&same, 0.001));
        assert!(!settled(&[0.66], 1.0), "one turn is no agreement");
        assert!(settled(&[0.656, 0.659], SPIN_SHARE_SPREAD_MAX));
        assert!(!settled(&[0.63, 0.74], SPIN_SHARE_SPREAD_MAX));
        assert!(!settled(&[0.63, 0.74, 0.66], SPIN_SHARE_SPREAD_MAX));
    }

    /// A blocking turn's switches per I/O are the share of its waits that slept (simulated
    /// on a host whose curve says half of the 10 us device's waits sleep).
    #[test]
    fn a_turn_counts_the_waits_that_slept() {
        use smartcon_emutarget::sim::{self, SimConfig};
        let mut host = HostModel::preset("host-c").unwrap();
        let q = Quantiles::new(10_000.0, 12_000.0, 14_000.0);
        host.block_wait = vec![BlockWaitPoint {
            device_ns: 10_000.0,
            cpu_ns: 15_000.0,
            late: q,
            cpu_beside_cruncher_ns: 15_000.0,
            late_beside_cruncher: q,
            sleeps_per_wait: Some(0.5),
            sleeps_per_wait_beside_cruncher: Some(0.5),
        }];
        let spec = smartcon_devemu::parse_spec(&format!("emu:nvram,lat={}ns,size=16m", 10_000 - NVRAM_4K_TRANSFER_NS))
            .unwrap();
        let job = JobSpec {
            duration_ns: 100_000_000,
            span_bytes: Some(16 << 20),
            ..JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(Strategy::Block))
        };
        let r = sim::run_cell(&spec, &job, &SimConfig::new(3, host)).unwrap().record.result;
        assert_eq!(r.model_service_ns, Some(10_000), "the curve's device time");
        let t = Turn::of(&r).unwrap();
        assert!((t.sleeps_per_io - 0.5).abs() < 0.03, "{}", t.sleeps_per_io);
        assert!((t.share - t.busy_ns / t.duration_ns).abs() < 1e-12);
    }

    /// Each step is timed from its start to its Done, a step inside another on its own, and
    /// a step never done is not recorded.
    #[test]
    fn the_step_clock_times_each_step_and_nested_ones() {
        let mut c = StepClock::default();
        c.see(&Event::Steps(3));
        c.see(&Event::Starting("outer"));
        c.see(&Event::Starting("inner"));
        std::thread::sleep(std::time::Duration::from_millis(2));
        c.see(&Event::Note("a note"));
        c.see(&Event::Done);
        c.see(&Event::Done);
        c.see(&Event::Starting("never done"));
        let steps: Vec<&str> = c.done.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(steps, ["inner", "outer"]);
        assert!(c.done[0].ns >= 2_000_000 && c.done[1].ns >= c.done[0].ns, "{:?}", c.done);
        c.see(&Event::Done);
        c.see(&Event::Done);
        assert_eq!(c.done.len(), 3, "one more Done than Starting records nothing");
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(951_782_400), "2000-02-29");
        assert_eq!(utc_date(1_795_651_200), "2026-11-26");
    }

    #[test]
    fn a_stored_host_json_reads_as_both_the_model_and_the_ctx_profile() {
        let model = HostModel::preset("host-c").unwrap();
        let ctx = HostProfile {
            version: smartcon_ctxcost::HOST_PROFILE_VERSION,
            created_unix_s: 1,
            quick: true,
            cpu: 0,
            cross_cpu: Some(1),
            clock_ghz: None,
            cache: smartcon_ctxcost::CacheSizes { l1d_bytes: None, l2_bytes: Some(1 << 20), llc_bytes: None },
            pipe_overhead_us: 1.0,
            direct: vec![smartcon_ctxcost::DirectPoint { procs: 2, us_per_switch: 2.0, us_per_switch_raw: 3.0 }],
            indirect: vec![smartcon_ctxcost::IndirectPoint {
                array_bytes: 1 << 20,
                us_per_switch: 5.5,
                us_per_switch_raw: 9.0,
                us_hot: 3.0,
            }],
            wakeup_same_cpu_us: 4.0,
            wakeup_cross_cpu_us: Some(30.0),
            perf_sched_pipe_us_per_switch: None,
            perf_runs: 3,
            perf_skipped_reason: None,
        };
        assert_eq!(switch_costs_ns(&ctx), (Some(2000.0), Some(3500.0)));
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-host-json-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let path = dir.join("host.json");
        let text = serde_json::to_string_pretty(&stored_json(&model, Some(&ctx)).unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        assert_eq!(HostModel::load(&path).unwrap(), model);
        assert_eq!(HostProfile::read(&path).unwrap(), ctx);
        assert_eq!(stored_ctx(&path), Some(ctx));
        // Without a ctx profile: the model alone, which `smartcon model` does not take.
        std::fs::write(&path, serde_json::to_string(&stored_json(&model, None).unwrap()).unwrap()).unwrap();
        assert_eq!(HostModel::load(&path).unwrap(), model);
        assert!(stored_ctx(&path).is_none());
    }
}
