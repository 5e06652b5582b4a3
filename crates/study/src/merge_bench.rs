//! The merge study: paper 002's fio runs (Sec. 5, Fig. 4) on an emulated device with
//! temporal merge and page-unit completion (`smartcon_workloads::merge`).
//!
//! For every workload (pattern x op) it runs {fixed, dynamic} polling x {serialized,
//! pipelined} post-I/O work with merge on, and merge off with fixed polling as the reference
//! row; each run on a fresh device, the runs of one workload back to back and the rounds
//! interleaved, so a shared machine's drift hits every configuration alike. The rounds of a
//! configuration are summed into one [`Row`]; [`ratios`] gives pipelined over serialized
//! IOPS per workload and polling.
//!
//! Non-goals: real devices (none here acknowledges per page); mixed read/write jobs; any
//! printing (the CLI renders rows, ratios and plots).

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::Pattern;
use smartcon_engine::smartport::StrategyChoice;
use smartcon_engine::wait::PollParams;
use smartcon_util::Op;
use smartcon_workloads::merge::job::{run_merge_job, MergeJobResult, MergeJobSpec};
use smartcon_workloads::merge::{MergeConfig, MergeDevice, Polling, MERGE_PAGES_MAX, THREADS_MAX};

/// The most rounds a plan may ask for.
pub const ROUNDS_MAX: u32 = 100;

/// The I/O region when the plan gives none: 64 MiB, or the device if smaller.
pub const SPAN_BYTES_DEFAULT: u64 = 64 << 20;

/// What to run: one device, its workloads and the polling parameters of every
/// configuration.
#[derive(Debug, Clone)]
pub struct MergePlan {
    /// An emulated device, `emu:PRESET[,key=value...]`.
    pub target: String,
    pub threads: u32,
    pub duration_ns: u64,
    pub ops: Vec<Op>,
    pub patterns: Vec<Pattern>,
    pub bs_bytes: u64,
    pub merge_pages_max: u32,
    /// The region I/O goes to; `None`: [`SPAN_BYTES_DEFAULT`] or the device if smaller.
    pub span_bytes: Option<u64>,
    pub rounds: u32,
    /// Run the merge-off reference configuration.
    pub reference: bool,
    pub poll: PollParams,
    /// How the device requests are waited for, one set of configurations each (`poll` and
    /// `hybrid` are the paper's fixed and dynamic polling: [`paper_strategies`]).
    pub strategies: Vec<StrategyChoice>,
}

/// The paper's two pollings as strategies: `poll` (fixed) and `hybrid` (dynamic), the
/// study's default.
pub fn paper_strategies() -> Vec<StrategyChoice> {
    vec![Polling::Fixed.strategy(), Polling::Dynamic.strategy()]
}

impl MergePlan {
    /// The merge-off reference (if asked, with the first strategy), then every strategy x
    /// {serialized, pipelined}.
    pub fn configs(&self) -> Vec<MergeConfig> {
        let mut configs = configs_for(self.reference, self.poll, &self.strategies);
        for c in &mut configs {
            c.merge_pages_max = self.merge_pages_max;
            c.bs_bytes = self.bs_bytes;
        }
        configs
    }

    pub fn runs(&self) -> usize {
        self.ops.len() * self.patterns.len() * self.configs().len() * self.rounds as usize
    }

    /// Checks the whole plan (device, counts, every configuration) before anything runs.
    pub fn validate(&self) -> Result<(), Error> {
        self.prepare().map(|_| ())
    }

