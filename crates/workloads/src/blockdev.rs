//! Block devices smartcon creates for a run and removes after it (SmartCon Sec. 7's
//! ramdisks on a machine without NVM):
//!
//! - [`LoopDevice`]: a loop device over a file on tmpfs (/dev/shm). The loop driver
//!   completes every request from a kernel worker thread, so each I/O involves a context
//!   switch. smart's probe measures it `fast`; the paper's ramdisk is very fast (always
//!   busy-waited), and the `paper` strategy declares a loop over tmpfs very fast;
//! - [`ZramDevice`]: a zram device, completed inline in the submitting thread: the very
//!   fast device;
//! - [`LoopFs`]: a loop device as above with an ext4 file system made and mounted on it,
//!   for workloads that need files and directories (postmark, and IOZone on a file as the
//!   paper ran it on its ramdisk).
//!
//! Each value owns exactly the device it created (the loop device is found by its backing
//! file, zram's `hot_add` returns its id) and removes it in `Drop`, which runs on errors,
//! on panics (unwinding) and after Ctrl-C (the CLI's handler only sets a flag, the run
//! unwinds normally). Removal uses system calls only (no child process a terminal's
//! Ctrl-C could kill) with bounded retries, and while anything is held [`held_count`] is
//! non-zero so the CLI does not let a second signal cut it short.
//!
//! Surviving SIGKILL: before anything is created, a record is written under
//! `$SMARTCON_HOME/devices/` (owner pid and start time, backing file, mount point, zram id
//! and size) and removed after the removal succeeded. [`cleanup_recorded`] (`smartcon
//! cleanup`) removes what dead owners' records name, after verifying each thing is still
//! the one recorded: a loop device by its backing file, a mount by its mount point and
//! source, a zram device by its size and by nothing using it. Devices smartcon did not
//! record are never touched. Needs root; the constructors say so otherwise.
//!
//! A record alone never costs a user a file or a device (issue 22): a loop device is
//! detached, and its backing file deleted, only when the file is smartcon's by its own
//! marks: `/dev/shm/smartcon-loop-PID-N.img`, the record's pid in the name, and an owner
//! mark beside it (`smartcon_util::paths::owner_mark_path`) holding the creating run's pid
//! and start time, written before the file. A zram device has no name to mark: its record
//! is written by a helper process in its own process group that does `hot_add`, sets the
//! size and writes the record in one go, so a kill -9 of smartcon cannot fall between the
//! device and its record; cleanup removes it only while it has the recorded size exactly
//! and nothing uses it. Records keep paths as bytes (hex), and an unreadable record is
//! reported and skipped, never a reason to stop.

use std::ffi::OsStr;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use smartcon_engine::error::{Error, ErrorKind};
use smartcon_util::loopmount;

/// The largest device created (RAM-backed: it must fit in memory comfortably).
pub const DEVICE_BYTES_MAX: u64 = smartcon_util::units::RAMDISK_SIZE.max_bytes;

/// Why this process cannot create block devices, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("creating loop and zram devices needs root".into());
    }
    None
}

/// Records of devices this process holds (created or being created, not yet removed).
static HELD: AtomicUsize = AtomicUsize::new(0);

/// How many recorded devices this process holds; async-signal-safe (one atomic load), so a
/// signal handler may read it to decide whether exiting now would leave devices behind.
pub fn held_count() -> usize {
    HELD.load(Ordering::SeqCst)
}

/// Bounded retries of a removal the kernel refuses for a moment (a device still closing).
const REMOVE_TRIES_MAX: u32 = 50;
const REMOVE_RETRY_MS: u64 = 20;

/// Where creation records live: the one folder of `smartcon_util::loopmount`, shared with
/// `emulate mount`'s records.
pub fn records_dir() -> PathBuf {
    loopmount::records_dir(&smartcon_engine::profile::smartcon_home())
}

/// This process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with
/// the pid, it tells a live owner from a reused pid.
fn start_ticks(pid: u32) -> Option<u64> {
    smartcon_util::procfs::process_stat(pid).map(|s| s.start_ticks)
}

/// What one record names. Paths are stored one per line, so any byte but a newline works.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// A loop device (found by this backing file) and the file itself.
    Loop { backing: PathBuf },
    /// A file system mounted at `mount` from the loop device over `backing`.
    Mount { mount: PathBuf, backing: PathBuf },
    /// zram device `id`, of `size_bytes`.
    Zram { id: u32, size_bytes: u64 },
    /// A file system mounted at `mount` from zram device `id`.
    ZramMount { mount: PathBuf, id: u32 },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A path field: `x:HEX` (this build: any bytes, a newline included), or a plain line of
