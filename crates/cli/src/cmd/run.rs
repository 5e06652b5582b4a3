//! `smartcon run -- CMD ARGS...`: an unmodified program with libsmartcon.so preloaded.
//!
//! The library is the one cargo builds beside this binary (nothing is installed). Each
//! process of CMD appends its counters to a temporary file at exit; this command sums the
//! last record of each process image, prints one line and, with `--stats`, appends a
//! `run_result` record. CMD's exit status is passed through (128 + N after signal N). A
//! program the library cannot load into (static, another architecture, setuid) is said so
//! and runs untouched. `--io-cpus` pins the thread that spawns CMD, so CMD inherits it.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};
use smartcon_emulate::sweep;
use smartcon_engine::stats::new_histogram;

use crate::engine_setup::parse_placement;

const STRATEGIES: [&str; 5] = ["smart", "block", "spin", "hybrid", "smart-hybrid"];

#[derive(Args, Debug)]
pub struct RunArgs {
    /// How taken I/O waits: smart, block, spin, hybrid or smart-hybrid.
    #[arg(long, default_value = "smart")]
    pub strategy: String,
    /// Where CMD runs: any, irq or away (the CPUs that take, or do not take, the completion
    /// interrupts of the disk holding the working directory), or a CPU list such as 1.
    #[arg(long, default_value = "any")]
    pub io_cpus: String,
    /// Append a `run_result` JSON Lines record to this file (created if absent; its parent
    /// must exist).
    #[arg(long, value_name = "APPEND_FILE", value_hint = clap::ValueHint::FilePath)]
    pub stats: Option<PathBuf>,
    /// Take buffered regular files too, not only O_DIRECT ones (for study).
    #[arg(long)]
    pub buffered: bool,
    /// Programs CMD executes run without the library.
    #[arg(long)]
    pub no_inherit: bool,
    /// Serve CMD's I/O on PATH from an emulated device (SPEC=PATH, e.g. emu:hdd=/var/tmp/disk.img;
    /// a missing PATH is created sparse at the device's capacity). Real time unless --virtual-time.
    #[arg(long, value_name = "SPEC=PATH")]
    pub emulate: Option<String>,
    /// With --emulate: CMD's clocks and sleeps run in virtual time (device waits cost no real time).
    #[arg(long, requires = "emulate")]
    pub virtual_time: bool,
    /// The program and its arguments (after --).
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The exit status of `run --emulate` when the program exited 0 but part of its I/O to the
/// image went around the model (or none of it reached the model).
pub const EXIT_AROUND_MODEL: i32 = 3;

/// "io_uring 1 ring(s) set up, libaio 8 request(s)" from a count by kind.
fn describe(by_kind: &BTreeMap<String, u64>) -> String {
    by_kind
        .iter()
        .map(|(k, n)| match k.as_str() {
            "io_uring" => format!("io_uring: {n} ring(s) set up"),
            "libaio" => format!("libaio: {n} request(s)"),
            "mmap" => format!("mmap: {n} file map(s)"),
            "raw_syscall" => format!("{n} read/write call(s) made with syscall(2)"),
            other => format!("{other}: {n}"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// libsmartcon.so beside this binary, as cargo builds it.
pub(crate) fn library() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("cannot find the smartcon binary's path")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    [dir.join("libsmartcon.so"), dir.join("deps/libsmartcon.so")].into_iter().find(|p| p.exists()).with_context(|| {
        format!("libsmartcon.so is not beside {}; build it with `cargo build --release` (the workspace builds it; alone: `cargo build --release -p smartcon-preload`)", exe.display())
    })
}

/// Where execvp would find `cmd`.
fn resolve(cmd: &Path) -> Option<PathBuf> {
    if cmd.components().count() > 1 {
        return Some(cmd.to_path_buf()).filter(|p| p.exists());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|d| d.join(cmd)).find(|p| p.metadata().is_ok_and(|m| m.is_file()))
}

/// Why the library cannot load into `exe`, if it cannot (a script's interpreter is judged
/// by the loader itself, and is almost always dynamic).
fn unloadable(exe: &Path) -> Option<String> {
    let meta = exe.metadata().ok()?;
    // SAFETY: getuid has no preconditions.
    if meta.permissions().mode() & 0o6000 != 0 && unsafe { libc::getuid() } != 0 {
        return Some("it is setuid or setgid, and the loader ignores LD_PRELOAD for such programs".into());
    }
    let bytes = std::fs::read(exe).ok()?;
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return None;
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap_or_default()) as usize;
    if bytes[4] != 2 || u16_at(18) != if cfg!(target_arch = "aarch64") { 183 } else { 62 } {
        return Some("it is built for another architecture than this library".into());
    }
    let (phoff, phentsize, phnum) = (u64_at(32), u16_at(54), u16_at(56));
    let interp = (0..phnum).any(|i| {
        let o = phoff + i * phentsize;
        o + 4 <= bytes.len() && u32::from_le_bytes(bytes[o..o + 4].try_into().unwrap_or_default()) == 3
    });
    (!interp).then(|| "it is statically linked, so no LD_PRELOAD library can load into it".into())
}

/// The disk holding the working directory, as the engine names devices (`blk:vda`).
fn cwd_device() -> String {
    let dev = std::fs::metadata(".").map(|m| m.dev()).unwrap_or(0);
    let (ma, mi) = (libc::major(dev), libc::minor(dev));
    let name = std::fs::read_to_string(format!("/sys/dev/block/{ma}:{mi}/uevent"))
        .ok()
        .and_then(|u| u.lines().find_map(|l| l.strip_prefix("DEVNAME=").map(str::to_string)));
    format!("blk:{}", name.unwrap_or_else(|| format!("{ma}-{mi}")))
}

pub fn run(args: RunArgs) -> Result<()> {
    if !STRATEGIES.contains(&args.strategy.as_str()) {
        bail!("unknown strategy {:?} for run; use one of {}", args.strategy, STRATEGIES.join(", "));
    }
    let placement = parse_placement(&args.io_cpus)?;
    let (cpus, why) = placement.resolve(&cwd_device());
    if let Some(why) = why {
        eprintln!("smartcon: note: {why}");
    }
    // Checked and opened before the program runs, so a bad path costs nothing.
    let mut stats_out = args.stats.as_deref().map(StatsFile::open).transpose()?;
    let library = library()?;
    let program = Path::new(&args.command[0]);
    let Some(exe) = resolve(program) else {
        eprintln!("smartcon: error: {}: command not found", smartcon_util::paths::escape(program));
        drop(stats_out);
        std::process::exit(127);
    };
    let mut cmd = std::process::Command::new(&args.command[0]);
    cmd.args(&args.command[1..]);
    let stats_tmp = std::env::temp_dir().join(format!("smartcon-run-{}.jsonl", std::process::id()));
    let emu_tmp = stats_tmp.with_extension("emu.jsonl");
    let emulate =
        args.emulate.as_deref().map(sweep::parse_emulate_arg).transpose().map_err(|e| anyhow::anyhow!(e.message))?;
    let _ = std::fs::remove_file(&emu_tmp);
    let _ = std::fs::remove_file(&stats_tmp);
    // Recorded before the program can create them, so `smartcon cleanup` removes them
    // after kill -9 (the program itself gets SIGTERM then).
    let record = smartcon_util::paths::record_scratch(&[&stats_tmp, &emu_tmp]);
    let skip = unloadable(&exe);
    if let Some((spec, path)) = &emulate {
        if let Some(why) = &skip {
            bail!("--emulate: {} cannot be emulated: {why}", program.display());
        }
        if sweep::prepare_image(spec, path).map_err(|e| anyhow::anyhow!(e.message))? {
            eprintln!("smartcon: note: created {} (sparse, {spec}'s capacity)", path.display());
        }
    }
    if let Some(why) = &skip {
        eprintln!("smartcon: note: {} runs untouched: {why}", program.display());
    } else {
        let old = std::env::var("LD_PRELOAD").unwrap_or_default();
        let preload = format!("{}:{old}", library.display());
        cmd.env("LD_PRELOAD", preload).env("SMARTCON_PRELOAD_STRATEGY", &args.strategy);
        cmd.env("SMARTCON_PRELOAD_STATS", &stats_tmp);
        cmd.env("SMARTCON_PRELOAD_BUFFERED", if args.buffered { "1" } else { "0" });
        cmd.env("SMARTCON_PRELOAD_INHERIT", if args.no_inherit { "0" } else { "1" });
        if let Some((spec, path)) = &emulate {
            cmd.envs(sweep::preload_env(spec, path, args.virtual_time, &emu_tmp));
        }
    }
    if let Some(cpus) = &cpus {
        smartcon_engine::placement::pin_current_thread(cpus).map_err(|e| anyhow::anyhow!(e.message))?;
    }
    let start_ns = smartcon_engine::clock::now_ns();
    let status = run_forwarding(&mut cmd).with_context(|| format!("cannot run {}", program.display()))?;
    let duration_ns = smartcon_engine::clock::now_ns() - start_ns;
    let text = std::fs::read_to_string(&stats_tmp).unwrap_or_default();
    let _ = std::fs::remove_file(&stats_tmp);
    // The last record of each image: an image may write at a failed exec and at exit.
    let mut images: BTreeMap<String, Value> = BTreeMap::new();
    for rec in text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()) {
        images.insert(rec["image"].as_str().unwrap_or_default().to_string(), rec);
    }
    let sum = |f: &str| images.values().map(|r| r[f].as_u64().unwrap_or(0)).sum::<u64>();
    let by = |f: &str| {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for (k, v) in images.values().filter_map(|r| r[f].as_object()).flatten() {
            *m.entry(k.clone()).or_default() += v.as_u64().unwrap_or(0);
        }
        m
    };
    let (by_strategy, by_reason) = (by("by_strategy"), by("by_reason"));
    let mut hist = new_histogram();
    let mut notes: Vec<String> = Vec::new();
    for r in images.values() {
        for pair in r["lat_ns"].as_array().into_iter().flatten() {
            hist.saturating_record_n(pair[0].as_u64().unwrap_or(1), pair[1].as_u64().unwrap_or(0));
        }
        for n in r["notes"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            if !notes.iter().any(|x| x == n) {
                notes.push(n.to_string());
            }
        }
    }
    let (ios, p50, p99) = (sum("ios"), hist.value_at_quantile(0.5), hist.value_at_quantile(0.99));
    let (passed_by, not_taken) = (by("passed_through_by"), by("not_taken"));
    for n in &notes {
        eprintln!("smartcon: note: {n}");
    }
    let list = |m: &BTreeMap<String, u64>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    let us = |ns: u64| format!("{:.1} us", ns as f64 / 1000.0);
    let hipri = sum("hipri");
    eprintln!(
        "smartcon run: {ios} I/Os taken in {} process(es) with {} ({}; {}), p50 {}, p99 {}{}; {} calls passed through{}{}",
        images.len(),
        args.strategy,
        if by_strategy.is_empty() { "none".into() } else { list(&by_strategy) },
        if by_reason.is_empty() { "no decisions".into() } else { list(&by_reason) },
        us(p50),
        us(p99),
        if hipri > 0 { format!(", {hipri} asked to be polled (RWF_HIPRI)") } else { String::new() },
        sum("passed_through"),
        if passed_by.is_empty() { String::new() } else { format!(" ({})", list(&passed_by)) },
        match (skip.is_some() || !images.is_empty(), status.signal()) {
            (true, _) => String::new(),
            (false, Some(sig)) => format!("; the program was killed by signal {sig} before it wrote its statistics"),
            (false, None) => "; no process loaded the library".to_string(),
        }
    );
    if !not_taken.is_empty() {
        eprintln!(
            "smartcon run: warning: not taken: {}; that I/O went to the kernel without smartcon's decision (io_uring, memory maps and raw system calls cannot be interposed; libaio is served only on an --emulate image)",
            describe(&not_taken)
        );
    }
    let mut bypassed_model = false;
    let emu_totals = emulate.as_ref().map(|(spec, path)| {
        let (line, t) = sweep::summary(spec, args.virtual_time, &emu_tmp);
        eprintln!("smartcon run: {line}");
        let image = path.display();
        let served = t.reads + t.writes;
        if !t.around_model.is_empty() {
            bypassed_model = true;
            eprintln!(
                "smartcon run: error: part of {}'s I/O to {image} went around the emulated device ({}): its timing is the host's, not {spec}'s. Use read/write/pread/pwrite/preadv(2) or libaio on the image (fio: psync, pvsync, pvsync2, libaio), or `smartcon emulate mount` for a device any I/O path reaches, or the co-simulator for a whole OS",
                program.display(),
                describe(&t.around_model)
            );
        } else if t.image_opens > 0 && served == 0 {
            bypassed_model = true;
            eprintln!(
                "smartcon run: error: {} opened {image} {} time(s) but no read or write of it was served by {spec}",
                program.display(),
                t.image_opens
            );
        } else if t.image_opens == 0 && served == 0 {
            eprintln!(
                "smartcon run: warning: {} never opened {image}: nothing was emulated (is the path the program uses the same file?)",
                program.display()
            );
        }
        t
    });
    let program_exit = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    // A program that succeeded while its I/O to the image went around the model did not
    // measure what was asked: not a success.
    let exit_code = if program_exit == 0 && bypassed_model { EXIT_AROUND_MODEL } else { program_exit };
    if stats_out.is_some() {
        let record = json!({
            "type": "run_result", "command": args.command.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            "strategy": args.strategy, "buffered": args.buffered, "inherit": !args.no_inherit,
            "io_cpus": cpus.map(|c| smartcon_engine::placement::format_cpu_list(&c)), "preloaded": skip.is_none(),
            "exit_code": exit_code, "duration_ns": duration_ns, "processes": images.len(), "ios": ios,
            "bytes": sum("bytes"), "by_strategy": by_strategy, "by_reason": by_reason,
            "passed_through": sum("passed_through"), "passed_through_by": passed_by, "not_taken": not_taken,
            "hipri": hipri, "lat_ns_p50": p50, "lat_ns_p99": p99, "lat_ns_max": hist.max(),
            "notes": notes, "program_exit_code": program_exit,
            "emulated": emu_totals.as_ref().map(|t| json!({
                "reads": t.reads, "writes": t.writes, "bytes": t.bytes, "image_opens": t.image_opens,
                "around_model": t.around_model,
            })),
        });
        // The program ran: a record that cannot be written is reported, and the exit status
        // stays the program's.
        if let Some(out) = stats_out.take() {
            if let Err(e) = out.append(&record.to_string()) {
                eprintln!("smartcon: error: {e}");
            }
        }
    }
    // exit() runs no destructors: what they would remove goes first.
    let _ = std::fs::remove_file(&emu_tmp);
    drop(record);
    drop(stats_out);
    std::process::exit(exit_code)
}

/// Runs the program and waits for it, passing on every SIGINT and SIGTERM smartcon gets
/// (from `kill`, `timeout`, a terminal) to it, so it ends as it would without smartcon and
/// its status is what `run` returns. If smartcon itself is killed, the kernel sends the
/// program SIGTERM (PR_SET_PDEATHSIG), so it is never left running orphaned.
fn run_forwarding(cmd: &mut std::process::Command) -> std::io::Result<std::process::ExitStatus> {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl is async-signal-safe and touches only the child's own attributes; the
    // closure allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let mut child = cmd.spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut forwarded = crate::common::signals_to_forward();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        let received = crate::common::signals_to_forward();
        if received != forwarded {
            forwarded = received;
            // SAFETY: kill(2) on the pid of our own unreaped child: it cannot have been reused.
            unsafe { libc::kill(pid, crate::common::last_signal()) };
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// `--stats FILE`: appended to, one whole record. An absent file is claimed (created
/// `O_EXCL`, removed if the run ends without a record); an existing one must be a regular
/// file, opened `O_APPEND | O_NOFOLLOW` before the program runs.
enum StatsFile {
    New(smartcon_util::paths::OutFile),
    Existing(std::fs::File, PathBuf),
}

impl StatsFile {
    fn open(path: &Path) -> Result<StatsFile> {
        use smartcon_util::paths::{escape, Existing, OutFile, PathError};
        use std::os::unix::fs::OpenOptionsExt;
        let Ok(m) = std::fs::symlink_metadata(path) else {
            return Ok(StatsFile::New(OutFile::claim("--stats", path, Existing::Refuse)?));
        };
        let refuse = |what: &str| PathError::new("--stats", path, what);
        if m.file_type().is_symlink() {
            return Err(refuse("is a symbolic link; smartcon does not write through one").into());
        }
        if !m.is_file() {
            return Err(refuse("exists and is not a regular file").into());
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| anyhow::anyhow!("--stats {}: cannot append: {e}", escape(path)))?;
        Ok(StatsFile::Existing(file, path.to_path_buf()))
    }

    /// One write of the whole line; a failed one is cut back, so no record is left cut.
    fn append(self, line: &str) -> Result<()> {
        match self {
            StatsFile::New(mut out) => {
                out.write_line(line)?;
                out.commit()?;
            }
            StatsFile::Existing(mut file, path) => {
                let before = file.metadata().map(|m| m.len()).unwrap_or(0);
                if let Err(e) = file.write_all(format!("{line}\n").as_bytes()).and_then(|()| file.sync_data()) {
                    let _ = file.set_len(before);
                    anyhow::bail!("--stats {}: cannot append: {e}", smartcon_util::paths::escape(&path));
                }
            }
        }
        Ok(())
    }
}