    fn prepare(&self) -> Result<(smartcon_devemu::EmuSpec, u64), Error> {
        let usage = |m: String| Error::new(ErrorKind::Usage, m);
        if !self.target.starts_with("emu:") {
            return Err(usage(format!(
                "merge-bench needs an emulated device (emu:PRESET[,...]), not {:?}: page-unit completion is a device feature no real target here has",
                self.target
            )));
        }
        let spec = smartcon_devemu::parse_spec(&self.target)?;
        if self.threads == 0 || self.threads as usize > THREADS_MAX {
            return Err(usage(format!("--threads must be 1..={THREADS_MAX}")));
        }
        if self.merge_pages_max == 0 || self.merge_pages_max > MERGE_PAGES_MAX {
            return Err(usage(format!("--max-merge must be 1..={MERGE_PAGES_MAX} pages")));
        }
        if self.strategies.is_empty() {
            return Err(usage("--strategies names none".into()));
        }
        if self.rounds == 0 || self.rounds > ROUNDS_MAX {
            return Err(usage(format!("--rounds must be 1..={ROUNDS_MAX}")));
        }
        let span = self.span_bytes.unwrap_or(SPAN_BYTES_DEFAULT.min(spec.capacity_bytes));
        for c in &self.configs() {
            let dev = MergeDevice::new(&spec, *c)?;
            self.job(Op::Read, Pattern::Rand, span).validate(&dev)?;
        }
        Ok((spec, span))
    }

    fn job(&self, op: Op, pattern: Pattern, span_bytes: u64) -> MergeJobSpec {
        MergeJobSpec {
            op,
            pattern,
            threads: self.threads,
            duration_ns: self.duration_ns,
            ios_per_thread_max: None,
            span_bytes,
            prefill: true,
            seed: 1,
        }
    }
}

/// merge off (the reference, if asked), then {fixed, dynamic} x {serialized, pipelined},
/// all with `poll`.
pub fn standard_configs(reference: bool, poll: PollParams) -> Vec<MergeConfig> {
    configs_for(reference, poll, &paper_strategies())
}

/// merge off with the first of `strategies` (the reference, if asked), then each strategy x
/// {serialized, pipelined}, all with `poll`.
pub fn configs_for(reference: bool, poll: PollParams, strategies: &[StrategyChoice]) -> Vec<MergeConfig> {
    let mut configs = Vec::new();
    if let (true, Some(&first)) = (reference, strategies.first()) {
        configs.push(MergeConfig::with_strategy(false, false, first));
    }
    for &strategy in strategies {
        for pipelined in [false, true] {
            configs.push(MergeConfig::with_strategy(true, pipelined, strategy));
        }
    }
    for c in &mut configs {
        c.poll = poll;
    }
    configs
}

/// One run (docs/merge.md): the `merge_result` record.
#[derive(Debug, Serialize)]
pub struct MergeRecord<'a> {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: &'a str,
    pub op: &'static str,
    pub pattern: &'static str,
    pub bs_bytes: u64,
    pub threads: u32,
    pub config: String,
    /// 0-based round.
    pub round: u32,
    pub merge: bool,
    pub pipelined: bool,
    /// The wait's name: `fixed` and `dynamic` for the paper's pollings, else the strategy's.
    pub polling: &'static str,
    /// The `--strategy` the device requests were waited for by.
    pub strategy: &'static str,
    pub poll_interval_ns: u64,
    pub alpha_ns: u64,
    pub sampling_ns: u64,
    pub max_merge_pages: u32,
    #[serde(flatten)]
    pub result: &'a MergeJobResult,
}

impl<'a> MergeRecord<'a> {
    pub fn new(
        target: &'a str,
        op: Op,
        pattern: Pattern,
        threads: u32,
        c: &MergeConfig,
        round: u32,
        result: &'a MergeJobResult,
    ) -> MergeRecord<'a> {
        MergeRecord {
            record_type: "merge_result",
            target,
            op: op.name(),
            pattern: pattern.name(),
            bs_bytes: c.bs_bytes,
            threads,
            config: c.label(),
            round,
            merge: c.merge,
            pipelined: c.pipelined,
            polling: c.wait_name(),
            strategy: c.strategy.name(),
            poll_interval_ns: c.poll.interval_ns,
            alpha_ns: c.poll.alpha_ns,
            sampling_ns: c.poll.sampling_ns,
            max_merge_pages: c.merge_pages_max,
            result,
        }
    }
}

