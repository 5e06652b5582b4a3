//! Turning flags into engine objects: targets, profiles, the System Monitor, job specs.
//! Shared by `io`, `bench` and the commands built on them.

use std::path::Path;

use anyhow::{bail, Context, Result};
use smartcon_engine::error::{Error as EngineError, ErrorKind};
use smartcon_engine::job::{Pattern, StrategyChoice};
use smartcon_engine::monitor::{self, SystemMonitor};
use smartcon_engine::placement::Placement;
use smartcon_engine::profile::Profile;
use smartcon_engine::target::Target;
use smartcon_engine::wait::PollParams;
use smartcon_util::units;
use smartcon_util::Op;

use crate::common::RunFailure;

/// Flags every command that runs jobs shares.
#[derive(clap::Args, Debug)]
pub struct RunFlags {
    /// Longest a spinner busy-waits before it sleeps.
    #[arg(long, default_value = "1ms")]
    pub spin_budget: String,
    /// The System Monitor's CPU utilization window (default 100ms).
    #[arg(long)]
    pub cpu_window: Option<String>,
    /// Allow writing to a file or block device smartcon did not create (destroys its data).
    #[arg(long)]
    pub destructive: bool,
    /// `poll`: time between two status polls; `hybrid` and `dip`: their sampling phase's interval.
    #[arg(long, default_value = "1us")]
    pub poll_interval: String,
    /// `hybrid` and `dip`: poll interval after the predicted completion, and its correction step.
    #[arg(long, default_value = "100ns")]
    pub alpha: String,
    /// `hybrid` and `dip`: how long each thread samples response times before predicting them.
    #[arg(long, default_value = "20ms")]
    pub sampling: String,
    /// Where the I/O threads run: any (the scheduler decides), irq (the CPUs that take the
    /// device's completion interrupts), away (the other CPUs) or a CPU list such as 1.
    #[arg(long, default_value = "any")]
    pub io_cpus: String,
    /// Busy-wait without the PAUSE hint in the spin loops (SmartCon Sec. 7.8, Fig. 20:
    /// scripts/seed000-studies.sh fig20 compares both).
    #[arg(long)]
    pub no_pause: bool,
}

impl RunFlags {
    /// Applies the process-wide switches (the PAUSE hint) before a run.
    pub fn apply_globals(&self) {
        smartcon_engine::clock::set_spin_pause(!self.no_pause);
    }

    pub fn spin_budget_ns(&self) -> Result<u64> {
        parse_duration_arg("spin-budget", &self.spin_budget)
    }

    /// The polling strategies' parameters; their ranges are checked against the run by the
    /// job (a sampling phase must be shorter than the run).
    pub fn poll_params(&self) -> Result<PollParams> {
        Ok(PollParams {
            interval_ns: parse_duration_arg("poll-interval", &self.poll_interval)?,
            alpha_ns: parse_duration_arg("alpha", &self.alpha)?,
            sampling_ns: parse_duration_arg("sampling", &self.sampling)?,
        })
    }

    pub fn monitor(&self) -> Result<SystemMonitor> {
        start_monitor(self.cpu_window.as_deref())
    }

    pub fn placement(&self) -> Result<Placement> {
        parse_placement(&self.io_cpus)
    }
}

/// `--io-cpus`: any, irq, away or a CPU list; a bad one is a one-line usage error.
pub fn parse_placement(text: &str) -> Result<Placement> {
    Placement::parse(text).map_err(|e| anyhow::anyhow!(e.message))
}

/// The CPU set for a target's I/O threads; a placement that cannot be honoured on it
/// (no completion interrupt to follow) says so once and leaves the threads unpinned.
pub fn io_cpus_for(placement: &Placement, target: &dyn Target) -> Option<Vec<usize>> {
    let (cpus, why) = placement.resolve(&target.device_id());
    if let Some(why) = why {
        eprintln!("smartcon: note: {why}");
    }
    cpus
}

/// Engine errors become CLI errors: run failures exit 1, the rest exit 2.
pub fn engine_err(e: EngineError) -> anyhow::Error {
    if e.is_run_failure() {
        anyhow::Error::new(RunFailure(e.message))
    } else {
        anyhow::Error::new(e)
    }
}

pub fn parse_op(text: &str) -> Result<Op> {
    match text {
        "read" => Ok(Op::Read),
        "write" => Ok(Op::Write),
        _ => bail!("unknown op {text:?}; use read or write"),
    }
}

pub fn parse_pattern(text: &str) -> Result<Pattern> {
    match text {
        "seq" => Ok(Pattern::Seq),
        "rand" => Ok(Pattern::Rand),
        _ => bail!("unknown pattern {text:?}; use seq or rand"),
    }
}

pub fn parse_strategy(text: &str) -> Result<StrategyChoice> {
    StrategyChoice::parse(text)
        .with_context(|| format!("unknown strategy {text:?}; use one of {}", StrategyChoice::names().join(", ")))
}

