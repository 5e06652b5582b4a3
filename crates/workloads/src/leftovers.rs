//! Leftovers found by their names, for `smartcon cleanup` when no record names them: a run
//! killed with SIGKILL whose `$SMARTCON_HOME` (and so its records) was deleted afterwards
//! still leaves its ramdisks, mounts and scratch files, each named with its pid.
//!
//! What is looked for, and what proves it smartcon's (every name with the pid of the run
//! that made it, and that run gone: no live process has the pid, or, where an owner mark
//! gives the start time, the live one started at another time):
//!
//! - a loop ramdisk's file, `/dev/shm/smartcon-loop-PID-N.img`, with the run's owner mark
//!   beside it naming the same pid (a name alone is not enough: issue 22): the loop devices
//!   over it are detached, the file and the mark removed. A mark left without its file goes;
//! - a file system mounted on `smartcon-TAG-PID-N` (TAG `loopfs`, `ext2-loop`, ...,
//!   `ext4-zram`), from a loop device over such a file of the same pid, or for a `-zram`
//!   tag from a zram device: unmounted and its directory removed (a zram device is then
//!   reset and removed once nothing else uses it). A mount from anything else, or a loop
//!   device over a proven file mounted under another name, is reported and left alone;
//! - in the temporary directory (`$TMPDIR`, default /tmp): an empty mount directory
//!   `smartcon-TAG-PID-N`; any `smartcon-...-PID...` scratch path whose owner mark
//!   (`.NAME.smartcon-owner`) names PID (a sweep's tree, `run`'s statistics files, a `tmp:`
//!   target's file); and `ets crosscheck`'s unmarked `smartcon-crosscheck-PID`. A directory
//!   with a mount below it is never removed.
//!
//! Only leftovers at least [`NAME_AGE_MIN`] old are taken by name (the age of the owner
//! mark, written once at creation, where there is one): a run killed a moment ago is its
//! own records' to clean, which say exactly what it made, and a cleanup of another home
//! running at the same time (another user's, another test's) does not take what that
//! home's cleanup is about to report.
//!
//! Non-goals: `emulate mount`'s FUSE stack and `emulate vm`'s guest live under
//! `$SMARTCON_HOME` and are found through their records only ([`crate::blockdev`] and
//! `smartcon_emulate`), as is a zram device that was never mounted (it has no name).

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use smartcon_util::error::{Error, ErrorKind};
use smartcon_util::loopmount;
use smartcon_util::paths::{escape, owner_mark_identity, owner_mark_path, OWNER_MARK_SUFFIX};
use smartcon_util::procfs::run_gone;

use crate::blockdev::{remove_loop_backed_by, unmount_and_remove, zram_reset_and_remove, CleanupReport, LOOP_DIR};

/// How old a leftover must be to be taken by its name (see the header).
pub const NAME_AGE_MIN: Duration = Duration::from_secs(60);

/// Whether `path` (not followed) was last modified at least [`NAME_AGE_MIN`] ago.
fn old_enough(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= NAME_AGE_MIN)
}

/// The TAGs of the directories `blockdev` mounts its file systems on, `smartcon-TAG-PID-N`.
const MOUNT_TAGS: &[&str] = &["loopfs", "ext2-loop", "ext3-loop", "ext4-loop", "ext2-zram", "ext3-zram", "ext4-zram"];

/// Scratch directories `smartcon-WHAT-PID` made without an owner mark (removed whole).
const UNMARKED_DIRS: &[&str] = &["crosscheck"];

fn number(text: &str) -> Option<u32> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
}

/// `PID-N`: the pid (never 0).
fn pid_and_seq(text: &str) -> Option<u32> {
    let (pid, seq) = text.split_once('-')?;
    number(seq)?;
    number(pid).filter(|&p| p > 0)
}

/// The pid in a loop ramdisk's file name, `smartcon-loop-PID-N.img`.
fn loop_image_pid(name: &OsStr) -> Option<u32> {
    pid_and_seq(name.to_str()?.strip_prefix("smartcon-loop-")?.strip_suffix(".img")?)
}

