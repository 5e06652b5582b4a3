//! The fifth seed's "faster storage" study (its Table 4.8): one program on an emulated
//! device scaled by each of several factors, run through the interposition library
//! (`libsmartcon.so`, [`emulate_env`]) in virtual time, and what that predicts.
//!
//! Design: each point runs the program once with `SMARTCON_PRELOAD_EMU_SPEC` set to the
//! device with `speedup=S` and a fresh image file. Every process of the program appends an
//! `emu_process` record at exit; the point's predicted time is the run's wall time plus the
//! sum of the processes' clock skews (the device waits the clock skipped, minus the
//! emulator work it hid), which is what the run would have taken on the device. CPU
//! utilization is the processes' CPU time over that. The ideal time is the 1 x time divided
//! by S (a program that never turns CPU-bound). The 1 x point is also run in real time (the
//! library sleeps to each completion) to check the prediction.
//!
//! The default program is the seed's tar-and-wc test, sized down: a generated source tree
//! of text files is archived onto the image with `tar cf`, then extracted from it with
//! `tar xOf` into `wc`.
//!
//! Non-goals: programs whose processes overlap their device waits with each other's work
//! (the sum of skews then over-counts; each process has its own clock and model), and
//! statically linked programs (the library cannot load; they run in real time).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_preload_contract::env::{EmulateEnv, PreloadEnv};
use smartcon_preload_contract::launch::{self, Escalation, Launch};
use smartcon_preload_contract::record::{parse_lines, EmuProcessRecord, LatenessRecord};

/// What makes the library serve `image` from `spec`, in virtual or real time, with its
/// `emu_process` records appended to `stats` (the contract's variables,
/// `smartcon_preload_contract::env`).
pub fn emulate_env(spec: &str, image: &Path, virtual_time: bool, stats: &Path) -> EmulateEnv {
    EmulateEnv {
        spec: spec.to_string(),
        image: image.to_path_buf(),
        virtual_time,
        stats: stats.to_path_buf(),
        cpu_speed: None,
        cpu_clock: false,
    }
}

/// `SPEC=PATH` as `smartcon run --emulate` takes it: split at the last `=` (a spec has
/// `key=value` pairs; the path must not hold `=`), the spec checked.
pub fn parse_emulate_arg(text: &str) -> Result<(String, PathBuf), Error> {
    let (spec, path) = text.rsplit_once('=').filter(|(s, p)| !s.is_empty() && !p.is_empty()).ok_or_else(|| {
        Error::new(ErrorKind::Usage, format!("--emulate {text:?}: expected SPEC=PATH, e.g. emu:hdd=/var/tmp/disk.img"))
    })?;
    smartcon_devemu::parse_spec(spec).map_err(|e| Error::new(ErrorKind::Usage, format!("--emulate: {e}")))?;
    Ok((spec.to_string(), PathBuf::from(path)))
}

/// Checks (and, when missing, creates) the image of `smartcon run --emulate SPEC=PATH`
/// before the program runs, so a mistyped path is one line and exit 2, not a run on the
/// wrong file: PATH must be a regular file or a block device that can be read, not on a
/// pseudo file system (procfs, sysfs, ...); a missing PATH is created as a sparse file of
/// the device's capacity in a directory that must exist. Returns whether it was created.
pub fn prepare_image(spec: &str, path: &Path) -> Result<bool, Error> {
    use std::os::unix::fs::FileTypeExt;
    let usage = |why: String| Error::new(ErrorKind::Usage, format!("--emulate image {}: {why}", path.display()));
    match std::fs::metadata(path) {
        Ok(m) => {
            let t = m.file_type();
            if t.is_dir() {
                return Err(usage(
                    "is a directory; give a file (created at the device's capacity when missing)".into(),
                ));
            }
            if !t.is_file() && !t.is_block_device() {
                return Err(usage("is neither a regular file nor a block device".into()));
            }
            if let Some(fs) = pseudo_file_system(path) {
                return Err(usage(format!("is on {fs}, not a file that holds data")));
            }
            std::fs::File::open(path).map_err(|e| usage(format!("cannot be read: {e}")))?;
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            if !parent.is_dir() {
                return Err(usage(format!("the directory {} does not exist", parent.display())));
            }
            let capacity = smartcon_devemu::parse_spec(spec)
                .map_err(|e| Error::new(ErrorKind::Usage, format!("--emulate: {e}")))?
                .capacity_bytes;
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(|e| usage(format!("cannot be created: {e}")))?;
            f.set_len(capacity).map_err(|e| usage(format!("cannot be sized to {capacity} bytes: {e}")))?;
            Ok(true)
        }
        Err(e) => Err(usage(e.to_string())),
    }
}