/// older builds' records.
fn path_field(line: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = match line.strip_prefix(b"x:") {
        Some(h) if h.len().is_multiple_of(2) => h
            .chunks(2)
            .map(|c| std::str::from_utf8(c).ok().and_then(|t| u8::from_str_radix(t, 16).ok()))
            .collect::<Option<Vec<u8>>>()?,
        Some(_) => return None,
        None => line.to_vec(),
    };
    (!bytes.is_empty()).then(|| PathBuf::from(OsStr::from_bytes(&bytes)))
}

fn path_text(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!("x:{}", hex(path.as_os_str().as_bytes()))
}

impl Recorded {
    fn to_text(&self) -> String {
        match self {
            Recorded::Loop { backing } => format!("loop\n{}\n", path_text(backing)),
            Recorded::Mount { mount, backing } => format!("mount\n{}\n{}\n", path_text(mount), path_text(backing)),
            Recorded::Zram { id, size_bytes } => format!("zram\n{id}\n{size_bytes}\n"),
            Recorded::ZramMount { mount, id } => format!("zram-mount\n{}\n{id}\n", path_text(mount)),
        }
    }

    fn parse(lines: &[&[u8]]) -> Option<Recorded> {
        fn num<T: std::str::FromStr>(b: &[u8]) -> Option<T> {
            std::str::from_utf8(b).ok()?.parse().ok()
        }
        match lines {
            [b"loop", b, ..] => Some(Recorded::Loop { backing: path_field(b)? }),
            [b"mount", m, b, ..] => Some(Recorded::Mount { mount: path_field(m)?, backing: path_field(b)? }),
            [b"zram", id, size, ..] => Some(Recorded::Zram { id: num(id)?, size_bytes: num(size)? }),
            [b"zram-mount", m, id, ..] => Some(Recorded::ZramMount { mount: path_field(m)?, id: num(id)? }),
            _ => None,
        }
    }
}

/// Whether `backing` is a loop ramdisk's file that run `pid` (started at `start`) made: in
/// /dev/shm, named `smartcon-loop-PID-N.img`, with the run's owner mark beside it.
fn backing_is_ours(backing: &Path, pid: u32, start: u64) -> bool {
    let name = backing.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    backing.parent() == Some(Path::new(LOOP_DIR))
        && name.starts_with(&format!("smartcon-loop-{pid}-"))
        && name.ends_with(".img")
        && std::fs::symlink_metadata(backing).is_ok_and(|m| m.is_file())
        && smartcon_util::paths::owner_mark_is(backing, pid, start)
}

/// Where loop ramdisks' backing files are made.
pub(crate) const LOOP_DIR: &str = "/dev/shm";

impl Recorded {
    /// One line naming what the record holds, paths escaped.
    fn describe(&self) -> String {
        use smartcon_util::paths::escape;
        match self {
            Recorded::Loop { backing } => format!("loop device over {}", escape(backing)),
            Recorded::Mount { mount, .. } => format!("mount {}", escape(mount)),
            Recorded::Zram { id, .. } => format!("/dev/zram{id}"),
            Recorded::ZramMount { mount, .. } => format!("mount {}", escape(mount)),
        }
    }
}

/// Whether a recorded mount directory has the name [`make_and_mount`] gives it.
fn scratch_dir_name_ok(mount: &Path, pid: u32) -> bool {
    let name = mount.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.starts_with("smartcon-") && name.contains(&format!("-{pid}-"))
}

/// A creation record on disk, removed (and [`held_count`] lowered) on drop: hold it in the
/// device value and drop it only after the device is gone.
#[derive(Debug)]
struct Record(PathBuf);

impl Record {
    fn write(what: &Recorded) -> Result<Record, Error> {
        let dir = records_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(ErrorKind::Setup, &dir, e))?;
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let pid = std::process::id();
        let path = dir.join(format!("{pid}-{}.rec", SEQ.fetch_add(1, Ordering::Relaxed)));
        let text = format!("{}{}", owner_text(), what.to_text());
        // Counted before the file exists, so a signal between the two cannot miss it.
        HELD.fetch_add(1, Ordering::SeqCst);
        let record = Record(path);
        let tmp = record.0.with_extension("rec.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &record.0))
            .inspect_err(|_| {
                let _ = std::fs::remove_file(&tmp);
            })
            .map_err(|e| Error::io(ErrorKind::Setup, &record.0, e))?;
        Ok(record)
    }

    /// A path for a record another process writes (the zram helper), counted as held.
    fn reserve() -> Result<Record, Error> {
        let dir = records_dir();
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(ErrorKind::Setup, &dir, e))?;
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let path = dir.join(format!("{}-z{}.rec", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed)));
        HELD.fetch_add(1, Ordering::SeqCst);
        Ok(Record(path))
    }
}

/// The owner lines every record starts with: `owner`, the pid, its start time.
fn owner_text() -> String {
    let pid = std::process::id();
    format!("owner\n{pid}\n{}\n", start_ticks(pid).unwrap_or(0))
}

