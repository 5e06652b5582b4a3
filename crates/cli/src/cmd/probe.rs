//! `smartcon probe TARGET`: the Device Monitor (SmartCon Sec. 4.1, Table II, Fig. 7).
//!
//! The measuring loop and the rules are `smartcon_study::probe` (and the engine's
//! `profile::rules`); this module opens the target, decides whether writes are allowed,
//! shows progress, prints the table and stores the profile at
//! `$SMARTCON_HOME/profiles/<device>.json`, where `smart` finds it without being told.
//! Writes go only to targets smartcon owns (emulated devices, `tmp:` files) unless
//! `--destructive` is given; otherwise the probe measures reads only.
//!
//! Non-goals: measuring anything itself.

use anyhow::{bail, Result};
use clap::Args;
use serde::Serialize;
use smartcon_emutarget::target::{self, OpenOptions, TargetSpec};
use smartcon_engine::placement::Placement;
use smartcon_engine::profile::{profile_path, LatencyPoint, Profile};
use smartcon_study::probe::{probe_target, ProbePlan, PROBE_SIZES_BYTES};

use crate::common::{emit_json, interrupt_flag, on_event, progress_bar, smartcon_home};
use crate::engine_setup::*;

#[derive(Args, Debug)]
pub struct ProbeArgs {
    /// A file, a block device, tmp:SIZE[@DIR] or emu:PRESET[,key=value...].
    pub target: String,
    /// Time per measurement (48 measurements: 8 sizes x 2 ops x 3 strategies).
    #[arg(long, default_value = "300ms", value_parser = duration_value)]
    pub duration: u64,
    /// Comma-separated sizes (default 4k..512k in powers of two).
    #[arg(long, value_delimiter = ',', value_parser = io_size_value)]
    pub sizes: Option<Vec<u64>>,
    /// Also measure writes on a file or block device smartcon did not create (destroys data).
    #[arg(long)]
    pub destructive: bool,
    /// Write the profile here (a new file) instead of the per-device store.
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
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
    #[arg(long, default_value = "irq", value_parser = placement_value)]
    pub io_cpus: Placement,
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

pub fn run(args: ProbeArgs) -> Result<()> {
    if args.duration > 60_000_000_000 {
        bail!("--duration must be at most 60s per measurement");
    }
    let mut sizes = args.sizes.clone().unwrap_or_else(|| PROBE_SIZES_BYTES.to_vec());
    sizes.sort_unstable();
    sizes.dedup();
    // The output is claimed before anything is opened or measured: a refusal costs nothing.
    let out = crate::paths::out_file("--out", args.out.as_deref())?;
    let tspec = target::parse_target(&args.target).map_err(engine_err)?;
    // Writes only where smartcon owns the data, or where the user said it may be destroyed.
    let writes = args.destructive || matches!(tspec, TargetSpec::Emu(_) | TargetSpec::Temp { .. });
    let options = OpenOptions { write: writes, destructive: args.destructive, created_by_tool: false };
    let target = target::open(&tspec, options).map_err(engine_err)?;
    for w in target.warnings() {
        eprintln!("smartcon: warning: {w}");
    }
    // The per-device store is known only once the device is: its directory is checked now.
    let store_dir = smartcon_home().join("profiles");
    if out.is_none() && !args.no_save {
        std::fs::create_dir_all(&store_dir)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", store_dir.display()))?;
        drop(crate::paths::store_file(&store_dir.join(".probe-check"))?);
    }
    let cpus = io_cpus_for(&args.io_cpus, target.as_ref());
    let plan = ProbePlan {
        sizes: sizes.clone(),
        duration_ns: args.duration,
        writes,
        cpus,
        host_profile: Some(smartcon_home().join("host.json")),
    };
    let monitor = start_monitor(None)?;
    let bar = progress_bar(0, "probe");
    let outcome = probe_target(target.as_ref(), &plan, &monitor, interrupt_flag(), &mut on_event(&bar));
    bar.finish_and_clear();
    monitor.stop();
    let outcome = outcome.map_err(engine_err)?;
    let path = (!args.no_save).then(|| args.out.clone().unwrap_or_else(|| profile_path(&outcome.profile.device)));
    // Claimed now (the store's name needs the device), written after the results are printed.
    let out = match (out, &path) {
        (Some(out), _) => Some(out),
        (None, Some(p)) => Some(crate::paths::store_file(p)?),
        (None, None) => None,
    };
    if args.json {
        for (point, ios) in outcome.profile.latencies.iter().zip(&outcome.ios) {
            let device = &outcome.profile.device;
            emit_json(&PointRecord { record_type: "probe_point", device, point, ios: *ios })?;
        }
        emit_json(&ProfileRecord {
            record_type: "probe_profile",
            path: path.as_ref().map(|p| p.display().to_string()),
            wakeup_source: &outcome.wakeup_source,
            profile: &outcome.profile,
        })?;
    } else {
        print!("{}", smartcon_report::probe::render(target.label(), &outcome, &sizes));
        match &path {
            // smart reads only the stored path; a profile elsewhere is used with --profile.
            Some(p) if *p == profile_path(&outcome.profile.device) => println!(
                "profile written to {} (smart uses it for {} from now on)",
                p.display(),
                outcome.profile.device
            ),
            Some(p) => println!("profile written to {} (give it to smart with --profile)", p.display()),
            None => println!("--no-save: no profile written"),
        }
    }
    for n in &outcome.notes {
        eprintln!("smartcon: note: {n}");
    }
    if let Some(out) = out {
        let text = serde_json::to_string_pretty(&outcome.profile)? + "\n";
        out.write_all(text.as_bytes())?;
    }
    Ok(())
}
