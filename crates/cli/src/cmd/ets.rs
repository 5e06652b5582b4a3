//! `smartcon ets`: the elastic-time-slicing study (Jammula et al., seeds/003) on the
//! trace-driven simulator, and `smartcon ets crosscheck` against valgrind's cachegrind.
//!
//! The study runs every task of the suite three times (UTS with 2.5 ms slices, UTS with
//! 10 ms, ETS with Table I), each time as the paper's "application of interest" whose
//! co-runners keep 2.5 ms slices, and prints per task: IPC normalised to UTS-2.5 (Fig. 6a),
//! the slices ETS gave (Fig. 6b), the latency between consecutive schedules of a co-runner
//! (Fig. 8) and the error of the 1/16-sampled estimate against the exact count (Fig. 9).
//! A sweep then counts CS misses per LLC size (1, 2, 4 MiB) and policy (Sec. VI) under
//! UTS-2.5 with a quarter of the instructions. The model and every interpretation are in
//! `smartcon_cachesim::sched` and docs/cachesim-ets.md.
//!
//! Crosscheck captures the program with lackey, simulates the trace in the cachegrind-like
//! mode, runs cachegrind on the same program with the same geometry and prints both miss
//! counts side by side. Temporary files live in one directory that is always removed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use smartcon_cachesim::capture::{capture, run_cachegrind, valgrind_version};
use smartcon_cachesim::ets::{self, EtsPlan, SummaryRecord, SweepRecord, TaskRecord};
use smartcon_cachesim::hierarchy::{HierarchyConfig, Mode};
use smartcon_cachesim::policy::PolicyKind;
use smartcon_cachesim::sched::TaskSpec;
use smartcon_cachesim::study::{simulate, CrosscheckRecord};
use smartcon_cachesim::ErrorKind;
use smartcon_devemu::units::{format_size, parse_size};

use crate::cmd::cachesim::{parse_geometry, parse_line, parse_policy};
use crate::common;
use crate::plot;

#[derive(clap::Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EtsArgs {
    #[command(subcommand)]
    command: Option<EtsCommand>,
    #[command(flatten)]
    study: StudyArgs,
}

#[derive(clap::Subcommand)]
enum EtsCommand {
    /// Capture a program, simulate it cachegrind-style, run cachegrind, compare miss counts:
    /// crosscheck -- PROGRAM ARGS...
    Crosscheck(CrosscheckArgs),
}

#[derive(clap::Args)]
struct StudyArgs {
    /// Tasks as KIND:SIZE, comma-separated (kinds: stream, loop, random, phased, hotcold);
    /// default: the eight-task suite of docs/cachesim-ets.md.
    #[arg(long)]
    tasks: Option<String>,
    /// LLC replacement policy for the main study: lru, drrip or ship.
    #[arg(long, default_value = "lru")]
    policy: String,
    /// LLC size for the main study (16-way, 64-byte lines).
    #[arg(long, default_value = "2m")]
    llc: String,
    /// Instructions per task (default 100M; 24M with --quick). The paper's 500M, scaled
    /// down so a run fits the machine.
    #[arg(long)]
    instructions: Option<u64>,
    /// A short run (under a minute on two cores).
    #[arg(long)]
    quick: bool,
    /// Skip the LLC size x policy sweep.
    #[arg(long)]
    no_sweep: bool,
    /// Sample one set in 2^N for the estimator (4 = 1/16 as in the paper).
    #[arg(long, default_value_t = 4)]
    sample_shift: u32,
    /// Worker threads (default: all CPUs).
    #[arg(long)]
    threads: Option<usize>,
    /// JSON Lines on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Write results.jsonl and SVG plots into this directory (must be empty or absent).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct CrosscheckArgs {
    /// L1 I and D SIZE,WAYS (cachegrind's --I1 and --D1).
    #[arg(long, default_value = "32k,2")]
    l1: String,
    /// LL SIZE,WAYS (cachegrind's --LL).
    #[arg(long, default_value = "2m,16")]
    ll: String,
    /// Line size in bytes.
    #[arg(long, default_value = "64")]
    line: String,
    #[arg(long)]
    json: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    program: Vec<String>,
}

pub fn run(args: EtsArgs) -> Result<()> {
    match args.command {
        Some(EtsCommand::Crosscheck(a)) => crosscheck(a),
        None => study(args.study),
    }
}

fn pct(v: Option<f64>) -> String {
    v.map(|e| format!("{:.2}%", 100.0 * e)).unwrap_or_else(|| "n/a".into())
}

