//! The polling study (docs/hybrid.md), shared by `bench` and `evaluate`: the interval sweep of
//! fixed-interval polling (paper 002, Fig. 1) and its best interval, with `dip` (the
//! paper's wait without polling) and `hybrid` (sleep, then poll) on the same device whose
//! polls take channel time; the check of hybrid against spin and block; and the small study
//! `evaluate` runs with them: block, spin, smartcon's polling strategies and the peers'
//! rules (`half-mean`, `iopoll-hybrid`, `pas`) per emulated device and load, and the merge
//! study's configurations (temporal merge, serialized or pipelined post-I/O processing,
//! Fig. 4) on 16 threads.
//!
//! Typed plan in ([`StudyPlan`]), typed records out ([`Study`]), a progress callback and a
//! stop flag. Non-goals: printing, plots and markdown (the CLI renders a [`Study`]).

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use smartcon_engine::decision::Strategy;
use smartcon_engine::devemu::units::format_ns;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{online_cpus, Profile};
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::{self, OpenOptions, Target};
use smartcon_engine::wait::PollParams;
use smartcon_engine::Op;
use smartcon_workloads::load::CpuLoad;
use smartcon_workloads::merge::job::{run_merge_job, MergeJobSpec};
use smartcon_workloads::merge::{MergeConfig, MergeDevice};

use crate::merge_bench::{standard_configs, MergeRecord, Row};

/// The best fixed polling interval of one cell (`bench --sweep-interval`).
#[derive(Debug, Clone, Serialize)]
pub struct SweepRecord {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub op: &'static str,
    pub bs_bytes: u64,
    /// (interval, mean latency) per interval run, by interval.
    pub points_ns: Vec<(u64, f64)>,
    pub best_interval_ns: u64,
    pub best_lat_ns_mean: f64,
    pub block_lat_ns_mean: Option<f64>,
    pub spin_lat_ns_mean: Option<f64>,
    /// `dip` and `hybrid` on the same device, where they ran.
    pub dip_lat_ns_mean: Option<f64>,
    pub hybrid_lat_ns_mean: Option<f64>,
}

/// Hybrid against spin and block in one cell.
#[derive(Debug, Clone, Serialize)]
pub struct HybridCheck {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub op: &'static str,
    pub bs_bytes: u64,
    pub load: String,
    pub iops_vs_spin: f64,
    pub cpu_vs_spin: f64,
    pub iops_vs_block: Option<f64>,
    pub pred_err_ns_p50: Option<u64>,
    pub sleeps_per_io: f64,
}

/// The result of the same cell (target, op, block size) run with `strategy`.
pub fn find<'a>(results: &'a [JobResult], r: &JobResult, strategy: &str) -> Option<&'a JobResult> {
    results
        .iter()
        .find(|x| x.target == r.target && x.op == r.op && x.bs_bytes == r.bs_bytes && x.strategy.name() == strategy)
}

/// The interval with the lowest mean latency (the first of equals); `None` without points
/// or when no latency is a number.
pub fn best_interval(points_ns: &[(u64, f64)]) -> Option<(u64, f64)> {
    points_ns.iter().copied().filter(|p| !p.1.is_nan()).fold(None, |best, p| match best {
        Some((_, lat)) if lat <= p.1 => best,
        _ => Some(p),
    })
}

/// The interval sweep of every cell that has fixed-interval runs.
pub fn sweeps(results: &[JobResult]) -> Vec<SweepRecord> {
    let mut out: Vec<SweepRecord> = Vec::new();
    for r in results.iter().filter(|r| r.strategy == StrategyChoice::Fixed(Strategy::FixedPoll)) {
        let Some(interval_ns) = r.polling.as_ref().and_then(|p| p.interval_ns) else { continue };
        match out.iter_mut().find(|s| s.target == r.target && s.op == r.op.name() && s.bs_bytes == r.bs_bytes) {
            Some(rec) => rec.points_ns.push((interval_ns, r.lat_ns_mean)),
            None => out.push(SweepRecord {
                record_type: "interval_sweep",
                target: r.target.clone(),
                op: r.op.name(),
                bs_bytes: r.bs_bytes,
                points_ns: vec![(interval_ns, r.lat_ns_mean)],
                best_interval_ns: interval_ns,
                best_lat_ns_mean: f64::INFINITY,
                block_lat_ns_mean: find(results, r, "block").map(|b| b.lat_ns_mean),
                spin_lat_ns_mean: find(results, r, "spin").map(|b| b.lat_ns_mean),
                dip_lat_ns_mean: find(results, r, "dip").map(|b| b.lat_ns_mean),
                hybrid_lat_ns_mean: find(results, r, "hybrid").map(|b| b.lat_ns_mean),
            }),
        }
    }
    for rec in &mut out {
        // The pick runs in run order, so equal latencies keep the earlier run's interval.
        if let Some((i, lat)) = best_interval(&rec.points_ns) {
            (rec.best_interval_ns, rec.best_lat_ns_mean) = (i, lat);
        }
        rec.points_ns.sort_by_key(|p| p.0);
    }
    out
}