/// The name of the pseudo file system `path` is on, if it is on one.
#[allow(clippy::unnecessary_cast)] // f_type and the magic numbers' types differ between libcs
fn pseudo_file_system(path: &Path) -> Option<&'static str> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: an all-zero statfs is valid; statfs only writes it.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a valid out pointer.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let kind = st.f_type as i64;
    [
        (libc::PROC_SUPER_MAGIC as i64, "procfs"),
        (libc::SYSFS_MAGIC as i64, "sysfs"),
        (libc::DEBUGFS_MAGIC as i64, "debugfs"),
        (libc::TRACEFS_MAGIC as i64, "tracefs"),
        (libc::CGROUP_SUPER_MAGIC as i64, "cgroupfs"),
        (libc::CGROUP2_SUPER_MAGIC as i64, "cgroup2fs"),
        (libc::SECURITYFS_MAGIC as i64, "securityfs"),
        (libc::DEVPTS_SUPER_MAGIC as i64, "devpts"),
    ]
    .into_iter()
    .find(|(m, _)| *m == kind)
    .map(|(_, name)| name)
}

/// What the `emu_process` records of one run add up to.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct EmuTotals {
    pub processes: u64,
    pub reads: u64,
    pub writes: u64,
    pub bytes: u64,
    pub device_ns: u64,
    pub skew_ns: i64,
    pub cpu_ns: u64,
    /// Descriptors of the image the program opened.
    pub image_opens: u64,
    /// I/O to the image that went around the model, by kind (`io_uring` rings, `libaio`
    /// requests, `mmap` maps, `raw_syscall` calls).
    pub around_model: std::collections::BTreeMap<String, u64>,
    /// Served requests by the way they waited (`smartcon run --strategy`; empty for the
    /// reference wait).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_strategy: std::collections::BTreeMap<String, u64>,
    /// `fsync`/`fdatasync` on the image (flushes the model timed) and the real calls' time.
    pub flushes: u64,
    pub flush_real_ns: u64,
    /// Requests of UML's ubd thread joined to the previous one (one guest request's pages).
    pub pieces_joined: u64,
    /// Of those, the pieces already due by the model when they were issued (see
    /// `EmuProcessRecord::pieces_due_before_issue`).
    pub pieces_due_before_issue: u64,
    /// Lost timer interrupts repaired under virtual time (UML's stall; `vtimer` in the
    /// preload library).
    pub lost_ticks_kicked: u64,
    /// UML's writes of a guest process's unchanged FP state not made (virtual time).
    pub ptrace_fp_sets_skipped: u64,
    /// How late served requests came back after the model's instant (all processes).
    pub lateness: LatenessRecord,
}

/// Sums `emu_process` records (JSON Lines; other lines are skipped).
pub fn sum_records(text: &str) -> EmuTotals {
    let mut t = EmuTotals::default();
    for r in parse_lines::<EmuProcessRecord>(text) {
        t.processes += 1;
        t.reads += r.reads;
        t.writes += r.writes;
        t.bytes += r.bytes;
        t.device_ns += r.device_ns;
        t.cpu_ns += r.cpu_ns;
        t.skew_ns += r.skew_ns;
        t.image_opens += r.image_opens;
        for (k, v) in r.around_model {
            *t.around_model.entry(k).or_default() += v;
        }
        for (k, v) in r.by_strategy {
            *t.by_strategy.entry(k).or_default() += v;
        }
        t.flushes += r.flushes;
        t.pieces_joined += r.pieces_joined;
        t.pieces_due_before_issue += r.pieces_due_before_issue;
        t.lost_ticks_kicked += r.lost_ticks_kicked;
        t.ptrace_fp_sets_skipped += r.ptrace_fp_sets_skipped;
        t.flush_real_ns += r.flush_real_ns;
        t.lateness.add(&r.lateness);
    }
    t
}

