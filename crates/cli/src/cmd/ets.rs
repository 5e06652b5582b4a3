//! `smartcon ets`: the elastic-time-slicing study (Jammula et al., seeds/003) on the
//! trace-driven simulator, and `smartcon ets crosscheck` against valgrind's cachegrind.
//!
//! The study runs every task of the suite once per uniform slice (UTS; 2.5, 5 and 10 ms by
//! default, `--slices`) and once with ETS (Table I), each time as the paper's "application
//! of interest" whose co-runners keep 2.5 ms slices, and prints per task: CPI per uniform
//! slice normalised to UTS-10 (Fig. 3), IPC normalised to UTS-2.5 (Fig. 6a),
//! the slices ETS gave (Fig. 6b), the latency between consecutive schedules of a co-runner
//! (Fig. 8) and the error of the 1/16-sampled estimate against the exact count (Fig. 9).
//! A sweep then counts CS misses per LLC size (1, 2, 4 MiB) and policy (Sec. VI) under
//! UTS-2.5 with a quarter of the instructions. The model and every interpretation are in
//! `smartcon_cachesim::sched` and docs/cachesim-ets.md.
//!
//! `smartcon ets shared` is Fig. 9's experiment: two cores, each with its own L1 and L2,
//! share one LLC (4 MiB by default) with an owner tag per line, and the CS misses of each
//! sharer are estimated with one ATD and a counter per sharer, against the exact count
//! (`smartcon_cachesim::shared`).
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
use smartcon_cachesim::shared::{self as shared_study, Partition, SharedPlan, SharedRecord, SharedSummaryRecord};
use smartcon_cachesim::study::{simulate, CrosscheckRecord};
use smartcon_util::units::parse_size;

use crate::cmd::cachesim::{parse_geometry, parse_line, parse_policy};
use crate::common;
use smartcon_report::ets as ets_report;

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
    /// Fig. 9: pairs of tasks on two cores sharing one LLC, CS-miss estimation error per
    /// sharer, with the ways split between the sharers (the paper's) and with one global LRU.
    Shared(SharedArgs),
}

#[derive(clap::Args)]
struct SharedArgs {
    /// Groups of tasks sharing one LLC, TASK+TASK, comma-separated (tasks as in `ets
    /// --tasks`, trace:PATH included); default: four pairs of the eight-task suite.
    #[arg(long)]
    pairs: Option<String>,
    /// How the sharers divide the LLC: ways (each its half of the ways, LRU within: the
    /// paper's), global (one LRU over all ways) or both.
    #[arg(long, default_value = "both")]
    partition: String,
    /// The shared LLC's size (16-way, 64-byte lines); the paper's Fig. 9 uses 4 MB.
    #[arg(long, default_value = "4m")]
    llc: String,
    /// Instructions per sharer.
    #[arg(long, default_value_t = 50_000_000)]
    instructions: u64,
    /// The uniform slice of both cores, in ms.
    #[arg(long, default_value = "2.5")]
    slice: String,
    /// Sample one set in 2^N for the estimator (4 = 1/16 as in the paper: 256 of 4096 sets).
    #[arg(long, default_value_t = 4)]
    sample_shift: u32,
    /// Worker threads, at least 1 (default: all CPUs).
    #[arg(long)]
    threads: Option<std::num::NonZeroUsize>,
    /// JSON Lines on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Write results.jsonl and fig9_shared_error.svg into this directory (must be empty or
    /// absent; its parent must exist).
    #[arg(long, value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
    out: Option<PathBuf>,
}

#[derive(clap::Args)]
struct StudyArgs {
    /// Tasks as KIND:SIZE, comma-separated (kinds: stream, loop, random, phased, hotcold),
    /// or trace:PATH, a captured trace (`smartcon trace` file or lackey --trace-mem=yes
    /// text) that runs until it ends or the instruction budget does; default: the
    /// eight-task suite of docs/cachesim-ets.md.
    #[arg(long)]
    tasks: Option<String>,
    /// Uniform slices in ms, comma-separated (Fig. 3); 2.5 and 10 always run.
    #[arg(long, default_value = "2.5,5,10")]
    slices: String,
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
    /// Worker threads, at least 1 (default: all CPUs).
    #[arg(long)]
    threads: Option<std::num::NonZeroUsize>,
    /// JSON Lines on stdout instead of tables.
    #[arg(long)]
    json: bool,
    /// Write results.jsonl and SVG plots into this directory (must be empty or absent; its
    /// parent must exist).
    #[arg(long, value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
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
        Some(EtsCommand::Shared(a)) => shared(a),
        None => study(args.study),
    }
}

