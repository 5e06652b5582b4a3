//! Block devices smartcon creates for a run and removes after it (SmartCon Sec. 7's
//! ramdisks on a machine without NVM):
//!
//! - [`LoopDevice`]: a loop device over a file on tmpfs (/dev/shm). The loop driver
//!   completes every request from a kernel worker thread, so each I/O involves a context
//!   switch: the paper's context-switching ramdisk;
//! - [`ZramDevice`]: a zram device, completed inline in the submitting thread: the very
//!   fast device;
//! - [`LoopFs`]: a loop device as above with an ext4 file system made and mounted on it,
//!   for workloads that need files and directories (postmark, and IOZone on a file as the
//!   paper ran it on its ramdisk).
//!
//! Each value owns exactly the device it created (`losetup --find --show` names it,
//! zram's `hot_add` returns its id) and removes it in `Drop`, which runs on errors, on
//! panics (unwinding) and after Ctrl-C (the CLI's handler only sets a flag, the run
//! unwinds normally). Devices smartcon did not create are never touched. Needs root; the
//! constructors say so otherwise.
//!
//! Non-goals: surviving SIGKILL (nothing can clean up then; `losetup -a` shows leftovers
//! by their backing file name `smartcon-loop-PID-*`).

use std::path::{Path, PathBuf};
use std::process::Command;

use smartcon_engine::error::{Error, ErrorKind};

/// The largest device created (RAM-backed: it must fit in memory comfortably).
pub const DEVICE_BYTES_MAX: u64 = 8 << 30;

/// Why this process cannot create block devices, if it cannot.
pub fn unavailable_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("creating loop and zram devices needs root".into());
    }
    None
}

fn check_size(size_bytes: u64) -> Result<(), Error> {
    if !(1 << 20..=DEVICE_BYTES_MAX).contains(&size_bytes) || !size_bytes.is_multiple_of(4096) {
        return Err(Error::new(ErrorKind::Usage, "device size must be a multiple of 4 KiB between 1 MiB and 8 GiB"));
    }
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
}

impl LoopDevice {
    pub fn create(size_bytes: u64) -> Result<LoopDevice, Error> {
        check_size(size_bytes)?;
        let dir = Path::new("/dev/shm");
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
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&backing)
            .map_err(|e| Error::io(ErrorKind::Setup, &backing, e))?;
        let cleanup = |e: Error| {
            let _ = std::fs::remove_file(&backing);
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
        let out = Command::new("losetup")
            .args(["--find", "--show"])
            .arg(&backing)
            .output()
            .map_err(|e| cleanup(Error::new(ErrorKind::Setup, format!("cannot run losetup (util-linux): {e}"))))?;
        if !out.status.success() {
            return Err(cleanup(Error::new(
                ErrorKind::Setup,
                format!("losetup --find --show failed: {}", String::from_utf8_lossy(&out.stderr).trim()),
            )));
        }
        let name = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let device = PathBuf::from(&name);
        if !name.starts_with("/dev/loop") {
            return Err(cleanup(Error::new(
                ErrorKind::Setup,
                format!("losetup printed {device:?}, not a loop device"),
            )));
        }
        Ok(LoopDevice { device, backing })
    }

    pub fn path(&self) -> &Path {
        &self.device
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        // Detach by our own device name only, then remove our backing file.
        let _ = Command::new("losetup").arg("-d").arg(&self.device).status();
        let _ = std::fs::remove_file(&self.backing);
    }
}

/// A loop ramdisk with a fresh ext4 file system mounted in a temporary directory;
/// unmounted, the directory removed and the loop device detached on drop.
#[derive(Debug)]
pub struct LoopFs {
    mount: PathBuf,
    /// Dropped after `Drop::drop` unmounted the file system.
    device: LoopDevice,
}

impl LoopFs {
    pub fn create(size_bytes: u64) -> Result<LoopFs, Error> {
        if size_bytes < 16 << 20 {
            return Err(Error::new(ErrorKind::Usage, "a loop file system needs at least 16 MiB"));
        }
        let device = LoopDevice::create(size_bytes)?;
        let setup = |m: String| Error::new(ErrorKind::Setup, m);
        let out = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-E", "nodiscard"])
            .arg(device.path())
            .output()
            .map_err(|e| setup(format!("cannot run mkfs.ext4 (Debian package e2fsprogs): {e}")))?;
        if !out.status.success() {
            return Err(setup(format!(
                "mkfs.ext4 {} failed: {}",
                device.path().display(),
                String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or("").trim()
            )));
        }
        let mount = std::env::temp_dir().join(format!(
            "smartcon-loopfs-{}-{}",
            std::process::id(),
            smartcon_engine::clock::now_ns() % 1_000_000_007
        ));
        std::fs::create_dir(&mount).map_err(|e| Error::io(ErrorKind::Setup, &mount, e))?;
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).expect("no NUL in paths we made");
        let (dev_c, mount_c) = (c(device.path()), c(&mount));
        // SAFETY: valid NUL-terminated strings; no mount data.
        let rc = unsafe { libc::mount(dev_c.as_ptr(), mount_c.as_ptr(), c"ext4".as_ptr(), 0, std::ptr::null()) };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&mount);
            return Err(setup(format!("mount {} on {}: {e}", device.path().display(), mount.display())));
        }
        Ok(LoopFs { mount, device })
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
        if let Ok(m) = std::ffi::CString::new(self.mount.as_os_str().as_encoded_bytes()) {
            // SAFETY: a valid NUL-terminated path of a mount we made. A busy file system
            // (a file still open) is detached lazily so the loop device can go.
            unsafe {
                if libc::umount2(m.as_ptr(), 0) != 0 {
                    libc::umount2(m.as_ptr(), libc::MNT_DETACH);
                }
            }
        }
        let _ = std::fs::remove_dir(&self.mount);
    }
}

/// A zram device from `hot_add`, reset and removed on drop.
#[derive(Debug)]
pub struct ZramDevice {
    id: u32,
    device: PathBuf,
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
        let id: u32 = std::fs::read_to_string(control)
            .map_err(|e| {
                Error::new(
                    ErrorKind::Setup,
                    format!("zram is unavailable ({}: {e}); load it with modprobe zram", control.display()),
                )
            })?
            .trim()
            .parse()
            .map_err(|_| Error::new(ErrorKind::Setup, "zram hot_add returned no device id"))?;
        let dev = ZramDevice { id, device: PathBuf::from(format!("/dev/zram{id}")) };
        // From here on `dev` owns the device: an error drops it, which removes it.
        write_sys(&format!("/sys/block/zram{id}/disksize"), &size_bytes.to_string())?;
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
        let _ = write_sys(&format!("/sys/block/zram{}/reset", self.id), "1");
        let _ = write_sys("/sys/class/zram-control/hot_remove", &self.id.to_string());
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
            let opts = smartcon_engine::target::OpenOptions { write: true, destructive: false, created_by_tool: true };
            let t =
                smartcon_engine::target::open(&smartcon_engine::target::TargetSpec::Path(l.path().to_path_buf()), opts)
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
        // Bad sizes are refused before anything is created.
        assert!(LoopDevice::create(1000).is_err());
        assert!(ZramDevice::create(DEVICE_BYTES_MAX * 2).is_err());
    }
}