/// The line `smartcon run --emulate` prints, and what the records in `stats` add up to (the
/// file is removed).
pub fn summary(spec: &str, virtual_time: bool, stats: &Path) -> (String, EmuTotals) {
    let t = sum_records(&std::fs::read_to_string(stats).unwrap_or_default());
    let _ = std::fs::remove_file(stats);
    let clock =
        if virtual_time { format!("the clock skipped {:.3} s", t.skew_ns as f64 / 1e9) } else { "real time".into() };
    let waits = if t.by_strategy.is_empty() {
        String::new()
    } else {
        let by: Vec<String> = t.by_strategy.iter().map(|(k, n)| format!("{k} {n}")).collect();
        format!(", waited {}", by.join(", "))
    };
    let line = format!(
        "{spec} served {} reads and {} writes ({} bytes) in {} process(es){waits}, device time {:.3} s; {clock}",
        t.reads,
        t.writes,
        t.bytes,
        t.processes,
        t.device_ns as f64 / 1e9
    );
    (line, t)
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepOptions {
    /// `emu:PRESET[,key=value...]` without `speedup` (the sweep sets it).
    pub device: String,
    pub speedups: Vec<f64>,
    /// The program; `{image}` in an argument is replaced by the image path (also in
    /// `SMARTCON_SWEEP_IMAGE`). `None`: the tar-and-wc test.
    pub command: Option<Vec<OsString>>,
    /// libsmartcon.so.
    pub library: PathBuf,
    /// Where the images, the generated tree and the records go.
    pub work_dir: PathBuf,
    /// Bytes of text in the generated tree of the default program.
    pub tree_bytes: u64,
    /// Also run the 1 x point in real time to check it.
    pub check_real_time: bool,
}

/// One row of the table.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepPoint {
    pub speedup: f64,
    pub predicted_ns: u64,
    pub wall_ns: u64,
    /// predicted(1 x) / predicted(S).
    pub speedup_over_1x: f64,
    /// predicted(1 x) / S.
    pub ideal_ns: u64,
    pub cpu_utilization: f64,
    pub totals: EmuTotals,
}

/// The `emulate_sweep` record (docs/json.md).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepResult {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub device: String,
    pub command: Vec<String>,
    pub points: Vec<SweepPoint>,
    /// The first factor at which CPU utilization reaches [`CPU_BOUND_UTILIZATION`].
    pub cpu_bound_from: Option<f64>,
    /// The 1 x program run in real time, and how far the 1 x prediction is from it (%).
    pub real_time_1x_ns: Option<u64>,
    pub real_time_1x_error_pct: Option<f64>,
}

/// Utilization from which the program counts as CPU-bound.
pub const CPU_BOUND_UTILIZATION: f64 = 0.8;

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::Io, format!("sweep: {what}: {e}"))
}

/// Writes the default program's source tree: `bytes` of C-like text in files of 16 KiB,
/// deterministic, in directories of 32 files.
/// Runs the program with the library (the contract's launcher) until it ends or the
/// process is told to stop (SIGINT/SIGTERM set the engine's stop flag): then the program
/// and its children (its own process group) are sent SIGTERM, and SIGKILL a second later.
fn wait_or_stop(cmd: &mut std::process::Command) -> std::io::Result<std::process::ExitStatus> {
    let mut escalation = Escalation::new(std::time::Duration::from_secs(1));
    launch::run_group(cmd, || {
        escalation.signal(smartcon_engine::stop::global().load(std::sync::atomic::Ordering::Relaxed))
    })
}

fn stopped() -> Result<(), Error> {
    if smartcon_engine::stop::global().load(std::sync::atomic::Ordering::Relaxed) {
        return Err(Error::new(ErrorKind::Interrupted, "interrupted"));
    }
    Ok(())
}

