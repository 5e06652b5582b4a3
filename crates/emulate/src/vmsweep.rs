//! `smartcon emulate sweep --vm`: the fifth seed's studies in full-system form, each point a
//! User-Mode Linux guest ([`crate::vm`]) on the emulated device.
//!
//! - The faster-storage study (the seed's Tables 4.8 and 4.9): a source tree (generated,
//!   [`crate::sweep::generate_tree`], archived with tar on the host) is extracted onto ext4
//!   in the guest, synced, the guest's caches dropped, and every file read back with wc; at
//!   each device speed-up, with each guest I/O scheduler (`none`, the seed's NOOP, and
//!   `bfq`, the anticipatory-idling one, the seed's CFQ), in virtual time. The columns are
//!   the seed's: the predicted time (CMD's guest time), the speed-up over the 1 x point, the
//!   ideal time (1 x divided by the speed-up) and the guest CPU's utilization; the 1 x point
//!   is also run in real time (the reference system) with each scheduler.
//! - The mixes (the seed's Tables 4.6 and 4.7): fio in the guest, QD1 psync direct I/O on a
//!   file on ext4 (written before CMD's time starts), read / write / 50-50, random with 20%
//!   sequential, 4 KiB / 128 KiB / uniform 4-128 KiB, in virtual time: IOPS, bandwidth, the
//!   guest's elapsed time and fio's CPU, the wall time and the speed-up over real time.
//!
//! Non-goals: the seed's ext3 (ext4 here), its 36 GB drive model (the `emu:` preset given),
//! and running every mix in real time too (the vm's own tests and scripts/bench-vm.sh do that).

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use serde::Serialize;
use smartcon_engine::error::{Error, ErrorKind};

use crate::vm::{self, VmOptions, VmResult};

/// The guest's share of busy CPU from which a point counts as CPU-bound.
pub const CPU_BOUND_UTILIZATION: f64 = 0.8;
/// The seed's speed-ups (Tables 4.8 and 4.9), for `--full`.
pub const SEED_SPEEDUPS: [f64; 16] =
    [1.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0, 100.0, 120.0, 140.0, 160.0, 180.0, 200.0];
/// The default sweep's speed-ups (a few minutes on a 2-core host).
pub const QUICK_SPEEDUPS: [f64; 3] = [1.0, 10.0, 100.0];
/// The default tree, and `--full`'s.
pub const QUICK_TREE_BYTES: u64 = 16 << 20;
pub const FULL_TREE_BYTES: u64 = 64 << 20;

/// What to run.
#[derive(Debug, Clone)]
pub struct VmSweepOptions {
    /// `emu:PRESET[,key=value...]` without `speedup=`.
    pub device: String,
    pub speedups: Vec<f64>,
    pub schedulers: Vec<String>,
    pub tree_bytes: u64,
    /// Also the 1 x point in real time, per scheduler.
    pub real_time_reference: bool,
    /// The fio mixes (Tables 4.6/4.7) instead of the tar study, with this many I/Os each.
    pub fio_ios: Option<u64>,
    /// `--full`: all nine mixes (else read-small, write-large, read-write-uniform).
    pub full: bool,
    /// The guest's kernel, the library, its memory and TMPDIR (as `emulate vm`).
    pub library: PathBuf,
    pub kernel: PathBuf,
    pub mem_mib: u64,
    pub tmp_dir: PathBuf,
}

/// One guest run of the tar study.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TarPoint {
    pub scheduler: String,
    pub speedup: f64,
    pub virtual_time: bool,
    /// CMD's guest time: the seed's predicted time (in real time: the reference's).
    pub predicted_ns: u64,
    /// guest(1 x, same scheduler, virtual time) / guest(this point).
    pub speedup_over_1x: f64,
    /// guest(1 x) / speed-up.
    pub ideal_ns: u64,
    pub cpu_utilization: f64,
    pub wall_ns: u64,
    /// Guest time over CMD's wall time.
    pub speedup_over_real_time: f64,
    pub device_share: f64,
    pub within_2pct: Option<f64>,
    pub reads: u64,
    pub writes: u64,
    pub flushes: u64,
    /// Virtual time: the guest's device requests whose hold on the clock outlived the
    /// preload library's guard (the record's `lateness.caps_expired`; 0 when all is well).
    pub caps_expired: u64,
}