impl Drop for Record {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Detaches `device` (bounded retries while busy; `smartcon_util::loopmount`).
fn detach_loop(device: &Path) -> Result<(), Error> {
    loopmount::detach_loop(device).map_err(|e| Error::io(ErrorKind::Setup, device, e))
}

/// Detaches every loop device over `backing`, then removes the file.
pub(crate) fn remove_loop_backed_by(backing: &Path) -> Result<(), Error> {
    let mut first_error = None;
    for device in loopmount::loops_backed_by(backing) {
        if let Err(e) = detach_loop(&device) {
            first_error.get_or_insert(e);
        }
    }
    match std::fs::remove_file(backing) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            first_error.get_or_insert(Error::io(ErrorKind::Setup, backing, e));
        }
    }
    if first_error.is_none() {
        // The owner mark goes last: while the file exists, it proves the file is ours.
        let _ = std::fs::remove_file(smartcon_util::paths::owner_mark_path(backing));
    }
    first_error.map_or(Ok(()), Err)
}

/// A recorded mount at `mount` whose source `ours` recognises: unmounted (or, not mounted,
/// its empty directory removed) and true; kept, with a word in the report, and false when
/// something else is mounted there.
fn remove_recorded_mount(mount: &Path, ours: impl Fn(&OsStr) -> bool, report: &mut CleanupReport) -> bool {
    let mounted: Vec<loopmount::Mount> = loopmount::mounts().into_iter().filter(|m| m.point == mount).collect();
    if mounted.iter().any(|m| !ours(&m.source)) {
        report
            .kept
            .push(format!("{}: mounted from a device smartcon did not record", smartcon_util::paths::escape(mount)));
        return false;
    }
    if !mounted.is_empty() {
        unmount_and_remove(mount);
        report.removed.push(format!("mount {}", smartcon_util::paths::escape(mount)));
    } else if std::fs::remove_dir(mount).is_ok() {
        report.removed.push(format!("directory {}", smartcon_util::paths::escape(mount)));
    }
    true
}

/// Unmounts `mount` and removes the empty directory. A busy file system (a file still
/// open) is detached lazily at once, so the loop device can go.
pub(crate) fn unmount_and_remove(mount: &Path) {
    let _ = loopmount::unmount(mount, 1);
    let _ = std::fs::remove_dir(mount);
}

pub(crate) fn zram_reset_and_remove(id: u32) -> Result<(), Error> {
    let reset = write_sys(&format!("/sys/block/zram{id}/reset"), "1");
    let mut removed = write_sys("/sys/class/zram-control/hot_remove", &id.to_string());
    for _ in 0..REMOVE_TRIES_MAX {
        if removed.is_ok() || !Path::new(&format!("/sys/block/zram{id}")).exists() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(REMOVE_RETRY_MS));
        removed = write_sys("/sys/class/zram-control/hot_remove", &id.to_string());
    }
    reset.and(removed)
}

/// What [`cleanup_recorded`] did: each line names one thing.
#[derive(Debug, Default)]
pub struct CleanupReport {
    pub removed: Vec<String>,
    /// Left alone, with the reason (a live owner, a device that is no longer ours).
    pub kept: Vec<String>,
}

