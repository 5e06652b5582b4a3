//! Loop devices and mounts, handled in one place: the evaluation's ramdisks
//! (`smartcon_workloads::blockdev`) and `emulate mount`'s stack (`smartcon_emulate::mount`)
//! both attach, find, detach, mount and unmount through these functions, and both write
//! their creation records into one folder, [`records_dir`].
//!
//! Finding is by the kernel's own word: a loop device by its backing file in sysfs, a
//! mount by its mount point in /proc/self/mounts (the last one on a point is the visible
//! one). Paths are kept as bytes throughout, so a name that is not UTF-8 still matches.
//! Removal uses system calls (LOOP_CLR_FD, umount2) with bounded retries, never a child
//! process a terminal's Ctrl-C could kill half-way; creation runs losetup and mkfs in their
//! own process groups for the same reason.
//!
//! Non-goals: deciding what is ours. Callers check a device or mount against their record
//! before they touch it; these functions only do what they are asked.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The folder under `$SMARTCON_HOME` where every loop device, zram device and mount
/// smartcon creates is recorded before it exists.
pub const RECORDS_FOLDER: &str = "devices";
/// Folders that held such records in older builds (`emulate mount`'s own, until issue 21):
/// `smartcon cleanup` still reads them, for records a SIGKILL left behind.
pub const RECORDS_FOLDERS_LEGACY: &[&str] = &["mounts"];

/// `HOME/devices`, the one records folder (`HOME` is `$SMARTCON_HOME`).
pub fn records_dir(home: &Path) -> PathBuf {
    home.join(RECORDS_FOLDER)
}

/// The folders to read records from: the current one first, then the legacy ones.
pub fn records_dirs_to_read(home: &Path) -> Vec<PathBuf> {
    std::iter::once(RECORDS_FOLDER).chain(RECORDS_FOLDERS_LEGACY.iter().copied()).map(|f| home.join(f)).collect()
}

/// LOOP_CLR_FD from linux/loop.h, where it is the literal 0x4C01 (not an `_IO` encoding,
/// so it is the same number on every architecture) and takes no argument memory. The libc
/// crate does not name the loop ioctls, and nix would only wrap this same number.
const LOOP_CLR_FD: libc::c_ulong = 0x4C01;

/// Bounded retries of a removal the kernel refuses for a moment (a device still closing).
const DETACH_TRIES_MAX: u32 = 50;
const DETACH_RETRY: Duration = Duration::from_millis(20);

/// One line of /proc/self/mounts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The device or name it was mounted from (`/dev/loop3`, `smartcon-emu`).
    pub source: OsString,
    pub point: PathBuf,
    pub fstype: String,
}

/// Decodes the octal escapes the kernel writes for space, tab, newline and backslash in
/// mount fields (`\040`), byte for byte.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0').wrapping_mul(64).wrapping_add((d[1] - b'0') * 8).wrapping_add(d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// Parses the text of /proc/self/mounts (source, point, type, options, 0, 0).
fn parse_mounts(text: &[u8]) -> Vec<Mount> {
    text.split(|&b| b == b'\n')
        .filter_map(|line| {
            let mut f = line.split(|&b| b == b' ');
            let source = OsString::from_vec(unescape(f.next()?));
            let point = PathBuf::from(OsString::from_vec(unescape(f.next()?)));
            let fstype = String::from_utf8_lossy(f.next()?).into_owned();
            Some(Mount { source, point, fstype })
        })
        .collect()
}

/// Every mount this process sees, in mount order.
pub fn mounts() -> Vec<Mount> {
    parse_mounts(&std::fs::read("/proc/self/mounts").unwrap_or_default())
}

/// The visible mount on `point` (the last one mounted there), if any.
pub fn mounted_on(point: &Path) -> Option<Mount> {
    mounts().into_iter().rev().find(|m| m.point == point)
}