/// The `emulate_vm_sweep` record.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TarSweep {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub device: String,
    pub tree_bytes: u64,
    pub files: u64,
    /// Virtual-time points, by scheduler then speed-up, and the real-time 1 x references.
    pub points: Vec<TarPoint>,
    /// Per scheduler: the first speed-up whose utilization reaches [`CPU_BOUND_UTILIZATION`].
    pub cpu_bound_from: Vec<(String, Option<f64>)>,
    /// Per scheduler: (1 x virtual - 1 x real) / 1 x real, in %.
    pub real_time_1x_error_pct: Vec<(String, f64)>,
}

/// One fio mix in the guest.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FioPoint {
    /// "read / small" etc.: the direction and the size class.
    pub mix: String,
    pub iops: f64,
    pub bandwidth_mb_s: f64,
    /// fio's run time by the guest's clock (the seed's "elapsed system time").
    pub elapsed_ns: u64,
    /// fio's CPU (its usr and sys shares times its run time).
    pub cpu_user_ns: u64,
    pub cpu_sys_ns: u64,
    /// CMD's wall time and guest time over it (the seed's "speedup over real-time").
    pub wall_ns: u64,
    pub guest_ns: u64,
    pub speedup_over_real_time: f64,
    /// The device's time over CMD's guest time (the seed's "DiskSim busy" is the model's
    /// own computing time, which this does not measure).
    pub device_share: f64,
    pub within_2pct: Option<f64>,
    /// fio's mean completion latency.
    pub clat_mean_ns: f64,
}

/// The `emulate_vm_fio_sweep` record.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FioSweep {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub device: String,
    pub ios: u64,
    pub points: Vec<FioPoint>,
}

/// The fio mixes: (name, fio's --rw and its extra flags, block size flags).
fn mixes(full: bool) -> Vec<(String, String)> {
    let dirs = [
        ("read", "--rw=randread --percentage_random=80"),
        ("write", "--rw=randwrite --percentage_random=80"),
        ("read-write", "--rw=randrw --rwmixread=50 --percentage_random=80"),
    ];
    let sizes = [("small", "--bs=4k"), ("large", "--bs=128k"), ("uniform", "--bsrange=4k-128k")];
    let mut out = Vec::new();
    for (i, (d, rw)) in dirs.iter().enumerate() {
        for (j, (s, bs)) in sizes.iter().enumerate() {
            // The quick set: one of each direction and one of each size.
            if full || i == j {
                out.push((format!("{d} / {s}"), format!("{rw} {bs}")));
            }
        }
    }
    out
}

fn check(opts: &VmSweepOptions) -> Result<(), Error> {
    if opts.speedups.is_empty() || opts.speedups.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
        return Err(Error::new(ErrorKind::Usage, "sweep --vm: --speedups needs positive factors, e.g. 1,10,100"));
    }
    if opts.device.contains("speedup=") {
        return Err(Error::new(ErrorKind::Usage, "sweep --vm: give --device without speedup= (the sweep sets it)"));
    }
    smartcon_devemu::parse_spec(&opts.device).map_err(|e| Error::new(ErrorKind::Usage, format!("sweep --vm: {e}")))?;
    for s in &opts.schedulers {
        if !vm::SCHEDULERS.contains(&s.as_str()) {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("sweep --vm: scheduler {s}: use one of {}", vm::SCHEDULERS.join(", ")),
            ));
        }
    }
    Ok(())
}

fn base(opts: &VmSweepOptions, spec: String, command: &str) -> VmOptions {
    VmOptions {
        spec,
        fs: vm::Fs::Ext4,
        scheduler: None,
        image: None,
        virtual_time: true,
        cpu_speed: 1.0,
        guest_clock: vm::GuestClock::Cpu,
        command: vec!["sh".into(), "-c".into(), command.into()],
        library: opts.library.clone(),
        kernel: opts.kernel.clone(),
        mem_mib: opts.mem_mib,
        tmp_dir: opts.tmp_dir.clone(),
        inputs: Vec::new(),
        prepare: None,
        quiet_console: true,
    }
}

