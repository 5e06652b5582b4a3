//! `smartcon evaluate`: the SmartCon study (Sec. 7) on this machine's devices, in one
//! command: targets x loads x workloads x sizes x strategies, one record per cell, and a
//! report directory (results.jsonl, summary.md, SVG plots in the manner of Fig. 8-11 and
//! Table VI).
//!
//! Design:
//! - the loop order is load -> target -> workload -> size -> strategy, so the strategies of
//!   one cell run back to back under the same load and the gains are ratios taken within
//!   one run of a shared machine;
//! - loads come from `smartcon_workloads::load`: forked number crunchers (one per CPU) or
//!   four I/O workers on the same target on the mainstream path. Neither is registered with
//!   the System Monitor, so `smart` sees them as load. Each cell records what the co-runner
//!   did during the cell (work rate, user/sys CPU, iowait), which is Table VI;
//! - every strategy's I/O threads run on the same CPUs: by default those that take the
//!   device's completion interrupts (`--io-cpus`; `smartcon_engine::placement`), and the
//!   strategies take turns in a balanced order (`common::turn_order`);
//! - after a load starts, the run waits for more than one System Monitor window before
//!   measuring, so `smart` sees the load it is measured under;
//! - targets that lack a stored profile and are not emulated get a short probe first (and
//!   the profile is stored, as `smartcon probe` would), so `smart` runs on measured
//!   thresholds; emulated presets use their model's built-in ones.
//!
//! Non-goals: statistical repetition within a run (run twice and compare), and the paper's
//! exact benchmark binaries (the workloads are "-like": same shape, documented parameters).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde::Serialize;
use smartcon_engine::decision::DeviceClass;
use smartcon_engine::devemu::units::{format_ns, format_size};
use smartcon_engine::job::{run_job, JobSpec, StrategyChoice, TURN_WARMUP_IOS};
use smartcon_engine::placement::{format_cpu_list, Placement};
use smartcon_engine::profile::{self, profile_path, Profile};
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::{self, OpenOptions, Target, TargetSpec};
use smartcon_engine::wait::PollParams;
use smartcon_workloads::load::{proc_stat_iowait_total_ns, CpuLoad, IoLoad, LoadSnapshot};
use smartcon_workloads::postmark::{PostmarkCounts, PostmarkSpec};
use smartcon_workloads::{blockdev, workload};

use crate::common::{interrupt_flag, interrupted, prepare_out_dir, progress_bar, turn_order};
use crate::engine_setup::*;
use crate::plot::{bar_chart, line_chart, BarChart, LineChart, Series};
use crate::table::Table;

pub const LOADS: [&str; 3] = ["bm-only", "cpu-intensive", "io-intensive"];
/// IOZone-like workloads: one file, one record size per cell.
/// How long a load runs before a cell is measured: more than the System Monitor window.
pub const SETTLE_NS: u64 = 250_000_000;
/// Turns of a postmark cell at most: each turn builds and removes a pool of files.
pub const POSTMARK_ROUNDS_MAX: u32 = 3;
/// Cells in one evaluation at most (a mistake beyond that, not a study).
pub const CELLS_MAX: usize = 20_000;

#[derive(Args, Debug)]
pub struct EvaluateArgs {
    /// Comma-separated targets (default: emu:optane, emu:nvme and a tmp file on /var/tmp).
    #[arg(long)]
    pub targets: Option<String>,
    /// Comma-separated loads: bm-only, cpu-intensive, io-intensive.
    #[arg(long)]
    pub loads: Option<String>,
    /// Comma-separated workloads: iozone-rand-read, iozone-rand-write, iozone-seq-read,
    /// iozone-seq-write, fileserver, mailserver, multistreamread, singlestreamread, postmark.
    #[arg(long)]
    pub workloads: Option<String>,
    /// The directory postmark creates its files in (default: the directory of each file
    /// target, e.g. DIR of tmp:SIZE@DIR; targets without a file system skip postmark).
    #[arg(long)]
    pub postmark_dir: Option<PathBuf>,
    /// Comma-separated record sizes.
    #[arg(long)]
    pub sizes: Option<String>,
    /// Comma-separated strategies; block is always run (the baseline).
    #[arg(long, default_value = "block,spin,sync,smart")]
    pub strategies: String,
    /// Time per cell.
    #[arg(long)]
    pub duration: Option<String>,
    /// The IOZone file size (the temporary file's size; the paper uses 256 MiB).
    #[arg(long)]
    pub file_size: Option<String>,
    /// Number crunchers of the CPU-intensive load (default: one per CPU).
    #[arg(long)]
    pub cpu_workers: Option<u32>,
    /// I/O workers of the IO-intensive load.
    #[arg(long, default_value_t = 4)]
    pub io_workers: u32,
    /// Turns per cell: each strategy's time is split into this many pieces, interleaved
    /// with the other strategies in a balanced order (default: 8 under a load, 2 without;
    /// 1 with --tiny).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// The report directory (must not exist or be empty).
    #[arg(long, default_value = "smartcon-report")]
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
    #[arg(long, default_value = "irq")]
    pub io_cpus: String,
    /// Skip the polling study (hybrid, fixed-interval and half-mean polling on emulated
    /// devices, and the poll-interval sweep; about 10 s).
    #[arg(long)]
    pub skip_polling: bool,
}

/// The matrix after defaults and flags.
#[derive(Debug, Clone)]
struct Plan {
    targets: Vec<String>,
    loads: Vec<String>,
    workloads: Vec<String>,
    sizes: Vec<u64>,
    strategies: Vec<StrategyChoice>,
    duration_ns: u64,
    cpu_workers: u32,
    io_workers: u32,
    probe_ns: u64,
    /// Each cell's time is split into this many turns, strategies interleaved (under a
    /// load; see `rounds_bm_only`).
    rounds: u32,
    /// The same without a load, where there is no co-runner's luck to average and every
    /// switch between strategies costs a transition (see `Plan::rounds_for`).
    rounds_bm_only: u32,
    postmark_dir: Option<PathBuf>,
    postmark_files: u32,
    placement: Placement,
}

fn plan(args: &EvaluateArgs) -> Result<Plan> {
    let (targets, workloads, sizes, duration, file_size) = if args.tiny {
        ("emu:optane,size=16m", "iozone-rand-read,iozone-seq-write,mailserver", "4k,64k", "40ms", "16m")
    } else if args.quick {
        ("emu:optane,tmp:{FILE}@/var/tmp,zram:{FILE}", "iozone-rand-read", "4k,64k,256k", "500ms", "64m")
    } else {
        (
            "emu:optane,emu:nvme,tmp:{FILE}@/var/tmp,loop:{FILE},zram:{FILE}",
            "iozone-rand-read,iozone-rand-write,iozone-seq-read,iozone-seq-write,fileserver,mailserver,multistreamread,singlestreamread,postmark",
            "4k,16k,64k,256k",
            "300ms",
            "256m",
        )
    };
    let file_size = args.file_size.clone().unwrap_or_else(|| file_size.to_string());
    parse_size_arg("file-size", &file_size)?;
    let targets = args.targets.clone().unwrap_or_else(|| targets.replace("{FILE}", &file_size));
    let loads = split_list("loads", args.loads.as_deref().unwrap_or("bm-only,cpu-intensive,io-intensive"))?;
    for l in &loads {
        if !LOADS.contains(&l.as_str()) {
            bail!("unknown load {l:?}; use {}", LOADS.join(", "));
        }
    }
    let workloads = split_list("workloads", args.workloads.as_deref().unwrap_or(workloads))?;
    for w in &workloads {
        if !workload::is_known(w) {
            bail!("unknown workload {w:?}; use {}, {}", workload::NAMES.join(", "), workload::POSTMARK);
        }
    }
    let mut sizes: Vec<u64> = split_list("sizes", args.sizes.as_deref().unwrap_or(sizes))?
        .iter()
        .map(|s| parse_size_arg("sizes", s))
        .collect::<Result<_>>()?;
    sizes.sort_unstable();
    sizes.dedup();
    let mut strategies: Vec<StrategyChoice> =
        split_list("strategies", &args.strategies)?.iter().map(|s| parse_strategy(s)).collect::<Result<_>>()?;
    if !strategies.iter().any(|s| s.name() == "block") {
        strategies.insert(0, parse_strategy("block")?);
    }
    strategies.dedup_by_key(|s| s.name());
    let duration_ns = parse_duration_arg("duration", args.duration.as_deref().unwrap_or(duration))?;
    if duration_ns > 600_000_000_000 {
        bail!("--duration must be at most 10 min per cell");
    }
    let cpu_workers = args.cpu_workers.unwrap_or(if args.tiny { 1 } else { profile::online_cpus() });
    if cpu_workers == 0 || cpu_workers > smartcon_workloads::load::CPU_WORKERS_MAX {
        bail!("--cpu-workers must be 1..={}", smartcon_workloads::load::CPU_WORKERS_MAX);
    }
    if args.io_workers == 0 || args.io_workers > smartcon_workloads::load::IO_WORKERS_MAX {
        bail!("--io-workers must be 1..={}", smartcon_workloads::load::IO_WORKERS_MAX);
    }
    if let Some(d) = &args.postmark_dir {
        smartcon_workloads::postmark::check_dir(d).map_err(engine_err).context("--postmark-dir")?;
    }
    let targets = split_targets(&targets)?;
    let cells = targets.len() * loads.len() * workloads.len() * sizes.len() * strategies.len();
    if cells > CELLS_MAX {
        bail!("{cells} cells is more than {CELLS_MAX}; narrow the matrix");
    }
    Ok(Plan {
        targets,
        loads,
        workloads,
        sizes,
        strategies,
        duration_ns,
        cpu_workers,
        io_workers: if args.tiny { args.io_workers.min(2) } else { args.io_workers },
        probe_ns: if args.quick || args.tiny { 60_000_000 } else { 150_000_000 },
        // Under a load, eight short turns rather than three long ones, so the co-runner's
        // scheduling luck averages out within a cell (one run each, smart/block under the
        // CPU-intensive load: lowest 0.918 with 3 rounds, 0.962 with 9; docs/evaluate.md).
        // Eight, a multiple of the default four strategies, completes the balanced order
        // twice.
        rounds: args.rounds.unwrap_or(if args.tiny { 1 } else { 8 }).clamp(1, 100),
        // Without a load, two turns: a spinner that starts right after a blocking turn runs
        // about 12% slower for its first tens of milliseconds (the host raises the vCPU's
        // clock as its utilization climbs; docs/evaluate.md), so short turns would measure
        // that transition rather than spinning.
        rounds_bm_only: args.rounds.unwrap_or(if args.tiny { 1 } else { 2 }).clamp(1, 100),
        postmark_dir: args.postmark_dir.clone(),
        postmark_files: if args.tiny { 50 } else { smartcon_workloads::postmark::PostmarkSpec::default().files },
        placement: parse_placement(&args.io_cpus)?,
    })
}