/// The pid in a mount directory's name, `smartcon-TAG-PID-N`, and whether TAG is zram's.
fn mount_dir_pid(name: &OsStr) -> Option<(u32, bool)> {
    let rest = name.to_str()?.strip_prefix("smartcon-")?;
    MOUNT_TAGS.iter().find_map(|tag| {
        let pid = pid_and_seq(rest.strip_prefix(tag)?.strip_prefix('-')?)?;
        Some((pid, tag.ends_with("-zram")))
    })
}

/// The pid in an unmarked scratch directory's name, `smartcon-WHAT-PID`.
fn unmarked_dir_pid(name: &OsStr) -> Option<u32> {
    let rest = name.to_str()?.strip_prefix("smartcon-")?;
    UNMARKED_DIRS.iter().find_map(|what| number(rest.strip_prefix(what)?.strip_prefix('-')?)).filter(|&p| p > 0)
}

/// Whether a scratch name is smartcon's and holds `-PID` as a whole number.
fn scratch_name_holds(name: &str, pid: u32) -> bool {
    let needle = format!("-{pid}");
    name.starts_with("smartcon-")
        && name.match_indices(&needle).any(|(i, _)| !name[i + needle.len()..].starts_with(|c: char| c.is_ascii_digit()))
}

/// Whether any mount point is `path` or lies below it.
fn mount_at_or_below(path: &Path, mounts: &[loopmount::Mount]) -> bool {
    mounts.iter().any(|m| m.point.starts_with(path))
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    paths.sort();
    paths
}

/// Loop ramdisk files whose run is gone, proven by name and mark; marks without their file
/// are removed on the way, and a file with smartcon's name but no mark is reported.
fn gone_images(report: &mut CleanupReport) -> Vec<(PathBuf, u32)> {
    let mut images = Vec::new();
    for path in entries(Path::new(LOOP_DIR)) {
        let Some(name) = path.file_name() else { continue };
        if let Some(pid) = loop_image_pid(name) {
            let mark_path = owner_mark_path(&path);
            let mark = owner_mark_identity(&mark_path).filter(|(p, _)| *p == pid);
            let is_file = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
            match mark {
                Some((_, start)) if is_file && old_enough(&mark_path) && run_gone(pid, start) => {
                    images.push((path, pid))
                }
                None if old_enough(&path) && run_gone(pid, None) => report.kept.push(format!(
                    "{}: no owner mark of smartcon {pid} beside it, so not provably smartcon's; left alone",
                    escape(&path)
                )),
                _ => {}
            }
            continue;
        }
        // `.smartcon-loop-PID-N.img.smartcon-owner` alone: a run killed before it made the file.
        let image = name.to_str().and_then(|n| n.strip_prefix('.')?.strip_suffix(OWNER_MARK_SUFFIX));
        let Some(pid) = image.and_then(|i| loop_image_pid(OsStr::new(i))) else { continue };
        let image = path.with_file_name(image.unwrap_or_default());
        let mark = owner_mark_identity(&path).filter(|(p, _)| *p == pid);
        if std::fs::symlink_metadata(&image).is_err()
            && old_enough(&path)
            && mark.is_some_and(|(_, start)| run_gone(pid, start))
            && std::fs::remove_file(&path).is_ok()
        {
            report.removed.push(format!("owner mark {} (smartcon {pid} is gone)", escape(&path)));
        }
    }
    images
}

