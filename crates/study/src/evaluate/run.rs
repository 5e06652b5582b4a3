//! The evaluation's turn loop.
//!
//! The loop order is load -> target -> workload -> size -> strategy, so the strategies of
//! one cell run back to back under the same load and the gains are ratios taken within one
//! run of a shared machine. Within a cell the strategies take turns in a balanced order
//! ([`crate::turn_order`]); each strategy's turns merge into one record
//! ([`super::merge::Turn::merge`]).
//!
//! - loads come from [`smartcon_workloads::load`]: forked number crunchers or I/O workers on
//!   the same target on the mainstream path; neither is registered with the System
//!   Monitor, so `smart` sees them as load, and the run waits [`SETTLE_NS`] (more than a
//!   monitor window) after a load starts;
//! - every strategy's I/O threads run on the same CPUs ([`Plan::placement`]);
//! - targets that lack a stored profile and are not emulated get a short probe first
//!   ([`probe_missing`]), so `smart` runs on measured thresholds.
//!
//! The I/O load's workers stop when the target's turns end, by a guard, on every path out:
//! a panic in the measuring code ends the run with an error instead of hanging it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use smartcon_emutarget::target::{self, OpenOptions, Target, TargetSpec};
use smartcon_engine::decision::DeviceClass;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::job::{run_job, JobSpec, StrategyChoice, TURN_WARMUP_IOS};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::placement::format_cpu_list;
use smartcon_engine::profile::{self, profile_path, HostWaitCost, Profile};
use smartcon_engine::stats::JobResult;
use smartcon_engine::wait::PollParams;
use smartcon_workloads::blockdev;
use smartcon_workloads::load::{proc_stat_iowait_total_ns, CpuLoad, IoLoad, LoadSnapshot};
use smartcon_workloads::postmark::{PostmarkCounts, PostmarkSpec};
use smartcon_workloads::workload::CellPlan;

use super::judge::{ProbedThresholds, TargetInfo};
use super::merge::Turn;
use super::plan::{Plan, TargetShape, SETTLE_NS};
use super::{Cell, Corunner, CorunnerKind, Load, PostmarkRecord, TurnFigures, Workload};
use crate::probe::{ensure_host_wait_cost, ensure_inline_crossing, probe_target, ProbePlan, PROBE_SIZES_BYTES};
use crate::{stopping_scope, turn_order, Event, Progress};

/// A target opened for the run.
pub struct Opened {
    pub target: Box<dyn Target>,
    pub profile: Profile,
    /// The region the workloads use, from offset 0.
    pub span: u64,
    /// Created for this run (loop, zram): its probe profile is not stored, since the
    /// device name will belong to another device later.
    pub created: bool,
    /// The target as the plan names it.
    pub name: String,
    /// Where postmark runs for this target: a directory on the same file system, or
    /// `None` when the target has none (emulated and raw block devices).
    pub postmark_dir: Option<PathBuf>,
    /// The CPUs this target's I/O threads are pinned to (`None`: unpinned).
    pub cpus: Option<Vec<usize>>,
    /// The size thresholds of each probe of this target in this run, in order: the first
    /// is the profile smart runs on, a second one confirms it (see [`probe_missing`]).
    pub probed: Vec<ProbedThresholds>,
}

impl Opened {
    /// The CPUs as the report writes them (`any` when unpinned).
    pub fn cpus_text(&self) -> String {
        self.cpus.as_deref().map_or_else(|| "any".to_string(), format_cpu_list)
    }

    /// What the criteria need to know of this target.
    pub fn info(&self) -> TargetInfo {
        TargetInfo {
            label: self.target.label().to_string(),
            class: self.profile.class,
            size_threshold_bytes: self.profile.size_threshold_bytes,
            local_disk: self.shape().local_disk,
            probed: self.probed.clone(),
        }
    }

