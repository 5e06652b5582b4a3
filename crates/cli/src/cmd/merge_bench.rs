//! `smartcon merge-bench`: paper 002's fio runs (Sec. 5, Fig. 4) on an emulated device with
//! temporal merge and page-unit completion. The study itself (configurations, rounds, sums,
//! ratios, records) is `smartcon_study::merge_bench`; this file parses flags, streams the
//! records and renders the table and the plot. See docs/merge.md.
//!
//! The default target is `emu:optane,channels=1`: one channel, so while a merged request is
//! in flight every other thread's request waits in the merge queue and the next merged
//! request carries them. Only the flags the study honours are offered: the strategies and
//! the polling parameters, not the engine's `--io-cpus`, `--spin-budget`, `--cpu-window` or
//! `--destructive` (the merge device has its own threads, its fixed strategies read an idle
//! System Monitor and its decisions the process-wide one, and it is never a real block
//! device).
//!
//! `--strategies` takes every `--strategy` name (each device request is a group call of
//! its waiting thread's SmartPort, `smartcon_engine::smartport::group`); its default,
//! `poll,hybrid`, is the paper's fixed and dynamic polling, whose rows keep the names
//! `fixed` and `dynamic` as before the flag (there was no `--polling` flag: the two
//! pollings were the study's fixed pair).

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;
use smartcon_engine::smartport::StrategyChoice;
use smartcon_engine::wait::PollParams;
use smartcon_report::merge::{draw, table};
use smartcon_study::merge_bench::{ratio_mean, summary, MergePlan, MergeProgress, MergeRecord};
use smartcon_util::Op;

use crate::common::{emit_json, interrupt_flag, progress_bar};
use crate::engine_setup::*;

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
    /// Comma-separated strategies the device requests are waited for by, each a set of
    /// serialized and pipelined rows (any `--strategy` name). `poll` is the paper's fixed
    /// polling and `hybrid` its dynamic polling (rows `fixed/...`, `dynamic/...`); the
    /// merge-off reference row uses the first.
    #[arg(long, value_delimiter = ',', value_parser = strategy_value, default_value = "poll,hybrid")]
    pub strategies: Vec<StrategyChoice>,
    /// Leave out the merge-off reference row.
    #[arg(long)]
    pub no_reference: bool,
    /// JSON Lines output: one "merge_result" record per run and one "merge_summary".
    #[arg(long)]
    pub json: bool,
    /// Draw IOPS per workload and configuration as an SVG bar chart to this file (a new file).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    pub plot: Option<PathBuf>,
    #[command(flatten)]
    pub poll: PollFlags,
}

/// The polling parameters of every configuration (the engine's `RunFlags` minus what the
/// merge device cannot honour).
#[derive(Args, Debug)]
pub struct PollFlags {
    /// Fixed polling: time between two status polls; dynamic: its sampling phase's interval.
    #[arg(long, default_value = "1us")]
    pub poll_interval: String,
    /// Dynamic polling: poll interval after the predicted completion, and its correction step.
    #[arg(long, default_value = "100ns")]
    pub alpha: String,
    /// Dynamic polling: how long each thread samples response times before predicting them.
    #[arg(long, default_value = "20ms")]
    pub sampling: String,
}

impl PollFlags {
    fn params(&self) -> Result<PollParams> {
        Ok(PollParams {
            interval_ns: parse_duration_arg("poll-interval", &self.poll_interval)?,
            alpha_ns: parse_duration_arg("alpha", &self.alpha)?,
            sampling_ns: parse_duration_arg("sampling", &self.sampling)?,
        })
    }
}

pub fn run(args: MergeBenchArgs) -> Result<()> {
    // Claimed before anything is measured: a refusal costs nothing.
    let plot_out = crate::paths::out_file("--plot", args.plot.as_deref())?;
    let plan = MergePlan {
        target: args.target.clone(),
        threads: args.threads,
        duration_ns: parse_duration_arg("duration", &args.duration)?,
        ops: split_list("ops", &args.ops)?.iter().map(|s| parse_op(s)).collect::<Result<_>>()?,
        patterns: split_list("patterns", &args.patterns)?.iter().map(|s| parse_pattern(s)).collect::<Result<_>>()?,
        bs_bytes: parse_size_arg("bs", &args.bs, smartcon_util::units::IO_SIZE)?,
        merge_pages_max: args.max_merge,
        span_bytes: args
            .span
            .as_deref()
            .map(|s| parse_size_arg("span", s, smartcon_util::units::DEVICE_SIZE))
            .transpose()?,
        rounds: args.rounds,
        reference: !args.no_reference,
        poll: args.poll.params()?,
        strategies: args.strategies.clone(),
    };
    plan.validate().map_err(engine_err)?;
    let bar = progress_bar(plan.runs() as u64, "merge-bench");
    let mut emitted: Result<()> = Ok(());
    let outcome = smartcon_study::merge_bench::run(&plan, interrupt_flag(), &mut |p| match p {
        MergeProgress::Starting { op, pattern, config, round } => {
            bar.set_message(format!("{} {} {} (round {})", pattern.name(), op.name(), config.label(), round + 1))
        }
        MergeProgress::Finished { op, pattern, config, round, result } => {
            if args.json && emitted.is_ok() {
                emitted = emit_json(&MergeRecord::new(&args.target, op, pattern, args.threads, config, round, result));
            }
            bar.inc(1);
        }
    })
    .map_err(engine_err)?;
    emitted?;
    bar.finish_and_clear();
    let summary = summary(&args.target, args.rounds, &outcome);
    if args.json {
        emit_json(&summary)?;
        return write_plot(plot_out, &outcome, false);
    }
    print!("{}", table(&outcome.rows, &plan, &args.duration));
    for op in [Op::Read, Op::Write] {
        let of_op: Vec<String> = summary
            .ratios
            .iter()
            .filter(|r| r.op == op.name())
            .map(|r| format!("{} {} {:.2}x", r.pattern, r.polling, r.pipelined_over_serialized_iops))
            .collect();
        if let Some(m) = ratio_mean(&summary.ratios, op) {
            println!("pipelined/serialized IOPS, {}s: {:.2}x mean ({})", op.name(), m, of_op.join(", "));
        }
    }
    if outcome.interrupted {
        println!("interrupted: the table shows the runs finished before Ctrl-C");
    }
    write_plot(plot_out, &outcome, true)
}

/// Draws the plot after the results are printed, so a plot that cannot be written loses
/// nothing.
fn write_plot(
    out: Option<crate::paths::OutFile>,
    outcome: &smartcon_study::merge_bench::MergeOutcome,
    say: bool,
) -> Result<()> {
    if let Some(out) = crate::paths::unless_interrupted(out) {
        draw(out.tmp_path(), &outcome.rows, &outcome.configs).map_err(|e| out.wrap(&e))?;
        let path = out.commit()?;
        if say {
            println!("plot: {}", path.display());
        }
    }
    Ok(())
}
