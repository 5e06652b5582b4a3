//! `smartcon trace`: capture a real program's memory accesses through valgrind's lackey,
//! convert lackey text, synthesise traces, and describe a trace file.
//!
//! Capture runs `valgrind --tool=lackey --trace-mem=yes PROGRAM ARGS...`, reads lackey's
//! trace from valgrind's stderr as it is produced (a trace never sits on disk as text) and
//! writes the compact binary format of `smartcon_cachesim::trace`. The program's stdout is
//! discarded so it cannot mix with ours; its stderr shares the stream with lackey and is
//! skipped line by line. Output goes to a temporary name and is renamed only on success, so
//! a failed capture leaves nothing behind. An existing --out is refused.

use std::collections::VecDeque;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use serde::Serialize;
use smartcon_cachesim::synth::{records_for, Synth, SynthKind};
use smartcon_cachesim::trace::{convert_lackey, convert_lackey_file, TraceReader, TraceWriter};
use smartcon_devemu::units::{format_size, parse_size};

use crate::common;

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
    #[arg(long)]
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
    #[arg(long = "lackey")]
    input: PathBuf,
    /// The trace file to write (must not exist).
    #[arg(long)]
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
    #[arg(long)]
    out: PathBuf,
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct InfoArgs {
    /// The trace file.
    trace: PathBuf,
    #[arg(long)]
    json: bool,
}

/// The record every trace subcommand prints.
#[derive(Serialize)]
struct TraceRecord<'a> {
    r#type: &'static str,
    action: &'a str,
    path: String,
    records: u64,
    fetches: u64,
    reads: u64,
    writes: u64,
    modifies: u64,
    size_bytes: u64,
    bytes_per_record: f64,
}

pub fn run(args: TraceArgs) -> Result<()> {
    match args.command {
        TraceCommand::Capture(a) => {
            refuse_existing(&a.out)?;
            capture(&a.program, &a.out)?;
            describe("capture", &a.out, a.json)
        }
        TraceCommand::Convert(a) => {
            refuse_existing(&a.out)?;
            convert_lackey_file(&a.input, &a.out)?;
            describe("convert", &a.out, a.json)
        }
        TraceCommand::Synth(a) => {
            let kind = SynthKind::parse(&a.kind).with_context(|| {
                format!(
                    "unknown --kind {:?}: use stream, loop, random, phased or hotcold",
                    a.kind
                )
            })?;
            let ws = parse_size(&a.working_set).context("--working-set")?;
            if a.accesses == 0 {
                bail!("--accesses must be at least 1");
            }
            let synth = Synth::new(kind, ws, a.seed)?;
            refuse_existing(&a.out)?;
            let mut writer = TraceWriter::create(&a.out)?;
            for r in synth.take(records_for(a.accesses) as usize) {
                writer.push(&r)?;
            }
            writer.finish()?;
            describe("synth", &a.out, a.json)
        }
        TraceCommand::Info(a) => describe("info", &a.trace, a.json),
    }
}

fn refuse_existing(path: &Path) -> Result<()> {
    if path.exists() {
        bail!("{} exists; choose another --out or remove it", path.display());
    }
    Ok(())
}

/// Reads the whole trace (verifying it) and prints what it holds.
fn describe(action: &str, path: &Path, json: bool) -> Result<()> {
    use smartcon_cachesim::trace::AccessKind;
    let mut reader = TraceReader::open(path)?;
    let mut counts = [0u64; 4];
    while let Some(r) = reader.next_record()? {
        counts[r.kind as usize] += 1;
    }
    let records = counts.iter().sum::<u64>();
    let size_bytes = std::fs::metadata(path)?.len();
    let record = TraceRecord {
        r#type: "trace",
        action,
        path: path.display().to_string(),
        records,
        fetches: counts[AccessKind::Fetch as usize],
        reads: counts[AccessKind::Read as usize],
        writes: counts[AccessKind::Write as usize],
        modifies: counts[AccessKind::Modify as usize],
        size_bytes,
        bytes_per_record: size_bytes as f64 / records.max(1) as f64,
    };
    if json {
        return common::emit_json(&record);
    }
    println!("{}: {}", action, record.path);
    println!(
        "  records       {:>14}  (instruction fetches {}, reads {}, writes {}, modifies {})",
        record.records, record.fetches, record.reads, record.writes, record.modifies
    );
    println!(
        "  file size     {:>14}  ({:.2} bytes/record)",
        format_size(size_bytes),
        record.bytes_per_record
    );
    Ok(())
}

/// Checks that valgrind runs at all, with a hint when it is missing.
pub(crate) fn valgrind_version() -> Result<String> {
    let out = Command::new("valgrind").arg("--version").output().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow::anyhow!("valgrind is not installed (apt-get install valgrind)")
        } else {
            anyhow::anyhow!("cannot run valgrind: {e}")
        }
    })?;
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Non-trace lines kept for the error message of a failed capture.
const CAPTURE_NOTES_MAX: usize = 12;

/// Captures `program` under lackey into `out` (written under a temporary name first).
pub(crate) fn capture(program: &[String], out: &Path) -> Result<u64> {
    valgrind_version()?;
    let Some((exe, rest)) = program.split_first() else {
        bail!("no program given after --")
    };
    let tmp = out.with_extension(format!("partial-{}", std::process::id()));
    let result = capture_into(exe, rest, &tmp);
    match result {
        Ok(records) => {
            std::fs::rename(&tmp, out).with_context(|| format!("cannot rename to {}", out.display()))?;
            Ok(records)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn capture_into(exe: &str, args: &[String], tmp: &Path) -> Result<u64> {
    let mut child = Command::new("valgrind")
        .args(["--tool=lackey", "--trace-mem=yes", "--log-fd=2"])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot start valgrind")?;
    let stderr = child.stderr.take().expect("piped");
    let mut writer = TraceWriter::create(tmp)?;
    let mut notes: VecDeque<String> = VecDeque::new();
    let converted = convert_lackey(
        BufReader::with_capacity(1 << 20, stderr),
        false,
        |r| writer.push(r),
        |line| {
            let line = line.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim();
            if !line.is_empty() {
                if notes.len() == CAPTURE_NOTES_MAX {
                    notes.pop_front();
                }
                notes.push_back(line.to_string());
            }
        },
    );
    let status = child.wait().context("waiting for valgrind")?;
    let stats = converted?;
    let interesting = || {
        notes
            .iter()
            .rev()
            .find(|l| l.contains("valgrind:") || l.contains("No such file") || l.contains("annot"))
            .or(notes.back())
            .cloned()
            .unwrap_or_default()
    };
    if stats.records == 0 {
        bail!("valgrind could not run {exe:?}: {}", interesting());
    }
    if !status.success() {
        bail!("{exe:?} failed under valgrind ({status}): {}", interesting());
    }
    writer.finish()?;
    Ok(stats.records)
}
