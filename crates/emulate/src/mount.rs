//! `smartcon emulate mount`: an emulated device as a real block device, for unmodified
//! programs (seed 004's postmark, kernel-source extraction and hdparm runs: scripts/bench-emulate.sh
//! runs them, docs/emulator.md has the figures).
//!
//! The stack, built in this order and torn down in reverse: a FUSE server ([`crate::fuse`])
//! exposing one file served by the device model from RAM, over /dev/fuse or FUSE over
//! io_uring ([`Transport`], [`crate::fuse_session`]); a loop device over that file with
//! direct I/O (`losetup --direct-io=on`), so every block request reaches the model; with
//! `--fs ext4`, an ext4 file system made on it (at memory speed, before the model is
//! switched on) and mounted at DIR. Every step is written to the mount's record
//! ([`crate::records`]) before it is taken, so [`cleanup`] can undo a run killed at any
//! point, touching only what the system confirms is ours (the loop device's backing file
//! is the recorded one, the mount source is the recorded one).
//!
//! The path's own cost is measured once, before the file system is made: 4 KiB O_DIRECT
//! reads and writes on the loop device with the model on and nothing subtracted; the median
//! round trip minus the median time the server held a request, per op, is subtracted from
//! every modelled delay afterwards (the server replies at model - overhead).
//! Requests whose model time is below the overhead cannot be made faster: they are late by
//! the difference and show as such in the report.
//!
//! Foreground: [`run`] returns when the stop flag is set (the CLI's SIGINT/SIGTERM handler).
//! Detached: [`spawn_detached`] starts the same command in its own process group with its
//! output in `$SMARTCON_HOME/devices/server-PID.log`, and [`umount`] sends it SIGTERM, waits,
//! and returns that log (the accuracy report is its end).
//!
//! FUSE over io_uring needs fuse.enable_uring=Y while the FUSE mount is made and INIT
//! answered; the previous value is written to the record first and put back as soon as the
//! queues are registered (the connection keeps io_uring once negotiated), on every error
//! path, and by [`cleanup`] after a SIGKILL.
//!
//! Non-goals: several mounts sharing one device, file systems other than ext4.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smartcon_devemu::EmuSpec;
use smartcon_engine::clock::now_ns;
use smartcon_engine::decision::Strategy;
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_engine::smartport::StrategyChoice;
use smartcon_engine::target::AlignedBuf;

use crate::fuse::{Disk, Served, Shared, FILE_NAME};
use crate::fuse_session::Session;
pub use crate::fuse_session::Transport;
use crate::fuse_uring;
use crate::records::{self, alive, mounted_on, MountRecord};
use crate::stats::quantile;
use smartcon_util::loopmount;

/// The FUSE mount's source name, checked before cleanup unmounts it.
pub const FSNAME: &str = "smartcon-emu";
/// Calibration requests per op (after the warm-up), at least the minimum within the budget.
const CALIBRATION_IOS: usize = 1000;
const CALIBRATION_IOS_MIN: usize = 100;
const CALIBRATION_WARMUP_IOS: u64 = 50;
const CALIBRATION_BUDGET: Duration = Duration::from_secs(2);

/// What to put on the block device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fs {
    Ext4,
    None,
}

#[derive(Debug, Clone)]
pub struct MountOptions {
    pub spec: EmuSpec,
    pub dir: PathBuf,
    pub fs: Fs,
    pub size_bytes: u64,
    /// Serve under SCHED_FIFO (root).
    pub fifo: bool,
    pub transport: Transport,
    /// Mount over a directory that is not empty (or already a mount point), hiding what is
    /// there while the mount lasts; refused without it.
    pub force: bool,
    /// How the server holds a reply until its instant, through the SmartPort of each
    /// serving thread or io_uring queue ([`crate::fuse::Waiter`]); `None` (the default): the
    /// reference wait, which replies at the model's instant.
    pub strategy: Option<StrategyChoice>,
}