/// The device spec of one point (1 GiB unless the device says its size).
fn point_spec(device: &str, speedup: f64) -> Result<String, Error> {
    let parsed = smartcon_devemu::parse_spec(device).map_err(|e| Error::new(ErrorKind::Usage, e.to_string()))?;
    let has_size = device.split(',').skip(1).any(|kv| kv.starts_with("size="));
    let size = if has_size || parsed.capacity_bytes == vm::IMAGE_BYTES_DEFAULT {
        String::new()
    } else {
        format!(",size={}", vm::IMAGE_BYTES_DEFAULT)
    };
    Ok(format!("{device}{size},speedup={speedup}"))
}

/// A point's progress line, one shape for the tar and the fio sweeps: "[i/n] WHAT: BEFORE
/// <guest time> in <wall> (<speed-up> x real time), AFTER<accuracy>" (`at` counts from 0).
fn point_line(at: (usize, usize), what: &str, before: &str, r: &VmResult, after: &str) -> String {
    format!(
        "[{}/{}] {what}: {before}{:.3} s guest time in {:.2} s wall ({:.1} x real time), {after}{}",
        at.0 + 1,
        at.1,
        r.guest_ns as f64 / 1e9,
        r.command_wall_ns as f64 / 1e9,
        r.speedup,
        vm::accuracy_text(r)
    )
}

fn run_checked(o: &VmOptions, stop: &AtomicBool, what: &str) -> Result<VmResult, Error> {
    let r = vm::run_vm(o, stop, &mut |_| {})?;
    if r.exit_code != 0 {
        return Err(Error::new(
            ErrorKind::Io,
            format!("sweep --vm: {what}: the command exited {} in the guest", r.exit_code),
        ));
    }
    Ok(r)
}

/// The tar command: extraction onto the guest's ext4, sync, caches dropped, wc of every file.
pub const TAR_COMMAND: &str = "tar xf \"$SMARTCON_VM_WORK/src.tar\" && sync && echo 3 > /proc/sys/vm/drop_caches && find src -type f -exec cat {} + | wc > /dev/null";

/// The tar study. `scratch` is a directory of the caller's (recorded for cleanup) for the
/// tree and its archive; `say` gets one line per point.
pub fn run_tar(
    opts: &VmSweepOptions,
    scratch: &Path,
    stop: &AtomicBool,
    say: &mut dyn FnMut(&str),
) -> Result<TarSweep, Error> {
    check(opts)?;
    let tree = scratch.join("src");
    crate::sweep::generate_tree(&tree, opts.tree_bytes)?;
    let files = opts.tree_bytes.div_ceil(16 << 10).max(1);
    let archive = scratch.join("src.tar");
    let out = std::process::Command::new("tar")
        .arg("cf")
        .arg(&archive)
        .arg("-C")
        .arg(scratch)
        .arg("src")
        .output()
        .map_err(|e| Error::new(ErrorKind::Setup, format!("sweep --vm: tar: {e}")))?;
    if !out.status.success() {
        return Err(Error::new(
            ErrorKind::Setup,
            format!("sweep --vm: tar cf: {}", String::from_utf8_lossy(&out.stderr).trim()),
        ));
    }
    let _ = std::fs::remove_dir_all(&tree);
    let mut plan: Vec<(String, f64, bool)> = Vec::new();
    let mut speedups = opts.speedups.clone();
    if !speedups.contains(&1.0) {
        speedups.insert(0, 1.0);
    }
    for s in &opts.schedulers {
        for &x in &speedups {
            plan.push((s.clone(), x, true));
        }
        if opts.real_time_reference {
            plan.push((s.clone(), 1.0, false));
        }
    }
    let mut points = Vec::new();
    for (i, (sched, speedup, virtual_time)) in plan.iter().enumerate() {
        let mut o = base(opts, point_spec(&opts.device, *speedup)?, TAR_COMMAND);
        o.scheduler = Some(sched.clone());
        o.virtual_time = *virtual_time;
        o.inputs = vec![archive.clone()];
        let what = format!("{sched} {speedup} x {}", if *virtual_time { "virtual time" } else { "real time" });
        let r = run_checked(&o, stop, &what)?;
        let busy =
            format!("guest CPU {:.0}% busy, device {:.0}%, ", r.guest_cpu_utilization * 100.0, r.device_share * 100.0);
        say(&point_line((i, plan.len()), &what, "", &r, &busy));
        points.push(TarPoint {
            scheduler: sched.clone(),
            speedup: *speedup,
            virtual_time: *virtual_time,
            predicted_ns: r.guest_ns,
            speedup_over_1x: 0.0,
            ideal_ns: 0,
            cpu_utilization: r.guest_cpu_utilization,
            wall_ns: r.command_wall_ns,
            speedup_over_real_time: r.speedup,
            device_share: r.device_share,
            within_2pct: r.within_2pct,
            reads: r.device.reads,
            writes: r.device.writes,
            flushes: r.device.flushes,
            caps_expired: r.device.lateness.caps_expired,
        });
    }
    Ok(assemble_tar(&opts.device, opts.tree_bytes, files, points, &opts.speedups))
}

