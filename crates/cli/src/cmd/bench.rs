//! `smartcon bench`: the matrix targets x ops x sizes x strategies, each strategy's gain
//! against `block` (the mainstream path), and a check of SmartCon against the better of
//! block and spin in every cell.
//!
//! Strategies of one cell run back to back, so slow drift of a shared machine affects them
//! alike; gains are ratios within one run.
//!
//! The matrix itself is `smartcon_study::bench`; this module parses flags and renders.
//!
//! Polling (Shin et al., dynamic interval polling): `--sweep-interval` adds fixed-interval polling at each interval to
//! every cell and reports the best interval (paper 002, Fig. 1; `--plot` draws the curve);
//! with `hybrid` and `spin` in a cell, a check line gives hybrid's IOPS and CPU against
//! spin's and block's and its prediction error. `--load cpu-intensive` runs number
//! crunchers on every core meanwhile (SmartCon Sec. 7.1).

use anyhow::{bail, Result};
use clap::Args;
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error as EngineError, ErrorKind};
use smartcon_engine::job::{Pattern, StrategyChoice};
use smartcon_engine::profile::online_cpus;
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::{self, OpenOptions};
use smartcon_engine::wait::PollParams;
use smartcon_engine::Op;
use smartcon_study::bench::{BenchPlan, BenchTarget};
use smartcon_workloads::load::CpuLoad;

use crate::common::{emit_json, interrupt_flag, interrupted, on_event, progress_bar};
use crate::engine_setup::*;
use smartcon_report::polling::{hybrid_checks, plot_sweeps, render_polling, sweeps};

pub const DEFAULT_TARGETS: &str = "emu:nvram,emu:optane,emu:nvme,emu:sata-ssd,emu:hdd";

#[derive(Args, Debug)]
pub struct BenchArgs {
    /// Comma-separated targets (files, block devices, tmp:SIZE, emu:PRESET...).
    #[arg(long, default_value = DEFAULT_TARGETS)]
    pub targets: String,
    /// Comma-separated request sizes.
    #[arg(long, value_delimiter = ',', value_parser = size_value, default_value = "4k,16k,64k,256k")]
    pub sizes: Vec<u64>,
    /// Comma-separated ops.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| parse_op(s).map_err(|e| e.to_string()), default_value = "read,write")]
    pub ops: Vec<Op>,
    /// Comma-separated strategies; block is always run as the baseline. block, spin, sync,
    /// smart, hybrid, smart-hybrid, dip, poll, half-mean, iopoll-hybrid, pas
    /// (docs/hybrid.md).
    #[arg(long, value_delimiter = ',', value_parser = strategy_value, default_value = "block,spin,sync,smart")]
    pub strategies: Vec<StrategyChoice>,
    /// seq or rand.
    #[arg(long, value_parser = |s: &str| parse_pattern(s).map_err(|e| e.to_string()), default_value = "rand")]
    pub pattern: Pattern,
    /// Time per cell.
    #[arg(long, value_parser = duration_value, default_value = "300ms")]
    pub duration: u64,
    /// I/O threads per cell.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// The region used on each target (default: 64 MiB, or the target if smaller).
    #[arg(long)]
    pub span: Option<String>,
    /// Also poll at fixed intervals, one run per interval (e.g. 250ns,500ns,1us,2us,4us),
    /// and report the best (paper 002, Fig. 1).
    #[arg(long)]
    pub sweep_interval: Option<String>,
    /// With --sweep-interval: draw latency against the interval to this SVG file (a new file).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    pub plot: Option<std::path::PathBuf>,
    /// bm-only, or cpu-intensive (a number cruncher per core runs meanwhile).
    #[arg(long, default_value = "bm-only")]
    pub load: String,
    /// JSON Lines output: one "result" record per cell and one "summary" record.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub run: RunFlags,
}