pub fn generate_tree(dir: &Path, bytes: u64) -> Result<(), Error> {
    const FILE_BYTES: u64 = 16 << 10;
    let files = bytes.div_ceil(FILE_BYTES).max(1);
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..files {
        stopped()?;
        let sub = dir.join(format!("d{:03}", i / 32));
        std::fs::create_dir_all(&sub).map_err(|e| io_err("create the tree", e))?;
        let mut text = String::with_capacity(FILE_BYTES as usize + 80);
        while (text.len() as u64) < FILE_BYTES {
            state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            text.push_str(&format!(
                "static int f_{:x}(int x) {{ return x * {} + {}; }}\n",
                state >> 40,
                i,
                state % 977
            ));
        }
        std::fs::write(sub.join(format!("f{i:05}.c")), text).map_err(|e| io_err("write the tree", e))?;
    }
    Ok(())
}

fn default_command(tree: &Path) -> Vec<OsString> {
    let script =
        format!("tar cf \"$SMARTCON_SWEEP_IMAGE\" -C '{}' . && tar xOf \"$SMARTCON_SWEEP_IMAGE\" | wc", tree.display());
    vec!["sh".into(), "-c".into(), script.into()]
}

/// One run of `command` on `spec`: (wall ns, totals of its records).
fn run_once(
    opts: &SweepOptions,
    command: &[OsString],
    spec: &str,
    virtual_time: bool,
    tag: &str,
) -> Result<(u64, EmuTotals), Error> {
    let image = opts.work_dir.join(format!("image-{tag}.img"));
    let stats = opts.work_dir.join(format!("records-{tag}.jsonl"));
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&stats);
    let image_text = image.to_string_lossy().into_owned();
    let args: Vec<OsString> =
        command.iter().map(|a| a.to_string_lossy().replace("{image}", &image_text).into()).collect();
    let program = args.first().ok_or_else(|| Error::new(ErrorKind::Usage, "sweep: an empty command"))?;
    let mut cmd = Command::new(program);
    cmd.args(&args[1..]).env("SMARTCON_SWEEP_IMAGE", &image).stdout(std::process::Stdio::null());
    let env = PreloadEnv { emulate: Some(emulate_env(spec, &image, virtual_time, &stats)), ..Default::default() };
    Launch { library: opts.library.clone(), env }.apply(&mut cmd);
    let start = std::time::Instant::now();
    let status = wait_or_stop(&mut cmd).map_err(|e| io_err(&format!("run {}", program.to_string_lossy()), e))?;
    let wall_ns = start.elapsed().as_nanos() as u64;
    if !status.success() {
        return Err(Error::new(
            ErrorKind::Io,
            format!("sweep: {} failed at {spec}: {status}", program.to_string_lossy()),
        ));
    }
    let text = std::fs::read_to_string(&stats).unwrap_or_default();
    let _ = std::fs::remove_file(&image);
    Ok((wall_ns, sum_records(&text)))
}

/// One run of a sweep (the `emulate_sweep_point` record, docs/json.md): the program at one
/// factor, in virtual time, or the 1 x run in real time. A sweep is these runs, each
/// independent of the others, then [`assemble`]: so that a Ray cluster can run them apart
/// (`emulate sweep --ray`) and the report put them together as the serial sweep does.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SweepRun {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub device: String,
    pub command: Vec<String>,
    pub speedup: f64,
    /// Virtual time (the clock skips the device waits); false: the 1 x check in real time.
    pub virtual_time: bool,
    /// The 1 x run that only serves as the base of `speedup_over_1x` (1 was not asked for).
    pub base_only: bool,
    pub wall_ns: u64,
    pub totals: EmuTotals,
}