/// Hybrid against spin (and block where it ran) in every cell of `results` that has both.
pub fn hybrid_checks(results: &[JobResult], load: &str) -> Vec<HybridCheck> {
    results
        .iter()
        .filter(|r| r.strategy == StrategyChoice::Fixed(Strategy::Hybrid))
        .filter_map(|h| {
            let spin = find(results, h, "spin")?;
            let cpu = |r: &JobResult| r.cpu_user_pct + r.cpu_sys_pct;
            Some(HybridCheck {
                record_type: "hybrid_check",
                target: h.target.clone(),
                op: h.op.name(),
                bs_bytes: h.bs_bytes,
                load: load.to_string(),
                iops_vs_spin: h.iops / spin.iops.max(1e-9),
                cpu_vs_spin: cpu(h) / cpu(spin).max(1e-9),
                iops_vs_block: find(results, h, "block").map(|b| h.iops / b.iops.max(1e-9)),
                pred_err_ns_p50: h.polling.as_ref().and_then(|p| p.pred_err_ns_p50),
                sleeps_per_io: h.polling.as_ref().map_or(0.0, |p| p.sleeps_per_io),
            })
        })
        .collect()
}

/// The loads the study runs its cells under.
pub const LOAD_BM_ONLY: &str = "bm-only";
pub const LOAD_CPU_INTENSIVE: &str = "cpu-intensive";

/// What `evaluate` measures of the polling strategies: per target and load, block, spin,
/// the polling strategies and the peers' rules on 4 KiB random reads with one thread; and on
/// a device whose status polls cost channel time, block, spin, `poll_cost_strategies` and the
/// interval sweep.
#[derive(Debug, Clone)]
pub struct StudyPlan {
    pub targets: Vec<String>,
    /// [`LOAD_BM_ONLY`] or [`LOAD_CPU_INTENSIVE`].
    pub loads: Vec<&'static str>,
    pub strategies: Vec<StrategyChoice>,
    pub sweep_target: String,
    /// Run on `sweep_target` beside block, spin and the sweep (`dip` against `hybrid`:
    /// Fig. 1's channel contention, which a wait without polls avoids).
    pub poll_cost_strategies: Vec<StrategyChoice>,
    pub intervals_ns: Vec<u64>,
    pub duration_ns: u64,
    pub poll: PollParams,
    /// The temporal-merge part: its device, threads and ops (random 4 KiB).
    pub merge_target: String,
    pub merge_threads: u32,
    pub merge_ops: Vec<Op>,
}

impl StudyPlan {
    /// The study for `evaluate`'s default, `--quick` and `--tiny` matrices.
    pub fn for_evaluate(tiny: bool, duration_ns: u64) -> StudyPlan {
        let strategies = [
            StrategyChoice::Fixed(Strategy::Block),
            StrategyChoice::Fixed(Strategy::Spin),
            StrategyChoice::Fixed(Strategy::Hybrid),
            StrategyChoice::Fixed(Strategy::Dip),
            StrategyChoice::Fixed(Strategy::FixedPoll),
            StrategyChoice::Fixed(Strategy::HalfMean),
            StrategyChoice::Fixed(Strategy::IopollHybrid),
            StrategyChoice::Fixed(Strategy::Pas),
            StrategyChoice::SmartHybrid,
        ];
        let (targets, intervals_ns): (Vec<String>, Vec<u64>) = if tiny {
            (vec!["emu:optane,size=16m".into()], vec![500, 2_000])
        } else {
            (
                vec!["emu:optane,size=64m".into(), "emu:nvme,size=64m".into()],
                vec![250, 500, 1_000, 2_000, 4_000, 8_000, 16_000],
            )
        };
        StudyPlan {
            targets,
            loads: vec![LOAD_BM_ONLY, LOAD_CPU_INTENSIVE],
            strategies: strategies.to_vec(),
            sweep_target: format!("emu:optane,size=16m,poll_cost={SWEEP_POLL_COST_NS}ns"),
            poll_cost_strategies: [Strategy::Dip, Strategy::Hybrid].map(StrategyChoice::Fixed).to_vec(),
            intervals_ns,
            duration_ns,
            // A sampling phase well inside every run, also the tiny ones.
            poll: PollParams {
                sampling_ns: (duration_ns / 4).min(PollParams::DEFAULT.sampling_ns),
                ..PollParams::DEFAULT
            },
            merge_target: format!("emu:optane,channels=1,size={}", if tiny { "16m" } else { "64m" }),
            merge_threads: if tiny { 4 } else { 16 },
            merge_ops: vec![Op::Read, Op::Write],
        }
    }