/// The backing file of loop device `device` (`/dev/loopN`) from sysfs, without the
/// " (deleted)" the kernel appends once the file is unlinked; None when detached.
pub fn loop_backing(device: &Path) -> Option<PathBuf> {
    let name = device.file_name()?;
    let mut sys = PathBuf::from("/sys/block");
    sys.push(name);
    sys.push("loop/backing_file");
    let text = std::fs::read(sys).ok()?;
    let text = text.strip_suffix(b"\n").unwrap_or(&text);
    let text = text.strip_suffix(b" (deleted)").unwrap_or(text);
    Some(PathBuf::from(OsStr::from_bytes(text)))
}

/// Loop devices whose backing file is `backing`.
pub fn loops_backed_by(backing: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir("/sys/block") else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(b"loop"))
        .map(|e| Path::new("/dev").join(e.file_name()))
        .filter(|dev| loop_backing(dev).is_some_and(|b| b == backing))
        .collect();
    found.sort();
    found
}

/// Whether loop device `device` does direct I/O on its backing file.
pub fn loop_direct_io(device: &Path) -> bool {
    let Some(name) = device.file_name() else { return false };
    let mut sys = PathBuf::from("/sys/block");
    sys.push(name);
    sys.push("loop/dio");
    std::fs::read(sys).is_ok_and(|s| s.trim_ascii() == b"1")
}

/// Runs a tool in its own process group (a terminal's Ctrl-C must not kill it half-way);
/// its standard output, trimmed, or an error naming the tool and its first error line.
fn run_tool(cmd: &mut Command, package: &str) -> io::Result<Vec<u8>> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .process_group(0)
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {program} (Debian package {package}): {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(io::Error::other(format!("{program} failed: {}", stderr.lines().next().unwrap_or("").trim())));
    }
    Ok(out.stdout.trim_ascii().to_vec())
}

/// Attaches a free loop device over `backing` (`losetup --find --show`, with direct I/O on
/// the backing file when `direct_io`) and returns its path.
pub fn attach_loop(backing: &Path, direct_io: bool) -> io::Result<PathBuf> {
    let mut cmd = Command::new("losetup");
    if direct_io {
        cmd.arg("--direct-io=on");
    }
    let out = run_tool(cmd.args(["--find", "--show"]).arg(backing), "mount")?;
    let device = PathBuf::from(OsString::from_vec(out));
    if !device.as_os_str().as_bytes().starts_with(b"/dev/loop") {
        return Err(io::Error::other(format!("losetup printed {device:?}, not a loop device")));
    }
    Ok(device)
}

/// Detaches loop device `device` with LOOP_CLR_FD (a device still open elsewhere is
/// detached by the kernel when its last user closes it), retrying a bounded number of
/// times while the kernel says busy. A device that is not attached is fine.
pub fn detach_loop(device: &Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(device)?;
    for _ in 0..DETACH_TRIES_MAX {
        // SAFETY: a valid open descriptor of a loop device; LOOP_CLR_FD takes no argument
        // memory.
        if unsafe { libc::ioctl(file.as_raw_fd(), LOOP_CLR_FD as _, 0) } == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENXIO) => return Ok(()),
            Some(libc::EBUSY) | Some(libc::EAGAIN) => std::thread::sleep(DETACH_RETRY),
            _ => return Err(e),
        }
    }
    Err(io::Error::other(format!("{} stayed busy; detach it with losetup -d", device.display())))
}

/// Makes a file system (`mkfs.FSTYPE -q -F ARGS DEVICE`) on a device the caller created.
pub fn mkfs(device: &Path, fstype: &str, args: &[&str]) -> io::Result<()> {
    run_tool(Command::new(format!("mkfs.{fstype}")).args(["-q", "-F"]).args(args).arg(device), "e2fsprogs")
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", device.display())))
}

fn cstring(path: &Path) -> io::Result<std::ffi::CString> {
    std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, format!("{path:?} holds a NUL byte")))
}

/// Mounts `device` (a file system of `fstype`) on the existing directory `point`.
pub fn mount(device: &Path, point: &Path, fstype: &str) -> io::Result<()> {
    let (dev, at) = (cstring(device)?, cstring(point)?);
    let fs = std::ffi::CString::new(fstype).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid NUL-terminated strings that outlive the call; no mount data.
    if unsafe { libc::mount(dev.as_ptr(), at.as_ptr(), fs.as_ptr(), 0, std::ptr::null()) } != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("mount {} on {} ({fstype}): {e}", device.display(), point.display()),
        ));
    }
    Ok(())
}

