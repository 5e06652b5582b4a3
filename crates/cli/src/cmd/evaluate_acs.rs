//! `smartcon evaluate --study acs`: seed 001 (Gim, Lee, Won, "Adaptive Context Switch for
//! Very Fast Block Device") on this machine. The study is `smartcon_study::acs`; this module
//! turns flags into its plan, writes the report directory (results.jsonl, summary.md) and
//! prints Fig. 1's bars with the host's own blocking-wait and wake-up figures.

use std::io::Write;

use anyhow::{bail, Context, Result};
use smartcon_engine::job::StrategyChoice;
use smartcon_engine::profile::HostWaitCost;
use smartcon_study::acs::{self, AcsOutcome, AcsPlan, AcsPreset};
use smartcon_study::evaluate::MachineRecord;
use smartcon_workloads::blockdev::FsDeviceKind;

use super::evaluate::EvaluateArgs;
use crate::common::{interrupt_flag, interrupted, on_event, prepare_out_dir, progress_bar, smartcon_home};
use crate::engine_setup::*;

fn plan_of(args: &EvaluateArgs) -> Result<AcsPlan> {
    let preset = match (args.tiny, args.quick, args.full) {
        (true, _, _) => AcsPreset::Tiny,
        (_, true, _) => AcsPreset::Quick,
        (_, _, true) => AcsPreset::Full,
        _ => AcsPreset::Default,
    };
    let mut plan = AcsPlan::preset(preset);
    if let Some(b) = args.file_size {
        plan.file_bytes = b;
    }
    if let Some(w) = args.cpu_workers {
        plan.cpu_workers = w;
    }
    if let Some(r) = args.rounds {
        (plan.rounds_min, plan.rounds_max) = (r, r);
    }
    if let Some(k) = args.pieces {
        plan.pieces = k;
    }
    if let Some(k) = args.slice_reads {
        plan.slice_reads = k;
    }
    if let Some(s) = &args.schedulers {
        plan.schedulers = s.clone();
    }
    // loop and zram have no completion interrupt: `irq` (the evaluate's default), `away`
    // and `any` leave the reader unpinned; a CPU list pins it, every strategy alike.
    if let smartcon_engine::placement::Placement::Cpus(c) = &args.io_cpus {
        plan.io_cpus = Some(c.clone());
    }
    // `--targets loop`, `zram` or both: the devices the study creates.
    if let Some(t) = &args.targets {
        let mut devices = Vec::new();
        for name in t.split(',').map(str::trim) {
            let kind = match name {
                "loop" => FsDeviceKind::Loop,
                "zram" => FsDeviceKind::Zram,
                other => {
                    bail!("--study acs takes --targets loop, zram or loop,zram (the devices it creates), not {other:?}")
                }
            };
            if !devices.contains(&kind) {
                devices.push(kind);
            }
        }
        plan.devices = devices;
    }
    let ignored: Vec<&str> = [
        (args.loads.is_some(), "--loads"),
        (args.workloads.is_some(), "--workloads"),
        (args.sizes.is_some(), "--sizes"),
        (args.paper_loads, "--paper-loads"),
        (args.strategies != default_strategies(), "--strategies"),
    ]
    .into_iter()
    .filter_map(|(given, flag)| given.then_some(flag))
    .collect();
    if !ignored.is_empty() {
        bail!(
            "{} do(es) not apply to --study acs (it reads one ext2 file with block, spin, sync and smart)",
            ignored.join(", ")
        );
    }
    plan.smartcon_exe = Some(std::env::current_exe().context("cannot find the smartcon binary's path")?);
    plan.host_profile = Some(smartcon_home().join("host.json"));
    plan.validate().map_err(engine_err)?;
    // Before the report directory is claimed: root, the tools, and the library the
    // unmodified readers (the last step, after every group) preload.
    plan.preflight().map_err(engine_err)?;
    Ok(plan)
}

fn default_strategies() -> Vec<StrategyChoice> {
    ["block", "spin", "sync", "smart", "paper"].iter().filter_map(|s| StrategyChoice::parse(s)).collect()
}