    /// merge off (the reference), then {fixed, dynamic} x {serialized, pipelined}.
    pub fn merge_configs(&self) -> Vec<MergeConfig> {
        standard_configs(true, self.poll)
    }

    /// How many runs the study makes (for a progress bar).
    pub fn runs(&self) -> usize {
        self.targets.len() * self.loads.len() * self.strategies.len()
            + self.intervals_ns.len()
            + 2
            + self.poll_cost_strategies.len()
            + self.merge_ops.len() * self.merge_configs().len()
    }
}

/// The channel time of one status poll in the sweep's device: a PCIe register read of the
/// paper's DRAM SSD takes on the order of a few hundred ns.
pub const SWEEP_POLL_COST_NS: u64 = 200;
/// How long a load runs before a run is measured: more than the System Monitor's window.
const SETTLE_NS: u64 = 250_000_000;

/// The workload names the study's runs carry.
pub const WORKLOAD_POLLING: &str = "polling-study";
pub const WORKLOAD_SWEEP: &str = "poll-interval-sweep";
pub const WORKLOAD_MERGE: &str = "merge-study";

/// One run of the study.
#[derive(Debug, Clone, Serialize)]
pub struct StudyRun {
    #[serde(flatten)]
    pub result: JobResult,
    pub load: &'static str,
    pub workload: &'static str,
}

/// A merge run of the study: a `merge_result` record with `load` and `workload`.
#[derive(Debug, Serialize)]
pub struct StudyMergeRecord<'a> {
    #[serde(flatten)]
    pub record: MergeRecord<'a>,
    pub load: &'static str,
    pub workload: &'static str,
}

/// What the study measured.
#[derive(Debug)]
pub struct Study {
    pub runs: Vec<StudyRun>,
    pub sweeps: Vec<SweepRecord>,
    pub checks: Vec<HybridCheck>,
    pub merge_target: String,
    pub merge_threads: u32,
    pub merge_rows: Vec<Row>,
    pub merge_configs: Vec<MergeConfig>,
}

impl Study {
    /// The merge part as `merge_result` records (docs/merge.md) with `load` and `workload`.
    pub fn merge_records(&self) -> Vec<StudyMergeRecord<'_>> {
        self.merge_rows
            .iter()
            .map(|r| StudyMergeRecord {
                record: MergeRecord::new(
                    &self.merge_target,
                    r.op,
                    r.pattern,
                    self.merge_threads,
                    &r.config,
                    0,
                    &r.result,
                ),
                load: LOAD_BM_ONLY,
                workload: WORKLOAD_MERGE,
            })
            .collect()
    }

    /// The polling-study runs of one load, as job results (for [`find`]).
    pub fn results_of(&self, load: &str, workload: &str) -> Vec<JobResult> {
        self.runs.iter().filter(|x| x.load == load && x.workload == workload).map(|x| x.result.clone()).collect()
    }
}

fn open(text: &str) -> Result<(Box<dyn Target>, Profile), Error> {
    let target = target::open(&target::parse_target(text)?, OpenOptions::default())?;
    let profile = target.builtin_profile().unwrap_or_else(|| Profile::paper_default(&target.device_id()));
    Ok((target, profile))
}

