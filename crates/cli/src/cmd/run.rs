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
use serde_json::json;
use smartcon_emulate::sweep;
use smartcon_engine::stats::new_histogram;
use smartcon_preload_contract::env::{PreloadEnv, LIBRARY_FILE, STRATEGY_NAMES};
use smartcon_preload_contract::launch::{self, Launch};
use smartcon_preload_contract::record::{parse_lines, ProcessRecord};

use crate::engine_setup::parse_placement;

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
    launch::library_in(dir).with_context(|| {
        format!("{LIBRARY_FILE} is not beside {}; build it with `cargo build --release` (the workspace builds it; alone: `cargo build --release -p smartcon-preload`)", exe.display())
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
    elf_unloadable(&bytes)
}

/// The machine this library is built for, as ELF names it.
const EM_HOST: u16 = if cfg!(target_arch = "aarch64") { libc::EM_AARCH64 } else { libc::EM_X86_64 };

/// Why the library cannot load into the ELF file `bytes`, if it cannot: another class or
/// machine, or no program interpreter (`PT_INTERP`: statically linked). Not an ELF file
/// (a script): `None`, the loader judges its interpreter. The headers are read at the
/// offsets of the ELF structures' own fields (`libc::Elf64_Ehdr`, `Elf64_Phdr`), little
/// endian as both machines this builds for are.
fn elf_unloadable(bytes: &[u8]) -> Option<String> {
    use libc::{Elf64_Ehdr, Elf64_Phdr};
    use std::mem::{offset_of, size_of};
    let magic = [libc::ELFMAG0, libc::ELFMAG1, libc::ELFMAG2, libc::ELFMAG3];
    if bytes.len() < size_of::<Elf64_Ehdr>() || bytes[..libc::SELFMAG] != magic {
        return None;
    }
    let u16_at = |o: usize| bytes.get(o..o + 2).map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    let u32_at = |o: usize| bytes.get(o..o + 4).and_then(|b| b.try_into().ok()).map_or(0, u32::from_le_bytes);
    let u64_at = |o: usize| bytes.get(o..o + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
    if bytes[libc::EI_CLASS] != libc::ELFCLASS64 || u16_at(offset_of!(Elf64_Ehdr, e_machine)) != EM_HOST {
        return Some("it is built for another architecture than this library".into());
    }
    let phoff = u64_at(offset_of!(Elf64_Ehdr, e_phoff)) as usize;
    let phentsize = u16_at(offset_of!(Elf64_Ehdr, e_phentsize)) as usize;
    let phnum = u16_at(offset_of!(Elf64_Ehdr, e_phnum)) as usize;
    let interp = (0..phnum).any(|i| {
        let o = phoff.saturating_add(i.saturating_mul(phentsize));
        u32_at(o.saturating_add(offset_of!(Elf64_Phdr, p_type))) == libc::PT_INTERP
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
    if !STRATEGY_NAMES.contains(&args.strategy.as_str()) {
        bail!("unknown strategy {:?} for run; use one of {}", args.strategy, STRATEGY_NAMES.join(", "));
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
        let env = PreloadEnv {
            strategy: Some(args.strategy.clone()),
            stats: Some(stats_tmp.clone()),
            buffered: args.buffered,
            inherit: !args.no_inherit,
            emulate: emulate.as_ref().map(|(spec, path)| sweep::emulate_env(spec, path, args.virtual_time, &emu_tmp)),
        };
        Launch { library: library.clone(), env }.apply(&mut cmd);
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
    let mut images: BTreeMap<String, ProcessRecord> = BTreeMap::new();
    for rec in parse_lines::<ProcessRecord>(&text) {
        images.insert(rec.image.clone(), rec);
    }
    let sum = |f: fn(&ProcessRecord) -> u64| images.values().map(f).sum::<u64>();
    let by = |f: fn(&ProcessRecord) -> &BTreeMap<String, u64>| {
        let mut m: BTreeMap<String, u64> = BTreeMap::new();
        for (k, v) in images.values().flat_map(f) {
            *m.entry(k.clone()).or_default() += v;
        }
        m
    };
    let (by_strategy, by_reason) = (by(|r| &r.by_strategy), by(|r| &r.by_reason));
    let mut hist = new_histogram();
    let mut notes: Vec<String> = Vec::new();
    for r in images.values() {
        for [value_ns, count] in &r.lat_ns {
            hist.saturating_record_n(*value_ns, *count);
        }
        for n in &r.notes {
            if !notes.contains(n) {
                notes.push(n.clone());
            }
        }
    }
    let (ios, p50, p99) = (sum(|r| r.ios), hist.value_at_quantile(0.5), hist.value_at_quantile(0.99));
    // The program's processes are the images that did I/O the library saw (taken, passed
    // through or named); a launcher's helpers (a pyenv shim runs dozens of shells and tools
    // before the interpreter) loaded the library too, but are only counted beside them.
    let active = |r: &ProcessRecord| r.ios > 0 || r.passed_through > 0 || r.hipri > 0 || !r.not_taken.is_empty();
    let processes = images.values().filter(|r| active(r)).count();
    let (passed_by, not_taken) = (by(|r| &r.passed_through_by), by(|r| &r.not_taken));
    for n in &notes {
        eprintln!("smartcon: note: {n}");
    }
    let list = |m: &BTreeMap<String, u64>| m.iter().map(|(k, v)| format!("{k} {v}")).collect::<Vec<_>>().join(", ");
    let us = |ns: u64| format!("{:.1} us", ns as f64 / 1000.0);
    let hipri = sum(|r| r.hipri);
    eprintln!(
        "smartcon run: {ios} I/Os taken in {processes} process(es) with {} ({}; {}), p50 {}, p99 {}{}; {} calls passed through{}{}{}",
        args.strategy,
        if by_strategy.is_empty() { "none".into() } else { list(&by_strategy) },
        if by_reason.is_empty() { "no decisions".into() } else { list(&by_reason) },
        us(p50),
        us(p99),
        if hipri > 0 { format!(", {hipri} asked to be polled (RWF_HIPRI)") } else { String::new() },
        sum(|r| r.passed_through),
        if passed_by.is_empty() { String::new() } else { format!(" ({})", list(&passed_by)) },
        match (skip.is_some() || !images.is_empty(), status.signal()) {
            (true, _) => String::new(),
            (false, Some(sig)) => format!("; the program was killed by signal {sig} before it wrote its statistics"),
            (false, None) => "; no process loaded the library".to_string(),
        },
        match images.len() - processes {
            0 => String::new(),
            idle => format!("; {idle} more process(es) loaded the library and did no I/O it saw (a launcher's or shell's helpers)"),
        }
    );
    if !not_taken.is_empty() {
        eprintln!(
            "smartcon run: warning: not taken: {}; that I/O went to the kernel without smartcon's decision (io_uring, memory maps and raw system calls cannot be interposed; libaio's wait is taken only for O_DIRECT reads and writes without an eventfd and with aio_rw_flags 0 or RWF_HIPRI)",
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
            "exit_code": exit_code, "duration_ns": duration_ns, "processes": processes, "processes_loaded": images.len(), "ios": ios,
            "bytes": sum(|r| r.bytes), "by_strategy": by_strategy, "by_reason": by_reason,
            "passed_through": sum(|r| r.passed_through), "passed_through_by": passed_by, "not_taken": not_taken,
            "hipri": hipri, "lat_ns_p50": p50, "lat_ns_p99": p99, "lat_ns_max": hist.max(),
            "notes": notes, "program_exit_code": program_exit,
            "emulated": emu_totals.as_ref().map(|t| json!({
                "reads": t.reads, "writes": t.writes, "bytes": t.bytes, "image_opens": t.image_opens,
                "around_model": t.around_model, "by_strategy": t.by_strategy,
                "device_ns": t.device_ns, "late_ns_sum": t.lateness.sum_ns, "late_ns_max": t.lateness.max_ns,
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

/// Runs the program (the contract's launcher) and waits for it, passing on every SIGINT
/// and SIGTERM smartcon gets (from `kill`, `timeout`, a terminal) to it, so it ends as it
/// would without smartcon and its status is what `run` returns. If smartcon itself is
/// killed, the kernel sends the program SIGTERM, so it is never left running orphaned.
fn run_forwarding(cmd: &mut std::process::Command) -> std::io::Result<std::process::ExitStatus> {
    let mut forwarded = crate::common::signals_to_forward();
    launch::run(cmd, || {
        let received = crate::common::signals_to_forward();
        (received != forwarded).then(|| {
            forwarded = received;
            crate::common::last_signal()
        })
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use libc::{Elf64_Ehdr, Elf64_Phdr};
    use std::mem::offset_of;

    /// A dynamically linked program of this machine, or None (then the test says it skips).
    fn dynamic_program() -> Option<Vec<u8>> {
        let bytes = std::fs::read(resolve(Path::new("true"))?).ok()?;
        elf_unloadable(&bytes).is_none().then_some(bytes)
    }

    #[test]
    fn a_static_or_foreign_elf_is_named_and_a_script_is_left_to_the_loader() {
        assert_eq!(elf_unloadable(b"#!/bin/sh\necho hi\n"), None);
        assert_eq!(elf_unloadable(b"\x7fELF"), None, "too short for a header: not judged");
        let Some(dynamic) = dynamic_program() else {
            eprintln!("skipped: no dynamically linked `true` on PATH");
            return;
        };
        // The same program with its interpreter's header made PT_NULL: statically linked.
        let mut stat = dynamic.clone();
        let u = |b: &[u8], o: usize, n: usize| b[o..o + n].iter().rev().fold(0u64, |a, &x| a << 8 | x as u64);
        let phoff = u(&stat, offset_of!(Elf64_Ehdr, e_phoff), 8) as usize;
        let phentsize = u(&stat, offset_of!(Elf64_Ehdr, e_phentsize), 2) as usize;
        let phnum = u(&stat, offset_of!(Elf64_Ehdr, e_phnum), 2) as usize;
        let mut found = 0;
        for i in 0..phnum {
            let o = phoff + i * phentsize + offset_of!(Elf64_Phdr, p_type);
            if u(&stat, o, 4) == libc::PT_INTERP as u64 {
                stat[o..o + 4].copy_from_slice(&libc::PT_NULL.to_le_bytes());
                found += 1;
            }
        }
        assert_eq!(found, 1, "a dynamic program has one PT_INTERP");
        assert!(elf_unloadable(&stat).is_some_and(|w| w.contains("statically linked")));
        // Another machine.
        let mut foreign = dynamic.clone();
        let other = if EM_HOST == libc::EM_X86_64 { libc::EM_AARCH64 } else { libc::EM_X86_64 };
        let o = offset_of!(Elf64_Ehdr, e_machine);
        foreign[o..o + 2].copy_from_slice(&other.to_le_bytes());
        assert!(elf_unloadable(&foreign).is_some_and(|w| w.contains("another architecture")));
    }
}
