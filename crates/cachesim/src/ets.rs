//! The elastic-time-slicing study (Jammula et al., seeds/003) and its metrics.
//!
//! The study runs every task of the suite once per uniform slice (UTS; 2.5 and 10 ms always,
//! 5 ms by default for Fig. 3, any list of slices on request) and once with ETS (Table I),
//! each time as the paper's "application of interest" whose co-runners keep 2.5 ms slices,
//! and derives per task: the CPI of every uniform slice normalised to UTS-10 (Fig. 3), IPC
//! normalised to UTS-2.5 (Fig. 6a),
//! the slices ETS gave (Fig. 6b), the latency between consecutive schedules of a co-runner
//! (Fig. 8) and the error of the 1/16-sampled estimate against the exact count (Fig. 9). A
//! sweep then counts CS misses per LLC size (1, 2, 4 MiB) and policy (Sec. VI) under
//! UTS-2.5 with a quarter of the instructions. The model is [`crate::sched`]; the
//! interpretation is in docs/cachesim-ets.md.
//!
//! Typed plan in ([`EtsPlan`]), typed records out ([`TaskRecord`], [`SweepRecord`],
//! [`SummaryRecord`]), a progress callback and a stop flag. Non-goals: printing and plots
//! (the CLI), and the wall clock (the caller times the run and hands `wall_ns` in).

use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use crate::geometry::Geometry;
use crate::hierarchy::HierarchyConfig;
use crate::policy::PolicyKind;
use crate::sched::{
    cycles_to_ns, mean_std, round_robin_latencies, run_jobs, EtsTable, RunConfig, SliceMode, TaskRun, TaskSpec,
    BASE_SLICE_CYCLES,
};
use crate::{Error, ErrorKind, Result};

/// The fewest instructions per task: less is less than one 2.5 ms slice.
pub const INSTRUCTIONS_MIN: u64 = 1_000_000;
/// The uniform slices run unless told otherwise: Fig. 3's 2.5, 5 and 10 ms.
pub const UNIFORM_SLICES_DEFAULT_CYCLES: [u64; 3] = [BASE_SLICE_CYCLES, 2 * BASE_SLICE_CYCLES, 4 * BASE_SLICE_CYCLES];
/// The longest uniform slice accepted: 100 ms.
pub const UNIFORM_SLICE_MAX_CYCLES: u64 = 40 * BASE_SLICE_CYCLES;
/// The LLC sizes of the sweep (16-way, 64-byte lines).
pub const SWEEP_LLC_SIZES_BYTES: [u64; 3] = [1 << 20, 2 << 20, 4 << 20];

/// One uniform slice's result for a task (a point of Fig. 3).
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct UniformPoint {
    pub slice_ms: f64,
    pub ipc: f64,
    /// CPI at this slice over CPI at 10 ms: Fig. 3's slowdown (1 at 10 ms).
    pub cpi_over_uts_10: f64,
    pub schedules: usize,
}

/// One task of the main study.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct TaskRecord {
    pub r#type: &'static str,
    pub task: String,
    pub policy: &'static str,
    pub llc_size_bytes: u64,
    pub instructions: u64,
    pub ipc_uts_2_5: f64,
    pub ipc_uts_10: f64,
    pub ipc_ets: f64,
    pub ets_over_uts_2_5: f64,
    pub uts_10_over_uts_2_5: f64,
    /// (ETS - UTS-10) / UTS-10 in percent; negative means ETS is slower.
    pub ets_vs_uts_10_pct: f64,
    pub schedules_ets: usize,
    pub slices_2_5ms: usize,
    pub slices_5ms: usize,
    pub slices_7_5ms: usize,
    pub slices_10ms: usize,
    pub estimates_ignored: usize,
    pub different_transitions_pct: f64,
    pub cosched_latency_ns_mean_ets: f64,
    pub cosched_latency_ns_std_ets: f64,
    pub cosched_latency_ns_mean_uts_2_5: f64,
    pub cosched_latency_ns_mean_uts_10: f64,
    pub own_latency_ns_mean_ets: f64,
    pub schedules_uts_2_5: usize,
    pub cs_misses_exact: u64,
    pub cs_misses_estimated: u64,
    pub cs_misses_excess: i64,
    pub estimation_error_pct: Option<f64>,
    /// Every uniform slice run, shortest first (Fig. 3).
    pub uniform: Vec<UniformPoint>,
    /// Records the ETS run simulated (for a trace task: the whole trace, unless the
    /// instruction budget ended it first).
    pub records_ets: u64,
}