pub fn run(args: &EvaluateArgs) -> Result<()> {
    let plan = plan_of(args)?;
    let _claim = prepare_out_dir(&args.out)?;
    let started = std::time::Instant::now();
    let jsonl_path = args.out.join("results.jsonl");
    let file = std::fs::File::create(&jsonl_path).with_context(|| format!("create {}", jsonl_path.display()))?;
    let mut jsonl = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut jsonl, &MachineRecord::here())?;
    jsonl.write_all(b"\n")?;
    let monitor = start_monitor(None)?;
    let bar = progress_bar(0, "acs");
    let mut write = |r: &dyn acs::erased::Record| -> Result<(), smartcon_engine::error::Error> {
        let io = |e: std::io::Error| {
            smartcon_engine::error::Error::io(smartcon_engine::error::ErrorKind::Setup, &jsonl_path, e)
        };
        let line = r.json().map_err(|e| io(std::io::Error::other(e)))?;
        writeln!(jsonl, "{line}").map_err(io)
    };
    let outcome = acs::run(&plan, &monitor, interrupt_flag(), &mut on_event(&bar), &mut write).map_err(engine_err)?;
    bar.finish_and_clear();
    // The host's own figures beside the study's: what a blocking wait costs and a wake-up.
    let wait = HostWaitCost::stored();
    let mut notes_only = |_e: smartcon_study::Event<'_>| {};
    let wakeup = smartcon_study::probe::host_wakeup_ns(
        &monitor,
        plan.host_profile.as_deref(),
        interrupt_flag(),
        &mut notes_only,
    )
    .ok();
    monitor.stop();
    let host = host_line(wait.as_ref(), wakeup.as_ref());
    writeln!(
        jsonl,
        "{}",
        serde_json::json!({"type": "acs_host", "block_cpu_us": wait.as_ref().map(|w| w.block_cpu_ns / 1e3), "wakeup_us": wakeup.as_ref().map(|w| w.0 / 1e3), "wakeup_source": wakeup.as_ref().map(|w| w.1.clone()), "load_avg_1min": acs::load_avg_1min()})
    )?;
    jsonl.flush()?;
    let secs = started.elapsed().as_secs_f64();
    let summary = summary_md(&plan, &outcome, &host, secs);
    std::fs::write(args.out.join("summary.md"), &summary)?;
    for n in &outcome.notes {
        eprintln!("smartcon: note: {n}");
    }
    for b in &outcome.bars {
        println!(
            "{} {} cpu_workers={} {}: {} {:+.1}% time saved [{:+.1}, {:+.1}] (95% [{:+.1}, {:+.1}]) over {} rounds ({} paired pieces){}{}; median read {:.1}/{:.1} us, main branch {}, {:.0}% without a switch, spins slept {:.1}%, load {:.1}-{:.1}",
            b.device,
            b.pattern.name(),
            b.cpu_workers,
            b.bar,
            b.adaptive,
            b.improvement_pct,
            b.interval_pct[0],
            b.interval_pct[1],
            b.interval95_pct[0],
            b.interval95_pct[1],
            b.rounds,
            b.pairs,
            match b.settled_by {
                Some("effect") => "",
                Some(_) => " (settled: within +-2%)",
                None => " (not settled)",
            },
            if b.dominates { " (dominates)" } else { "" },
            b.p50_us[0],
            b.p50_us[1],
            b.reason,
            b.busy_pct,
            b.fell_back_pct,
            b.load_avg[0],
            b.load_avg[1]
        );
        if b.reads_by_wait.len() > 1 {
            println!("  {}'s reads by wait: {}", b.adaptive, waits_text(&b.reads_by_wait));
        }
        if let (Some(p), Some([lo, hi])) = (b.vs_sync_pct, b.vs_sync_interval95_pct) {
            println!("  {} against sync, paired: {p:+.1}% time saved (95% [{lo:+.1}, {hi:+.1}])", b.adaptive);
        }
    }
    for d in &outcome.devices {
        println!(
            "{} {}: schedulers {}; {} (removed)",
            d.device,
            d.node,
            d.schedulers.join(", "),
            match d.restored {
                None => "no I/O scheduler (bio-based)".to_string(),
                Some(r) => format!(
                    "scheduler before {}, after {}{}",
                    state_text(d.scheduler_before.as_ref()),
                    state_text(d.scheduler_after.as_ref()),
                    if r { "" } else { " (NOT restored)" }
                ),
            }
        );
    }
    println!("{host}");
    println!("report: {} (results.jsonl, summary.md) in {secs:.0} s", args.out.display());
    if interrupted() {
        println!("(interrupted: the report holds the groups measured so far)");
    }
    Ok(())
}