/// Runs the study; `progress` is told what runs next. Stops early (with what it has) when
/// `stop` is set.
pub fn run_study(
    plan: &StudyPlan,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    mut progress: impl FnMut(&str),
) -> Result<Study, Error> {
    let stopped = || stop.load(Ordering::Relaxed);
    let one = |target: &dyn Target, profile: &Profile, strategy: StrategyChoice, poll: PollParams| {
        let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, strategy);
        js.duration_ns = plan.duration_ns;
        js.poll = poll;
        run_job(target, &js, profile, monitor, stop)
    };
    let mut runs = Vec::new();
    'loads: for &load in &plan.loads {
        let cpu = if load == LOAD_CPU_INTENSIVE {
            let l = CpuLoad::start(online_cpus())?;
            std::thread::sleep(std::time::Duration::from_nanos(SETTLE_NS));
            Some(l)
        } else {
            None
        };
        for t in &plan.targets {
            let (target, profile) = open(t)?;
            for &s in &plan.strategies {
                if stopped() {
                    break 'loads;
                }
                progress(&format!("polling study: {t} {load} {}", s.name()));
                let result = one(target.as_ref(), &profile, s, plan.poll)?;
                runs.push(StudyRun { result, load, workload: WORKLOAD_POLLING });
            }
        }
        drop(cpu);
    }
    let (target, profile) = open(&plan.sweep_target)?;
    let references = [Strategy::Block, Strategy::Spin]
        .map(StrategyChoice::Fixed)
        .into_iter()
        .chain(plan.poll_cost_strategies.iter().copied())
        .map(|s| (s, plan.poll));
    let polls = plan
        .intervals_ns
        .iter()
        .map(|&i| (StrategyChoice::Fixed(Strategy::FixedPoll), PollParams { interval_ns: i, ..plan.poll }));
    let mut sweep_runs = Vec::new();
    for (s, poll) in references.chain(polls) {
        if stopped() {
            break;
        }
        let every = format_ns(poll.interval_ns as f64);
        progress(&format!("polling study: {} {} every {every}", plan.sweep_target, s.name()));
        sweep_runs.push(one(target.as_ref(), &profile, s, poll)?);
    }
    let mut checks = Vec::new();
    for load in &plan.loads {
        let of_load: Vec<JobResult> = runs.iter().filter(|r| r.load == *load).map(|r| r.result.clone()).collect();
        checks.extend(hybrid_checks(&of_load, load));
    }
    let sweeps = sweeps(&sweep_runs);
    runs.extend(sweep_runs.into_iter().map(|result| StudyRun { result, load: LOAD_BM_ONLY, workload: WORKLOAD_SWEEP }));
    let merge_configs = plan.merge_configs();
    let merge_rows = run_merges(plan, &merge_configs, stop, &mut progress)?;
    Ok(Study {
        runs,
        sweeps,
        checks,
        merge_target: plan.merge_target.clone(),
        merge_threads: plan.merge_threads,
        merge_rows,
        merge_configs,
    })
}

fn run_merges(
    plan: &StudyPlan,
    configs: &[MergeConfig],
    stop: &AtomicBool,
    progress: &mut impl FnMut(&str),
) -> Result<Vec<Row>, Error> {
    let spec = smartcon_engine::devemu::parse_spec(&plan.merge_target).map_err(|e| Error::new(ErrorKind::Usage, e))?;
    let mut rows = Vec::new();
    for &op in &plan.merge_ops {
        for c in configs {
            if stop.load(Ordering::Relaxed) {
                return Ok(rows);
            }
            progress(&format!("merge study: {} {} {}", plan.merge_target, op.name(), c.label()));
            let dev = MergeDevice::new(&spec, *c)?;
            let job = MergeJobSpec {
                op,
                pattern: Pattern::Rand,
                threads: plan.merge_threads,
                duration_ns: plan.duration_ns,
                ios_per_thread_max: None,
                span_bytes: dev.capacity_bytes(),
                prefill: true,
                seed: 1,
            };
            let result = run_merge_job(&dev, &job, stop)?;
            rows.push(Row { op, pattern: Pattern::Rand, config: *c, result });
        }
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_best_interval_is_the_lowest_mean_latency_and_the_first_of_equals() {
        assert_eq!(best_interval(&[]), None);
        assert_eq!(best_interval(&[(500, f64::NAN)]), None);
        let points = [(250, 9_000.0), (500, 7_000.0), (1_000, 6_500.0), (2_000, 6_500.0), (4_000, 8_000.0)];
        assert_eq!(best_interval(&points), Some((1_000, 6_500.0)));
        assert_eq!(best_interval(&[(4_000, 1.0), (250, f64::NAN), (250, 2.0)]), Some((4_000, 1.0)));
    }

    #[test]
    fn the_evaluate_plan_counts_its_runs_and_samples_inside_each_run() {
        let tiny = StudyPlan::for_evaluate(true, 40_000_000);
        assert_eq!(tiny.strategies.len(), 9);
        for peer in ["iopoll-hybrid", "pas", "dip", "half-mean", "hybrid", "smart-hybrid"] {
            assert!(tiny.strategies.iter().any(|s| s.name() == peer), "{peer} is in the study");
        }
        assert!(tiny.poll.sampling_ns <= 10_000_000);
        // 1 target x 2 loads x 9 strategies + 2 intervals + block, spin, dip and hybrid on the
        // poll_cost device + 2 ops x 5 merges.
        assert_eq!(tiny.runs(), 18 + 2 + 4 + 10);
        assert_eq!(tiny.merge_threads, 4);
        let full = StudyPlan::for_evaluate(false, 1_000_000_000);
        assert_eq!(full.runs(), 36 + 7 + 4 + 10);
        assert!(full.sweep_target.contains("poll_cost=200ns"));
    }
}