/// What the caller prints once the device is usable.
#[derive(Debug, Clone)]
pub struct Ready {
    pub loop_device: PathBuf,
    pub dir: PathBuf,
    pub fs: Fs,
    pub direct_io: bool,
    pub overhead_ns: [u64; 2],
    pub transport: Transport,
}

/// The accuracy report of one mount.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    pub spec: String,
    /// `dev` or `uring` (empty: unknown).
    pub transport: String,
    pub direct_io: bool,
    /// Median path overhead per 4 KiB request [read, write], subtracted from the model.
    pub overhead_ns: [u64; 2],
    pub reads: u64,
    pub writes: u64,
    pub model_ns_mean: f64,
    /// Latency as the program sees it (server time + overhead), mean.
    pub seen_ns_mean: f64,
    pub within_2pct: f64,
    pub lateness_ns_p50: i64,
    pub lateness_ns_p99: i64,
    pub lateness_ns_max: i64,
    /// `--strategy` (`reference`: the default wait).
    pub strategy: String,
    /// Held replies by the strategy their SmartPort waited with ([`Strategy::index`]), and
    /// how many were reference waits.
    pub by_strategy: [u64; Strategy::COUNT],
    pub reference_waits: u64,
    /// CPU time the server's serving threads ran for while modelled.
    pub server_cpu_ns: u64,
}

impl Report {
    pub fn of(spec: &str, direct_io: bool, overhead_ns: [u64; 2], served: &[Served]) -> Report {
        let n = served.len().max(1) as f64;
        let mut late: Vec<i64> = served.iter().map(|s| s.lateness_ns).collect();
        late.sort_unstable();
        let q = |p: f64| if late.is_empty() { 0 } else { late[((late.len() - 1) as f64 * p).round() as usize] };
        Report {
            spec: spec.to_string(),
            transport: String::new(),
            direct_io,
            overhead_ns,
            reads: served.iter().filter(|s| !s.write).count() as u64,
            writes: served.iter().filter(|s| s.write).count() as u64,
            model_ns_mean: served.iter().map(|s| s.model_ns as f64).sum::<f64>() / n,
            seen_ns_mean: served.iter().map(|s| s.model_ns as f64 + s.lateness_ns as f64).sum::<f64>() / n,
            within_2pct: served.iter().filter(|s| s.lateness_ns as f64 <= 0.02 * s.model_ns as f64).count() as f64 / n,
            lateness_ns_p50: q(0.5),
            lateness_ns_p99: q(0.99),
            lateness_ns_max: late.last().copied().unwrap_or(0),
            ..Report::default()
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "accuracy report: {}", self.spec)?;
        let via = match self.transport.as_str() {
            "uring" => "FUSE over io_uring",
            "dev" => "FUSE over /dev/fuse",
            _ => "FUSE",
        };
        writeln!(
            f,
            "  path overhead ({via} + loop, 4 KiB, median): read {:.1} us, write {:.1} us, subtracted{}",
            self.overhead_ns[0] as f64 / 1e3,
            self.overhead_ns[1] as f64 / 1e3,
            if self.direct_io { "" } else { " (loop WITHOUT direct I/O)" }
        )?;
        writeln!(f, "  requests served: {} reads, {} writes", self.reads, self.writes)?;
        let held: Vec<String> = Strategy::ALL
            .iter()
            .filter(|s| self.by_strategy[s.index()] > 0)
            .map(|s| format!("{} {}", self.by_strategy[s.index()], s.name()))
            .collect();
        writeln!(
            f,
            "  replies held through SmartPort (--strategy {}): {}{}; server CPU {:.1} ms",
            if self.strategy.is_empty() { "?" } else { &self.strategy },
            if held.is_empty() { "none".to_string() } else { held.join(", ") },
            if self.reference_waits > 0 {
                format!(" ({} reference waits)", self.reference_waits)
            } else {
                String::new()
            },
            self.server_cpu_ns as f64 / 1e6
        )?;
        writeln!(
            f,
            "  mean latency: model {:.1} us, seen {:.1} us ({:+.2}%)",
            self.model_ns_mean / 1e3,
            self.seen_ns_mean / 1e3,
            if self.model_ns_mean > 0.0 { (self.seen_ns_mean / self.model_ns_mean - 1.0) * 100.0 } else { 0.0 }
        )?;
        write!(
            f,
            "  within 2% of the model: {:.2}%; lateness p50 {:.1} us, p99 {:.1} us, max {:.1} us",
            self.within_2pct * 100.0,
            self.lateness_ns_p50 as f64 / 1e3,
            self.lateness_ns_p99 as f64 / 1e3,
            self.lateness_ns_max as f64 / 1e3
        )
    }
}

