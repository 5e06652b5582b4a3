//! What `smartcon emulate mount` created, written down before it is created, so that
//! `emulate umount` finds a detached server and `emulate cleanup` undoes a killed one.
//!
//! One small JSON file per mount in the records folder every created device shares,
//! `$SMARTCON_HOME/devices/` ([`smartcon_util::loopmount::records_dir`]; the evaluation's
//! block-device records are the `.rec` files beside them). Records that builds before
//! issue 21 wrote into `$SMARTCON_HOME/mounts/` are still listed, so `cleanup` finds what
//! a killed older server left. The record is rewritten (temporary file + rename,
//! so a crash never leaves half a record) after each step: the FUSE mount point, the loop
//! device with its backing file, the ext4 mount, and fuse.enable_uring's previous value while
//! the io_uring transport has it switched on. Cleanup trusts a record only as far as
//! the system agrees with it: a loop device is detached only while its backing file is the
//! recorded one, a mount point is unmounted only while /proc/self/mounts shows the
//! recorded source on it.
//!
//! Non-goals: locking between two cleanups running at once (the second finds nothing).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use smartcon_engine::error::{Error, ErrorKind};
use smartcon_util::loopmount;

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

/// `$SMARTCON_HOME/devices`, where new records, working directories and server logs go.
pub fn mounts_dir() -> PathBuf {
    loopmount::records_dir(&smartcon_engine::profile::smartcon_home())
}

/// Where records are read from: [`mounts_dir`], then the folders of older builds.
pub fn dirs_to_read() -> Vec<PathBuf> {
    loopmount::records_dirs_to_read(&smartcon_engine::profile::smartcon_home())
}

/// The record file of the mount whose working directory is `work`.
pub fn record_path(work: &Path) -> PathBuf {
    mounts_dir().join(record_name(work))
}

fn record_name(work: &Path) -> std::ffi::OsString {
    let mut name = work.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".json");
    name
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

    /// Removes the record, wherever it was written (this build's folder or an older one's).
    pub fn remove(&self) {
        for dir in dirs_to_read() {
            let _ = std::fs::remove_file(dir.join(record_name(&self.work)));
        }
    }
}

/// Every readable record, with its file, from the records folder and the older builds'
/// one. Unreadable files are skipped (not ours to judge); so are the other records that
/// share the folder (the block devices' `.rec` files).
pub fn list() -> Vec<(PathBuf, MountRecord)> {
    let mut out: Vec<(PathBuf, MountRecord)> = dirs_to_read()
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter_map(|p| {
            let text = std::fs::read_to_string(&p).ok()?;
            serde_json::from_str(&text).ok().map(|r| (p, r))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// The `.json` files in the records folders that are not readable mount records (cleanup
/// reports them and leaves them alone).
pub fn unreadable() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = dirs_to_read()
        .iter()
        .filter_map(|dir| std::fs::read_dir(dir).ok())
        .flat_map(|entries| entries.flatten().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .filter(|p| {
            let text = std::fs::read_to_string(p);
            text.map_or(true, |t| serde_json::from_str::<MountRecord>(&t).is_err())
        })
        .collect();
    out.sort();
    out
}

/// Whether a process with this id exists (and is not a zombie).
pub use smartcon_util::procfs::alive;

/// What is visibly mounted on `dir` (`smartcon_util::loopmount`).
pub use smartcon_util::loopmount::mounted_on;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_root_is_mounted() {
        assert!(alive(std::process::id()));
        assert!(!alive(u32::MAX - 1));
        assert!(mounted_on(Path::new("/")).is_some());
        assert!(mounted_on(Path::new("/no/such/mount/point")).is_none());
    }
}