/// One task at one LLC size and policy of the sweep.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct SweepRecord {
    pub r#type: &'static str,
    pub task: String,
    pub policy: &'static str,
    pub llc_size_bytes: u64,
    pub instructions: u64,
    pub schedules: usize,
    pub ipc: f64,
    pub cs_misses_exact: u64,
    pub cs_misses_estimated: u64,
    pub cs_misses_excess: i64,
    pub cs_misses_exact_per_schedule: f64,
    pub estimation_error_pct: Option<f64>,
}

/// The study's closing figures.
#[derive(Debug, Serialize, Clone, PartialEq)]
pub struct SummaryRecord {
    pub r#type: &'static str,
    pub tasks: usize,
    pub policy: &'static str,
    pub llc_size_bytes: u64,
    pub instructions: u64,
    pub ets_over_uts_10_geomean: f64,
    pub ets_vs_uts_10_pct_worst: f64,
    pub tasks_within_4pct_of_uts_10: usize,
    pub cosched_latency_ns_mean_ets: f64,
    pub cosched_latency_ns_mean_uts_2_5: f64,
    pub cosched_latency_ns_mean_uts_10: f64,
    pub estimation_error_pct_mean: Option<f64>,
    pub estimation_tasks: usize,
    /// Mean estimation error per policy over the sweep at every LLC size.
    pub sweep_error_pct_mean_lru: Option<f64>,
    pub sweep_error_pct_mean_drrip: Option<f64>,
    pub sweep_error_pct_mean_ship: Option<f64>,
    /// Geometric mean over the tasks of CPI / CPI(UTS-10) per uniform slice (Fig. 3).
    pub uniform_cpi_over_uts_10_geomean: Vec<(f64, f64)>,
    pub wall_ns: u64,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct EtsPlan {
    /// At least two (round-robin needs co-runners).
    pub tasks: Vec<TaskSpec>,
    pub policy: PolicyKind,
    /// The main study's LLC (16-way, 64-byte lines).
    pub llc_size_bytes: u64,
    pub instructions: u64,
    /// Sample one set in 2^N for the estimator (4 = 1/16 as in the paper).
    pub sample_shift: u32,
    /// Uniform slices to run besides 2.5 and 10 ms (which always run), in cycles.
    pub extra_slices_cycles: Vec<u64>,
    /// Run the LLC size x policy sweep.
    pub sweep: bool,
    pub threads: usize,
}

/// The task, policy and LLC size of a sweep job.
type SweepKey = (String, PolicyKind, u64);
/// One simulation: a task and how to run it.
type Job = (TaskSpec, RunConfig);

/// What the study measured.
#[derive(Debug, Clone)]
pub struct EtsResults {
    pub tasks: Vec<TaskRecord>,
    pub sweep: Vec<SweepRecord>,
}

fn parameter(detail: String) -> Error {
    Error::new(ErrorKind::Usage, detail)
}

/// A cache shape the LLC size makes impossible: `--llc`'s fault, said so ("--llc: why").
pub(crate) fn llc(e: Error) -> Error {
    Error::with_source(e.kind, "--llc", e)
}

impl EtsPlan {
    /// The main study's hierarchy: Table II with the plan's LLC; checks the whole plan.
    pub fn hierarchy(&self) -> Result<HierarchyConfig> {
        let mut hierarchy = HierarchyConfig::table_ii();
        hierarchy.llc = hierarchy.llc.with_size(self.llc_size_bytes).map_err(llc)?;
        if self.threads == 0 {
            return Err(parameter("--threads must be at least 1".into()));
        }
        if self.tasks.len() < 2 {
            return Err(parameter("--tasks needs at least two tasks for round-robin".into()));
        }
        if self.instructions < INSTRUCTIONS_MIN {
            return Err(parameter(format!(
                "--instructions {} is below the 1M minimum (less than one 2.5 ms slice)",
                self.instructions
            )));
        }
        if let Some(bad) = self
            .extra_slices_cycles
            .iter()
            .find(|&&c| !(BASE_SLICE_CYCLES / 10..=UNIFORM_SLICE_MAX_CYCLES).contains(&c))
        {
            return Err(parameter(format!(
                "--slices: {} ms is outside 0.25 to 100 ms",
                cycles_to_ns(*bad) as f64 / 1e6
            )));
        }
        if hierarchy.llc.sets() >> self.sample_shift < 2 || self.sample_shift > 16 {
            return Err(parameter(format!("--sample-shift {} leaves fewer than two sample sets", self.sample_shift)));
        }
        Ok(hierarchy)
    }