/// Runs `f` on a thread of its own pinned to `cpus` (postmark does its I/O on the calling
/// thread, and this one must stay unpinned).
fn on_cpus<T: Send>(
    cpus: Option<&[usize]>,
    f: impl FnOnce() -> Result<T, smartcon_engine::error::Error> + Send,
) -> Result<T, smartcon_engine::error::Error> {
    let Some(cpus) = cpus else { return f() };
    std::thread::scope(|s| {
        s.spawn(|| {
            smartcon_engine::placement::pin_current_thread(cpus)?;
            f()
        })
        .join()
        .expect("postmark thread panicked")
    })
}

impl Plan {
    /// Turns per cell under `load`.
    fn rounds_for(&self, load: &str, is_postmark: bool) -> u32 {
        let r = if load == "bm-only" { self.rounds_bm_only } else { self.rounds };
        if is_postmark {
            r.min(POSTMARK_ROUNDS_MAX)
        } else {
            r
        }
    }
}

/// Splits a target list on commas, keeping `emu:PRESET,key=value` options with their preset.
fn split_targets(text: &str) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for item in split_list("targets", text)? {
        match out.last_mut() {
            Some(prev) if prev.starts_with("emu:") && !item.contains(':') && item.contains('=') => {
                prev.push(',');
                prev.push_str(&item);
            }
            _ => out.push(item),
        }
    }
    Ok(out)
}

/// What the co-running load did during one cell.
#[derive(Debug, Clone, Serialize)]
pub struct Corunner {
    /// `cpu` (crunch batches) or `io` (I/Os on the mainstream path).
    pub kind: &'static str,
    pub workers: u32,
    pub real_ns: u64,
    pub work: u64,
    pub work_per_s: f64,
    pub user_ns: u64,
    pub sys_ns: u64,
    /// Machine-wide iowait over the cell, percent of all CPU time.
    pub iowait_pct: f64,
}

#[derive(Debug, Clone, Serialize)]
struct Cell {
    #[serde(flatten)]
    result: JobResult,
    load: String,
    workload: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    corunner: Option<Corunner>,
    /// Postmark only: transactions per second (the workload's figure of merit).
    #[serde(skip_serializing_if = "Option::is_none")]
    tps: Option<f64>,
    /// Postmark only: what the transactions did, and the directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    postmark: Option<PostmarkRecord>,
}

/// The postmark part of a cell's record.
#[derive(Debug, Clone, Serialize)]
struct PostmarkRecord {
    dir: String,
    #[serde(flatten)]
    counts: PostmarkCounts,
    size_bytes_min: u64,
    size_bytes_max: u64,
    block_bytes: u64,
    read_bias_pct: u32,
    create_bias_pct: u32,
}

/// A cell's figure of merit: transactions per second for postmark, else IOPS.
fn perf(c: &Cell) -> f64 {
    c.tps.unwrap_or(c.result.iops)
}

#[derive(Serialize)]
struct MachineRecord {
    #[serde(rename = "type")]
    record_type: &'static str,
    kernel: String,
    cpu_model: String,
    cpus: u32,
    note: &'static str,
}

#[derive(Serialize)]
struct ProfileRecord<'a> {
    #[serde(rename = "type")]
    record_type: &'static str,
    target: &'a str,
    #[serde(flatten)]
    profile: &'a Profile,
}

/// The first three fields of /proc/loadavg (1, 5 and 15 minutes).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|t| t.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn machine() -> MachineRecord {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    MachineRecord {
        record_type: "machine",
        kernel,
        cpu_model,
        cpus: profile::online_cpus(),
        note: "timings are from one run; the machine may have been shared",
    }
}

struct Opened {
    target: Box<dyn Target>,
    profile: Profile,
    span: u64,
    /// Created for this run (loop, zram): its probe profile is not stored, since the
    /// device name will belong to another device later.
    created: bool,
    name: String,
    /// Where postmark runs for this target: a directory on the same file system, or
    /// `None` when the target has none (emulated and raw block devices).
    postmark_dir: Option<PathBuf>,
    /// The CPUs this target's I/O threads are pinned to (`None`: unpinned).
    cpus: Option<Vec<usize>>,
}

/// A block device created for the run; dropping it removes the device.
enum Ramdisk {
    Loop(blockdev::LoopDevice),
    Zram(blockdev::ZramDevice),
    /// `loopfs:SIZE`: ext4 on a loop ramdisk; the target is a file of half the size in it,
    /// and postmark runs in its directory.
    LoopFs(blockdev::LoopFs, u64),
}

/// `loop:SIZE` and `zram:SIZE` create a device for the run (root only).
fn ramdisk(text: &str) -> Result<Option<Ramdisk>> {
    let (kind, size) = match text.split_once(':') {
        Some((k @ ("loop" | "zram" | "loopfs"), size)) => (k, parse_size_arg("targets", size)?),
        _ => return Ok(None),
    };
    Ok(Some(match kind {
        "loop" => Ramdisk::Loop(blockdev::LoopDevice::create(size).map_err(engine_err)?),
        "loopfs" => {
            // Half the device for the IOZone file leaves room for ext4 and postmark's pool.
            let file_bytes = (size / 2) / 4096 * 4096;
            Ramdisk::LoopFs(blockdev::LoopFs::create(size).map_err(engine_err)?, file_bytes)
        }
        _ => Ramdisk::Zram(blockdev::ZramDevice::create(size).map_err(engine_err)?),
    }))
}

