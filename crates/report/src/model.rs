//! Rendering of the analytic CPI model (`smartcon_model::report`): the text `smartcon
//! model` prints (projections, readings, gaps to the paper, calibration, this host's note)
//! and its plot. Non-goal: any arithmetic of the model.

use std::fmt::Write;
use std::path::Path;

use smartcon_ctxcost::HostProfile;
use smartcon_model::report::Report;
use smartcon_model::{calibrate, DeviceLatency, Model, PMemReading, RatioForm};
use smartcon_util::units::format_ns;

use crate::{plot, Error, ErrorKind, Result};

/// The projections, the other readings and the gaps to the paper, as `smartcon model`
/// prints them; `calibrated` and `dram` (533, 800 or 1067) say how the model was set up.
pub fn report_text(model: &Model, report: &Report, calibrated: bool, dram: u32) -> String {
    let mut out = String::new();
    let _ = writeln!(out,
        "SmartCon CPI model (Eq. 1-6, Table III){}: clock {:.2} GHz, tau_ctx {:.0} cycles, P_mem {}, ratio {}, {} accesses/page, DRAM under NVRAM DDR{}",
        if calibrated { ", calibrated to this host" } else { "" },
        model.clock_ghz,
        model.smartcon.tau_ctx_cycles,
        if model.interp.p_mem == PMemReading::Literal { "1.56 (literal)" } else { "1.56 %" },
        match model.interp.ratio {
            RatioForm::Eq6 => "Eq. 6",
            RatioForm::CpiPathLength => "CPI x l",
            RatioForm::Eq6UtilizationInverted => "Eq. 6, U inverted",
        },
        model.interp.accesses_per_page,
        dram
    );
    out.push('\n');
    let _ = writeln!(
        out,
        "{:<10} {:>14} {:>12} {:>10} {:>10} {:>8} {:>8}",
        "device", "tau_nvram cyc", "per page", "CPI smart", "CPI main", "ratio", "gain"
    );
    for p in &report.projections {
        let _ = writeln!(
            out,
            "{:<10} {:>14.0} {:>12} {:>10.3} {:>10.3} {:>8.3} {:>7.1}%",
            p.device,
            p.tau_nvram_cycles,
            format_ns(p.tau_nvram_cycles / model.clock_ghz),
            p.smartcon.cpi,
            p.mainstream.cpi,
            p.ratio,
            (p.ratio - 1.0) * 100.0
        );
    }
    out.push('\n');
    let _ = writeln!(out, "effect of the other readings (ratio per device)");
    let _ = write!(out, "{:<30}", "reading");
    for d in report.devices() {
        let _ = write!(out, " {:>8}", d.name.chars().take(8).collect::<String>());
    }
    out.push('\n');
    let _ = write!(out, "{:<30}", "default (as above)");
    for p in &report.projections {
        let _ = write!(out, " {:>8.3}", p.ratio);
    }
    out.push('\n');
    for (label, ratios) in &report.alternatives {
        let _ = write!(out, "{label:<30}");
        for r in ratios {
            let _ = write!(out, " {r:>8.3}");
        }
        out.push('\n');
    }
    out.push('\n');
    let _ = writeln!(out, "against the paper (Table IV model column; Fig. 18 text: ~80% gain)");
    for g in &report.gaps {
        let _ = writeln!(
            out,
            "  {:<8} equations {:.3}, paper {:.2} ({:+.1} points); tau_ctx that would give the paper's figure: {}",
            g.device,
            g.ratio,
            g.paper_ratio,
            (g.ratio - g.paper_ratio) * 100.0,
            g.tau_ctx_cycles_for_paper_ratio
                .map(|c| format!("{c:.0} cycles ({})", format_ns(c / model.clock_ghz)))
                .unwrap_or("none".into())
        );
    }
    out
}

/// The calibration table: predicted against measured ratios per device and cell.
pub fn calibration_text(dir: &Path, rows: &[calibrate::CalibrationRow]) -> String {
    let mut out = String::new();
    out.push('\n');
    let _ = writeln!(out, "calibration (profiles in {})", dir.display());
    if rows.is_empty() {
        let _ = writeln!(out, "  no device has both a probe profile and block + smart/spin results");
        return out;
    }
    let _ = writeln!(
        out,
        "{:<16} {:<18} {:<6} {:<6} {:>8} {:<8} {:>12} {:>10} {:>10}",
        "device", "workload", "op", "pattern", "bs", "load", "latency", "predicted", "measured"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<16} {:<18} {:<6} {:<6} {:>8} {:<8} {:>12} {:>10.3} {:>10.3} ({} vs block)",
            r.device,
            r.workload,
            r.op,
            r.pattern,
            r.bs_bytes,
            r.load,
            format_ns(r.device_latency_ns),
            r.predicted_ratio,
            r.measured_ratio,
            r.measured_strategy
        );
    }
    out
}

/// What this host's measured costs say beside the model (it has no term for the CPU a
/// spinner burns); `None` without a measured sleep cost.
pub fn host_note(h: &HostProfile) -> Option<String> {
    let cost = h.sleep_cost_ns()?;
    Some(format!(
        "\nthis host: a sleep costs {} of CPU (direct switch {} + refill); cross-CPU wake-up {}. The model has no term for the CPU a spinner burns, so it never says when spinning stops paying; this host's break-even device latency is about {}.\n",
        format_ns(cost),
        format_ns(h.ctx_direct_ns().unwrap_or(0.0)),
        h.wakeup_cross_cpu_us.map(|u| format_ns(u * 1e3)).unwrap_or("not measured".into()),
        format_ns(cost)
    ))
}

/// The model's CPI and ratio against device latency (cf. Fig. 18), with this host's sleep
/// cost and wake-up latency as markers when known.
pub fn draw(path: &Path, model: &Model, host: Option<&HostProfile>) -> Result<()> {
    let mut cpi_sc = Vec::new();
    let mut cpi_ms = Vec::new();
    let mut ratio = Vec::new();
    // 10 ns to 1 ms, 10 points per decade: a bounded sweep.
    for i in 0..=50 {
        let ns = 10f64 * 10f64.powf(i as f64 / 10.0);
        let at = model
            .latencies(DeviceLatency::PerPageNs { ns })
            .map_err(|e| Error::new(ErrorKind::Usage, e.to_string()))?;
        let p = model.project_at("", &at);
        cpi_sc.push((ns, p.smartcon.cpi));
        cpi_ms.push((ns, p.mainstream.cpi));
        ratio.push((ns, p.ratio));
    }
    let mut markers = Vec::new();
    if let Some(h) = host {
        if let Some(cost) = h.sleep_cost_ns() {
            markers.push((cost, "spinning stops paying (host sleep cost)".to_string()));
        }
        if let Some(us) = h.wakeup_cross_cpu_us {
            markers.push((us * 1e3, "cross-CPU wake-up".to_string()));
        }
    }
    let chart = plot::LineChart {
        title: "SmartCon model: effective CPI and ratio vs device latency (cf. Fig. 18)",
        x_label: "device latency per 4 KiB access (ns)",
        y_label: "CPI (cycles) / performance ratio",
        log_x: true,
        log_y: true,
        markers,
    };
    let series = vec![
        plot::Series { name: "CPI SmartCon".into(), points: cpi_sc },
        plot::Series { name: "CPI Mainstream".into(), points: cpi_ms },
        plot::Series { name: "ratio SmartCon / Mainstream".into(), points: ratio },
    ];
    plot::line_chart(path, &chart, &series)
}