/// Pipelined over serialized IOPS of one workload and polling.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct Ratio {
    pub op: &'static str,
    pub pattern: &'static str,
    pub polling: &'static str,
    pub pipelined_over_serialized_iops: f64,
}

/// The `merge_summary` record.
#[derive(Debug, Serialize)]
pub struct MergeSummary {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub target: String,
    pub rounds: u32,
    /// From the IOPS summed over the rounds.
    pub ratios: Vec<Ratio>,
    /// Mean of the ratios per op over patterns and pollings.
    pub read_ratio_mean: Option<f64>,
    pub write_ratio_mean: Option<f64>,
    pub interrupted: bool,
}

/// One configuration of one workload, its rounds summed.
#[derive(Debug, Clone)]
pub struct Row {
    pub op: Op,
    pub pattern: Pattern,
    pub config: MergeConfig,
    pub result: MergeJobResult,
}

/// What the study tells its caller as it goes.
pub enum MergeProgress<'a> {
    /// A run is about to start.
    Starting { op: Op, pattern: Pattern, config: &'a MergeConfig, round: u32 },
    /// A run finished (the CLI streams its record).
    Finished { op: Op, pattern: Pattern, config: &'a MergeConfig, round: u32, result: &'a MergeJobResult },
}

/// What the study measured; `interrupted` when `stop` cut it short (the rows hold the
/// runs finished before).
#[derive(Debug)]
pub struct MergeOutcome {
    pub configs: Vec<MergeConfig>,
    pub rows: Vec<Row>,
    pub interrupted: bool,
}

/// Runs the plan (validated first). Stops between runs when `stop` is set.
pub fn run(
    plan: &MergePlan,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(MergeProgress),
) -> Result<MergeOutcome, Error> {
    let (spec, span) = plan.prepare()?;
    let configs = plan.configs();
    let stopped = || stop.load(Ordering::Relaxed);
    let mut rows = Vec::new();
    'outer: for &op in &plan.ops {
        for &pattern in &plan.patterns {
            let mut by_config: Vec<Vec<MergeJobResult>> = vec![Vec::new(); configs.len()];
            let schedule =
                (0..plan.rounds).flat_map(|round| configs.iter().enumerate().map(move |(ci, c)| (round, ci, c)));
            for (round, ci, config) in schedule {
                if stopped() {
                    break;
                }
                progress(MergeProgress::Starting { op, pattern, config, round });
                let dev = MergeDevice::new(&spec, *config)?;
                let result = run_merge_job(&dev, &plan.job(op, pattern, span), stop)?;
                progress(MergeProgress::Finished { op, pattern, config, round, result: &result });
                by_config[ci].push(result);
            }
            for (c, results) in configs.iter().zip(&by_config) {
                if let Some(result) = sum_rounds(results) {
                    rows.push(Row { op, pattern, config: *c, result });
                }
            }
            if stopped() {
                break 'outer;
            }
        }
    }
    Ok(MergeOutcome { configs, rows, interrupted: stopped() })
}