/// Removes what the records of dead owners name, mounts first, then loop devices and their
/// files, then zram devices; each is verified to be the one recorded before it is touched.
/// A record whose owner is alive (the same pid and start time) is left alone.
pub fn cleanup_recorded() -> Result<CleanupReport, Error> {
    let dir = records_dir();
    let mut report = CleanupReport::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(Error::io(ErrorKind::Setup, &dir, e)),
    };
    let mut records: Vec<(PathBuf, Recorded, u32, u64)> = Vec::new();
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        if path.extension().is_none_or(|x| x != "rec") {
            continue;
        }
        let shown = smartcon_util::paths::escape(&path);
        // Read as bytes: one unreadable or garbled record is reported and skipped, the
        // others are still cleaned up.
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) => {
                report.kept.push(format!("{shown}: cannot read ({e}); skipped"));
                continue;
            }
        };
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let num = |b: &[u8]| std::str::from_utf8(b).ok().and_then(|t| t.parse::<u64>().ok());
        let owner = match lines.get(..3) {
            Some([b"owner", pid, ticks]) => num(pid).zip(num(ticks)),
            _ => None,
        };
        let (Some((pid, ticks)), Some(what)) = (owner, lines.get(3..).and_then(Recorded::parse)) else {
            report.kept.push(format!("{shown}: not a record smartcon can read; skipped"));
            continue;
        };
        let pid = pid as u32;
        if pid != 0 && start_ticks(pid) == Some(ticks) {
            report.kept.push(format!("{}: its smartcon (pid {pid}) is still running", what.describe()));
            continue;
        }
        records.push((path, what, pid, ticks));
    }
    // Mounts, then loops, then zram: a mount holds its loop device.
    records.sort_by_key(|(_, w, _, _)| match w {
        Recorded::Mount { .. } | Recorded::ZramMount { .. } => 0,
        Recorded::Loop { .. } => 1,
        Recorded::Zram { .. } => 2,
    });
    for (path, what, pid, ticks) in records {
        let done = match &what {
            Recorded::Mount { mount, backing } if !backing_is_ours(backing, pid, ticks) => {
                // Only a mount from a loop device over a file smartcon can prove it made; the
                // empty directory of a run killed before it mounted is still removed.
                let mounted = loopmount::mounts().iter().any(|m| m.point == *mount);
                if !mounted && scratch_dir_name_ok(mount, pid) && std::fs::remove_dir(mount).is_ok() {
                    report.removed.push(format!("directory {}", smartcon_util::paths::escape(mount)));
                    true
                } else if mounted {
                    report.kept.push(format!(
                        "{}: its loop device's file {} is not provably smartcon's; left alone",
                        smartcon_util::paths::escape(mount),
                        smartcon_util::paths::escape(backing)
                    ));
                    false
                } else {
                    true
                }
            }
            Recorded::Mount { mount, backing } => {
                let ours = loopmount::loops_backed_by(backing);
                remove_recorded_mount(mount, |src| ours.iter().any(|d| d.as_os_str() == src), &mut report)
            }
            Recorded::ZramMount { mount, .. } if !scratch_dir_name_ok(mount, pid) => {
                report.kept.push(format!(
                    "{}: not a directory name smartcon gives its mounts; left alone",
                    smartcon_util::paths::escape(mount)
                ));
                false
            }
            Recorded::ZramMount { mount, id } => {
                let node = format!("/dev/zram{id}");
                remove_recorded_mount(mount, |src| src == OsStr::new(&node), &mut report)
            }
            Recorded::Loop { backing } if !backing_is_ours(backing, pid, ticks) => {
                // A stale, copied or forged record: neither the file nor a loop device over
                // it is touched (a mark left by a run killed before the file existed goes).
                if !backing.exists() && backing.parent() == Some(Path::new(LOOP_DIR)) {
                    if smartcon_util::paths::owner_mark_is(backing, pid, ticks) {
                        let _ = std::fs::remove_file(smartcon_util::paths::owner_mark_path(backing));
                    }
                    true
                } else if !backing.exists() {
                    true
                } else {
                    report.kept.push(format!(
                        "{}: not provably smartcon's (its own name in {LOOP_DIR} and the run's mark beside \
                         it); the file and any loop device over it left alone",
                        smartcon_util::paths::escape(backing)
                    ));
                    false
                }
            }
            Recorded::Loop { backing } => {
                let devices = loopmount::loops_backed_by(backing);
                let existed = backing.exists();
                match remove_loop_backed_by(backing) {
                    Ok(()) => {
                        for d in devices {
                            report.removed.push(format!(
                                "loop device {} (over {})",
                                smartcon_util::paths::escape(&d),
                                smartcon_util::paths::escape(backing)
                            ));
                        }
                        if existed {
                            report.removed.push(format!("file {}", smartcon_util::paths::escape(backing)));
                        }
                        let _ = std::fs::remove_file(smartcon_util::paths::owner_mark_path(backing));
                        true
                    }
                    Err(e) => {
                        report.kept.push(format!("{}: {e}", smartcon_util::paths::escape(backing)));
                        false
                    }
                }
            }
            Recorded::Zram { id, size_bytes } => {
                let sys = format!("/sys/block/zram{id}");
                let disksize: Option<u64> =
                    std::fs::read_to_string(format!("{sys}/disksize")).ok().and_then(|t| t.trim().parse().ok());
                let node = format!("/dev/zram{id}");
                let in_use = loopmount::mounts().iter().any(|m| m.source == OsStr::new(&node))
                    || std::fs::read_to_string("/proc/swaps").unwrap_or_default().lines().any(|l| l.starts_with(&node))
                    || std::fs::read_dir(format!("{sys}/holders")).map(|mut d| d.next().is_some()).unwrap_or(false);
                match disksize {
                    None => true,
                    // Exactly the recorded size: a device of size 0 is a new one another
                    // program is setting up (smartcon's helper sizes before it records).
                    Some(size) if size == *size_bytes && !in_use => match zram_reset_and_remove(*id) {
                        Ok(()) => {
                            report.removed.push(format!("zram device {node}"));
                            true
                        }
                        Err(e) => {
                            report.kept.push(format!("{node}: {e}"));
                            false
                        }
                    },
                    Some(size) => {
                        report.kept.push(format!(
                            "{node}: {size} bytes{}, not the {size_bytes} smartcon recorded or in use; left alone",
                            if in_use { " and in use" } else { "" }
                        ));
                        false
                    }
                }
            }
        };
        if done {
            let _ = std::fs::remove_file(&path);
        }
    }
    Ok(report)
}