/// A size flag given as text (`--bs`, `--span`, `--size`, ...), of its kind's range: the one
/// size parser ([`units::parse_size_in`]), "--bs: ..." on one line.
pub fn parse_size_arg(what: &str, text: &str, range: units::SizeRange) -> Result<u64> {
    units::parse_size_in(text, range).map_err(|e| anyhow::anyhow!("--{what}: {e}"))
}

pub fn parse_duration_arg(what: &str, text: &str) -> Result<u64> {
    let v = units::parse_duration_ns(text).with_context(|| format!("--{what}"))?;
    if v == 0 {
        bail!("--{what} must be more than 0");
    }
    Ok(v)
}

/// Splits a comma-separated list, refusing empty items.
pub fn split_list(what: &str, text: &str) -> Result<Vec<String>> {
    let items: Vec<String> = text.split(',').map(|s| s.trim().to_string()).collect();
    if items.iter().any(|s| s.is_empty()) {
        bail!("--{what} has an empty item in {text:?}");
    }
    Ok(items)
}

/// Splits a comma-separated list of targets, keeping an emulated device's `,key=value`
/// options with it: `emu:optane,channels=1,/var/tmp/f` is two targets.
pub fn split_targets(text: &str) -> Result<Vec<String>> {
    split_list("targets", text)?;
    smartcon_study::evaluate::plan::split_targets(text).map_err(engine_err).context("--targets")
}

/// clap value parsers: a size (`4k`), a duration (`300ms`), a strategy, an op, a pattern, a
/// placement, each a one-line usage error when wrong: the workspace's typed error
/// ([`ErrorKind::Usage`], with the parse error as its source where there is one), whose
/// message clap prints after the option's name.
pub fn io_size_value(text: &str) -> Result<u64, EngineError> {
    units::parse_size_in(text, units::IO_SIZE).map_err(EngineError::from)
}

pub fn device_size_value(text: &str) -> Result<u64, EngineError> {
    units::parse_size_in(text, units::DEVICE_SIZE).map_err(EngineError::from)
}

pub fn duration_value(text: &str) -> Result<u64, EngineError> {
    let v = units::parse_duration_ns(text).map_err(|e| EngineError::from_source(ErrorKind::Usage, e))?;
    more_than_zero(v)
}

fn more_than_zero(v: u64) -> Result<u64, EngineError> {
    if v == 0 {
        return Err(EngineError::new(ErrorKind::Usage, "must be more than 0"));
    }
    Ok(v)
}

/// A usage error with the text of a CLI parser's error (its outermost context, as before).
fn usage(e: anyhow::Error) -> EngineError {
    EngineError::new(ErrorKind::Usage, e.to_string())
}

pub fn strategy_value(text: &str) -> Result<StrategyChoice, EngineError> {
    parse_strategy(text).map_err(usage)
}

pub fn op_value(text: &str) -> Result<Op, EngineError> {
    parse_op(text).map_err(usage)
}

pub fn pattern_value(text: &str) -> Result<Pattern, EngineError> {
    parse_pattern(text).map_err(usage)
}

pub fn placement_value(text: &str) -> Result<Placement, EngineError> {
    Placement::parse(text)
}

/// The profile `smart` uses for a target: an explicit file (which must be for this
/// device), else the stored probe result, else the emulated model's built-in thresholds,
/// else the paper's defaults with a note on stderr. `quiet` means no strategy of the run
/// reads the profile: then an unreadable stored profile is a warning, not an error.
pub fn resolve_profile(target: &dyn Target, explicit: Option<&Path>, quiet: bool) -> Result<Profile> {
    let p = match smartcon_engine::profile::resolve(target, explicit) {
        Err(e) if quiet && explicit.is_none() => {
            eprintln!("smartcon: warning: {e} (not needed by this run's strategies)");
            let device = target.device_id();
            target.builtin_profile().unwrap_or_else(|| Profile::paper_default(&device))
        }
        r => r.map_err(engine_err)?,
    };
    if !quiet && p.source == "paper-default" {
        eprintln!(
            "smartcon: note: no profile for {} ({}); smart uses the paper's defaults (64 KiB size threshold, Q=0). Run `smartcon probe {}` to measure this device.",
            p.device,
            target.label(),
            target.label()
        );
    }
    Ok(p)
}

pub fn start_monitor(window: Option<&str>) -> Result<SystemMonitor> {
    let window_ns = match window {
        Some(w) => parse_duration_arg("cpu-window", w)?,
        None => monitor::WINDOW_NS_DEFAULT,
    };
    if !(monitor::WINDOW_NS_MIN..=monitor::WINDOW_NS_MAX).contains(&window_ns) {
        bail!("--cpu-window must be between 20ms and 10s");
    }
    Ok(SystemMonitor::start(window_ns))
}
