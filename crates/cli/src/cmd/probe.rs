//! `smartcon probe TARGET`: the Device Monitor (SmartCon Sec. 4.1, Table II).
//!
//! For request sizes 4 KiB to 512 KiB, read and (where writing is allowed) write, it runs
//! one short job per strategy (`block`, `spin`, `sync`) and records the mean latency and the
//! I/O thread's CPU per I/O. The thresholds come from the engine's rules
//! (`profile::rules`, unit-tested on recorded tables there), never from code of its own:
//!
//! - size threshold: the smallest size from which spinning is no more than 3% faster than
//!   blocking at this and every larger size; per size the op where spinning gains most
//!   counts (a size is "spin territory" if either op still gains);
//! - class: very fast when a 4 KiB spinning I/O completes in less than one wake-up of this
//!   host, mainstream when spinning pays at no size, fast otherwise. The wake-up is taken
//!   from `$SMARTCON_HOME/host.json` (`smartcon ctx`) if present, else measured here as the
//!   extra latency of blocking over spinning on a 1 us emulated device;
//! - CPU threshold: 100% minus the share of the machine one spinning I/O thread costs.
//!
//! The profile is written to `$SMARTCON_HOME/profiles/<device>.json`, where `smart` finds
//! it without being told. Writes go only to targets smartcon owns (emulated devices,
//! `tmp:` files) unless `--destructive` is given; otherwise the probe measures reads only.
//!
//! Non-goals: queue depths above one, and mixed read/write thresholds.

use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;
use smartcon_engine::decision::Strategy;
use smartcon_engine::devemu::units::{format_ns, format_size};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::profile::{self, profile_path, rules, LatencyPoint, Profile, PROFILE_VERSION};
use smartcon_engine::target::{self, OpenOptions, Target, TargetSpec};
use smartcon_engine::Op;

use crate::common::{emit_json, interrupt_flag, interrupted, progress_bar};
use crate::engine_setup::*;
use crate::table::Table;

/// The probe's sizes (Sec. 4.1: 4 KiB to 512 KiB).
pub const PROBE_SIZES_BYTES: [u64; 8] = [
    4 << 10,
    8 << 10,
    16 << 10,
    32 << 10,
    64 << 10,
    128 << 10,
    256 << 10,
    512 << 10,
];
/// The largest region probed on a big device: enough to defeat device caches on random
/// reads, small enough that a `tmp:` target does not need a long fill.
/// Turns each strategy takes per size (the measurement time is split among them).
pub const PROBE_ROUNDS: usize = 5;
pub const PROBE_SPAN_BYTES_MAX: u64 = 1 << 30;

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// A file, a block device, tmp:SIZE[@DIR] or emu:PRESET[,key=value...].
    pub target: String,
    /// Time per measurement (48 measurements: 8 sizes x 2 ops x 3 strategies).
    #[arg(long, default_value = "300ms")]
    pub duration: String,
    /// Comma-separated sizes (default 4k..512k in powers of two).
    #[arg(long)]
    pub sizes: Option<String>,
    /// Also measure writes on a file or block device smartcon did not create (destroys data).
    #[arg(long)]
    pub destructive: bool,
    /// Write the profile here instead of the per-device store.
    #[arg(long)]
    pub out: Option<std::path::PathBuf>,
    /// Measure and print, but do not write a profile.
    #[arg(long)]
    pub no_save: bool,
    /// JSON Lines: one "probe_point" per measurement and one "probe_profile".
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct PointRecord<'a> {
    #[serde(rename = "type")]
    record_type: &'static str,
    device: &'a str,
    #[serde(flatten)]
    point: &'a LatencyPoint,
    ios: u64,
}

#[derive(Serialize)]
struct ProfileRecord<'a> {
    #[serde(rename = "type")]
    record_type: &'static str,
    path: Option<String>,
    wakeup_source: &'a str,
    #[serde(flatten)]
    profile: &'a Profile,
}

/// Everything a probe measured and concluded; used by `evaluate` as well.
pub struct ProbeOutcome {
    pub profile: Profile,
    pub wakeup_source: String,
    /// CPU one blocking I/O of the smallest size burned (the class rule's yardstick).
    pub block_cpu_ns: f64,
    pub notes: Vec<String>,
}