fn setup_err(what: impl fmt::Display) -> Error {
    Error::new(ErrorKind::Setup, what.to_string())
}

/// Why this process cannot mount, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("emulate mount needs root (FUSE mount, losetup, mount)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("/dev/fuse is missing (modprobe fuse)".into());
    }
    None
}

/// Everything one mount made, torn down in reverse on drop.
struct Stack {
    record: MountRecord,
    shared: Arc<Shared>,
    session: Option<Session>,
    torn_down: bool,
    /// Dropped after the teardown: until then a second Ctrl-C does not end the process.
    _held: smartcon_util::paths::Held,
    /// The lock on DIR ([`lock_dir`]), released after the teardown.
    _lock: std::fs::File,
}

impl Stack {
    fn save(&self) -> Result<(), Error> {
        self.record.save()
    }

    /// Puts fuse.enable_uring back as the record says it was, if this mount changed it.
    fn restore_enable_uring(&mut self) -> Option<String> {
        let previous = self.record.enable_uring_restore?;
        let problem = fuse_uring::set_enable_uring(previous).err().map(|e| format!("fuse.enable_uring: {e}"));
        if problem.is_none() {
            self.record.enable_uring_restore = None;
            let _ = self.save();
        }
        problem
    }

    fn teardown(&mut self) -> Vec<String> {
        if self.torn_down {
            return Vec::new();
        }
        self.torn_down = true;
        self.shared.set_unmodelled();
        self.record.state = "stopping".into();
        let _ = self.save();
        let mut problems = undo_block(&self.record);
        if let Some(mut s) = self.session.take() {
            problems.extend(s.stop());
        }
        problems.extend(self.restore_enable_uring());
        problems.extend(undo_fuse(&self.record));
        problems.extend(remove_work(&self.record));
        problems
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        for p in self.teardown() {
            eprintln!("emulate mount: teardown: {p}");
        }
    }
}

/// Unmounts the ext4 file system on `dir`; busy (a shell's working directory, a process
/// finishing), it waits up to about 10 s, then detaches it lazily and says so.
fn unmount(dir: &Path) -> Option<String> {
    match loopmount::unmount(dir, UNMOUNT_TRIES_MAX) {
        Ok(loopmount::Unmounted::Done) => None,
        Ok(loopmount::Unmounted::Lazily) => Some(format!("{} was busy; detached lazily", dir.display())),
        Err(e) => Some(e.to_string()),
    }
}

/// Tries of a busy unmount, waiting 50 ms more each time (10.5 s in all).
const UNMOUNT_TRIES_MAX: u32 = 20;

