//! `smartcon bench`: the matrix targets x ops x sizes x strategies, each strategy's gain
//! against `block` (the mainstream path), and a check of SmartCon against the better of
//! block and spin in every cell.
//!
//! Strategies of one cell run back to back, so slow drift of a shared machine affects them
//! alike; gains are ratios within one run.

use anyhow::{bail, Result};
use clap::Args;
use smartcon_engine::devemu::units::{format_ns, format_size};
use smartcon_engine::job::{run_job, JobSpec, StrategyChoice};
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::{self, OpenOptions};
use smartcon_engine::Op;

use crate::common::{emit_json, interrupt_flag, interrupted, progress_bar};
use crate::engine_setup::*;
use crate::printers::iops;
use crate::table::Table;

pub const DEFAULT_TARGETS: &str = "emu:nvram,emu:optane,emu:nvme,emu:sata-ssd,emu:hdd";

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Comma-separated targets (files, block devices, tmp:SIZE, emu:PRESET...).
    #[arg(long, default_value = DEFAULT_TARGETS)]
    pub targets: String,
    /// Comma-separated request sizes.
    #[arg(long, default_value = "4k,16k,64k,256k")]
    pub sizes: String,
    /// Comma-separated ops.
    #[arg(long, default_value = "read,write")]
    pub ops: String,
    /// Comma-separated strategies; block is always run as the baseline.
    #[arg(long, default_value = "block,spin,sync,smart")]
    pub strategies: String,
    /// seq or rand.
    #[arg(long, default_value = "rand")]
    pub pattern: String,
    /// Time per cell.
    #[arg(long, default_value = "300ms")]
    pub duration: String,
    /// I/O threads per cell.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// The region used on each target (default: 64 MiB, or the target if smaller).
    #[arg(long)]
    pub span: Option<String>,
    /// JSON Lines output: one "result" record per cell and one "summary" record.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run: RunFlags,
}

#[derive(serde::Serialize)]
struct Summary {
    #[serde(rename = "type")]
    record_type: &'static str,
    cells: usize,
    smart_cells: usize,
    /// Cells where smart reached at least 0.97 x the better of block and spin.
    smart_within_3pct: usize,
    smart_ratio_min: Option<f64>,
    interrupted: bool,
}

pub fn run(args: BenchArgs) -> Result<()> {
    let targets = split_list("targets", &args.targets)?;
    let sizes: Vec<u64> = split_list("sizes", &args.sizes)?.iter().map(|s| parse_size_arg("sizes", s)).collect::<Result<_>>()?;
    let ops: Vec<Op> = split_list("ops", &args.ops)?.iter().map(|s| parse_op(s)).collect::<Result<_>>()?;
    let mut strategies: Vec<StrategyChoice> =
        split_list("strategies", &args.strategies)?.iter().map(|s| parse_strategy(s)).collect::<Result<_>>()?;
    if !strategies.iter().any(|s| s.name() == "block") {
        strategies.insert(0, parse_strategy("block")?);
    }
    let pattern = parse_pattern(&args.pattern)?;
    let duration_ns = parse_duration_arg("duration", &args.duration)?;
    let spin_budget_ns = args.run.spin_budget_ns()?;
    let poll = args.run.poll_params()?;
    let span = args.span.as_deref().map(|s| parse_size_arg("span", s)).transpose()?;
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    // Open (and validate) every target before measuring anything.
    let writes = ops.contains(&Op::Write);
    let mut opened = Vec::new();
    for t in &targets {
        let spec = target::parse_target(t).map_err(engine_err)?;
        let options = OpenOptions { write: writes, destructive: args.run.destructive, created_by_tool: false };
        let target = target::open(&spec, options).map_err(engine_err)?;
        for w in target.warnings() {
            eprintln!("smartcon: warning: {w}");
        }
        let span_t = span.unwrap_or(64 << 20).min(target.capacity_bytes());
        for &bs in &sizes {
            let mut js = JobSpec::new(Op::Read, pattern, bs, strategies[0]);
            js.span_bytes = Some(span_t);
            js.threads = args.threads;
            js.duration_ns = duration_ns;
            js.poll = poll;
            js.strategy = *strategies.iter().find(|s| s.polls()).unwrap_or(&strategies[0]);
            js.validate(target.as_ref()).map_err(engine_err)?;
        }
        let profile = resolve_profile(target.as_ref(), None, !strategies.iter().any(|s| s.name().starts_with("smart")))?;
        opened.push((target, profile, span_t));
    }
    let monitor = args.run.monitor()?;
    let cells = opened.len() * ops.len() * sizes.len() * strategies.len();
    let bar = progress_bar(cells as u64, "bench");
    let mut results: Vec<JobResult> = Vec::new();
    'outer: for (target, profile, span_t) in &opened {
        for &op in &ops {
            for &bs in &sizes {
                for &strategy in &strategies {
                    if interrupted() {
                        break 'outer;
                    }
                    bar.set_message(format!("{} {} {} {}", target.label(), op.name(), format_size(bs), strategy.name()));
                    let mut js = JobSpec::new(op, pattern, bs, strategy);
                    js.span_bytes = Some(*span_t);
                    js.threads = args.threads;
                    js.duration_ns = duration_ns;
                    js.spin_budget_ns = spin_budget_ns;
                    js.poll = poll;
                    let r = run_job(target.as_ref(), &js, profile, &monitor, interrupt_flag()).map_err(engine_err)?;
                    if args.json {
                        emit_json(&r)?;
                    }
                    results.push(r);
                    bar.inc(1);
                }
            }
        }
    }
    bar.finish_and_clear();
    monitor.stop();
    let summary = summarize(&results, interrupted());
    if args.json {
        emit_json(&summary)?;
    } else {
        print!("{}", render(&results, &opened.iter().map(|(t, p, _)| (t.label().to_string(), p.clone())).collect::<Vec<_>>()));
        if let Some(min) = summary.smart_ratio_min {
            println!(
                "\nsmart reached >= 0.97 x the better of block and spin in {} of {} cells (lowest ratio {:.3}).",
                summary.smart_within_3pct, summary.smart_cells, min
            );
        }
        if summary.interrupted {
            println!("(interrupted: the table shows the cells measured so far)");
        }
    }
    Ok(())
}