fn check_size(size_bytes: u64) -> Result<(), Error> {
    smartcon_util::units::RAMDISK_SIZE
        .check(size_bytes)
        .map_err(|e| Error::new(ErrorKind::Usage, format!("device size: {e}")))?;
    if let Some(r) = unavailable_reason() {
        return Err(Error::new(ErrorKind::Setup, r));
    }
    Ok(())
}

/// A loop device over a tmpfs file, removed on drop.
#[derive(Debug)]
pub struct LoopDevice {
    device: PathBuf,
    backing: PathBuf,
    /// Dropped after `Drop::drop` removed the device and the file.
    _record: Record,
}

impl LoopDevice {
    pub fn create(size_bytes: u64) -> Result<LoopDevice, Error> {
        check_size(size_bytes)?;
        let dir = Path::new(LOOP_DIR);
        if !dir.is_dir() {
            return Err(Error::new(
                ErrorKind::Setup,
                "/dev/shm (tmpfs) is missing; the loop ramdisk needs a tmpfs file",
            ));
        }
        let backing = dir.join(format!(
            "smartcon-loop-{}-{}.img",
            std::process::id(),
            smartcon_engine::clock::now_ns() % 1_000_000_007
        ));
        let record = Record::write(&Recorded::Loop { backing: backing.clone() })?;
        // The run's identity beside the file, before the file: cleanup deletes a backing
        // file only with it (a record alone proves nothing).
        let mark = smartcon_util::paths::write_owner_mark(&backing)
            .map_err(|e| Error::io(ErrorKind::Setup, &smartcon_util::paths::owner_mark_path(&backing), e))?;
        let file = std::fs::OpenOptions::new().write(true).create_new(true).open(&backing).map_err(|e| {
            let _ = std::fs::remove_file(&mark);
            Error::io(ErrorKind::Setup, &backing, e)
        })?;
        // A losetup that attached and then failed must not leave its device: detach
        // whatever is over our file, then remove it (the record goes after, on drop).
        let cleanup = |e: Error| {
            let _ = remove_loop_backed_by(&backing);
            e
        };
        // Write the whole file so tmpfs holds real pages (a hole reads as zeros for free,
        // which would make reads cheaper than on the device the loop stands for).
        let chunk = vec![0x5au8; 1 << 20];
        let mut written = 0u64;
        while written < size_bytes {
            let n = chunk.len().min((size_bytes - written) as usize);
            use std::io::Write;
            (&file).write_all(&chunk[..n]).map_err(|e| cleanup(Error::io(ErrorKind::Setup, &backing, e)))?;
            written += n as u64;
        }
        drop(file);
        // losetup in its own process group: a terminal's Ctrl-C must not kill it half-way.
        let device = loopmount::attach_loop(&backing, false)
            .map_err(|e| cleanup(Error::new(ErrorKind::Setup, format!("losetup {}: {e}", backing.display()))))?;
        Ok(LoopDevice { device, backing, _record: record })
    }

    pub fn path(&self) -> &Path {
        &self.device
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        // Detach the devices over our own backing file only (system calls, bounded
        // retries), then remove the file; the record goes after.
        let _ = remove_loop_backed_by(&self.backing);
    }
}

/// Makes a file system of `fstype` (`mkfs.FSTYPE -q -F ARGS DEVICE`) on a device this
/// process created, records the mount (`record` names it) and mounts it on a fresh
/// directory under the temporary directory. On an error nothing is left mounted and the
/// directory is gone; the record goes when the returned one is dropped.
fn make_and_mount(
    device: &Path,
    fstype: &str,
    mkfs_args: &[&str],
    tag: &str,
    record: impl FnOnce(PathBuf) -> Recorded,
) -> Result<(PathBuf, Record), Error> {
    loopmount::mkfs(device, fstype, mkfs_args).map_err(|e| Error::new(ErrorKind::Setup, e.to_string()))?;
    let mount = std::env::temp_dir().join(format!(
        "smartcon-{tag}-{}-{}",
        std::process::id(),
        smartcon_engine::clock::now_ns() % 1_000_000_007
    ));
    let record = Record::write(&record(mount.clone()))?;
    std::fs::create_dir(&mount).map_err(|e| Error::io(ErrorKind::Setup, &mount, e))?;
    if let Err(e) = loopmount::mount(device, &mount, fstype) {
        let _ = std::fs::remove_dir(&mount);
        return Err(Error::new(ErrorKind::Setup, e.to_string()));
    }
    Ok((mount, record))
}

