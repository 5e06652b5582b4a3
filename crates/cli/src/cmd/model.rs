//! `smartcon model`: the analytic CPI model of SmartCon (Sec. 6, Eq. 1-6, Table III), its
//! projections for the devices of Sec. 7.6 / Fig. 18 and any given latency, the effect of
//! every reading the paper leaves open, calibration against this host, and a plot.
//!
//! The arithmetic is in `smartcon_model`; this file parses flags, picks the host profile
//! (`--host-profile`, else `$SMARTCON_HOME/host.json`) and prints. Bad input (a malformed
//! device, a negative latency, a missing host profile for --calibrate) is an error before
//! anything is written.

use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use smartcon_ctxcost::HostProfile;
use smartcon_devemu::units::{format_ns, parse_duration_ns};
use smartcon_model::report::{self, Report};
use smartcon_model::{calibrate, paper_devices, Device, DeviceLatency, Interpretation, Model, PMemReading, RatioForm};

use crate::common;
use crate::plot;

#[derive(Clone, Copy, clap::ValueEnum)]
enum RatioArg {
    /// Eq. 6 as printed (CPI, path length, utilization).
    Eq6,
    /// CPI and path length only.
    NoU,
    /// Eq. 6 with the utilization ratio inverted.
    UInverted,
}

#[derive(clap::Args)]
pub struct ModelArgs {
    /// Also project a device given by the latency of one 4 KiB access: NAME=LATENCY
    /// (e.g. optane=10us). Repeatable.
    #[arg(long = "device", value_name = "NAME=LATENCY")]
    devices: Vec<String>,
    /// Read Table III's P_mem = 1.56 literally instead of as 1.56 %.
    #[arg(long)]
    p_mem_literal: bool,
    /// Which terms form the performance ratio.
    #[arg(long, value_enum, default_value = "eq6")]
    ratio: RatioArg,
    /// Device accesses per 4 KiB page for devices given per cacheline (Table III: 64).
    #[arg(long, default_value_t = 64.0)]
    accesses_per_page: f64,
    /// DRAM clock under NVRAM devices: 533, 800 or 1067 (Table III rows).
    #[arg(long, default_value_t = 800)]
    dram: u32,
    /// Context-switch cost in cycles for both systems (Table III: 1488).
    #[arg(long)]
    tau_ctx_cycles: Option<f64>,
    /// Use this host's context-switch cost and clock from the host profile and, with
    /// --results, print predicted beside measured gain for each emulated device.
    #[arg(long)]
    calibrate: bool,
    /// Host profile written by `smartcon ctx` (default $SMARTCON_HOME/host.json).
    #[arg(long)]
    host_profile: Option<PathBuf>,
    /// Directory of probe profiles (default $SMARTCON_HOME/profiles).
    #[arg(long)]
    profiles: Option<PathBuf>,
    /// Evaluation results (JSON Lines with "type":"result" records).
    #[arg(long)]
    results: Option<PathBuf>,
    /// Write an SVG of effective CPI and ratio against device latency (10 ns to 1 ms).
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Overwrite an existing --plot file.
    #[arg(long)]
    force: bool,
    /// JSON Lines on stdout.
    #[arg(long)]
    json: bool,
}

fn parse_device(text: &str) -> Result<Device> {
    let (name, latency) =
        text.split_once('=').ok_or_else(|| anyhow!("--device {text:?}: expected NAME=LATENCY, e.g. optane=10us"))?;
    if name.trim().is_empty() {
        bail!("--device {text:?}: the name is empty");
    }
    if latency.trim_start().starts_with('-') {
        bail!("--device {text:?}: a latency cannot be negative");
    }
    let ns = parse_duration_ns(latency).map_err(|e| anyhow!("--device {text:?}: {e}"))?;
    Ok(Device { name: name.trim().to_string(), latency: DeviceLatency::PerPageNs { ns: ns as f64 } })
}

fn load_host(args: &ModelArgs) -> Result<Option<HostProfile>> {
    let explicit = args.host_profile.is_some();
    let path = args.host_profile.clone().unwrap_or_else(|| common::smartcon_home().join("host.json"));
    if !explicit && !args.calibrate && !path.exists() {
        return Ok(None);
    }
    HostProfile::read(&path).map(Some).map_err(|e| anyhow!("{e}"))
}