fn open_targets(
    plan: &Plan,
    destructive: bool,
    ramdisks: &mut Vec<Ramdisk>,
    notes: &mut Vec<String>,
) -> Result<Vec<Opened>> {
    let writes = plan.workloads.iter().any(|w| workload::writes(w));
    let mut opened = Vec::new();
    // Targets without a file system, where postmark cannot run: one note for all.
    let mut no_fs: Vec<String> = Vec::new();
    for t in &plan.targets {
        let is_ramdisk = t.starts_with("loop:") || t.starts_with("zram:") || t.starts_with("loopfs:");
        if is_ramdisk {
            if let Some(why) = blockdev::unavailable_reason() {
                let note = format!("skipped target {t}: {why}");
                eprintln!("smartcon: note: {note}");
                notes.push(note);
                continue;
            }
        }
        let (spec, created) = match ramdisk(t)? {
            Some(r) => {
                let spec = match &r {
                    Ramdisk::Loop(l) => TargetSpec::Path(l.path().to_path_buf()),
                    Ramdisk::Zram(z) => TargetSpec::Path(z.path().to_path_buf()),
                    Ramdisk::LoopFs(fs, file_bytes) => {
                        TargetSpec::Temp { size_bytes: *file_bytes, dir: Some(fs.path().to_path_buf()) }
                    }
                };
                ramdisks.push(r);
                (spec, true)
            }
            None => (target::parse_target(t).map_err(engine_err)?, false),
        };
        if let TargetSpec::Path(p) = &spec {
            if p.is_dir() {
                bail!(
                    "target {} is a directory; give a file or block device, or tmp:SIZE@{} for a temporary file",
                    p.display(),
                    p.display()
                );
            }
        }
        let options = OpenOptions { write: writes, destructive, created_by_tool: created };
        let target = target::open(&spec, options).map_err(engine_err).with_context(|| format!("target {t}"))?;
        for w in target.warnings() {
            eprintln!("smartcon: warning: {w}");
        }
        let span = target.capacity_bytes().min(1 << 30);
        let phases: Vec<workload::Phase> = plan
            .workloads
            .iter()
            .flat_map(|w| workload::cells(w, &plan.sizes).unwrap_or_default())
            .flat_map(|c| c.phases)
            .collect();
        for ph in &phases {
            let bs = ph.bs_bytes;
            let mut js = JobSpec::new(ph.op, ph.pattern, bs, StrategyChoice::Smart);
            js.threads = ph.threads;
            js.span_bytes = Some(span);
            js.validate(target.as_ref())
                .map_err(engine_err)
                .with_context(|| format!("target {t} is too small or misaligned for the workload"))?;
            // The I/O load's workers each need room for a request too.
            if span < bs * plan.io_workers as u64 * 2 {
                bail!(
                    "target {t} ({}) is too small for {} I/O load workers of {}",
                    format_size(span),
                    plan.io_workers,
                    format_size(bs)
                );
            }
        }
        let profile = resolve_profile(target.as_ref(), None, true)?;
        let (cpus, why) = plan.placement.resolve(&target.device_id());
        if let Some(why) = why {
            eprintln!("smartcon: note: {why}");
        }
        let fs_dir = match &spec {
            TargetSpec::Temp { dir, .. } => Some(dir.clone().unwrap_or_else(std::env::temp_dir)),
            TargetSpec::Path(p) if !created && p.is_file() => p.parent().map(Path::to_path_buf),
            _ => None,
        };
        let postmark_dir = fs_dir.map(|d| plan.postmark_dir.clone().unwrap_or(d));
        if plan.workloads.iter().any(|w| w == workload::POSTMARK) && postmark_dir.is_none() {
            no_fs.push(t.clone());
        }
        opened.push(Opened { target, profile, span, created, name: t.clone(), postmark_dir, cpus });
    }
    if !no_fs.is_empty() {
        let note = format!(
            "postmark skipped on {}: it needs a file system (a directory) and these are raw or emulated devices (loopfs:SIZE is the ramdisk with one)",
            no_fs.join(", ")
        );
        eprintln!("smartcon: note: {note}");
        notes.push(note);
    }
    Ok(opened)
}