/// The columns that depend on the 1 x point, the CPU-bound speed-ups and the reference's
/// error, from the points as run (1 x runs that were not asked for are dropped after).
pub fn assemble_tar(device: &str, tree_bytes: u64, files: u64, mut points: Vec<TarPoint>, asked: &[f64]) -> TarSweep {
    let mut schedulers: Vec<String> = Vec::new();
    for p in &points {
        if !schedulers.contains(&p.scheduler) {
            schedulers.push(p.scheduler.clone());
        }
    }
    let base = |points: &[TarPoint], s: &str, virtual_time: bool| {
        points
            .iter()
            .find(|p| p.scheduler == s && p.speedup == 1.0 && p.virtual_time == virtual_time)
            .map(|p| p.predicted_ns)
    };
    let bases: Vec<(String, Option<u64>, Option<u64>)> =
        schedulers.iter().map(|s| (s.clone(), base(&points, s, true), base(&points, s, false))).collect();
    for p in &mut points {
        if let Some((_, Some(b), _)) = bases.iter().find(|(s, _, _)| *s == p.scheduler) {
            p.speedup_over_1x = *b as f64 / p.predicted_ns.max(1) as f64;
            p.ideal_ns = (*b as f64 / p.speedup).round() as u64;
        }
    }
    points.retain(|p| !p.virtual_time || asked.contains(&p.speedup));
    let cpu_bound_from = schedulers
        .iter()
        .map(|s| {
            let first = points
                .iter()
                .filter(|p| p.virtual_time && p.scheduler == *s && p.cpu_utilization >= CPU_BOUND_UTILIZATION)
                .map(|p| p.speedup)
                .reduce(f64::min);
            (s.clone(), first)
        })
        .collect();
    let real_time_1x_error_pct = bases
        .iter()
        .filter_map(|(s, v, r)| {
            let (v, r) = ((*v)? as f64, (*r)? as f64);
            Some((s.clone(), (v - r) / r * 100.0))
        })
        .collect();
    TarSweep {
        kind: "emulate_vm_sweep",
        device: device.to_string(),
        tree_bytes,
        files,
        points,
        cpu_bound_from,
        real_time_1x_error_pct,
    }
}

/// The seed's Table 4.8 (and 4.9): one table per scheduler, markdown.
pub fn tar_table(r: &TarSweep) -> String {
    let mut out = String::new();
    let mut schedulers: Vec<&str> = Vec::new();
    for p in &r.points {
        if !schedulers.contains(&p.scheduler.as_str()) {
            schedulers.push(&p.scheduler);
        }
    }
    for s in schedulers {
        out.push_str(&format!(
            "\n{} scheduler, {} ({} files, {:.1} MiB extracted onto ext4 then read with wc):\n\n",
            s,
            r.device,
            r.files,
            r.tree_bytes as f64 / (1 << 20) as f64
        ));
        out.push_str("| disk speed | predicted time (s) | speedup over 1x | ideal time (s) | CPU utilization | wall (s) | x real time | within 2% |\n|---|---|---|---|---|---|---|---|\n");
        for p in r.points.iter().filter(|p| p.scheduler == s) {
            let speed = match (p.virtual_time, p.speedup == 1.0) {
                (false, _) => "1x real time (reference)".to_string(),
                (true, true) => "1x".to_string(),
                (true, false) => format!("{}x", p.speedup),
            };
            out.push_str(&format!(
                "| {speed} | {:.3} | {} | {} | {:.1}% | {:.2} | {:.1} | {} |\n",
                p.predicted_ns as f64 / 1e9,
                if p.virtual_time { format!("{:.2}", p.speedup_over_1x) } else { "-".into() },
                if p.virtual_time && p.speedup != 1.0 { format!("{:.3}", p.ideal_ns as f64 / 1e9) } else { "-".into() },
                p.cpu_utilization * 100.0,
                p.wall_ns as f64 / 1e9,
                p.speedup_over_real_time,
                p.within_2pct.map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
            ));
        }
        if let Some((_, e)) = r.real_time_1x_error_pct.iter().find(|(x, _)| x == s) {
            out.push_str(&format!("\nthe 1x point in virtual time is {e:+.1}% from the real-time reference\n"));
        }
        match r.cpu_bound_from.iter().find(|(x, _)| x == s).and_then(|(_, f)| *f) {
            Some(f) => out
                .push_str(&format!("CPU-bound (guest CPU >= {:.0}% busy) from {f}x\n", CPU_BOUND_UTILIZATION * 100.0)),
            None => out.push_str(&format!(
                "not CPU-bound (guest CPU below {:.0}% busy) at any speed swept\n",
                CPU_BOUND_UTILIZATION * 100.0
            )),
        }
    }
    out
}

