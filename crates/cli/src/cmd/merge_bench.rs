//! `smartcon merge-bench`: paper 002's fio runs (Sec. 5, Fig. 4) on an emulated device with
//! temporal merge and page-unit completion (`smartcon_workloads::merge`).
//!
//! For every workload (pattern x op, 16 synchronous threads of 4 KiB by default) it runs
//! {fixed, dynamic} polling x {serialized, pipelined} post-I/O work with merge on, and merge
//! off with fixed polling as the reference row; each run on a fresh device, the runs of one
//! workload back to back so a shared machine's drift hits them alike. It reports IOPS,
//! latency p50/p99, the I/O threads' CPU (user + sys, % of one CPU) and the average pages
//! per device request, and the pipelined/serialized IOPS ratio per op.
//!
//! The default target is `emu:optane,channels=1`: one channel, so while a merged request is
//! in flight every other thread's request waits in the merge queue and the next merged
//! request carries them (with Optane's 7 channels, 16 threads on a 2-core host rarely
//! queue, nothing merges and there is no post-I/O work to pipeline). Optane's 10 us per 4
//! KiB is the paper's SCM class (its PCM-emulating DRAM SSD).
//!
//! Non-goals: real devices (none here acknowledges per page); mixed read/write jobs.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use smartcon_engine::devemu::parse_spec;
use smartcon_engine::devemu::units::{format_ns, format_size};
use smartcon_engine::job::Pattern;
use smartcon_engine::Op;
use smartcon_workloads::merge::job::{run_merge_job, MergeJobResult, MergeJobSpec};
use smartcon_workloads::merge::{MergeConfig, MergeDevice, Polling, MERGE_PAGES_MAX, THREADS_MAX};

use crate::common::{emit_json, interrupt_flag, interrupted, progress_bar};
use crate::engine_setup::*;
use crate::plot;
use crate::printers::iops;
use crate::table::Table;

pub const DEFAULT_TARGET: &str = "emu:optane,channels=1";

#[derive(Args, Debug)]
pub struct MergeBenchArgs {
    /// An emulated device (emu:PRESET[,key=value...]); one channel makes requests merge.
    #[arg(long, default_value = DEFAULT_TARGET)]
    pub target: String,
    /// Synchronous I/O threads.
    #[arg(long, default_value_t = 16)]
    pub threads: u32,
    /// Time per configuration.
    #[arg(long, default_value = "1s")]
    pub duration: String,
    /// Comma-separated ops.
    #[arg(long, default_value = "read,write")]
    pub ops: String,
    /// Comma-separated patterns (seq, rand).
    #[arg(long, default_value = "seq,rand")]
    pub patterns: String,
    /// Request size (whole 4 KiB pages).
    #[arg(long, default_value = "4k")]
    pub bs: String,
    /// The largest merged request, in 4 KiB pages.
    #[arg(long, default_value_t = 32)]
    pub max_merge: u32,
    /// The region I/O goes to (default 64 MiB, or the device if smaller).
    #[arg(long)]
    pub span: Option<String>,
    /// Runs of every configuration, interleaved (round 1 of every configuration, then round
    /// 2, ...); the table and the ratios use the sums over the rounds, so a load swing on a
    /// shared machine hits every configuration alike.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// Leave out the merge-off reference row.
    #[arg(long)]
    pub no_reference: bool,
    /// JSON Lines output: one "merge_result" record per run and one "merge_summary".
    #[arg(long)]
    pub json: bool,
    /// Draw IOPS per workload and configuration as an SVG bar chart to this file.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub run: RunFlags,
}

/// One run (docs/merge.md).
#[derive(serde::Serialize)]
pub(crate) struct MergeRecord<'a> {
    #[serde(rename = "type")]
    pub(crate) record_type: &'static str,
    pub(crate) target: &'a str,
    pub(crate) op: &'static str,
    pub(crate) pattern: &'static str,
    pub(crate) bs_bytes: u64,
    pub(crate) threads: u32,
    pub(crate) config: String,
    /// 0-based round of `--rounds`.
    pub(crate) round: u32,
    pub(crate) merge: bool,
    pub(crate) pipelined: bool,
    pub(crate) polling: &'static str,
    pub(crate) poll_interval_ns: u64,
    pub(crate) alpha_ns: u64,
    pub(crate) sampling_ns: u64,
    pub(crate) max_merge_pages: u32,
    #[serde(flatten)]
    pub(crate) result: &'a MergeJobResult,
}