/// The host's wake-up cost: host.json if `smartcon ctx` wrote one, else measured here.
pub fn host_wakeup_ns(monitor: &SystemMonitor) -> Result<(f64, String)> {
    let path = crate::common::smartcon_home().join("host.json");
    if path.exists() {
        match smartcon_ctxcost::HostProfile::read(&path) {
            Ok(h) if h.wakeup_same_cpu_us > 0.0 => {
                return Ok((h.wakeup_same_cpu_us * 1e3, format!("{} (smartcon ctx)", path.display())));
            }
            Ok(_) => {}
            Err(e) => eprintln!("smartcon: warning: ignoring {}: {e}", path.display()),
        }
    }
    // The extra latency of sleeping over spinning on a 1 us device is one timer wake-up
    // and context switch of this host, as the I/O path pays it.
    let t = target::open(
        &target::parse_target("emu:nvram,size=16m").map_err(engine_err)?,
        OpenOptions::default(),
    )
    .map_err(engine_err)?;
    // Three short pairs, median latencies (p50) and the median of the three differences:
    // a burst of another process lands in one pair at most.
    let mut diffs = Vec::with_capacity(3);
    for pair in 0..3u64 {
        let mut lat = [0.0f64; 2];
        for (i, s) in [Strategy::Block, Strategy::Spin].into_iter().enumerate() {
            let mut js = JobSpec::new(Op::Read, Pattern::Rand, 4096, StrategyChoice::Fixed(s));
            js.duration_ns = 50_000_000;
            js.seed = 1 + pair;
            let p = Profile::paper_default(&t.device_id());
            lat[i] = run_job(t.as_ref(), &js, &p, monitor, interrupt_flag())
                .map_err(engine_err)?
                .lat_ns_p50 as f64;
        }
        diffs.push(lat[0] - lat[1]);
    }
    Ok((
        median(&mut diffs).max(500.0),
        "measured: median block minus spin p50 latency on emu:nvram, 4 KiB".into(),
    ))
}

/// Whether the probe may write to this target.
fn may_write(spec: &TargetSpec, destructive: bool) -> bool {
    destructive || matches!(spec, TargetSpec::Emu(_) | TargetSpec::Temp { .. })
}