/// Predicted and ideal time against the speed-up, one line per scheduler.
pub fn plot_tar_svg(r: &TarSweep, path: &Path) -> Result<(), Error> {
    use plotters::prelude::*;
    let perr = |e: &dyn std::fmt::Display| Error::new(ErrorKind::Io, format!("sweep plot {}: {e}", path.display()));
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| perr(&e))?;
    let virt: Vec<&TarPoint> = r.points.iter().filter(|p| p.virtual_time).collect();
    let x_max = virt.iter().map(|p| p.speedup).fold(1.0, f64::max);
    let y_max = virt.iter().map(|p| p.predicted_ns.max(p.ideal_ns) as f64 / 1e9).fold(1e-3, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(&root)
        .caption(format!("{} in a UML guest: tar x + wc against device speed-up", r.device), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max * 1.05, 0.0..y_max)
        .map_err(|e| perr(&e))?;
    chart.configure_mesh().x_desc("device speed-up (x)").y_desc("guest time (s)").draw().map_err(|e| perr(&e))?;
    let colors = [BLUE, GREEN, MAGENTA, CYAN];
    let mut schedulers: Vec<&str> = Vec::new();
    for p in &virt {
        if !schedulers.contains(&p.scheduler.as_str()) {
            schedulers.push(&p.scheduler);
        }
    }
    for (i, s) in schedulers.iter().enumerate() {
        let c = colors[i % colors.len()];
        let pts: Vec<(f64, f64)> =
            virt.iter().filter(|p| p.scheduler == *s).map(|p| (p.speedup, p.predicted_ns as f64 / 1e9)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| perr(&e))?
            .label(format!("predicted, {s}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c));
        chart.draw_series(pts.iter().map(|&(x, y)| Circle::new((x, y), 3, c.filled()))).map_err(|e| perr(&e))?;
        let ideal: Vec<(f64, f64)> = virt
            .iter()
            .filter(|p| p.scheduler == *s && p.speedup != 1.0)
            .map(|p| (p.speedup, p.ideal_ns as f64 / 1e9))
            .collect();
        chart
            .draw_series(LineSeries::new(ideal, c.mix(0.4)))
            .map_err(|e| perr(&e))?
            .label(format!("ideal (linear), {s}"))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.mix(0.4)));
    }
    chart.configure_series_labels().border_style(BLACK).draw().map_err(|e| perr(&e))?;
    root.present().map_err(|e| perr(&e))?;
    Ok(())
}