impl<'a> MergeRecord<'a> {
    pub(crate) fn new(
        target: &'a str,
        op: Op,
        pattern: Pattern,
        threads: u32,
        c: &MergeConfig,
        round: u32,
        result: &'a MergeJobResult,
    ) -> MergeRecord<'a> {
        MergeRecord {
            record_type: "merge_result",
            target,
            op: op.name(),
            pattern: pattern.name(),
            bs_bytes: c.bs_bytes,
            threads,
            config: c.label(),
            round,
            merge: c.merge,
            pipelined: c.pipelined,
            polling: c.polling.name(),
            poll_interval_ns: c.poll.interval_ns,
            alpha_ns: c.poll.alpha_ns,
            sampling_ns: c.poll.sampling_ns,
            max_merge_pages: c.merge_pages_max,
            result,
        }
    }
}

/// Pipelined over serialized IOPS of one workload and polling.
#[derive(serde::Serialize, Clone)]
pub(crate) struct Ratio {
    pub(crate) op: &'static str,
    pub(crate) pattern: &'static str,
    pub(crate) polling: &'static str,
    pub(crate) pipelined_over_serialized_iops: f64,
}

#[derive(serde::Serialize)]
struct Summary {
    #[serde(rename = "type")]
    record_type: &'static str,
    target: String,
    rounds: u32,
    /// From the IOPS summed over the rounds.
    ratios: Vec<Ratio>,
    /// Mean of the ratios per op over patterns and pollings.
    read_ratio_mean: Option<f64>,
    write_ratio_mean: Option<f64>,
    interrupted: bool,
}

pub(crate) struct Row {
    pub(crate) op: Op,
    pub(crate) pattern: Pattern,
    pub(crate) config: MergeConfig,
    pub(crate) result: MergeJobResult,
}