/// Undoes the ext4 mount and the loop device of `record`, each only if the system confirms
/// it is the recorded one. Returns what could not be undone.
fn undo_block(record: &MountRecord) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(backing) = ours(record) else {
        if record.backing.is_some() || record.loop_device.is_some() {
            problems.push(format!(
                "its backing file is not this mount's own ({}/fuse/{FILE_NAME}); loop device and mounts left alone",
                smartcon_util::paths::escape(&record.work)
            ));
        }
        return problems;
    };
    if record.ext4_mounted {
        if let (Some(m), Some(dev)) = (mounted_on(&record.dir), &record.loop_device) {
            // Only the recorded loop device, and only while it is over this mount's file.
            let dev_ours = loopmount::loop_backing(dev).is_some_and(|b| b == backing);
            if m.fstype == "ext4" && Path::new(&m.source) == dev.as_path() && dev_ours {
                problems.extend(unmount(&record.dir));
            }
        }
    }
    {
        // Any loop device over our file (the recorded one, or one attached just before a
        // kill could record it).
        for dev in loopmount::loops_backed_by(&backing) {
            if let Err(e) = loopmount::detach_loop(&dev) {
                problems.push(format!("detach {}: {e}", dev.display()));
            }
        }
    }
    problems
}

/// The FUSE file of `record`'s mount, if the record names the one smartcon gives it:
/// `WORK/fuse/FILE_NAME`, WORK being `m-PID-N` in a records folder, PID the record's server.
/// A record that names anything else (stale, copied, forged) gets no loop device detached
/// and no mount unmounted (issue 22).
fn ours(record: &MountRecord) -> Option<PathBuf> {
    let fuse = record.work.join("fuse");
    let backing = fuse.join(FILE_NAME);
    let name = record.work.file_name()?.to_string_lossy().into_owned();
    let in_records = record.work.parent().is_some_and(|p| records::dirs_to_read().iter().any(|d| d == p));
    let named = name.starts_with(&format!("m-{}-", record.pid));
    let consistent =
        record.backing.as_ref().is_none_or(|b| *b == backing) && record.fuse_mount.as_ref().is_none_or(|f| *f == fuse);
    (in_records && named && consistent && record.backing.is_some()).then_some(backing)
}

/// Unmounts the recorded FUSE mount if it is still ours (a dead server's mount; a live
/// session unmounts its own).
fn undo_fuse(record: &MountRecord) -> Vec<String> {
    let mut problems = Vec::new();
    if let (Some(fm), Some(_)) = (&record.fuse_mount, ours(record)) {
        if let Some(m) = mounted_on(fm) {
            if m.source == FSNAME && m.fstype.starts_with("fuse") {
                // Its server is gone: detached at once (no tries), as nothing can use it.
                if let Err(e) = loopmount::unmount(fm, 0) {
                    problems.push(e.to_string());
                }
            }
        }
    }
    problems
}

fn remove_work(record: &MountRecord) -> Vec<String> {
    let mut problems = Vec::new();
    if record.enable_uring_restore.is_some() {
        problems.push(format!("{} could not be restored; record kept", fuse_uring::ENABLE_URING_PARAM));
        return problems;
    }
    if let Some(fm) = &record.fuse_mount {
        if mounted_on(fm).is_some_and(|m| m.source == FSNAME) {
            problems.push(format!("{} is still mounted; record kept", fm.display()));
            return problems;
        }
        let _ = std::fs::remove_dir(fm);
    }
    let _ = std::fs::remove_dir(&record.work);
    record.remove();
    problems
}