/// fio's JSON (its first job): IOPS, bandwidth (MB/s), run time, CPU shares and mean
/// completion latency, reads and writes together.
fn fio_figures(text: &str) -> Option<(f64, f64, u64, f64, f64, f64)> {
    let start = text.find('{')?;
    let v: serde_json::Value = serde_json::from_str(&text[start..]).ok()?;
    let job = v.get("jobs")?.get(0)?;
    let (mut iops, mut bw_bytes, mut lat_sum, mut ios) = (0.0, 0.0, 0.0, 0.0);
    for dir in ["read", "write"] {
        let d = job.get(dir)?;
        iops += d.get("iops")?.as_f64()?;
        bw_bytes += d.get("bw_bytes")?.as_f64()?;
        let n = d.get("total_ios")?.as_f64()?;
        lat_sum += d.get("clat_ns")?.get("mean")?.as_f64()? * n;
        ios += n;
    }
    let runtime_ms = job.get("job_runtime")?.as_f64()?;
    let usr = job.get("usr_cpu")?.as_f64()?;
    let sys = job.get("sys_cpu")?.as_f64()?;
    Some((iops, bw_bytes / 1e6, (runtime_ms * 1e6) as u64, usr, sys, if ios > 0.0 { lat_sum / ios } else { 0.0 }))
}

/// The file the mixes run on, written before CMD's time (fio would lay it out in small
/// requests): 64 MiB.
pub const FIO_PREPARE: &str = "dd if=/dev/zero of=f bs=1M count=64 oflag=direct status=none";

/// The fio mixes (Tables 4.6/4.7 in form).
pub fn run_fio(opts: &VmSweepOptions, stop: &AtomicBool, say: &mut dyn FnMut(&str)) -> Result<FioSweep, Error> {
    check(opts)?;
    let ios = opts.fio_ios.unwrap_or(200).max(1);
    let list = mixes(opts.full);
    let mut points = Vec::new();
    for (i, (name, flags)) in list.iter().enumerate() {
        let command = format!(
            "fio --name=m --filename=f --size=64m --ioengine=psync --direct=1 {flags} --number_ios={ios} --clocksource=clock_gettime --output-format=json --output=\"$SMARTCON_VM_WORK/output\""
        );
        let mut o = base(opts, point_spec(&opts.device, 1.0)?, &command);
        o.prepare = Some(FIO_PREPARE.to_string());
        o.scheduler = opts.schedulers.first().cloned();
        let r = run_checked(&o, stop, name)?;
        let Some((iops, bw, elapsed_ns, usr, sys, clat)) = r.output.as_deref().and_then(fio_figures) else {
            return Err(Error::new(ErrorKind::Io, format!("sweep --vm: {name}: no fio JSON from the guest")));
        };
        say(&point_line((i, list.len()), name, &format!("{iops:.1} IOPS, {bw:.2} MB/s, "), &r, ""));
        points.push(FioPoint {
            mix: name.clone(),
            iops,
            bandwidth_mb_s: bw,
            elapsed_ns,
            cpu_user_ns: (usr / 100.0 * elapsed_ns as f64) as u64,
            cpu_sys_ns: (sys / 100.0 * elapsed_ns as f64) as u64,
            wall_ns: r.command_wall_ns,
            guest_ns: r.guest_ns,
            speedup_over_real_time: r.speedup,
            device_share: r.device_share,
            within_2pct: r.within_2pct,
            clat_mean_ns: clat,
        });
    }
    Ok(FioSweep { kind: "emulate_vm_fio_sweep", device: opts.device.clone(), ios, points })
}