pub fn run(args: ModelArgs) -> Result<()> {
    let Some(tau_mem0) = report::dram_tau_mem0_cycles(args.dram) else {
        bail!("--dram {}: expected 533, 800 or 1067 (the Table III rows)", args.dram);
    };
    let mut model = Model {
        tau_mem0_cycles: tau_mem0,
        interp: Interpretation {
            p_mem: if args.p_mem_literal { PMemReading::Literal } else { PMemReading::Percent },
            ratio: match args.ratio {
                RatioArg::Eq6 => RatioForm::Eq6,
                RatioArg::NoU => RatioForm::CpiPathLength,
                RatioArg::UInverted => RatioForm::Eq6UtilizationInverted,
            },
            accesses_per_page: args.accesses_per_page,
        },
        ..Model::default()
    };
    if let Some(tau) = args.tau_ctx_cycles {
        model = model.with_tau_ctx_cycles(tau);
    }
    let extra: Vec<Device> = args.devices.iter().map(|d| parse_device(d)).collect::<Result<_>>()?;
    let host = load_host(&args)?;
    if args.calibrate {
        let host = host.as_ref().expect("load_host returns the profile when calibrating");
        let clock = host.clock_ghz.unwrap_or(model.clock_ghz);
        let tau_ctx = host.ctx_direct_ns().expect("checked by HostProfile::read") * clock;
        model = Model { clock_ghz: clock, ..model }.with_tau_ctx_cycles(tau_ctx);
    }
    model.validate().map_err(|e| anyhow!("{e}"))?;
    if args.results.is_some() && !args.calibrate {
        bail!("--results needs --calibrate");
    }
    if let Some(plot) = &args.plot {
        if plot.exists() && !args.force {
            bail!("{} exists; pass --force to replace it", plot.display());
        }
    }
    // Read calibration inputs before printing anything, so a malformed file writes nothing.
    let calibration = match (&args.results, args.calibrate) {
        (Some(results), true) => {
            let dir = args.profiles.clone().unwrap_or_else(|| common::smartcon_home().join("profiles"));
            let rows = calibrate::calibrate_files(&model, results, &dir).map_err(|e| anyhow!("{e}"))?;
            Some((dir, rows))
        }
        _ => None,
    };
    let mut devices = paper_devices();
    devices.extend(extra);
    let report = Report::new(&model, &devices).map_err(|e| anyhow!("{e}"))?;
    if let Some(plot_path) = &args.plot {
        draw(plot_path, &model, host.as_ref())?;
        eprintln!("smartcon: plot written to {}", plot_path.display());
    }
    if args.json {
        report.projection_records().iter().try_for_each(common::emit_json)?;
        report.interpretation_records().iter().try_for_each(common::emit_json)?;
        report.gaps.iter().try_for_each(common::emit_json)?;
        for row in calibration.iter().flat_map(|(_, rows)| rows) {
            let mut v = serde_json::to_value(row)?;
            v["type"] = "calibration".into();
            common::emit_json(&v)?;
        }
        return Ok(());
    }
    print_report(&args, &model, &report);
    if let Some((dir, rows)) = &calibration {
        print_calibration(dir, rows);
    }
    if let Some(h) = &host {
        if let Some(cost) = h.sleep_cost_ns() {
            println!();
            println!(
                "this host: a sleep costs {} of CPU (direct switch {} + refill); cross-CPU wake-up {}. The model has no term for the CPU a spinner burns, so it never says when spinning stops paying; this host's break-even device latency is about {}.",
                format_ns(cost),
                format_ns(h.ctx_direct_ns().unwrap_or(0.0)),
                h.wakeup_cross_cpu_us.map(|u| format_ns(u * 1e3)).unwrap_or("not measured".into()),
                format_ns(cost)
            );
        }
    }
    Ok(())
}

fn print_report(args: &ModelArgs, model: &Model, report: &Report) {
    println!(
        "SmartCon CPI model (Eq. 1-6, Table III){}: clock {:.2} GHz, tau_ctx {:.0} cycles, P_mem {}, ratio {}, {} accesses/page, DRAM under NVRAM DDR{}",
        if args.calibrate { ", calibrated to this host" } else { "" },
        model.clock_ghz,
        model.smartcon.tau_ctx_cycles,
        if args.p_mem_literal { "1.56 (literal)" } else { "1.56 %" },
        match args.ratio { RatioArg::Eq6 => "Eq. 6", RatioArg::NoU => "CPI x l", RatioArg::UInverted => "Eq. 6, U inverted" },
        model.interp.accesses_per_page,
        args.dram
    );
    println!();
    println!(
        "{:<10} {:>14} {:>12} {:>10} {:>10} {:>8} {:>8}",
        "device", "tau_nvram cyc", "per page", "CPI smart", "CPI main", "ratio", "gain"
    );
    for p in &report.projections {
        println!(
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
    println!();
    println!("effect of the other readings (ratio per device)");
    print!("{:<30}", "reading");
    for d in report.devices() {
        print!(" {:>8}", d.name.chars().take(8).collect::<String>());
    }
    println!();
    print!("{:<30}", "default (as above)");
    for p in &report.projections {
        print!(" {:>8.3}", p.ratio);
    }
    println!();
    for (label, ratios) in &report.alternatives {
        print!("{label:<30}");
        for r in ratios {
            print!(" {r:>8.3}");
        }
        println!();
    }
    println!();
    println!("against the paper (Table IV model column; Fig. 18 text: ~80% gain)");
    for g in &report.gaps {
        println!(
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
}

fn print_calibration(dir: &std::path::Path, rows: &[calibrate::CalibrationRow]) {
    println!();
    println!("calibration (profiles in {})", dir.display());
    if rows.is_empty() {
        println!("  no device has both a probe profile and block + smart/spin results");
        return;
    }
    println!(
        "{:<16} {:<18} {:<6} {:<6} {:>8} {:<8} {:>12} {:>10} {:>10}",
        "device", "workload", "op", "pattern", "bs", "load", "latency", "predicted", "measured"
    );
    for r in rows {
        println!(
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
}

fn draw(path: &std::path::Path, model: &Model, host: Option<&HostProfile>) -> Result<()> {
    let mut cpi_sc = Vec::new();
    let mut cpi_ms = Vec::new();
    let mut ratio = Vec::new();
    // 10 ns to 1 ms, 10 points per decade: a bounded sweep.
    for i in 0..=50 {
        let ns = 10f64 * 10f64.powf(i as f64 / 10.0);
        let at = model.latencies(DeviceLatency::PerPageNs { ns }).map_err(|e| anyhow!("{e}"))?;
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
    plot::line_chart(path, &chart, &series).context("drawing the model plot")
}
