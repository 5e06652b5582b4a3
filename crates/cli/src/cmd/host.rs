//! `smartcon host`: measures this machine into a host model (issue 27) and stores it as
//! `$SMARTCON_HOME/host.json`, which the seeded simulation reads as `--host measured` and
//! the evaluate report's header shows.
//!
//! The measuring is `smartcon_study::host`; this file claims the output, draws progress,
//! prints the model (a table, or with `--json` one `host_model` record that is the model
//! itself plus a `type` field, then a `host_measurement` record with how each figure was
//! obtained) and stores it. `host.json` also holds `smartcon ctx`'s profile, nested under
//! `"ctx"`, so both commands keep each other's figures.
//! Replacing the stored model is what a re-measure is for; an explicit `--out` must be a
//! new file.

use std::path::PathBuf;

use anyhow::{Context, Result};
use smartcon_engine::host::{HostModel, HOST_MODEL_FILE};
use smartcon_study::host::{measure, stored_ctx, stored_json, HostMeasurement, HostPlan};

use crate::common::{emit_json, interrupt_flag, on_event, progress_bar, smartcon_home, RunFailure};
use crate::engine_setup::{engine_err, start_monitor};

#[derive(clap::Args)]
pub struct HostArgs {
    /// A short run (a few seconds; coarse figures, for tests).
    #[arg(long)]
    quick: bool,
    /// JSON Lines on stdout: a "host_model" record (the model itself) and a
    /// "host_measurement" record (how each figure was obtained).
    #[arg(long)]
    json: bool,
    /// Write the host model here (a new file) instead of $SMARTCON_HOME/host.json.
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    out: Option<PathBuf>,
    /// Where the temporary file for io_uring against pread goes (default: the system's
    /// temporary directory; it should be on the local disk).
    #[arg(long, value_name = "DIR", value_hint = clap::ValueHint::DirPath)]
    temp_dir: Option<PathBuf>,
}

/// The stored model's path.
pub fn stored_path() -> PathBuf {
    smartcon_home().join(HOST_MODEL_FILE)
}

pub fn run(args: HostArgs) -> Result<()> {
    if let Some(d) = &args.temp_dir {
        anyhow::ensure!(d.is_dir(), "--temp-dir {}: not a directory", smartcon_util::paths::escape(d));
    }
    let store = stored_path();
    // Claimed before measuring, so a refusal costs nothing.
    let out = match &args.out {
        Some(p) => crate::paths::out_file("--out", Some(p))?.context("--out claimed")?,
        None => crate::paths::store_file(&store)?,
    };
    let mut plan = HostPlan::new(args.quick);
    plan.temp_dir = args.temp_dir.clone();
    plan.ctx_profile = Some(store.clone());
    let monitor = start_monitor(None)?;
    let bar = progress_bar(0, "host");
    let measured = measure(&plan, &monitor, interrupt_flag(), &mut on_event(&bar));
    bar.finish_and_clear();
    monitor.stop();
    let m = match measured {
        Ok(m) => m,
        Err(_) if crate::common::interrupted() => {
            return Err(RunFailure("interrupted; no host model written".into()).into());
        }
        Err(e) => return Err(engine_err(e)),
    };
    // The results are printed first: an output that cannot be written does not lose them.
    if args.json {
        let mut record = serde_json::to_value(&m.model)?;
        if let Some(o) = record.as_object_mut() {
            o.insert("type".into(), "host_model".into());
        }
        emit_json(&record)?;
        let mut detail = serde_json::to_value(&m)?;
        if let Some(o) = detail.as_object_mut() {
            o.remove("model");
            o.insert("type".into(), "host_measurement".into());
        }
        emit_json(&detail)?;
    } else {
        print!("{}", text(&m));
    }
    let Some(out) = crate::paths::unless_interrupted(Some(out)) else {
        return Ok(());
    };
    // ctx's figures go beside the model: measured now, else the stored ones kept.
    let ctx = m.ctx_measured.clone().or_else(|| stored_ctx(&store));
    let json = stored_json(&m.model, ctx.as_ref()).map_err(engine_err)?;
    let path = out.write_all((serde_json::to_string_pretty(&json)? + "\n").as_bytes())?;
    eprintln!("smartcon: host model written to {}", path.display());
    Ok(())
}

