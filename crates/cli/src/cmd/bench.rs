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

use anyhow::{bail, Context, Result};
use clap::Args;
use smartcon_emutarget::sim::{self, SimConfig};
use smartcon_emutarget::target::TargetSpec;
use smartcon_emutarget::target::{self, OpenOptions};
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error as EngineError, ErrorKind};
use smartcon_engine::host::{HostModel, HOST_MODEL_FILE, PRESETS};
use smartcon_engine::job::{JobSpec, Pattern, StrategyChoice};
use smartcon_engine::profile::online_cpus;
use smartcon_engine::profile::Profile;
use smartcon_engine::stats::JobResult;
use smartcon_engine::wait::PollParams;
use smartcon_study::bench::{BenchPlan, BenchTarget};
use smartcon_util::Op;
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
    #[arg(long, value_delimiter = ',', value_parser = io_size_value, default_value = "4k,16k,64k,256k")]
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
    /// Run the matrix in the seeded simulation instead (docs/simulate.md): the engine's own
    /// port, decision and waits with devemu on a virtual clock, on a modelled host. Emulated
    /// targets only; the records are a real bench's, with a "simulated" field.
    #[arg(long)]
    pub simulate: bool,
    /// With --simulate: the seed (the same seed gives the same records).
    #[arg(long, default_value_t = 1, requires = "simulate")]
    pub seed: u64,
    /// With --simulate: virtual CPUs (default: the host model's).
    #[arg(long, requires = "simulate")]
    pub cores: Option<u32>,
    /// With --simulate or --compare-simulated: the host model, a preset (host-a, host-b,
    /// host-c, host-d, bare-metal, noisy-cloud), `measured` ($SMARTCON_HOME/host.json, from
    /// `smartcon host`) or a host.json file. Default: measured where it exists, else host-c
    /// (--compare-simulated: measured).
    #[arg(long, value_name = "FILE|PRESET")]
    pub host: Option<String>,
    /// Measure the matrix, then simulate the same cells on this machine's host model
    /// (`--host`, default `measured`: $SMARTCON_HOME/host.json; seed 1) and print predicted
    /// against measured, with the largest miss (issue 27's calibration); where a cell has
    /// spin and hybrid, hybrid against spin measured, simulated and by the oracle for that
    /// host. Emulated targets only.
    #[arg(long, conflicts_with_all = ["simulate", "sweep_interval"])]
    pub compare_simulated: bool,
    /// With --compare-simulated: measure nothing; compare the simulation with a saved real
    /// run's "result" records instead (the output of `bench --json` or `bench
    /// --compare-simulated --json` with the same targets, sizes, ops, strategies, duration
    /// and load), so that two models are judged against the same real run.
    #[arg(long, value_name = "FILE", requires = "compare_simulated")]
    pub measured: Option<std::path::PathBuf>,
    /// With --simulate: instead of the matrix, every host preset and `measured` (where
    /// host.json exists), or only the `--host` given, x {smart's share of the paired front
    /// over emulated devices, ops, sizes and both loads in 3 seeded rounds; hybrid's IOPS and
    /// CPU on emu:optane and emu:nvme against an oracle hybrid} (issue 27, item 4; `--seed`
    /// the first round's).
    #[arg(long, requires = "simulate")]
    pub presets_table: bool,
    #[command(flatten)]
    pub run: RunFlags,
}