/// Measures the path's overhead per 4 KiB O_DIRECT request [read, write] on `dev`, in the
/// regime the program will see: the model is on (with nothing subtracted), so each request is
/// held for its model time as it will be later, and the overhead is the median round trip
/// minus the median time the server held the requests. Measured with a zero-latency device
/// instead, back-to-back requests find every CPU awake and the path looks cheaper than it is
/// after a millisecond's wait (idle CPUs wake slowly on a VM): fio then saw +6% at the median.
fn calibrate(dev: &Path, size_bytes: u64, shared: &Shared) -> Result<[u64; 2], Error> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(dev)
        .map_err(|e| Error::io(ErrorKind::Setup, dev, e))?;
    let mut buf = AlignedBuf::new(4096);
    let blocks = (size_bytes / 4096).min(16 << 10);
    let mut out = [0u64; 2];
    shared.set_modelled([0, 0]);
    for (i, slot) in out.iter_mut().enumerate() {
        let mut samples = Vec::with_capacity(CALIBRATION_IOS);
        let start = Instant::now();
        let first_served = shared.served().len();
        for k in 0..CALIBRATION_IOS as u64 + CALIBRATION_WARMUP_IOS {
            // A fixed stride over the first 64 MiB: offsets vary, nothing is random.
            let offset = (k * 7919 % blocks) * 4096;
            let t0 = now_ns();
            let r = if i == 0 {
                std::os::unix::fs::FileExt::read_at(&file, buf.as_mut_slice(), offset)
            } else {
                // The store still reads as zeros: writing zeros changes nothing.
                buf.as_mut_slice().fill(0);
                std::os::unix::fs::FileExt::write_at(&file, buf.as_mut_slice(), offset)
            };
            r.map_err(|e| Error::io(ErrorKind::Setup, dev, e))?;
            if k >= CALIBRATION_WARMUP_IOS {
                samples.push(now_ns() - t0);
            }
            // A slow model (a disk) gets a time budget rather than a request count.
            if samples.len() >= CALIBRATION_IOS_MIN && start.elapsed() > CALIBRATION_BUDGET {
                break;
            }
        }
        let served = shared.served();
        let mut held: Vec<u64> = served[first_served.min(served.len())..]
            .iter()
            .filter(|s| s.write == (i == 1))
            .skip(CALIBRATION_WARMUP_IOS as usize)
            .map(|s| (s.model_ns as i64 + s.lateness_ns).max(0) as u64)
            .collect();
        *slot = quantile(&mut samples, 0.5).saturating_sub(quantile(&mut held, 0.5));
    }
    shared.set_unmodelled();
    Ok(out)
}

fn check_options(opts: &MountOptions) -> Result<PathBuf, Error> {
    if let Some(r) = unavailable_reason() {
        return Err(setup_err(r));
    }
    if opts.transport == Transport::Uring {
        if let Some(r) = fuse_uring::unavailable_reason() {
            return Err(setup_err(format!("--transport uring: {r}")));
        }
    }
    if !(1 << 20..=smartcon_devemu::preset::CAPACITY_BYTES_MAX).contains(&opts.size_bytes)
        || !opts.size_bytes.is_multiple_of(4096)
    {
        return Err(Error::new(
            ErrorKind::Usage,
            "--size must be a multiple of 4 KiB from 1 MiB to the emulator's limit",
        ));
    }
    let dir = opts.dir.canonicalize().map_err(|e| Error::io(ErrorKind::Usage, &opts.dir, e))?;
    if !dir.is_dir() {
        return Err(Error::new(ErrorKind::Usage, format!("{} is not a directory", dir.display())));
    }
    Ok(dir)
}

/// Takes the lock on `dir` (an exclusive `flock` on the directory itself, held until the
/// teardown), then checks, under it, that no mount is recorded for `dir` and that `dir` is an
/// empty directory that is not a mount point (unless `force`). Two mounts started on one
/// directory at once: one gets the lock, the other this one-line refusal, before either
/// creates anything. (Once DIR is mounted over, a new open finds the mounted root, whose
/// lock is free; the record, saved under the lock before anything is mounted, refuses then.)
fn lock_dir(dir: &Path, fs: Fs, force: bool) -> Result<std::fs::File, Error> {
    use std::os::fd::AsRawFd;
    let shown = smartcon_util::paths::escape(dir);
    let lock = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| Error::new(ErrorKind::Usage, format!("{shown}: cannot open: {e}")))?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("{shown}: another emulate mount is starting on it; choose another directory"),
        ));
    }
    if records::list().iter().any(|(_, r)| r.dir == dir) {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("{shown} already has a recorded emulated mount (emulate umount or emulate cleanup)"),
        ));
    }
    if fs == Fs::Ext4 && !force {
        if mounted_on(dir).is_some() {
            return Err(Error::new(
                ErrorKind::Usage,
                format!("{shown} is a mount point already; mounting over it hides it (--force to do so anyway)"),
            ));
        }
        let empty = std::fs::read_dir(dir)
            .map_err(|e| Error::new(ErrorKind::Usage, format!("{shown}: cannot list: {e}")))?
            .next()
            .is_none();
        if !empty {
            return Err(Error::new(
                ErrorKind::Usage,
                format!(
                    "{shown} is not empty; the mount would hide its files: choose an empty directory (--force to \
                     mount over them anyway)"
                ),
            ));
        }
    }
    Ok(lock)
}