/// The stored model with `smartcon ctx`'s new profile beside it: what `ctx` writes to
/// `$SMARTCON_HOME/host.json` when a host model is stored there, with the model's switch
/// costs taken from the new profile.
pub fn ctx_profile_with_stored_model(profile: &smartcon_ctxcost::HostProfile) -> Result<serde_json::Value> {
    match HostModel::load(&stored_path()) {
        Ok(mut model) => {
            let (direct, indirect) = smartcon_study::host::switch_costs_ns(profile);
            model.switch_direct_ns = direct;
            model.switch_indirect_ns = indirect;
            stored_json(&model, Some(profile)).map_err(engine_err)
        }
        // No model yet: the profile alone, in host.json's one format (nested under "ctx").
        Err(_) => Ok(serde_json::json!({ smartcon_engine::host::HOST_JSON_CTX_KEY: serde_json::to_value(profile)? })),
    }
}

fn text(m: &HostMeasurement) -> String {
    let us = |ns: f64| format!("{:.1} us", ns / 1000.0);
    let h = &m.model;
    let mut s = String::from("figure                                   value\n");
    for p in &h.sleep {
        s += &format!(
            "sleep {:>6}, overshoot p50/p90/p99    {} / {} / {}\n",
            us(p.requested_ns),
            us(p.overshoot.p50_ns),
            us(p.overshoot.p90_ns),
            us(p.overshoot.p99_ns)
        );
    }
    s += &format!(
        "wake-up across cores, p50/p90/p99       {} / {} / {}   (the woken core polling: {})\n",
        us(h.wakeup.p50_ns),
        us(h.wakeup.p90_ns),
        us(h.wakeup.p99_ns),
        m.polled_by.replace('_', " ")
    );
    s += &format!(
        "idle core's extra wake-up               {}   (idle p50 {}, p99 {})\n",
        us(h.idle_wake_extra_ns),
        us(m.wakeup_idle.p50_ns),
        us(m.wakeup_idle.p99_ns)
    );
    s += &format!(
        "waker's CPU per wake-up                 {}   (the woken core polling: {})\n",
        us(h.waker_cpu_ns),
        us(m.waker_cpu_busy_ns)
    );
    s += &format!("blocking wait's CPU                     {}   ({})\n", us(h.block_cpu_ns), m.wait_source);
    s += &format!("spinning wait's CPU beyond the device   {}\n", us(h.spin_overhead_ns));
    let opt = |v: Option<f64>| v.map_or("not measured".to_string(), us);
    s += &format!(
        "context switch, direct / indirect       {} / {}   ({})\n",
        opt(h.switch_direct_ns),
        opt(h.switch_indirect_ns),
        m.ctx_source
    );
    for b in &m.block_path {
        s += &format!(
            "io_uring's blocking wait over pread     {:+.1} us per I/O, {}   (pread {:.2} x io_uring's IOPS, {} rounds)\n",
            b.uring_extra_ns / 1000.0,
            b.load.replace('_', " "),
            b.sync_over_block,
            b.rounds
        );
    }
    let slept = |v: Option<f64>| v.map_or(String::new(), |v| format!(", slept {v:.2}"));
    for p in &h.block_wait {
        s += &format!(
            "blocking wait, {:>5} device: CPU, late p50/p99{}   {} , {} / {}   beside a cruncher{}: {} , {} / {}\n",
            us(p.device_ns),
            slept(p.sleeps_per_wait),
            us(p.cpu_ns),
            us(p.late.p50_ns),
            us(p.late.p99_ns),
            slept(p.sleeps_per_wait_beside_cruncher),
            us(p.cpu_beside_cruncher_ns),
            us(p.late_beside_cruncher.p50_ns),
            us(p.late_beside_cruncher.p99_ns)
        );
    }
    s += &format!(
        "spinner's share of its core beside a cruncher   {:.2}   (its turns pooled; each: {})\n",
        h.spin_share_beside_cruncher,
        m.spin_shares.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", ")
    );
    s += &format!(
        "spinner's share alone (the machine's load)      {:.2}   (pooled; each: {}; the others' CPU demand {:.0}%)\n",
        h.spin_share_alone,
        m.spin_shares_alone.iter().map(|x| format!("{x:.2}")).collect::<Vec<_>>().join(", "),
        h.background_busy_pct
    );
    if let Some(slice) = h.spin_slice_ns {
        s += &format!("spinner's slice on a shared core (CPU / preemptions)   {}\n", us(slice));
    }
    s += &format!(
        "({} cores; 4 KiB random O_DIRECT reads on {}; measured in {:.1} s)\n",
        h.cores,
        m.block_path_target,
        m.elapsed_ns as f64 / 1e9
    );
    s
}