fn find<'a>(results: &'a [JobResult], r: &JobResult, strategy: &str) -> Option<&'a JobResult> {
    results.iter().find(|x| x.target == r.target && x.op == r.op && x.bs_bytes == r.bs_bytes && x.strategy == strategy)
}

fn summarize(results: &[JobResult], interrupted: bool) -> Summary {
    let mut smart_cells = 0;
    let mut ok = 0;
    let mut min: Option<f64> = None;
    for r in results.iter().filter(|r| r.strategy == "smart") {
        let best = ["block", "spin"].iter().filter_map(|s| find(results, r, s)).map(|x| x.iops).fold(0.0, f64::max);
        if best > 0.0 {
            let ratio = r.iops / best;
            smart_cells += 1;
            ok += (ratio >= 0.97) as usize;
            min = Some(min.map_or(ratio, |m: f64| m.min(ratio)));
        }
    }
    Summary { record_type: "summary", cells: results.len(), smart_cells, smart_within_3pct: ok, smart_ratio_min: min, interrupted }
}

fn render(results: &[JobResult], profiles: &[(String, smartcon_engine::profile::Profile)]) -> String {
    let mut t = Table::new(&["target", "op", "size", "strategy", "IOPS", "gain", "p50", "p99", "CPU", "csw/IO", "decisions"]);
    for r in results {
        let gain = find(results, r, "block").filter(|b| b.iops > 0.0).map(|b| format!("{:.2}x", r.iops / b.iops));
        let csw = if r.ios > 0 { (r.ctx_voluntary + r.ctx_involuntary) as f64 / r.ios as f64 } else { 0.0 };
        t.row(vec![
            r.target.clone(),
            r.op.to_string(),
            format_size(r.bs_bytes),
            r.strategy.to_string(),
            iops(r.iops),
            gain.unwrap_or_else(|| "-".into()),
            format_ns(r.lat_ns_p50 as f64),
            format_ns(r.lat_ns_p99 as f64),
            format!("{:.0}%", r.cpu_user_pct + r.cpu_sys_pct),
            format!("{csw:.2}"),
            if r.strategy == "smart" { crate::printers::decisions(r) } else { String::new() },
        ]);
    }
    let mut out = t.render();
    out += "\ngain = IOPS / block's IOPS in the same cell; CPU = I/O thread's CPU time, % of one CPU; csw/IO = context switches per I/O.\n";
    out += "profiles used by smart:\n";
    for (label, p) in profiles {
        out += &format!(
            "  {label}: class {}, size threshold {}, CPU threshold {}%, Q={} ({})\n",
            p.class.name(),
            format_size(p.size_threshold_bytes),
            p.cpu_threshold_pct,
            p.queue_limit,
            p.source
        );
    }
    out
}
