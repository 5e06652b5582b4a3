//! `smartcon ctx`: what a context switch costs on this host, directly and through the cache
//! (SmartCon Sec. 3, Fig. 2 and 3), and what a wake-up costs on the same and another CPU.
//!
//! The measuring is in `smartcon_ctxcost`; this file validates flags, prints the table or
//! JSON Lines, draws the Fig. 3-style plot and writes the host profile that `smartcon model`
//! reads. Every input is checked before anything runs, so bad input writes nothing.
//! Replacing `$SMARTCON_HOME/host.json` is what a re-measure is for, so it is replaced with a
//! note on stderr (a host model `smartcon host` stored there is kept beside the profile,
//! its switch costs taken from the new one); an explicit `--out` that exists needs `--force`.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde::Serialize;
use smartcon_ctxcost::Plan;
use smartcon_util::units::parse_size;

use crate::common;
use crate::paths::{Existing, OutFile};
use smartcon_report::ctx as ctx_report;

#[derive(clap::Args)]
pub struct CtxArgs {
    /// A short run (under 10 s): fewer ring sizes and array sizes, shorter batches.
    #[arg(long)]
    quick: bool,
    /// Ring sizes for the direct cost, comma-separated (default 2,4,8,16,20; quick 2,4,8).
    #[arg(long, value_delimiter = ',')]
    procs: Option<Vec<i64>>,
    /// Processes in the indirect-cost ring.
    #[arg(long, default_value_t = 2)]
    indirect_procs: i64,
    /// Array sizes per process for the indirect cost, comma-separated (e.g. 32k,1m,16m);
    /// default doubles from 32 KiB to 16 MiB plus the L2 and LLC sizes.
    #[arg(long, value_delimiter = ',')]
    sizes: Option<Vec<String>>,
    /// The CPU for everything that runs on one CPU (default: the first allowed CPU).
    #[arg(long)]
    cpu: Option<usize>,
    /// The other CPU for the cross-CPU wake-up (default: the second allowed CPU).
    #[arg(long)]
    cross_cpu: Option<usize>,
    /// Do not run `perf bench sched pipe`.
    #[arg(long)]
    no_perf: bool,
    /// JSON Lines on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Write a Fig. 3-style SVG of the indirect cost to this file (a new file).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    plot: Option<PathBuf>,
    /// Write the host profile here (a new file) instead of $SMARTCON_HOME/host.json.
    #[arg(long, alias = "host-profile", value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    out: Option<PathBuf>,
    /// Replace an existing --out or --plot file (a regular file; never through a symlink).
    #[arg(long)]
    force: bool,
    /// Do not write a host profile.
    #[arg(long)]
    no_save: bool,
}

#[derive(Serialize)]
struct ProfileRecord {
    r#type: &'static str,
    path: Option<String>,
    replaced: bool,
}

fn positive(name: &str, value: i64) -> Result<usize> {
    if value <= 0 {
        bail!("{name} must be a positive count, got {value}");
    }
    Ok(value as usize)
}

pub fn run(args: CtxArgs) -> Result<()> {
    let cpus = smartcon_ctxcost::affinity::allowed_cpus().context("reading the CPU affinity mask")?;
    let cache = smartcon_ctxcost::cache::read_cache_sizes();
    let mut plan = Plan::new(args.quick, &cache, &cpus);
    if let Some(procs) = &args.procs {
        plan.direct_procs = procs.iter().map(|&p| positive("--procs", p)).collect::<Result<_>>()?;
    }
    plan.indirect_procs = positive("--indirect-procs", args.indirect_procs)?;
    if let Some(sizes) = &args.sizes {
        let parsed = sizes.iter().map(|s| parse_size(s).map_err(|e| anyhow::anyhow!("--sizes: {e}")));
        plan.set_array_sizes(parsed.collect::<Result<_>>()?)?;
    }
    plan.pin(args.cpu, args.cross_cpu, &cpus)?;
    if args.no_perf {
        plan.perf_loops = 0;
    }
    plan.validate()?;

    // Claim where the profile and the plot go before measuring, so a refusal costs nothing.
    let existing = if args.force { Existing::Replace } else { Existing::Refuse };
    let profile_out = if args.no_save {
        None
    } else if let Some(out) = &args.out {
        Some(OutFile::claim("--out", out, existing)?)
    } else {
        Some(crate::paths::store_file(&common::smartcon_home().join("host.json"))?)
    };
    let plot_out = args.plot.as_deref().map(|p| OutFile::claim("--plot", p, existing)).transpose()?;

    let bar = common::progress_bar(smartcon_ctxcost::step_count(&plan), "ctx");
    let started = std::time::Instant::now();
    let mut step = |what: &str| {
        bar.inc(1);
        bar.set_message(what.to_string());
    };
    let profile = match smartcon_ctxcost::measure(&plan, common::interrupt_flag(), &mut step) {
        Ok(p) => p,
        Err(e) if e.kind == smartcon_ctxcost::ErrorKind::Interrupted => {
            bar.finish_and_clear();
            return Err(common::RunFailure("interrupted; nothing written (all ring processes reaped)".into()).into());
        }
        Err(e) => {
            bar.finish_and_clear();
            return Err(common::RunFailure(format!("measurement failed: {e}")).into());
        }
    };
    bar.finish_and_clear();
    let elapsed_s = started.elapsed().as_secs_f64();

    // The results are printed first: an output that cannot be written does not lose them.
    let profile_path = profile_out.as_ref().map(|o| o.path().to_path_buf());
    let replaced = profile_path.as_ref().is_some_and(|p| p.is_file() && p.metadata().is_ok_and(|m| m.len() > 0));
    if args.json {
        profile.direct_records().iter().try_for_each(common::emit_json)?;
        profile.indirect_records().iter().try_for_each(common::emit_json)?;
        common::emit_json(&profile.lat_ctx_record(plan.indirect_procs))?;
        common::emit_json(&profile.wakeup_record())?;
        common::emit_json(&profile.perf_record())?;
        let path = profile_path.map(|p| p.display().to_string());
        common::emit_json(&ProfileRecord { r#type: "host_profile", path, replaced })?;
    } else {
        print!("{}", ctx_report::profile_text(&profile, plan.indirect_procs, elapsed_s, args.quick));
    }
    if let Some(out) = profile_out {
        // The store keeps a host model `smartcon host` put there, beside the new profile.
        let value = if args.out.is_none() {
            super::host::ctx_profile_with_stored_model(&profile)?
        } else {
            serde_json::to_value(&profile).context("the host profile does not serialize")?
        };
        let text = serde_json::to_string_pretty(&value).context("the host profile does not serialize")? + "\n";
        let path = out.write_all(text.as_bytes())?;
        let how = if replaced { " (replaced the previous one)" } else { "" };
        eprintln!("smartcon: host profile written to {}{how}", path.display());
    }
    if let Some(out) = plot_out {
        ctx_report::draw(out.tmp_path(), &profile).map_err(|e| out.wrap(&e))?;
        let path = out.commit()?;
        eprintln!("smartcon: plot written to {}", path.display());
    }
    Ok(())
}