/// A loop ramdisk with a fresh ext4 file system mounted in a temporary directory;
/// unmounted, the directory removed and the loop device detached on drop.
#[derive(Debug)]
pub struct LoopFs {
    mount: PathBuf,
    /// Dropped after `Drop::drop` unmounted the file system.
    _record: Record,
    device: LoopDevice,
}

impl LoopFs {
    pub fn create(size_bytes: u64) -> Result<LoopFs, Error> {
        if size_bytes < 16 << 20 {
            return Err(Error::new(ErrorKind::Usage, "a loop file system needs at least 16 MiB"));
        }
        let device = LoopDevice::create(size_bytes)?;
        let backing = device.backing.clone();
        let (mount, record) = make_and_mount(device.path(), "ext4", &["-E", "nodiscard"], "loopfs", |mount| {
            Recorded::Mount { mount, backing }
        })?;
        Ok(LoopFs { mount, _record: record, device })
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    pub fn device_path(&self) -> &Path {
        self.device.path()
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        unmount_and_remove(&self.mount);
    }
}

/// Run by `sh -c` with $1 the record's temporary name, $2 the record, $3 the size in
/// bytes, $4 the record's owner lines: adds a zram device, sizes it, writes the record, and
/// prints the id; on a failure it removes the device it added (exit 3: no device, 4: size
/// refused, 5: record not written).
const ZRAM_HELPER: &str = r#"id=$(cat /sys/class/zram-control/hot_add) || exit 3
case "$id" in ''|*[!0-9]*) exit 3;; esac
if ! echo "$3" > "/sys/block/zram$id/disksize"; then
  echo "$id" > /sys/class/zram-control/hot_remove; exit 4
fi
if ! { printf '%szram\n%s\n%s\n' "$4" "$id" "$3" > "$1" && mv -f "$1" "$2"; }; then
  rm -f "$1"; echo 1 > "/sys/block/zram$id/reset"; echo "$id" > /sys/class/zram-control/hot_remove; exit 5
fi
echo "$id""#;

/// A zram device from `hot_add`, reset and removed on drop.
#[derive(Debug)]
pub struct ZramDevice {
    id: u32,
    device: PathBuf,
    /// Dropped after `Drop::drop` removed the device.
    _record: Record,
}

fn write_sys(path: &str, value: &str) -> Result<(), Error> {
    std::fs::write(path, value).map_err(|e| Error::io(ErrorKind::Setup, Path::new(path), e))
}

impl ZramDevice {
    pub fn create(size_bytes: u64) -> Result<ZramDevice, Error> {
        check_size(size_bytes)?;
        let control = Path::new("/sys/class/zram-control/hot_add");
        if !control.exists() {
            // The module may not be loaded yet; loading it creates zram0, which we leave alone.
            let _ = Command::new("modprobe").arg("zram").status();
        }
        if !control.exists() {
            return Err(Error::new(
                ErrorKind::Setup,
                format!("zram is unavailable ({} is missing); load it with modprobe zram", control.display()),
            ));
        }
        // hot_add, the size and the record in one helper process in its own process group:
        // a kill -9 of smartcon (or a terminal's Ctrl-C) cannot fall between the device and
        // its record, and the record names a device that already has its size, so cleanup
        // can insist on exactly that size. Paths are arguments, never spliced into the script.
        let record = Record::reserve()?;
        let tmp = record.0.with_extension("rec.tmp");
        let out = Command::new("sh")
            .arg("-c")
            .arg(ZRAM_HELPER)
            .arg("smartcon-zram")
            .arg(&tmp)
            .arg(&record.0)
            .arg(size_bytes.to_string())
            .arg(owner_text())
            .stdin(std::process::Stdio::null())
            .process_group(0)
            .output()
            .map_err(|e| Error::new(ErrorKind::Setup, format!("cannot run sh for zram: {e}")))?;
        if !out.status.success() {
            let why = String::from_utf8_lossy(&out.stderr);
            let why = why.lines().next().unwrap_or("").trim();
            return Err(Error::new(
                ErrorKind::Setup,
                match out.status.code() {
                    Some(3) => format!("zram hot_add failed ({why}); is the zram module loaded (modprobe zram)?"),
                    Some(4) => format!("zram: cannot set a disksize of {size_bytes} bytes ({why})"),
                    _ => format!("zram: cannot record the device ({why})"),
                },
            ));
        }
        let id: u32 = std::str::from_utf8(&out.stdout)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| Error::new(ErrorKind::Setup, "zram hot_add returned no device id"))?;
        let dev = ZramDevice { id, device: PathBuf::from(format!("/dev/zram{id}")), _record: record };
        // From here on `dev` owns the device: an error drops it, which removes it.
        // udev may need a moment to create the node; bounded wait.
        for _ in 0..200 {
            if dev.device.exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if !dev.device.exists() {
            return Err(Error::new(ErrorKind::Setup, format!("{} did not appear", dev.device.display())));
        }
        Ok(dev)
    }