/// Checks the options and prepares the work directory; returns the command to run (the
/// default program's tree generated there).
pub fn prepare(opts: &SweepOptions) -> Result<Vec<OsString>, Error> {
    check_factors(&opts.device, &opts.speedups)?;
    if !opts.library.exists() {
        return Err(Error::new(ErrorKind::Setup, format!("sweep: {} does not exist", opts.library.display())));
    }
    std::fs::create_dir_all(&opts.work_dir).map_err(|e| io_err("create the work directory", e))?;
    Ok(match &opts.command {
        Some(c) => c.clone(),
        None => {
            let tree = opts.work_dir.join("tree");
            let _ = std::fs::remove_dir_all(&tree);
            generate_tree(&tree, opts.tree_bytes)?;
            default_command(&tree)
        }
    })
}

/// Checks `--device` and `--speedups`: each factor must be one a spec's `speedup=` takes
/// (the device model's own parser judges the spec each run will use, so the bounds are the
/// same everywhere: 0.001 to 1,000,000).
pub fn check_factors(device: &str, speedups: &[f64]) -> Result<(), Error> {
    if speedups.is_empty() || speedups.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(Error::new(ErrorKind::Usage, "sweep: --speedups needs positive factors, e.g. 1,10,20"));
    }
    if device.contains("speedup=") {
        return Err(Error::new(ErrorKind::Usage, "sweep: give --device without speedup= (the sweep sets it)"));
    }
    smartcon_devemu::parse_spec(device).map_err(|e| Error::new(ErrorKind::Usage, format!("sweep: {e}")))?;
    for s in factors(speedups) {
        smartcon_devemu::parse_spec(&format!("{device},speedup={s}"))
            .map_err(|e| Error::new(ErrorKind::Usage, format!("sweep: --speedups {s}: {e}")))?;
    }
    Ok(())
}

/// The factors a sweep runs: 1 x first when it was not asked for (the base).
pub fn factors(speedups: &[f64]) -> Vec<f64> {
    let mut f = speedups.to_vec();
    if !f.contains(&1.0) {
        f.insert(0, 1.0);
    }
    f
}

/// Runs `command` (from [`prepare`]) once at `speedup`.
pub fn run_point(
    opts: &SweepOptions,
    command: &[OsString],
    speedup: f64,
    virtual_time: bool,
    tag: &str,
) -> Result<SweepRun, Error> {
    let spec = format!("{},speedup={speedup}", opts.device);
    let (wall_ns, totals) = run_once(opts, command, &spec, virtual_time, tag)?;
    Ok(SweepRun {
        kind: "emulate_sweep_point",
        device: opts.device.clone(),
        command: command.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
        speedup,
        virtual_time,
        base_only: !opts.speedups.contains(&speedup),
        wall_ns,
        totals,
    })
}

/// The sweep's record from its runs (any order; the virtual-time 1 x run is the base).
pub fn assemble(runs: &[SweepRun]) -> Result<SweepResult, Error> {
    let first = runs.first().ok_or_else(|| Error::new(ErrorKind::Usage, "sweep: no run to assemble"))?;
    let mut virtual_runs: Vec<&SweepRun> = runs.iter().filter(|r| r.virtual_time).collect();
    virtual_runs.sort_by(|a, b| a.speedup.total_cmp(&b.speedup));
    let mut points: Vec<SweepPoint> = virtual_runs
        .iter()
        .map(|r| {
            let predicted_ns = (r.wall_ns as i64 + r.totals.skew_ns).max(1) as u64;
            SweepPoint {
                speedup: r.speedup,
                predicted_ns,
                wall_ns: r.wall_ns,
                speedup_over_1x: 0.0,
                ideal_ns: 0,
                cpu_utilization: r.totals.cpu_ns as f64 / predicted_ns as f64,
                totals: r.totals.clone(),
            }
        })
        .collect();
    let base_ns = points
        .iter()
        .find(|p| p.speedup == 1.0)
        .map(|p| p.predicted_ns)
        .ok_or_else(|| Error::new(ErrorKind::Usage, "sweep: the 1 x run (the base) is missing"))?;
    for p in &mut points {
        p.speedup_over_1x = base_ns as f64 / p.predicted_ns as f64;
        p.ideal_ns = (base_ns as f64 / p.speedup).round() as u64;
    }
    let shown: Vec<f64> = virtual_runs.iter().filter(|r| !r.base_only).map(|r| r.speedup).collect();
    points.retain(|p| shown.contains(&p.speedup));
    let real = runs.iter().find(|r| !r.virtual_time);
    Ok(SweepResult {
        kind: "emulate_sweep",
        device: first.device.clone(),
        command: first.command.clone(),
        cpu_bound_from: points.iter().find(|p| p.cpu_utilization >= CPU_BOUND_UTILIZATION).map(|p| p.speedup),
        points,
        real_time_1x_ns: real.map(|r| r.wall_ns),
        real_time_1x_error_pct: real.map(|r| (base_ns as f64 - r.wall_ns as f64) / r.wall_ns as f64 * 100.0),
    })
}

