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
//! - class: very fast when a 4 KiB I/O completes without sleeping (spinning, or inline with
//!   `sync`) in less time than the CPU one blocking I/O burns, mainstream when spinning pays
//!   at no size, fast otherwise (`rules::classify_with_inline`). The host's wake-up is
//!   reported beside it: from `$SMARTCON_HOME/host.json` (`smartcon ctx`) if present, else
//!   measured here as the extra latency of blocking over spinning on a 1 us emulated device;
//! - CPU threshold: 100% minus the share of the machine one spinning I/O thread costs;
//! - queue limit Q (Fig. 7): 4 KiB random reads under block and spin while k = 0..=4
//!   background readers (blocking, as the IO-intensive load's) keep k I/Os in flight on the
//!   same device; Q is the largest k at which spinning still gains more than 3% (and at
//!   every smaller k), by `rules::queue_limit`.
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
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice, TURN_WARMUP_IOS};
use smartcon_engine::monitor::SystemMonitor;
use smartcon_engine::placement::format_cpu_list;
use smartcon_engine::profile::{self, profile_path, rules, LatencyPoint, Profile, PROFILE_VERSION};
use smartcon_engine::stats::JobResult;
use smartcon_engine::target::{self, OpenOptions, Target, TargetSpec};
use smartcon_engine::Op;

use crate::common::{emit_json, interrupt_flag, interrupted, progress_bar, turn_order};
use crate::engine_setup::*;
use crate::table::Table;

/// The probe's sizes (Sec. 4.1: 4 KiB to 512 KiB).
pub const PROBE_SIZES_BYTES: [u64; 8] =
    [4 << 10, 8 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10];