/// Runs the probe on an opened target. `sizes` sorted ascending.
pub fn probe_target(
    target: &dyn Target,
    writes: bool,
    sizes: &[u64],
    duration_ns: u64,
    monitor: &SystemMonitor,
    mut on_point: impl FnMut(&LatencyPoint, u64) -> Result<()>,
) -> Result<ProbeOutcome> {
    let device = target.device_id();
    let span = target.capacity_bytes().min(PROBE_SPAN_BYTES_MAX) / target.block_bytes() * target.block_bytes();
    let ops: Vec<Op> = if writes {
        vec![Op::Read, Op::Write]
    } else {
        vec![Op::Read]
    };
    let strategies = [Strategy::Block, Strategy::Spin, Strategy::Sync];
    for &bs in sizes {
        let mut js = JobSpec::new(Op::Read, Pattern::Rand, bs, StrategyChoice::Fixed(Strategy::Block));
        js.span_bytes = Some(span);
        js.validate(target).map_err(engine_err)?;
    }
    let (wakeup_ns, wakeup_source) = host_wakeup_ns(monitor)?;
    let bar = progress_bar((sizes.len() * ops.len() * strategies.len()) as u64, "probe");
    let fixed_profile = Profile::paper_default(&device);
    let mut latencies = Vec::new();
    // The strategies of one size take turns in PROBE_ROUNDS rounds, rotated, so slow drift
    // of a shared machine weighs on them alike. A point's latency is the median of its
    // turns' mean latencies: one turn hit by another process's burst does not move it.
    'outer: for &op in &ops {
        for &bs in sizes {
            // Per strategy: (I/Os, latency sum ns, CPU-time share sum weighted by time, time).
            let mut acc = [(0u64, 0.0f64, 0.0f64, 0u64); 3];
            let mut turns: [Vec<f64>; 3] = Default::default();
            for round in 0..PROBE_ROUNDS {
                for k in 0..strategies.len() {
                    if interrupted() {
                        break 'outer;
                    }
                    let i = (k + round) % strategies.len();
                    let s = strategies[i];
                    bar.set_message(format!("{} {} {}", op.name(), format_size(bs), s.name()));
                    let mut js = JobSpec::new(op, Pattern::Rand, bs, StrategyChoice::Fixed(s));
                    js.span_bytes = Some(span);
                    js.duration_ns = (duration_ns / PROBE_ROUNDS as u64).max(1_000_000);
                    js.seed = 1 + round as u64;
                    let r = run_job(target, &js, &fixed_profile, monitor, interrupt_flag()).map_err(engine_err)?;
                    let a = &mut acc[i];
                    a.0 += r.ios;
                    a.1 += r.lat_ns_mean * r.ios as f64;
                    a.2 += (r.cpu_user_pct + r.cpu_sys_pct) * r.duration_ns as f64;
                    a.3 += r.duration_ns;
                    if r.ios > 0 {
                        turns[i].push(r.lat_ns_mean);
                    }
                }
            }
            for (i, s) in strategies.iter().enumerate() {
                let (ios, _lat_sum, cpu_sum, time) = acc[i];
                if ios == 0 {
                    bail!(
                        "{} completed no I/O of {} in {}",
                        target.label(),
                        format_size(bs),
                        format_ns(duration_ns as f64)
                    );
                }
                let point = LatencyPoint {
                    op: op.name().into(),
                    bs_bytes: bs,
                    strategy: s.name().into(),
                    lat_ns_mean: median(&mut turns[i]),
                    cpu_pct: cpu_sum / time.max(1) as f64,
                };
                on_point(&point, ios)?;
                latencies.push(point);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    if interrupted() {
        bail!("interrupted: no profile written");
    }
    let points = size_points(&latencies, sizes);
    let spin_cpu = latencies
        .iter()
        .filter(|p| p.strategy == "spin")
        .map(|p| p.cpu_pct)
        .fold(0.0, f64::max);
    // The CPU one blocking I/O burns (submit, sleep, wake-up, switch back) at the smallest
    // size: one thread with one I/O in flight spends its CPU share of each I/O's wall time.
    // The class rule compares the device's time with it (see profile::rules::classify).
    let smallest = sizes.iter().copied().min().unwrap_or(4096);
    let block_cpu_ns = latencies
        .iter()
        .filter(|p| p.strategy == "block" && p.bs_bytes == smallest)
        .map(|p| p.cpu_pct / 100.0 * p.lat_ns_mean)
        .fold(0.0, f64::max);
    let mut notes = Vec::new();
    if !writes {
        notes.push("reads only: pass --destructive to also measure writes (overwrites the target's data)".into());
    }
    let profile = Profile {
        version: PROFILE_VERSION,
        device,
        source: "probe".into(),
        class: rules::classify(&points, block_cpu_ns),
        size_threshold_bytes: rules::size_threshold_bytes(&points),
        cpu_threshold_pct: rules::cpu_threshold_pct(spin_cpu, profile::online_cpus()),
        queue_limit: 0,
        wakeup_ns: Some(wakeup_ns),
        latencies,
    };
    Ok(ProbeOutcome {
        profile,
        wakeup_source,
        block_cpu_ns,
        notes,
    })
}

/// The median of a non-empty list (the mean of the middle two for an even count).
pub fn median(v: &mut [f64]) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Per size, the op where spinning gains most (relative to blocking) stands for the size.
pub fn size_points(latencies: &[LatencyPoint], sizes: &[u64]) -> Vec<rules::SizePoint> {
    let find = |op: &str, bs: u64, s: &str| {
        latencies
            .iter()
            .find(|p| p.op == op && p.bs_bytes == bs && p.strategy == s)
            .map(|p| p.lat_ns_mean)
    };
    sizes
        .iter()
        .map(|&bs| {
            let mut best: Option<rules::SizePoint> = None;
            for op in ["read", "write"] {
                if let (Some(block_ns), Some(spin_ns)) = (find(op, bs, "block"), find(op, bs, "spin")) {
                    let p = rules::SizePoint {
                        bs_bytes: bs,
                        block_ns,
                        spin_ns,
                    };
                    let gain = |q: &rules::SizePoint| (q.block_ns - q.spin_ns) / q.block_ns.max(1.0);
                    if best.as_ref().is_none_or(|b| gain(&p) > gain(b)) {
                        best = Some(p);
                    }
                }
            }
            best.expect("every size measured with block and spin")
        })
        .collect()
}

pub fn run(args: ProbeArgs) -> Result<()> {
    let duration_ns = parse_duration_arg("duration", &args.duration)?;
    if duration_ns > 60_000_000_000 {
        bail!("--duration must be at most 60s per measurement");
    }
    let mut sizes: Vec<u64> = match &args.sizes {
        Some(s) => split_list("sizes", s)?
            .iter()
            .map(|x| parse_size_arg("sizes", x))
            .collect::<Result<_>>()?,
        None => PROBE_SIZES_BYTES.to_vec(),
    };
    sizes.sort_unstable();
    sizes.dedup();
    let tspec = target::parse_target(&args.target).map_err(engine_err)?;
    let writes = may_write(&tspec, args.destructive);
    let options = OpenOptions {
        write: writes,
        destructive: args.destructive,
        created_by_tool: false,
    };
    let target = target::open(&tspec, options).map_err(engine_err)?;
    for w in target.warnings() {
        eprintln!("smartcon: warning: {w}");
    }
    if let Some(out) = &args.out {
        if out.is_dir() {
            bail!(
                "--out {} is a directory; give a file name for the profile",
                out.display()
            );
        }
    }
    let monitor = start_monitor(None)?;
    let json = args.json;
    let device = target.device_id();
    let outcome = probe_target(target.as_ref(), writes, &sizes, duration_ns, &monitor, |p, ios| {
        if json {
            emit_json(&PointRecord {
                record_type: "probe_point",
                device: &device,
                point: p,
                ios,
            })?;
        }
        Ok(())
    });
    monitor.stop();
    let outcome = outcome?;
    let path = if args.no_save {
        None
    } else {
        Some(
            args.out
                .clone()
                .unwrap_or_else(|| profile_path(&outcome.profile.device)),
        )
    };
    if let Some(p) = &path {
        outcome.profile.save(p).map_err(engine_err)?;
    }
    if json {
        emit_json(&ProfileRecord {
            record_type: "probe_profile",
            path: path.as_ref().map(|p| p.display().to_string()),
            wakeup_source: &outcome.wakeup_source,
            profile: &outcome.profile,
        })?;
    } else {
        print!("{}", render(target.label(), &outcome, &sizes));
        match &path {
            Some(p) => println!(
                "profile written to {} (smart uses it for {} from now on)",
                p.display(),
                outcome.profile.device
            ),
            None => println!("--no-save: no profile written"),
        }
    }
    for n in &outcome.notes {
        eprintln!("smartcon: note: {n}");
    }
    Ok(())
}

/// The human table: per op and size, latency and CPU per strategy and spin's gain.
pub fn render(label: &str, o: &ProbeOutcome, sizes: &[u64]) -> String {
    let p = &o.profile;
    let mut t = Table::new(&[
        "op",
        "size",
        "block",
        "spin",
        "sync",
        "spin gain",
        "CPU block",
        "CPU spin",
        "CPU sync",
    ]);
    for op in ["read", "write"] {
        for &bs in sizes {
            let get = |s: &str| {
                p.latencies
                    .iter()
                    .find(|x| x.op == op && x.bs_bytes == bs && x.strategy == s)
            };
            let (Some(b), Some(sp), Some(sy)) = (get("block"), get("spin"), get("sync")) else {
                continue;
            };
            t.row(vec![
                op.into(),
                format_size(bs),
                format_ns(b.lat_ns_mean),
                format_ns(sp.lat_ns_mean),
                format_ns(sy.lat_ns_mean),
                format!("{:+.1}%", (b.lat_ns_mean - sp.lat_ns_mean) / b.lat_ns_mean * 100.0),
                format!("{:.0}%", b.cpu_pct),
                format!("{:.0}%", sp.cpu_pct),
                format!("{:.0}%", sy.cpu_pct),
            ]);
        }
    }
    let mut out = format!("Device Monitor probe of {label} ({})\n", p.device);
    out += &t.render();
    out += "latency = mean per I/O; spin gain = how much shorter spinning makes an I/O than blocking; CPU = I/O thread, % of one CPU.\n\n";
    out += &format!(
        "size threshold  {}   (smallest size from which spinning is within {:.0}% of blocking at every larger size)\n",
        format_size(p.size_threshold_bytes),
        rules::GAIN_TOLERANCE * 100.0
    );
    out += &format!(
        "device class    {}   (very fast when a spinning I/O of the smallest size takes less than the CPU one blocking I/O burns: {}; this host's wake-up {} from {})\n",
        p.class.name(),
        format_ns(o.block_cpu_ns),
        format_ns(p.wakeup_ns.unwrap_or(0.0)),
        o.wakeup_source
    );
    out += &format!(
        "CPU threshold   {}%   (100% minus the share of {} CPUs one spinning thread costs)\n",
        p.cpu_threshold_pct,
        profile::online_cpus()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(op: &str, bs: u64, s: &str, lat: f64) -> LatencyPoint {
        LatencyPoint {
            op: op.into(),
            bs_bytes: bs,
            strategy: s.into(),
            lat_ns_mean: lat,
            cpu_pct: 0.0,
        }
    }

    #[test]
    fn the_op_where_spinning_gains_most_stands_for_the_size() {
        let l = vec![
            lp("read", 4096, "block", 20e3),
            lp("read", 4096, "spin", 19.9e3),
            lp("write", 4096, "block", 20e3),
            lp("write", 4096, "spin", 10e3),
            lp("read", 8192, "block", 30e3),
            lp("read", 8192, "spin", 29.9e3),
        ];
        let p = size_points(&l, &[4096, 8192]);
        assert_eq!(p[0].spin_ns, 10e3);
        assert_eq!(p[1].spin_ns, 29.9e3);
        assert_eq!(rules::size_threshold_bytes(&p), 8192);
    }
}
