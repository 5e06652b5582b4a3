//! What `smartcon emulate mount` created, written down before it is created, so that
//! `emulate umount` finds a detached server and `emulate cleanup` undoes a killed one.
//!
//! One small JSON file per mount under `$SMARTCON_HOME/mounts/` (kept apart from the
//! evaluation's block-device records). The record is rewritten (temporary file + rename,
//! so a crash never leaves half a record) after each step: the FUSE mount point, the loop
//! device with its backing file, the ext4 mount, and fuse.enable_uring's previous value while
//! the io_uring transport has it switched on. Cleanup trusts a record only as far as
//! the system agrees with it: a loop device is detached only while its backing file is the
//! recorded one, a mount point is unmounted only while /proc/self/mountinfo shows the
//! recorded source on it.
//!
//! Non-goals: locking between two cleanups running at once (the second finds nothing).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use smartcon_engine::error::{Error, ErrorKind};

/// One mount's record.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MountRecord {
    /// The server's process id.
    pub pid: u32,
    pub spec: String,
    /// Where the user asked for it (the ext4 mount point with `--fs ext4`).
    pub dir: PathBuf,
    /// This mount's working directory: the FUSE mount point and the report live under it.
    pub work: PathBuf,
    pub fuse_mount: Option<PathBuf>,
    /// The one file the FUSE server exposes (the loop device's backing file).
    pub backing: Option<PathBuf>,
    pub loop_device: Option<PathBuf>,
    pub ext4_mounted: bool,
    /// `starting`, `ready`, `stopping`.
    pub state: String,
    /// The FUSE transport: `dev` or `uring` (absent in records of older builds).
    #[serde(default)]
    pub transport: String,
    /// What fuse.enable_uring was before this mount set it, while it is set: cleanup writes
    /// it back after a SIGKILL.
    #[serde(default)]
    pub enable_uring_restore: Option<bool>,
}

/// `$SMARTCON_HOME/mounts`.
pub fn mounts_dir() -> PathBuf {
    smartcon_engine::profile::smartcon_home().join("mounts")
}

/// The record file of the mount whose working directory is `work`.
pub fn record_path(work: &Path) -> PathBuf {
    let name = work.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    mounts_dir().join(format!("{name}.json"))
}

impl MountRecord {
    /// Writes the record atomically.
    pub fn save(&self) -> Result<(), Error> {
        let path = record_path(&self.work);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_string_pretty(self)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("mount record: {e}")))?;
        std::fs::write(&tmp, text).map_err(|e| Error::io(ErrorKind::Setup, &tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| Error::io(ErrorKind::Setup, &path, e))
    }

    pub fn remove(&self) {
        let _ = std::fs::remove_file(record_path(&self.work));
    }
}

/// Every readable record, with its file. Unreadable files are skipped (not ours to judge).
pub fn list() -> Vec<(PathBuf, MountRecord)> {
    let Ok(entries) = std::fs::read_dir(mounts_dir()) else { return Vec::new() };
    let mut out: Vec<(PathBuf, MountRecord)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            serde_json::from_str(&text).ok().map(|r| (p, r))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Whether a process with this id exists (and is not a zombie).
pub fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The mount source and file system type on `dir`, from /proc/self/mountinfo (the last
/// mount on it, the visible one). Octal escapes (`\040` for a space) are decoded.
pub fn mounted_on(dir: &Path) -> Option<(String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let dir = dir.to_string_lossy();
    info.lines().rev().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = unescape(left.split(' ').nth(4)?);
        if point != dir {
            return None;
        }
        let mut r = right.split(' ');
        let fstype = r.next()?.to_string();
        let source = unescape(r.next()?);
        Some((source, fstype))
    })
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c)) {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The backing file of loop device `dev` (`/dev/loopN`), from sysfs; None when detached.
pub fn loop_backing(dev: &Path) -> Option<PathBuf> {
    let name = dev.file_name()?.to_string_lossy().into_owned();
    let text = std::fs::read_to_string(format!("/sys/block/{name}/loop/backing_file")).ok()?;
    Some(PathBuf::from(text.trim_end_matches('\n')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_decode() {
        assert_eq!(unescape(r"/tmp/a\040b"), "/tmp/a b");
        assert_eq!(unescape(r"/x\\y"), r"/x\\y");
        assert_eq!(unescape("/plain"), "/plain");
    }

    #[test]
    fn this_process_is_alive_and_root_is_mounted() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX - 1));
        assert!(mounted_on(Path::new("/")).is_some());
        assert!(mounted_on(Path::new("/no/such/mount/point")).is_none());
    }
}
