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
use smartcon_emutarget::target::{self, OpenOptions, Target};
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::Error;
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{online_cpus, Profile};
use smartcon_engine::stats::JobResult;
use smartcon_engine::wait::PollParams;
use smartcon_util::units::format_ns;
use smartcon_util::Op;
use smartcon_workloads::load::CpuLoad;
use smartcon_workloads::merge::job::{run_merge_job, MergeJobSpec};
use smartcon_workloads::merge::{MergeConfig, MergeDevice};

use crate::evaluate::judge::beats;
use crate::evaluate::TurnFigures;
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
    /// Each device and load's time is split into this many rounds, every strategy once a
    /// round in a balanced order, so smart-hybrid is judged against its peers round by round.
    pub rounds: usize,
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
            rounds: if tiny { 1 } else { STUDY_ROUNDS },
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
        self.targets.len() * self.loads.len() * self.strategies.len() * self.rounds.max(1)
            + self.intervals_ns.len()
            + 2
            + self.poll_cost_strategies.len()
            + self.merge_ops.len() * self.merge_configs().len()
    }
}

/// Rounds of the polling study's strategies per device and load (the default and
/// `--quick`): four, so the paired interval has three degrees of freedom.
pub const STUDY_ROUNDS: usize = 4;

/// The channel time of one status poll in the sweep's device: a PCIe register read of the
/// paper's DRAM SSD takes on the order of a few hundred ns.
pub const SWEEP_POLL_COST_NS: u64 = 200;
/// How long a load runs before a run is measured: more than the System Monitor's window.
const SETTLE_NS: u64 = 250_000_000;

/// The workload names the study's runs carry.
pub const WORKLOAD_POLLING: &str = "polling-study";
pub const WORKLOAD_SWEEP: &str = "poll-interval-sweep";
pub const WORKLOAD_MERGE: &str = "merge-study";

/// One run of the study (a polling-study run merges its turns; `turns` has each).
#[derive(Debug, Clone, Serialize)]
pub struct StudyRun {
    #[serde(flatten)]
    pub result: JobResult,
    pub load: &'static str,
    pub workload: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub turns: Vec<TurnFigures>,
}

/// smart-hybrid against one other strategy of the polling study, on one device and load,
/// by the evaluate's paired rule ([`crate::evaluate::judge::beats`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerVerdict {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub load: &'static str,
    pub strategy: String,
    pub peer: String,
    /// `dominates` (the strategy beats the peer on both axes), `dominated`, or `neither`
    /// (a trade-off, or a tie within the rounds' noise).
    pub verdict: &'static str,
    /// The strategy's IOPS over the peer's, geometric mean of the per-round ratios, and its
    /// 90% interval.
    pub iops_ratio: f64,
    pub iops_ratio_interval: [f64; 2],
    pub rounds: usize,
    /// The strategy's CPU less the peer's, mean over the rounds, points of one CPU.
    pub cpu_pct_more: f64,
    /// Under the CPU load: the crunchers' work beside the strategy over beside the peer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corunner_ratio: Option<f64>,
}

/// The strategy the peers are judged against.
pub const VERDICT_STRATEGY: StrategyChoice = StrategyChoice::SmartHybrid;