/// Turns each strategy takes per size (the measurement time is split among them): twice
/// through the balanced order of three strategies.
pub const PROBE_ROUNDS: usize = 6;
/// The largest region probed on a big device: enough to defeat device caches on random
/// reads, small enough that a `tmp:` target does not need a long fill.
pub const PROBE_SPAN_BYTES_MAX: u64 = 1 << 30;
/// The queue probe's largest background (the IO-intensive load's worker count).
pub const QUEUE_PROBE_BACKGROUND_MAX: u32 = 4;
/// The queue probe's request size.
pub const QUEUE_PROBE_BS_BYTES: u64 = 4 << 10;

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
    /// Where the measuring I/O thread runs: irq (the CPUs that take the device's completion
    /// interrupts; unpinned where there is none), away, any, or a CPU list. Pinned, block
    /// and spin are compared on the same CPU; see docs/evaluate.md.
    #[arg(long, default_value = "irq")]
    pub io_cpus: String,
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
    let t = target::open(&target::parse_target("emu:nvram,size=16m").map_err(engine_err)?, OpenOptions::default())
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
            lat[i] = run_job(t.as_ref(), &js, &p, monitor, interrupt_flag()).map_err(engine_err)?.lat_ns_p50 as f64;
        }
        diffs.push(lat[0] - lat[1]);
    }
    Ok((median(&mut diffs).max(500.0), "measured: median block minus spin p50 latency on emu:nvram, 4 KiB".into()))
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
    cpus: Option<&[usize]>,
    mut on_point: impl FnMut(&LatencyPoint, u64) -> Result<()>,
) -> Result<ProbeOutcome> {
    let device = target.device_id();
    let span = target.capacity_bytes().min(PROBE_SPAN_BYTES_MAX) / target.block_bytes() * target.block_bytes();
    let ops: Vec<Op> = if writes { vec![Op::Read, Op::Write] } else { vec![Op::Read] };
    let strategies = [Strategy::Block, Strategy::Spin, Strategy::Sync];
    for &bs in sizes {
        let mut js = JobSpec::new(Op::Read, Pattern::Rand, bs, StrategyChoice::Fixed(Strategy::Block));
        js.span_bytes = Some(span);
        js.validate(target).map_err(engine_err)?;
    }
    let (wakeup_ns, wakeup_source) = host_wakeup_ns(monitor)?;
    let queue_steps = QUEUE_PROBE_BACKGROUND_MAX as usize * 2;
    let bar = progress_bar((sizes.len() * ops.len() * strategies.len() + queue_steps) as u64, "probe");
    let fixed_profile = Profile::paper_default(&device);
    // One turn: a fixed strategy for its share of the measurement, placed and warmed up.
    let run_turn = |op: Op, bs: u64, s: Strategy, seed: u64| -> Result<JobResult> {
        let mut js = JobSpec::new(op, Pattern::Rand, bs, StrategyChoice::Fixed(s));
        js.span_bytes = Some(span);
        js.cpus = cpus.map(<[usize]>::to_vec);
        js.warmup_ios = TURN_WARMUP_IOS;
        js.duration_ns = (duration_ns / PROBE_ROUNDS as u64).max(1_000_000);
        js.seed = seed;
        run_job(target, &js, &fixed_profile, monitor, interrupt_flag()).map_err(engine_err)
    };
    let mut latencies = Vec::new();
    // The strategies of one size take turns in PROBE_ROUNDS rounds, balanced, so slow drift
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
                    let i = turn_order(strategies.len(), round)[k];
                    let s = strategies[i];
                    bar.set_message(format!("{} {} {}", op.name(), format_size(bs), s.name()));
                    let r = run_turn(op, bs, s, 1 + round as u64)?;
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
                    background_ios: 0,
                };
                on_point(&point, ios)?;
                latencies.push(point);
                bar.inc(1);
            }
        }
    }
    // The queue probe (Fig. 7): k background readers keep k I/Os ahead of the measured one.
    // k = 0 is the size sweep's 4 KiB read point; without it there is nothing to compare to.
    let bs_q = QUEUE_PROBE_BS_BYTES;
    let mut notes = Vec::new();
    let can_probe_queue = sizes.contains(&bs_q)
        && bs_q.is_multiple_of(target.block_bytes())
        && span >= bs_q * (QUEUE_PROBE_BACKGROUND_MAX as u64 + 1);
    if !can_probe_queue {
        notes.push("queue limit not measured (needs 4 KiB among the sizes and room for 5 readers): Q = 0".to_string());
    }
    if can_probe_queue {
        for k in 1..=QUEUE_PROBE_BACKGROUND_MAX {
            if interrupted() {
                break;
            }
            let load = smartcon_workloads::load::IoLoad::default();
            let measured: Result<[LatencyPoint; 2]> = std::thread::scope(|scope| {
                let result = (|| {
                    if k > 0 {
                        load.spawn(scope, target, k, bs_q, span).map_err(engine_err)?;
                        // Let the readers reach the device before measuring.
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    let pair = [Strategy::Block, Strategy::Spin];
                    let mut turns: [Vec<f64>; 2] = Default::default();
                    let mut cpu = [(0.0f64, 0u64); 2];
                    for round in 0..PROBE_ROUNDS {
                        for j in 0..2 {
                            let i = (j + round) % 2;
                            bar.set_message(format!("queue {k} {}", pair[i].name()));
                            let r = run_turn(Op::Read, bs_q, pair[i], 101 + round as u64)?;
                            if r.ios > 0 {
                                turns[i].push(r.lat_ns_mean);
                            }
                            cpu[i].0 += (r.cpu_user_pct + r.cpu_sys_pct) * r.duration_ns as f64;
                            cpu[i].1 += r.duration_ns;
                        }
                    }
                    let point = |i: usize, turns: &mut Vec<f64>| -> Result<LatencyPoint> {
                        if turns.is_empty() {
                            bail!("{} completed no I/O with {k} background reads in flight", target.label());
                        }
                        Ok(LatencyPoint {
                            op: Op::Read.name().into(),
                            bs_bytes: bs_q,
                            strategy: pair[i].name().into(),
                            lat_ns_mean: median(turns),
                            cpu_pct: cpu[i].0 / cpu[i].1.max(1) as f64,
                            background_ios: k,
                        })
                    };
                    let [t0, t1] = &mut turns;
                    Ok([point(0, t0)?, point(1, t1)?])
                })();
                load.stop.store(true, std::sync::atomic::Ordering::Relaxed);
                result
            });
            for p in measured? {
                on_point(&p, 0)?;
                latencies.push(p);
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    if interrupted() {
        bail!("interrupted: no profile written");
    }
    let queue_points = queue_points_of(&latencies);
    let points = size_points(&latencies, sizes);
    let spin_cpu = latencies
        .iter()
        .filter(|p| p.strategy == "spin" && p.background_ios == 0)
        .map(|p| p.cpu_pct)
        .fold(0.0, f64::max);
    // The CPU one blocking I/O burns (submit, sleep, wake-up, switch back) at the smallest
    // size: one thread with one I/O in flight spends its CPU share of each I/O's wall time.
    // The class rule compares the device's time with it (see profile::rules::classify).
    let smallest = sizes.iter().copied().min().unwrap_or(4096);
    let block_cpu_ns = latencies
        .iter()
        .filter(|p| p.strategy == "block" && p.bs_bytes == smallest && p.background_ios == 0)
        .map(|p| p.cpu_pct / 100.0 * p.lat_ns_mean)
        .fold(0.0, f64::max);
    // The inline path's time at the smallest size (reads): very fast devices complete there.
    let sync_ns_smallest = latencies
        .iter()
        .filter(|p| p.strategy == "sync" && p.bs_bytes == smallest && p.op == "read" && p.background_ios == 0)
        .map(|p| p.lat_ns_mean)
        .fold(f64::INFINITY, f64::min);
    if !writes {
        notes.push("reads only: pass --destructive to also measure writes (overwrites the target's data)".into());
    }
    let profile = Profile {
        version: PROFILE_VERSION,
        device,
        source: "probe".into(),
        class: rules::classify_with_inline(&points, sync_ns_smallest, block_cpu_ns),
        size_threshold_bytes: rules::size_threshold_bytes(&points),
        cpu_threshold_pct: rules::cpu_threshold_pct(spin_cpu, profile::online_cpus()),
        queue_limit: if queue_points.is_empty() { 0 } else { rules::queue_limit(&queue_points) },
        wakeup_ns: Some(wakeup_ns),
        io_cpus: Some(cpus.map_or_else(|| "any".to_string(), format_cpu_list)),
        latencies,
    };
    Ok(ProbeOutcome { profile, wakeup_source, block_cpu_ns, notes })
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

/// The queue probe's points (background I/Os 0..=max, block and spin), sorted; empty when
/// the probe did not measure them.
pub fn queue_points_of(latencies: &[LatencyPoint]) -> Vec<rules::QueuePoint> {
    let mut out = Vec::new();
    for k in 0..=QUEUE_PROBE_BACKGROUND_MAX {
        let find = |s: &str| {
            latencies
                .iter()
                .find(|p| {
                    p.background_ios == k && p.strategy == s && p.bs_bytes == QUEUE_PROBE_BS_BYTES && p.op == "read"
                })
                .map(|p| p.lat_ns_mean)
        };
        match (find("block"), find("spin")) {
            (Some(block_ns), Some(spin_ns)) => out.push(rules::QueuePoint { background_ios: k, block_ns, spin_ns }),
            _ => break,
        }
    }
    if out.len() < 2 {
        out.clear();
    }
    out
}

/// Per size, the op where spinning gains most (relative to blocking) stands for the size.
pub fn size_points(latencies: &[LatencyPoint], sizes: &[u64]) -> Vec<rules::SizePoint> {
    let find = |op: &str, bs: u64, s: &str| {
        latencies
            .iter()
            .find(|p| p.op == op && p.bs_bytes == bs && p.strategy == s && p.background_ios == 0)
            .map(|p| p.lat_ns_mean)
    };
    sizes
        .iter()
        .map(|&bs| {
            let mut best: Option<rules::SizePoint> = None;
            for op in ["read", "write"] {
                if let (Some(block_ns), Some(spin_ns)) = (find(op, bs, "block"), find(op, bs, "spin")) {
                    let p = rules::SizePoint { bs_bytes: bs, block_ns, spin_ns };
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
        Some(s) => split_list("sizes", s)?.iter().map(|x| parse_size_arg("sizes", x)).collect::<Result<_>>()?,
        None => PROBE_SIZES_BYTES.to_vec(),
    };
    sizes.sort_unstable();
    sizes.dedup();
    let tspec = target::parse_target(&args.target).map_err(engine_err)?;
    let writes = may_write(&tspec, args.destructive);
    let options = OpenOptions { write: writes, destructive: args.destructive, created_by_tool: false };
    let target = target::open(&tspec, options).map_err(engine_err)?;
    for w in target.warnings() {
        eprintln!("smartcon: warning: {w}");
    }
    if let Some(out) = &args.out {
        if out.is_dir() {
            bail!("--out {} is a directory; give a file name for the profile", out.display());
        }
    }
    let placement = parse_placement(&args.io_cpus)?;
    let cpus = io_cpus_for(&placement, target.as_ref());
    let monitor = start_monitor(None)?;
    let json = args.json;
    let device = target.device_id();
    let outcome = probe_target(target.as_ref(), writes, &sizes, duration_ns, &monitor, cpus.as_deref(), |p, ios| {
        if json {
            emit_json(&PointRecord { record_type: "probe_point", device: &device, point: p, ios })?;
        }
        Ok(())
    });
    monitor.stop();
    let outcome = outcome?;
    let path = if args.no_save {
        None
    } else {
        Some(args.out.clone().unwrap_or_else(|| profile_path(&outcome.profile.device)))
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
    let mut t = Table::new(&["op", "size", "block", "spin", "sync", "spin gain", "CPU block", "CPU spin", "CPU sync"]);
    for op in ["read", "write"] {
        for &bs in sizes {
            let get = |s: &str| {
                p.latencies.iter().find(|x| x.op == op && x.bs_bytes == bs && x.strategy == s && x.background_ios == 0)
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
        "device class    {}   (very fast when an I/O of the smallest size, spinning or inline (sync), takes less than the CPU one blocking I/O burns: {}; mainstream when spinning pays at no size; this host's wake-up {} from {})\n",
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
    let q = queue_points_of(&p.latencies);
    if q.is_empty() {
        out += &format!("queue limit Q   {}   (not measured)\n", p.queue_limit);
    } else {
        let row: Vec<String> = q
            .iter()
            .map(|x| format!("{}: {:+.0}%", x.background_ios, (x.block_ns - x.spin_ns) / x.block_ns.max(1.0) * 100.0))
            .collect();
        out += &format!(
            "queue limit Q   {}   (largest number of I/Os in flight ahead at which spinning still gains more than {:.0}% on a {} read; gain by I/Os ahead {})\n",
            p.queue_limit,
            rules::GAIN_TOLERANCE * 100.0,
            format_size(QUEUE_PROBE_BS_BYTES),
            row.join(", ")
        );
    }
    out += &match p.io_cpus.as_deref() {
        Some("any") | None => "I/O thread      unpinned   (the scheduler placed it; --io-cpus to pin)\n".to_string(),
        Some(cpus) => {
            format!("I/O thread      CPUs {cpus}   (pinned for every strategy alike; stored in the profile)\n")
        }
    };
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
            background_ios: 0,
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

    #[test]
    fn the_table_says_where_the_thread_ran() {
        let mut profile = Profile::paper_default("blk:vda");
        profile.latencies =
            vec![lp("read", 4096, "block", 20e3), lp("read", 4096, "spin", 10e3), lp("read", 4096, "sync", 20e3)];
        let outcome = |cpus: Option<&str>| ProbeOutcome {
            profile: Profile { io_cpus: cpus.map(str::to_string), ..profile.clone() },
            wakeup_source: "test".into(),
            block_cpu_ns: 5e3,
            notes: Vec::new(),
        };
        assert!(render("t", &outcome(Some("1")), &[4096]).contains("I/O thread      CPUs 1   (pinned"));
        assert!(render("t", &outcome(Some("any")), &[4096]).contains("I/O thread      unpinned"));
        assert!(render("t", &outcome(None), &[4096]).contains("I/O thread      unpinned"));
    }
}