/// Tables 4.6 and 4.7 in one, markdown.
pub fn fio_table(r: &FioSweep) -> String {
    let mut out = format!(
        "\nfio in the guest on {} ({} I/Os a mix, QD1 psync direct, random with 20% sequential, a 64 MiB file on ext4):\n\n",
        r.device, r.ios
    );
    out.push_str("| mix | IOPS | MB/s | mean latency (ms) | elapsed guest time (s) | fio CPU user / sys (s) | wall (s) | speedup over real time | device share | within 2% |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for p in &r.points {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {:.3} | {:.3} | {:.3} / {:.3} | {:.2} | {:.1} x | {:.0}% | {} |\n",
            p.mix,
            p.iops,
            p.bandwidth_mb_s,
            p.clat_mean_ns / 1e6,
            p.elapsed_ns as f64 / 1e9,
            p.cpu_user_ns as f64 / 1e9,
            p.cpu_sys_ns as f64 / 1e9,
            p.wall_ns as f64 / 1e9,
            p.speedup_over_real_time,
            p.device_share * 100.0,
            p.within_2pct.map_or("-".into(), |w| format!("{:.1}%", w * 100.0)),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(s: &str, speedup: f64, virtual_time: bool, predicted_ns: u64, cpu: f64) -> TarPoint {
        TarPoint {
            scheduler: s.into(),
            speedup,
            virtual_time,
            predicted_ns,
            speedup_over_1x: 0.0,
            ideal_ns: 0,
            cpu_utilization: cpu,
            wall_ns: 1,
            speedup_over_real_time: 1.0,
            device_share: 0.5,
            within_2pct: Some(1.0),
            reads: 1,
            writes: 1,
            flushes: 0,
            caps_expired: 0,
        }
    }

    #[test]
    fn points_take_their_own_schedulers_1x_as_base() {
        let points = vec![
            point("none", 1.0, true, 1000, 0.1),
            point("none", 10.0, true, 200, 0.5),
            point("none", 100.0, true, 100, 0.9),
            point("none", 1.0, false, 800, 0.1),
            point("bfq", 1.0, true, 2000, 0.1),
            point("bfq", 10.0, true, 1000, 0.3),
        ];
        let r = assemble_tar("emu:hdd", 1, 1, points, &[10.0, 100.0]);
        // The 1 x virtual runs were not asked for: dropped after serving as bases; the
        // real-time reference stays.
        assert_eq!(r.points.len(), 4);
        let none10 = &r.points[0];
        assert_eq!((none10.speedup_over_1x, none10.ideal_ns), (5.0, 100));
        let bfq10 = r.points.iter().find(|p| p.scheduler == "bfq").unwrap();
        assert_eq!((bfq10.speedup_over_1x, bfq10.ideal_ns), (2.0, 200));
        assert_eq!(r.cpu_bound_from, vec![("none".to_string(), Some(100.0)), ("bfq".to_string(), None)]);
        assert_eq!(r.real_time_1x_error_pct, vec![("none".to_string(), 25.0)]);
        let t = tar_table(&r);
        assert!(t.contains("none scheduler") && t.contains("bfq scheduler") && t.contains("+25.0%"), "{t}");
        assert!(t.contains("CPU-bound (guest CPU >= 80% busy) from 100x"), "{t}");
    }

    #[test]
    fn the_quick_mixes_cover_each_direction_and_size_once() {
        let quick = mixes(false);
        assert_eq!(quick.len(), 3);
        assert_eq!(mixes(true).len(), 9);
        for w in ["read /", "write /", "read-write /", "small", "large", "uniform"] {
            assert_eq!(quick.iter().filter(|(n, _)| n.starts_with(w) || n.ends_with(w)).count(), 1, "{w}");
        }
        assert!(mixes(true).iter().all(|(_, f)| f.contains("--percentage_random=80")));
    }

    #[test]
    fn fio_json_gives_iops_bandwidth_and_cpu() {
        let text = "some console noise\n{\"jobs\":[{\"job_runtime\":2000,\"usr_cpu\":1.5,\"sys_cpu\":3.0,\
            \"read\":{\"iops\":100.0,\"bw_bytes\":409600,\"total_ios\":200,\"clat_ns\":{\"mean\":9000000.0}},\
            \"write\":{\"iops\":50.0,\"bw_bytes\":204800,\"total_ios\":100,\"clat_ns\":{\"mean\":6000000.0}}}]}";
        let (iops, mb, elapsed, usr, sys, clat) = fio_figures(text).expect("parses");
        assert_eq!((iops, elapsed, usr, sys), (150.0, 2_000_000_000, 1.5, 3.0));
        assert!((mb - 0.6144).abs() < 1e-9);
        assert!((clat - 8_000_000.0).abs() < 1e-6);
        assert!(fio_figures("no json").is_none());
    }

    #[test]
    fn point_specs_carry_the_speedup_and_the_vm_size() {
        for preset in ["emu:hdd", "emu:nvme", "emu:sdcard"] {
            let spec = point_spec(preset, 10.0).unwrap();
            assert!(spec.starts_with(preset) && spec.ends_with(",speedup=10"), "{spec}");
            // The guest's image size, whatever the preset's own capacity.
            assert_eq!(smartcon_devemu::parse_spec(&spec).unwrap().capacity_bytes, vm::IMAGE_BYTES_DEFAULT, "{spec}");
        }
        assert_eq!(point_spec("emu:hdd,size=256m", 2.0).unwrap(), "emu:hdd,size=256m,speedup=2");
        assert!(point_spec("emu:nosuch", 1.0).is_err());
    }
}
