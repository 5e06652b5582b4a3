//! `smartcon evaluate --study window`: SmartCon Sec. 4.2, the System Monitor's window from
//! 50 to 1,000 ms against noise. The study is `smartcon_study::window`; this module turns
//! flags into its plan and prints its table (markdown) with the host's load average.

use anyhow::{bail, Result};

use super::evaluate::EvaluateArgs;
use crate::common::{interrupt_flag, on_event, progress_bar};
use crate::engine_setup::*;
use smartcon_study::window::{self, WindowPlan};

pub fn run(args: &EvaluateArgs) -> Result<()> {
    if args.tiny || args.full || args.paper_loads || args.targets.is_some() || args.loads.is_some() {
        bail!("--study window takes only --quick and --cpu-workers");
    }
    let mut plan = WindowPlan::preset(args.quick);
    if let Some(w) = args.cpu_workers {
        plan.workers = w;
    }
    plan.validate().map_err(engine_err)?;
    let bar = progress_bar(0, "window");
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let o = window::run(&plan, interrupt_flag(), &mut on_event(&bar)).map_err(engine_err)?;
    bar.finish_and_clear();
    println!(
        "System Monitor window against noise: {} cycles of {:.1} s without and with {} cruncher(s), \
         readings every {} ms after {:.1} s of each phase; {} CPUs; load average before: {}",
        plan.cycles,
        plan.phase_ns as f64 / 1e9,
        plan.workers,
        plan.sample_ns / 1_000_000,
        plan.settle_ns as f64 / 1e9,
        smartcon_engine::profile::online_cpus(),
        loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    println!(
        "truth (/proc/stat over each phase's steady part): without {:.1}%, with {:.1}% (phases: {})",
        o.idle_truth_pct,
        o.loaded_truth_pct,
        o.phases.iter().map(|p| format!("{:.0}", p.truth_pct)).collect::<Vec<_>>().join(" ")
    );
    if o.loaded_truth_pct - o.idle_truth_pct < window::CONTRAST_MIN_PP {
        println!(
            "(the crunchers raised the machine's utilization by {:.1} points only: other processes kept it busy, \
             so every window reads the same and the table says nothing about the window; run it with idle CPU)",
            o.loaded_truth_pct - o.idle_truth_pct
        );
    }
    println!();
    println!("| window | readings | mean error (pp) | spread in a phase (pp) | wrong side of the midpoint | lag after a step (median) |");
    println!("|---|---|---|---|---|---|");
    for r in &o.rows {
        println!(
            "| {} ms | {} | {:.1} | {:.1} | {:.1}% | {} |",
            r.window_ns / 1_000_000,
            r.steady,
            r.mean_abs_err_pp,
            r.spread_pp,
            r.wrong_side_pct,
            r.lag_ms_median.map_or("-".to_string(), |l| format!("{l:.0} ms"))
        );
    }
    Ok(())
}