    pub fn path(&self) -> &Path {
        &self.device
    }

    pub fn id(&self) -> u32 {
        self.id
    }
}

impl Drop for ZramDevice {
    fn drop(&mut self) {
        let _ = zram_reset_and_remove(self.id);
    }
}

/// The device under a [`DeviceFs`].
#[derive(Debug)]
pub enum FsDevice {
    /// A loop device over a /dev/shm file (completed by a kernel worker).
    Loop(LoopDevice),
    /// A zram device (completed inline).
    Zram(ZramDevice),
}

/// Which device a [`DeviceFs`] is made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsDeviceKind {
    Loop,
    Zram,
}

/// A loop or zram device created for the run with a fresh file system of a given type
/// (`ext2` for seed 001's study) mounted in a temporary directory; unmounted, the
/// directory removed and the device removed on drop (the mount is recorded, so
/// [`cleanup_recorded`] finds it after SIGKILL).
#[derive(Debug)]
pub struct DeviceFs {
    mount: PathBuf,
    /// Dropped after `Drop::drop` unmounted the file system.
    _record: Record,
    device: FsDevice,
}

impl DeviceFs {
    /// `fstype` is `ext2`, `ext3` or `ext4` (made with 4 KiB blocks).
    pub fn create(kind: FsDeviceKind, size_bytes: u64, fstype: &str) -> Result<DeviceFs, Error> {
        if !["ext2", "ext3", "ext4"].contains(&fstype) {
            return Err(Error::new(ErrorKind::Usage, format!("file system {fstype:?}: use ext2, ext3 or ext4")));
        }
        if size_bytes < 16 << 20 {
            return Err(Error::new(ErrorKind::Usage, "a file system device needs at least 16 MiB"));
        }
        let args = ["-b", "4096", "-E", "nodiscard"];
        let (device, mount, record) = match kind {
            FsDeviceKind::Loop => {
                let d = LoopDevice::create(size_bytes)?;
                let backing = d.backing.clone();
                let (m, r) = make_and_mount(d.path(), fstype, &args, &format!("{fstype}-loop"), |mount| {
                    Recorded::Mount { mount, backing }
                })?;
                (FsDevice::Loop(d), m, r)
            }
            FsDeviceKind::Zram => {
                let d = ZramDevice::create(size_bytes)?;
                let id = d.id();
                let (m, r) = make_and_mount(d.path(), fstype, &args, &format!("{fstype}-zram"), |mount| {
                    Recorded::ZramMount { mount, id }
                })?;
                (FsDevice::Zram(d), m, r)
            }
        };
        Ok(DeviceFs { mount, _record: record, device })
    }

    /// Where the file system is mounted.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// The block device (`/dev/loopN`, `/dev/zramN`).
    pub fn device_path(&self) -> &Path {
        match &self.device {
            FsDevice::Loop(d) => d.path(),
            FsDevice::Zram(d) => d.path(),
        }
    }

    pub fn kind(&self) -> FsDeviceKind {
        match &self.device {
            FsDevice::Loop(_) => FsDeviceKind::Loop,
            FsDevice::Zram(_) => FsDeviceKind::Zram,
        }
    }
}