    /// What the plan needs to know of this target to count and size its turns.
    pub fn shape(&self) -> TargetShape {
        TargetShape {
            has_fs: self.postmark_dir.is_some(),
            // A file on the local disk: a file target smartcon did not put on a ramdisk.
            local_disk: !self.created && self.postmark_dir.is_some(),
            very_fast: self.profile.class == DeviceClass::VeryFast,
        }
    }
}

/// A block device created for the run; dropping it removes the device.
pub enum Ramdisk {
    Loop(blockdev::LoopDevice),
    Zram(blockdev::ZramDevice),
    /// `loopfs:SIZE`: ext4 on a loop ramdisk; the target is a file of half the size in it,
    /// and postmark runs in its directory.
    LoopFs(blockdev::LoopFs, u64),
}

/// The opened targets and the devices created for them. The targets are dropped before
/// the devices (field order), on every path.
pub struct Session {
    pub opened: Vec<Opened>,
    pub ramdisks: Vec<Ramdisk>,
    /// What was skipped and why, for the report.
    pub notes: Vec<String>,
}

/// `loop:SIZE`, `zram:SIZE` and `loopfs:SIZE` create a device for the run (root only).
fn ramdisk(text: &str) -> Result<Option<Ramdisk>, Error> {
    let Some((kind @ ("loop" | "zram" | "loopfs"), size)) = text.split_once(':') else { return Ok(None) };
    let size = smartcon_util::units::parse_size_in(size, smartcon_util::units::RAMDISK_SIZE)
        .map_err(|e| Error::new(ErrorKind::Usage, format!("target {text}: {e}")))?;
    Ok(Some(match kind {
        "loop" => Ramdisk::Loop(blockdev::LoopDevice::create(size)?),
        // Half the device for the IOZone file leaves room for ext4 and postmark's pool.
        "loopfs" => Ramdisk::LoopFs(blockdev::LoopFs::create(size)?, (size / 2) / 4096 * 4096),
        _ => Ramdisk::Zram(blockdev::ZramDevice::create(size)?),
    }))
}

fn context(e: Error, what: &str) -> Error {
    Error { message: format!("{what}: {}", e.message), ..e }
}

/// Opens (and where asked creates) the plan's targets and checks that every workload fits.
pub fn open(plan: &Plan, destructive: bool, progress: &mut Progress<'_>) -> Result<Session, Error> {
    let mut session = Session { opened: Vec::new(), ramdisks: Vec::new(), notes: Vec::new() };
    // Targets without a file system, where postmark cannot run: one note for all.
    let mut no_fs: Vec<String> = Vec::new();
    for t in &plan.targets {
        let is_ramdisk = ["loop:", "zram:", "loopfs:"].iter().any(|p| t.starts_with(p));
        if let Some(why) = blockdev::unavailable_reason().filter(|_| is_ramdisk) {
            session.notes.push(format!("skipped target {t}: {why}"));
            progress(Event::Note(session.notes.last().expect("just pushed")));
            continue;
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
                session.ramdisks.push(r);
                (spec, true)
            }
            None => (target::parse_target(t)?, false),
        };
        if let TargetSpec::Path(p) = spec.clone() {
            if p.is_dir() {
                let d = p.display();
                let m = format!(
                    "target {d} is a directory; give a file or block device, or tmp:SIZE@{d} for a temporary file"
                );
                return Err(Error::new(ErrorKind::Usage, m));
            }
        }
        let options = OpenOptions { write: plan.writes(), destructive, created_by_tool: created };
        let target = target::open(&spec, options).map_err(|e| context(e, &format!("target {t}")))?;
        for w in target.warnings() {
            progress(Event::Note(&w));
        }
        let span = target.capacity_bytes().min(1 << 30);
        check_fits(plan, target.as_ref(), t, span)?;
        let profile = profile::resolve(target.as_ref(), None)?;
        let (cpus, why) = plan.placement.resolve(&target.device_id());
        if let Some(why) = why {
            progress(Event::Note(&why));
        }
        let fs_dir = match &spec {
            TargetSpec::Temp { dir, .. } => Some(dir.clone().unwrap_or_else(std::env::temp_dir)),
            TargetSpec::Path(p) if !created && p.is_file() => p.parent().map(Path::to_path_buf),
            _ => None,
        };
        let postmark_dir = fs_dir.map(|d| plan.postmark_dir.clone().unwrap_or(d));
        if plan.workloads.contains(&Workload::Postmark) && postmark_dir.is_none() {
            no_fs.push(t.clone());
        }
        session.opened.push(Opened {
            target,
            profile,
            span,
            created,
            name: t.clone(),
            postmark_dir,
            cpus,
            probed: Vec::new(),
        });
    }
    if !no_fs.is_empty() {
        session.notes.push(format!(
            "postmark skipped on {}: it needs a file system (a directory) and these are raw or emulated devices (loopfs:SIZE is the ramdisk with one)",
            no_fs.join(", ")
        ));
        progress(Event::Note(session.notes.last().expect("just pushed")));
    }
    Ok(session)
}