/// smart-hybrid against every other strategy of each device and load, round by round.
pub fn peer_verdicts(runs: &[StudyRun]) -> Vec<PeerVerdict> {
    use smartcon_util::stats::{mean, PairedRatio};
    let mut out = Vec::new();
    for sh in runs.iter().filter(|r| r.workload == WORKLOAD_POLLING && r.result.strategy == VERDICT_STRATEGY) {
        let peers = runs.iter().filter(|r| {
            r.workload == WORKLOAD_POLLING
                && r.load == sh.load
                && r.result.target == sh.result.target
                && r.result.strategy != VERDICT_STRATEGY
        });
        for p in peers {
            let with_corunner = sh.load == LOAD_CPU_INTENSIVE;
            let perf = |t: &[TurnFigures]| t.iter().map(|x| x.perf).collect::<Vec<f64>>();
            let Some(r) = PairedRatio::of(&perf(&sh.turns), &perf(&p.turns)) else { continue };
            let work = |t: &[TurnFigures]| t.iter().map(|x| x.corunner_work_per_s.unwrap_or(0.0)).collect::<Vec<f64>>();
            let corunner_ratio =
                if with_corunner { PairedRatio::of(&work(&sh.turns), &work(&p.turns)).map(|k| k.gmean) } else { None };
            let diffs: Vec<f64> = sh.turns.iter().zip(&p.turns).map(|(a, b)| a.cpu_pct - b.cpu_pct).collect();
            let verdict = if beats(&sh.turns, &p.turns, with_corunner).is_some() {
                "dominates"
            } else if beats(&p.turns, &sh.turns, with_corunner).is_some() {
                "dominated"
            } else {
                "neither"
            };
            out.push(PeerVerdict {
                record_type: "peer_verdict",
                target: sh.result.target.clone(),
                load: sh.load,
                strategy: VERDICT_STRATEGY.name().to_string(),
                peer: p.result.strategy.name().to_string(),
                verdict,
                iops_ratio: r.gmean,
                iops_ratio_interval: [r.lo, r.hi],
                rounds: r.rounds,
                cpu_pct_more: mean(&diffs).unwrap_or(0.0),
                corunner_ratio,
            });
        }
    }
    out
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
    /// smart-hybrid against each other strategy, round by round.
    pub verdicts: Vec<PeerVerdict>,
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
    let one_for = |target: &dyn Target, profile: &Profile, strategy: StrategyChoice, poll: PollParams, ns: u64| {
        let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, strategy);
        js.duration_ns = ns;
        js.poll = poll;
        run_job(target, &js, profile, monitor, stop)
    };
    let one = |target: &dyn Target, profile: &Profile, strategy: StrategyChoice, poll: PollParams| {
        one_for(target, profile, strategy, poll, plan.duration_ns)
    };
    let rounds = plan.rounds.max(1);
    let turn_ns = (plan.duration_ns / rounds as u64).max(1_000_000);
    // Each turn samples for a share of its own time, however short.
    let turn_poll = PollParams { sampling_ns: plan.poll.sampling_ns.min(turn_ns / 4), ..plan.poll };
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
            // The strategies take turns in rounds, in a balanced order, so each round's
            // turns share the machine's state and are compared round by round.
            let n = plan.strategies.len();
            let mut merged: Vec<Option<JobResult>> = vec![None; n];
            let mut turns: Vec<Vec<TurnFigures>> = vec![Vec::new(); n];
            for round in 0..rounds {
                for i in crate::turn_order(n, round) {
                    if stopped() {
                        break 'loads;
                    }
                    let s = plan.strategies[i];
                    progress(&format!("polling study: {t} {load} {} ({}/{rounds})", s.name(), round + 1));
                    let before = cpu.as_ref().map(|l| l.snapshot());
                    let r = one_for(target.as_ref(), &profile, s, turn_poll, turn_ns)?;
                    let work = cpu.as_ref().zip(before).map(|(l, b)| b.delta_to(&l.snapshot()).work_per_s);
                    turns[i].push(TurnFigures {
                        perf: r.iops,
                        corunner_work_per_s: work,
                        cpu_pct: r.cpu_user_pct + r.cpu_sys_pct,
                        kernel_cpu_pct: 0.0,
                    });
                    match &mut merged[i] {
                        Some(m) => m.merge(&r),
                        slot => *slot = Some(r),
                    }
                }
            }
            for (result, turns) in merged.into_iter().zip(turns) {
                if let Some(result) = result {
                    runs.push(StudyRun { result, load, workload: WORKLOAD_POLLING, turns });
                }
            }
        }
        drop(cpu);
    }
    let verdicts = peer_verdicts(&runs);
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
    runs.extend(sweep_runs.into_iter().map(|result| StudyRun {
        result,
        load: LOAD_BM_ONLY,
        workload: WORKLOAD_SWEEP,
        turns: Vec::new(),
    }));
    let merge_configs = plan.merge_configs();
    let merge_rows = run_merges(plan, &merge_configs, stop, &mut progress)?;
    Ok(Study {
        runs,
        verdicts,
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
    let spec = smartcon_devemu::parse_spec(&plan.merge_target)?;
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
        // The full study: 2 targets x 2 loads x 9 strategies x 4 rounds.
        let full = StudyPlan::for_evaluate(false, 1_000_000_000);
        assert_eq!(full.runs(), 36 * 4 + 7 + 4 + 10);
        assert!(full.sweep_target.contains("poll_cost=200ns"));
    }

    fn run(strategy: StrategyChoice, load: &'static str, turns: &[(f64, f64, f64)]) -> StudyRun {
        let mut result = crate::evaluate::merge::tests::record(strategy, &[10_000; 10], 1_000_000_000, 10.0);
        result.target = "emu:optane".into();
        StudyRun {
            result,
            load,
            workload: WORKLOAD_POLLING,
            turns: turns
                .iter()
                .map(|&(perf, cpu_pct, w)| TurnFigures {
                    perf,
                    cpu_pct,
                    kernel_cpu_pct: 0.0,
                    corunner_work_per_s: (load == LOAD_CPU_INTENSIVE).then_some(w),
                })
                .collect(),
        }
    }

    #[test]
    fn smart_hybrid_is_judged_against_each_peer_round_by_round() {
        let pas = StrategyChoice::Fixed(Strategy::Pas);
        let spin = StrategyChoice::Fixed(Strategy::Spin);
        let iopoll = StrategyChoice::Fixed(Strategy::IopollHybrid);
        let b = LOAD_BM_ONLY;
        // Rounds swing 2x together; smart-hybrid has 10% more IOPS than pas in each at the
        // same CPU: it dominates. Spin has the same IOPS at 60 points more CPU: dominated
        // by smart-hybrid too. iopoll-hybrid: the same IOPS at 30 points less CPU: it
        // dominates smart-hybrid.
        let runs = vec![
            run(VERDICT_STRATEGY, b, &[(110.0, 40.0, 0.0), (220.0, 40.0, 0.0), (110.0, 40.0, 0.0)]),
            run(pas, b, &[(100.0, 40.0, 0.0), (200.0, 40.0, 0.0), (100.0, 40.0, 0.0)]),
            run(spin, b, &[(110.0, 100.0, 0.0), (220.0, 100.0, 0.0), (110.0, 100.0, 0.0)]),
            run(iopoll, b, &[(110.0, 10.0, 0.0), (220.0, 10.0, 0.0), (110.0, 10.0, 0.0)]),
        ];
        let v = peer_verdicts(&runs);
        let of = |peer: &str| v.iter().find(|x| x.peer == peer).map(|x| x.verdict);
        assert_eq!(v.len(), 3);
        assert_eq!(of("pas"), Some("dominates"));
        assert_eq!(of("spin"), Some("dominates"));
        assert_eq!(of("iopoll-hybrid"), Some("dominated"));
        let pas_v = v.iter().find(|x| x.peer == "pas").unwrap();
        assert!((pas_v.iops_ratio - 1.1).abs() < 1e-9 && pas_v.rounds == 3, "{pas_v:?}");
        // Under the CPU load the co-runner decides: 10% more IOPS but the crunchers keep
        // only 90%: neither.
        let c = LOAD_CPU_INTENSIVE;
        let runs = vec![
            run(VERDICT_STRATEGY, c, &[(110.0, 40.0, 900.0), (220.0, 40.0, 450.0)]),
            run(pas, c, &[(100.0, 40.0, 1000.0), (200.0, 40.0, 500.0)]),
        ];
        let v = peer_verdicts(&runs);
        assert_eq!((v.len(), v[0].verdict), (1, "neither"));
        assert!((v[0].corunner_ratio.unwrap() - 0.9).abs() < 1e-9);
    }
}