fn study(a: StudyArgs) -> Result<()> {
    let started = std::time::Instant::now();
    // Claimed before anything runs; the files are written beside it and moved in at the end.
    let out = a.out.as_deref().map(|d| crate::paths::out_dir("--out", d)).transpose()?;
    let tasks = match &a.tasks {
        None => TaskSpec::default_suite(),
        Some(list) => parse_tasks(list)?,
    };
    let plan = EtsPlan {
        tasks,
        policy: parse_policy(&a.policy)?,
        llc_size_bytes: parse_size(&a.llc).context("--llc")?,
        instructions: a.instructions.unwrap_or(if a.quick { 24_000_000 } else { 100_000_000 }),
        sample_shift: a.sample_shift,
        extra_slices_cycles: parse_slices(&a.slices)?,
        sweep: !a.no_sweep,
        threads: threads(a.threads),
    };
    plan.hierarchy()?;
    let bar = common::progress_bar(plan.runs() as u64, "ets");
    let results = ets::run(&plan, common::interrupt_flag(), &|| bar.inc(1));
    bar.finish_and_clear();
    let results = results?;
    let summary = ets::summary(&plan, &results, started.elapsed().as_nanos() as u64);
    // The results reach the terminal first: a report that cannot be written loses nothing.
    if a.json {
        for r in &results.tasks {
            common::emit_json(r)?;
        }
        for r in &results.sweep {
            common::emit_json(r)?;
        }
        common::emit_json(&summary)?;
    } else {
        print!("{}", ets_report::tables(&results.tasks, &results.sweep, &summary, plan.threads));
    }
    write_report(out, a.json, "plots", |dir| write_outputs(dir, &results.tasks, &results.sweep, &summary))
}

fn parse_tasks(list: &str) -> Result<Vec<TaskSpec>> {
    list.split(',')
        .enumerate()
        .map(|(i, t)| TaskSpec::parse(t.trim(), 1 + i as u64, |s| parse_size(s).ok()).map_err(anyhow::Error::from))
        .collect()
}

fn shared(a: SharedArgs) -> Result<()> {
    let started = std::time::Instant::now();
    let out = a.out.as_deref().map(|d| crate::paths::out_dir("--out", d)).transpose()?;
    let groups = match &a.pairs {
        None => SharedPlan::default_groups(),
        Some(list) => {
            let mut seed = 0u64;
            list.split(',')
                .map(|group| {
                    group
                        .split('+')
                        .map(|t| {
                            seed += 1;
                            TaskSpec::parse(t.trim(), seed, |s| parse_size(s).ok()).map_err(anyhow::Error::from)
                        })
                        .collect::<Result<Vec<_>>>()
                })
                .collect::<Result<Vec<_>>>()?
        }
    };
    let partitions = match a.partition.as_str() {
        "both" => Partition::ALL.to_vec(),
        p => vec![Partition::parse(p).with_context(|| format!("unknown --partition {p:?}: use ways, global or both"))?],
    };
    let slice_ms: f64 = a
        .slice
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v > 0.0)
        .with_context(|| format!("--slice {:?} is not a positive number of milliseconds", a.slice))?;
    let plan = SharedPlan {
        groups,
        partitions,
        llc_size_bytes: parse_size(&a.llc).context("--llc")?,
        instructions: a.instructions,
        slice_cycles: smartcon_cachesim::sched::ms_to_cycles(slice_ms),
        sample_shift: a.sample_shift,
        threads: threads(a.threads),
    };
    plan.config()?;
    let bar = common::progress_bar(plan.runs() as u64, "ets shared");
    let records = shared_study::run_plan(&plan, common::interrupt_flag(), &|| bar.inc(1));
    bar.finish_and_clear();
    let records = records?;
    let summaries = shared_study::summaries(&plan, &records, started.elapsed().as_nanos() as u64);
    if a.json {
        for r in &records {
            common::emit_json(r)?;
        }
        for s in &summaries {
            common::emit_json(s)?;
        }
    } else {
        print!("{}", ets_report::shared_tables(&records, &summaries, plan.threads));
    }
    write_report(out, a.json, "fig9_shared_error.svg", |dir| write_shared_outputs(dir, &records, &summaries))
}