/// Every phase of every workload must fit the target, with room for the I/O load's workers.
fn check_fits(plan: &Plan, target: &dyn Target, name: &str, span: u64) -> Result<(), Error> {
    for ph in plan.workloads.iter().flat_map(|w| w.cells(&plan.sizes)).flat_map(|c| c.phases) {
        let mut js = JobSpec::new(ph.op, ph.pattern, ph.bs_bytes, StrategyChoice::Smart);
        js.threads = ph.threads;
        js.span_bytes = Some(span);
        js.validate(target)
            .map_err(|e| context(e, &format!("target {name} is too small or misaligned for the workload")))?;
        if span < ph.bs_bytes * plan.io_workers as u64 * 2 {
            let size = smartcon_util::units::format_size;
            let m = format!(
                "target {name} ({}) is too small for {} I/O load workers of {}",
                size(span),
                plan.io_workers,
                size(ph.bs_bytes)
            );
            return Err(Error::new(ErrorKind::Usage, m));
        }
    }
    Ok(())
}

/// Probes the targets smart has no measured profile for (none stored, created for this
/// run, or stored for another placement of the I/O thread), so smart runs on thresholds
/// measured here. Stores the profile where `smartcon probe` would, except for devices
/// created for the run and for a placement other than the stored one.
pub fn probe_missing(
    plan: &Plan,
    session: &mut Session,
    monitor: &SystemMonitor,
    host_profile: Option<&Path>,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
) -> Result<(), Error> {
    if !plan.strategies.contains(&StrategyChoice::Smart) {
        return Ok(());
    }
    // The host's cost of one blocking I/O, which emulated presets compare their model's
    // service times against: measured once per host (stored), then their profiles again.
    // A very fast one also needs where its inline path stops paying beside a load.
    let builtin = |o: &Opened| o.profile.source == "builtin-model";
    let very_fast = session.opened.iter().any(|o| builtin(o) && o.profile.class == DeviceClass::VeryFast);
    let stored = HostWaitCost::stored();
    let missing =
        |h: &HostWaitCost| h.inline_wins_service_ns_max.is_none() || h.inline_write_wins_service_ns_max.is_none();
    if session.opened.iter().any(builtin) && (stored.is_none() || (very_fast && stored.as_ref().is_some_and(missing))) {
        if very_fast {
            ensure_inline_crossing(monitor, host_profile, stop, progress)?;
        } else {
            ensure_host_wait_cost(monitor, host_profile, stop, progress)?;
        }
        for o in session.opened.iter_mut().filter(|o| builtin(o)) {
            o.profile = profile::resolve(o.target.as_ref(), None)?;
        }
    }
    for o in session.opened.iter_mut() {
        let here = o.cpus_text();
        let elsewhere = o.profile.source == "probe" && o.profile.io_cpus.as_deref() != Some(here.as_str());
        if o.profile.source != "paper-default" && !o.created && !elsewhere {
            continue;
        }
        let why = if o.created {
            "created for this run".to_string()
        } else if elsewhere {
            format!(
                "its stored profile was measured with the I/O thread on CPUs {}, this run pins it to {here}; the stored profile is kept",
                o.profile.io_cpus.as_deref().unwrap_or("any")
            )
        } else {
            "no stored profile".to_string()
        };
        progress(Event::Note(&format!("probing {} ({why}) ...", o.target.label())));
        let probe = ProbePlan {
            sizes: PROBE_SIZES_BYTES.to_vec(),
            duration_ns: plan.probe_ns,
            writes: plan.writes(),
            cpus: o.cpus.clone(),
            host_profile: host_profile.map(Path::to_path_buf),
        };
        // The probe's own steps are not the evaluation's: keep only its notes.
        let mut notes_only = |e: Event<'_>| {
            if let Event::Note(n) = e {
                progress(Event::Note(n));
            }
        };
        let outcome = probe_target(o.target.as_ref(), &probe, monitor, stop, &mut notes_only)?;
        if !o.created && !elsewhere {
            outcome.profile.save(&profile_path(&outcome.profile.device))?;
        }
        o.probed.push(ProbedThresholds::of(&outcome.profile));
        // A device whose size threshold decides (a fast one) is probed once more, and the
        // second probe's thresholds are only compared with the first's (the criterion "two
        // probes of the same target give the same size threshold +- one size step"): smart
        // runs on the first.
        if outcome.profile.class == DeviceClass::Fast {
            notes_only(Event::Note(&format!("probing {} again, to compare its thresholds ...", o.target.label())));
            let again = probe_target(o.target.as_ref(), &probe, monitor, stop, &mut notes_only)?;
            o.probed.push(ProbedThresholds::of(&again.profile));
        }
        o.profile = outcome.profile;
    }
    Ok(())
}