/// "sync 96.6% of reads, 11.1 us, 95.0% of the time; block 3.4% ...".
fn waits_text(w: &[acs::WaitShare]) -> String {
    w.iter()
        .map(|w| {
            format!(
                "{} {:.1}% of reads, mean {:.1} us, {:.1}% of the time",
                w.wait, w.share_pct, w.mean_us, w.time_share_pct
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// "bfq (slice_idle 8)", "none", "-".
fn state_text(s: Option<&acs::SchedulerState>) -> String {
    s.map_or("-".into(), |s| match &s.slice_idle {
        Some(i) => format!("{} (slice_idle {i})", s.scheduler),
        None => s.scheduler.clone(),
    })
}

fn host_line(wait: Option<&HostWaitCost>, wakeup: Option<&(f64, String)>) -> String {
    let w = wait.map_or("not measured".to_string(), |w| format!("{:.1} us of CPU", w.block_cpu_ns / 1e3));
    let k = wakeup.map_or("not measured".to_string(), |(ns, src)| format!("{:.1} us ({src})", ns / 1e3));
    format!(
        "host: a blocking wait costs {w} (host-wait.json); a wake-up {k}; load average {:.2} now",
        acs::load_avg_1min()
    )
}

fn summary_md(plan: &AcsPlan, o: &AcsOutcome, host: &str, secs: f64) -> String {
    let mut s = String::new();
    let m = MachineRecord::here();
    s += "# smartcon evaluate --study acs (seed 001: adaptive context switch)\n\n";
    s += &format!(
        "{} on {} ({} CPUs), {secs:.0} s; ext2 file of {} MiB, 4 KiB O_DIRECT reads; rounds {}-{}, each repetition in {} pieces, the strategies taking turns every {} reads within a piece; reader {}.\n\n{host}\n\n",
        m.kernel,
        m.cpu_model,
        m.cpus,
        plan.file_bytes >> 20,
        plan.rounds_min,
        plan.rounds_max,
        plan.pieces,
        if plan.slice_reads == 0 { "piece".to_string() } else { plan.slice_reads.to_string() },
        plan.io_cpus.as_ref().map_or("unpinned".to_string(), |c| format!(
            "pinned to CPU {}",
            smartcon_engine::placement::format_cpu_list(c)
        ))
    );
    for n in &o.notes {
        s += &format!("- {n}\n");
    }
    if !o.devices.is_empty() {
        s += "\n## Devices created (and removed)\n\n| device | node | schedulers run | before | after | restored |\n|---|---|---|---|---|---|\n";
        for d in &o.devices {
            s += &format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                d.device,
                d.node,
                d.schedulers.join(", "),
                state_text(d.scheduler_before.as_ref()),
                state_text(d.scheduler_after.as_ref()),
                d.restored.map_or("- (no scheduler)".to_string(), |r| r.to_string())
            );
        }
    }
    s += "\n## Fig. 1: adaptive (smart; spin, sync beside it) under none against original (block)\n\n";
    s += "Time saved per repetition, geometric mean of the per-piece ratios (per-round with one piece), 90% interval; `pairs`: the paired pieces; \
          `dominates` is the evaluate's Pareto rule; `settled`: the stopping rule held before the cap (smart's paired 95% interval against block \
          narrower than their difference, `effect`, or within +-2%, `resolution`, under every scheduler); \
          p50: the median read, adaptive / original; `spins slept`: reads whose spin ran out of its \
          budget; load: the 1-minute load average at the group's start and end.\n\n";
    s += "| device | pattern | cpu workers | bar | adaptive | original | saved % | interval % | 95% interval % | rounds | pairs | settled | dominates | without a switch % | main branch | p50 us | spins slept % | load |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for b in &o.bars {
        s += &format!(
            "| {} | {} | {} | {} | {} | block, {} | {:+.1} | {:+.1} .. {:+.1} | {:+.1} .. {:+.1} | {} | {} | {} | {} | {:.0} | {} | {:.1} / {:.1} | {:.1} | {:.1}-{:.1} |\n",
            b.device,
            b.pattern.name(),
            b.cpu_workers,
            b.bar,
            b.adaptive,
            b.original_scheduler,
            b.improvement_pct,
            b.interval_pct[0],
            b.interval_pct[1],
            b.interval95_pct[0],
            b.interval95_pct[1],
            b.rounds,
            b.pairs,
            b.settled_by.unwrap_or("no"),
            b.dominates,
            b.busy_pct,
            b.reason,
            b.p50_us[0],
            b.p50_us[1],
            b.fell_back_pct,
            b.load_avg[0],
            b.load_avg[1]
        );
    }
    let mixed: Vec<&acs::AcsBar> =
        o.bars.iter().filter(|b| b.reads_by_wait.len() > 1 && b.bar == "noop-vs-noop").collect();
    if !mixed.is_empty() {
        s += "\n## How the adaptive strategy waited\n\nIts reads by the way its port waited (each read timed on its own).\n\n";
        for b in mixed {
            s += &format!(
                "- {} {} cpu_workers={} {}: {}{}\n",
                b.device,
                b.pattern.name(),
                b.cpu_workers,
                b.adaptive,
                waits_text(&b.reads_by_wait),
                match (b.vs_sync_pct, b.vs_sync_interval95_pct) {
                    (Some(p), Some([lo, hi])) => format!("; against sync, paired: {p:+.1}% [{lo:+.1}, {hi:+.1}]"),
                    _ => String::new(),
                }
            );
        }
    }
    s += "\n## Every cell\n\nMean time of one repetition (the whole file), 95% interval.\n\n";
    s += "| device | scheduler | pattern | cpu workers | strategy | mean ms | ci95 ms | saved vs block % | saved vs block@bfq % |\n|---|---|---|---|---|---|---|---|---|\n";
    for r in &o.results {
        s += &format!(
            "| {} | {} | {} | {} | {} | {:.2} | {:.2} | {:+.1} | {} |\n",
            r.device,
            r.scheduler,
            r.pattern.name(),
            r.cpu_workers,
            r.strategy,
            r.mean_us / 1e3,
            r.ci95_us / 1e3,
            r.improvement_pct,
            r.improvement_vs_bfq_pct.map_or("".into(), |v| format!("{v:+.1}"))
        );
    }
    if !o.readers.is_empty() {
        s += "\n## Unmodified readers under `smartcon run`\n\n| device | pattern | reader | strategy | mean ms | ci95 ms | saved vs block % | runs |\n|---|---|---|---|---|---|---|---|\n";
        for r in &o.readers {
            s += &format!(
                "| {} | {} | {} | {} | {:.2} | {:.2} | {:+.1} | {} |\n",
                r.device,
                r.pattern.name(),
                r.reader,
                r.strategy,
                r.mean_us / 1e3,
                r.ci95_us / 1e3,
                r.improvement_pct,
                r.rounds
            );
        }
    }
    if !o.profiles.is_empty() {
        s += "\n## smart's thresholds (probed on each ext2 file)\n\n";
        for (d, p) in &o.profiles {
            s += &format!("- {d}: class {:?}, size threshold {} bytes\n", p.class, p.size_threshold_bytes);
        }
    }
    s
}
