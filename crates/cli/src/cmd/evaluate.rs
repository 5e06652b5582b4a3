//! `smartcon evaluate`: the SmartCon study (Sec. 7) on this machine's devices, in one
//! command. The study itself is `smartcon_study::evaluate` (plan, turn loop, merges,
//! criteria); this module turns flags into a plan and renders what comes back: the report
//! directory with results.jsonl, summary.md, SVG plots in the manner of Fig. 8-11 and
//! Table VI and report.html (all of it on one page). docs/evaluate.md says how to read them.
//!
//! Non-goals: anything measured or judged here; the library does both.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::placement::Placement;
use smartcon_engine::profile::HostWaitCost;
use smartcon_report::evaluate::{
    criteria_html, first_screen_html, headline, profile_row, subtitle, summary_body_md, summary_head_md, write_plots,
    Header,
};
use smartcon_report::verdict_map::{self, VerdictMap};
use smartcon_study::evaluate::fleet::FleetHost;
use smartcon_study::evaluate::plan::{self, Plan, PlanOptions, Preset};
use smartcon_study::evaluate::{host, judge};
use smartcon_study::evaluate::{loadavg, run, Cell, Load, MachineRecord, ProfileRecord, Workload};
use smartcon_study::polling::{Study, StudyPlan};

use crate::common::{interrupt_flag, interrupted, on_event, progress_bar, smartcon_home};
use crate::engine_setup::*;