/// The co-runner of a load while a target's cells run.
struct Corunners<'a> {
    load: Load,
    cpu: Option<&'a CpuLoad>,
    io: &'a IoLoad,
    workers: u32,
}

impl Corunners<'_> {
    fn snapshot(&self) -> Option<(LoadSnapshot, Option<(u64, u64)>)> {
        let s = match (self.cpu, self.load) {
            (Some(c), _) => c.snapshot(),
            (None, Load::IoIntensive) => self.io.snapshot(),
            _ => return None,
        };
        Some((s, proc_stat_iowait_total_ns()))
    }

    fn since(&self, start: Option<(LoadSnapshot, Option<(u64, u64)>)>) -> Option<Corunner> {
        let (a, w0) = start?;
        let (b, w1) = self.snapshot()?;
        let d = a.delta_to(&b);
        let iowait_pct = match (w0, w1) {
            (Some((i0, t0)), Some((i1, t1))) if t1 > t0 => (i1 - i0) as f64 / (t1 - t0) as f64 * 100.0,
            _ => 0.0,
        };
        Some(Corunner {
            kind: match (self.cpu.is_some(), self.io.as_processes()) {
                (true, _) => CorunnerKind::Cpu,
                (false, true) => CorunnerKind::IoProcesses,
                (false, false) => CorunnerKind::Io,
            },
            workers: self.workers,
            real_ns: d.real_ns,
            work: d.work,
            work_per_s: d.work_per_s,
            user_ns: d.user_ns,
            sys_ns: d.sys_ns,
            iowait_pct,
        })
    }
}

