//! `smartcon evaluate --study window`: SmartCon Sec. 4.2, the System Monitor's window from
//! 50 to 1,000 ms against noise. The study is `smartcon_study::window`; this module turns
//! flags into its plan and prints its table (markdown) with the host's load average, and
//! writes the report to `--out` as the other studies do: summary.md (the same table) and
//! results.jsonl (the machine, then one `window_row` record per window).

use std::io::Write;

use anyhow::{bail, Result};
use smartcon_study::evaluate::MachineRecord;
use smartcon_study::window::WindowOutcome;

use super::evaluate::EvaluateArgs;
use crate::common::{interrupt_flag, on_event, progress_bar};
use crate::engine_setup::*;
use smartcon_study::window::{self, WindowPlan};

pub fn run(args: &EvaluateArgs) -> Result<()> {
    if args.tiny
        || args.full
        || args.paper_loads
        || args.targets.is_some()
        || args.loads.is_some()
        || args.pieces.is_some()
        || args.slice_reads.is_some()
    {
        bail!("--study window takes only --quick, --cpu-workers and --out");
    }
    let mut plan = WindowPlan::preset(args.quick);
    if let Some(w) = args.cpu_workers {
        plan.workers = w;
    }
    plan.validate().map_err(engine_err)?;
    // Claimed before anything runs, as the other studies' reports are.
    let out = crate::paths::out_dir("--out", &args.out)?;
    let started = std::time::Instant::now();
    let bar = progress_bar(0, "window");
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let o = window::run(&plan, interrupt_flag(), &mut on_event(&bar)).map_err(engine_err)?;
    bar.finish_and_clear();
    let table = table_md(&plan, &o, &loadavg);
    // The results reach the terminal before the report is written: a full disk loses nothing.
    print!("{table}");
    let write_report = || -> Result<()> {
        let mut jsonl = std::io::BufWriter::new(std::fs::File::create(out.dir().join("results.jsonl"))?);
        serde_json::to_writer(&mut jsonl, &MachineRecord::here())?;
        jsonl.write_all(b"\n")?;
        for r in &o.rows {
            let record = serde_json::json!({
                "type": "window_row",
                "window_ns": r.window_ns,
                "steady": r.steady,
                "mean_abs_err_pp": r.mean_abs_err_pp,
                "spread_pp": r.spread_pp,
                "wrong_side_pct": r.wrong_side_pct,
                "lag_ms_median": r.lag_ms_median,
                "idle_truth_pct": o.idle_truth_pct,
                "loaded_truth_pct": o.loaded_truth_pct,
            });
            serde_json::to_writer(&mut jsonl, &record)?;
            jsonl.write_all(b"\n")?;
        }
        jsonl.flush()?;
        std::fs::write(out.dir().join("summary.md"), &table)?;
        Ok(())
    };
    write_report().map_err(|e| out.wrap(&format!("cannot write the report: {e:#}")))?;
    let dir = out.commit()?;
    let secs = started.elapsed().as_secs_f64();
    println!("report: {} (results.jsonl, summary.md) in {secs:.0} s", dir.display());
    Ok(())
}

/// The study's table (markdown) with the host's load average and the truth it measured.
fn table_md(plan: &WindowPlan, o: &WindowOutcome, loadavg: &str) -> String {
    let mut s = format!(
        "System Monitor window against noise: {} cycles of {:.1} s without and with {} cruncher(s), \
         readings every {} ms after {:.1} s of each phase; {} CPUs; load average before: {}\n",
        plan.cycles,
        plan.phase_ns as f64 / 1e9,
        plan.workers,
        plan.sample_ns / 1_000_000,
        plan.settle_ns as f64 / 1e9,
        smartcon_engine::profile::online_cpus(),
        loadavg.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
    );
    s += &format!(
        "truth (/proc/stat over each phase's steady part): without {:.1}%, with {:.1}% (phases: {})\n",
        o.idle_truth_pct,
        o.loaded_truth_pct,
        o.phases.iter().map(|p| format!("{:.0}", p.truth_pct)).collect::<Vec<_>>().join(" ")
    );
    if o.loaded_truth_pct - o.idle_truth_pct < window::CONTRAST_MIN_PP {
        s += &format!(
            "(the crunchers raised the machine's utilization by {:.1} points only: other processes kept it busy, \
             so every window reads the same and the table says nothing about the window; run it with idle CPU)\n",
            o.loaded_truth_pct - o.idle_truth_pct
        );
    }
    s += "\n";
    s += "| window | readings | mean error (pp) | spread in a phase (pp) | wrong side of the midpoint | lag after a step (median) |\n";
    s += "|---|---|---|---|---|---|\n";
    for r in &o.rows {
        s += &format!(
            "| {} ms | {} | {:.1} | {:.1} | {:.1}% | {} |\n",
            r.window_ns / 1_000_000,
            r.steady,
            r.mean_abs_err_pp,
            r.spread_pp,
            r.wrong_side_pct,
            r.lag_ms_median.map_or("-".to_string(), |l| format!("{l:.0} ms"))
        );
    }
    s
}