#[derive(Args, Debug)]
pub struct EvaluateArgs {
    /// Which study: smartcon (the SmartCon paper's, the default), acs (seed 001, the
    /// adaptive context switch on ext2 over a loop and a zram device; root; docs/fidelity.md)
    /// or window (SmartCon Sec. 4.2: the System Monitor's window from 50 to 1,000 ms against
    /// a square wave of crunchers; prints a table; --quick, --cpu-workers).
    #[arg(long, default_value = "smartcon", value_parser = ["smartcon", "acs", "window"])]
    pub study: String,
    /// acs: the paper's 1000 repetitions of every cell (hours).
    #[arg(long, conflicts_with_all = ["quick", "tiny"])]
    pub full: bool,
    /// acs: comma-separated schedulers set on the loop device (none, bfq, mq-deadline, kyber).
    #[arg(long, value_delimiter = ',')]
    pub schedulers: Option<Vec<String>>,
    /// acs: read each repetition of the file in this many pieces, interleaved piece by piece
    /// with the other strategies and schedulers and paired piece by piece (default 16;
    /// --quick 4; --full 1, the paper's whole-file reads).
    #[arg(long)]
    pub pieces: Option<u32>,
    /// acs: within a piece, the strategies take turns every this many reads, so they share
    /// the machine's state millisecond by millisecond (default 64; 0 reads a piece in one
    /// go, as --full does).
    #[arg(long)]
    pub slice_reads: Option<u64>,
    /// Comma-separated targets (default: emu:optane, emu:nvme, emu:sata-ssd (the X25-M model of SmartCon Fig. 15), a tmp file on /var/tmp, a loop device over a file and a zram device, each of the --file-size; the loop and zram devices are created for the run and removed after, which needs root; --quick: emu:optane, the tmp file and zram). With --study acs: loop, zram or loop,zram, the devices it creates.
    #[arg(long)]
    pub targets: Option<String>,
    /// Comma-separated loads: bm-only, cpu-intensive, io-intensive.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| Load::parse(s).map_err(|e| e.message))]
    pub loads: Option<Vec<Load>>,
    /// Comma-separated workloads: iozone-rand-read, iozone-rand-write, iozone-seq-read,
    /// iozone-seq-write, fileserver, mailserver, multistreamread, singlestreamread, postmark.
    #[arg(long, value_delimiter = ',', value_parser = |s: &str| Workload::parse(s).map_err(|e| e.message))]
    pub workloads: Option<Vec<Workload>>,
    /// The directory postmark creates its files in (default: the directory of each file
    /// target, e.g. DIR of tmp:SIZE@DIR; targets without a file system skip postmark).
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    pub postmark_dir: Option<PathBuf>,
    /// Comma-separated record sizes.
    #[arg(long, value_delimiter = ',', value_parser = io_size_value)]
    pub sizes: Option<Vec<u64>>,
    /// Comma-separated strategies; block is always run (the baseline).
    #[arg(long, value_delimiter = ',', value_parser = strategy_value, default_value = "block,spin,sync,smart,paper")]
    pub strategies: Vec<StrategyChoice>,
    /// Time per cell.
    #[arg(long, value_parser = duration_value)]
    pub duration: Option<u64>,
    /// The IOZone file size (the temporary file's size; the paper uses 256 MiB).
    #[arg(long, value_parser = device_size_value)]
    pub file_size: Option<u64>,
    /// Number crunchers of the CPU-intensive load (default: one per CPU).
    #[arg(long)]
    pub cpu_workers: Option<u32>,
    /// I/O workers of the IO-intensive load.
    #[arg(long, default_value_t = 4)]
    pub io_workers: u32,
    /// Run the IO-intensive load's workers as separate processes (files and block devices;
    /// emulated targets keep threads): another program's I/O on the same disk, which smart
    /// sees only through the kernel's count of the device's queue.
    #[arg(long)]
    pub io_workers_as_processes: bool,
    /// The paper's loads and sweep (Sec. 7.1, Fig. 9 and 17): ten number crunchers, the
    /// I/O workers as separate processes, and IOZone sequential reads at 4K-512K in powers
    /// of two (unless --cpu-workers, --workloads or --sizes say otherwise).
    #[arg(long)]
    pub paper_loads: bool,
    /// Turns per cell: each strategy's time is split into this many pieces, interleaved
    /// with the other strategies in a balanced order (default under a load: at least 8, a
    /// whole number of cycles of the balanced order, 10 for the default five strategies;
    /// 4 without a load; 1 with --tiny).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: Option<u32>,
    /// The report directory (must not exist or be empty; its parent must exist).
    #[arg(long, default_value = "smartcon-report", value_name = "OUT_DIR", value_hint = clap::ValueHint::DirPath)]
    pub out: PathBuf,
    /// A smaller matrix that finishes within 2 minutes.
    #[arg(long, conflicts_with = "tiny")]
    pub quick: bool,
    /// A tiny matrix on a small emulated device (seconds; what CI runs).
    #[arg(long)]
    pub tiny: bool,
    /// Allow writing to block devices smartcon did not create.
    #[arg(long)]
    pub destructive: bool,
    /// Where the I/O threads run, for every strategy alike: irq (the CPUs that take the
    /// device's completion interrupts; unpinned where there is none), away, any (the
    /// scheduler decides), or a CPU list. See docs/evaluate.md for why it is pinned.
    #[arg(long, default_value = "irq", value_parser = placement_value)]
    pub io_cpus: Placement,
    /// Skip the polling study (block, spin, hybrid, dip, fixed-interval polling, smart-hybrid
    /// and the peers' rules half-mean, iopoll-hybrid and pas on emulated devices; dip and
    /// hybrid against the poll-interval sweep on a device whose polls cost channel time;
    /// about 20 s).
    #[arg(long)]
    pub skip_polling: bool,
    /// For `smartcon fleet`'s driver: print one `fleet_host` record naming this Ray node id
    /// on standard output (the human lines go to standard error).
    #[arg(long, hide = true)]
    pub fleet_host: Option<String>,
}

fn plan_of(args: &EvaluateArgs) -> Result<Plan> {
    let preset = match (args.quick, args.tiny) {
        (_, true) => Preset::Tiny,
        (true, _) => Preset::Quick,
        _ => Preset::Full,
    };
    let options = PlanOptions {
        preset,
        targets: args.targets.clone(),
        loads: args.loads.clone(),
        workloads: args.workloads.clone(),
        sizes: args.sizes.clone(),
        strategies: args.strategies.clone(),
        duration_ns: args.duration,
        file_size_bytes: args.file_size,
        cpu_workers: args.cpu_workers,
        io_workers: args.io_workers,
        io_workers_as_processes: args.io_workers_as_processes,
        paper_loads: args.paper_loads,
        rounds: args.rounds,
        postmark_dir: args.postmark_dir.clone(),
        placement: args.io_cpus.clone(),
    };
    plan::plan(&options).map_err(engine_err)
}

