//! The `bench` matrix: targets x ops x sizes x strategies (and fixed poll intervals), one
//! job per cell, back to back; and what it comes to: smart against the better of block and
//! spin per cell.
//!
//! Non-goals: turns and loads per cell (that is [`crate::evaluate`]); a bench is a quick
//! look, one run per cell.

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::Error;
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::Profile;
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::Target;
use smartcon_engine::wait::PollParams;
use smartcon_util::units::{format_ns, format_size};
use smartcon_util::Op;

use crate::{Event, Progress};

/// The matrix of one bench run.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    pub ops: Vec<Op>,
    pub sizes: Vec<u64>,
    pub pattern: Pattern,
    /// Every run of a cell: a strategy and its polling parameters (a fixed-interval sweep
    /// adds one `poll` run per interval).
    pub configs: Vec<(StrategyChoice, PollParams)>,
    pub threads: u32,
    pub duration_ns: u64,
    pub spin_budget_ns: u64,
}

/// A target of the matrix, opened, with the profile smart uses and where its threads run.
pub struct BenchTarget {
    pub target: Box<dyn Target>,
    pub profile: Profile,
    pub span_bytes: u64,
    pub cpus: Option<Vec<usize>>,
}

impl BenchPlan {
    fn spec(&self, op: Op, bs: u64, (strategy, poll): (StrategyChoice, PollParams), t: &BenchTarget) -> JobSpec {
        let mut js = JobSpec::new(op, self.pattern, bs, strategy);
        js.span_bytes = Some(t.span_bytes);
        js.threads = self.threads;
        js.duration_ns = self.duration_ns;
        js.spin_budget_ns = self.spin_budget_ns;
        js.poll = poll;
        js.cpus = t.cpus.clone();
        js
    }

    /// Checks every cell against the target before anything is measured.
    pub fn validate(&self, t: &BenchTarget) -> Result<(), Error> {
        for &op in &self.ops {
            for &bs in &self.sizes {
                for &config in &self.configs {
                    self.spec(op, bs, config, t).validate(t.target.as_ref())?;
                }
            }
        }
        Ok(())
    }
}

/// Runs the matrix; each record goes to `on_result` as it is measured. Setting `stop`
/// ends the run after the current cell with what was measured.
pub fn run(
    plan: &BenchPlan,
    targets: &[BenchTarget],
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
    on_result: &mut dyn FnMut(&JobResult) -> Result<(), Error>,
) -> Result<Vec<JobResult>, Error> {
    progress(Event::Steps((targets.len() * plan.ops.len() * plan.sizes.len() * plan.configs.len()) as u64));
    let mut results = Vec::new();
    for t in targets {
        for &op in &plan.ops {
            for &bs in &plan.sizes {
                for &config in &plan.configs {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(results);
                    }
                    let what = match config {
                        (StrategyChoice::Fixed(Strategy::FixedPoll), p) => {
                            format!("poll every {}", format_ns(p.interval_ns as f64))
                        }
                        (s, _) => s.name().to_string(),
                    };
                    progress(Event::Starting(&format!(
                        "{} {} {} {what}",
                        t.target.label(),
                        op.name(),
                        format_size(bs)
                    )));
                    let js = plan.spec(op, bs, config, t);
                    let r = run_job(t.target.as_ref(), &js, &t.profile, monitor, stop)?;
                    on_result(&r)?;
                    results.push(r);
                    progress(Event::Done);
                }
            }
        }
    }
    Ok(results)
}

/// The `summary` record of a bench run under one load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    #[serde(rename = "type")]
    pub record_type: &'static str,
    pub cells: usize,
    pub smart_cells: usize,
    /// Cells where smart reached at least 0.97 x the better of block and spin.
    pub smart_within_3pct: usize,
    pub smart_ratio_min: Option<f64>,
    pub load: String,
    pub interrupted: bool,
}

/// The record of the same target, op and size as `r` under `strategy`.
pub fn find<'a>(results: &'a [JobResult], r: &JobResult, strategy: StrategyChoice) -> Option<&'a JobResult> {
    results.iter().find(|x| x.target == r.target && x.op == r.op && x.bs_bytes == r.bs_bytes && x.strategy == strategy)
}

/// smart's IOPS against the better of block and spin, per cell.
pub fn summarize(results: &[JobResult], load: &str, interrupted: bool) -> Summary {
    let (mut smart_cells, mut ok, mut min) = (0, 0, None::<f64>);
    for r in results.iter().filter(|r| r.strategy == StrategyChoice::Smart) {
        let best = [Strategy::Block, Strategy::Spin]
            .iter()
            .filter_map(|s| find(results, r, StrategyChoice::Fixed(*s)))
            .map(|x| x.iops)
            .fold(0.0, f64::max);
        if best > 0.0 {
            let ratio = r.iops / best;
            smart_cells += 1;
            ok += (ratio >= 0.97) as usize;
            min = Some(min.map_or(ratio, |m| m.min(ratio)));
        }
    }
    Summary {
        record_type: "summary",
        cells: results.len(),
        smart_cells,
        smart_within_3pct: ok,
        smart_ratio_min: min,
        load: load.to_string(),
        interrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evaluate::merge::tests::record;

    #[test]
    fn smart_is_compared_with_the_better_fixed_strategy_of_its_cell() {
        let at = |s, iops: f64, bs| {
            let mut r = record(s, &[10_000; 100], (100.0 * 1e9 / iops) as u64, 0.0);
            r.bs_bytes = bs;
            r
        };
        let results = vec![
            at(StrategyChoice::Fixed(Strategy::Block), 1000.0, 4096),
            at(StrategyChoice::Fixed(Strategy::Spin), 2000.0, 4096),
            at(StrategyChoice::Smart, 1900.0, 4096),
            at(StrategyChoice::Fixed(Strategy::Block), 1000.0, 8192),
            at(StrategyChoice::Smart, 900.0, 8192),
        ];
        let s = summarize(&results, "bm-only", false);
        assert_eq!((s.cells, s.smart_cells, s.smart_within_3pct), (5, 2, 0));
        assert!((s.smart_ratio_min.unwrap() - 0.9).abs() < 1e-3, "{s:?}");
    }
}
