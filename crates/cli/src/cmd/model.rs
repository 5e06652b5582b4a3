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
use smartcon_model::report::{self, Report};
use smartcon_model::{calibrate, paper_devices, Device, DeviceLatency, Interpretation, Model, PMemReading, RatioForm};
use smartcon_util::units::parse_duration_ns;

use crate::common;
use smartcon_report::model as model_report;

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
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    host_profile: Option<PathBuf>,
    /// Directory of probe profiles (default $SMARTCON_HOME/profiles).
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    profiles: Option<PathBuf>,
    /// Evaluation results (JSON Lines with "type":"result" records).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    results: Option<PathBuf>,
    /// Write an SVG of effective CPI and ratio against device latency (10 ns to 1 ms; a new file).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    plot: Option<PathBuf>,
    /// Replace an existing --plot file (a regular file; never through a symlink).
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
    Ok(Some(HostProfile::read(&path)?))
}

pub fn run(args: ModelArgs) -> Result<()> {
    let existing = if args.force { crate::paths::Existing::Replace } else { crate::paths::Existing::Refuse };
    let plot_out = args.plot.as_deref().map(|p| crate::paths::OutFile::claim("--plot", p, existing)).transpose()?;
    if let Some(p) = &args.host_profile {
        crate::paths::input("--host-profile", p, false)?;
    }
    if let Some(p) = &args.results {
        // Read (bounded) and checked before anything else, so a bad file is named first.
        calibrate::read_results(p).context("--results")?;
    }
    if let Some(d) = &args.profiles {
        anyhow::ensure!(d.is_dir(), "--profiles {}: not a directory", smartcon_util::paths::escape(d));
    }
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
    model.validate()?;
    if args.results.is_some() && !args.calibrate {
        bail!("--results needs --calibrate");
    }
    // Read calibration inputs before printing anything, so a malformed file writes nothing.
    let calibration = match (&args.results, args.calibrate) {
        (Some(results), true) => {
            let dir = args.profiles.clone().unwrap_or_else(|| common::smartcon_home().join("profiles"));
            let rows = calibrate::calibrate_files(&model, results, &dir)?;
            Some((dir, rows))
        }
        _ => None,
    };
    let mut devices = paper_devices();
    devices.extend(extra);
    let report = Report::new(&model, &devices)?;
    if args.json {
        report.projection_records().iter().try_for_each(common::emit_json)?;
        report.interpretation_records().iter().try_for_each(common::emit_json)?;
        report.gaps.iter().try_for_each(common::emit_json)?;
        for row in calibration.iter().flat_map(|(_, rows)| rows) {
            let mut v = serde_json::to_value(row)?;
            v["type"] = "calibration".into();
            common::emit_json(&v)?;
        }
        return write_plot(plot_out, &model, host.as_ref());
    }
    print!("{}", model_report::report_text(&model, &report, args.calibrate, args.dram));
    if let Some((dir, rows)) = &calibration {
        print!("{}", model_report::calibration_text(dir, rows));
    }
    if let Some(note) = host.as_ref().and_then(model_report::host_note) {
        print!("{note}");
    }
    write_plot(plot_out, &model, host.as_ref())
}

/// Draws the plot after the results are printed, so a plot that cannot be written loses
/// nothing.
fn write_plot(out: Option<crate::paths::OutFile>, model: &Model, host: Option<&HostProfile>) -> Result<()> {
    if let Some(out) = out {
        model_report::draw(out.tmp_path(), model, host).map_err(|e| out.wrap(&e))?;
        let path = out.commit()?;
        eprintln!("smartcon: plot written to {}", path.display());
    }
    Ok(())
}