/// One result for the rounds of a configuration: counts and times summed (so IOPS, CPU and
/// pages per request are over all rounds), latency percentiles the median of the rounds'.
/// `None` for no rounds.
pub fn sum_rounds(rounds: &[MergeJobResult]) -> Option<MergeJobResult> {
    if rounds.is_empty() {
        return None;
    }
    let sum = |f: fn(&MergeJobResult) -> u64| rounds.iter().map(f).sum::<u64>();
    let median = |f: fn(&MergeJobResult) -> u64| {
        let mut v: Vec<u64> = rounds.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let ios = sum(|r| r.ios);
    let elapsed_ns = sum(|r| r.elapsed_ns).max(1);
    let cpu_ns = sum(|r| r.cpu_ns);
    let device_requests = sum(|r| r.device_requests);
    let pages = sum(|r| r.pages);
    let errors: Vec<f64> = rounds.iter().filter_map(|r| r.prediction_error_ns_mean).collect();
    let mut waits = std::collections::BTreeMap::new();
    for (name, n) in rounds.iter().flat_map(|r| r.waits.iter()) {
        *waits.entry(*name).or_insert(0) += n;
    }
    let mut reasons = std::collections::BTreeMap::new();
    for (name, n) in rounds.iter().flat_map(|r| r.reasons.iter()) {
        *reasons.entry(*name).or_insert(0) += n;
    }
    Some(MergeJobResult {
        ios,
        elapsed_ns,
        iops: ios as f64 * 1e9 / elapsed_ns as f64,
        latency_ns_p50: median(|r| r.latency_ns_p50),
        latency_ns_p99: median(|r| r.latency_ns_p99),
        latency_ns_mean: rounds.iter().map(|r| r.latency_ns_mean * r.ios as f64).sum::<f64>() / ios.max(1) as f64,
        cpu_ns,
        cpu_pct: cpu_ns as f64 * 100.0 / elapsed_ns as f64,
        device_requests,
        pages,
        pages_per_request_mean: if device_requests > 0 { pages as f64 / device_requests as f64 } else { 0.0 },
        releases: sum(|r| r.releases),
        polls: sum(|r| r.polls),
        sleeps: sum(|r| r.sleeps),
        leader_turns: sum(|r| r.leader_turns),
        prediction_error_ns_mean: (!errors.is_empty()).then(|| errors.iter().sum::<f64>() / errors.len() as f64),
        waits,
        reasons,
        interrupted: rounds.iter().any(|r| r.interrupted),
    })
}

/// The serialized row that a pipelined row of `rows` compares with: same workload and
/// polling, merge on, post-I/O work serialized.
pub fn serialized_of<'a>(rows: &'a [Row], r: &Row) -> Option<&'a Row> {
    rows.iter().find(|s| {
        s.op == r.op
            && s.pattern == r.pattern
            && s.config.merge
            && !s.config.pipelined
            && s.config.strategy == r.config.strategy
    })
}

/// Pipelined over serialized IOPS for every pipelined row that has its serialized row.
pub fn ratios(rows: &[Row]) -> Vec<Ratio> {
    rows.iter()
        .filter(|r| r.config.merge && r.config.pipelined)
        .filter_map(|r| {
            let s = serialized_of(rows, r)?;
            Some(Ratio {
                op: r.op.name(),
                pattern: r.pattern.name(),
                polling: r.config.wait_name(),
                pipelined_over_serialized_iops: r.result.iops / s.result.iops.max(1e-9),
            })
        })
        .collect()
}