/// Runs the matrix. Each finished cell goes to `on_cell` as soon as it is measured (so an
/// interrupted run keeps what it has) and is returned with the others. Setting `stop` ends
/// the run after the current turn; what was measured is returned.
pub fn run(
    plan: &Plan,
    session: &Session,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
    on_cell: &mut dyn FnMut(&Cell) -> Result<(), Error>,
) -> Result<Vec<Cell>, Error> {
    let shapes: Vec<TargetShape> = session.opened.iter().map(Opened::shape).collect();
    progress(Event::Steps(plan.turns(&shapes) as u64));
    let mut cells = Vec::new();
    for &load in &plan.loads {
        let cpu = match load {
            Load::CpuIntensive => Some(CpuLoad::start(plan.cpu_workers)?),
            _ => None,
        };
        for o in &session.opened {
            if stop.load(Ordering::Relaxed) {
                return Ok(cells);
            }
            let io = IoLoad::default();
            let workers = if cpu.is_some() { plan.cpu_workers } else { plan.io_workers };
            let corunners = Corunners { load, cpu: cpu.as_ref(), io: &io, workers };
            let ran = stopping_scope(&io.stop, "measuring thread", |s| {
                if load == Load::IoIntensive {
                    let bs = o.target.block_bytes().max(4096);
                    if plan.io_processes && o.target.raw_fd().is_some() {
                        io.spawn_processes(o.target.as_ref(), plan.io_workers, bs, o.span)?;
                    } else {
                        if plan.io_processes {
                            progress(Event::Note(&format!(
                                "{}: the I/O workers run as threads (an emulated device lives in this process)",
                                o.target.label()
                            )));
                        }
                        io.spawn(s, o.target.as_ref(), plan.io_workers, bs, o.span)?;
                    }
                }
                if load != Load::BmOnly {
                    std::thread::sleep(std::time::Duration::from_nanos(SETTLE_NS));
                }
                for &w in &plan.workloads {
                    if w == Workload::Postmark && o.postmark_dir.is_none() {
                        continue;
                    }
                    for cellplan in w.cells(&plan.sizes) {
                        for cell in run_cell(plan, o, load, w, &cellplan, &corunners, monitor, stop, progress)? {
                            on_cell(&cell)?;
                            cells.push(cell);
                        }
                    }
                }
                Ok(())
            });
            io.stop_processes();
            ran?;
        }
    }
    Ok(cells)
}

/// One cell: the strategies take turns, each turn's record merges into its strategy's.
#[allow(clippy::too_many_arguments)]
fn run_cell(
    plan: &Plan,
    o: &Opened,
    load: Load,
    w: Workload,
    cellplan: &CellPlan,
    corunners: &Corunners<'_>,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
    progress: &mut Progress<'_>,
) -> Result<Vec<Cell>, Error> {
    let n = plan.strategies.len();
    let mut merged: Vec<Option<Turn>> = vec![None; n];
    let mut figures: Vec<Vec<TurnFigures>> = vec![Vec::new(); n];
    let rounds = plan.rounds_for(load, w, cellplan.bs_bytes, o.shape());
    let pm_base = PostmarkSpec { files: plan.postmark_files, ..PostmarkSpec::default() };
    for round in 0..rounds {
        for i in turn_order(n, round as usize) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let strategy = plan.strategies[i];
            progress(Event::Starting(&format!(
                "{} {} {} {} {} ({}/{rounds})",
                load.name(),
                o.target.label(),
                w.name(),
                smartcon_util::units::format_size(cellplan.bs_bytes),
                strategy.name(),
                round + 1,
            )));
            let start = corunners.snapshot();
            // What the I/O costs the kernel's threads: without a load only, where CPU is an
            // axis of the judgement and no co-runner's kernel work mixes in.
            let kernel = (load == Load::BmOnly).then(super::kcpu::KernelCpu::snapshot);
            let (result, counts) = match (&o.postmark_dir, w) {
                (Some(dir), Workload::Postmark) => {
                    let spec = PostmarkSpec {
                        duration_ns: plan.turn_ns(load, w, o.shape()),
                        strategy,
                        // One seed per round: every strategy does the same transactions.
                        seed: 1 + round as u64,
                        ..pm_base.clone()
                    };
                    let x = on_cpus(o.cpus.as_deref(), || {
                        smartcon_workloads::postmark::run(dir, &spec, o.target.as_ref(), &o.profile, monitor, stop)
                    })?;
                    (x.job, Some(x.counts))
                }
                _ => (run_phases(o, cellplan, strategy, round, plan.turn_ns(load, w, o.shape()), monitor, stop)?, None),
            };
            let kernel_cpu_pct = kernel.map_or(0.0, |k| k.pct_since());
            let turn = Turn { result, corunner: corunners.since(start), counts };
            figures[i].push(TurnFigures {
                perf: turn.counts.as_ref().map_or(turn.result.iops, |c| c.tps),
                corunner_work_per_s: turn.corunner.as_ref().map(|k| k.work_per_s),
                cpu_pct: turn.result.cpu_user_pct + turn.result.cpu_sys_pct,
                kernel_cpu_pct,
            });
            match &mut merged[i] {
                Some(m) => m.merge(turn),
                slot => *slot = Some(turn),
            }
            progress(Event::Done);
        }
    }
    let postmark = |counts: PostmarkCounts| PostmarkRecord {
        dir: o.postmark_dir.as_deref().unwrap_or(Path::new("")).display().to_string(),
        counts,
        size_bytes_min: pm_base.size_bytes_min,
        size_bytes_max: pm_base.size_bytes_max,
        block_bytes: pm_base.block_bytes,
        read_bias_pct: pm_base.read_bias_pct,
        create_bias_pct: pm_base.create_bias_pct,
    };
    Ok(merged
        .into_iter()
        .zip(figures)
        .filter_map(|(t, f)| t.map(|t| (t, f)))
        .map(|(t, turns)| {
            let postmark = t.counts.map(postmark);
            Cell {
                result: t.result,
                load,
                workload: w,
                corunner: t.corunner,
                tps: postmark.as_ref().map(|p| p.counts.tps),
                postmark,
                turns,
            }
        })
        .collect())
}

