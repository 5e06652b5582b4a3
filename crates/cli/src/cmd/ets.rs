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
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use smartcon_cachesim::geometry::Geometry;
use smartcon_cachesim::hierarchy::{HierarchyConfig, Mode};
use smartcon_cachesim::policy::PolicyKind;
use smartcon_cachesim::sched::{
    cycles_to_ns, mean_std, round_robin_latencies, run_jobs, EtsTable, RunConfig, SliceMode, TaskRun, TaskSpec,
    BASE_SLICE_CYCLES,
};
use smartcon_devemu::units::{format_size, parse_size};

use crate::cmd::cachesim::{parse_geometry, parse_line, parse_policy, simulate};
use crate::cmd::trace::{capture, valgrind_version};
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

#[derive(Serialize, Clone)]
struct TaskRecord {
    r#type: &'static str,
    task: String,
    policy: &'static str,
    llc_size_bytes: u64,
    instructions: u64,
    ipc_uts_2_5: f64,
    ipc_uts_10: f64,
    ipc_ets: f64,
    ets_over_uts_2_5: f64,
    uts_10_over_uts_2_5: f64,
    /// (ETS - UTS-10) / UTS-10 in percent; negative means ETS is slower.
    ets_vs_uts_10_pct: f64,
    schedules_ets: usize,
    slices_2_5ms: usize,
    slices_5ms: usize,
    slices_7_5ms: usize,
    slices_10ms: usize,
    estimates_ignored: usize,
    different_transitions_pct: f64,
    cosched_latency_ns_mean_ets: f64,
    cosched_latency_ns_std_ets: f64,
    cosched_latency_ns_mean_uts_2_5: f64,
    cosched_latency_ns_mean_uts_10: f64,
    own_latency_ns_mean_ets: f64,
    schedules_uts_2_5: usize,
    cs_misses_exact: u64,
    cs_misses_estimated: u64,
    cs_misses_excess: i64,
    estimation_error_pct: Option<f64>,
}

#[derive(Serialize, Clone)]
struct SweepRecord {
    r#type: &'static str,
    task: String,
    policy: &'static str,
    llc_size_bytes: u64,
    instructions: u64,
    schedules: usize,
    ipc: f64,
    cs_misses_exact: u64,
    cs_misses_estimated: u64,
    cs_misses_excess: i64,
    cs_misses_exact_per_schedule: f64,
    estimation_error_pct: Option<f64>,
}

#[derive(Serialize)]
struct SummaryRecord {
    r#type: &'static str,
    tasks: usize,
    policy: &'static str,
    llc_size_bytes: u64,
    instructions: u64,
    ets_over_uts_10_geomean: f64,
    ets_vs_uts_10_pct_worst: f64,
    tasks_within_4pct_of_uts_10: usize,
    cosched_latency_ns_mean_ets: f64,
    cosched_latency_ns_mean_uts_2_5: f64,
    cosched_latency_ns_mean_uts_10: f64,
    estimation_error_pct_mean: Option<f64>,
    estimation_tasks: usize,
    /// Mean estimation error per policy over the sweep at every LLC size.
    sweep_error_pct_mean_lru: Option<f64>,
    sweep_error_pct_mean_drrip: Option<f64>,
    sweep_error_pct_mean_ship: Option<f64>,
    wall_ns: u64,
}