pub fn run(args: BenchArgs) -> Result<()> {
    // Claimed before anything is parsed further or measured: a refusal costs nothing.
    let plot_out = crate::paths::out_file("--plot", args.plot.as_deref())?;
    // A saved run is read whole before anything else: a path that is not one is refused
    // by its name, whatever else is wrong with the command.
    let saved = match &args.measured {
        Some(path) => {
            crate::paths::input("--measured", path, false)?;
            Some(read_saved_results(path, &args.load)?)
        }
        None => None,
    };
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
    args.run.apply_globals();
    let spin_budget_ns = args.run.spin_budget_ns()?;
    let span =
        args.span.as_deref().map(|s| parse_size_arg("span", s, smartcon_util::units::DEVICE_SIZE)).transpose()?;
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    let plan = BenchPlan { ops, sizes, pattern, configs, threads: args.threads, duration_ns, spin_budget_ns };
    if args.host.is_some() && !args.simulate && !args.compare_simulated {
        bail!("--host names the simulation's host model; give --simulate or --compare-simulated too");
    }
    if args.simulate {
        if plot_out.is_some() {
            bail!("--plot draws a measured sweep; it does not take --simulate");
        }
        return run_simulated(&args, &targets, &plan, span);
    }
    if args.compare_simulated {
        // Both checked before anything is measured.
        emu_specs(&targets)?;
        resolve_host(Some(compare_host(&args)))?;
        if let Some(saved) = &saved {
            return compare_simulated(&args, saved, &plan, span);
        }
    }
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
    if args.compare_simulated && !summary.interrupted {
        compare_simulated(&args, &Measured::Run(&results), &plan, span)?;
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

/// The host model `--compare-simulated` simulates on: `--host`, else `measured`.
fn compare_host(args: &BenchArgs) -> &str {
    args.host.as_deref().unwrap_or("measured")
}

/// The host model `--host` names (see [`BenchArgs::host`]).
pub fn resolve_host(arg: Option<&str>) -> Result<HostModel> {
    let measured = crate::common::smartcon_home().join(HOST_MODEL_FILE);
    let (model, what) = match arg {
        None if measured.exists() => (HostModel::load(&measured), measured.display().to_string()),
        None => return Ok(HostModel::preset("host-c").expect("a preset")),
        Some("measured") => {
            if !measured.exists() {
                bail!("--host measured: {} does not exist; run `smartcon host` first", measured.display());
            }
            (HostModel::load(&measured), measured.display().to_string())
        }
        Some(name) => match HostModel::preset(name) {
            Some(m) => return Ok(m),
            None if std::path::Path::new(name).exists() => {
                (HostModel::load(std::path::Path::new(name)), name.to_string())
            }
            None => bail!("--host {name:?} is neither a preset ({}, measured) nor a file", PRESETS.join(", ")),
        },
    };
    model.map_err(engine_err).with_context(|| format!("--host {what}"))
}

/// `bench --simulate`: every cell of the plan in the seeded simulation.
fn run_simulated(args: &BenchArgs, targets: &[String], plan: &BenchPlan, span: Option<u64>) -> Result<()> {
    if args.presets_table {
        return presets_table(args);
    }
    let host = resolve_host(args.host.as_deref())?;
    let mut cfg = SimConfig::new(args.seed, host);
    if let Some(cores) = args.cores {
        if cores == 0 || cores > 4096 {
            bail!("--cores {cores}: use 1 to 4096");
        }
        cfg.cores = cores;
    }
    cfg.crunchers = match args.load.as_str() {
        "bm-only" => 0,
        "cpu-intensive" => cfg.cores,
        other => bail!("unknown load {other:?}; use bm-only or cpu-intensive"),
    };
    let specs = emu_specs(targets)?;
    let (started, cpu0) = (std::time::Instant::now(), smartcon_engine::clock::thread_cpu_ns());
    let json = args.json;
    let (results, profiles, ios) = simulate_cells(&specs, plan, span, &cfg, &mut |r| {
        if json {
            emit_json(r)?;
        }
        Ok(())
    })?;
    let host_s = started.elapsed().as_secs_f64();
    let cpu_s = (smartcon_engine::clock::thread_cpu_ns() - cpu0) as f64 / 1e9;
    let simulated =
        sim::Simulated { seed: cfg.seed, host: cfg.host.name.clone(), cores: cfg.cores, crunchers: cfg.crunchers };
    let summary = smartcon_study::bench::summarize(&results, &args.load, false);
    let checks = hybrid_checks(&results, &args.load);
    if args.json {
        for r in &checks {
            emit_json(r)?;
        }
        emit_json(&SimulatedSummary { summary, simulated })?;
    } else {
        println!(
            "simulated (not measured): host {} ({}), {} cores, {} crunchers, seed {}",
            cfg.host.name, cfg.host.source, cfg.cores, cfg.crunchers, cfg.seed
        );
        print!("{}", smartcon_report::bench::render(&results, &profiles));
        if let Some(min) = summary.smart_ratio_min {
            println!(
                "\nsmart reached >= 0.97 x the better of block and spin in {} of {} cells (lowest ratio {:.3}).",
                summary.smart_within_3pct, summary.smart_cells, min
            );
        }
        print!("{}", render_polling(&[], &checks));
    }
    eprintln!(
        "smartcon: simulated {ios} I/Os in {host_s:.2} s of wall time, {cpu_s:.2} s of CPU ({:.2} M I/Os per s of wall, {:.2} of CPU)",
        ios as f64 / host_s.max(1e-9) / 1e6,
        ios as f64 / cpu_s.max(1e-9) / 1e6
    );
    Ok(())
}

/// `bench --simulate --presets-table`: the presets (and `measured`) in one table.
fn presets_table(args: &BenchArgs) -> Result<()> {
    use smartcon_study::simtable;
    let hosts = match args.host.as_deref() {
        Some(h) => vec![resolve_host(Some(h))?],
        None => {
            let mut hosts: Vec<HostModel> = PRESETS.iter().filter_map(|p| HostModel::preset(p)).collect();
            if crate::common::smartcon_home().join(HOST_MODEL_FILE).exists() {
                hosts.push(resolve_host(Some("measured"))?);
            }
            hosts
        }
    };
    let plan = simtable::TablePlan::new(args.seed);
    let mut rows = Vec::new();
    for h in &hosts {
        eprintln!("smartcon: simulating host {}", h.name);
        let row = simtable::preset_row(h, &plan).map_err(engine_err)?;
        if args.json {
            emit_json(&row)?;
        }
        rows.push(row);
    }
    if !args.json {
        println!("simulated (not measured), seeds {}..{}:", args.seed, args.seed + plan.rounds - 1);
        print!("{}", simtable::render(&rows));
    }
    Ok(())
}

/// The emulated devices among `targets` (the simulation runs nothing else).
fn emu_specs(targets: &[String]) -> Result<Vec<smartcon_devemu::EmuSpec>> {
    let mut specs = Vec::new();
    for t in targets {
        match target::parse_target(t).map_err(engine_err)? {
            TargetSpec::Emu(e) => specs.push(e),
            _ => bail!("--simulate and --compare-simulated run emulated devices only (emu:PRESET...); {t} is not one"),
        }
    }
    Ok(specs)
}

/// Every cell of `plan` on `specs` in the simulation `cfg`, in the plan's order; each record
/// goes to `on_record` as it is made.
type SimCells = (Vec<JobResult>, Vec<(String, Profile)>, u64);
fn simulate_cells(
    specs: &[smartcon_devemu::EmuSpec],
    plan: &BenchPlan,
    span: Option<u64>,
    cfg: &SimConfig,
    on_record: &mut dyn FnMut(&sim::SimRecord) -> Result<()>,
) -> Result<SimCells> {
    let mut results = Vec::new();
    let mut profiles = Vec::new();
    let mut ios = 0u64;
    for spec in specs {
        for &op in &plan.ops {
            for &bs in &plan.sizes {
                for (i, &(strategy, poll)) in plan.configs.iter().enumerate() {
                    let job = JobSpec {
                        threads: plan.threads,
                        duration_ns: plan.duration_ns,
                        span_bytes: Some(span.unwrap_or(64 << 20).min(spec.capacity_bytes)),
                        spin_budget_ns: plan.spin_budget_ns,
                        poll,
                        seed: i as u64,
                        ..JobSpec::new(op, plan.pattern, bs, strategy)
                    };
                    let run = sim::run_cell(spec, &job, cfg).map_err(engine_err)?;
                    let broken = run.checks.violations();
                    if !broken.is_empty() {
                        bail!(
                            "the simulation broke its invariants on {} {bs} {}: {}",
                            spec.label,
                            strategy.name(),
                            broken.join("; ")
                        );
                    }
                    ios += run.record.result.ios;
                    on_record(&run.record)?;
                    if profiles.iter().all(|(l, _): &(String, Profile)| *l != spec.label) {
                        profiles.push((spec.label.clone(), run.profile.clone()));
                    }
                    results.push(run.record.result);
                }
            }
        }
    }
    Ok((results, profiles, ios))
}

/// One cell of `--compare-simulated`: predicted over measured.
#[derive(serde::Serialize)]
struct CompareRecord {
    r#type: &'static str,
    target: String,
    op: String,
    bs_bytes: u64,
    strategy: String,
    load: String,
    iops_measured: f64,
    iops_predicted: f64,
    cpu_pct_measured: f64,
    cpu_pct_predicted: f64,
    iops_ratio: f64,
    cpu_ratio: f64,
    /// The CPU per I/O, predicted over measured: what each wait costs, which the machine's
    /// other load (the share of a core the real thread got) leaves out.
    cpu_per_io_ratio: f64,
}

/// The real cells against the same cells simulated on `--host` (`measured` by default); the
/// table (or records), the largest miss, and hybrid against spin beside the host's oracle.
fn compare_simulated(args: &BenchArgs, measured: &Measured, plan: &BenchPlan, span: Option<u64>) -> Result<()> {
    let host = resolve_host(Some(compare_host(args)))?;
    let mut cfg = SimConfig::new(1, host);
    cfg.crunchers = if args.load == "cpu-intensive" { cfg.cores } else { 0 };
    let targets = split_targets(&args.targets)?;
    let (predicted, _, _) = simulate_cells(&emu_specs(&targets)?, plan, span, &cfg, &mut |_| Ok(()))?;
    let saved;
    let results = match measured {
        Measured::Run(results) => *results,
        Measured::Saved(records) => {
            saved = saved_as_results(records, &predicted)?;
            &saved[..]
        }
    };
    let key = |r: &JobResult| (r.target.clone(), format!("{:?}", r.op), r.bs_bytes, r.strategy.name());
    let cpu = |r: &JobResult| r.cpu_user_pct + r.cpu_sys_pct;
    let ratio = |p: f64, m: f64| if m > 0.0 { p / m } else { f64::NAN };
    let mut rows = Vec::new();
    for m in results {
        let Some(p) = predicted.iter().find(|p| key(p) == key(m)) else { continue };
        let (t, op, bs, s) = key(m);
        rows.push(CompareRecord {
            r#type: "compare_simulated",
            target: t,
            op: op.to_lowercase(),
            bs_bytes: bs,
            strategy: s.to_string(),
            load: args.load.clone(),
            iops_measured: m.iops,
            iops_predicted: p.iops,
            cpu_pct_measured: cpu(m),
            cpu_pct_predicted: cpu(p),
            iops_ratio: ratio(p.iops, m.iops),
            cpu_ratio: ratio(cpu(p), cpu(m)),
            cpu_per_io_ratio: ratio(cpu(p) / p.iops, cpu(m) / m.iops),
        });
    }
    let miss = |x: f64| if x.is_finite() && x > 0.0 { x.max(1.0 / x) } else { f64::INFINITY };
    let worst = rows
        .iter()
        .flat_map(|r| [(miss(r.iops_ratio), r, "IOPS"), (miss(r.cpu_ratio), r, "CPU")])
        .max_by(|a, b| a.0.total_cmp(&b.0));
    let hybrid = smartcon_study::simtable::hybrid_against_oracle(&cfg.host, results, &predicted);
    if args.json {
        for r in &rows {
            emit_json(r)?;
        }
        for r in &hybrid {
            emit_json(r)?;
        }
        return Ok(());
    }
    println!(
        "\npredicted (simulated on host {} ({}), seed 1, {} crunchers) against measured, {}:",
        cfg.host.name,
        compare_host(args),
        cfg.crunchers,
        args.load
    );
    println!(
        "{:<12} {:>5} {:>6} {:<8} {:>10} {:>10} {:>6} {:>7} {:>7} {:>6} {:>9}",
        "target", "op", "bs", "strategy", "IOPS meas", "IOPS pred", "ratio", "CPU% m", "CPU% p", "ratio", "CPU/IO r"
    );
    for r in &rows {
        println!(
            "{:<12} {:>5} {:>6} {:<8} {:>10.0} {:>10.0} {:>6.2} {:>7.1} {:>7.1} {:>6.2} {:>9.2}",
            r.target,
            r.op,
            r.bs_bytes,
            r.strategy,
            r.iops_measured,
            r.iops_predicted,
            r.iops_ratio,
            r.cpu_pct_measured,
            r.cpu_pct_predicted,
            r.cpu_ratio,
            r.cpu_per_io_ratio
        );
    }
    if let Some((m, r, what)) = worst {
        println!("largest miss: {what} of {} {} by {m:.2} x", r.target, r.strategy);
    }
    // Within x: the prediction within x of the measured figure (|predicted / measured - 1|).
    let figures: Vec<f64> = rows.iter().flat_map(|r| [r.iops_ratio, r.cpu_ratio]).collect();
    let close = |r: f64, x: f64| (r - 1.0).abs() <= x + 1e-9;
    let within = |x: f64| figures.iter().filter(|&&r| close(r, x)).count();
    let per_io = rows.iter().filter(|r| close(r.cpu_per_io_ratio, 0.10)).count();
    let when = match (&args.measured, measured) {
        (Some(path), Measured::Saved(_)) => format!("measured: the saved run {}", path.display()),
        _ => format!(
            "load average {} (the real cells share the machine with it)",
            std::fs::read_to_string("/proc/loadavg")
                .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
                .unwrap_or_else(|_| "unknown".into())
        ),
    };
    println!("{} of {} figures within 10%, {} within 25%; {when}", within(0.10), figures.len(), within(0.25));
    println!(
        "CPU per I/O (CPU/IO r: the waits' cost, without the share of a core the real thread got): {per_io} of {} within 10%",
        rows.len()
    );
    print!("{}", smartcon_study::simtable::render_hybrid_oracle(&hybrid));
    Ok(())
}

/// What `--compare-simulated` compares the simulation with: this run's cells, or a saved
/// run's records (`--measured`).
enum Measured<'a> {
    Run(&'a [JobResult]),
    Saved(Vec<SavedResult>),
}

/// The figures of a saved real `result` record the comparison reads.
#[derive(Debug, Clone, serde::Deserialize)]
struct SavedResult {
    target: String,
    op: String,
    bs_bytes: u64,
    strategy: String,
    iops: f64,
    cpu_user_pct: f64,
    cpu_sys_pct: f64,
    #[serde(default)]
    ios: u64,
    #[serde(default)]
    duration_ns: u64,
    #[serde(default)]
    lat_ns_mean: f64,
    #[serde(default)]
    lat_ns_p50: u64,
    #[serde(default)]
    lat_ns_p99: u64,
    #[serde(default)]
    ctx_voluntary: u64,
    #[serde(default)]
    ctx_involuntary: u64,
    #[serde(default)]
    model_service_ns: Option<u64>,
    #[serde(default)]
    polling: Option<SavedPolling>,
}

#[derive(Debug, Clone, Copy, serde::Deserialize)]
struct SavedPolling {
    #[serde(default)]
    polls_per_io: f64,
    #[serde(default)]
    sleeps_per_io: f64,
}

/// The `result` records of a saved real run (`--measured FILE`), checked against `--load`
/// where the file has its `summary` record; a simulated record is refused (it would compare
/// the model with itself).
fn read_saved_results(path: &std::path::Path, load: &str) -> Result<Measured<'static>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("--measured {}", path.display()))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line)
            .with_context(|| format!("--measured {} line {}: not a JSON record", path.display(), n + 1))?;
        let kind = v["type"].as_str();
        if matches!(kind, Some("result" | "summary")) && v.get("simulated").is_some() {
            bail!("--measured {} line {}: a simulated record, not a measured one", path.display(), n + 1);
        }
        match kind {
            Some("result") => out.push(
                serde_json::from_value::<SavedResult>(v)
                    .with_context(|| format!("--measured {} line {}", path.display(), n + 1))?,
            ),
            Some("summary") => {
                if let Some(l) = v["load"].as_str().filter(|l| *l != load) {
                    bail!("--measured {}: a run under --load {l}; give --load {l}", path.display());
                }
            }
            _ => {}
        }
    }
    if out.is_empty() {
        bail!("--measured {}: no result records (save a run with `bench --json`)", path.display());
    }
    Ok(Measured::Saved(out))
}