/// Mounts and starts the FUSE server on `work/fuse`, recording each step first.
fn start_fuse(stack: &mut Stack, opts: &MountOptions) -> Result<(), Error> {
    let fuse_mount = stack.record.work.join("fuse");
    std::fs::create_dir(&fuse_mount).map_err(|e| Error::io(ErrorKind::Setup, &fuse_mount, e))?;
    stack.record.fuse_mount = Some(fuse_mount.clone());
    stack.record.backing = Some(fuse_mount.join(FILE_NAME));
    stack.save()?;
    let uring = opts.transport == Transport::Uring;
    if uring && fuse_uring::enable_uring() == Some(false) {
        // Recorded before it is changed, so that cleanup puts it back after a SIGKILL.
        stack.record.enable_uring_restore = Some(false);
        stack.save()?;
        fuse_uring::set_enable_uring(true)?;
    }
    // One thread (or ring entry) per channel can wait while others take new requests.
    let threads = (opts.spec.model.channels as usize * 2 + 1).min(16);
    let disk = Arc::new(Disk::new(stack.shared.clone(), uring));
    let session = Session::mount(disk, &fuse_mount, FSNAME, opts.transport, threads, threads);
    // The connection keeps io_uring once INIT took it: the switch goes back at once.
    if let Some(p) = stack.restore_enable_uring() {
        return Err(setup_err(p));
    }
    stack.session = Some(session?);
    Ok(())
}

/// Attaches a direct-I/O loop device over the FUSE file: (device, direct I/O confirmed).
fn attach_loop(stack: &mut Stack) -> Result<(PathBuf, bool), Error> {
    let backing = stack.record.backing.clone().unwrap_or_default();
    let dev = loopmount::attach_loop(&backing, true).map_err(setup_err)?;
    stack.record.loop_device = Some(dev.clone());
    stack.save()?;
    let direct_io = loopmount::loop_direct_io(&dev);
    Ok((dev, direct_io))
}