fn pct(v: Option<f64>) -> String {
    v.map(|e| format!("{:.2}%", 100.0 * e)).unwrap_or_else(|| "n/a".into())
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = values.collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn study(a: StudyArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let policy = parse_policy(&a.policy)?;
    let llc_size = parse_size(&a.llc).context("--llc")?;
    let mut hierarchy = HierarchyConfig::table_ii();
    hierarchy.llc = hierarchy.llc.with_size(llc_size).context("--llc")?;
    let tasks = match &a.tasks {
        None => TaskSpec::default_suite(),
        Some(list) => list
            .split(',')
            .enumerate()
            .map(|(i, t)| TaskSpec::parse(t.trim(), 1 + i as u64, |s| parse_size(s).ok()).map_err(anyhow::Error::from))
            .collect::<Result<Vec<_>>>()?,
    };
    if tasks.len() < 2 {
        bail!("--tasks needs at least two tasks for round-robin");
    }
    let instructions = a.instructions.unwrap_or(if a.quick { 24_000_000 } else { 100_000_000 });
    if instructions < 1_000_000 {
        bail!("--instructions {instructions} is below the 1M minimum (less than one 2.5 ms slice)");
    }
    let sweep_instructions = instructions / 4;
    if hierarchy.llc.sets() >> a.sample_shift < 2 || a.sample_shift > 16 {
        bail!("--sample-shift {} leaves fewer than two sample sets", a.sample_shift);
    }
    if let Some(dir) = &a.out {
        common::prepare_out_dir(dir)?;
    }
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));

    let base = RunConfig {
        hierarchy,
        policy,
        instructions,
        mode: SliceMode::Uniform { slice_cycles: BASE_SLICE_CYCLES },
        table: EtsTable::table_i(),
        sample_shift: a.sample_shift,
    };
    let modes = [
        SliceMode::Uniform { slice_cycles: BASE_SLICE_CYCLES },
        SliceMode::Uniform { slice_cycles: 4 * BASE_SLICE_CYCLES },
        SliceMode::Elastic,
    ];
    let mut jobs = Vec::new();
    for t in &tasks {
        for m in modes {
            jobs.push((t.clone(), RunConfig { mode: m, ..base.clone() }));
        }
    }
    let sweep_sizes: [u64; 3] = [1 << 20, 2 << 20, 4 << 20];
    let mut sweep_keys = Vec::new();
    if !a.no_sweep {
        for &size in &sweep_sizes {
            for p in PolicyKind::ALL {
                for t in &tasks {
                    let mut h = HierarchyConfig::table_ii();
                    h.llc = Geometry::new(size, 16, 64)?;
                    sweep_keys.push((t.name.clone(), p, size));
                    jobs.push((
                        t.clone(),
                        RunConfig { hierarchy: h, policy: p, instructions: sweep_instructions, ..base.clone() },
                    ));
                }
            }
        }
    }
    let bar = common::progress_bar(jobs.len() as u64, "ets");
    let runs = run_jobs(&jobs, threads, common::interrupt_flag(), &|| bar.inc(1))?;
    bar.finish_and_clear();
    if common::interrupted() {
        bail!("interrupted; no results printed");
    }

    let n = tasks.len();
    let latency = |slices: &[u64]| -> (f64, f64, f64) {
        let (co, own) = round_robin_latencies(slices, n, BASE_SLICE_CYCLES);
        let (m, s) = mean_std(&co);
        let (om, _) = mean_std(&own);
        (cycles_to_ns(m as u64) as f64, cycles_to_ns(s as u64) as f64, cycles_to_ns(om as u64) as f64)
    };
    let mut task_records = Vec::new();
    for (i, t) in tasks.iter().enumerate() {
        let (uts25, uts10, ets) = (&runs[3 * i], &runs[3 * i + 1], &runs[3 * i + 2]);
        let slices: Vec<u64> = ets.schedules.iter().map(|s| s.cycles).collect();
        let (co_mean, co_std, own_mean) = latency(&slices);
        let (u25, _, _) = latency(&uts25.schedules.iter().map(|s| s.cycles).collect::<Vec<_>>());
        let count = |k: u64| ets.schedules.iter().filter(|s| s.slice_cycles == k * BASE_SLICE_CYCLES).count();
        let different = ets.schedules.windows(2).filter(|w| w[0].slice_cycles != w[1].slice_cycles).count();
        task_records.push(TaskRecord {
            r#type: "ets_task",
            task: t.name.clone(),
            policy: policy.name(),
            llc_size_bytes: llc_size,
            instructions,
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
            cosched_latency_ns_mean_uts_10: cycles_to_ns(4 * BASE_SLICE_CYCLES * (n as u64 - 1)) as f64,
            own_latency_ns_mean_ets: own_mean,
            schedules_uts_2_5: uts25.schedules.len(),
            cs_misses_exact: uts25.cs_misses_exact(),
            cs_misses_estimated: uts25.cs_misses_estimated(),
            cs_misses_excess: uts25.schedules.iter().map(|s| s.cs_misses_excess).sum(),
            estimation_error_pct: uts25.estimation_error().map(|e| 100.0 * e),
        });
    }
    let sweep_records: Vec<SweepRecord> = sweep_keys
        .iter()
        .zip(&runs[3 * n..])
        .map(|((task, p, size), r): (&(String, PolicyKind, u64), &TaskRun)| SweepRecord {
            r#type: "ets_sweep",
            task: task.clone(),
            policy: p.name(),
            llc_size_bytes: *size,
            instructions: r.instructions,
            schedules: r.schedules.len(),
            ipc: r.ipc(),
            cs_misses_exact: r.cs_misses_exact(),
            cs_misses_estimated: r.cs_misses_estimated(),
            cs_misses_excess: r.schedules.iter().map(|s| s.cs_misses_excess).sum(),
            cs_misses_exact_per_schedule: r.cs_misses_exact() as f64 / r.schedules.len().max(1) as f64,
            estimation_error_pct: r.estimation_error().map(|e| 100.0 * e),
        })
        .collect();
    let sweep_error = |p: PolicyKind| {
        mean(sweep_records.iter().filter(|r| r.policy == p.name()).filter_map(|r| r.estimation_error_pct))
    };
    let ratios: Vec<f64> = task_records.iter().map(|r| r.ipc_ets / r.ipc_uts_10).collect();
    let summary = SummaryRecord {
        r#type: "ets_summary",
        tasks: n,
        policy: policy.name(),
        llc_size_bytes: llc_size,
        instructions,
        ets_over_uts_10_geomean: (ratios.iter().map(|r| r.ln()).sum::<f64>() / n as f64).exp(),
        ets_vs_uts_10_pct_worst: task_records.iter().map(|r| r.ets_vs_uts_10_pct).fold(f64::INFINITY, f64::min),
        tasks_within_4pct_of_uts_10: task_records.iter().filter(|r| r.ets_vs_uts_10_pct >= -4.0).count(),
        cosched_latency_ns_mean_ets: mean(task_records.iter().map(|r| r.cosched_latency_ns_mean_ets)).unwrap_or(0.0),
        cosched_latency_ns_mean_uts_2_5: mean(task_records.iter().map(|r| r.cosched_latency_ns_mean_uts_2_5))
            .unwrap_or(0.0),
        cosched_latency_ns_mean_uts_10: cycles_to_ns(4 * BASE_SLICE_CYCLES * (n as u64 - 1)) as f64,
        estimation_error_pct_mean: mean(task_records.iter().filter_map(|r| r.estimation_error_pct)),
        estimation_tasks: task_records.iter().filter(|r| r.estimation_error_pct.is_some()).count(),
        sweep_error_pct_mean_lru: sweep_error(PolicyKind::Lru),
        sweep_error_pct_mean_drrip: sweep_error(PolicyKind::Drrip),
        sweep_error_pct_mean_ship: sweep_error(PolicyKind::Ship),
        wall_ns: started.elapsed().as_nanos() as u64,
    };

    if let Some(dir) = &a.out {
        write_outputs(dir, &task_records, &sweep_records, &summary)?;
    }
    if a.json {
        for r in &task_records {
            common::emit_json(r)?;
        }
        for r in &sweep_records {
            common::emit_json(r)?;
        }
        return common::emit_json(&summary);
    }
    print_tables(&task_records, &sweep_records, &summary, threads);
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
    println!(
        "{:<12} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} | {:>6} {:>6} {:>6} {:>6} {:>7} {:>6}",
        "task",
        "IPC 2.5",
        "IPC 10",
        "IPC ETS",
        "10/2.5",
        "ETS/2.5",
        "ETS-10",
        "2.5ms",
        "5ms",
        "7.5ms",
        "10ms",
        "ignored",
        "diff%"
    );
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
    println!(
        "{:<12} {:>9} {:>9} {:>9} {:>9} {:>9} | {:>10} {:>12} {:>12} {:>12} {:>8}",
        "task",
        "UTS-2.5",
        "UTS-10",
        "ETS mean",
        "ETS std",
        "ETS own",
        "schedules",
        "CS exact",
        "CS estimate",
        "CS excess",
        "error"
    );
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
    if !sweep.is_empty() {
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
                    let r =
                        sweep.iter().find(|r| r.task == t.task && r.policy == p.name() && r.llc_size_bytes == *size);
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

fn write_outputs(dir: &Path, tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord) -> Result<()> {
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

#[derive(Serialize)]
struct CrosscheckRecord {
    r#type: &'static str,
    program: String,
    i1: String,
    d1: String,
    ll: String,
    instructions_smartcon: u64,
    instructions_cachegrind: u64,
    i1_misses_smartcon: u64,
    i1_misses_cachegrind: u64,
    d1_misses_smartcon: u64,
    d1_misses_cachegrind: u64,
    ll_misses_smartcon: u64,
    ll_misses_cachegrind: u64,
    ll_misses_diff_pct: f64,
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
    let ours = simulate(config, PolicyKind::Lru, &trace)?;
    let cg_out = dir.0.join("cachegrind.out");
    let geom = |g: &Geometry| format!("{},{},{}", g.size_bytes, g.ways, g.line_bytes);
    let output = Command::new("valgrind")
        .arg("--tool=cachegrind")
        .arg("--cache-sim=yes")
        .arg(format!("--I1={}", geom(&l1)))
        .arg(format!("--D1={}", geom(&l1)))
        .arg(format!("--LL={}", geom(&ll)))
        .arg(format!("--cachegrind-out-file={}", cg_out.display()))
        .args(&a.program)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("cannot start valgrind")?;
    if !output.status.success() {
        let text = String::from_utf8_lossy(&output.stderr);
        let last = text
            .lines()
            .rev()
            .find(|l| !l.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim().is_empty());
        bail!("cachegrind failed ({}): {}", output.status, last.unwrap_or(""));
    }
    let cg = parse_cachegrind(&cg_out)?;
    let get = |name: &str| cg.iter().find(|(n, _)| n == name).map(|(_, v)| *v).unwrap_or(0);
    let cg_ll = get("ILmr") + get("DLmr") + get("DLmw");
    let rec = CrosscheckRecord {
        r#type: "ets_crosscheck",
        program: a.program.join(" "),
        i1: geom(&l1),
        d1: geom(&l1),
        ll: geom(&ll),
        instructions_smartcon: ours.instructions,
        instructions_cachegrind: get("Ir"),
        i1_misses_smartcon: ours.l1i.misses,
        i1_misses_cachegrind: get("I1mr"),
        d1_misses_smartcon: ours.l1d.misses,
        d1_misses_cachegrind: get("D1mr") + get("D1mw"),
        ll_misses_smartcon: ours.llc.misses,
        ll_misses_cachegrind: cg_ll,
        ll_misses_diff_pct: 100.0 * (ours.llc.misses as f64 - cg_ll as f64) / (cg_ll.max(1) as f64),
    };
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

/// Reads cachegrind's `events:` and `summary:` lines into (event, count) pairs.
fn parse_cachegrind(path: &Path) -> Result<Vec<(String, u64)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cachegrind wrote no {}", path.display()))?;
    let events =
        text.lines().find_map(|l| l.strip_prefix("events:")).context("cachegrind output has no events line")?;
    let summary =
        text.lines().find_map(|l| l.strip_prefix("summary:")).context("cachegrind output has no summary line")?;
    let values: Vec<u64> = summary.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
    Ok(events.split_whitespace().map(String::from).zip(values).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cachegrind_summary_is_parsed_by_event_name() {
        let dir = std::env::temp_dir().join(format!("smartcon-cgparse-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("cg.out");
        std::fs::write(&p, "desc: I1 cache: 32768 B\ncmd: ls\nevents: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw\nfl=x\n1 2 3\nsummary: 100 5 4 40 3 2 20 1 1\n").unwrap();
        let v = parse_cachegrind(&p).unwrap();
        assert_eq!(v[0], ("Ir".to_string(), 100));
        assert_eq!(v.iter().find(|(n, _)| n == "DLmw").unwrap().1, 1);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
