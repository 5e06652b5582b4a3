//! `smartcon trace`: capture a real program's memory accesses through valgrind's lackey,
//! convert lackey text, synthesise traces, and describe a trace file. Capture is
//! `smartcon_cachesim::capture` and the description `smartcon_cachesim::study::describe`;
//! this file parses flags, refuses an existing --out and prints.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use smartcon_cachesim::capture::capture;
use smartcon_cachesim::synth::{records_for, Synth, SynthKind};
use smartcon_cachesim::trace::{convert_lackey_file_until, write_trace_file};
use smartcon_util::units::{format_size, parse_size};

use crate::common;
use crate::paths::{Existing, OutFile};

#[derive(clap::Args)]
pub struct TraceArgs {
    #[command(subcommand)]
    command: TraceCommand,
}

#[derive(clap::Subcommand)]
enum TraceCommand {
    /// Record a program's memory accesses with valgrind's lackey: capture --out FILE -- PROGRAM ARGS...
    Capture(CaptureArgs),
    /// Convert lackey `--trace-mem=yes` text (from --log-file) into a trace file.
    Convert(ConvertArgs),
    /// Write a synthetic trace (stream, loop, random, phased, hotcold).
    Synth(SynthArgs),
    /// Verify a trace file and print its record counts.
    Info(InfoArgs),
}

#[derive(clap::Args)]
struct CaptureArgs {
    /// The trace file to write (must not exist).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    out: PathBuf,
    /// JSON Lines on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true)]
    program: Vec<String>,
}

#[derive(clap::Args)]
struct ConvertArgs {
    /// Lackey text to read.
    #[arg(long = "lackey", value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    input: PathBuf,
    /// The trace file to write (must not exist).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    out: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SynthArgs {
    /// stream, loop, random, phased or hotcold.
    #[arg(long)]
    kind: String,
    /// Bytes the data accesses cycle over (e.g. 512k, 1m; ignored by stream).
    #[arg(long)]
    working_set: String,
    /// Data accesses to write; every data access comes with three instruction fetches.
    #[arg(long)]
    accesses: u64,
    /// Seed of the generator (same seed, same trace).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The trace file to write (must not exist).
    #[arg(long, value_name = "OUT_FILE", value_hint = clap::ValueHint::FilePath)]
    out: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct InfoArgs {
    /// The trace file.
    #[arg(value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    trace: PathBuf,
    #[arg(long)]
    json: bool,
}

pub fn run(args: TraceArgs) -> Result<()> {
    match args.command {
        TraceCommand::Capture(a) => {
            let mut out = OutFile::claim("--out", &a.out, Existing::Refuse)?;
            capture(&a.program, out.tmp_path_for_writer()).map_err(|e| out.wrap(&e))?;
            finish("capture", out, a.json)
        }
        TraceCommand::Convert(a) => {
            let mut out = OutFile::claim("--out", &a.out, Existing::Refuse)?;
            crate::paths::input("--lackey", &a.input, false)?;
            convert_lackey_file_until(&a.input, out.tmp_path_for_writer(), common::interrupt_flag())
                .map_err(|e| out.wrap(&e))?;
            if crate::common::interrupted() {
                bail!("interrupted; {} not written", smartcon_util::paths::escape(&a.out));
            }
            finish("convert", out, a.json)
        }
        TraceCommand::Synth(a) => {
            let kind = SynthKind::parse(&a.kind)
                .with_context(|| format!("unknown --kind {:?}: use stream, loop, random, phased or hotcold", a.kind))?;
            let ws = parse_size(&a.working_set).context("--working-set")?;
            if a.accesses == 0 {
                bail!("--accesses must be at least 1");
            }
            let synth = Synth::new(kind, ws, a.seed)?;
            let mut out = OutFile::claim("--out", &a.out, Existing::Refuse)?;
            let records = records_for(a.accesses).context("--accesses")?;
            write_trace_file(out.tmp_path_for_writer(), synth, records, common::interrupt_flag())
                .map_err(|e| out.wrap(&e))?;
            finish("synth", out, a.json)
        }
        TraceCommand::Info(a) => {
            crate::paths::input("trace", &a.trace, false)?;
            describe("info", &a.trace, a.json)
        }
    }
}

/// Verifies the written trace under its temporary name, then moves it into place.
fn finish(action: &str, out: OutFile, json: bool) -> Result<()> {
    smartcon_cachesim::study::describe(action, out.tmp_path()).map_err(|e| out.wrap(&e))?;
    let path = out.commit()?;
    describe(action, &path, json)
}

/// Reads the whole trace (verifying it) and prints what it holds.
fn describe(action: &str, path: &Path, json: bool) -> Result<()> {
    let record = smartcon_cachesim::study::describe(action, path)?;
    if json {
        return common::emit_json(&record);
    }
    println!("{}: {}", action, record.path);
    println!(
        "  records       {:>14}  (instruction fetches {}, reads {}, writes {}, modifies {})",
        record.records, record.fetches, record.reads, record.writes, record.modifies
    );
    println!("  file size     {:>14}  ({:.2} bytes/record)", format_size(record.size_bytes), record.bytes_per_record);
    Ok(())
}