/// Runs the mount in the foreground until `stop` is set; calls `on_ready` once usable.
pub fn run(opts: &MountOptions, stop: &AtomicBool, on_ready: impl FnOnce(&Ready)) -> Result<Report, Error> {
    let dir = check_options(opts)?;
    let lock = lock_dir(&dir, opts.fs, opts.force)?;
    let mounts = records::mounts_dir();
    std::fs::create_dir_all(&mounts).map_err(|e| Error::io(ErrorKind::Setup, &mounts, e))?;
    let work = mounts.join(format!("m-{}-{}", std::process::id(), now_ns() % 1_000_000_007));
    let shared = Shared::new(&opts.spec, opts.size_bytes, opts.fifo, opts.strategy)?;
    // The serving threads each make their own port; one made here first names a bad option
    // (a deciding strategy without a System Monitor, a broken stored profile) before
    // anything is created.
    drop(shared.waiter()?);
    let mut stack = Stack {
        record: MountRecord {
            pid: std::process::id(),
            spec: opts.spec.label.clone(),
            dir: dir.clone(),
            work: work.clone(),
            state: "starting".into(),
            transport: opts.transport.name().into(),
            ..MountRecord::default()
        },
        shared: shared.clone(),
        session: None,
        torn_down: false,
        _held: smartcon_util::paths::Held::new(),
        _lock: lock,
    };
    // The record before the working directory: a kill -9 in between leaves a record whose
    // cleanup finds nothing, never a directory without a record.
    stack.save()?;
    std::fs::create_dir(&work).map_err(|e| Error::io(ErrorKind::Setup, &work, e))?;
    start_fuse(&mut stack, opts)?;
    let (dev, direct_io) = attach_loop(&mut stack)?;

    let overhead_ns = calibrate(&dev, opts.size_bytes, &shared)?;
    if opts.fs == Fs::Ext4 {
        // Every table and the journal written now, at memory speed: no lazy init later
        // competes with the program for the modelled device.
        loopmount::mkfs(&dev, "ext4", &["-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"])
            .map_err(setup_err)?;
        stack.record.ext4_mounted = true;
        stack.save()?;
        loopmount::mount(&dev, &dir, "ext4").map_err(setup_err)?;
    }
    shared.set_modelled(overhead_ns);
    let cpu_at_start_ns = shared.server_cpu_ns();
    stack.record.state = "ready".into();
    stack.save()?;
    on_ready(&Ready { loop_device: dev, dir, fs: opts.fs, direct_io, overhead_ns, transport: opts.transport });

    while !stop.load(Ordering::Relaxed) && stack.session.as_ref().is_some_and(|s| s.is_alive()) {
        std::thread::sleep(Duration::from_millis(50));
    }
    // The report covers what programs did, not the teardown.
    shared.set_unmodelled();
    let mut report = Report::of(&opts.spec.label, direct_io, overhead_ns, &shared.served());
    report.transport = opts.transport.name().into();
    report.strategy = shared.strategy_name().into();
    (report.by_strategy, report.reference_waits) = shared.waits();
    report.server_cpu_ns = shared.server_cpu_ns().saturating_sub(cpu_at_start_ns);
    let problems = stack.teardown();
    if !problems.is_empty() {
        return Err(setup_err(format!("teardown: {}", problems.join("; "))));
    }
    Ok(report)
}

/// A detached server's log, beside its record (`record` is the record file; a record of
/// an older build's folder has its log there too).
fn log_path(record: &Path, pid: u32) -> PathBuf {
    record.with_file_name(format!("server-{pid}.log"))
}

