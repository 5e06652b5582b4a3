//! `smartcon io`: one job on one target with one strategy.

use anyhow::Result;
use clap::Args;
use smartcon_emutarget::target::{self, OpenOptions};
use smartcon_engine::job::{run_job, JobSpec, Pattern, StrategyChoice};
use smartcon_util::Op;

use crate::common::{emit_json, interrupt_flag};
use crate::engine_setup::*;
use crate::printers::job_report;

#[derive(Args, Debug)]
pub struct IoArgs {
    /// A file, a block device, tmp:SIZE[@DIR] (a temporary file), or emu:PRESET[,key=value...].
    #[arg(long)]
    pub target: String,
    /// read or write.
    #[arg(long, default_value = "read", value_parser = op_value)]
    pub op: Op,
    /// seq or rand.
    #[arg(long, default_value = "rand", value_parser = pattern_value)]
    pub pattern: Pattern,
    /// Request size (4k, 64k, 1m).
    #[arg(long, default_value = "4k", value_parser = io_size_value)]
    pub bs: u64,
    /// The region used, from offset 0 (default: the whole target).
    #[arg(long, value_parser = device_size_value)]
    pub span: Option<u64>,
    /// block, spin, sync, smart, hybrid, smart-hybrid, dip (the paper's wait without polling),
    /// poll (fixed interval), or a peer's rule: half-mean (Linux's removed hybrid polling),
    /// iopoll-hybrid (Linux 6.13's hybrid IOPOLL), pas (DPAS). See docs/hybrid.md.
    #[arg(long, default_value = "smart", value_parser = strategy_value)]
    pub strategy: StrategyChoice,
    /// I/O threads, each with one request in flight.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// How long to run (500ms, 10s).
    #[arg(long, default_value = "2s", value_parser = duration_value)]
    pub duration: u64,
    /// Write a seeded, checksummed pattern and check every block read back.
    #[arg(long)]
    pub verify: bool,
    /// JSON Lines output (one "result" record).
    #[arg(long)]
    pub json: bool,
    /// A profile file for smart (default: the stored one for this device).
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub profile: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub run: RunFlags,
    /// Seed of offsets and verification data.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

pub fn run(args: IoArgs) -> Result<()> {
    if let Some(p) = &args.profile {
        crate::paths::input("--profile", p, false)?;
    }
    let op = args.op;
    let mut spec = JobSpec::new(op, args.pattern, args.bs, args.strategy);
    spec.span_bytes = args.span;
    spec.threads = args.threads;
    spec.duration_ns = args.duration;
    spec.verify = args.verify;
    spec.seed = args.seed;
    args.run.apply_globals();
    spec.spin_budget_ns = args.run.spin_budget_ns()?;
    spec.poll = args.run.poll_params()?;
    let tspec = target::parse_target(&args.target).map_err(engine_err)?;
    // --verify writes its pattern first, so it needs write access like a write job.
    let options = OpenOptions {
        write: op == Op::Write || args.verify,
        destructive: args.run.destructive,
        created_by_tool: false,
    };
    let target = target::open(&tspec, options).map_err(engine_err)?;
    for w in target.warnings() {
        eprintln!("smartcon: warning: {w}");
    }
    spec.validate(target.as_ref()).map_err(engine_err)?;
    spec.cpus = io_cpus_for(&args.run.placement()?, target.as_ref());
    let profile =
        resolve_profile(target.as_ref(), args.profile.as_deref(), !spec.strategy.name().starts_with("smart"))?;
    let monitor = args.run.monitor()?;
    let result = run_job(target.as_ref(), &spec, &profile, &monitor, interrupt_flag());
    monitor.stop();
    let result = result.map_err(engine_err)?;
    if args.json {
        emit_json(&result)?;
    } else {
        print!("{}", job_report(&result));
    }
    Ok(())
}