pub fn run(args: EvaluateArgs) -> Result<()> {
    let plan = plan(&args)?;
    // Declared before the targets so they are dropped (devices removed) after them, on
    // every path out of this function.
    let mut ramdisks: Vec<Ramdisk> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let mut opened = open_targets(&plan, args.destructive, &mut ramdisks, &mut notes)?;
    if opened.is_empty() {
        bail!("no target left to evaluate ({})", notes.join("; "));
    }
    prepare_out_dir(&args.out)?;
    let loadavg_before = loadavg();
    let started = std::time::Instant::now();
    let monitor = start_monitor(None)?;
    // Targets without measured thresholds get a short probe, so smart runs on this device's.
    if plan.strategies.iter().any(|s| s.name() == "smart") {
        for o in opened.iter_mut() {
            // A stored profile measured with the I/O thread placed elsewhere does not
            // describe this run's placement: probe again, for this run only.
            let here = o.cpus.as_deref().map_or_else(|| "any".to_string(), format_cpu_list);
            let elsewhere = o.profile.source == "probe" && o.profile.io_cpus.as_deref() != Some(here.as_str());
            if o.profile.source == "paper-default" || o.created || elsewhere {
                eprintln!(
                    "smartcon: probing {} ({}) ...",
                    o.target.label(),
                    if o.created {
                        "created for this run".to_string()
                    } else if elsewhere {
                        format!(
                            "its stored profile was measured with the I/O thread on CPUs {}, this run pins it to {here}; the stored profile is kept",
                            o.profile.io_cpus.as_deref().unwrap_or("any")
                        )
                    } else {
                        "no stored profile".to_string()
                    }
                );
                let sizes = super::probe::PROBE_SIZES_BYTES.to_vec();
                let writes = plan.workloads.iter().any(|w| workload::writes(w));
                let outcome = super::probe::probe_target(
                    o.target.as_ref(),
                    writes,
                    &sizes,
                    plan.probe_ns,
                    &monitor,
                    o.cpus.as_deref(),
                    |_, _| Ok(()),
                )?;
                if !o.created && !elsewhere {
                    outcome.profile.save(&profile_path(&outcome.profile.device)).map_err(engine_err)?;
                }
                o.profile = outcome.profile;
            }
        }
    }
    let jsonl_path = args.out.join("results.jsonl");
    let mut jsonl = std::io::BufWriter::new(
        std::fs::File::create(&jsonl_path).with_context(|| format!("create {}", jsonl_path.display()))?,
    );
    let mach = machine();
    writeln!(jsonl, "{}", serde_json::to_string(&mach)?)?;
    for o in &opened {
        writeln!(
            jsonl,
            "{}",
            serde_json::to_string(&ProfileRecord {
                record_type: "profile",
                target: o.target.label(),
                profile: &o.profile
            })?
        )?;
    }
    let per_load = plan.targets.len() * plan.workloads.len() * plan.sizes.len() * plan.strategies.len();
    // Turns in all, as the loop below runs them (personalities have one cell, postmark one
    // cell of at most POSTMARK_ROUNDS_MAX turns and only where there is a file system).
    let turns: usize = plan
        .loads
        .iter()
        .flat_map(|load| opened.iter().map(move |o| (load, o)))
        .map(|(load, o)| {
            plan.workloads
                .iter()
                .map(|w| {
                    let rounds = plan.rounds_for(load, w == workload::POSTMARK) as usize;
                    if w == workload::POSTMARK {
                        o.postmark_dir.is_some() as usize * rounds
                    } else {
                        workload::cells(w, &plan.sizes).map_or(0, |c| c.len()) * rounds
                    }
                })
                .sum::<usize>()
        })
        .sum::<usize>()
        * plan.strategies.len();
    let bar = progress_bar(turns as u64, "evaluate");
    let mut cells: Vec<Cell> = Vec::with_capacity(per_load * plan.loads.len());
    'loads: for load in &plan.loads {
        let cpu =
            if load == "cpu-intensive" { Some(CpuLoad::start(plan.cpu_workers).map_err(engine_err)?) } else { None };
        for o in &opened {
            if interrupted() {
                break 'loads;
            }
            let io = IoLoad::default();
            let outcome: Result<()> = std::thread::scope(|s| {
                let result = (|| {
                    if load == "io-intensive" {
                        io.spawn(s, o.target.as_ref(), plan.io_workers, o.target.block_bytes().max(4096), o.span)
                            .map_err(engine_err)?;
                    }
                    if load != "bm-only" {
                        std::thread::sleep(std::time::Duration::from_nanos(SETTLE_NS));
                    }
                    for w in &plan.workloads {
                        let is_postmark = w == workload::POSTMARK;
                        let pm_base = PostmarkSpec { files: plan.postmark_files, ..PostmarkSpec::default() };
                        let cellplans = if is_postmark {
                            if o.postmark_dir.is_none() {
                                continue;
                            }
                            vec![workload::CellPlan { bs_bytes: pm_base.block_bytes, phases: Vec::new() }]
                        } else {
                            workload::cells(w, &plan.sizes).expect("workloads are validated in plan()")
                        };
                        for cellplan in cellplans {
                            let bs = cellplan.bs_bytes;
                            // Strategies take turns in rounds, in a balanced order (each
                            // leads and follows each other alike), so drift of a shared
                            // machine and what one turn leaves behind hit them alike.
                            let n = plan.strategies.len();
                            type Turns = (JobResult, Option<Corunner>, Option<PostmarkCounts>);
                            let mut merged: Vec<Option<Turns>> = vec![None; n];
                            // Postmark builds its file pool every turn: at most 3 turns.
                            let rounds = plan.rounds_for(load, is_postmark);
                            for round in 0..rounds {
                                let order = turn_order(n, round as usize);
                                for &i in &order {
                                    if interrupted() {
                                        break;
                                    }
                                    let strategy = plan.strategies[i];
                                    bar.set_message(format!(
                                        "{load} {} {w} {} {} ({}/{})",
                                        o.target.label(),
                                        format_size(bs),
                                        strategy.name(),
                                        round + 1,
                                        rounds
                                    ));
                                    let snap = |c: &Option<CpuLoad>| -> Option<LoadSnapshot> {
                                        match (c, load.as_str()) {
                                            (Some(c), _) => Some(c.snapshot()),
                                            (None, "io-intensive") => Some(io.snapshot()),
                                            _ => None,
                                        }
                                    };
                                    let (s0, w0) = (snap(&cpu), proc_stat_iowait_total_ns());
                                    // A cell's phases run back to back; their records merge.
                                    let mut r: Option<JobResult> = None;
                                    let mut counts: Option<PostmarkCounts> = None;
                                    if let (true, Some(dir)) = (is_postmark, &o.postmark_dir) {
                                        let spec = PostmarkSpec {
                                            duration_ns: (plan.duration_ns / rounds as u64).max(1_000_000),
                                            strategy,
                                            // One seed per round: every strategy does the same transactions.
                                            seed: 1 + round as u64,
                                            ..pm_base.clone()
                                        };
                                        let x = on_cpus(o.cpus.as_deref(), || {
                                            smartcon_workloads::postmark::run(
                                                dir,
                                                &spec,
                                                o.target.as_ref(),
                                                &o.profile,
                                                &monitor,
                                                interrupt_flag(),
                                            )
                                        })
                                        .map_err(engine_err)?;
                                        r = Some(x.job);
                                        counts = Some(x.counts);
                                    }
                                    for ph in &cellplan.phases {
                                        let mut js = JobSpec::new(ph.op, ph.pattern, ph.bs_bytes, strategy);
                                        js.threads = ph.threads;
                                        js.span_bytes = Some(o.span);
                                        js.duration_ns = (plan.duration_ns * ph.share_pct as u64 / 100 / rounds as u64)
                                            .max(1_000_000);
                                        js.seed = 1 + round as u64;
                                        js.fsync_every = ph.fsync_every;
                                        js.cpus = o.cpus.clone();
                                        js.warmup_ios = TURN_WARMUP_IOS;
                                        // Polling strategies (hybrid...) sample for a share of
                                        // the turn, however short the turns are.
                                        js.poll = PollParams {
                                            sampling_ns: (js.duration_ns / 4).min(PollParams::DEFAULT.sampling_ns),
                                            ..PollParams::DEFAULT
                                        };
                                        let x = run_job(o.target.as_ref(), &js, &o.profile, &monitor, interrupt_flag())
                                            .map_err(engine_err)?;
                                        r = Some(match r {
                                            None => x,
                                            Some(a) => merge_results(a, &x),
                                        });
                                    }
                                    let r = r.expect("a cell has at least one phase");
                                    let (s1, w1) = (snap(&cpu), proc_stat_iowait_total_ns());
                                    let corunner = match (s0, s1) {
                                        (Some(a), Some(b)) => {
                                            let d = a.delta_to(&b);
                                            let iowait_pct = match (w0, w1) {
                                                (Some((i0, t0)), Some((i1, t1))) if t1 > t0 => {
                                                    (i1 - i0) as f64 / (t1 - t0) as f64 * 100.0
                                                }
                                                _ => 0.0,
                                            };
                                            Some(Corunner {
                                                kind: if cpu.is_some() { "cpu" } else { "io" },
                                                workers: if cpu.is_some() { plan.cpu_workers } else { plan.io_workers },
                                                real_ns: d.real_ns,
                                                work: d.work,
                                                work_per_s: d.work_per_s,
                                                user_ns: d.user_ns,
                                                sys_ns: d.sys_ns,
                                                iowait_pct,
                                            })
                                        }
                                        _ => None,
                                    };
                                    merged[i] = Some(match merged[i].take() {
                                        None => (r, corunner, counts),
                                        Some((a, ca, pa)) => (
                                            merge_results(a, &r),
                                            merge_corunner(ca, corunner),
                                            merge_counts(pa, counts),
                                        ),
                                    });
                                    bar.inc(1);
                                }
                            }
                            for (result, corunner, counts) in merged.into_iter().flatten() {
                                let postmark = counts.map(|counts| PostmarkRecord {
                                    dir: o.postmark_dir.as_deref().unwrap_or(Path::new("")).display().to_string(),
                                    counts,
                                    size_bytes_min: pm_base.size_bytes_min,
                                    size_bytes_max: pm_base.size_bytes_max,
                                    block_bytes: pm_base.block_bytes,
                                    read_bias_pct: pm_base.read_bias_pct,
                                    create_bias_pct: pm_base.create_bias_pct,
                                });
                                let cell = Cell {
                                    result,
                                    load: load.clone(),
                                    workload: w.clone(),
                                    corunner,
                                    tps: postmark.as_ref().map(|p| p.counts.tps),
                                    postmark,
                                };
                                writeln!(jsonl, "{}", serde_json::to_string(&cell)?)?;
                                cells.push(cell);
                            }
                        }
                    }
                    Ok(())
                })();
                io.stop.store(true, std::sync::atomic::Ordering::Relaxed);
                result
            });
            outcome?;
        }
        drop(cpu);
    }
    bar.finish_and_clear();
    let study = if args.skip_polling || interrupted() {
        None
    } else {
        let study_plan = crate::polling::StudyPlan::for_evaluate(args.tiny, plan.duration_ns);
        let bar = progress_bar(study_plan.runs() as u64, "polling");
        let study = crate::polling::run_study(&study_plan, &monitor, |what| {
            bar.set_message(what.to_string());
            bar.inc(1);
        })?;
        bar.finish_and_clear();
        for r in &study.runs {
            writeln!(jsonl, "{}", serde_json::to_string(r)?)?;
        }
        for r in &study.sweeps {
            writeln!(jsonl, "{}", serde_json::to_string(r)?)?;
        }
        for r in &study.checks {
            writeln!(jsonl, "{}", serde_json::to_string(r)?)?;
        }
        for r in study.merge_records() {
            writeln!(jsonl, "{}", serde_json::to_string(&r)?)?;
        }
        Some(study)
    };
    monitor.stop();
    let classes: Vec<TargetInfo> = opened
        .iter()
        .map(|o| TargetInfo {
            label: o.target.label().to_string(),
            class: o.profile.class,
            size_threshold_bytes: o.profile.size_threshold_bytes,
            // A file on the local disk: a file target smartcon did not put on a ramdisk.
            local_disk: !o.created && o.postmark_dir.is_some(),
        })
        .collect();
    let criteria = criteria(&cells, &classes);
    for c in &criteria {
        writeln!(jsonl, "{}", serde_json::to_string(c)?)?;
    }
    jsonl.flush()?;
    let loadavg_after = loadavg();
    let profiles: Vec<(String, Profile, String)> = opened
        .iter()
        .map(|o| {
            let label =
                if o.created { format!("{} ({})", o.target.label(), o.name) } else { o.target.label().to_string() };
            let cpus = o.cpus.as_deref().map_or_else(|| "any".to_string(), format_cpu_list);
            (label, o.profile.clone(), cpus)
        })
        .collect();
    let summary = summary_md(
        &mach,
        &plan,
        &profiles,
        &cells,
        &criteria,
        (&loadavg_before, &loadavg_after),
        started.elapsed().as_secs_f64(),
        interrupted(),
        &notes,
    );
    let summary = match &study {
        Some(study) => summary + &crate::polling::study_md(study),
        None => summary,
    };
    std::fs::write(args.out.join("summary.md"), &summary)?;
    let mut plots = write_plots(&args.out, &plan, &cells)?;
    if let Some(study) = &study {
        plots += crate::polling::study_plots(&args.out, study)?;
    }
    drop(opened);
    println!("{}", headline(&cells, &criteria));
    println!(
        "report: {} (results.jsonl, summary.md, {} plots) in {:.0} s",
        args.out.display(),
        plots,
        started.elapsed().as_secs_f64()
    );
    if interrupted() {
        println!("(interrupted: the report holds the cells measured so far)");
    }
    Ok(())
}