/// Starts `exe args` (the same mount without `--detach`) in its own process group with its
/// output in a log, and waits until its record says ready. Returns the record and the log.
pub fn spawn_detached(exe: &Path, args: &[OsString]) -> Result<(MountRecord, String), Error> {
    let mounts = records::mounts_dir();
    std::fs::create_dir_all(&mounts).map_err(|e| Error::io(ErrorKind::Setup, &mounts, e))?;
    let tmp = mounts.join(format!("server-starting-{}.log", now_ns()));
    let log = std::fs::File::create(&tmp).map_err(|e| Error::io(ErrorKind::Setup, &tmp, e))?;
    let err = log.try_clone().map_err(|e| Error::io(ErrorKind::Setup, &tmp, e))?;
    let mut child = Command::new(exe)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err)
        // Its own process group: the terminal's Ctrl-C does not reach it.
        .process_group(0)
        .spawn()
        .map_err(|e| setup_err(format!("cannot start {}: {e}", exe.display())))?;
    let pid = child.id();
    let log = mounts.join(format!("server-{pid}.log"));
    std::fs::rename(&tmp, &log).map_err(|e| Error::io(ErrorKind::Setup, &log, e))?;
    let start = Instant::now();
    loop {
        if let Some((_, r)) = records::list().into_iter().find(|(_, r)| r.pid == pid && r.state == "ready") {
            return Ok((r, std::fs::read_to_string(&log).unwrap_or_default()));
        }
        if let Ok(Some(status)) = child.try_wait() {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            let _ = std::fs::remove_file(&log);
            return Err(setup_err(format!("the mount server exited ({status}): {}", text.trim())));
        }
        if start.elapsed() > Duration::from_secs(300) {
            return Err(setup_err(format!(
                "the mount server (pid {pid}) is not ready after 300 s; see {}",
                log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Ends the mount recorded for `dir`: SIGTERM to a live server (waits for its teardown), or
/// [`cleanup`] of a dead one's leftovers. Returns the server's output (ending in its report).
pub fn umount(dir: &Path) -> Result<String, Error> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Some((path, record)) = records::list().into_iter().find(|(_, r)| r.dir == dir) else {
        return Err(Error::new(ErrorKind::Usage, format!("no emulated mount is recorded for {}", dir.display())));
    };
    if !alive(record.pid) {
        let problems = cleanup_one(&path, &record);
        return if problems.is_empty() {
            Ok(format!("the server (pid {}) had died; its leftovers were removed", record.pid))
        } else {
            Err(setup_err(problems.join("; ")))
        };
    }
    // SAFETY: kill with a pid read from our own record and a valid signal number.
    unsafe { libc::kill(record.pid as libc::pid_t, libc::SIGTERM) };
    let start = Instant::now();
    while alive(record.pid) {
        if start.elapsed() > Duration::from_secs(120) {
            return Err(setup_err(format!("the server (pid {}) has not exited 120 s after SIGTERM", record.pid)));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = log_path(&path, record.pid);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    if path.exists() {
        let problems = cleanup_one(&path, &record);
        if !problems.is_empty() {
            return Err(setup_err(problems.join("; ")));
        }
    }
    Ok(text)
}

fn cleanup_one(path: &Path, record: &MountRecord) -> Vec<String> {
    if ours(record).is_none() && (record.backing.is_some() || record.loop_device.is_some()) {
        // Not what smartcon makes: nothing it names is touched, and the record stays.
        return undo_block(record);
    }
    let mut problems = undo_block(record);
    problems.extend(undo_fuse(record));
    let mut record = record.clone();
    if let Some(previous) = record.enable_uring_restore {
        match fuse_uring::set_enable_uring(previous) {
            Ok(()) => record.enable_uring_restore = None,
            Err(e) => problems.push(format!("fuse.enable_uring: {e}")),
        }
    }
    problems.extend(remove_work(&record));
    let _ = std::fs::remove_file(log_path(path, record.pid));
    problems
}

/// Removes what killed runs left: every record whose server is dead. Returns one line per
/// record (what was done, or what is still running).
pub fn cleanup() -> Vec<String> {
    let mut out: Vec<String> = records::unreadable()
        .iter()
        .map(|p| format!("{}: not a mount record smartcon can read; skipped", smartcon_util::paths::escape(p)))
        .collect();
    for (path, record) in records::list() {
        if alive(record.pid) {
            out.push(format!(
                "{}: server pid {} is running; use smartcon emulate umount {}",
                record.dir.display(),
                record.pid,
                record.dir.display()
            ));
            continue;
        }
        let problems = cleanup_one(&path, &record);
        if problems.is_empty() {
            out.push(format!("{}: removed what pid {} left ({})", record.dir.display(), record.pid, record.spec));
        } else {
            out.push(format!("{}: {}", record.dir.display(), problems.join("; ")));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_counts_lateness_against_the_model() {
        let s = |write, model_ns, lateness_ns| Served { write, model_ns, lateness_ns };
        let served = [s(true, 1_000_000, 10_000), s(true, 1_000_000, 30_000), s(false, 10_000, -100)];
        let r = Report::of("emu:sdcard", true, [20_000, 30_000], &served);
        assert_eq!((r.reads, r.writes), (1, 2));
        // 10 us late on 1 ms is within 2%, 30 us is not; early is within.
        assert!((r.within_2pct - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(r.lateness_ns_p50, 10_000);
        assert_eq!(r.lateness_ns_p99, 30_000);
        assert_eq!(r.lateness_ns_max, 30_000);
        assert!(r.seen_ns_mean > r.model_ns_mean);
        assert!(r.to_string().contains("within 2% of the model: 66.67%"));
        assert_eq!(Report::of("x", true, [0, 0], &[]).within_2pct, 0.0);
    }
}