fn study(a: StudyArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let tasks = match &a.tasks {
        None => TaskSpec::default_suite(),
        Some(list) => list
            .split(',')
            .enumerate()
            .map(|(i, t)| TaskSpec::parse(t.trim(), 1 + i as u64, |s| parse_size(s).ok()).map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>()?,
    };
    let plan = EtsPlan {
        tasks,
        policy: parse_policy(&a.policy)?,
        llc_size_bytes: parse_size(&a.llc).context("--llc")?,
        instructions: a.instructions.unwrap_or(if a.quick { 24_000_000 } else { 100_000_000 }),
        sample_shift: a.sample_shift,
        sweep: !a.no_sweep,
        threads: a.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
    };
    plan.hierarchy().map_err(|e| match e.kind {
        ErrorKind::Geometry => anyhow::Error::from(e).context("--llc"),
        _ => e.into(),
    })?;
    if let Some(dir) = &a.out {
        common::prepare_out_dir(dir)?;
    }
    let bar = common::progress_bar(plan.runs() as u64, "ets");
    let results = ets::run(&plan, common::interrupt_flag(), &|| bar.inc(1));
    bar.finish_and_clear();
    let results = results?;
    let summary = ets::summary(&plan, &results, started.elapsed().as_nanos() as u64);
    if let Some(dir) = &a.out {
        write_outputs(dir, &results.tasks, &results.sweep, &summary)?;
    }
    if a.json {
        for r in &results.tasks {
            common::emit_json(r)?;
        }
        for r in &results.sweep {
            common::emit_json(r)?;
        }
        return common::emit_json(&summary);
    }
    print_tables(&results.tasks, &results.sweep, &summary, plan.threads);
    if let Some(dir) = &a.out {
        println!("wrote results.jsonl and plots to {}", dir.display());
    }
    Ok(())
}

fn ms(ns: f64) -> f64 {
    ns / 1e6
}

fn print_tables(tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord, threads: usize) {
    println!(
        "ETS study: {} tasks, LLC {} 16-way {}, {} instructions per task, {} threads",
        s.tasks,
        format_size(s.llc_size_bytes),
        s.policy,
        s.instructions,
        threads
    );
    println!();
    println!("IPC normalised to UTS-2.5 (Fig. 6a) and the slices ETS gave (Fig. 6b)");
    println!("task          IPC 2.5   IPC 10  IPC ETS    10/2.5   ETS/2.5    ETS-10 |  2.5ms    5ms  7.5ms   10ms ignored  diff%");
    for r in tasks {
        println!(
            "{:<12} {:>8.4} {:>8.4} {:>8.4} {:>9.3} {:>9.3} {:>8.2}% | {:>6} {:>6} {:>6} {:>6} {:>7} {:>5.0}%",
            r.task,
            r.ipc_uts_2_5,
            r.ipc_uts_10,
            r.ipc_ets,
            r.uts_10_over_uts_2_5,
            r.ets_over_uts_2_5,
            r.ets_vs_uts_10_pct,
            r.slices_2_5ms,
            r.slices_5ms,
            r.slices_7_5ms,
            r.slices_10ms,
            r.estimates_ignored,
            r.different_transitions_pct
        );
    }
    println!();
    println!("Latency between consecutive schedules of a co-runner, ms (Fig. 8), and CS-miss estimation (Fig. 9, UTS-2.5 run)");
    println!("task           UTS-2.5    UTS-10  ETS mean   ETS std   ETS own |  schedules     CS exact  CS estimate    CS excess    error");
    for r in tasks {
        println!(
            "{:<12} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} | {:>10} {:>12} {:>12} {:>12} {:>8}",
            r.task,
            ms(r.cosched_latency_ns_mean_uts_2_5),
            ms(r.cosched_latency_ns_mean_uts_10),
            ms(r.cosched_latency_ns_mean_ets),
            ms(r.cosched_latency_ns_std_ets),
            ms(r.own_latency_ns_mean_ets),
            r.schedules_uts_2_5,
            r.cs_misses_exact,
            r.cs_misses_estimated,
            r.cs_misses_excess,
            pct(r.estimation_error_pct.map(|e| e / 100.0))
        );
    }
    print_sweep(tasks, sweep);
    println!();
    println!(
        "ETS/UTS-10 IPC: geometric mean {:.4}, worst {:+.2}%, {} of {} tasks within 4%",
        s.ets_over_uts_10_geomean, s.ets_vs_uts_10_pct_worst, s.tasks_within_4pct_of_uts_10, s.tasks
    );
    println!(
        "co-runner latency mean: UTS-2.5 {:.2} ms, UTS-10 {:.2} ms, ETS {:.2} ms",
        ms(s.cosched_latency_ns_mean_uts_2_5),
        ms(s.cosched_latency_ns_mean_uts_10),
        ms(s.cosched_latency_ns_mean_ets)
    );
    println!(
        "estimation error (1/16 ATD vs exact): mean {} over {} tasks with CS misses; sweep lru {} drrip {} ship {}",
        pct(s.estimation_error_pct_mean.map(|e| e / 100.0)),
        s.estimation_tasks,
        pct(s.sweep_error_pct_mean_lru.map(|e| e / 100.0)),
        pct(s.sweep_error_pct_mean_drrip.map(|e| e / 100.0)),
        pct(s.sweep_error_pct_mean_ship.map(|e| e / 100.0)),
    );
    println!("wall time {:.1} s", s.wall_ns as f64 / 1e9);
}

/// The LLC size x policy sweep (Sec. VI), one row per task.
fn print_sweep(tasks: &[TaskRecord], sweep: &[SweepRecord]) {
    if sweep.is_empty() {
        return;
    }
    println!();
    println!(
        "CS misses per schedule (exact) by LLC size and policy under UTS-2.5 (Sec. VI); estimate error in brackets"
    );
    let sizes: Vec<u64> = {
        let mut v: Vec<u64> = sweep.iter().map(|r| r.llc_size_bytes).collect();
        v.sort();
        v.dedup();
        v
    };
    print!("{:<12}", "task");
    for p in PolicyKind::ALL {
        for size in &sizes {
            print!(" {:>17}", format!("{} {}", p.name(), format_size(*size)));
        }
    }
    println!();
    for t in tasks {
        print!("{:<12}", t.task);
        for p in PolicyKind::ALL {
            for size in &sizes {
                let r = sweep.iter().find(|r| r.task == t.task && r.policy == p.name() && r.llc_size_bytes == *size);
                match r {
                    Some(r) => print!(
                        " {:>17}",
                        format!(
                            "{:.0} ({})",
                            r.cs_misses_exact_per_schedule,
                            pct(r.estimation_error_pct.map(|e| e / 100.0))
                        )
                    ),
                    None => print!(" {:>17}", "-"),
                }
            }
        }
        println!();
    }
}

fn write_outputs(dir: &Path, tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord) -> Result<()> {
    write_jsonl(dir, tasks, sweep, s)?;
    let names: Vec<String> = tasks.iter().map(|r| r.task.clone()).collect();
    plot::bar_chart(
        &dir.join("fig6a_ipc.svg"),
        &plot::BarChart {
            title: "IPC normalised to UTS-2.5 (Fig. 6a)",
            y_label: "IPC / IPC(UTS-2.5)",
            categories: names.clone(),
            series: vec![
                ("UTS-10".into(), tasks.iter().map(|r| r.uts_10_over_uts_2_5).collect()),
                ("ETS".into(), tasks.iter().map(|r| r.ets_over_uts_2_5).collect()),
            ],
            reference: Some(1.0),
        },
    )?;
    let share = |f: fn(&TaskRecord) -> usize| -> Vec<f64> {
        tasks.iter().map(|r| 100.0 * f(r) as f64 / r.schedules_ets.max(1) as f64).collect()
    };
    plot::bar_chart(
        &dir.join("fig6b_slices.svg"),
        &plot::BarChart {
            title: "Slices given by ETS (Fig. 6b)",
            y_label: "share of schedules (%)",
            categories: names.clone(),
            series: vec![
                ("2.5 ms".into(), share(|r| r.slices_2_5ms)),
                ("5 ms".into(), share(|r| r.slices_5ms)),
                ("7.5 ms".into(), share(|r| r.slices_7_5ms)),
                ("10 ms".into(), share(|r| r.slices_10ms)),
            ],
            reference: None,
        },
    )?;
    plot::bar_chart(
        &dir.join("fig8_latency.svg"),
        &plot::BarChart {
            title: "Latency between schedules of a co-runner (Fig. 8)",
            y_label: "latency (ms)",
            categories: names.clone(),
            series: vec![
                ("UTS-2.5".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_mean_uts_2_5)).collect()),
                ("ETS mean".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_mean_ets)).collect()),
                ("ETS std".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_std_ets)).collect()),
                ("UTS-10".into(), tasks.iter().map(|r| ms(r.cosched_latency_ns_mean_uts_10)).collect()),
            ],
            reference: None,
        },
    )?;
    plot_errors(dir, tasks, sweep, s, names)
}