pub fn run(args: BenchArgs) -> Result<()> {
    // Claimed before anything is parsed further or measured: a refusal costs nothing.
    let plot_out = crate::paths::out_file("--plot", args.plot.as_deref())?;
    let targets = split_targets(&args.targets)?;
    let (sizes, ops, pattern, duration_ns) = (args.sizes.clone(), args.ops.clone(), args.pattern, args.duration);
    let mut strategies = args.strategies.clone();
    if !strategies.contains(&StrategyChoice::Fixed(Strategy::Block)) {
        strategies.insert(0, StrategyChoice::Fixed(Strategy::Block));
    }
    let poll = args.run.poll_params()?;
    // Every run of a cell: a strategy and its polling parameters.
    let mut configs: Vec<(StrategyChoice, PollParams)> = strategies.iter().map(|&s| (s, poll)).collect();
    if let Some(list) = &args.sweep_interval {
        for item in split_list("sweep-interval", list)? {
            let interval_ns = parse_duration_arg("sweep-interval", &item)?;
            configs.push((StrategyChoice::Fixed(Strategy::FixedPoll), PollParams { interval_ns, ..poll }));
        }
    } else if args.plot.is_some() {
        bail!("--plot draws the interval sweep; give --sweep-interval too");
    }
    let cpu_load_workers = match args.load.as_str() {
        "bm-only" => 0,
        "cpu-intensive" => online_cpus(),
        other => bail!("unknown load {other:?}; use bm-only or cpu-intensive"),
    };
    let spin_budget_ns = args.run.spin_budget_ns()?;
    let span = args.span.as_deref().map(|s| parse_size_arg("span", s)).transpose()?;
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let plan = BenchPlan { ops, sizes, pattern, configs, threads: args.threads, duration_ns, spin_budget_ns };
    // Open (and validate) every target before measuring anything.
    let placement = args.run.placement()?;
    let mut opened = Vec::new();
    for t in &targets {
        let spec = target::parse_target(t).map_err(engine_err)?;
        let write = plan.ops.contains(&Op::Write);
        let options = OpenOptions { write, destructive: args.run.destructive, created_by_tool: false };
        let target = target::open(&spec, options).map_err(engine_err)?;
        for w in target.warnings() {
            eprintln!("smartcon: warning: {w}");
        }
        let quiet = !strategies.iter().any(|s| s.name().starts_with("smart"));
        let profile = resolve_profile(target.as_ref(), None, quiet)?;
        let cpus = io_cpus_for(&placement, target.as_ref());
        let span_bytes = span.unwrap_or(64 << 20).min(target.capacity_bytes());
        let t = BenchTarget { target, profile, span_bytes, cpus };
        plan.validate(&t).map_err(engine_err)?;
        opened.push(t);
    }
    let monitor = args.run.monitor()?;
    let cpu_load = (cpu_load_workers > 0).then(|| CpuLoad::start(cpu_load_workers)).transpose().map_err(engine_err)?;
    let bar = progress_bar(0, "bench");
    let json = args.json;
    let mut emit = |r: &JobResult| {
        if json {
            emit_json(r).map_err(|e| EngineError::new(ErrorKind::Io, format!("stdout: {e}")))?;
        }
        Ok(())
    };
    let results =
        smartcon_study::bench::run(&plan, &opened, &monitor, interrupt_flag(), &mut on_event(&bar), &mut emit);
    bar.finish_and_clear();
    drop(cpu_load);
    monitor.stop();
    let results = results.map_err(engine_err)?;
    let summary = smartcon_study::bench::summarize(&results, &args.load, interrupted());
    let sweeps = if args.sweep_interval.is_some() { sweeps(&results) } else { Vec::new() };
    let checks = hybrid_checks(&results, &args.load);
    if args.json {
        for r in &sweeps {
            emit_json(r)?;
        }
        for r in &checks {
            emit_json(r)?;
        }
        emit_json(&summary)?;
    } else {
        print!(
            "{}",
            smartcon_report::bench::render(
                &results,
                &opened.iter().map(|t| (t.target.label().to_string(), t.profile.clone())).collect::<Vec<_>>()
            )
        );
        if let Some(min) = summary.smart_ratio_min {
            println!(
                "\nsmart reached >= 0.97 x the better of block and spin in {} of {} cells (lowest ratio {:.3}).",
                summary.smart_within_3pct, summary.smart_cells, min
            );
        }
        print!("{}", render_polling(&sweeps, &checks));
        if summary.interrupted {
            println!("(interrupted: the table shows the cells measured so far)");
        }
    }
    // Drawn after the results are printed, so a plot that cannot be written loses nothing.
    if let (Some(out), false) = (crate::paths::unless_interrupted(plot_out), sweeps.is_empty()) {
        plot_sweeps(out.tmp_path(), &sweeps).map_err(|e| out.wrap(&e))?;
        let path = out.commit()?;
        if !args.json {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}