/// Unmounts what is mounted on a `smartcon-TAG-PID-N` directory of a gone run from that
/// run's own loop ramdisk (or, for a zram TAG, a zram device); reports the rest it finds.
fn unmount_gone(images: &[(PathBuf, u32)], report: &mut CleanupReport) {
    let mounts = loopmount::mounts();
    // The last mounted first: what is mounted on top comes off first.
    for m in mounts.iter().rev() {
        let Some((pid, zram)) = m.point.file_name().and_then(mount_dir_pid) else { continue };
        // A loop device's file system is as old as its file's mark (below); the others by
        // their root directory.
        let loop_backed = Path::new(&m.source).to_str().is_some_and(|s| s.starts_with("/dev/loop"));
        if !run_gone(pid, None) || (!loop_backed && !old_enough(&m.point)) {
            continue;
        }
        let source = Path::new(&m.source);
        let zram_id = source.to_str().and_then(|s| number(s.strip_prefix("/dev/zram")?));
        let ext = ["ext2", "ext3", "ext4"].contains(&m.fstype.as_str());
        let ours = match zram_id {
            Some(_) => zram && ext,
            None => {
                !zram
                    && loopmount::loop_backing(source)
                        .is_some_and(|b| images.iter().any(|(image, p)| *image == b && *p == pid))
            }
        };
        if !ours {
            report.kept.push(format!(
                "mount {}: from {}, not a device of smartcon {pid}'s own; left alone",
                escape(&m.point),
                escape(source)
            ));
            continue;
        }
        unmount_and_remove(&m.point);
        report.removed.push(format!("mount {} (smartcon {pid} is gone)", escape(&m.point)));
        let Some(id) = zram_id else { continue };
        // The zram device under it, once nothing else uses it (one mount per device).
        let node = format!("/dev/zram{id}");
        let in_use = loopmount::mounts().iter().any(|o| o.source == OsStr::new(&node))
            || std::fs::read_to_string("/proc/swaps").unwrap_or_default().lines().any(|l| l.starts_with(&node))
            || std::fs::read_dir(format!("/sys/block/zram{id}/holders")).is_ok_and(|mut d| d.next().is_some());
        if in_use {
            report.kept.push(format!("{node}: still in use after its mount went; left alone"));
        } else {
            match zram_reset_and_remove(id) {
                Ok(()) => report.removed.push(format!("zram device {node} (was mounted on {})", escape(&m.point))),
                Err(e) => report.kept.push(format!("{node}: {e}")),
            }
        }
    }
}

/// Detaches the loop devices over each gone run's file and removes the file and its mark,
/// unless one of them is still mounted (somewhere smartcon does not name).
fn remove_gone_images(images: &[(PathBuf, u32)], report: &mut CleanupReport) {
    let mounts = loopmount::mounts();
    for (image, pid) in images {
        let devices = loopmount::loops_backed_by(image);
        if let Some(m) = mounts.iter().find(|m| devices.iter().any(|d| d.as_os_str() == m.source)) {
            report.kept.push(format!(
                "{}: its loop device is mounted on {}; left alone",
                escape(image),
                escape(&m.point)
            ));
            continue;
        }
        match remove_loop_backed_by(image) {
            Ok(()) => {
                for d in devices {
                    report.removed.push(format!("loop device {} (over {})", escape(&d), escape(image)));
                }
                report.removed.push(format!("file {} (smartcon {pid} is gone)", escape(image)));
            }
            Err(e) => report.kept.push(format!("{}: {e}", escape(image))),
        }
    }
}