pub fn run(args: MergeBenchArgs) -> Result<()> {
    if !args.target.starts_with("emu:") {
        bail!(
            "merge-bench needs an emulated device (emu:PRESET[,...]), not {:?}: page-unit completion is a device feature no real target here has",
            args.target
        );
    }
    let spec = parse_spec(&args.target).map_err(|e| anyhow::anyhow!(e))?;
    if args.threads == 0 || args.threads as usize > THREADS_MAX {
        bail!("--threads must be 1..={THREADS_MAX}");
    }
    if args.max_merge == 0 || args.max_merge > MERGE_PAGES_MAX {
        bail!("--max-merge must be 1..={MERGE_PAGES_MAX} pages");
    }
    let ops: Vec<Op> = split_list("ops", &args.ops)?.iter().map(|s| parse_op(s)).collect::<Result<_>>()?;
    let patterns: Vec<Pattern> =
        split_list("patterns", &args.patterns)?.iter().map(|s| parse_pattern(s)).collect::<Result<_>>()?;
    let bs = parse_size_arg("bs", &args.bs)?;
    let duration_ns = parse_duration_arg("duration", &args.duration)?;
    let poll = args.run.poll_params()?;
    let span = match &args.span {
        Some(s) => parse_size_arg("span", s)?,
        None => (64u64 << 20).min(spec.capacity_bytes),
    };
    let mut configs = Vec::new();
    if !args.no_reference {
        configs.push(MergeConfig::new(false, false, Polling::Fixed));
    }
    for polling in [Polling::Fixed, Polling::Dynamic] {
        for pipelined in [false, true] {
            configs.push(MergeConfig::new(true, pipelined, polling));
        }
    }
    for c in &mut configs {
        c.merge_pages_max = args.max_merge;
        c.bs_bytes = bs;
        c.poll = poll;
    }
    // Check every configuration before measuring anything.
    let job = |op, pattern| MergeJobSpec {
        op,
        pattern,
        threads: args.threads,
        duration_ns,
        ios_per_thread_max: None,
        span_bytes: span,
        prefill: true,
        seed: 1,
    };
    for c in &configs {
        let dev = MergeDevice::new(&spec, *c).map_err(engine_err)?;
        job(Op::Read, Pattern::Rand).validate(&dev).map_err(engine_err)?;
    }
    if let Some(path) = &args.plot {
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(std::path::Path::new("."));
        if !dir.is_dir() {
            bail!("--plot {}: directory {} does not exist", path.display(), dir.display());
        }
    }
    if args.rounds == 0 || args.rounds > ROUNDS_MAX {
        bail!("--rounds must be 1..={ROUNDS_MAX}");
    }
    let runs = ops.len() * patterns.len() * configs.len() * args.rounds as usize;
    let bar = progress_bar(runs as u64, "merge-bench");
    let mut rows: Vec<Row> = Vec::new();
    'outer: for &op in &ops {
        for &pattern in &patterns {
            let mut by_config: Vec<Vec<MergeJobResult>> = vec![Vec::new(); configs.len()];
            let schedule =
                (0..args.rounds).flat_map(|round| configs.iter().enumerate().map(move |(ci, c)| (round, ci, c)));
            for (round, ci, c) in schedule {
                if interrupted() {
                    break;
                }
                bar.set_message(format!("{} {} {} (round {})", pattern.name(), op.name(), c.label(), round + 1));
                let dev = MergeDevice::new(&spec, *c).map_err(engine_err)?;
                let result = run_merge_job(&dev, &job(op, pattern), interrupt_flag()).map_err(engine_err)?;
                if args.json {
                    emit_json(&MergeRecord::new(&args.target, op, pattern, args.threads, c, round, &result))?;
                }
                by_config[ci].push(result);
                bar.inc(1);
            }
            for (c, results) in configs.iter().zip(&by_config) {
                if !results.is_empty() {
                    rows.push(Row { op, pattern, config: *c, result: sum_rounds(results) });
                }
            }
            if interrupted() {
                break 'outer;
            }
        }
    }
    bar.finish_and_clear();
    let ratios = ratios(&rows);
    let mean = |op: Op| {
        let v: Vec<f64> =
            ratios.iter().filter(|r| r.op == op.name()).map(|r| r.pipelined_over_serialized_iops).collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let summary = Summary {
        record_type: "merge_summary",
        target: args.target.clone(),
        rounds: args.rounds,
        ratios: ratios.clone(),
        read_ratio_mean: mean(Op::Read),
        write_ratio_mean: mean(Op::Write),
        interrupted: interrupted(),
    };
    if let Some(path) = &args.plot {
        draw(path, &rows, &configs)?;
    }
    if args.json {
        emit_json(&summary)?;
        return Ok(());
    }
    print!("{}", table(&rows, &args, bs));
    for op in [Op::Read, Op::Write] {
        let of_op: Vec<String> = ratios
            .iter()
            .filter(|r| r.op == op.name())
            .map(|r| format!("{} {} {:.2}x", r.pattern, r.polling, r.pipelined_over_serialized_iops))
            .collect();
        if let Some(m) = mean(op) {
            println!("pipelined/serialized IOPS, {}s: {:.2}x mean ({})", op.name(), m, of_op.join(", "));
        }
    }
    if let Some(path) = &args.plot {
        println!("plot: {}", path.display());
    }
    if interrupted() {
        println!("interrupted: the table shows the runs finished before Ctrl-C");
    }
    Ok(())
}

/// The most `--rounds`.
pub const ROUNDS_MAX: u32 = 100;

/// One result for the rounds of a configuration: counts and times summed (so IOPS, CPU and
/// pages per request are over all rounds), latency percentiles the median of the rounds'.
fn sum_rounds(rounds: &[MergeJobResult]) -> MergeJobResult {
    let sum = |f: fn(&MergeJobResult) -> u64| rounds.iter().map(f).sum::<u64>();
    let median = |f: fn(&MergeJobResult) -> u64| {
        let mut v: Vec<u64> = rounds.iter().map(f).collect();
        v.sort_unstable();
        v[v.len() / 2]
    };
    let ios = sum(|r| r.ios);
    let elapsed_ns = sum(|r| r.elapsed_ns).max(1);
    let cpu_ns = sum(|r| r.cpu_ns);
    let device_requests = sum(|r| r.device_requests);
    let pages = sum(|r| r.pages);
    let errors: Vec<f64> = rounds.iter().filter_map(|r| r.prediction_error_ns_mean).collect();
    MergeJobResult {
        ios,
        elapsed_ns,
        iops: ios as f64 * 1e9 / elapsed_ns as f64,
        latency_ns_p50: median(|r| r.latency_ns_p50),
        latency_ns_p99: median(|r| r.latency_ns_p99),
        latency_ns_mean: rounds.iter().map(|r| r.latency_ns_mean * r.ios as f64).sum::<f64>() / ios.max(1) as f64,
        cpu_ns,
        cpu_pct: cpu_ns as f64 * 100.0 / elapsed_ns as f64,
        device_requests,
        pages,
        pages_per_request_mean: if device_requests > 0 { pages as f64 / device_requests as f64 } else { 0.0 },
        releases: sum(|r| r.releases),
        polls: sum(|r| r.polls),
        sleeps: sum(|r| r.sleeps),
        leader_turns: sum(|r| r.leader_turns),
        prediction_error_ns_mean: (!errors.is_empty()).then(|| errors.iter().sum::<f64>() / errors.len() as f64),
        interrupted: rounds.iter().any(|r| r.interrupted),
    }
}