/// Merges two turns of the same cell: counts and times add, means are weighted by I/Os,
/// CPU shares by wall time. Percentiles are the I/O-weighted mean of the turns' percentiles
/// (an approximation; the mean latency and IOPS are exact).
fn merge_results(a: JobResult, b: &JobResult) -> JobResult {
    let ios = a.ios + b.ios;
    let dur = a.duration_ns + b.duration_ns;
    let wi = |x: f64, y: f64| {
        if ios == 0 {
            0.0
        } else {
            (x * a.ios as f64 + y * b.ios as f64) / ios as f64
        }
    };
    let wd = |x: f64, y: f64| (x * a.duration_ns as f64 + y * b.duration_ns as f64) / dur.max(1) as f64;
    let mut decisions = a.decisions.clone();
    for (k, v) in &b.decisions.by_strategy {
        *decisions.by_strategy.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &b.decisions.by_reason {
        *decisions.by_reason.entry(k.clone()).or_default() += v;
    }
    JobResult {
        duration_ns: dur,
        ios,
        iops: ios as f64 * 1e9 / dur.max(1) as f64,
        bw_bytes_per_s: wd(a.bw_bytes_per_s, b.bw_bytes_per_s),
        op: if a.op == b.op { a.op } else { "mixed" },
        pattern: if a.pattern == b.pattern { a.pattern } else { "mixed" },
        threads: a.threads.max(b.threads),
        lat_ns_mean: wi(a.lat_ns_mean, b.lat_ns_mean),
        lat_ns_min: a.lat_ns_min.min(b.lat_ns_min),
        lat_ns_p50: wi(a.lat_ns_p50 as f64, b.lat_ns_p50 as f64) as u64,
        lat_ns_p99: wi(a.lat_ns_p99 as f64, b.lat_ns_p99 as f64) as u64,
        lat_ns_p999: wi(a.lat_ns_p999 as f64, b.lat_ns_p999 as f64) as u64,
        lat_ns_max: a.lat_ns_max.max(b.lat_ns_max),
        cpu_user_pct: wd(a.cpu_user_pct, b.cpu_user_pct),
        cpu_sys_pct: wd(a.cpu_sys_pct, b.cpu_sys_pct),
        ctx_voluntary: a.ctx_voluntary + b.ctx_voluntary,
        ctx_involuntary: a.ctx_involuntary + b.ctx_involuntary,
        decisions,
        spin_fallbacks: a.spin_fallbacks + b.spin_fallbacks,
        fsyncs: a.fsyncs + b.fsyncs,
        interrupted: a.interrupted || b.interrupted,
        ..a
    }
}

/// Postmark turns: counts add, tps over the summed transaction time (from the counts'
/// own tps, so the time is the transaction phases' alone).
fn merge_counts(a: Option<PostmarkCounts>, b: Option<PostmarkCounts>) -> Option<PostmarkCounts> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let secs = |c: &PostmarkCounts| if c.tps > 0.0 { c.transactions as f64 / c.tps } else { 0.0 };
            let total_s = secs(&a) + secs(&b);
            let transactions = a.transactions + b.transactions;
            Some(PostmarkCounts {
                transactions,
                creates: a.creates + b.creates,
                deletes: a.deletes + b.deletes,
                reads: a.reads + b.reads,
                appends: a.appends + b.appends,
                tps: if total_s > 0.0 { transactions as f64 / total_s } else { 0.0 },
                files_start: a.files_start,
                files_end: b.files_end,
                direct: a.direct && b.direct,
            })
        }
        (a, b) => a.or(b),
    }
}

fn merge_corunner(a: Option<Corunner>, b: Option<Corunner>) -> Option<Corunner> {
    match (a, b) {
        (Some(a), Some(b)) => {
            let real_ns = a.real_ns + b.real_ns;
            let work = a.work + b.work;
            Some(Corunner {
                real_ns,
                work,
                work_per_s: work as f64 * 1e9 / real_ns.max(1) as f64,
                user_ns: a.user_ns + b.user_ns,
                sys_ns: a.sys_ns + b.sys_ns,
                iowait_pct: (a.iowait_pct * a.real_ns as f64 + b.iowait_pct * b.real_ns as f64) / real_ns.max(1) as f64,
                ..a
            })
        }
        (a, b) => a.or(b),
    }
}

fn find<'a>(cells: &'a [Cell], c: &Cell, strategy: &str) -> Option<&'a Cell> {
    cells.iter().find(|x| {
        x.load == c.load
            && x.workload == c.workload
            && x.result.target == c.result.target
            && x.result.bs_bytes == c.result.bs_bytes
            && x.result.strategy == strategy
    })
}

fn gain(cells: &[Cell], c: &Cell) -> Option<f64> {
    find(cells, c, "block").filter(|b| perf(b) > 0.0).map(|b| perf(c) / perf(b))
}

/// smart against the better of block and spin in every cell: (cells, cells >= 0.95, min ratio, worst cell).
fn smart_check(cells: &[Cell]) -> (usize, usize, Option<(f64, String)>) {
    let (mut n, mut ok, mut worst): (usize, usize, Option<(f64, String)>) = (0, 0, None);
    for c in cells.iter().filter(|c| c.result.strategy == "smart") {
        let best = ["block", "spin"].iter().filter_map(|s| find(cells, c, s)).map(perf).fold(0.0, f64::max);
        if best <= 0.0 {
            continue;
        }
        let ratio = perf(c) / best;
        n += 1;
        ok += (ratio >= 0.95) as usize;
        if worst.as_ref().is_none_or(|w| ratio < w.0) {
            worst = Some((
                ratio,
                format!("{} {} {} {}", c.load, c.result.target, c.workload, format_size(c.result.bs_bytes)),
            ));
        }
    }
    (n, ok, worst)
}

fn headline(cells: &[Cell], criteria: &[Criterion]) -> String {
    let (n, ok, worst) = smart_check(cells);
    let mut out = match worst {
        Some((r, w)) => {
            format!("smart reached >= 0.95 x the better of block and spin in {ok} of {n} cells (lowest {r:.3}: {w}).")
        }
        None => "no smart cells measured".into(),
    };
    let judged: Vec<&Criterion> = criteria.iter().filter(|c| c.met.is_some()).collect();
    if !judged.is_empty() {
        out += &format!(
            "\nnumbers to reach: {} of {} met in this run (see summary.md).",
            judged.iter().filter(|c| c.met == Some(true)).count(),
            judged.len()
        );
    }
    out
}

/// One of the issue's "numbers to reach", judged on this run's cells.
#[derive(Debug, Clone, Serialize)]
struct Criterion {
    #[serde(rename = "type")]
    record_type: &'static str,
    criterion: String,
    measured: String,
    /// `None` when this run has no cell the criterion applies to.
    met: Option<bool>,
}

/// What the criteria need to know of a target.
struct TargetInfo {
    label: String,
    class: DeviceClass,
    size_threshold_bytes: u64,
    local_disk: bool,
}