fn write_jsonl(dir: &Path, tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord) -> Result<()> {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("results.jsonl"))?);
    for r in tasks {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    for r in sweep {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    serde_json::to_writer(&mut f, s)?;
    f.write_all(b"\n")?;
    f.flush()?;
    Ok(())
}

/// Fig. 9 and the CS misses by LLC size.
fn plot_errors(
    dir: &Path,
    tasks: &[TaskRecord],
    sweep: &[SweepRecord],
    s: &SummaryRecord,
    names: Vec<String>,
) -> Result<()> {
    let mut error_series = vec![(
        format!("{} {} (main run)", s.policy, format_size(s.llc_size_bytes)),
        tasks.iter().map(|r| r.estimation_error_pct.unwrap_or(f64::NAN)).collect::<Vec<f64>>(),
    )];
    if !sweep.is_empty() {
        for p in PolicyKind::ALL {
            error_series.push((
                format!("{} 4m", p.name()),
                tasks
                    .iter()
                    .map(|t| {
                        sweep
                            .iter()
                            .find(|r| r.task == t.task && r.policy == p.name() && r.llc_size_bytes == 4 << 20)
                            .and_then(|r| r.estimation_error_pct)
                            .unwrap_or(f64::NAN)
                    })
                    .collect(),
            ));
        }
    }
    plot::bar_chart(
        &dir.join("fig9_error.svg"),
        &plot::BarChart {
            title: "CS-miss estimation error, 1/16 sampled ATD vs exact (Fig. 9)",
            y_label: "error (%)",
            categories: names,
            series: error_series,
            reference: Some(5.0),
        },
    )?;
    if !sweep.is_empty() {
        let series: Vec<plot::Series> = PolicyKind::ALL
            .iter()
            .map(|p| {
                let mut sizes: Vec<u64> = sweep.iter().map(|r| r.llc_size_bytes).collect();
                sizes.sort();
                sizes.dedup();
                plot::Series {
                    name: format!("{} (all tasks)", p.name()),
                    points: sizes
                        .iter()
                        .map(|&size| {
                            let total: f64 = sweep
                                .iter()
                                .filter(|r| r.policy == p.name() && r.llc_size_bytes == size)
                                .map(|r| r.cs_misses_exact_per_schedule)
                                .sum();
                            ((size >> 20) as f64, total)
                        })
                        .collect(),
                }
            })
            .collect();
        plot::line_chart(
            &dir.join("cs_misses_llc.svg"),
            &plot::LineChart {
                title: "CS misses per schedule vs LLC size and policy (Sec. VI)",
                x_label: "LLC size (MiB)",
                y_label: "CS misses per schedule, summed over tasks",
                log_x: true,
                log_y: false,
                markers: vec![],
            },
            &series,
        )?;
    }
    Ok(())
}

/// Removes the directory it names when dropped.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn crosscheck(a: CrosscheckArgs) -> Result<()> {
    let line = parse_line(&a.line)?;
    let l1 = parse_geometry("--l1", &a.l1, line)?;
    let ll = parse_geometry("--ll", &a.ll, line)?;
    valgrind_version()?;
    let config =
        HierarchyConfig { l1i: l1, l1d: l1, l2: None, llc: ll, timing: Default::default(), mode: Mode::Cachegrind };
    config.validate()?;
    let dir = TempDir(std::env::temp_dir().join(format!("smartcon-crosscheck-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).with_context(|| format!("cannot create {}", dir.0.display()))?;
    let trace = dir.0.join("trace.sct");
    capture(&a.program, &trace)?;
    let ours = simulate(config, PolicyKind::Lru, &trace, common::interrupt_flag())?;
    let cg = run_cachegrind(&a.program, &l1, &ll, &dir.0.join("cachegrind.out"))?;
    let rec = CrosscheckRecord::new(&a.program.join(" "), &l1, &ll, &ours, &cg);
    if a.json {
        return common::emit_json(&rec);
    }
    println!("{} (I1/D1 {}, LL {}; sizes,ways,line in bytes)", rec.program, rec.i1, rec.ll);
    println!("{:<14} {:>14} {:>14} {:>9}", "", "smartcon", "cachegrind", "diff");
    let row = |name: &str, ours: u64, theirs: u64| {
        let diff = 100.0 * (ours as f64 - theirs as f64) / theirs.max(1) as f64;
        println!("{:<14} {:>14} {:>14} {:>8.2}%", name, ours, theirs, diff);
    };
    row("instructions", rec.instructions_smartcon, rec.instructions_cachegrind);
    row("I1 misses", rec.i1_misses_smartcon, rec.i1_misses_cachegrind);
    row("D1 misses", rec.d1_misses_smartcon, rec.d1_misses_cachegrind);
    row("LL misses", rec.ll_misses_smartcon, rec.ll_misses_cachegrind);
    Ok(())
}