/// How [`unmount`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmounted {
    /// Unmounted (or nothing was mounted there).
    Done,
    /// Still busy after the tries: detached lazily (MNT_DETACH), gone once its last user
    /// closes it.
    Lazily,
}

/// Unmounts what is mounted on `point`. While the kernel says busy (a shell's working
/// directory, a process finishing) it waits 50, 100, 150 ... ms, up to `tries` attempts in
/// all, then detaches lazily.
pub fn unmount(point: &Path, tries: u32) -> io::Result<Unmounted> {
    let at = cstring(point)?;
    for attempt in 0..tries {
        // SAFETY: a valid NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(at.as_ptr(), 0) } == 0 {
            return Ok(Unmounted::Done);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            // Not a mount point (any more), or gone.
            Some(libc::EINVAL) | Some(libc::ENOENT) => return Ok(Unmounted::Done),
            Some(libc::EBUSY) if attempt + 1 < tries => {
                std::thread::sleep(Duration::from_millis(50 * u64::from(attempt + 1)))
            }
            Some(libc::EBUSY) => break,
            _ => return Err(io::Error::new(e.kind(), format!("umount {}: {e}", point.display()))),
        }
    }
    // SAFETY: as above.
    if unsafe { libc::umount2(at.as_ptr(), libc::MNT_DETACH) } != 0 {
        let e = io::Error::last_os_error();
        if matches!(e.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOENT)) {
            return Ok(Unmounted::Done);
        }
        return Err(io::Error::new(e.kind(), format!("umount -l {}: {e}", point.display())));
    }
    Ok(Unmounted::Lazily)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_fields_decode_byte_for_byte() {
        assert_eq!(unescape(br"/tmp/a\040b"), b"/tmp/a b");
        assert_eq!(unescape(br"/x\134y"), br"/x\y");
        // Not an escape: left as it is.
        assert_eq!(unescape(br"/x\9y\04"), br"/x\9y\04");
        // A byte that is not UTF-8 survives (the old readers made it U+FFFD or Latin-1).
        assert_eq!(unescape(b"/tmp/\xff\\012"), b"/tmp/\xff\n");
    }

    #[test]
    fn mounts_parse_with_the_last_one_on_a_point_visible() {
        let text = b"proc /proc proc rw 0 0\n\
                     /dev/loop3 /tmp/smartcon\\040dir ext4 rw 0 0\n\
                     smartcon-emu /tmp/smartcon\\040dir fuse.smartcon-emu rw 0 0\n";
        let m = parse_mounts(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[1].point, Path::new("/tmp/smartcon dir"));
        assert_eq!(m[1].source, OsStr::new("/dev/loop3"));
        let visible = m.iter().rev().find(|x| x.point == Path::new("/tmp/smartcon dir")).unwrap();
        assert_eq!(
            (visible.source.as_os_str(), visible.fstype.as_str()),
            (OsStr::new("smartcon-emu"), "fuse.smartcon-emu")
        );
    }

    #[test]
    fn this_process_sees_its_root_mounted() {
        assert!(mounted_on(Path::new("/")).is_some(), "{:?}", mounts());
        assert!(mounted_on(Path::new("/no/such/smartcon/point")).is_none());
    }

    #[test]
    fn records_are_read_from_the_folder_and_the_legacy_ones() {
        let home = Path::new("/h");
        assert_eq!(records_dir(home), Path::new("/h/devices"));
        assert_eq!(records_dirs_to_read(home), [Path::new("/h/devices"), Path::new("/h/mounts")]);
    }

    #[test]
    fn unmounting_what_is_not_a_mount_point_is_done() {
        // ENOENT / EINVAL as root; EPERM, named, without root. Neither touches anything.
        let point = std::env::temp_dir().join("smartcon-not-a-mount-point");
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            assert_eq!(unmount(&point, 3).unwrap(), Unmounted::Done);
        } else {
            assert!(unmount(&point, 1).unwrap_err().to_string().contains("umount"));
        }
    }
}