/// The spread of smart/block over cells where both waited the same way: how far two turns
/// of the same thing differ here, the yardstick for a 3% criterion.
fn noise_note(ratios: &[f64]) -> String {
    if ratios.len() < 3 {
        return String::new();
    }
    let n = ratios.len() as f64;
    let mean = ratios.iter().sum::<f64>() / n;
    let sd = (ratios.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    // A loss is systematic when the mean is below 1 by more than 1.5% and by more than two
    // standard errors of the mean.
    let loss = mean < 0.985 && 1.0 - mean > 2.0 * sd / n.sqrt();
    let verdict = match (loss, 2.0 * sd > 0.03) {
        (false, true) => ": no systematic loss, and a spread from cell to cell that a 3% bound cannot hold",
        (false, false) => ": no systematic loss",
        (true, _) => ": lower on average, by more than turn-to-turn noise explains",
    };
    format!(
        ". Over all {} cells where smart blocked on every I/O, smart/block averages {mean:.3} (standard deviation {sd:.3}){verdict}",
        ratios.len()
    )
}

fn cell_name(c: &Cell) -> String {
    format!("{} {} {} {}", c.load, c.result.target, c.workload, format_size(c.result.bs_bytes))
}

/// The decision branch smart took most in a cell, with its share: the usual "why".
fn main_reason(c: &Cell) -> String {
    let total: u64 = c.result.decisions.by_reason.values().sum();
    match c.result.decisions.by_reason.iter().max_by_key(|(_, v)| **v) {
        Some((k, v)) if total > 0 => format!("{k} {:.0}%", *v as f64 * 100.0 / total as f64),
        _ => "no decisions".into(),
    }
}

fn cpu(c: &Cell) -> f64 {
    c.result.cpu_user_pct + c.result.cpu_sys_pct
}

/// The issue's numbers to reach, each with its measured figure and whether it was met.
/// `classes`: target label -> the class and size threshold smart used (the context-switch
/// criterion applies where smart may spin, i.e. not on mainstream devices).
fn criteria(cells: &[Cell], classes: &[TargetInfo]) -> Vec<Criterion> {
    let is_local_file = |t: &str| classes.iter().any(|i| i.label == t && i.local_disk);
    let mut out = Vec::new();
    let mk = |criterion: &str, measured: String, met: Option<bool>| Criterion {
        record_type: "criterion",
        criterion: criterion.to_string(),
        measured,
        met,
    };
    let smart = |f: &dyn Fn(&Cell) -> bool| -> Vec<&Cell> {
        cells.iter().filter(|c| c.result.strategy == "smart" && f(c)).collect()
    };
    // 1. Local-disk file, 4 KiB random read, bm-only: smart >= 1.3 x block.
    let v = smart(&|c| {
        c.load == "bm-only"
            && c.workload == "iozone-rand-read"
            && c.result.bs_bytes == 4096
            && is_local_file(&c.result.target)
    });
    let parts: Vec<String> = v
        .iter()
        .map(|c| {
            let spin = find(cells, c, "spin").and_then(|x| gain(cells, x));
            format!(
                "{}: smart {:.2}x, spin {} (smart's decisions: {})",
                c.result.target,
                gain(cells, c).unwrap_or(0.0),
                spin.map(|g| format!("{g:.2}x")).unwrap_or_else(|| "-".into()),
                main_reason(c)
            )
        })
        .collect();
    out.push(mk(
        "local-disk file, 4 KiB random read, bm-only: smart >= 1.3 x block IOPS",
        if parts.is_empty() { "no such cell in this run".into() } else { parts.join("; ") },
        (!v.is_empty()).then(|| v.iter().all(|c| gain(cells, c).unwrap_or(0.0) >= 1.3)),
    ));
    // 2. Local-disk file, >= 256 KiB, bm-only: within 3% of block, <= 5 points more CPU.
    let v = smart(&|c| c.load == "bm-only" && c.result.bs_bytes >= 256 << 10 && is_local_file(&c.result.target));
    let ok = |c: &Cell| {
        let b = find(cells, c, "block");
        gain(cells, c).unwrap_or(0.0) >= 0.97 && b.is_some_and(|b| cpu(c) - cpu(b) <= 5.0)
    };
    let worst_gain = v.iter().map(|c| (gain(cells, c).unwrap_or(0.0), *c)).min_by(|a, b| a.0.total_cmp(&b.0));
    let worst_cpu = v
        .iter()
        .filter_map(|c| find(cells, c, "block").map(|b| (cpu(c) - cpu(b), *c)))
        .max_by(|a, b| a.0.total_cmp(&b.0));
    out.push(mk(
        "local-disk file, 256 KiB and above, bm-only: smart within 3% of block and <= 5 points more CPU",
        match (worst_gain, worst_cpu) {
            (Some((g, gc)), Some((d, dc))) => format!(
                "{} of {} cells; lowest smart/block {g:.3} ({}), most extra CPU {d:+.1} points ({}; smart's decisions: {}, size threshold of the profile: {})",
                v.iter().filter(|c| ok(c)).count(),
                v.len(),
                cell_name(gc),
                cell_name(dc),
                main_reason(dc),
                classes
                    .iter()
                    .find(|i| i.label == dc.result.target)
                    .map(|i| format_size(i.size_threshold_bytes))
                    .unwrap_or_else(|| "-".into())
            ),
            _ => "no such cell in this run".into(),
        },
        (!v.is_empty()).then(|| v.iter().all(|c| ok(c))),
    ));
    // 3. CPU-intensive: smart nowhere more than 3% below block.
    let v = smart(&|c| c.load == "cpu-intensive");
    let worst = v.iter().map(|c| (gain(cells, c).unwrap_or(0.0), *c)).min_by(|a, b| a.0.total_cmp(&b.0));
    // A cell where smart blocked on every I/O waited exactly as block did: a gap there is
    // the difference between two turns of the same thing on a shared machine.
    let blocked_all = |c: &Cell| {
        let b = c.result.decisions.by_strategy.get("block").copied().unwrap_or(0);
        c.result.ios > 0 && b == c.result.ios
    };
    let misses: Vec<&&Cell> = v.iter().filter(|c| gain(cells, c).unwrap_or(0.0) < 0.97).collect();
    out.push(mk(
        "cpu-intensive: smart nowhere more than 3% below block",
        match worst {
            Some((g, c)) => format!(
                "{} of {} cells >= 0.97x; lowest {g:.3} ({}; smart's decisions: {}); of the {} cells below, smart blocked on every I/O in {} (so it waited as block did and the gap is turn-to-turn noise){}",
                v.iter().filter(|c| gain(cells, c).unwrap_or(0.0) >= 0.97).count(),
                v.len(),
                cell_name(c),
                main_reason(c),
                misses.len(),
                misses.iter().filter(|c| blocked_all(c)).count(),
                noise_note(&v.iter().filter(|c| blocked_all(c)).filter_map(|c| gain(cells, c)).collect::<Vec<_>>())
            ),
            None => "no such cell in this run".into(),
        },
        worst.map(|(g, _)| g >= 0.97),
    ));
    // 4. CPU-intensive: the co-running benchmark loses <= 3% of its work against block.
    let mut targets: Vec<&str> = Vec::new();
    for c in cells.iter().filter(|c| c.load == "cpu-intensive") {
        if !targets.contains(&c.result.target.as_str()) {
            targets.push(&c.result.target);
        }
    }
    let rate = |t: &str, st: &str| {
        let (w, r) = cells
            .iter()
            .filter(|c| c.result.target == t && c.load == "cpu-intensive" && c.result.strategy == st)
            .filter_map(|c| c.corunner.as_ref())
            .fold((0u64, 0u64), |a, k| (a.0 + k.work, a.1 + k.real_ns));
        (r > 0).then(|| w as f64 / r as f64)
    };
    let ratios: Vec<(String, f64)> = targets
        .iter()
        .filter_map(|t| match (rate(t, "smart"), rate(t, "block")) {
            (Some(s), Some(b)) if b > 0.0 => Some((t.to_string(), s / b)),
            _ => None,
        })
        .collect();
    out.push(mk(
        "cpu-intensive: the co-running CPU benchmark loses <= 3% of its work beside smart against beside block",
        if ratios.is_empty() {
            "no such cell in this run".into()
        } else {
            "work rate beside smart / beside block: ".to_string()
                + &ratios.iter().map(|(t, r)| format!("{t} {r:.3}")).collect::<Vec<_>>().join(", ")
        },
        (!ratios.is_empty()).then(|| ratios.iter().all(|(_, r)| *r >= 0.97)),
    ));
    // 5. Every cell: smart >= 0.95 x the better of block and spin.
    let (n, ok5, worst) = smart_check(cells);
    out.push(mk(
        "every cell: smart >= 0.95 x the better of block and spin",
        match &worst {
            Some((r, w)) => format!("{ok5} of {n} cells; lowest {r:.3} ({w})"),
            None => "no such cell in this run".into(),
        },
        worst.as_ref().map(|_| ok5 == n),
    ));
    // 6. 4 KiB: smart's context switches <= 1/5 of block's (per I/O), bm-only, where smart
    // may spin (a mainstream device always blocks, by design).
    let spinnable = |t: &str| classes.iter().any(|i| i.label == t && i.class != DeviceClass::Mainstream);
    let v =
        smart(&|c| c.load == "bm-only" && c.result.bs_bytes == 4096 && c.tps.is_none() && spinnable(&c.result.target));
    let csw_ratio = |c: &Cell| find(cells, c, "block").map(|b| csw_per_io(c) / csw_per_io(b).max(1e-9));
    let worst = v.iter().filter_map(|c| csw_ratio(c).map(|r| (r, *c))).max_by(|a, b| a.0.total_cmp(&b.0));
    out.push(mk(
        "4 KiB, bm-only, devices smart may spin on: smart's context switches per I/O <= 1/5 of block's",
        match worst {
            Some((r, c)) => format!(
                "{} of {} cells; highest smart/block {r:.3} ({}; smart's decisions: {}; its switches: {} voluntary, {} involuntary{})",
                v.iter().filter(|c| csw_ratio(c).is_some_and(|r| r <= 0.2)).count(),
                v.len(),
                cell_name(c),
                main_reason(c),
                c.result.ctx_voluntary,
                c.result.ctx_involuntary,
                // A spinner switched out involuntarily about once per I/O is preempted by
                // work the kernel does for the I/O on its CPU (on the local disk: the direct
                // I/O write completion, a kworker; docs/evaluate.md).
                if c.result.ctx_involuntary * 2 > c.result.ios {
                    ", i.e. the spinner was preempted about once per I/O (see \"Where the I/O threads run\" in docs/evaluate.md)"
                } else {
                    ""
                }
            ),
            None => "no such cell in this run".into(),
        },
        worst.map(|(r, _)| r <= 0.2),
    ));
    out.push(mk(
        "two probes of the same target give the same size threshold +- one size step",
        "not measured by evaluate: run `smartcon probe TARGET` twice (docs/evaluate.md has the figures)".into(),
        None,
    ));
    out
}

fn criteria_md(criteria: &[Criterion]) -> String {
    let mut s = String::from(
        "## Numbers to reach (issue 3), measured in this run\n\n| criterion | measured | met? |\n|---|---|---|\n",
    );
    for c in criteria {
        let met = match c.met {
            Some(true) => "pass",
            Some(false) => "**miss**",
            None => "n/a",
        };
        s += &format!("| {} | {} | {met} |\n", c.criterion, c.measured.replace('|', "/"));
    }
    s += "\nA miss names the cell and the decision branch smart took most there: `cpu_busy` in bm-only means other processes used more CPU than the threshold (a shared machine); `mainstream_device` means the profile says spinning never pays on this device; `queue_over_limit` means more I/Os were in flight ahead than Q; `very_fast_device` means smart completes every I/O inline (sync): the I/O thread never sleeps, so beside crunchers it takes its fair share of the CPU and does many times block's I/O, and the crunchers lose that share. The load average before and after the run is in the header.\n\n";
    s
}

fn csw_per_io(c: &Cell) -> f64 {
    if c.result.ios == 0 {
        0.0
    } else {
        (c.result.ctx_voluntary + c.result.ctx_involuntary) as f64 / c.result.ios as f64
    }
}

#[allow(clippy::too_many_arguments)]
fn summary_md(
    m: &MachineRecord,
    plan: &Plan,
    profiles: &[(String, Profile, String)],
    cells: &[Cell],
    criteria: &[Criterion],
    loadavg: (&str, &str),
    secs: f64,
    interrupted: bool,
    notes: &[String],
) -> String {
    let mut s = String::from("# smartcon evaluate\n\n");
    for n in notes {
        s += &format!("Note: {n}.\n\n");
    }
    s += &format!(
        "Load average (/proc/loadavg) before the run: {}; after: {}. This run itself keeps about 1-3 threads busy; more than that means other processes shared the machine.\n\n",
        loadavg.0, loadavg.1
    );
    s += &format!(
        "Machine: Linux {}, {}, {} CPUs. {} cells in {:.0} s, {} per cell. Timings are from one run on a machine that may have been shared: read ratios, not absolutes.{}\n\n",
        m.kernel,
        m.cpu_model,
        m.cpus,
        cells.len(),
        secs,
        format_ns(plan.duration_ns as f64),
        if interrupted { " **Interrupted: partial results.**" } else { "" }
    );
    s += &format!(
        "Loads: bm-only (nothing else), cpu-intensive ({} number-cruncher processes), io-intensive ({} I/O workers, 4 KiB random reads on the same target, blocking).\n\n",
        plan.cpu_workers, plan.io_workers
    );
    s += "## Profiles used by smart\n\n```\n";
    let mut t = Table::new(&[
        "target",
        "device",
        "source",
        "class",
        "size threshold",
        "CPU threshold",
        "Q",
        "I/O threads on CPUs",
    ]);
    for (label, p, cpus) in profiles {
        t.row(vec![
            label.clone(),
            p.device.clone(),
            p.source.clone(),
            p.class.name().into(),
            format_size(p.size_threshold_bytes),
            format!("{}%", p.cpu_threshold_pct),
            p.queue_limit.to_string(),
            cpus.clone(),
        ]);
    }
    s += &t.render();
    s += "```\n\n";
    s += &format!(
        "I/O threads are pinned per target for every strategy alike (--io-cpus {}): `irq` puts them on the CPUs that take the device's completion interrupts; `any` means unpinned (devices without such an interrupt: emulated, loop, zram).\n\n",
        plan.placement.name()
    );
    let (n, ok, worst) = smart_check(cells);
    if let Some((r, w)) = worst {
        s += &format!(
            "**smart >= 0.95 x the better of block and spin in {ok} of {n} cells** (lowest ratio {r:.3}, at {w}).\n\n"
        );
    }
    s += &criteria_md(criteria);
    s += "## Gain against block (IOPS ratio; Fig. 9, 12, 15)\n\n```\n";
    let others: Vec<&str> = plan.strategies.iter().map(|s| s.name()).filter(|n| *n != "block").collect();
    let mut header = vec!["target".to_string(), "workload".into(), "size".into()];
    for l in &plan.loads {
        for o in &others {
            header.push(format!("{o}@{l}"));
        }
    }
    let hdr: Vec<&str> = header.iter().map(|x| x.as_str()).collect();
    let mut t = Table::new(&hdr);
    for tl in &plan.targets_labels(cells) {
        for w in &plan.workloads {
            for bs in workload::cells(w, &plan.sizes).unwrap_or_default().iter().map(|c| c.bs_bytes) {
                let mut row = vec![tl.clone(), w.clone(), format_size(bs)];
                for l in &plan.loads {
                    for o in &others {
                        let c = cells.iter().find(|c| {
                            &c.result.target == tl
                                && &c.workload == w
                                && c.result.bs_bytes == bs
                                && &c.load == l
                                && c.result.strategy == *o
                        });
                        row.push(
                            c.and_then(|c| gain(cells, c)).map(|g| format!("{g:.2}x")).unwrap_or_else(|| "-".into()),
                        );
                    }
                }
                t.row(row);
            }
        }
    }
    s += &t.render();
    s += "```\n\n";
    if cells.iter().any(|c| c.tps.is_some()) {
        s += "## Postmark-like small-file transactions (Fig. 11b, 13b, 16b)\n\n";
        if let Some(p) = cells.iter().find_map(|c| c.postmark.as_ref()) {
            s += &format!(
                "{} files of {} to {} in a fresh directory under {}, read/append block {}, read bias {}%, create bias {}%, transactions until the cell's time runs out; data I/O waited for by the strategy, create/open/close/unlink synchronous{}.\n\n",
                p.counts.files_start,
                format_size(p.size_bytes_min),
                format_size(p.size_bytes_max),
                p.dir,
                format_size(p.block_bytes),
                p.read_bias_pct,
                p.create_bias_pct,
                if p.counts.direct { ", O_DIRECT" } else { "; the file system refused O_DIRECT, so the page cache served the data" }
            );
        }
        s += "```\n";
        let strategies: Vec<&str> = plan.strategies.iter().map(|s| s.name()).collect();
        let mut header = vec!["load".to_string(), "target".into()];
        for st in &strategies {
            header.push(format!("tps {st}"));
        }
        for st in strategies.iter().filter(|s| **s != "block") {
            header.push(format!("{st}/block"));
        }
        header.push("csw/IO block".into());
        header.push("csw/IO smart".into());
        let hdr: Vec<&str> = header.iter().map(|x| x.as_str()).collect();
        let mut t = Table::new(&hdr);
        for c in cells.iter().filter(|c| c.tps.is_some() && c.result.strategy == "block") {
            let mut row = vec![c.load.clone(), c.result.target.clone()];
            for st in &strategies {
                row.push(
                    find(cells, c, st).and_then(|x| x.tps).map(|v| format!("{v:.0}")).unwrap_or_else(|| "-".into()),
                );
            }
            for st in strategies.iter().filter(|s| **s != "block") {
                row.push(
                    find(cells, c, st)
                        .and_then(|x| gain(cells, x))
                        .map(|g| format!("{g:.2}x"))
                        .unwrap_or_else(|| "-".into()),
                );
            }
            row.push(format!("{:.2}", csw_per_io(c)));
            row.push(find(cells, c, "smart").map(|x| format!("{:.2}", csw_per_io(x))).unwrap_or_else(|| "-".into()));
            t.row(row);
        }
        s += &t.render();
        s += "```\n\n";
    }
    s += "## Context switches per I/O, voluntary + involuntary (Fig. 10), and CPU of the I/O thread (% of one CPU; Fig. 8)\n\n```\n";
    let strategies: Vec<&str> = plan.strategies.iter().map(|s| s.name()).collect();
    let mut header = vec!["load".to_string(), "target".into(), "workload".into(), "size".into()];
    for st in &strategies {
        header.push(format!("csw/IO {st}"));
    }
    for st in &strategies {
        header.push(format!("CPU {st}"));
    }
    let hdr: Vec<&str> = header.iter().map(|x| x.as_str()).collect();
    let mut t = Table::new(&hdr);
    for c in cells.iter().filter(|c| c.result.strategy == "block") {
        let mut row = vec![c.load.clone(), c.result.target.clone(), c.workload.clone(), format_size(c.result.bs_bytes)];
        let by: Vec<Option<&Cell>> = strategies.iter().map(|st| find(cells, c, st)).collect();
        for x in &by {
            row.push(
                x.map(|x| format!("{:.2} ({}+{})", csw_per_io(x), x.result.ctx_voluntary, x.result.ctx_involuntary))
                    .unwrap_or_else(|| "-".into()),
            );
        }
        for x in &by {
            row.push(
                x.map(|x| format!("{:.0}%", x.result.cpu_user_pct + x.result.cpu_sys_pct))
                    .unwrap_or_else(|| "-".into()),
            );
        }
        t.row(row);
    }
    s += &t.render();
    s += "```\n\n";
    s += "## Side effect on the co-running CPU benchmark (Table VI)\n\n";
    s += "Summed over every cell of the cpu-intensive load per target and strategy: the crunchers' work (batches), its rate against the rate beside block, their user and system CPU time, the wall time, and the machine's iowait.\n\n```\n";
    let mut t = Table::new(&["target", "strategy", "work", "rate vs block", "real", "user", "sys", "iowait"]);
    for tl in &plan.targets_labels(cells) {
        let agg = |st: &str| {
            let mut a = (0u64, 0u64, 0u64, 0u64, 0.0f64, 0usize);
            for c in
                cells.iter().filter(|c| &c.result.target == tl && c.load == "cpu-intensive" && c.result.strategy == st)
            {
                if let Some(k) = &c.corunner {
                    a.0 += k.work;
                    a.1 += k.real_ns;
                    a.2 += k.user_ns;
                    a.3 += k.sys_ns;
                    a.4 += k.iowait_pct;
                    a.5 += 1;
                }
            }
            a
        };
        let block = agg("block");
        for st in &strategies {
            let a = agg(st);
            if a.5 == 0 {
                continue;
            }
            let rate = a.0 as f64 / a.1.max(1) as f64;
            let brate = block.0 as f64 / block.1.max(1) as f64;
            t.row(vec![
                tl.clone(),
                st.to_string(),
                a.0.to_string(),
                if brate > 0.0 { format!("{:.3}x", rate / brate) } else { "-".into() },
                format_ns(a.1 as f64),
                format_ns(a.2 as f64),
                format_ns(a.3 as f64),
                format!("{:.1}%", a.4 / a.5 as f64),
            ]);
        }
    }
    s += &t.render();
    s += "```\n\nThe I/O co-runner (io-intensive) rates are in results.jsonl (`corunner.work_per_s`, I/Os per second).\n\n";
    s += "Plots: `fig8-cpu-*.svg` (CPU per strategy by size, bm-only), `fig9-gain-*.svg` (gain by size per load), `fig10-csw-*.svg` (context switches per I/O), `fig11-workloads-*.svg` (gain per workload), `table6-corunner.svg` (co-runner work rate against block).\n";
    s
}

impl Plan {
    /// Target labels in the order they were measured.
    fn targets_labels(&self, cells: &[Cell]) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in cells {
            if !out.contains(&c.result.target) {
                out.push(c.result.target.clone());
            }
        }
        out
    }
}

