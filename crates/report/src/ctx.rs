//! Rendering of the context-switch measurements (`smartcon_ctxcost`): the text `smartcon
//! ctx` prints and its Fig. 3-style plot. Non-goal: measuring.

use std::fmt::Write;
use std::path::Path;

use smartcon_ctxcost::report::AGREEMENT_RANGE;
use smartcon_ctxcost::HostProfile;
use smartcon_util::units::format_size;

use crate::{plot, Result};

/// The host profile as `smartcon ctx` prints it; `indirect_procs` is the ring size of the
/// indirect-cost runs, `elapsed_s` how long the measuring took.
pub fn profile_text(profile: &HostProfile, indirect_procs: usize, elapsed_s: f64, quick: bool) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Context-switch cost on CPU {} ({:.1} s{})",
        profile.cpu,
        elapsed_s,
        if quick { ", quick" } else { "" }
    );
    let _ = writeln!(out, "single-process pipe work subtracted: {:.2} us", profile.pipe_overhead_us);
    out.push('\n');
    let _ = writeln!(out, "direct cost (lat_ctx ring, 0-byte arrays)");
    let _ = writeln!(out, "{:>6}  {:>14}  {:>14}", "procs", "us/switch", "raw us/switch");
    for p in &profile.direct {
        let _ = writeln!(out, "{:>6}  {:>14.2}  {:>14.2}", p.procs, p.us_per_switch, p.us_per_switch_raw);
    }
    out.push('\n');
    let _ = writeln!(
        out,
        "indirect cost ({} processes; L2 {}, LLC {})",
        indirect_procs,
        profile.cache.l2_bytes.map(format_size).unwrap_or("?".into()),
        profile.cache.llc_bytes.map(format_size).unwrap_or("?".into())
    );
    let _ = writeln!(
        out,
        "{:>8}  {:>14}  {:>14}  {:>12}  {:>14}",
        "array", "us/switch", "raw us/switch", "hot us", "us/KiB refill"
    );
    for p in &profile.indirect {
        let mark = if Some(p.array_bytes) == profile.cache.l2_bytes {
            "  <- L2"
        } else if Some(p.array_bytes) == profile.cache.llc_bytes {
            "  <- LLC"
        } else {
            ""
        };
        let _ = writeln!(
            out,
            "{:>8}  {:>14.2}  {:>14.2}  {:>12.2}  {:>14.4}{mark}",
            format_size(p.array_bytes),
            p.us_per_switch,
            p.us_per_switch_raw,
            p.us_hot,
            profile.us_per_kib_refilled(p)
        );
    }
    let lat = profile.lat_ctx_record(indirect_procs);
    let us = |v: Option<f64>, how: &str| v.map_or(format!("not measured ({how})"), |v| format!("{v:.2} us"));
    let _ = writeln!(
        out,
        "lat_ctx, {indirect_procs} processes: {} per switch plain (-s 0), {} with a 2 MB working set (-s 2048); seed 001's Core 2 Duo E6550: under 1 us and 180-330 us",
        us(lat.plain_us, "add the ring size to --procs"),
        us(lat.s2048_us, "add 2m to --sizes")
    );
    out.push('\n');
    let _ = writeln!(out, "wake-up latency (thread ping-pong, one way, pipe work included)");
    let _ = writeln!(out, "  same CPU:  {:>10.2} us", profile.wakeup_same_cpu_us);
    match profile.wakeup_cross_cpu_us {
        Some(us) => {
            let _ = writeln!(
                out,
                "  cross CPU: {us:>10.2} us   (CPU {} -> {})",
                profile.cpu,
                profile.cross_cpu.unwrap_or(0)
            );
        }
        None => out.push_str("  cross CPU: not measured (only one CPU allowed)\n"),
    }
    out.push('\n');
    let _ = match (profile.perf_sched_pipe_us_per_switch, profile.raw_two_process_us()) {
        (Some(perf), Some(raw)) => writeln!(out,
            "perf bench sched pipe (pinned): {perf:.2} us/switch; ring raw 2-process: {raw:.2} us/switch; raw/perf = {:.2} ({})",
            raw / perf,
            if AGREEMENT_RANGE.contains(&(raw / perf)) { "agree within 25%" } else { "differ by more than 25%" }
        ),
        _ => writeln!(out, "perf bench sched pipe: {}", profile.perf_skipped_reason.as_deref().unwrap_or("no 2-process ring to compare")),
    };
    if let Some(cost) = profile.sleep_cost_ns() {
        let _ = writeln!(out, "sleep cost (switch out + back with an L2-sized refill): {:.2} us: devices faster than this are better waited for by spinning", cost / 1e3);
    }
    out
}

/// Fig. 3's picture: the cost of a switch against the array each process touches.
pub fn draw(path: &Path, profile: &HostProfile) -> Result<()> {
    let kib = |b: u64| b as f64 / 1024.0;
    let series = vec![
        plot::Series {
            name: "per switch, hot single-process time subtracted".into(),
            points: profile.indirect.iter().map(|p| (kib(p.array_bytes), p.us_per_switch)).collect(),
        },
        plot::Series {
            name: "per switch, raw ring time".into(),
            points: profile.indirect.iter().map(|p| (kib(p.array_bytes), p.us_per_switch_raw)).collect(),
        },
        plot::Series {
            name: "hot single process (pipe + sum)".into(),
            points: profile.indirect.iter().map(|p| (kib(p.array_bytes), p.us_hot)).collect(),
        },
    ];
    let mut markers = Vec::new();
    if let Some(l2) = profile.cache.l2_bytes {
        markers.push((kib(l2), "L2".to_string()));
    }
    if let Some(llc) = profile.cache.llc_bytes {
        markers.push((kib(llc), "LLC".to_string()));
    }
    let chart = plot::LineChart {
        title: "Context switch cost with cache pollution (cf. SmartCon Fig. 3)",
        x_label: "array per process (KiB)",
        y_label: "time per switch (us)",
        log_x: true,
        log_y: true,
        markers,
    };
    plot::line_chart(path, &chart, &series)
}