/// Runs the sweep: every factor in virtual time, then (if asked) 1 x in real time.
pub fn run_sweep(opts: &SweepOptions) -> Result<SweepResult, Error> {
    assemble(&run_sweep_points(opts)?)
}

/// The runs of [`run_sweep`], before they are assembled.
pub fn run_sweep_points(opts: &SweepOptions) -> Result<Vec<SweepRun>, Error> {
    let command = prepare(opts)?;
    let mut runs = Vec::new();
    for (i, s) in factors(&opts.speedups).into_iter().enumerate() {
        stopped()?;
        runs.push(run_point(opts, &command, s, true, &format!("v{i}"))?);
    }
    if opts.check_real_time {
        stopped()?;
        runs.push(run_point(opts, &command, 1.0, false, "real")?);
    }
    Ok(runs)
}

/// The table, as the seed prints it (markdown).
pub fn table(r: &SweepResult) -> String {
    let mut out = String::from(
        "| speedup | predicted (s) | speedup over 1x | ideal (s) | CPU utilization |\n|---|---|---|---|---|\n",
    );
    for p in &r.points {
        out.push_str(&format!(
            "| {} | {:.3} | {:.2} | {:.3} | {:.0}% |\n",
            p.speedup,
            p.predicted_ns as f64 / 1e9,
            p.speedup_over_1x,
            p.ideal_ns as f64 / 1e9,
            p.cpu_utilization * 100.0
        ));
    }
    if let (Some(rt), Some(e)) = (r.real_time_1x_ns, r.real_time_1x_error_pct) {
        out.push_str(&format!("\n1 x in real time: {:.3} s; the prediction is {e:+.1}% from it\n", rt as f64 / 1e9));
    }
    match r.cpu_bound_from {
        Some(s) => out.push_str(&format!("CPU-bound (utilization >= {CPU_BOUND_UTILIZATION}) from {s} x\n")),
        None => out.push_str("not CPU-bound at any factor swept\n"),
    }
    out
}