fn file_name(text: &str) -> String {
    text.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect()
}

/// A line chart over the request size (KiB, log scale), as Fig. 8 and 9 are drawn.
fn size_chart(path: &Path, title: &str, y_label: &str, series: &[Series]) -> Result<()> {
    let chart = LineChart { title, x_label: "request size (KiB)", y_label, log_x: true, log_y: false, markers: vec![] };
    line_chart(path, &chart, series)
}

fn write_plots(dir: &Path, plan: &Plan, cells: &[Cell]) -> Result<usize> {
    let mut n = 0;
    let strategies: Vec<&str> = plan.strategies.iter().map(|s| s.name()).collect();
    let labels = plan.targets_labels(cells);
    let first_wl = plan.workloads.first().cloned().unwrap_or_default();
    let pick = |t: &str, l: &str, w: &str, st: &str| -> Vec<&Cell> {
        cells
            .iter()
            .filter(|c| c.result.target == t && c.load == l && c.workload == w && c.result.strategy == st)
            .collect()
    };
    for t in &labels {
        let tf = file_name(t);
        // Fig. 8: CPU of the I/O thread by size and strategy.
        let series: Vec<Series> = strategies
            .iter()
            .map(|st| Series {
                name: st.to_string(),
                points: pick(t, "bm-only", &first_wl, st)
                    .iter()
                    .map(|c| (c.result.bs_bytes as f64 / 1024.0, c.result.cpu_user_pct + c.result.cpu_sys_pct))
                    .collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !series.is_empty() {
            let title = format!("CPU of the I/O thread, {t}, {first_wl}, no load");
            size_chart(&dir.join(format!("fig8-cpu-{tf}.svg")), &title, "CPU (% of one CPU)", &series)?;
            n += 1;
        }
        // Fig. 9/12/15: gain by size, one plot per load.
        for l in &plan.loads {
            let series: Vec<Series> = strategies
                .iter()
                .filter(|st| **st != "block")
                .map(|st| Series {
                    name: format!("{st} / block"),
                    points: pick(t, l, &first_wl, st)
                        .iter()
                        .filter_map(|c| gain(cells, c).map(|g| (c.result.bs_bytes as f64 / 1024.0, g)))
                        .collect(),
                })
                .filter(|s| !s.points.is_empty())
                .collect();
            if !series.is_empty() {
                let title = format!("IOPS gain against block, {t}, {first_wl}, load {l}");
                size_chart(&dir.join(format!("fig9-gain-{tf}-{l}.svg")), &title, "IOPS / block's IOPS", &series)?;
                n += 1;
            }
        }
        // Fig. 10: context switches per I/O.
        let cats: Vec<String> = plan.sizes.iter().map(|&b| format_size(b)).collect();
        let bars: Vec<(String, Vec<f64>)> = strategies
            .iter()
            .map(|st| {
                let v = plan
                    .sizes
                    .iter()
                    .map(|&b| {
                        pick(t, "bm-only", &first_wl, st)
                            .iter()
                            .find(|c| c.result.bs_bytes == b)
                            .map(|c| csw_per_io(c))
                            .unwrap_or(f64::NAN)
                    })
                    .collect();
                (st.to_string(), v)
            })
            .collect();
        if plan.loads.iter().any(|l| l == "bm-only") {
            let title = format!("Context switches per I/O, {t}, {first_wl}, no load");
            bar_chart(
                &dir.join(format!("fig10-csw-{tf}.svg")),
                &BarChart {
                    title: &title,
                    y_label: "voluntary + involuntary per I/O",
                    categories: cats,
                    series: bars,
                    reference: None,
                },
            )?;
            n += 1;
        }
        // Fig. 11: gain per workload (geometric mean over sizes), first load.
        let l0 = &plan.loads[0];
        let bars: Vec<(String, Vec<f64>)> = strategies
            .iter()
            .map(|st| {
                let v = plan
                    .workloads
                    .iter()
                    .map(|w| {
                        let g: Vec<f64> =
                            pick(t, l0, w, st).iter().filter_map(|c| gain(cells, c)).filter(|g| *g > 0.0).collect();
                        if g.is_empty() {
                            f64::NAN
                        } else {
                            (g.iter().map(|x| x.ln()).sum::<f64>() / g.len() as f64).exp()
                        }
                    })
                    .collect();
                (st.to_string(), v)
            })
            .collect();
        let title = format!("Gain against block per workload (geometric mean over sizes), {t}, load {l0}");
        bar_chart(
            &dir.join(format!("fig11-workloads-{tf}.svg")),
            &BarChart {
                title: &title,
                y_label: "IOPS / block's IOPS",
                categories: plan.workloads.clone(),
                series: bars,
                reference: Some(1.0),
            },
        )?;
        n += 1;
    }
    // Table VI: the co-runner's work rate against its rate beside block.
    if plan.loads.iter().any(|l| l == "cpu-intensive") {
        let bars: Vec<(String, Vec<f64>)> = strategies
            .iter()
            .map(|st| {
                let v = labels
                    .iter()
                    .map(|t| {
                        let rate = |s: &str| {
                            let (w, r) = cells
                                .iter()
                                .filter(|c| {
                                    &c.result.target == t && c.load == "cpu-intensive" && c.result.strategy == s
                                })
                                .filter_map(|c| c.corunner.as_ref())
                                .fold((0u64, 0u64), |a, k| (a.0 + k.work, a.1 + k.real_ns));
                            w as f64 / r.max(1) as f64
                        };
                        let b = rate("block");
                        if b > 0.0 {
                            rate(st) / b
                        } else {
                            f64::NAN
                        }
                    })
                    .collect();
                (format!("beside {st}"), v)
            })
            .collect();
        bar_chart(
            &dir.join("table6-corunner.svg"),
            &BarChart {
                title: "CPU benchmark's work rate beside each strategy, relative to beside block",
                y_label: "work rate / rate beside block",
                categories: labels.clone(),
                series: bars,
                reference: Some(1.0),
            },
        )?;
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::noise_note;

    #[test]
    fn the_noise_note_tells_spread_from_loss() {
        assert_eq!(noise_note(&[1.0, 0.9]), "", "too few cells to say anything");
        let steady = noise_note(&[1.0, 1.0, 1.0]);
        assert!(steady.ends_with("no systematic loss"), "{steady}");
        let spread = noise_note(&[0.9, 1.1, 1.0, 0.95, 1.05]);
        assert!(spread.contains("averages 1.000") && spread.contains("cannot hold"), "{spread}");
        let low = noise_note(&[0.9, 0.92, 0.91]);
        assert!(low.contains("lower on average"), "{low}");
        // A mean of 0.983 with a wide spread over 81 cells is within noise (the default
        // run's figures).
        let mut wide: Vec<f64> = (0..80).map(|i| if i % 2 == 0 { 0.983 - 0.11 } else { 0.983 + 0.11 }).collect();
        wide.push(0.983);
        let wide = noise_note(&wide);
        assert!(wide.contains("no systematic loss") && wide.contains("cannot hold"), "{wide}");
    }
}