/// The mean ratio of one op over patterns and pollings.
pub fn ratio_mean(ratios: &[Ratio], op: Op) -> Option<f64> {
    let v: Vec<f64> = ratios.iter().filter(|r| r.op == op.name()).map(|r| r.pipelined_over_serialized_iops).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The `merge_summary` record of an outcome.
pub fn summary(target: &str, rounds: u32, outcome: &MergeOutcome) -> MergeSummary {
    let ratios = ratios(&outcome.rows);
    MergeSummary {
        record_type: "merge_summary",
        target: target.to_string(),
        rounds,
        read_ratio_mean: ratio_mean(&ratios, Op::Read),
        write_ratio_mean: ratio_mean(&ratios, Op::Write),
        ratios,
        interrupted: outcome.interrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(ios: u64, elapsed_ns: u64, p50: u64) -> MergeJobResult {
        MergeJobResult {
            ios,
            elapsed_ns,
            iops: ios as f64 * 1e9 / elapsed_ns as f64,
            latency_ns_p50: p50,
            latency_ns_p99: 2 * p50,
            latency_ns_mean: p50 as f64,
            cpu_ns: elapsed_ns / 2,
            cpu_pct: 50.0,
            device_requests: ios / 2,
            pages: ios,
            pages_per_request_mean: 2.0,
            releases: 0,
            polls: ios,
            sleeps: 0,
            leader_turns: 0,
            prediction_error_ns_mean: None,
            waits: Default::default(),
            reasons: Default::default(),
            interrupted: false,
        }
    }

    #[test]
    fn rounds_sum_counts_and_take_the_median_percentile() {
        let s =
            sum_rounds(&[result(100, 1_000_000, 10), result(300, 1_000_000, 30), result(200, 2_000_000, 20)]).unwrap();
        assert_eq!(s.ios, 600);
        assert_eq!(s.elapsed_ns, 4_000_000);
        assert!((s.iops - 150_000.0).abs() < 1e-6);
        assert_eq!(s.latency_ns_p50, 20);
        assert!((s.pages_per_request_mean - 2.0).abs() < 1e-9);
        assert!(sum_rounds(&[]).is_none());
    }

    #[test]
    fn ratios_pair_pipelined_with_serialized_of_the_same_polling() {
        let configs = standard_configs(true, PollParams::DEFAULT);
        assert_eq!(configs.len(), 5);
        let iops_of = |c: &MergeConfig| match (c.merge, c.pipelined, Polling::of(c.strategy).unwrap()) {
            (false, ..) => 50,
            (true, false, Polling::Fixed) => 100,
            (true, true, Polling::Fixed) => 120,
            (true, false, Polling::Dynamic) => 200,
            (true, true, Polling::Dynamic) => 300,
        };
        let rows: Vec<Row> = configs
            .iter()
            .map(|c| Row {
                op: Op::Read,
                pattern: Pattern::Rand,
                config: *c,
                result: result(iops_of(c), 1_000_000_000, 1),
            })
            .collect();
        let r = ratios(&rows);
        assert_eq!(r.len(), 2);
        let fixed = r.iter().find(|x| x.polling == Polling::Fixed.name()).unwrap();
        assert!((fixed.pipelined_over_serialized_iops - 1.2).abs() < 1e-9);
        let dynamic = r.iter().find(|x| x.polling == Polling::Dynamic.name()).unwrap();
        assert!((dynamic.pipelined_over_serialized_iops - 1.5).abs() < 1e-9);
        assert!((ratio_mean(&r, Op::Read).unwrap() - 1.35).abs() < 1e-9);
        assert!(ratio_mean(&r, Op::Write).is_none());
    }

    #[test]
    fn a_plan_is_checked_before_anything_runs() {
        let plan = MergePlan {
            target: "emu:optane,channels=1,size=16m".into(),
            threads: 2,
            duration_ns: 10_000_000,
            ops: vec![Op::Read],
            patterns: vec![Pattern::Rand],
            bs_bytes: 4096,
            merge_pages_max: 32,
            span_bytes: None,
            rounds: 1,
            reference: true,
            poll: PollParams { sampling_ns: 1_000_000, ..PollParams::DEFAULT },
            strategies: paper_strategies(),
        };
        plan.validate().unwrap();
        assert_eq!(plan.runs(), 5);
        for bad in [
            MergePlan { target: "/tmp/x".into(), ..plan.clone() },
            MergePlan { threads: 0, ..plan.clone() },
            MergePlan { rounds: 0, ..plan.clone() },
            MergePlan { strategies: Vec::new(), ..plan.clone() },
            MergePlan { merge_pages_max: MERGE_PAGES_MAX + 1, ..plan.clone() },
        ] {
            assert_eq!(bad.validate().unwrap_err().kind, ErrorKind::Usage);
        }
        // A stop flag set before the start runs nothing and says so.
        let stop = AtomicBool::new(true);
        let out = run(&plan, &stop, &mut |_| panic!("no run may start")).unwrap();
        assert!(out.rows.is_empty() && out.interrupted);
    }
}