/// Removes a scratch path (a directory whole, without following links), never one with a
/// mount at or below it. The error's text is what the cleanup report keeps beside the path.
fn remove_scratch(path: &Path, mounts: &[loopmount::Mount]) -> Result<(), Error> {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if meta.is_dir() {
        if mount_at_or_below(path, mounts) {
            return Err(Error::new(ErrorKind::Refused, "a file system is mounted in it"));
        }
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
    .map_err(|e| Error::from_source(ErrorKind::Io, e))
}

/// The temporary directory's mount directories and scratch paths of gone runs.
fn clean_tmp_dir(dir: &Path, report: &mut CleanupReport) {
    let mounts = loopmount::mounts();
    for path in entries(dir) {
        let Some(name) = path.file_name() else { continue };
        let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if let Some((pid, _)) = mount_dir_pid(name) {
            // Empty and not mounted: a run killed before it mounted, or after it unmounted.
            if is_dir && old_enough(&path) && run_gone(pid, None) && !mount_at_or_below(&path, &mounts) {
                match std::fs::remove_dir(&path) {
                    Ok(()) => report.removed.push(format!("directory {} (smartcon {pid} is gone)", escape(&path))),
                    Err(e) => report.kept.push(format!("{}: {e}; left alone", escape(&path))),
                }
            }
            continue;
        }
        if let Some(pid) = unmarked_dir_pid(name) {
            if is_dir && old_enough(&path) && run_gone(pid, None) {
                match remove_scratch(&path, &mounts) {
                    Ok(()) => report.removed.push(format!("{} (smartcon {pid} is gone)", escape(&path))),
                    Err(e) => report.kept.push(format!("{}: {e}; left alone", escape(&path))),
                }
            }
            continue;
        }
        // An owner mark: `.NAME.smartcon-owner` beside the scratch path NAME it proves.
        let Some(target) = name.to_str().and_then(|n| n.strip_prefix('.')?.strip_suffix(OWNER_MARK_SUFFIX)) else {
            continue;
        };
        let Some((pid, start)) = owner_mark_identity(&path) else { continue };
        // A loop ramdisk's file goes only with its loop devices (above).
        if !scratch_name_holds(target, pid)
            || loop_image_pid(OsStr::new(target)).is_some()
            || !old_enough(&path)
            || !run_gone(pid, start)
        {
            continue;
        }
        let scratch = path.with_file_name(target);
        let existed = std::fs::symlink_metadata(&scratch).is_ok();
        match remove_scratch(&scratch, &mounts) {
            Ok(()) => {
                let _ = std::fs::remove_file(&path);
                if existed {
                    report.removed.push(format!("{} (smartcon {pid} is gone)", escape(&scratch)));
                }
            }
            Err(e) => report.kept.push(format!("{}: {e}; left alone", escape(&scratch))),
        }
    }
}

/// Removes what gone runs left under smartcon's own names, in /dev/shm, on mount points and
/// in `tmp_dir` (see the module's header): mounts first, then loop devices and their files,
/// then the temporary directory. Each line of the report names one thing.
pub fn cleanup_by_name(tmp_dir: &Path) -> CleanupReport {
    let mut report = CleanupReport::default();
    let images = gone_images(&mut report);
    unmount_gone(&images, &mut report);
    remove_gone_images(&images, &mut report);
    clean_tmp_dir(tmp_dir, &mut report);
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_their_pid_and_look_alikes_do_not() {
        let n = OsStr::new;
        assert_eq!(loop_image_pid(n("smartcon-loop-2345-162770398.img")), Some(2345));
        for other in
            ["smartcon-loop-2345.img", "smartcon-loop-0-1.img", "smartcon-loop-x-1.img", "smartcon-loop-1-2.imgx"]
        {
            assert_eq!(loop_image_pid(n(other)), None, "{other}");
        }
        assert_eq!(mount_dir_pid(n("smartcon-loopfs-2541-178641968")), Some((2541, false)));
        assert_eq!(mount_dir_pid(n("smartcon-ext2-zram-7-1")), Some((7, true)));
        assert_eq!(mount_dir_pid(n("smartcon-ext2-loop-7-1")), Some((7, false)));
        assert_eq!(mount_dir_pid(n("smartcon-xfs-loop-7-1")), None);
        assert_eq!(mount_dir_pid(n("smartcon-loopfs-7")), None);
        assert_eq!(mount_dir_pid(n("smartcon-loopfs-7-1-copy")), None);
        assert_eq!(unmarked_dir_pid(n("smartcon-crosscheck-99")), Some(99));
        assert_eq!(unmarked_dir_pid(n("smartcon-crosscheck-99-old")), None);
        assert!(scratch_name_holds("smartcon-run-1234.jsonl", 1234));
        assert!(scratch_name_holds("smartcon-1234-55.tmp", 1234));
        assert!(!scratch_name_holds("smartcon-run-12345.jsonl", 1234));
        assert!(!scratch_name_holds("notes-1234", 1234));
    }
}
