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
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use smartcon_cachesim::synth::{records_for, Synth, SynthKind};
use smartcon_cachesim::trace::{convert_lackey, convert_lackey_file, TraceWriter};
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
            let kind = SynthKind::parse(&a.kind)
                .with_context(|| format!("unknown --kind {:?}: use stream, loop, random, phased or hotcold", a.kind))?;
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
    let Some((exe, rest)) = program.split_first() else { bail!("no program given after --") };
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
    use std::os::fd::{FromRawFd, OwnedFd};
    // lackey's trace goes to its own pipe (--log-fd), never through stderr: the program's
    // stderr would interleave with it mid-line and garble trace lines.
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("cannot create a pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned only by us.
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let write_fd = fds[1];
    let mut command = Command::new("valgrind");
    command
        .args(["--tool=lackey", "--trace-mem=yes", &format!("--log-fd={write_fd}")])
        .arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: between fork and exec only async-signal-safe calls: fcntl clears CLOEXEC on
    // the write end so valgrind inherits it under the same number.
    unsafe {
        use std::os::unix::process::CommandExt;
        command.pre_exec(move || {
            if libc::fcntl(write_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = command.spawn().context("cannot start valgrind")?;
    drop(write_end);
    // The program's stderr and valgrind's startup errors: keep the last lines for messages.
    let stderr = child.stderr.take().expect("piped");
    let notes_thread = std::thread::spawn(move || {
        let mut notes: VecDeque<String> = VecDeque::new();
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            let line = line.trim_start_matches(|c: char| c == '=' || c.is_ascii_digit()).trim().to_string();
            if !line.is_empty() {
                if notes.len() == CAPTURE_NOTES_MAX {
                    notes.pop_front();
                }
                notes.push_back(line);
            }
        }
        notes
    });
    let mut writer = TraceWriter::create(tmp)?;
    let log = std::fs::File::from(read_end);
    // Strict: the log fd carries only lackey's trace and valgrind's `==pid==` lines.
    let converted = convert_lackey(BufReader::with_capacity(1 << 20, log), true, |r| writer.push(r), |_| {});
    let status = child.wait().context("waiting for valgrind")?;
    let notes = notes_thread.join().unwrap_or_default();
    let interesting = || notes.back().cloned().unwrap_or_else(|| "no message".into());
    let stats = converted?;
    if stats.records == 0 {
        bail!("valgrind could not run {exe:?}: {}", interesting());
    }
    if !status.success() {
        bail!("{exe:?} failed under valgrind ({status}): {}", interesting());
    }
    writer.finish()?;
    Ok(stats.records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use smartcon_cachesim::trace::{convert_lackey_file, TraceReader};

    /// Capture through the pipe and convert lackey's --log-file text of the same program:
    /// both read back and agree (the loader's first accesses are deterministic).
    #[test]
    fn capture_and_convert_round_trip_where_valgrind_is_installed() {
        if valgrind_version().is_err() {
            eprintln!("skipped: valgrind is not installed (apt-get install valgrind)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("smartcon-capture-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let captured = dir.join("true.sct");
        let n = capture(&["/bin/true".to_string()], &captured).unwrap();
        let a = TraceReader::read_all(&captured).unwrap();
        assert_eq!(a.len() as u64, n);
        assert!(n > 10_000, "{n} records");
        let text = dir.join("true.lackey");
        let status = Command::new("valgrind")
            .args(["--tool=lackey", "--trace-mem=yes"])
            .arg(format!("--log-file={}", text.display()))
            .arg("/bin/true")
            .status()
            .unwrap();
        assert!(status.success());
        let converted = dir.join("true2.sct");
        convert_lackey_file(&text, &converted).unwrap();
        let b = TraceReader::read_all(&converted).unwrap();
        assert_eq!(a[..1000], b[..1000]);
        let diff = a.len().abs_diff(b.len()) as f64 / a.len() as f64;
        assert!(diff < 0.01, "{} vs {} records", a.len(), b.len());
        // A failing program is an error and leaves no file.
        let failed = dir.join("fail.sct");
        assert!(capture(&["/bin/false".to_string()], &failed).is_err());
        assert!(!failed.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