/// `--threads`, or every CPU the machine has.
fn threads(flag: Option<std::num::NonZeroUsize>) -> usize {
    flag.map(|n| n.get()).unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1))
}

/// After the results reached the terminal: an interrupted run writes no report; otherwise
/// `write` fills the claimed `--out` directory, which is then moved into place. `plots`
/// names what is written beside results.jsonl, for the closing line.
fn write_report(
    out: Option<smartcon_util::paths::OutDir>,
    json: bool,
    plots: &str,
    write: impl FnOnce(&Path) -> Result<()>,
) -> Result<()> {
    if common::interrupted() {
        anyhow::bail!("interrupted; the report directory was not written");
    }
    if let Some(out) = out {
        write(out.dir()).map_err(|e| out.wrap(&format!("cannot write the report: {e:#}")))?;
        let dir = out.commit()?;
        if !json {
            println!("wrote results.jsonl and {plots} to {}", dir.display());
        }
    }
    Ok(())
}

fn write_shared_outputs(dir: &Path, records: &[SharedRecord], summaries: &[SharedSummaryRecord]) -> Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("results.jsonl"))?);
    jsonl(&mut f, records)?;
    jsonl(&mut f, summaries)?;
    std::io::Write::flush(&mut f)?;
    Ok(ets_report::shared_plot(dir, records)?)
}

/// One JSON line per record.
fn jsonl<T: serde::Serialize>(f: &mut impl std::io::Write, records: &[T]) -> Result<()> {
    for r in records {
        serde_json::to_writer(&mut *f, r)?;
        f.write_all(b"\n")?;
    }
    Ok(())
}

/// `--slices 2.5,5,10`: milliseconds, as cycles at 4 GHz (the range is the plan's check).
fn parse_slices(text: &str) -> Result<Vec<u64>> {
    text.split(',')
        .map(|t| {
            let ms: f64 = t.trim().parse().ok().filter(|v: &f64| v.is_finite() && *v > 0.0).with_context(|| {
                format!("--slices {text:?}: {:?} is not a positive number of milliseconds", t.trim())
            })?;
            Ok(smartcon_cachesim::sched::ms_to_cycles(ms))
        })
        .collect()
}

fn write_outputs(dir: &Path, tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord) -> Result<()> {
    write_jsonl(dir, tasks, sweep, s)?;
    Ok(ets_report::plots(dir, tasks, sweep, s)?)
}

fn write_jsonl(dir: &Path, tasks: &[TaskRecord], sweep: &[SweepRecord], s: &SummaryRecord) -> Result<()> {
    let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join("results.jsonl"))?);
    jsonl(&mut f, tasks)?;
    jsonl(&mut f, sweep)?;
    jsonl(&mut f, std::slice::from_ref(s))?;
    std::io::Write::flush(&mut f)?;
    Ok(())
}

/// Removes the directory it names when dropped.
fn crosscheck(a: CrosscheckArgs) -> Result<()> {
    let line = parse_line(&a.line)?;
    let l1 = parse_geometry("--l1", &a.l1, line)?;
    let ll = parse_geometry("--ll", &a.ll, line)?;
    valgrind_version()?;
    let config =
        HierarchyConfig { l1i: l1, l1d: l1, l2: None, llc: ll, timing: Default::default(), mode: Mode::Cachegrind };
    config.validate()?;
    // Removed when dropped: on success, on error and on a Ctrl-C that ends the run.
    let dir = tempfile::Builder::new()
        .prefix("smartcon-crosscheck-")
        .tempdir()
        .with_context(|| format!("cannot create a directory in {}", std::env::temp_dir().display()))?;
    let trace = dir.path().join("trace.sct");
    capture(&a.program, &trace)?;
    let ours = simulate(config, PolicyKind::Lru, &trace, common::interrupt_flag())?;
    let cg = run_cachegrind(&a.program, &l1, &ll, &dir.path().join("cachegrind.out"))?;
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