impl Drop for DeviceFs {
    fn drop(&mut self) {
        unmount_and_remove(&self.mount);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loop_attached(backing: &Path) -> bool {
        let out = Command::new("losetup").arg("-a").output().map(|o| String::from_utf8_lossy(&o.stdout).to_string());
        out.map(|s| s.contains(&backing.display().to_string())).unwrap_or(false)
    }

    #[test]
    fn records_read_back_what_was_written_and_refuse_anything_else() {
        use std::os::unix::ffi::OsStrExt;
        let odd = PathBuf::from(OsStr::from_bytes(b"/tmp/\xff\nx/smartcon-loopfs-1-2"));
        for what in [
            Recorded::Loop { backing: "/dev/shm/smartcon-loop-1-2.img".into() },
            Recorded::Mount { mount: "/tmp/a b/smartcon-loopfs-1-2".into(), backing: "/dev/shm/x.img".into() },
            // Not UTF-8 and a newline: kept byte for byte (a lossy record left a mount).
            Recorded::Mount { mount: odd.clone(), backing: "/dev/shm/x.img".into() },
            Recorded::Zram { id: 3, size_bytes: 16 << 20 },
            Recorded::ZramMount { mount: "/tmp/smartcon-ext2-1-2".into(), id: 4 },
        ] {
            let text = what.to_text();
            assert_eq!(Recorded::parse(&text.as_bytes().split(|&b| b == b'\n').collect::<Vec<_>>()), Some(what));
        }
        // Older builds' plain lines are still read.
        assert_eq!(
            Recorded::parse(&[b"loop", b"/dev/shm/smartcon-loop-1-2.img"]),
            Some(Recorded::Loop { backing: "/dev/shm/smartcon-loop-1-2.img".into() })
        );
        assert_eq!(Recorded::parse(&[b"zram", b"x", b"1"]), None);
        assert_eq!(Recorded::parse(&[b"swap", b"/dev/sda2"]), None);
        assert_eq!(Recorded::parse(&[b"loop", b"x:zz"]), None);
    }

    #[test]
    fn loop_and_zram_leave_nothing_behind_also_on_failure() {
        if let Some(why) = unavailable_reason() {
            eprintln!("skipped: {why}");
            return;
        }
        if Command::new("losetup").arg("--version").output().is_err() {
            eprintln!("skipped: losetup is not installed");
            return;
        }
        // Normal life: created, usable as a target, removed.
        let (dev, backing) = {
            let l = LoopDevice::create(4 << 20).expect("loop device");
            let opts =
                smartcon_emutarget::target::OpenOptions { write: true, destructive: false, created_by_tool: true };
            let t = smartcon_emutarget::target::open(
                &smartcon_emutarget::target::TargetSpec::Path(l.path().to_path_buf()),
                opts,
            )
            .unwrap();
            assert_eq!(t.capacity_bytes(), 4 << 20);
            drop(t);
            (l.path().to_path_buf(), l.backing.clone())
        };
        assert!(!backing.exists(), "backing file removed");
        assert!(!loop_attached(&backing), "{} still attached", dev.display());
        // A run that fails while holding the device still removes it (unwinding drops it).
        let backing2 = std::panic::catch_unwind(|| {
            let l = LoopDevice::create(1 << 20).unwrap();
            let b = l.backing.clone();
            std::panic::panic_any(b);
        })
        .unwrap_err()
        .downcast::<PathBuf>()
        .unwrap();
        assert!(!backing2.exists() && !loop_attached(&backing2));
        // zram: where the module is available.
        match ZramDevice::create(8 << 20) {
            Ok(z) => {
                let id = z.id();
                assert!(Path::new(&format!("/sys/block/zram{id}")).exists());
                drop(z);
                assert!(!Path::new(&format!("/sys/block/zram{id}")).exists(), "zram{id} removed");
            }
            Err(e) => eprintln!("zram part skipped: {e}"),
        }
        // A file system on a loop ramdisk: mounted while held, nothing left after.
        if Command::new("mkfs.ext4").arg("-V").output().is_ok() {
            let (mount, backing) = {
                let fs = LoopFs::create(32 << 20).expect("loop file system");
                std::fs::write(fs.path().join("f"), b"x").unwrap();
                let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
                assert!(mounts.contains(&fs.path().display().to_string()), "mounted");
                (fs.path().to_path_buf(), fs.device.backing.clone())
            };
            let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
            assert!(!mounts.contains(&mount.display().to_string()), "unmounted");
            assert!(!mount.exists() && !backing.exists() && !loop_attached(&backing));
        } else {
            eprintln!("loop file system part skipped: mkfs.ext4 is not installed (e2fsprogs)");
        }
        // ext2 on zram and on a loop device (seed 001's pseudo device): mounted while held,
        // nothing left after.
        if Command::new("mkfs.ext2").arg("-V").output().is_ok() {
            for kind in [FsDeviceKind::Zram, FsDeviceKind::Loop] {
                let (mount, device) = match DeviceFs::create(kind, 24 << 20, "ext2") {
                    Ok(fs) => {
                        std::fs::write(fs.path().join("f"), b"x").unwrap();
                        let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
                        let line = mounts.lines().find(|l| l.contains(&fs.path().display().to_string()));
                        assert!(line.is_some_and(|l| l.contains(" ext2 ")), "{kind:?} mounted as ext2: {line:?}");
                        (fs.path().to_path_buf(), fs.device_path().to_path_buf())
                    }
                    Err(e) if kind == FsDeviceKind::Zram => {
                        eprintln!("ext2 on zram skipped: {e}");
                        continue;
                    }
                    Err(e) => panic!("ext2 on loop: {e}"),
                };
                let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
                assert!(!mounts.contains(&mount.display().to_string()) && !mount.exists(), "{kind:?} unmounted");
                if kind == FsDeviceKind::Zram {
                    let name = device.file_name().unwrap().to_string_lossy().to_string();
                    assert!(!Path::new("/sys/block").join(name).exists(), "{} removed", device.display());
                }
            }
            assert!(DeviceFs::create(FsDeviceKind::Loop, 24 << 20, "xfs").is_err());
        } else {
            eprintln!("ext2 part skipped: mkfs.ext2 is not installed (e2fsprogs)");
        }
        // Bad sizes are refused before anything is created.
        assert!(LoopDevice::create(1000).is_err());
        assert!(ZramDevice::create(DEVICE_BYTES_MAX * 2).is_err());
    }
}
