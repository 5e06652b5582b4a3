//! The `smartcon` binary: turns validated flags into library objects and prints results.
//!
//! Each subcommand lives in its own module under `cmd/`; the libraries know nothing of
//! clap, anyhow or indicatif. Exit status: 0 on success, 1 when a run fails (for example a
//! `--verify` mismatch), 2 on a usage or setup error (bad input, missing target), 130 after
//! SIGINT or SIGTERM (whatever the command did after it stopped).

mod cmd;
mod common;
mod engine_setup;
mod paths;
mod ray;

// The renderers live in the report library; these names keep `crate::table` and the like.
use smartcon_report::{printers, table};

use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "smartcon",
    version,
    about = "Should a thread that waits for I/O sleep or spin? Measure it, decide it per I/O, model it.",
    propagate_version = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one I/O job on a target with one wait strategy.
    Io(cmd::io::IoArgs),
    /// Run the matrix targets x sizes x ops x strategies and print each strategy's gain.
    Bench(cmd::bench::BenchArgs),
    /// List the emulated device presets and their parameters.
    Devices(cmd::devices::DevicesArgs),
    /// Device Monitor: measure a target and write its profile (thresholds for smart).
    Probe(cmd::probe::ProbeArgs),
    /// The SmartCon study on this machine's devices: loads x workloads x strategies, a report.
    Evaluate(cmd::evaluate::EvaluateArgs),
    /// Run fio's matching jobs beside smartcon's strategies on a target.
    CompareFio(cmd::compare_fio::CompareFioArgs),
    /// Measure this host's model (sleep overshoot, wake-up, blocking CPU, io_uring against pread) into host.json.
    Host(cmd::host::HostArgs),
    /// Measure context-switch cost (direct, indirect) and wake-up latency on this host.
    Ctx(cmd::ctx::CtxArgs),
    /// The analytic CPI model (SmartCon Sec. 6, Eq. 1-5) and its projections.
    Model(cmd::model::ModelArgs),
    /// Capture, convert or synthesise memory-access traces.
    Trace(cmd::trace::TraceArgs),
    /// Simulate a cache hierarchy on a trace.
    Cachesim(cmd::cachesim::CachesimArgs),
    /// The elastic-time-slicing study on the trace-driven simulator.
    Ets(cmd::ets::EtsArgs),
    /// Temporal merge with serialized or pipelined post-I/O work, 16 threads (paper 002, Fig. 4).
    MergeBench(cmd::merge_bench::MergeBenchArgs),
    /// Run an unmodified program with its O_DIRECT I/O waited for by smartcon (LD_PRELOAD).
    Run(cmd::run::RunArgs),
    /// Replay traces or jobs on emulated devices in virtual time (and against real time).
    Emulate(cmd::emulate::EmulateArgs),
    /// probe and evaluate once on every node of a Ray cluster: one report, a table per host.
    Fleet(cmd::fleet::FleetArgs),
    /// Render a results.jsonl (a sweep's or a fleet's) into summary.md, plots and report.html.
    Report(cmd::report::ReportArgs),
    /// Remove loop devices, mounts, zram devices and images a killed smartcon left behind.
    Cleanup(cmd::cleanup::CleanupArgs),
}

fn main() {
    common::install_interrupt_handler();
    paths::init(&Cli::command());
    let cli = Cli::try_parse().unwrap_or_else(|e| common::exit_usage(e));
    let result = match cli.command {
        Command::Io(args) => cmd::io::run(args),
        Command::Bench(args) => cmd::bench::run(args),
        Command::Devices(args) => cmd::devices::run(args),
        Command::Probe(args) => cmd::probe::run(args),
        Command::Evaluate(args) => cmd::evaluate::run(args),
        Command::CompareFio(args) => cmd::compare_fio::run(args),
        Command::Host(args) => cmd::host::run(args),
        Command::Ctx(args) => cmd::ctx::run(args),
        Command::Model(args) => cmd::model::run(args),
        Command::Trace(args) => cmd::trace::run(args),
        Command::Cachesim(args) => cmd::cachesim::run(args),
        Command::Ets(args) => cmd::ets::run(args),
        Command::MergeBench(args) => cmd::merge_bench::run(args),
        Command::Run(args) => cmd::run::run(args),
        Command::Emulate(args) => cmd::emulate::run(args),
        Command::Fleet(args) => cmd::fleet::run(args),
        Command::Report(args) => cmd::report::run(args),
        Command::Cleanup(args) => cmd::cleanup::run(args),
    };
    let status = result.err().map_or(0, |error| common::report_error(&error));
    if common::interrupted() {
        std::process::exit(common::EXIT_INTERRUPTED);
    }
    std::process::exit(status);
}