/// Predicted and ideal time against the factor, and where the program turns CPU-bound.
pub fn plot_svg(r: &SweepResult, path: &Path) -> Result<(), Error> {
    use plotters::prelude::*;
    let perr = |e: &dyn std::fmt::Display| Error::new(ErrorKind::Io, format!("sweep plot {}: {e}", path.display()));
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| perr(&e))?;
    let x_max = r.points.iter().map(|p| p.speedup).fold(1.0, f64::max);
    let y_max = r.points.iter().map(|p| p.predicted_ns.max(p.ideal_ns) as f64 / 1e9).fold(1e-3, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{}: time against device speedup", r.device), ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max * 1.05, 0.0..y_max)
        .map_err(|e| perr(&e))?;
    chart.configure_mesh().x_desc("device speedup (x)").y_desc("time (s)").draw().map_err(|e| perr(&e))?;
    let pts =
        |f: &dyn Fn(&SweepPoint) -> u64| r.points.iter().map(|p| (p.speedup, f(p) as f64 / 1e9)).collect::<Vec<_>>();
    chart
        .draw_series(LineSeries::new(pts(&|p| p.predicted_ns), &BLUE))
        .map_err(|e| perr(&e))?
        .label("predicted")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(pts(&|p| p.ideal_ns), &RED))
        .map_err(|e| perr(&e))?
        .label("ideal (linear)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    if let Some(s) = r.cpu_bound_from {
        chart
            .draw_series(LineSeries::new(vec![(s, 0.0), (s, y_max)], BLACK.stroke_width(1)))
            .map_err(|e| perr(&e))?
            .label(format!("CPU-bound from {s} x"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    chart.configure_series_labels().border_style(BLACK).draw().map_err(|e| perr(&e))?;
    root.present().map_err(|e| perr(&e))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emulate_arg_splits_at_the_last_equals_and_checks_the_spec() {
        let (s, p) = parse_emulate_arg("emu:hdd,size=64m=/tmp/x.img").unwrap();
        assert_eq!((s.as_str(), p.as_path()), ("emu:hdd,size=64m", Path::new("/tmp/x.img")));
        assert!(parse_emulate_arg("emu:nosuch=/tmp/x").is_err());
        assert!(parse_emulate_arg("/tmp/x").is_err());
    }

    #[test]
    fn an_image_must_be_a_readable_file_in_a_directory_that_exists() {
        // Removed when dropped, also when the test panics.
        let scratch = tempfile::Builder::new().prefix("smartcon-image-").tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        for bad in [dir.clone(), PathBuf::from("/proc/self/mem"), dir.join("no-such-dir/disk.img")] {
            let e = prepare_image("emu:hdd", &bad).expect_err(&bad.display().to_string());
            assert_eq!(e.kind, ErrorKind::Usage, "{e}");
        }
        let img = dir.join("disk.img");
        assert!(prepare_image("emu:nvram,size=16m", &img).unwrap(), "created");
        assert_eq!(std::fs::metadata(&img).unwrap().len(), 16 << 20);
        assert!(!prepare_image("emu:nvram,size=16m", &img).unwrap(), "used as it is");
    }

    #[test]
    fn runs_assemble_against_the_virtual_1x_run_in_any_order() {
        let run = |speedup: f64, virtual_time: bool, base_only: bool, wall_ns: u64, skew_ns: i64| SweepRun {
            kind: "emulate_sweep_point",
            device: "emu:hdd".into(),
            command: vec!["true".into()],
            speedup,
            virtual_time,
            base_only,
            wall_ns,
            totals: EmuTotals { skew_ns, cpu_ns: 500, ..Default::default() },
        };
        // 1 x predicts 1000 ns (wall 100 + skew 900); 10 x predicts 200 ns; real 1 x took 800.
        let runs = [run(10.0, true, false, 100, 100), run(1.0, false, false, 800, 0), run(1.0, true, true, 100, 900)];
        let r = assemble(&runs).unwrap();
        assert_eq!(r.points.len(), 1, "the base run is not shown when 1 x was not asked for");
        let p = &r.points[0];
        assert_eq!((p.predicted_ns, p.ideal_ns), (200, 100));
        assert_eq!(p.speedup_over_1x, 5.0);
        assert_eq!(r.cpu_bound_from, Some(10.0), "500 ns of CPU in 200 ns predicted");
        assert_eq!(r.real_time_1x_ns, Some(800));
        assert_eq!(r.real_time_1x_error_pct, Some(25.0));
        assert!(assemble(&runs[..2]).is_err(), "no base");
        assert_eq!(factors(&[10.0, 20.0]), [1.0, 10.0, 20.0]);
    }

    #[test]
    fn records_sum_and_other_lines_are_skipped() {
        let text = "{\"type\":\"emu_process\",\"reads\":2,\"skew_ns\":-5,\"cpu_ns\":7,\"pieces_joined\":4,\"pieces_due_before_issue\":3}\n{\"type\":\"preload_process\",\"reads\":9}\nnot json\n{\"type\":\"emu_process\",\"reads\":3,\"skew_ns\":10,\"pieces_joined\":2,\"pieces_due_before_issue\":1}\n";
        let t = sum_records(text);
        assert_eq!((t.processes, t.reads, t.skew_ns, t.cpu_ns), (2, 5, 5, 7));
        assert_eq!((t.pieces_joined, t.pieces_due_before_issue), (6, 4));
    }
}