    /// The uniform slices run, in cycles, shortest first: 2.5 and 10 ms and the extra ones.
    pub fn uniform_slices_cycles(&self) -> Vec<u64> {
        let mut v = vec![BASE_SLICE_CYCLES, 4 * BASE_SLICE_CYCLES];
        v.extend(&self.extra_slices_cycles);
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Simulations per task in the main study: ETS and one per uniform slice.
    fn per_task(&self) -> usize {
        1 + self.uniform_slices_cycles().len()
    }

    /// Every simulation: per task ETS then the uniform slices (shortest first), then the
    /// sweep's, with the (task, policy, LLC size) of each sweep job.
    fn jobs(&self) -> Result<(Vec<Job>, Vec<SweepKey>)> {
        let base = RunConfig {
            hierarchy: self.hierarchy()?,
            policy: self.policy,
            instructions: self.instructions,
            mode: SliceMode::Uniform { slice_cycles: BASE_SLICE_CYCLES },
            table: EtsTable::table_i(),
            sample_shift: self.sample_shift,
        };
        let modes: Vec<SliceMode> = std::iter::once(SliceMode::Elastic)
            .chain(self.uniform_slices_cycles().into_iter().map(|slice_cycles| SliceMode::Uniform { slice_cycles }))
            .collect();
        let mut jobs = Vec::new();
        for t in &self.tasks {
            for &mode in &modes {
                jobs.push((t.clone(), RunConfig { mode, ..base.clone() }));
            }
        }
        let mut sweep_keys = Vec::new();
        if self.sweep {
            for &size in &SWEEP_LLC_SIZES_BYTES {
                for policy in PolicyKind::ALL {
                    for t in &self.tasks {
                        let mut hierarchy = HierarchyConfig::table_ii();
                        hierarchy.llc = Geometry::new(size, 16, 64)?;
                        sweep_keys.push((t.name.clone(), policy, size));
                        let instructions = self.instructions / 4;
                        jobs.push((t.clone(), RunConfig { hierarchy, policy, instructions, ..base.clone() }));
                    }
                }
            }
        }
        Ok((jobs, sweep_keys))
    }

    /// How many simulations the study runs (for a progress bar).
    pub fn runs(&self) -> usize {
        self.tasks.len()
            * (self.per_task() + if self.sweep { SWEEP_LLC_SIZES_BYTES.len() * PolicyKind::ALL.len() } else { 0 })
    }
}

/// Runs the study; `on_done` is called after each simulation. A set `stop` makes it an
/// `Interrupted` error: partial simulations would give wrong figures.
pub fn run(plan: &EtsPlan, stop: &AtomicBool, on_done: &(dyn Fn() + Sync)) -> Result<EtsResults> {
    let (jobs, sweep_keys) = plan.jobs()?;
    let runs = run_jobs(&jobs, plan.threads, stop, on_done)?;
    if stop.load(Ordering::Relaxed) {
        return Err(Error::new(ErrorKind::Interrupted, "interrupted; no results printed"));
    }
    let n = plan.tasks.len();
    let k = plan.per_task();
    let slices = plan.uniform_slices_cycles();
    let tasks = plan
        .tasks
        .iter()
        .zip(runs.chunks_exact(k))
        .map(|(t, r)| {
            let uniform: Vec<(u64, &TaskRun)> = slices.iter().copied().zip(&r[1..]).collect();
            task_record(&t.name, plan, n, &r[0], &uniform)
        })
        .collect();
    let sweep =
        sweep_keys.iter().zip(&runs[k * n..]).map(|((task, p, size), r)| sweep_record(task, *p, *size, r)).collect();
    Ok(EtsResults { tasks, sweep })
}

/// Mean, standard deviation of a co-runner's latency and mean of the task's own latency,
/// in ns, when the task of interest runs `slices` among `tasks` tasks.
pub fn latencies_ns(slices: &[u64], tasks: usize) -> (f64, f64, f64) {
    let (co, own) = round_robin_latencies(slices, tasks, BASE_SLICE_CYCLES);
    let (m, s) = mean_std(&co);
    let (om, _) = mean_std(&own);
    (cycles_to_ns(m as u64) as f64, cycles_to_ns(s as u64) as f64, cycles_to_ns(om as u64) as f64)
}

/// A co-runner's latency under UTS-10: the other tasks' 10 ms slices.
pub fn uts_10_latency_ns(tasks: usize) -> f64 {
    cycles_to_ns(4 * BASE_SLICE_CYCLES * (tasks as u64).saturating_sub(1)) as f64
}

/// The metrics of one task from its ETS run and its uniform runs (slice in cycles, run;
/// 2.5 and 10 ms among them) among `tasks` tasks.
///
/// Panics when the 2.5 or 10 ms run is missing ([`EtsPlan::uniform_slices_cycles`] always
/// has them).
pub fn task_record(name: &str, plan: &EtsPlan, tasks: usize, ets: &TaskRun, uniform: &[(u64, &TaskRun)]) -> TaskRecord {
    let at = |slice: u64| uniform.iter().find(|(c, _)| *c == slice).map(|(_, r)| *r).expect("2.5 and 10 ms always run");
    let (uts25, uts10) = (at(BASE_SLICE_CYCLES), at(4 * BASE_SLICE_CYCLES));
    let slices: Vec<u64> = ets.schedules.iter().map(|s| s.cycles).collect();
    let (co_mean, co_std, own_mean) = latencies_ns(&slices, tasks);
    let (u25, _, _) = latencies_ns(&uts25.schedules.iter().map(|s| s.cycles).collect::<Vec<_>>(), tasks);
    let count = |k: u64| ets.schedules.iter().filter(|s| s.slice_cycles == k * BASE_SLICE_CYCLES).count();
    let different = ets.schedules.windows(2).filter(|w| w[0].slice_cycles != w[1].slice_cycles).count();
    TaskRecord {
        r#type: "ets_task",
        task: name.to_string(),
        policy: plan.policy.name(),
        llc_size_bytes: plan.llc_size_bytes,
        instructions: plan.instructions,
        ipc_uts_2_5: uts25.ipc(),
        ipc_uts_10: uts10.ipc(),
        ipc_ets: ets.ipc(),
        ets_over_uts_2_5: ets.ipc() / uts25.ipc(),
        uts_10_over_uts_2_5: uts10.ipc() / uts25.ipc(),
        ets_vs_uts_10_pct: 100.0 * (ets.ipc() / uts10.ipc() - 1.0),
        schedules_ets: ets.schedules.len(),
        slices_2_5ms: count(1),
        slices_5ms: count(2),
        slices_7_5ms: count(3),
        slices_10ms: count(4),
        estimates_ignored: ets.schedules.iter().filter(|s| s.estimate_ignored).count(),
        different_transitions_pct: 100.0 * different as f64 / ets.schedules.len().saturating_sub(1).max(1) as f64,
        cosched_latency_ns_mean_ets: co_mean,
        cosched_latency_ns_std_ets: co_std,
        cosched_latency_ns_mean_uts_2_5: u25,
        cosched_latency_ns_mean_uts_10: uts_10_latency_ns(tasks),
        own_latency_ns_mean_ets: own_mean,
        schedules_uts_2_5: uts25.schedules.len(),
        cs_misses_exact: uts25.cs_misses_exact(),
        cs_misses_estimated: uts25.cs_misses_estimated(),
        cs_misses_excess: uts25.schedules.iter().map(|s| s.cs_misses_excess).sum(),
        estimation_error_pct: uts25.estimation_error().map(|e| 100.0 * e),
        uniform: uniform
            .iter()
            .map(|(c, r)| UniformPoint {
                slice_ms: cycles_to_ns(*c) as f64 / 1e6,
                ipc: r.ipc(),
                cpi_over_uts_10: uts10.ipc() / r.ipc(),
                schedules: r.schedules.len(),
            })
            .collect(),
        records_ets: ets.records,
    }
}

/// The sweep's record of one run.
pub fn sweep_record(task: &str, policy: PolicyKind, llc_size_bytes: u64, r: &TaskRun) -> SweepRecord {
    SweepRecord {
        r#type: "ets_sweep",
        task: task.to_string(),
        policy: policy.name(),
        llc_size_bytes,
        instructions: r.instructions,
        schedules: r.schedules.len(),
        ipc: r.ipc(),
        cs_misses_exact: r.cs_misses_exact(),
        cs_misses_estimated: r.cs_misses_estimated(),
        cs_misses_excess: r.schedules.iter().map(|s| s.cs_misses_excess).sum(),
        cs_misses_exact_per_schedule: r.cs_misses_exact() as f64 / r.schedules.len().max(1) as f64,
        estimation_error_pct: r.estimation_error().map(|e| 100.0 * e),
    }
}

/// The mean of some values; `None` for none.
pub fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    smartcon_util::stats::mean(&values.collect::<Vec<_>>())
}

/// The closing figures of a study's results; `wall_ns` is what the caller measured.
pub fn summary(plan: &EtsPlan, results: &EtsResults, wall_ns: u64) -> SummaryRecord {
    let tasks = &results.tasks;
    let n = tasks.len();
    let sweep_error = |p: PolicyKind| {
        mean(results.sweep.iter().filter(|r| r.policy == p.name()).filter_map(|r| r.estimation_error_pct))
    };
    let log_ratio_sum: f64 = tasks.iter().map(|r| (r.ipc_ets / r.ipc_uts_10).ln()).sum();
    let slices: Vec<f64> = tasks.first().map(|t| t.uniform.iter().map(|p| p.slice_ms).collect()).unwrap_or_default();
    let uniform_geomean = slices
        .iter()
        .enumerate()
        .map(|(i, &ms)| {
            let logs: f64 = tasks.iter().map(|t| t.uniform[i].cpi_over_uts_10.ln()).sum();
            (ms, (logs / n as f64).exp())
        })
        .collect();
    SummaryRecord {
        r#type: "ets_summary",
        tasks: n,
        policy: plan.policy.name(),
        llc_size_bytes: plan.llc_size_bytes,
        instructions: plan.instructions,
        ets_over_uts_10_geomean: (log_ratio_sum / n as f64).exp(),
        ets_vs_uts_10_pct_worst: tasks.iter().map(|r| r.ets_vs_uts_10_pct).fold(f64::INFINITY, f64::min),
        tasks_within_4pct_of_uts_10: tasks.iter().filter(|r| r.ets_vs_uts_10_pct >= -4.0).count(),
        cosched_latency_ns_mean_ets: mean(tasks.iter().map(|r| r.cosched_latency_ns_mean_ets)).unwrap_or(0.0),
        cosched_latency_ns_mean_uts_2_5: mean(tasks.iter().map(|r| r.cosched_latency_ns_mean_uts_2_5)).unwrap_or(0.0),
        cosched_latency_ns_mean_uts_10: uts_10_latency_ns(n),
        estimation_error_pct_mean: mean(tasks.iter().filter_map(|r| r.estimation_error_pct)),
        estimation_tasks: tasks.iter().filter(|r| r.estimation_error_pct.is_some()).count(),
        sweep_error_pct_mean_lru: sweep_error(PolicyKind::Lru),
        sweep_error_pct_mean_drrip: sweep_error(PolicyKind::Drrip),
        sweep_error_pct_mean_ship: sweep_error(PolicyKind::Ship),
        uniform_cpi_over_uts_10_geomean: uniform_geomean,
        wall_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sched::Schedule;

    fn schedule(slice_ms_quarters: u64, cycles: u64, exact: u64, estimated: u64) -> Schedule {
        Schedule {
            slice_cycles: slice_ms_quarters * BASE_SLICE_CYCLES,
            cycles,
            instructions: cycles / 2,
            cs_misses_estimated: estimated,
            cs_misses_exact: exact,
            cs_misses_excess: estimated as i64 - exact as i64,
            divergence: 0.0,
            estimate_ignored: false,
        }
    }

    fn run(instructions: u64, cycles: u64, schedules: Vec<Schedule>) -> TaskRun {
        TaskRun {
            task: "t".into(),
            records: 4 * instructions,
            instructions,
            cycles,
            llc_accesses: 0,
            llc_misses: 0,
            schedules,
        }
    }

    fn plan(tasks: usize) -> EtsPlan {
        EtsPlan {
            tasks: TaskSpec::default_suite().into_iter().take(tasks).collect(),
            policy: PolicyKind::Lru,
            llc_size_bytes: 2 << 20,
            instructions: 1_000_000,
            sample_shift: 4,
            extra_slices_cycles: vec![2 * BASE_SLICE_CYCLES],
            sweep: false,
            threads: 1,
        }
    }

    #[test]
    fn task_metrics_on_synthetic_runs() {
        let p = plan(4);
        let b = BASE_SLICE_CYCLES;
        let uts25 = run(1000, 2000, vec![schedule(1, b, 100, 110), schedule(1, b, 100, 90)]);
        let uts10 = run(1000, 1000, vec![schedule(4, 4 * b, 0, 0)]);
        // ETS: 2.5, 5, 5, 10 ms: two of three transitions differ.
        let ets = run(
            1000,
            1250,
            vec![schedule(1, b, 0, 0), schedule(2, 2 * b, 0, 0), schedule(2, 2 * b, 0, 0), schedule(4, 4 * b, 0, 0)],
        );
        let uts5 = run(1000, 1600, vec![schedule(2, 2 * b, 0, 0)]);
        let uniform = [(b, &uts25), (2 * b, &uts5), (4 * b, &uts10)];
        let r = task_record("x", &p, 4, &ets, &uniform);
        assert_eq!(r.ipc_uts_2_5, 0.5);
        assert_eq!(r.ipc_ets, 0.8);
        assert!((r.ets_over_uts_2_5 - 1.6).abs() < 1e-12);
        assert!((r.uts_10_over_uts_2_5 - 2.0).abs() < 1e-12);
        assert!((r.ets_vs_uts_10_pct - -20.0).abs() < 1e-9);
        assert_eq!((r.slices_2_5ms, r.slices_5ms, r.slices_7_5ms, r.slices_10ms), (1, 2, 0, 1));
        assert!((r.different_transitions_pct - 200.0 / 3.0).abs() < 1e-9);
        assert_eq!((r.cs_misses_exact, r.cs_misses_estimated, r.cs_misses_excess), (200, 200, 0));
        // Three co-runners of 10 ms each at 4 GHz: 30 ms.
        assert_eq!(r.cosched_latency_ns_mean_uts_10, 30e6);
        // Under UTS-2.5 a co-runner waits for the three others' 2.5 ms slices.
        assert!((r.cosched_latency_ns_mean_uts_2_5 - 7.5e6).abs() < 1.0, "{}", r.cosched_latency_ns_mean_uts_2_5);
        // Fig. 3: CPI over CPI(UTS-10) at 2.5, 5 and 10 ms.
        let fig3: Vec<(f64, f64)> = r.uniform.iter().map(|u| (u.slice_ms, u.cpi_over_uts_10)).collect();
        assert_eq!(fig3, vec![(2.5, 2.0), (5.0, 1.6), (10.0, 1.0)]);
        assert_eq!(r.records_ets, 4000);
    }

    #[test]
    fn summary_takes_the_geometric_mean_and_the_worst_task() {
        let p = plan(2);
        let b = BASE_SLICE_CYCLES;
        let base = run(1000, 1000, vec![schedule(1, b, 10, 11)]);
        let faster = run(2000, 1000, vec![schedule(1, b, 10, 11)]);
        let slower = run(500, 1000, vec![schedule(1, b, 10, 11)]);
        let b = BASE_SLICE_CYCLES;
        let half = run(500, 1000, vec![schedule(1, b, 10, 11)]);
        let tasks = vec![
            task_record("a", &p, 2, &faster, &[(b, &base), (4 * b, &base)]),
            task_record("b", &p, 2, &slower, &[(b, &half), (4 * b, &base)]),
        ];
        let sweep = vec![sweep_record("a", PolicyKind::Ship, 1 << 20, &base)];
        let s = summary(&p, &EtsResults { tasks, sweep }, 7);
        assert!((s.ets_over_uts_10_geomean - 1.0).abs() < 1e-12, "sqrt(2 * 0.5)");
        assert!((s.ets_vs_uts_10_pct_worst - -50.0).abs() < 1e-9);
        assert_eq!(s.tasks_within_4pct_of_uts_10, 1);
        assert_eq!(s.estimation_tasks, 2);
        assert!((s.estimation_error_pct_mean.unwrap() - 10.0).abs() < 1e-9);
        assert!(s.sweep_error_pct_mean_lru.is_none());
        assert!((s.sweep_error_pct_mean_ship.unwrap() - 10.0).abs() < 1e-9);
        assert_eq!(s.wall_ns, 7);
        // CPI over UTS-10 at 2.5 ms: 1 for a, 2 for b; geometric mean sqrt(2).
        assert_eq!(s.uniform_cpi_over_uts_10_geomean.len(), 2);
        assert!((s.uniform_cpi_over_uts_10_geomean[0].1 - 2f64.sqrt()).abs() < 1e-12);
        assert!((s.uniform_cpi_over_uts_10_geomean[1].1 - 1.0).abs() < 1e-12);
    }

    fn b() -> u64 {
        BASE_SLICE_CYCLES
    }

    #[test]
    fn a_bad_plan_is_refused_and_a_stop_is_an_error() {
        let refused = |p: EtsPlan, says: &str| {
            let e = p.hierarchy().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Usage, "{e}");
            assert!(e.message.contains(says), "{e} (expected {says:?})");
        };
        refused(plan(1), "--tasks");
        refused(EtsPlan { instructions: 999_999, ..plan(2) }, "--instructions");
        refused(EtsPlan { sample_shift: 17, ..plan(2) }, "--sample-shift");
        assert_eq!(EtsPlan { sweep: true, ..plan(2) }.runs(), 2 * (4 + 9));
        let slices = EtsPlan { extra_slices_cycles: vec![3 * b(), b(), 1], ..plan(2) };
        refused(slices, "--slices");
        // An LLC size the cache cannot take is --llc's fault, and says so.
        let e = EtsPlan { llc_size_bytes: 3 << 20, ..plan(2) }.hierarchy().unwrap_err();
        assert!(e.message.starts_with("--llc: ") && e.message.contains("power of two"), "{e}");
        let slices = EtsPlan { extra_slices_cycles: vec![3 * b(), b()], ..plan(2) };
        assert_eq!(slices.uniform_slices_cycles(), vec![b(), 3 * b(), 4 * b()]);
        let stop = AtomicBool::new(true);
        assert_eq!(super::run(&plan(2), &stop, &|| {}).unwrap_err().kind, ErrorKind::Interrupted);
    }
}