/// A turn of a phase list: the phases run back to back and their records merge.
#[allow(clippy::too_many_arguments)]
fn run_phases(
    o: &Opened,
    cellplan: &CellPlan,
    strategy: StrategyChoice,
    round: u32,
    turn_ns: u64,
    monitor: &SystemMonitor,
    stop: &AtomicBool,
) -> Result<JobResult, Error> {
    let mut merged: Option<JobResult> = None;
    for ph in &cellplan.phases {
        let mut js = JobSpec::new(ph.op, ph.pattern, ph.bs_bytes, strategy);
        js.threads = ph.threads;
        js.span_bytes = Some(o.span);
        js.duration_ns = (turn_ns * ph.share_pct as u64 / 100).max(1_000_000);
        js.seed = 1 + round as u64;
        js.fsync_every = ph.fsync_every;
        js.cpus = o.cpus.clone();
        js.warmup_ios = TURN_WARMUP_IOS;
        // Polling strategies (hybrid...) sample for a share of the turn, however short.
        js.poll = PollParams {
            sampling_ns: (js.duration_ns / 4).min(PollParams::DEFAULT.sampling_ns),
            ..PollParams::DEFAULT
        };
        let x = run_job(o.target.as_ref(), &js, &o.profile, monitor, stop)?;
        match &mut merged {
            Some(m) => m.merge(&x),
            None => merged = Some(x),
        }
    }
    merged.ok_or_else(|| Error::new(ErrorKind::Internal, "a workload cell without phases"))
}

/// Runs `f` on a thread of its own pinned to `cpus` (postmark does its I/O on the calling
/// thread, and this one must stay unpinned). A panic there becomes an error.
fn on_cpus<T: Send>(cpus: Option<&[usize]>, f: impl FnOnce() -> Result<T, Error> + Send) -> Result<T, Error> {
    let Some(cpus) = cpus else { return f() };
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            smartcon_engine::placement::pin_current_thread(cpus)?;
            f()
        });
        smartcon_engine::stop::join(h, "postmark")?
    })
}