/// Saved records as the comparison's `JobResult`s: each is the simulated record of the same
/// cell with every figure the comparison reads replaced by the saved one (IOPS, CPU, I/Os,
/// latencies, switches, polls and sleeps per I/O); the rest of a `JobResult` (histogram,
/// decisions) is not read by it. A saved cell the plan does not simulate is an error.
fn saved_as_results(saved: &[SavedResult], predicted: &[JobResult]) -> Result<Vec<JobResult>> {
    saved
        .iter()
        .map(|m| {
            let Some(p) = predicted.iter().find(|p| {
                p.target == m.target && p.op.name() == m.op && p.bs_bytes == m.bs_bytes && p.strategy.name() == m.strategy
            }) else {
                bail!(
                    "--measured: {} {} {} {} is not a cell of this command's plan (give the run's --targets, --sizes, --ops and --strategies)",
                    m.target,
                    m.op,
                    m.bs_bytes,
                    m.strategy
                );
            };
            let mut r = p.clone();
            r.iops = m.iops;
            r.cpu_user_pct = m.cpu_user_pct;
            r.cpu_sys_pct = m.cpu_sys_pct;
            r.ios = m.ios;
            r.duration_ns = m.duration_ns;
            r.lat_ns_mean = m.lat_ns_mean;
            r.lat_ns_p50 = m.lat_ns_p50;
            r.lat_ns_p99 = m.lat_ns_p99;
            r.ctx_voluntary = m.ctx_voluntary;
            r.ctx_involuntary = m.ctx_involuntary;
            r.model_service_ns = m.model_service_ns.or(p.model_service_ns);
            r.polling = match (r.polling.take(), m.polling) {
                (Some(mut pp), Some(mp)) => {
                    pp.polls_per_io = mp.polls_per_io;
                    pp.sleeps_per_io = mp.sleeps_per_io;
                    Some(pp)
                }
                _ => None,
            };
            Ok(r)
        })
        .collect()
}

/// The summary record of a simulated run, marked as such.
#[derive(serde::Serialize)]
struct SimulatedSummary {
    #[serde(flatten)]
    summary: smartcon_study::bench::Summary,
    simulated: sim::Simulated,
}