fn line(out: &mut impl Write, record: &impl serde::Serialize) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, record)?;
    out.write_all(b"\n")
}

pub fn run(args: EvaluateArgs) -> Result<()> {
    if args.study == "acs" {
        return super::evaluate_acs::run(&args);
    }
    if args.study == "window" {
        return super::evaluate_window::run(&args);
    }
    if args.full || args.schedulers.is_some() || args.pieces.is_some() || args.slice_reads.is_some() {
        bail!("--full, --schedulers, --pieces and --slice-reads belong to --study acs");
    }
    // Claimed before anything runs; the files are written beside it and moved in at the end.
    let out = crate::paths::out_dir("--out", &args.out)?;
    if let Some(d) = &args.postmark_dir {
        anyhow::ensure!(d.is_dir(), "--postmark-dir {}: not a directory", smartcon_util::paths::escape(d));
    }
    let plan = plan_of(&args)?;
    // In logs: a line per finished load and target (the first two words of a turn's name).
    let bar = progress_bar(0, "evaluate").grouped(2);
    let mut session = run::open(&plan, args.destructive, &mut on_event(&bar)).map_err(engine_err)?;
    if session.opened.is_empty() {
        bail!("no target left to evaluate ({})", session.notes.join("; "));
    }
    let loadavg_before = loadavg();
    let started = std::time::Instant::now();
    let monitor = start_monitor(None)?;
    let host = smartcon_home().join("host.json");
    run::probe_missing(&plan, &mut session, &monitor, Some(&host), interrupt_flag(), &mut on_event(&bar))
        .map_err(engine_err)?;
    let jsonl_path = out.dir().join("results.jsonl");
    let file = std::fs::File::create(&jsonl_path).with_context(|| format!("create {}", jsonl_path.display()))?;
    let mut jsonl = std::io::BufWriter::new(file);
    let mach = MachineRecord::here();
    line(&mut jsonl, &mach).map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
    for o in &session.opened {
        line(&mut jsonl, &ProfileRecord { record_type: "profile", target: o.target.label(), profile: &o.profile })
            .map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
    }
    // A write error names the report's own path, not the temporary directory's.
    let jsonl_shown = out.path().join("results.jsonl");
    let mut write_cell = |c: &Cell| {
        line(&mut jsonl, c)
            .map_err(|e| smartcon_engine::error::Error::io(smartcon_engine::error::ErrorKind::Setup, &jsonl_shown, e))
    };
    let cells = run::run(&plan, &session, &monitor, interrupt_flag(), &mut on_event(&bar), &mut write_cell)
        .map_err(engine_err)?;
    bar.finish_and_clear();
    let study = if args.skip_polling || interrupted() {
        None
    } else {
        Some(polling_study(&args, &plan, &monitor, &mut jsonl)?)
    };
    monitor.stop();
    let infos: Vec<_> = session.opened.iter().map(|o| o.info()).collect();
    let overshoots = smartcon_engine::clock::sleep_overshoots_ns(host::SLEEP_ASKED_NS, host::SLEEP_COUNT);
    let mut host_record = host::HostRecord::of(&cells, &infos, HostWaitCost::stored().as_ref(), &overshoots);
    // `smartcon host`'s model when stored (a ctx-only host.json has none): named, not measured.
    host_record.host_model = smartcon_engine::host::HostModel::load(&host).ok();
    line(&mut jsonl, &host_record).map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
    let criteria = judge::criteria(&cells, &infos);
    for c in &criteria {
        line(&mut jsonl, c).map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
    }
    jsonl.flush().map_err(|e| out.wrap(&format!("results.jsonl: {e}")))?;
    let profiles: Vec<Vec<String>> = session.opened.iter().map(profile_row).collect();
    let header = Header {
        machine: &mach,
        loadavg: (loadavg_before, loadavg()),
        secs: started.elapsed().as_secs_f64(),
        notes: &session.notes,
        interrupted: interrupted(),
        host: &host_record,
    };
    let map = VerdictMap::of(&cells);
    let head = summary_head_md(&header, &cells, &criteria, &map);
    let mut body = summary_body_md(&header, &plan, &profiles, &cells);
    let top = first_screen_html(&header, &cells, &criteria, &map) + &criteria_html(&criteria);
    let bottom = format!(
        "<h2 id=\"rounds\">Every cell of the map, round by round</h2>\n{}",
        verdict_map::rounds_html(&map, &cells)
    );
    let subtitle_text = subtitle(&header, &plan, &cells);
    let fleet = args.fleet_host.as_ref().map(|node_id| {
        let profiles: Vec<_> = session.opened.iter().map(|o| (o.target.label().to_string(), &o.profile)).collect();
        let pareto = judge::pareto(&cells);
        let name = smartcon_study::evaluate::fleet::host_name();
        let ns = started.elapsed().as_nanos() as u64;
        FleetHost::of(node_id, &name, &mach, &host_record, &pareto, &profiles, cells.len(), ns)
    });
    drop(session);
    // The human lines: on standard output, or under the fleet's driver on standard error
    // (its record is standard output).
    let say = |text: &str| {
        if fleet.is_some() {
            eprintln!("{text}")
        } else {
            println!("{text}")
        }
    };
    // The results reach the terminal before the report is written: a full disk loses nothing.
    say(&headline(&cells, &criteria));
    say(&host_record.text());
    let mut write_report = || -> Result<usize> {
        let mut plots = write_plots(out.dir(), &plan, &cells)?;
        plots += verdict_map::write_svg(&out.dir().join("verdict-map.svg"), &map)?;
        if let Some(study) = &study {
            body += &smartcon_report::polling::study_md(study);
            plots += smartcon_report::polling::study_plots(out.dir(), study)?;
        }
        std::fs::write(out.dir().join("summary.md"), head.clone() + &body)?;
        let page = smartcon_report::html::Page {
            title: "smartcon evaluate",
            subtitle: &subtitle_text,
            top: &top,
            body_md: &body,
            bottom: &bottom,
        };
        smartcon_report::html::write_report_html(out.dir(), &page)?;
        Ok(plots)
    };
    let plots = write_report().map_err(|e| out.wrap(&format!("cannot write the report: {e:#}")))?;
    let dir = out.commit()?;
    let secs = started.elapsed().as_secs_f64();
    say(&format!("report: {} (report.html, results.jsonl, summary.md, {plots} plots) in {secs:.0} s", dir.display()));
    if interrupted() {
        say("(interrupted: the report holds the cells measured so far)");
    }
    match fleet {
        Some(record) => crate::common::emit_json(&record),
        None => Ok(()),
    }
}

/// The polling study (smartcon's polling strategies and the peers' rules on emulated devices).
fn polling_study(
    args: &EvaluateArgs,
    plan: &Plan,
    monitor: &smartcon_engine::monitor::SystemMonitor,
    jsonl: &mut impl Write,
) -> Result<Study> {
    let study_plan = StudyPlan::for_evaluate(args.tiny, plan.duration_ns);
    let bar = progress_bar(study_plan.runs() as u64, "polling");
    // The study says what runs next: each call finishes the run before it.
    let mut running = false;
    let study = smartcon_study::polling::run_study(&study_plan, monitor, interrupt_flag(), |what| {
        if std::mem::replace(&mut running, true) {
            bar.inc(1);
        }
        bar.set_message(what.to_string());
    })
    .map_err(engine_err)?;
    if running && !interrupted() {
        bar.inc(1);
    }
    bar.finish_and_clear();
    for r in &study.runs {
        line(jsonl, r)?;
    }
    for r in &study.verdicts {
        line(jsonl, r)?;
    }
    for r in &study.sweeps {
        line(jsonl, r)?;
    }
    for r in &study.checks {
        line(jsonl, r)?;
    }
    for r in study.merge_records() {
        line(jsonl, &r)?;
    }
    Ok(study)
}