pub(crate) fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for r in rows.iter().filter(|r| r.config.merge && r.config.pipelined) {
        let serialized = rows.iter().find(|s| {
            s.op == r.op
                && s.pattern == r.pattern
                && s.config.merge
                && !s.config.pipelined
                && s.config.polling == r.config.polling
        });
        if let Some(s) = serialized {
            out.push(Ratio {
                op: r.op.name(),
                pattern: r.pattern.name(),
                polling: r.config.polling.name(),
                pipelined_over_serialized_iops: r.result.iops / s.result.iops.max(1e-9),
            });
        }
    }
    out
}

fn table(rows: &[Row], args: &MergeBenchArgs, bs: u64) -> String {
    let mut out = format!(
        "merge-bench on {}: {} threads, {} requests, max merge {} pages, {} per run x {} round(s), poll interval {}, alpha {}\n\n",
        args.target,
        args.threads,
        format_size(bs),
        args.max_merge,
        args.duration,
        args.rounds,
        format_ns(rows.first().map_or(0, |r| r.config.poll.interval_ns) as f64),
        format_ns(rows.first().map_or(0, |r| r.config.poll.alpha_ns) as f64),
    );
    let mut t =
        Table::new(&["workload", "config", "IOPS", "p50", "p99", "CPU %", "pages/req", "polls/IO", "vs serialized"]);
    for r in rows {
        let vs = if r.config.merge && r.config.pipelined {
            rows.iter()
                .find(|s| {
                    s.op == r.op
                        && s.pattern == r.pattern
                        && s.config.merge
                        && !s.config.pipelined
                        && s.config.polling == r.config.polling
                })
                .map_or("-".to_string(), |s| format!("{:.2}x", r.result.iops / s.result.iops.max(1e-9)))
        } else {
            "-".to_string()
        };
        t.row(vec![
            format!("{} {}", r.pattern.name(), r.op.name()),
            r.config.label(),
            iops(r.result.iops),
            format_ns(r.result.latency_ns_p50 as f64),
            format_ns(r.result.latency_ns_p99 as f64),
            format!("{:.0}%", r.result.cpu_pct),
            format!("{:.1}", r.result.pages_per_request_mean),
            format!("{:.1}", r.result.polls as f64 / r.result.ios.max(1) as f64),
            vs,
        ]);
    }
    out.push_str(&t.render());
    out
}

pub(crate) fn draw(path: &std::path::Path, rows: &[Row], configs: &[MergeConfig]) -> Result<()> {
    let mut categories: Vec<String> = Vec::new();
    for r in rows {
        let w = format!("{} {}", r.pattern.name(), r.op.name());
        if !categories.contains(&w) {
            categories.push(w);
        }
    }
    let series = configs
        .iter()
        .map(|c| {
            let values = categories
                .iter()
                .map(|w| {
                    rows.iter()
                        .find(|r| &format!("{} {}", r.pattern.name(), r.op.name()) == w && r.config == *c)
                        .map_or(f64::NAN, |r| r.result.iops / 1e3)
                })
                .collect();
            (c.label(), values)
        })
        .collect();
    plot::bar_chart(
        path,
        &plot::BarChart {
            title: "Temporal merge: IOPS by polling and post-I/O processing (paper 002, Fig. 4)",
            y_label: "thousand IOPS",
            categories,
            series,
            reference: None,
        },
    )
}
